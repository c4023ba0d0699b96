//! Prompt turns against the scripted agent, on every backend.
use crate::common;

use std::sync::Arc;

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
    assert!(
        stored.agent_started_at.is_some()
            && stored.agent_started_at <= Some(stored.acpx.audit_events[0].timestamp)
    );
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

backend_tests! {
    scripted_updates_fill_the_thread_and_acpx => scripted_updates;
    unknown_update_kinds_are_logged_raw_and_not_mapped => unknown_update;
    cancel_ends_the_turn_cleanly_and_the_next_turn_works => cancel;
    cancel_with_nothing_running_is_a_no_op => cancel_idle;
    cancel_right_after_prompt_started_is_not_lost => cancel_at_prompt_started;
    a_json_rpc_error_fails_the_turn_and_the_session_goes_on => rpc_error;
    an_agent_that_dies_mid_turn_ends_the_turn_with_a_clear_error => agent_dies;
    late_updates_are_logged_but_do_not_reopen_the_turn => late_updates;
    controls_record_events_and_last_control_update => controls;
    a_long_stream_is_recorded_in_order => long_stream;
    prompt_timeout_is_recorded_as_timeout => prompt_timeout;
}

async fn scripted_updates(env: Env) {
    let rt = env.runtime(RuntimeOptions::default());
    let mut s = rt.open_new(env.spec(agent(""))).await.unwrap();
    let id = s.id().clone();
    for p in [
        "think",
        "tools",
        "plan",
        "mode",
        "config",
        "commands",
        "usage",
        "title Fix the build",
    ] {
        let out = s.prompt(text_prompt(p)).await.unwrap();
        assert_eq!(out.outcome, "completed", "{p}: {out:?}");
        if p == "usage" {
            assert_eq!(out.usage.unwrap().input_tokens, 100);
        }
    }
    let r = s.shutdown().await.unwrap();
    let t = thread_json(&r);
    let msgs = t["messages"].as_array().unwrap();
    // think
    assert_eq!(
        msgs[1]["Agent"]["content"],
        json!([{"Thinking": {"text": "Thinking it over.", "signature": null}}, {"Text": "Done thinking."}])
    );
    // tools: two tool uses with results in the first agent message, then text after a finished tool in a new one.
    let tools = &msgs[3]["Agent"];
    assert_eq!(tools["content"][0]["ToolUse"]["id"], "call_read");
    assert_eq!(tools["content"][0]["ToolUse"]["name"], "Read README.md");
    assert_eq!(tools["content"][0]["ToolUse"]["is_input_complete"], true);
    assert_eq!(
        tools["tool_results"]["call_read"]["content"],
        json!([{"Text": "# README"}])
    );
    assert_eq!(
        tools["tool_results"]["call_read"]["output"],
        json!({"bytes": 8})
    );
    assert_eq!(tools["tool_results"]["call_read"]["is_error"], false);
    assert_eq!(tools["tool_results"]["call_grep"]["is_error"], true);
    assert_eq!(
        msgs[4]["Agent"]["content"],
        json!([{"Text": "Read the README; the search failed."}])
    );
    assert_eq!(r.acpx.plan.as_ref().unwrap().entries.len(), 3);
    assert_eq!(r.acpx.current_mode_id.as_deref(), Some("plan"));
    assert_eq!(r.acpx.config_options[0]["currentValue"], "large");
    assert_eq!(r.acpx.available_commands, vec!["create_plan", "run"]);
    assert_eq!(r.thread.title, "Fix the build");
    assert_eq!(r.thread.updated_at.to_string().len(), 24);
    // usage: the prompt response's tokens under the turn's user message, summed into cumulative.
    let usage_user = msgs
        .iter()
        .filter_map(|m| m.get("User"))
        .find(|u| u["content"][0]["Text"] == "usage")
        .unwrap();
    let key = usage_user["id"].as_str().unwrap();
    assert_eq!(
        t["request_token_usage"][key],
        json!({"input_tokens": 100, "output_tokens": 50, "cache_creation_input_tokens": 5, "cache_read_input_tokens": 20,
               "thought_tokens": 7, "total_tokens": 150}),
        "every token field the agent reports is kept"
    );
    assert_eq!(t["cumulative_token_usage"]["input_tokens"], 100);
    assert_eq!(r.acpx.extra["context_usage"]["size"], 200000);
    // Every tool use has a result; the log is gap-free.
    assert_gap_free(&env.events(&id).await);
}

