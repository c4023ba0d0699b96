//! End to end, every step a separate `acpx` process: the fallback notice (one-process path;
//! through the queue owner see `owner_choices.rs`), and — through the queue owner — exit 5 for
//! refused permissions (the agent's and acpx's own gates), `--non-interactive-permissions
//! fail`, `--mcp-config` in both shapes and a bad file, on both stores.
use crate::common;

use common::*;

fn new_session(env: &Env, agent: &str, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["--format", "json", "--agent", agent];
    args.extend(extra);
    args.extend(["sessions", "new"]);
    env.run(&args).ok().json()
}

#[test]
fn a_fallback_is_said_on_stderr_and_in_json() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let agent = env.agent_cmd("");
        new_session(&env, &agent, &[]);
        let r = env
            .run(&["--no-owner", "--agent", &agent, "echo", "hi"])
            .ok();
        let lines: Vec<_> = r
            .stderr
            .lines()
            .filter(|l| l.starts_with("[acpx] the agent could not restore ACP session"))
            .collect();
        assert_eq!(lines.len(), 1, "{}", r.stderr);
        assert!(
            lines[0].contains("the agent supports neither session/resume nor session/load")
                && lines[0].contains("the agent does not remember earlier turns"),
            "{}",
            lines[0]
        );
        let m = env
            .run(&[
                "--no-owner",
                "--format",
                "json",
                "--agent",
                &agent,
                "set-mode",
                "plan",
            ])
            .ok()
            .json();
        assert_eq!(m["action"], "mode_set");
        assert!(
            m["sessionFallback"]["previousAcpSessionId"].is_string(),
            "{m}"
        );
        assert!(m["sessionFallback"]["failedAttempts"].is_array(), "{m}");
        // Under same-session-only the command fails instead.
        let r = env.run(&[
            "--no-owner",
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

#[test]
fn refused_permissions_exit_5() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        // The agent ends a refused turn with stopReason cancelled, as codex does.
        let agent = env.agent_cmd("--cancel-on-deny");
        new_session(&env, &agent, &[]);
        let r = env.run(&["--deny-all", "--agent", &agent, "permission", "edit"]);
        assert_eq!(r.code, 5, "{r:?}");
        // acpx's own write gate.
        let target = env.cwd().join("x.txt").display().to_string();
        let r = env.run(&[
            "--deny-all",
            "--agent",
            &agent,
            "write-direct",
            &target,
            "x",
        ]);
        assert_eq!(r.code, 5, "{r:?}");
        assert!(!env.cwd().join("x.txt").exists());
        // No terminal to ask, under fail.
        let r = env.run(&[
            "--format",
            "json",
            "--non-interactive-permissions",
            "fail",
            "--agent",
            &agent,
            "permission",
            "execute",
        ]);
        assert_eq!(r.code, 5, "{r:?}");
        assert!(
            r.stdout.contains("PERMISSION_PROMPT_UNAVAILABLE"),
            "{}",
            r.stdout
        );
    }
}

#[test]
fn mcp_config_in_both_shapes_and_a_bad_file() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let agent = env.agent_cmd(&format!(
            "--load --state-dir {}",
            env.home().join("agent").display()
        ));
        let common = env.home().join("mcp.json");
        std::fs::write(
            &common,
            r#"{"mcpServers": {"files": {"command": "/bin/true", "args": [], "env": {"K": "v"}}}}"#,
        )
        .unwrap();
        let common_s = common.display().to_string();
        new_session(&env, &agent, &["--mcp-config", &common_s]);
        let r = env
            .run(&["--format", "quiet", "--agent", &agent, "state"])
            .ok();
        assert!(r.stdout.trim_end().ends_with("mcp=files"), "{}", r.stdout);
        let acp = env.home().join("acp.json");
        std::fs::write(
            &acp,
            r#"[{"name": "other", "command": "/bin/true", "args": [], "env": []}]"#,
        )
        .unwrap();
        let acp_s = acp.display().to_string();
        let r = env
            .run(&[
                "--format",
                "quiet",
                "--mcp-config",
                &acp_s,
                "--agent",
                &agent,
                "state",
            ])
            .ok();
        assert!(r.stdout.trim_end().ends_with("mcp=other"), "{}", r.stdout);
        let r = env
            .run(&["--format", "quiet", "--agent", &agent, "state"])
            .ok();
        assert!(
            r.stdout.trim_end().ends_with("mcp=other"),
            "the stored list: {}",
            r.stdout
        );
        let bad = env.home().join("bad.json");
        std::fs::write(&bad, r#"{"mcpServers": {"x": {"command": 3}}}"#).unwrap();
        let bad_s = bad.display().to_string();
        let r = env.run(&["--mcp-config", &bad_s, "--agent", &agent, "state"]);
        assert_eq!(r.code, 2, "{r:?}");
        assert!(
            r.stderr.contains("bad.json") && r.stderr.contains("mcpServers.x.command"),
            "{}",
            r.stderr
        );
    }
}
