//! Reopening stored sessions: load with replay, resume, fallback to a fresh ACP session,
//! identity rules and the writer lock, on every backend.
use crate::common;

use acpx_runtime::{text_prompt, Attachment, RuntimeError, RuntimeOptions};
use common::*;
use serde_json::json;

backend_tests! {
    load_replays_history_without_duplicating_it => load_replay;
    resume_reattaches_without_replay => resume;
    load_not_found_falls_back_to_a_new_acp_session => load_not_found;
    an_agent_without_load_or_resume_falls_back => unsupported;
    agent_session_id_is_taken_from_meta_only => agent_session_id;
    a_session_is_driven_by_one_process_at_a_time => single_writer;
    a_closed_session_stays_listable_and_is_not_reopened => close;
    an_agent_that_will_not_start_fails_the_open_clearly => bad_agent;
}

async fn first_session(env: &Env, agent_cmd: String) -> (acpx_model::RecordId, String) {
    let rt = env.runtime(RuntimeOptions::default());
    let mut s = rt.open_new(env.spec(agent_cmd)).await.unwrap();
    let id = s.id().clone();
    let acp = s.acp_session_id().await;
    assert_eq!(
        s.prompt(text_prompt("echo one")).await.unwrap().outcome,
        "completed"
    );
    s.shutdown().await.unwrap();
    (id, acp)
}

async fn load_replay(env: Env) {
    let (id, acp) = first_session(&env, env.loading_agent("")).await;
    let before = env.events(&id).await.len();
    let rt = env.runtime(RuntimeOptions::default());
    let mut s = rt.open_existing(&id).await.unwrap();
    assert_eq!(
        s.attachment(),
        &Attachment::Reattached {
            method: "session/load".into(),
            replayed_updates: 2
        }
    );
    assert!(s.resumed());
    assert_eq!(s.acp_session_id().await, acp);
    let r = s.record().await;
    assert_eq!(
        r.thread.messages.len(),
        2,
        "the replay is not appended again"
    );
    let out = s.prompt(text_prompt("echo two")).await.unwrap();
    assert_eq!(out.agent_text, "two");
    s.shutdown().await.unwrap();
    let ev = env.events(&id).await;
    assert_gap_free(&ev);
    let new: Vec<_> = ev[before..].iter().collect();
    let attach = new
        .iter()
        .find(|e| e.payload["phase"] == "session_attached")
        .unwrap();
    assert_eq!(attach.payload["method"], "session/load");
    assert_eq!(attach.payload["replayedUpdates"], 2);
    // No replayed update became a session_update event: the only new ones are the second turn's.
    let new_updates: Vec<_> = new
        .iter()
        .filter(|e| e.event_type == "session_update")
        .collect();
    assert_eq!(new_updates.len(), 1);
    assert_eq!(new_updates[0].payload["update"]["content"]["text"], "two");
    let prompt = new
        .iter()
        .find(|e| e.event_type == "prompt_started")
        .unwrap();
    assert_eq!(prompt.payload["resumed"], true);
    let stored = env.stored(&id).await;
    assert_eq!(stored.thread.messages.len(), 4);
    assert!(stored.acpx.last_turn.unwrap().resumed);
}

async fn resume(env: Env) {
    let (id, acp) = first_session(&env, agent("--resume")).await;
    let rt = env.runtime(RuntimeOptions::default());
    let mut s = rt.open_existing(&id).await.unwrap();
    assert_eq!(
        s.attachment(),
        &Attachment::Reattached {
            method: "session/resume".into(),
            replayed_updates: 0
        }
    );
    assert_eq!(s.acp_session_id().await, acp);
    assert_eq!(
        s.prompt(text_prompt("echo more")).await.unwrap().outcome,
        "completed"
    );
    s.shutdown().await.unwrap();
    assert_eq!(env.stored(&id).await.thread.messages.len(), 4);
}