async fn unknown_update(env: Env) {
    let rt = env.runtime(RuntimeOptions::default());
    let mut s = rt.open_new(env.spec(agent(""))).await.unwrap();
    let id = s.id().clone();
    let acp = s.acp_session_id().await;
    let out = s.prompt(text_prompt("unknown-update")).await.unwrap();
    assert_eq!(out.outcome, "completed");
    let r = s.shutdown().await.unwrap();
    let ev = env.events(&id).await;
    let odd = updates(&ev, "hologram_update");
    assert_eq!(odd.len(), 1);
    // Exactly as received, key order, unknown fields and the null _meta included.
    assert_eq!(
        serde_json::to_string(&odd[0].payload).unwrap(),
        format!(
            r#"{{"sessionId":"{acp}","update":{{"sessionUpdate":"hologram_update","beam":{{"color":"green"}},"intensity":3}},"_meta":null,"futureTopLevel":[1,2]}}"#
        )
    );
    let summary = r
        .acpx
        .audit_events
        .iter()
        .find(|a| a.seq == odd[0].seq)
        .unwrap();
    assert!(
        summary.summary.contains("not mapped"),
        "{}",
        summary.summary
    );
    let t = thread_json(&r);
    assert_eq!(
        t["messages"][1]["Agent"]["content"],
        json!([{"Text": "Sent a hologram."}])
    );
}

async fn cancel(env: Env) {
    let (obs, mut rx) = channel();
    let rt = env.runtime(RuntimeOptions::default());
    let mut s = rt.open_new(env.spec(agent(""))).await.unwrap();
    let id = s.id().clone();
    let handle = s.cancel_handle();
    let canceller = tokio::spawn(async move {
        while let Some(e) = rx.recv().await {
            if e.event_type == "session_update"
                && e.payload["update"]["sessionUpdate"] == "agent_message_chunk"
            {
                assert!(handle.cancel(), "a turn is running");
                return;
            }
        }
    });
    let out = s
        .prompt_with(text_prompt("slow 400"), Some(obs))
        .await
        .unwrap();
    canceller.await.unwrap();
    assert_eq!(out.outcome, "cancelled");
    assert_eq!(out.stop_reason.as_deref(), Some("cancelled"));
    let r = s.record().await;
    let t = thread_json(&r);
    let agent_msg = &t["messages"][1]["Agent"];
    assert_eq!(agent_msg["tool_results"]["call_slow"]["is_error"], true);
    assert!(!agent_msg["content"].as_array().unwrap().is_empty());
    let ctl = r.acpx.last_control_update.as_ref().unwrap();
    assert_eq!((ctl.action.as_str(), ctl.ok), ("cancel", true));
    assert!(!s.cancel_handle().is_running());
    // The next turn works, and the thread stays well-formed.
    let next = s.prompt(text_prompt("echo again")).await.unwrap();
    assert_eq!(
        (next.outcome.as_str(), next.agent_text.as_str()),
        ("completed", "again")
    );
    s.shutdown().await.unwrap();
    let ev = env.events(&id).await;
    assert_gap_free(&ev);
    let ty = types(&ev);
    let started = ty.iter().position(|t| t == "control_started").unwrap();
    assert_eq!(ty[started + 1], "control_done");
    assert!(ty[started..].contains(&"prompt_done".to_owned()));
}

