//! `--auth-policy skip|fail`, config `authPolicy` and `auth`, and `ACPX_AUTH_*` (Node acpx
//! 0.19.1's meaning, `docs/format.md` § Authentication), against the test agent's
//! `--require-auth` / `--advertise-auth`, with the session owner and with `--no-owner`, on
//! both stores.

use crate::common;

use common::process::{args, MODES};
use common::{Env, BACKENDS};
use serde_json::Value;

const ENV_KEY: &str = "ACPX_AUTH_TEST_KEY";

/// The session's lifecycle events with this phase.
fn lifecycle(env: &Env, agent: &str, phase: &str) -> Vec<Value> {
    env.run(&[
        "--format",
        "json",
        "--agent",
        agent,
        "sessions",
        "events",
        "--type",
        "lifecycle_event",
    ])
    .ok()
    .json_lines()
    .into_iter()
    .filter(|e| e["payload"]["phase"] == phase)
    .collect()
}

#[test]
fn fail_policy_without_credentials_exits_1_naming_the_variable() {
    for backend in BACKENDS {
        for mode in MODES {
            let mut env = Env::new(backend);
            let agent = env.agent_cmd("--require-auth test-key");
            // Nothing asked of the agent after initialize: exit 1, AUTH_REQUIRED, the env var.
            let r = env.run(&args(
                &agent,
                mode,
                &[
                    "--auth-policy",
                    "fail",
                    "--format",
                    "json",
                    "sessions",
                    "new",
                ],
            ));
            assert_eq!(r.code, 1, "{backend} {mode:?}: {r:?}");
            let e = r.json();
            assert_eq!(e["error"]["data"]["detailCode"], "AUTH_REQUIRED", "{e}");
            let msg = e["error"]["message"].as_str().unwrap_or_default();
            assert!(msg.contains(ENV_KEY) && msg.contains("test-key"), "{msg}");
            // Under skip the agent itself refuses the session: its own error, exit 1.
            let r = env.run(&args(&agent, mode, &["sessions", "new"]));
            assert_eq!(r.code, 1, "{r:?}");
            assert!(r.stderr.contains("Authentication required"), "{}", r.stderr);

            // With the credential in the environment, both policies authenticate.
            env.extra_env.push((ENV_KEY.into(), "s3cret".into()));
            env.run(&args(
                &agent,
                mode,
                &["--auth-policy", "fail", "sessions", "new"],
            ))
            .ok();
            let r = env
                .run(&args(
                    &agent,
                    mode,
                    &["--auth-policy", "fail", "--format", "quiet", "echo", "hi"],
                ))
                .ok();
            assert_eq!(r.stdout.trim(), "hi", "{r:?}");
            let auth = lifecycle(&env, &agent, "authenticated");
            // Through the owner the prompt runs in the agent `sessions new` authenticated
            // (it keeps its agent); in one process the prompt's agent authenticates again.
            let expected = if mode.is_empty() { 1 } else { 2 };
            assert_eq!(auth.len(), expected, "{backend} {mode:?}: {auth:?}");
            assert_eq!(auth[0]["payload"]["methodId"], "test-key");
            assert_eq!(auth[0]["payload"]["source"], "env");
            assert!(!auth[0].to_string().contains("s3cret"), "{auth:?}");

            // The stored session, reopened without credentials under fail: exit 1 again,
            // through the owner as without it.
            env.run(&args(&agent, mode, &["sessions", "close"])).ok();
            env.extra_env.clear();
            env.extra_env.push((ENV_KEY.into(), "s3cret".into()));
            // Stored without a warm agent, so the prompt below must reattach.
            env.run(&args(&agent, &["--no-owner"], &["sessions", "new"]))
                .ok();
            env.extra_env.clear();
            let r = env.run(&args(
                &agent,
                mode,
                &["--auth-policy", "fail", "--format", "json", "echo", "x"],
            ));
            assert_eq!(r.code, 1, "{backend} {mode:?}: {r:?}");
            assert!(r.stdout.contains("AUTH_REQUIRED"), "{r:?}");
            assert!(r.stdout.contains(ENV_KEY), "{r:?}");
        }
    }
}

#[test]
fn config_credentials_and_policy() {
    for backend in BACKENDS {
        for mode in MODES {
            let env = Env::new(backend);
            let config = env.home().join("config.json");
            // authPolicy from the config: fail.
            std::fs::write(&config, r#"{"authPolicy": "fail"}"#).unwrap();
            let agent = env.agent_cmd("--advertise-auth test-key");
            let r = env.run(&args(&agent, mode, &["sessions", "new"]));
            assert_eq!(r.code, 1, "{backend} {mode:?}: {r:?}");
            assert!(r.stderr.contains(ENV_KEY), "{}", r.stderr);
            // The flag wins over the config: skip goes on and says so in the log.
            env.run(&args(
                &agent,
                mode,
                &["--auth-policy", "skip", "sessions", "new"],
            ))
            .ok();
            let skipped = lifecycle(&env, &agent, "authentication_skipped");
            assert_eq!(skipped.len(), 1, "{skipped:?}");
            assert_eq!(skipped[0]["payload"]["authMethods"][0], "test-key");

            // A credential under `auth` authenticates, and reaches the agent's environment.
            std::fs::write(
                &config,
                r#"{"authPolicy": "fail", "auth": {"test-key": "from-config"}}"#,
            )
            .unwrap();
            let agent = env.agent_cmd("--require-auth test-key");
            env.run(&args(&agent, mode, &["sessions", "new"])).ok();
            let r = env
                .run(&args(&agent, mode, &["--format", "quiet", "echo", "ok"]))
                .ok();
            assert_eq!(r.stdout.trim(), "ok", "{r:?}");
            let auth = lifecycle(&env, &agent, "authenticated");
            assert!(!auth.is_empty(), "{backend} {mode:?}");
            assert!(
                auth.iter().all(|e| e["payload"]["source"] == "config"),
                "{auth:?}"
            );

            // A bad value: a config error (exit 1, as for every key), a usage error as a flag.
            std::fs::write(&config, r#"{"authPolicy": "never"}"#).unwrap();
            let r = env.run(&args(&agent, mode, &["sessions", "new"]));
            assert_eq!(r.code, 1, "{r:?}");
            assert!(r.stderr.contains("authPolicy"), "{r:?}");
            std::fs::write(&config, "{}").unwrap();
            let r = env.run(&args(
                &agent,
                mode,
                &["--auth-policy", "never", "sessions", "new"],
            ));
            assert_eq!(r.code, 2, "{r:?}");
        }
    }
}