async fn load_not_found(env: Env) {
    let rt = env.runtime(RuntimeOptions::default());
    let mut s = rt.open_new(env.spec(env.loading_agent(""))).await.unwrap();
    let id = s.id().clone();
    let old_acp = s.acp_session_id().await;
    s.set_mode("code").await.unwrap();
    s.set_config_option("model", json!("large")).await.unwrap();
    s.prompt(text_prompt("echo remember me")).await.unwrap();
    s.shutdown().await.unwrap();
    // The agent lost the session: load answers -32002.
    let rt = env.runtime(with_agent_flags(
        RuntimeOptions::default(),
        "--load-not-found",
    ));
    let mut s = rt.open_existing(&id).await.unwrap();
    assert_eq!(s.id(), &id, "the record id never changes");
    let Attachment::Fallback {
        reason,
        previous_acp_session_id,
    } = s.attachment().clone()
    else {
        panic!("{:?}", s.attachment())
    };
    assert_eq!(
        (reason.as_str(), previous_acp_session_id.as_str()),
        ("not_found", old_acp.as_str())
    );
    let new_acp = s.acp_session_id().await;
    assert_ne!(new_acp, old_acp);
    assert!(!s.resumed());
    let r = s.record().await;
    assert_eq!(
        r.acpx.current_mode_id.as_deref(),
        Some("code"),
        "the saved mode is re-applied"
    );
    assert_eq!(
        r.acpx.config_options[0]["currentValue"], "large",
        "the saved config is re-applied"
    );
    assert_eq!(
        r.thread.messages.len(),
        2,
        "the history stays with the record"
    );
    let out = s.prompt(text_prompt("echo after fallback")).await.unwrap();
    assert_eq!(out.outcome, "completed");
    s.shutdown().await.unwrap();
    let ev = env.events(&id).await;
    assert_gap_free(&ev);
    let fb = lifecycle(&ev, "session_fallback");
    assert_eq!(fb.len(), 1);
    assert_eq!(fb[0].payload["reason"], "not_found");
    assert_eq!(fb[0].payload["failedMethod"], "session/load");
    assert_eq!(fb[0].payload["previousAcpSessionId"], json!(old_acp));
    assert_eq!(fb[0].payload["acpSessionId"], json!(new_acp));
    assert_eq!(fb[0].payload["error"]["code"], -32002);
    assert_eq!(
        fb[0].acp_session_id, old_acp,
        "the fallback event is the last under the old id"
    );
    // Events after the fallback carry the new ACP session id.
    let after: Vec<_> = ev.iter().filter(|e| e.seq > fb[0].seq).collect();
    assert!(after.iter().all(|e| e.acp_session_id == new_acp));
    let reapplied: Vec<_> = after
        .iter()
        .filter(|e| e.event_type == "control_done")
        .map(|e| e.payload["action"].as_str().unwrap())
        .collect();
    assert_eq!(reapplied, ["set_mode", "set_config_option"]);
    let stored = env.stored(&id).await;
    assert_eq!(stored.acp_session_id, new_acp);
    assert_eq!(stored.acpx_record_id, id);
    assert_eq!(stored.thread.messages.len(), 4);
}

async fn unsupported(env: Env) {
    let (id, old) = first_session(&env, agent("")).await;
    let rt = env.runtime(RuntimeOptions::default());
    let s = rt.open_existing(&id).await.unwrap();
    assert!(
        matches!(s.attachment(), Attachment::Fallback { reason, .. } if reason == "unsupported")
    );
    assert_ne!(s.acp_session_id().await, old);
    s.shutdown().await.unwrap();
    let ev = env.events(&id).await;
    let fb = lifecycle(&ev, "session_fallback");
    assert_eq!(fb[0].payload["reason"], "unsupported");
    assert!(fb[0].payload.get("error").is_none());
}

async fn agent_session_id(env: Env) {
    // Never invented.
    let (plain, _) = first_session(&env, agent("--resume")).await;
    assert_eq!(env.stored(&plain).await.agent_session_id, None);
    let v = serde_json::to_value(env.stored(&plain).await).unwrap();
    assert!(
        v.get("agentSessionId").is_none(),
        "unknown is left out, not null"
    );
    // Taken from _meta.agentSessionId of the session/new response.
    let (id, acp) = first_session(&env, agent("--resume --agent-session-id")).await;
    let native = format!("native-{acp}");
    assert_eq!(
        env.stored(&id).await.agent_session_id.as_deref(),
        Some(native.as_str())
    );
    // An empty value on resume does not replace it.
    let rt = env.runtime(with_agent_flags(
        RuntimeOptions::default(),
        "--empty-agent-session-id",
    ));
    rt.open_existing(&id)
        .await
        .unwrap()
        .shutdown()
        .await
        .unwrap();
    assert_eq!(
        env.stored(&id).await.agent_session_id.as_deref(),
        Some(native.as_str())
    );
    // A fallback whose new session has no _meta keeps the old value; one with a new value
    // replaces it.
    let rt = env.runtime(with_agent_flags(
        RuntimeOptions::default(),
        "--load-not-found --no-agent-session-id",
    ));
    let s = rt.open_existing(&id).await.unwrap();
    assert!(matches!(s.attachment(), Attachment::Fallback { .. }));
    let r = s.shutdown().await.unwrap();
    assert_eq!(r.agent_session_id.as_deref(), Some(native.as_str()));
    let rt = env.runtime(with_agent_flags(
        RuntimeOptions::default(),
        "--load-not-found --agent-session-id",
    ));
    let s = rt.open_existing(&id).await.unwrap();
    let newer = format!("native-{}", s.acp_session_id().await);
    s.shutdown().await.unwrap();
    assert_ne!(newer, native);
    assert_eq!(
        env.stored(&id).await.agent_session_id.as_deref(),
        Some(newer.as_str())
    );
}