/// A cancel issued the moment `prompt_started` is recorded (what a user reacting to the
/// printed event does), before the prompt request reaches the agent, must still cancel the turn.
async fn cancel_at_prompt_started(env: Env) {
    let rt = env.runtime(RuntimeOptions::default());
    let mut s = rt.open_new(env.spec(agent(""))).await.unwrap();
    let handle = s.cancel_handle();
    let accepted = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = accepted.clone();
    // The observer runs synchronously as the event is recorded: no scheduling can hide the
    // window between `prompt_started` and the prompt request.
    let obs: acpx_runtime::recorder::Observer = Arc::new(move |e: &acpx_model::EventEnvelope| {
        if e.event_type == "prompt_started" {
            seen.store(handle.cancel(), std::sync::atomic::Ordering::SeqCst);
        }
    });
    let out = s
        .prompt_with(text_prompt("slow 400"), Some(obs))
        .await
        .unwrap();
    assert!(
        accepted.load(std::sync::atomic::Ordering::SeqCst),
        "the turn must count as running once prompt_started is recorded"
    );
    assert_eq!(out.outcome, "cancelled");
    assert_eq!(out.stop_reason.as_deref(), Some("cancelled"));
    let next = s.prompt(text_prompt("echo again")).await.unwrap();
    assert_eq!(next.outcome, "completed");
    s.shutdown().await.unwrap();
}

async fn cancel_idle(env: Env) {
    let rt = env.runtime(RuntimeOptions::default());
    let s = rt.open_new(env.spec(agent(""))).await.unwrap();
    assert!(!s.cancel_handle().cancel());
    let id = s.id().clone();
    s.shutdown().await.unwrap();
    assert!(!types(&env.events(&id).await).contains(&"control_started".to_owned()));
}

async fn rpc_error(env: Env) {
    let rt = env.runtime(RuntimeOptions::default());
    let mut s = rt.open_new(env.spec(agent(""))).await.unwrap();
    let id = s.id().clone();
    let out = s.prompt(text_prompt("error")).await.unwrap();
    assert_eq!(out.outcome, "failed");
    let err = out.error.clone().unwrap();
    assert_eq!(
        (err.code.as_str(), err.detail_code.as_deref(), err.retryable),
        ("RUNTIME", Some("AGENT_PROMPT_FAILED"), true)
    );
    assert_eq!(err.message, "scripted failure");
    let acp = out.acp_error.clone().unwrap();
    assert_eq!(acp.code, -32603);
    assert_eq!(
        acp.data,
        Some(json!({"details": "the test agent was asked to fail"}))
    );
    assert_eq!(
        out.agent_text, "About to fail.",
        "what streamed before the error is kept"
    );
    let next = s.prompt(text_prompt("echo still here")).await.unwrap();
    assert_eq!(next.outcome, "completed");
    s.shutdown().await.unwrap();
    let ev = env.events(&id).await;
    let pe = ev.iter().find(|e| e.event_type == "prompt_error").unwrap();
    assert_eq!(
        pe.payload["acp"],
        json!({"code": -32603, "message": "scripted failure", "data": {"details": "the test agent was asked to fail"}})
    );
    assert_eq!(pe.payload["outcome"], "failed");
}

