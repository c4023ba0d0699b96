//! Prompt turns against the scripted agent, on every backend.
mod common;

use acpx_runtime::{text_prompt, RuntimeOptions};
use common::*;
use serde_json::json;

backend_tests! {
    a_prompt_is_recorded_end_to_end => basic_prompt;
}

async fn basic_prompt(env: Env) {
    let (obs, seen) = collector();
    let rt = env.runtime(RuntimeOptions {
        observer: Some(obs),
        ..RuntimeOptions::default()
    });
    let mut s = rt.open_new(env.spec(agent(""))).await.unwrap();
    let id = s.id().clone();
    let out = s.prompt(text_prompt("hello there")).await.unwrap();
    assert_eq!(out.outcome, "completed");
    assert_eq!(out.stop_reason.as_deref(), Some("end_turn"));
    assert_eq!(out.agent_text, "Hello! You said: hello there");
    let live = s.record().await;
    let fin = s.shutdown().await.unwrap();
    let stored = env.stored(&id).await;
    assert_eq!(
        serde_json::to_value(&stored).unwrap(),
        serde_json::to_value(&fin).unwrap()
    );
    let t = thread_json(&stored);
    assert_eq!(
        t["messages"][0]["User"]["content"],
        json!([{"Text": "hello there"}])
    );
    assert_eq!(t["messages"][0]["User"]["id"], json!(out.user_message_id));
    assert_eq!(
        t["messages"][1]["Agent"]["content"],
        json!([{"Text": "Hello! You said: hello there"}])
    );
    assert_eq!(t["messages"].as_array().unwrap().len(), 2);
    let ev = env.events(&id).await;
    assert_gap_free(&ev);
    assert_eq!(
        types(&ev),
        [
            "lifecycle_event",
            "lifecycle_event",
            "lifecycle_event",
            "prompt_started",
            "session_update",
            "prompt_done",
            "lifecycle_event"
        ]
    );
    assert_eq!(ev[3].payload["message_preview"], "hello there");
    assert_eq!(ev[3].payload["resumed"], false);
    assert_eq!(ev[4].request_id.as_deref(), Some(out.request_id.as_str()));
    assert_eq!(ev[4].source.as_str(), "acp");
    assert_eq!(ev[5].payload["stopReason"], "end_turn");
    assert_eq!(ev[6].payload["phase"], "agent_exit");
    assert_eq!(ev[6].payload["reason"], "acpx_shutdown");
    assert_eq!(stored.acpx.audit_seq, ev.len() as u64);
    assert_eq!(stored.acpx.event_log.last_seq, ev.len() as u64);
    assert_eq!(stored.acpx.audit_events.len(), ev.len());
    assert!(stored.pid.is_none());
    assert!(live.pid.is_some());
    assert_eq!(stored.protocol_version, Some(1));
    assert_eq!(stored.acpx.current_mode_id.as_deref(), Some("default"));
    assert_eq!(stored.acpx.config_options[0]["currentValue"], "small");
    let turn = stored.acpx.last_turn.unwrap();
    assert_eq!(
        (turn.outcome.as_str(), turn.request_id.as_str()),
        ("completed", out.request_id.as_str())
    );
    // The observer saw exactly what was logged, in order.
    assert_eq!(types(&seen.lock().unwrap()), types(&ev));
}
