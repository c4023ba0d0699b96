//! The user's choices (mode, model, MCP servers) belong to the session: they survive separate
//! `acpx` processes, a `--model` on any command, `set model`, and a fork, on both stores.
//! The scripted agent keeps its mode and model in process memory only, as real agents do, and
//! its `state` script answers `mode=<mode>; model=<model>; mcp=<server names>`.
use crate::common;

use common::*;

fn state(env: &Env, agent: &str, extra: &[&str]) -> String {
    let mut args = vec!["--format", "quiet", "--agent", agent];
    args.extend(extra);
    args.push("state");
    env.run(&args).ok().stdout.trim().to_owned()
}

#[test]
fn model_flag_and_set_model_are_kept_by_the_session() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let dir = env.home().join("agent-state");
        // `--models`: the agent offers the unstable session/set_model and no model option.
        let agent = env.agent_cmd(&format!("--load --models --state-dir {}", dir.display()));
        env.run(&[
            "--format", "json", "--model", "large", "--agent", &agent, "sessions", "new",
        ])
        .ok();
        assert!(
            state(&env, &agent, &[]).contains("model=large"),
            "--model on sessions new is kept"
        );
        let set = env
            .run(&[
                "--format", "json", "--agent", &agent, "set", "model", "small",
            ])
            .ok()
            .json();
        assert_eq!(set["action"], "model_set", "{set}");
        assert_eq!(set["modelId"], "small");
        // Later commands (new agent processes) run with the chosen model.
        assert!(state(&env, &agent, &[]).contains("model=small"));
        assert!(state(&env, &agent, &["--no-owner"]).contains("model=small"));
        // --model on a prompt changes the session's model for good.
        assert!(state(&env, &agent, &["--model", "large"]).contains("model=large"));
        assert!(state(&env, &agent, &["--no-owner"]).contains("model=large"));
        // A model the session does not offer is a usage error naming the ones it does
        // (issue 51: exit 2, as for a mode).
        let r = env.run(&["--agent", &agent, "set", "model", "huge"]);
        assert_eq!(r.code, 2, "{r:?}");
        assert!(
            r.stderr.contains("huge") && r.stderr.contains("small"),
            "{}",
            r.stderr
        );
    }
}

#[test]
fn a_fork_keeps_the_mode_the_model_and_the_mcp_servers() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let dir = env.home().join("agent-state");
        let agent = env.agent_cmd(&format!(
            "--fork --load --models --state-dir {}",
            dir.display()
        ));
        let mcp = env.home().join("mcp.json");
        std::fs::write(
            &mcp,
            r#"{"mcpServers": {"files": {"command": "/bin/true", "args": ["x"]}}}"#,
        )
        .unwrap();
        let mcp = mcp.to_string_lossy().into_owned();
        env.run(&[
            "--format",
            "json",
            "--mcp-config",
            &mcp,
            "--agent",
            &agent,
            "sessions",
            "new",
        ])
        .ok();
        env.run(&["--agent", &agent, "set-mode", "plan"]).ok();
        env.run(&["--agent", &agent, "set", "model", "large"]).ok();
        let parent = state(&env, &agent, &[]);
        assert_eq!(parent, "mode=plan; model=large; mcp=files");

        let f = env
            .run(&[
                "--format", "json", "--agent", &agent, "sessions", "fork", "--name", "branch",
            ])
            .ok()
            .json();
        assert_eq!(f["action"], "session_forked", "{f}");
        let child = f["acpxRecordId"].as_str().unwrap().to_owned();
        let shown = env
            .run(&["--format", "json", "sessions", "show", &child])
            .ok()
            .json();
        assert_eq!(shown["acpx"]["desired_mode_id"], "plan", "{shown}");
        assert_eq!(shown["acpx"]["desired_model_id"], "large", "{shown}");
        assert_eq!(shown["acpx"]["mcp_servers"][0]["name"], "files", "{shown}");
        // The fork's own agent process runs in the chosen mode, model and MCP servers.
        assert_eq!(
            state(&env, &agent, &["-s", "branch"]),
            "mode=plan; model=large; mcp=files"
        );
        assert_eq!(
            state(&env, &agent, &["--no-owner", "-s", "branch"]),
            "mode=plan; model=large; mcp=files"
        );
    }
}