async fn agent_dies(env: Env) {
    let rt = env.runtime(RuntimeOptions::default());
    let mut s = rt.open_new(env.spec(agent(""))).await.unwrap();
    let id = s.id().clone();
    s.prompt(text_prompt("tools")).await.unwrap();
    let out = s.prompt(text_prompt("die")).await.unwrap();
    assert_eq!(out.outcome, "failed");
    let err = out.error.unwrap();
    assert_eq!(err.detail_code.as_deref(), Some("AGENT_DISCONNECTED"));
    assert!(
        err.message.contains("exited with code 3"),
        "{}",
        err.message
    );
    assert!(
        err.message.contains("dying mid-turn"),
        "stderr is quoted: {}",
        err.message
    );
    assert_eq!(out.agent_text, "Goodbye, cruel world.");
    // The session knows its agent is gone.
    let again = s.prompt(text_prompt("hello")).await;
    assert!(
        matches!(again, Err(acpx_runtime::RuntimeError::NotConnected { .. })),
        "{again:?}"
    );
    let r = s.shutdown().await.unwrap();
    assert_eq!(r.last_agent_exit_code, Some(3));
    assert_eq!(
        r.last_agent_disconnect_reason.as_deref(),
        Some("process_exit")
    );
    assert!(r.pid.is_none());
    let ev = env.events(&id).await;
    let exits = lifecycle(&ev, "agent_exit");
    assert_eq!(exits.len(), 1);
    assert_eq!(exits[0].payload["exitCode"], 3);
    assert!(exits[0].payload["stderrTail"]
        .as_str()
        .unwrap()
        .contains("dying mid-turn"));
    // The record can be reopened with a fresh agent.
    let mut s = rt.open_existing(&id).await.unwrap();
    assert_eq!(
        s.prompt(text_prompt("echo back")).await.unwrap().outcome,
        "completed"
    );
    s.shutdown().await.unwrap();
}

