//! The user's choices and the reattach rules through the session's queue owner (no
//! `--no-owner` anywhere): the mode set again after the owner restarts its agent, a mode
//! that cannot be set again failing the task before its prompt, `--mcp-config` and `--model`
//! reaching a warm owner's agent, the fallback notice on the stderr of the command whose task
//! made the owner reattach, and exit 5, on both stores.
use crate::common;

use common::*;

/// A stored session no owner holds yet (`--no-owner`): the first task makes the owner attach.
fn new_session(env: &Env, agent: &str, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["--format", "json", "--no-owner", "--agent", agent];
    args.extend(extra);
    args.extend(["sessions", "new"]);
    env.run(&args).ok().json()
}

fn loading_agent(env: &Env) -> String {
    env.agent_cmd(&format!(
        "--load --state-dir {}",
        env.home().join("agent").display()
    ))
}

fn state(env: &Env, agent: &str, extra: &[&str]) -> String {
    let mut args = vec!["--format", "quiet"];
    args.extend(extra);
    args.extend(["--agent", agent, "state"]);
    env.run(&args).ok().stdout.trim_end().to_owned()
}

/// The session's queue owner: its pid while one runs (`None` when none does).
fn owner_pid(env: &Env, agent: &str) -> Option<u64> {
    let s = env
        .run(&["--format", "json", "--agent", agent, "status"])
        .ok()
        .json();
    (s["status"] == "alive")
        .then(|| s["pid"].as_u64())
        .flatten()
}

fn events(env: &Env, agent: &str, kind: &str) -> Vec<serde_json::Value> {
    env.run(&[
        "--format", "json", "--agent", agent, "sessions", "events", "--type", kind,
    ])
    .ok()
    .json_lines()
}

fn count_events(env: &Env, agent: &str, kind: &str) -> usize {
    events(env, agent, kind).len()
}

#[test]
fn the_mode_and_model_survive_an_agent_restart_in_the_owner() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let agent = loading_agent(&env);
        new_session(&env, &agent, &[]);
        env.run(&["--agent", &agent, "set-mode", "plan"]).ok();
        env.run(&["--agent", &agent, "set", "model", "large"]).ok();
        let s = state(&env, &agent, &[]);
        assert!(s.starts_with("mode=plan; model=large"), "{s}");
        let owner = owner_pid(&env, &agent);
        assert!(owner.is_some());
        // The agent dies mid-turn; the owner starts a new one for the next task, which
        // loads the session in its defaults: the owner sets the choices again.
        let r = env.run(&["--agent", &agent, "die"]);
        assert_ne!(r.code, 0, "{r:?}");
        let s = state(&env, &agent, &[]);
        assert!(s.starts_with("mode=plan; model=large"), "{s}");
        assert_eq!(owner_pid(&env, &agent), owner, "the same owner served");
        // `--model` on a prompt to the warm owner selects it before the turn.
        let s = state(&env, &agent, &["--model", "small"]);
        assert!(s.starts_with("mode=plan; model=small"), "{s}");
        // A model the session does not offer: a usage error (issue 51), before the prompt.
        let r = env.run(&["--model", "huge", "--agent", &agent, "state"]);
        assert_eq!(r.code, 2, "{r:?}");
        // The task that failed before its prompt ends in the log as every task does.
        let last = events(&env, &agent, "queue_event").pop().unwrap();
        assert_eq!(last["payload"]["phase"], "error", "{last}");
        assert_eq!(last["payload"]["task"], "prompt", "{last}");
    }
}

