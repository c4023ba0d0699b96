//! `sessions list --from-agent` and `sessions adopt` with a real third-party agent:
//! pydantic-acp 1.10.0 (`scripts/peers/pydantic_peer.py`), which advertises `session/list`
//! and keeps its sessions in its own files, so a session another client made (here, acpx on
//! another home, whose record stays there) is listed, loaded with its history replayed,
//! recorded, and continued with its context. Fails under `CI=true` when the peer is missing.
use crate::common;
use crate::interop_pydantic::{peer_env, require_peer};

use common::*;

fn adopts_a_session_another_client_made(backend: &'static str) {
    let Some(agent) = require_peer() else { return };
    // The other client: acpx on a home of its own, sharing only the agent's session files.
    let editor = peer_env(backend);
    let mut env = Env::new(backend);
    env.extra_env = editor.extra_env.clone();
    let made = editor
        .run(&[
            "--agent",
            &agent,
            "--no-owner",
            "--format",
            "json",
            "sessions",
            "new",
        ])
        .ok()
        .json();
    let acp_id = made["acpxSessionId"].as_str().unwrap().to_owned();
    // The editor's project directory is this one's too (the session is listed by directory).
    let cwd = editor.cwd_str();
    let run = |args: &[&str]| {
        let all = [
            &["--cwd", cwd.as_str(), "--agent", agent.as_str()][..],
            args,
        ]
        .concat();
        env.run(&all)
    };
    editor
        .run(&[
            "--agent",
            &agent,
            "--no-owner",
            "prompt",
            "remember the word apricot",
        ])
        .ok();

    let listed = run(&["--format", "json", "sessions", "list", "--from-agent"])
        .ok()
        .json();
    let found = listed["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["sessionId"] == acp_id.as_str())
        .unwrap_or_else(|| panic!("{acp_id} not listed: {listed}"));
    assert_eq!(found["cwd"], cwd.as_str(), "{found}");
    assert!(
        found.get("acpxRecordId").is_none(),
        "no record on this home: {found}"
    );

    let adopted = run(&[
        "--format",
        "json",
        "--no-owner",
        "sessions",
        "adopt",
        &acp_id,
    ])
    .ok()
    .json();
    assert_eq!(adopted["method"], "session/load", "{adopted}");
    assert_eq!(adopted["messageCount"], 2, "{adopted}");
    let history = run(&["sessions", "history"]).ok();
    assert!(
        history.stdout.contains("remember the word apricot") && history.stdout.contains("turns=1"),
        "{history:?}"
    );
    // Continued as an ordinary session: the agent has the earlier turn.
    let r = run(&["--format", "quiet", "--no-owner", "prompt", "and now?"]).ok();
    assert!(
        r.stdout
            .contains("turns=2; heard=remember the word apricot | and now?"),
        "{r:?}"
    );
}

#[test]
fn adopts_a_session_another_client_made_fs() {
    adopts_a_session_another_client_made("fs");
}

#[test]
fn adopts_a_session_another_client_made_sqlite() {
    adopts_a_session_another_client_made("sqlite");
}
