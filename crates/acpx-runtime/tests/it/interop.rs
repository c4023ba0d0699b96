//! Interoperability with an ACP agent this project did not write: the echo agent from the
//! PyPI `agent-client-protocol` 0.12.1 source distribution (installed by
//! `scripts/install-interop-peer.sh`). One prompt is recorded end to end on each backend.
//!
//! The peer is found through `ACPX_INTEROP_ECHO_AGENT` (a full command line) or at the
//! script's default paths. When it is missing the test fails under `CI=true` and is skipped
//! (with a message) otherwise.
use crate::common;

use std::path::PathBuf;

use acpx_runtime::{Attachment, RuntimeOptions};
use common::*;
use serde_json::json;

fn peer_command() -> Option<String> {
    if let Ok(cmd) = std::env::var("ACPX_INTEROP_ECHO_AGENT") {
        if !cmd.trim().is_empty() {
            return Some(cmd);
        }
    }
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let python = repo.join(".venv-acp/bin/python");
    let script = repo.join("peers/agent_client_protocol-0.12.1/examples/echo_agent.py");
    (python.exists() && script.exists())
        .then(|| format!("'{}' '{}'", python.display(), script.display()))
}

fn require_peer() -> Option<String> {
    match peer_command() {
        Some(c) => Some(c),
        None if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("the interop peer is missing; run scripts/install-interop-peer.sh (or set ACPX_INTEROP_ECHO_AGENT)")
        }
        None => {
            eprintln!(
                "SKIPPED: interop peer not installed; run scripts/install-interop-peer.sh or set ACPX_INTEROP_ECHO_AGENT to run this test"
            );
            None
        }
    }
}

backend_tests! {
    the_python_echo_agent_is_recorded_end_to_end => python_echo;
}

async fn python_echo(env: Env) {
    let Some(cmd) = require_peer() else { return };
    let rt = env.runtime(RuntimeOptions::default());
    let mut s = rt.open_new(env.spec(cmd)).await.unwrap();
    assert_eq!(s.attachment(), &Attachment::Created);
    let id = s.id().clone();
    let acp = s.acp_session_id().await;
    let prompt = vec![
        json!({"type": "text", "text": "hello interop"}),
        json!({"type": "text", "text": " and more"}),
    ];
    let out = s.prompt(prompt).await.unwrap();
    assert_eq!(out.outcome, "completed", "{out:?}");
    assert_eq!(out.stop_reason.as_deref(), Some("end_turn"));
    assert_eq!(out.agent_text, "hello interop and more");
    let r = s.shutdown().await.unwrap();
    assert_eq!(r.acp_session_id, acp);
    assert_eq!(
        r.agent_session_id, None,
        "the echo agent sends no _meta.agentSessionId"
    );
    assert_eq!(r.protocol_version, Some(1));
    let t = thread_json(&r);
    assert_eq!(
        t["messages"][0]["User"]["content"],
        json!([{"Text": "hello interop"}, {"Text": " and more"}])
    );
    assert_eq!(
        t["messages"][1]["Agent"]["content"],
        json!([{"Text": "hello interop and more"}])
    );
    let ev = env.events(&id).await;
    assert_gap_free(&ev);
    let chunks = updates(&ev, "agent_message_chunk");
    assert_eq!(chunks.len(), 2);
    // Its _meta, on the chunk and on the content, is kept exactly as the peer sent it.
    assert_eq!(chunks[0].payload["update"]["_meta"], json!({"echo": true}));
    assert_eq!(
        chunks[0].payload["update"]["content"]["_meta"],
        json!({"echo": true})
    );
    assert_eq!(chunks[0].payload["_meta"], json!({"source": "echo_agent"}));
    assert_eq!(chunks[0].payload["sessionId"], json!(acp));
    let stored = env.stored(&id).await;
    assert_eq!(
        serde_json::to_value(&stored).unwrap(),
        serde_json::to_value(&r).unwrap()
    );
}
