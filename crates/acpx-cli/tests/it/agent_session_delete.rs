//! `sessions delete` asks the agent to delete its own copy of the session (`session/delete`)
//! when the agent advertises it, starting the agent for that (the session is closed, so none
//! runs); the store's delete happens whatever the agent answers, and the answer is reported
//! (`agentSessionDelete` in the JSON, a warning when it failed).
use crate::common;

use common::*;

/// A session of `agent` with one turn, closed; returns its record id and the agent's history
/// file of it in `state`.
fn closed_session(env: &Env, agent: &str, state: &std::path::Path) -> (String, std::path::PathBuf) {
    let id = env.new_session(agent);
    env.run(&["--no-owner", "--agent", agent, "echo", "keep", "this"])
        .ok();
    let shown = env
        .run(&["--format", "json", "sessions", "show", &id])
        .ok()
        .json();
    let acp = shown["acpxSessionId"].as_str().unwrap().to_owned();
    env.run(&["sessions", "close", &id]).ok();
    let stored = state.join(format!("{acp}.json"));
    assert!(stored.exists(), "the agent stored {}", stored.display());
    (id, stored)
}

fn delete(env: &Env, id: &str) -> (serde_json::Value, String) {
    let r = env
        .run(&["--format", "json", "sessions", "delete", id])
        .ok();
    let gone = env.run(&["sessions", "show", id]);
    assert_ne!(gone.code, 0, "the record is deleted: {gone:?}");
    (r.json(), r.stderr)
}

#[test]
fn delete_sends_session_delete_when_the_agent_advertises_it() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let state = env.home().join("agent-state");
        let flags = format!("--load --delete --state-dir {}", state.display());
        let agent = env.agent_cmd(&flags);

        let (id, stored) = closed_session(&env, &agent, &state);
        let (json, _) = delete(&env, &id);
        assert_eq!(json["action"], "session_deleted", "{json}");
        assert_eq!(json["deleted"], true, "{json}");
        assert_eq!(json["agentSessionDelete"], "deleted", "{json}");
        assert!(!stored.exists(), "the agent deleted its copy");

        // Text output says so.
        let (id, _) = closed_session(&env, &agent, &state);
        let r = env.run(&["sessions", "delete", &id]).ok();
        assert!(
            r.stdout.contains("(the agent deleted its copy too)"),
            "{r:?}"
        );

        // The agent refuses (it lost the session): warned, and the record is deleted anyway.
        let (id, stored) = closed_session(&env, &agent, &state);
        std::fs::remove_file(&stored).unwrap();
        let (json, stderr) = delete(&env, &id);
        assert_eq!(json["agentSessionDelete"], "failed", "{json}");
        assert!(
            stderr.contains("the agent's own copy of the session was not deleted")
                && stderr.contains("no stored session"),
            "{stderr}"
        );
    }
}

#[test]
fn delete_sends_nothing_to_an_agent_without_session_delete() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let state = env.home().join("agent-state");
        let agent = env.agent_cmd(&format!("--load --state-dir {}", state.display()));
        let (id, stored) = closed_session(&env, &agent, &state);
        let (json, stderr) = delete(&env, &id);
        assert_eq!(json["agentSessionDelete"], "not_advertised", "{json}");
        assert!(stored.exists(), "the agent keeps its copy");
        assert!(!stderr.contains("session/delete"), "{stderr}");
    }
}