async fn single_writer(env: Env) {
    let (id, _) = first_session(&env, agent("--resume")).await;
    let rt = env.runtime(RuntimeOptions {
        lock_timeout: std::time::Duration::from_millis(200),
        ..RuntimeOptions::default()
    });
    let s = rt.open_existing(&id).await.unwrap();
    // Another process (a fresh store instance over the same data) cannot drive it meanwhile.
    let other = acpx_runtime::Runtime::new(
        env.reopen_store(),
        RuntimeOptions {
            lock_timeout: std::time::Duration::from_millis(200),
            ..RuntimeOptions::default()
        },
    );
    let second = other.open_existing(&id).await;
    assert!(
        matches!(
            second,
            Err(RuntimeError::Store(acpx_model::StoreError::Locked { .. }))
        ),
        "{second:?}"
    );
    s.shutdown().await.unwrap();
    other
        .open_existing(&id)
        .await
        .unwrap()
        .shutdown()
        .await
        .unwrap();
}

async fn close(env: Env) {
    let (id, _) = first_session(&env, agent("--resume --close")).await;
    let rt = env.runtime(RuntimeOptions::default());
    let s = rt.open_existing(&id).await.unwrap();
    let r = s.close().await.unwrap();
    assert!(r.closed && r.closed_at.is_some() && r.pid.is_none());
    let stored = env.stored(&id).await;
    assert!(stored.closed);
    assert_eq!(stored.thread.messages.len(), 2);
    let listed = env
        .reopen_store()
        .list(&acpx_model::ListQuery::default())
        .await
        .unwrap();
    assert!(listed
        .sessions
        .iter()
        .any(|s| s.acpx_record_id == id && s.closed));
    assert!(
        matches!(rt.open_existing(&id).await, Err(RuntimeError::InvalidInput(m)) if m.contains("closed"))
    );
    let ev = env.events(&id).await;
    assert_eq!(lifecycle(&ev, "session_closed").len(), 1);
}

async fn bad_agent(env: Env) {
    let rt = env.runtime(RuntimeOptions::default());
    let e = rt
        .open_new(env.spec("/nonexistent/agent --acp".into()))
        .await
        .unwrap_err();
    assert!(matches!(&e, RuntimeError::Spawn { .. }), "{e}");
    assert!(e.to_string().contains("/nonexistent/agent"), "{e}");
    let e = rt
        .open_new(env.spec("sh -c 'echo broken >&2; exit 4'".into()))
        .await
        .unwrap_err();
    assert!(matches!(&e, RuntimeError::Disconnected { .. }), "{e}");
    assert!(
        e.to_string().contains("code 4") && e.to_string().contains("broken"),
        "{e}"
    );
    let e = rt
        .open_new(acpx_runtime::NewSessionSpec {
            agent_command: agent(""),
            cwd: "relative/dir".into(),
            name: None,
        })
        .await
        .unwrap_err();
    assert!(matches!(e, RuntimeError::InvalidInput(_)));
    assert!(
        env.reopen_store()
            .list(&acpx_model::ListQuery::default())
            .await
            .unwrap()
            .sessions
            .is_empty(),
        "no record for a failed open"
    );
}

backend_tests! {
    an_internal_error_on_load_falls_back_only_without_history => load_internal_error;
}

async fn load_internal_error(env: Env) {
    // A record with no agent message yet: the -32603 some adapters give for an empty session
    // falls back to a fresh ACP session.
    let rt = env.runtime(RuntimeOptions::default());
    let s = rt.open_new(env.spec(env.loading_agent(""))).await.unwrap();
    let empty = s.id().clone();
    s.shutdown().await.unwrap();
    let flaky = env.runtime(with_agent_flags(
        RuntimeOptions::default(),
        "--load-internal-error",
    ));
    let s = flaky.open_existing(&empty).await.unwrap();
    assert!(
        matches!(s.attachment(), Attachment::Fallback { reason, .. } if reason == "failed_without_history")
    );
    s.shutdown().await.unwrap();
    // With history, the same error is not a reason to start over: the open fails, the record
    // stays consistent and can be opened again later.
    let (id, acp) = first_session(&env, env.loading_agent("")).await;
    let e = flaky.open_existing(&id).await.unwrap_err();
    assert!(
        matches!(&e, RuntimeError::Agent { error, .. } if error.code == -32603),
        "{e}"
    );
    let stored = env.stored(&id).await;
    assert_eq!(stored.acp_session_id, acp);
    assert!(
        stored.pid.is_none(),
        "the agent was stopped and its exit recorded"
    );
    assert_eq!(stored.thread.messages.len(), 2);
    let s = rt.open_existing(&id).await.unwrap();
    assert!(matches!(s.attachment(), Attachment::Reattached { .. }));
    s.shutdown().await.unwrap();
    assert_gap_free(&env.events(&id).await);
}
