//! `$/cancel_request`: a request acpx gives up on is cancelled at the agent with its JSON-RPC
//! id, and the log says so (`request_abandoned`). The scripted agent never answers the
//! request it is told to stall, and notes the id of each stalled request and of each
//! `$/cancel_request` it receives.
use crate::common;

use common::*;
use serde_json::Value;

fn cancel_log(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn abandoned(env: &Env, id: &str) -> Vec<Value> {
    env.run(&["--format", "json", "sessions", "events", id])
        .ok()
        .json_lines()
        .into_iter()
        .filter(|e| e["payload"]["phase"] == "request_abandoned")
        .collect()
}

/// Waits a moment for the agent to note what it received (it is stopped right after).
fn wait_for_cancel(path: &std::path::Path) -> Vec<Value> {
    for _ in 0..50 {
        let log = cancel_log(path);
        if log.iter().any(|l| l["event"] == "cancel_request") {
            return log;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    cancel_log(path)
}

#[test]
fn a_request_that_times_out_is_cancelled_at_the_agent_with_its_id() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        std::fs::write(env.home().join("config.json"), r#"{"requestTimeout": 1}"#).unwrap();
        let log = env.home().join("cancel.log");
        let agent = env.agent_cmd(&format!(
            "--stall session/set_mode --cancel-log {}",
            log.display()
        ));
        let id = env.new_session(&agent);
        // In this process, then through a queue owner.
        for owner in [&["--no-owner"][..], &[][..]] {
            let before = cancel_log(&log).len();
            let args = [owner, &["--agent", &agent, "set-mode", "plan"]].concat();
            let r = env.run(&args);
            assert_eq!(r.code, 3, "{r:?}");
            let lines = wait_for_cancel(&log);
            let new = &lines[before..];
            assert_eq!(new.len(), 2, "{lines:?}");
            assert_eq!(new[0]["event"], "stalled", "{lines:?}");
            assert_eq!(new[0]["method"], "session/set_mode", "{lines:?}");
            assert_eq!(new[1]["event"], "cancel_request", "{lines:?}");
            assert_eq!(
                new[1]["requestId"], new[0]["id"],
                "the same request: {lines:?}"
            );
            let recorded = abandoned(&env, &id);
            let last = recorded.last().unwrap();
            assert_eq!(last["payload"]["method"], "session/set_mode", "{last}");
            assert_eq!(last["payload"]["rpcId"], new[0]["id"], "{last}");
            assert_eq!(last["payload"]["reason"], "timeout", "{last}");
            assert_eq!(last["payload"]["cancelRequestSent"], true, "{last}");
        }
        env.run(&["--agent", &agent, "sessions", "close"]).ok();
    }
}

/// A turn whose agent answers neither the prompt nor `session/cancel` (within the 10 s
/// grace): acpx gives the prompt up, and cancels it at the agent. One backend: the grace is
/// not configurable, and this path does not depend on the store.
#[test]
fn a_prompt_abandoned_after_session_cancel_is_cancelled_at_the_agent() {
    let env = Env::new("fs");
    let log = env.home().join("cancel.log");
    let agent = env.agent_cmd(&format!(
        "--stall session/prompt --cancel-log {}",
        log.display()
    ));
    let id = env.new_session(&agent);
    let r = env.run(&["--no-owner", "--timeout", "1", "--agent", &agent, "hello"]);
    assert_eq!(r.code, 3, "{r:?}");
    let lines = wait_for_cancel(&log);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[1]["requestId"], lines[0]["id"], "{lines:?}");
    let recorded = abandoned(&env, &id);
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    let p = &recorded[0]["payload"];
    assert_eq!(p["method"], "session/prompt", "{p}");
    assert_eq!(p["reason"], "cancel_unanswered", "{p}");
    assert_eq!(p["rpcId"], lines[0]["id"], "{p}");
    assert!(
        recorded[0]["requestId"].is_string(),
        "under the turn's request id"
    );
}
