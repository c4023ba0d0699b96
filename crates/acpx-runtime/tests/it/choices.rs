//! The reattach chain (resume → load → new), the user's choices set again after every attach,
//! MCP servers, and the permission stats of acpx's own gates, on every backend, against the
//! scripted agent (whose mode and model live in its process only, as real agents keep them).
use crate::common;

use acpx_runtime::mcp_servers::parse_mcp_servers;
use acpx_runtime::{
    text_prompt, Attachment, NonInteractivePermissions, Notice, PermissionMode, ResumePolicy,
    RuntimeError, RuntimeOptions,
};
use common::*;
use serde_json::json;

backend_tests! {
    resume_answering_method_not_found_moves_on_to_load => resume_unsupported_then_load;
    the_mode_is_set_again_after_load_and_restart => mode_after_load;
    a_mode_that_cannot_be_set_again_stops_before_the_prompt => mode_refused;
    a_fallback_names_its_failed_steps => fallback_notice;
    same_session_only_refuses_the_fallback => same_session_only;
    mcp_servers_are_sent_and_kept => mcp_servers;
    the_model_is_set_through_session_set_model => set_model_rpc;
    the_model_is_set_through_its_config_option => set_model_config;
    an_unadvertised_model_option_is_tried_first => set_model_unadvertised;
    a_refused_write_counts_as_a_denied_permission => gate_stats;
    no_terminal_under_fail_fails_the_turn => prompt_unavailable;
}

async fn resume_unsupported_then_load(env: Env) {
    let agent_cmd = env.loading_agent("--resume-unsupported");
    let rt = env.runtime(RuntimeOptions::default());
    let mut s = rt.open_new(env.spec(agent_cmd)).await.unwrap();
    let id = s.id().clone();
    let acp = s.acp_session_id().await;
    s.prompt(text_prompt("echo one")).await.unwrap();
    s.shutdown().await.unwrap();
    let s = rt.open_existing(&id).await.unwrap();
    assert!(
        matches!(s.attachment(), Attachment::Reattached { method, .. } if method == "session/load")
    );
    assert_eq!(s.acp_session_id().await, acp);
    assert!(s.notices().is_empty(), "{:?}", s.notices());
    s.shutdown().await.unwrap();
    let ev = env.events(&id).await;
    let att = lifecycle(&ev, "session_attached");
    assert_eq!(
        att[0].payload["failedAttempts"][0]["method"],
        "session/resume"
    );
    assert_eq!(att[0].payload["failedAttempts"][0]["reason"], "unsupported");
    assert_eq!(att[0].payload["failedAttempts"][0]["error"]["code"], -32601);
}

async fn mode_after_load(env: Env) {
    let rt = env.runtime(RuntimeOptions::default());
    let mut s = rt.open_new(env.spec(env.loading_agent(""))).await.unwrap();
    let id = s.id().clone();
    s.set_mode("plan").await.unwrap();
    s.shutdown().await.unwrap();
    // A new agent process starts the loaded session in `default`; acpx sets `plan` again.
    for _ in 0..2 {
        let mut s = rt.open_existing(&id).await.unwrap();
        let out = s.prompt(text_prompt("state")).await.unwrap();
        assert!(
            out.agent_text.starts_with("mode=plan;"),
            "{}",
            out.agent_text
        );
        s.shutdown().await.unwrap();
    }
    assert_eq!(
        env.stored(&id).await.acpx.extra["desired_mode_id"],
        json!("plan")
    );
}

async fn mode_refused(env: Env) {
    let rt = env.runtime(RuntimeOptions::default());
    let mut s = rt.open_new(env.spec(env.loading_agent(""))).await.unwrap();
    let id = s.id().clone();
    s.set_mode("plan").await.unwrap();
    s.shutdown().await.unwrap();
    let before = env.events(&id).await.len();
    let rt = env.runtime(with_agent_flags(
        RuntimeOptions::default(),
        "--refuse-mode plan",
    ));
    let err = rt.open_existing(&id).await.unwrap_err();
    assert!(
        matches!(&err, RuntimeError::ModeNotRestored { mode, .. } if mode == "plan"),
        "{err}"
    );
    let ev = env.events(&id).await;
    assert!(
        !ev[before..]
            .iter()
            .any(|e| e.event_type == "prompt_started"),
        "no prompt was sent"
    );
    assert!(ev[before..]
        .iter()
        .any(|e| e.event_type == "control_error" && e.payload["action"] == "set_mode"));
}