#[test]
fn a_mode_that_cannot_be_set_again_fails_the_task_before_its_prompt() {
    for backend in BACKENDS {
        let mut env = Env::new(backend);
        let agent = loading_agent(&env);
        new_session(&env, &agent, &[]);
        // An owner that stops one second after its last task.
        env.run(&["--ttl", "1", "--agent", &agent, "set-mode", "plan"])
            .ok();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while owner_pid(&env, &agent).is_some() {
            assert!(std::time::Instant::now() < deadline, "the owner stays");
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let prompts = count_events(&env, &agent, "prompt_started");
        // The next owner's agent refuses the mode (the owner and its agents inherit the
        // environment of the command that started it).
        env.extra_env
            .push(("ACPX_TEST_AGENT_FLAGS".into(), "--refuse-mode plan".into()));
        let r = env.run(&["--format", "json", "--agent", &agent, "echo", "hi"]);
        assert_eq!(r.code, 1, "{r:?}");
        assert!(r.stdout.contains("MODE_NOT_RESTORED"), "{}", r.stdout);
        let r = env.run(&["--agent", &agent, "echo", "hi"]);
        assert_eq!(r.code, 1, "{r:?}");
        assert!(
            r.stderr.contains("the prompt was not sent"),
            "the hint: {}",
            r.stderr
        );
        assert_eq!(
            count_events(&env, &agent, "prompt_started"),
            prompts,
            "no prompt was sent"
        );
    }
}

#[test]
fn mcp_config_reaches_a_warm_owners_agent() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let agent = loading_agent(&env);
        let write = |name: &str, body: &str| {
            let p = env.home().join(name);
            std::fs::write(&p, body).unwrap();
            p.display().to_string()
        };
        let first = write(
            "first.json",
            r#"{"mcpServers": {"files": {"command": "/bin/true", "args": [], "env": {}}}}"#,
        );
        let second = write(
            "second.json",
            r#"[{"name": "other", "command": "/bin/true", "args": [], "env": []}]"#,
        );
        new_session(&env, &agent, &["--mcp-config", &first]);
        assert!(state(&env, &agent, &[]).ends_with("mcp=files"));
        let owner = owner_pid(&env, &agent);
        // Another list on a prompt to the warm owner: it reattaches with it and keeps it.
        let s = state(&env, &agent, &["--mcp-config", &second]);
        assert!(s.ends_with("mcp=other"), "{s}");
        let s = state(&env, &agent, &[]);
        assert!(s.ends_with("mcp=other"), "the stored list: {s}");
        assert_eq!(owner_pid(&env, &agent), owner, "the same owner served");
        // The configuration's list counts only when neither the command nor the record
        // names one: the record does here.
        std::fs::write(
            env.home().join("config.json"),
            r#"{"mcpServers": {"cfg": {"command": "/bin/true", "args": []}}}"#,
        )
        .unwrap();
        let s = state(&env, &agent, &[]);
        assert!(s.ends_with("mcp=other"), "{s}");
    }
}

#[test]
fn the_fallback_is_said_to_the_command_that_caused_the_reattach() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        // No load, no resume: every new agent process falls back to a new ACP session.
        let agent = env.agent_cmd("");
        new_session(&env, &agent, &[]);
        let said = |r: &Run| {
            r.stderr
                .lines()
                .filter(|l| l.starts_with("[acpx] the agent could not restore ACP session"))
                .count()
        };
        let r = env.run(&["--agent", &agent, "echo", "hi"]).ok();
        assert_eq!(said(&r), 1, "{}", r.stderr);
        // The warm owner's agent remembers: nothing to say.
        let r = env.run(&["--agent", &agent, "echo", "again"]).ok();
        assert_eq!(said(&r), 0, "{}", r.stderr);
        // After the agent died, the task that made the owner start a new one hears it, in
        // JSON as the action's `sessionFallback` key.
        let _ = env.run(&["--agent", &agent, "die"]);
        let m = env
            .run(&["--format", "json", "--agent", &agent, "set-mode", "plan"])
            .ok()
            .json();
        assert_eq!(m["action"], "mode_set");
        assert!(m["sessionFallback"]["failedAttempts"].is_array(), "{m}");
        // A JSON prompt streams the `session_fallback` lifecycle event.
        let _ = env.run(&["--agent", &agent, "die"]);
        let r = env
            .run(&["--format", "json", "--agent", &agent, "echo", "x"])
            .ok();
        assert!(r.stdout.contains("session_fallback"), "{}", r.stdout);
        // Under same-session-only the task fails instead.
        let _ = env.run(&["--agent", &agent, "die"]);
        let r = env.run(&[
            "--resume-policy",
            "same-session-only",
            "--agent",
            &agent,
            "echo",
            "no",
        ]);
        assert_eq!(r.code, 1, "{r:?}");
        assert!(
            r.stderr.contains("no new ACP session was started"),
            "{}",
            r.stderr
        );
    }
}