async fn late_updates(env: Env) {
    let rt = env.runtime(RuntimeOptions::default());
    let mut s = rt.open_new(env.spec(agent(""))).await.unwrap();
    let id = s.id().clone();
    let out = s.prompt(text_prompt("late")).await.unwrap();
    assert_eq!(out.agent_text, "Early.");
    // The late chunk arrives after the answer; wait for it to be recorded.
    for _ in 0..250 {
        let r = s.record().await;
        if r.acpx
            .audit_events
            .iter()
            .filter(|a| a.summary.starts_with("agent_message_chunk"))
            .count()
            == 2
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let r = s.shutdown().await.unwrap();
    let ev = env.events(&id).await;
    let chunks = updates(&ev, "agent_message_chunk");
    assert_eq!(chunks.len(), 2);
    assert_eq!(chunks[1].payload["update"]["content"]["text"], "Too late.");
    assert_eq!(
        chunks[1].request_id, None,
        "a late update is not part of the turn"
    );
    assert!(
        chunks[1].seq
            > ev.iter()
                .find(|e| e.event_type == "prompt_done")
                .unwrap()
                .seq
    );
    let t = thread_json(&r);
    assert_eq!(
        t["messages"][1]["Agent"]["content"],
        json!([{"Text": "Early."}])
    );
}

async fn controls(env: Env) {
    let rt = env.runtime(RuntimeOptions::default());
    let mut s = rt
        .open_new(env.spec(agent("--refuse-mode plan")))
        .await
        .unwrap();
    let id = s.id().clone();
    s.set_mode("code").await.unwrap();
    let r = s.record().await;
    assert_eq!(r.acpx.current_mode_id.as_deref(), Some("code"));
    let c = r.acpx.last_control_update.clone().unwrap();
    assert_eq!(
        (c.action.as_str(), c.ok, c.payload.clone()),
        ("set_mode", true, json!({"mode_id": "code"}))
    );
    let opts = s.set_config_option("model", json!("large")).await.unwrap();
    assert_eq!(opts[0]["currentValue"], "large");
    let r = s.record().await;
    assert_eq!(r.acpx.config_options[0]["currentValue"], "large");
    assert_eq!(
        r.acpx.last_control_update.as_ref().unwrap().payload,
        json!({"config_id": "model", "value": "large"})
    );
    // A mode the agent does not list is refused before anything is sent or recorded.
    let unknown = s.set_mode("warp").await;
    match &unknown {
        Err(acpx_runtime::RuntimeError::UnknownMode { mode, available }) => {
            assert_eq!(mode, "warp");
            assert_eq!(available, &["default", "plan", "code"]);
        }
        other => panic!("{other:?}"),
    }
    let r = s.record().await;
    assert!(r.acpx.last_control_update.as_ref().unwrap().ok);
    // A listed mode the agent refuses is its error, recorded as control_error.
    let bad = s.set_mode("plan").await;
    assert!(
        matches!(bad, Err(acpx_runtime::RuntimeError::Agent { .. })),
        "{bad:?}"
    );
    let r = s.record().await;
    let c = r.acpx.last_control_update.clone().unwrap();
    assert!(!c.ok);
    assert_eq!(c.error.as_ref().unwrap()["detailCode"], "ACP_ERROR");
    assert_eq!(r.acpx.current_mode_id.as_deref(), Some("code"));
    s.shutdown().await.unwrap();
    let ev = env.events(&id).await;
    let ctl: Vec<_> = ev
        .iter()
        .filter(|e| e.stream.as_str() == "control")
        .map(|e| e.event_type.as_str())
        .collect();
    assert_eq!(
        ctl,
        [
            "control_started",
            "control_done",
            "control_started",
            "control_done",
            "control_started",
            "control_error"
        ]
    );
    assert_eq!(
        ev.iter()
            .filter(|e| e.stream.as_str() == "control")
            .filter_map(|e| e.request_id.clone())
            .collect::<std::collections::HashSet<_>>()
            .len(),
        3
    );
    // The agent's own current_mode_update after set_mode is logged too.
    assert_eq!(updates(&ev, "current_mode_update").len(), 1);
}

async fn long_stream(env: Env) {
    let rt = env.runtime(RuntimeOptions::default());
    let mut s = rt.open_new(env.spec(agent(""))).await.unwrap();
    let id = s.id().clone();
    let out = s.prompt(text_prompt("stream 2000")).await.unwrap();
    assert_eq!(out.agent_text.len(), 2000 * 8);
    let expected: String = (0..2000).map(|i| format!("{i:07} ")).collect();
    assert_eq!(out.agent_text, expected, "chunks merged in arrival order");
    s.shutdown().await.unwrap();
    let ev = env.events(&id).await;
    assert_gap_free(&ev);
    assert_eq!(updates(&ev, "agent_message_chunk").len(), 2000);
    let stored = env.stored(&id).await;
    assert_eq!(
        stored.acpx.audit_dropped_count,
        ev.len() as u64 - stored.acpx.audit_events.len() as u64
    );
}

async fn prompt_timeout(env: Env) {
    let rt = env.runtime(RuntimeOptions {
        prompt_timeout: Some(std::time::Duration::from_millis(300)),
        ..RuntimeOptions::default()
    });
    let mut s = rt.open_new(env.spec(agent(""))).await.unwrap();
    let out = s.prompt(text_prompt("slow 400")).await.unwrap();
    assert_eq!(out.outcome, "timeout");
    assert_eq!(out.error.as_ref().unwrap().code, "TIMEOUT");
    assert_eq!(
        out.stop_reason.as_deref(),
        Some("cancelled"),
        "the agent answered the cancel"
    );
    let r = s.shutdown().await.unwrap();
    assert_eq!(r.acpx.last_turn.unwrap().outcome, "timeout");
}

backend_tests! {
    the_snapshot_follows_a_stream_before_the_turn_ends => snapshot_follows_stream;
    raw_wire_lines_reach_the_wire_observer => wire_observer;
    capabilities_that_are_off_are_not_advertised_or_served => capabilities_off;
}

async fn snapshot_follows_stream(env: Env) {
    let (obs, mut rx) = channel();
    let rt = env.runtime(RuntimeOptions::default());
    let mut s = rt.open_new(env.spec(agent(""))).await.unwrap();
    let id = s.id().clone();
    let store = env.reopen_store();
    let watcher = tokio::spawn(async move {
        // Once chunks stream, another reader sees them in session.json before the turn ends.
        let mut started_seq = 0;
        while let Some(e) = rx.recv().await {
            if e.event_type == "prompt_started" {
                started_seq = e.seq;
            }
            if e.payload["update"]["sessionUpdate"] == "agent_message_chunk" {
                break;
            }
        }
        loop {
            let r = store.load(&id).await.unwrap();
            if r.acpx.audit_seq > started_seq + 1 && r.thread.messages.len() == 2 {
                assert!(acpx_runtime::mapping::turn_is_running(&r));
                return r.acpx.audit_seq;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    });
    let out = s
        .prompt_with(text_prompt("slow 60"), Some(obs))
        .await
        .unwrap();
    let seen = watcher.await.unwrap();
    assert!(seen < s.record().await.acpx.audit_seq);
    assert_eq!(out.outcome, "completed");
    s.shutdown().await.unwrap();
}

async fn wire_observer(env: Env) {
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let l = lines.clone();
    let rt = env.runtime(RuntimeOptions {
        wire_observer: Some(std::sync::Arc::new(move |d, line: &str| {
            l.lock().unwrap().push((d, line.to_owned()))
        })),
        ..RuntimeOptions::default()
    });
    let mut s = rt.open_new(env.spec(agent(""))).await.unwrap();
    s.prompt(text_prompt("echo wire")).await.unwrap();
    s.shutdown().await.unwrap();
    let lines = lines.lock().unwrap();
    use acpx_runtime::WireDirection::*;
    let init: serde_json::Value =
        serde_json::from_str(&lines.iter().find(|(d, _)| *d == ToAgent).unwrap().1).unwrap();
    assert_eq!(init["method"], "initialize");
    assert_eq!(
        init["params"]["clientCapabilities"],
        json!({
            "fs": {"readTextFile": true, "writeTextFile": true},
            "terminal": true,
            "session": {"configOptions": {"boolean": {}}},
            "elicitation": {"form": {}, "url": {}},
        })
    );
    assert_eq!(init["params"]["clientInfo"]["name"], "acpx");
    assert!(lines
        .iter()
        .any(|(d, l)| *d == FromAgent && l.contains("\"agent_message_chunk\"")));
    assert!(lines
        .iter()
        .any(|(d, l)| *d == Stderr && l.contains("initialize from")));
}

async fn capabilities_off(env: Env) {
    let rt = env.runtime(RuntimeOptions {
        fs: false,
        terminal: false,
        ..approve_all()
    });
    let mut s = rt.open_new(env.spec(agent(""))).await.unwrap();
    let id = s.id().clone();
    let readme = env.cwd.join("README.md").display().to_string();
    let out = s
        .prompt(text_prompt(&format!("read-file {readme}")))
        .await
        .unwrap();
    assert!(
        out.agent_text.starts_with("Read failed (-32601)"),
        "{}",
        out.agent_text
    );
    let out = s.prompt(text_prompt("terminal echo no")).await.unwrap();
    assert!(
        out.agent_text.starts_with("terminal/create failed"),
        "{}",
        out.agent_text
    );
    s.shutdown().await.unwrap();
    let ev = env.events(&id).await;
    assert_eq!(lifecycle(&ev, "initialized").len(), 1);
    assert!(
        client_ops(&ev, "fs/read_text_file").is_empty()
            && client_ops(&ev, "terminal/create").is_empty()
    );
}

#[tokio::test]
async fn exec_runs_one_prompt_and_stores_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (out, record) = acpx_runtime::Runtime::exec(
        acpx_runtime::NewSessionSpec {
            agent_command: agent(""),
            cwd: dir.path().into(),
            name: None,
        },
        text_prompt("echo one shot"),
        RuntimeOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(
        (out.outcome.as_str(), out.agent_text.as_str()),
        ("completed", "one shot")
    );
    assert_eq!(record.thread.messages.len(), 2);
    assert!(record.pid.is_none());
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "nothing written to disk"
    );
}