async fn fallback_notice(env: Env) {
    let rt = env.runtime(RuntimeOptions::default());
    let mut s = rt.open_new(env.spec(env.loading_agent(""))).await.unwrap();
    let id = s.id().clone();
    let old = s.acp_session_id().await;
    s.set_mode("code").await.unwrap();
    s.shutdown().await.unwrap();
    let rt = env.runtime(with_agent_flags(
        RuntimeOptions::default(),
        "--resume --load-not-found",
    ));
    let mut s = rt.open_existing(&id).await.unwrap();
    let Some(Notice::Fallback {
        previous_acp_session_id,
        failed_attempts,
        ..
    }) = s.notices().first().cloned()
    else {
        panic!("{:?}", s.notices())
    };
    assert_eq!(previous_acp_session_id, old);
    let steps: Vec<_> = failed_attempts
        .iter()
        .map(|a| (a.method.as_str(), a.reason.as_str()))
        .collect();
    assert_eq!(
        steps,
        [
            ("session/resume", "not_found"),
            ("session/load", "not_found")
        ]
    );
    let out = s.prompt(text_prompt("state")).await.unwrap();
    assert!(
        out.agent_text.starts_with("mode=code;"),
        "{}",
        out.agent_text
    );
    s.shutdown().await.unwrap();
    let ev = env.events(&id).await;
    let fb = lifecycle(&ev, "session_fallback");
    assert_eq!(fb[0].payload["failedAttempts"].as_array().unwrap().len(), 2);
    assert_eq!(env.stored(&id).await.acpx_record_id, id);
}

async fn same_session_only(env: Env) {
    let rt = env.runtime(RuntimeOptions::default());
    let s = rt.open_new(env.spec(agent(""))).await.unwrap();
    let id = s.id().clone();
    let acp = s.acp_session_id().await;
    s.shutdown().await.unwrap();
    let rt = env.runtime(RuntimeOptions {
        resume_policy: ResumePolicy::SameSessionOnly,
        ..RuntimeOptions::default()
    });
    let err = rt.open_existing(&id).await.unwrap_err();
    assert!(matches!(err, RuntimeError::ResumeRequired { .. }), "{err}");
    assert_eq!(
        env.stored(&id).await.acp_session_id,
        acp,
        "nothing replaced"
    );
    // A record imported from Node acpx is held to the same rule.
    let mut r = env.stored(&id).await;
    r.extra
        .insert("importedFrom".into(), json!({"source": "node-acpx"}));
    let store = env.reopen_store();
    store.save(&mut r).await.unwrap();
    let rt = env.runtime(RuntimeOptions::default());
    let err = rt.open_existing(&id).await.unwrap_err();
    assert!(matches!(err, RuntimeError::ResumeRequired { .. }), "{err}");
}

async fn mcp_servers(env: Env) {
    let servers = parse_mcp_servers(&json!({"mcpServers": {
        "files": {"command": "/bin/true", "args": ["x"], "env": {"A": "b"}},
        "web": {"url": "https://example.test/mcp"}
    }}))
    .unwrap();
    let rt = env.runtime(RuntimeOptions {
        mcp_servers: Some(servers.clone()),
        ..RuntimeOptions::default()
    });
    let agent_cmd = env.loading_agent("--resume --fork");
    let mut s = rt.open_new(env.spec(agent_cmd)).await.unwrap();
    let id = s.id().clone();
    // The agent advertises no http transport: `web` is left out, and said.
    assert!(s
        .notices()
        .iter()
        .any(|n| matches!(n, Notice::McpServersLeftOut(v) if v == &["web (http)".to_owned()])));
    let out = s.prompt(text_prompt("state")).await.unwrap();
    assert!(out.agent_text.ends_with("mcp=files"), "{}", out.agent_text);
    s.shutdown().await.unwrap();
    assert_eq!(
        env.stored(&id).await.acpx.extra["mcp_servers"],
        servers.to_json()
    );
    // A later command without --mcp-config sends the stored list (resume).
    let rt = env.runtime(RuntimeOptions::default());
    let mut s = rt.open_existing(&id).await.unwrap();
    let out = s.prompt(text_prompt("state")).await.unwrap();
    assert!(out.agent_text.ends_with("mcp=files"), "{}", out.agent_text);
    s.shutdown().await.unwrap();
    // And load, for an agent that only loads.
    let rt = env.runtime(with_agent_flags(
        RuntimeOptions::default(),
        "--no-agent-session-id",
    ));
    let store = env.reopen_store();
    let mut r = store.load(&id).await.unwrap();
    r.agent_command = env.loading_agent("");
    store.save(&mut r).await.unwrap();
    let mut s = rt.open_existing(&id).await.unwrap();
    assert!(
        matches!(s.attachment(), Attachment::Reattached { method, .. } if method == "session/load")
    );
    let out = s.prompt(text_prompt("state")).await.unwrap();
    assert!(out.agent_text.ends_with("mcp=files"), "{}", out.agent_text);
    s.shutdown().await.unwrap();
}

async fn set_model_rpc(env: Env) {
    let rt = env.runtime(RuntimeOptions::default());
    let mut s = rt
        .open_new(env.spec(env.loading_agent("--models")))
        .await
        .unwrap();
    let id = s.id().clone();
    let (_, via_config) = s.set_model("large").await.unwrap();
    assert!(!via_config);
    s.shutdown().await.unwrap();
    assert_eq!(
        env.stored(&id).await.acpx.extra["desired_model_id"],
        json!("large")
    );
    let mut s = rt.open_existing(&id).await.unwrap();
    let out = s.prompt(text_prompt("state")).await.unwrap();
    assert!(out.agent_text.contains("model=large"), "{}", out.agent_text);
    s.shutdown().await.unwrap();
}

async fn set_model_config(env: Env) {
    let rt = env.runtime(RuntimeOptions {
        model: Some("large".into()),
        ..RuntimeOptions::default()
    });
    let mut s = rt.open_new(env.spec(env.loading_agent(""))).await.unwrap();
    let id = s.id().clone();
    let out = s.prompt(text_prompt("state")).await.unwrap();
    assert!(out.agent_text.contains("model=large"), "{}", out.agent_text);
    s.shutdown().await.unwrap();
    let r = env.stored(&id).await;
    assert_eq!(r.acpx.extra["desired_model_id"], json!("large"));
    // Set again after the next attach, without --model.
    let rt = env.runtime(RuntimeOptions::default());
    let mut s = rt.open_existing(&id).await.unwrap();
    let out = s.prompt(text_prompt("state")).await.unwrap();
    assert!(out.agent_text.contains("model=large"), "{}", out.agent_text);
    s.shutdown().await.unwrap();
    // A model the agent refuses on a later attach is a notice, not an error.
    let mut r = env.stored(&id).await;
    r.acpx
        .extra
        .insert("desired_model_id".into(), json!("huge"));
    env.reopen_store().save(&mut r).await.unwrap();
    let s = rt.open_existing(&id).await.unwrap();
    assert!(s
        .notices()
        .iter()
        .any(|n| matches!(n, Notice::ChoiceNotRestored { kind, .. } if kind == "model")));
    s.shutdown().await.unwrap();
    let ev = env.events(&id).await;
    assert_eq!(lifecycle(&ev, "choice_not_restored").len(), 1);
}

/// An agent whose session answer offers no model selection (pydantic-acp 1.10.0) still takes
/// the model through `session/set_config_option` with configId `model`; a model it refuses is
/// the agent's invalid params, and the chosen model is set again after reattach.
async fn set_model_unadvertised(env: Env) {
    let rt = env.runtime(RuntimeOptions::default());
    let mut s = rt
        .open_new(env.spec(env.loading_agent("--unadvertised-model")))
        .await
        .unwrap();
    let id = s.id().clone();
    s.set_model("large").await.unwrap();
    let refused = s.set_model("huge").await.unwrap_err();
    assert!(
        refused.to_string().contains("no model \"huge\""),
        "{refused}"
    );
    s.shutdown().await.unwrap();
    assert_eq!(
        env.stored(&id).await.acpx.extra["desired_model_id"],
        json!("large")
    );
    let mut s = rt.open_existing(&id).await.unwrap();
    assert!(s.notices().is_empty(), "{:?}", s.notices());
    let out = s.prompt(text_prompt("state")).await.unwrap();
    assert!(out.agent_text.contains("model=large"), "{}", out.agent_text);
    s.shutdown().await.unwrap();
}

async fn gate_stats(env: Env) {
    let target = env.cwd.join("gated.txt").display().to_string();
    let rt = env.runtime(RuntimeOptions {
        permission_mode: PermissionMode::DenyAll,
        ..RuntimeOptions::default()
    });
    let mut s = rt.open_new(env.spec(agent(""))).await.unwrap();
    let out = s
        .prompt(text_prompt(&format!("write-direct {target} x")))
        .await
        .unwrap();
    assert!(
        out.agent_text.starts_with("Write failed"),
        "{}",
        out.agent_text
    );
    let st = out.permission_stats;
    assert_eq!([st.requested, st.approved, st.denied], [1, 0, 1]);
    s.shutdown().await.unwrap();
    // Under approve-all nothing is asked, so nothing is counted.
    let mut s = env
        .runtime(approve_all())
        .open_new(env.spec(agent("")))
        .await
        .unwrap();
    let out = s
        .prompt(text_prompt(&format!("write-direct {target} x")))
        .await
        .unwrap();
    assert_eq!(out.permission_stats.requested, 0);
    s.shutdown().await.unwrap();
}

async fn prompt_unavailable(env: Env) {
    let rt = env.runtime(RuntimeOptions {
        non_interactive: NonInteractivePermissions::Fail,
        ..RuntimeOptions::default()
    });
    let mut s = rt.open_new(env.spec(agent(""))).await.unwrap();
    let out = s.prompt(text_prompt("permission edit")).await.unwrap();
    assert_eq!(out.outcome, "failed");
    assert_eq!(
        out.error.as_ref().map(|e| e.code.as_str()),
        Some("PERMISSION_PROMPT_UNAVAILABLE")
    );
    // Reads need nobody: allowed.
    let out = s.prompt(text_prompt("permission read")).await.unwrap();
    assert_eq!(out.outcome, "completed");
    s.shutdown().await.unwrap();
}
