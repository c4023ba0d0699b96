//! The strict grammar: an unknown option, wherever it stands, is a usage error (exit 2, a
//! "did you mean" tip, the JSON error object under `--format json`) and nothing reaches the
//! agent; `--` lets prompt text start with a dash.

use crate::common;

use common::{Env, BACKENDS};

/// How many events the session's log holds.
fn event_count(env: &Env, agent: &str) -> usize {
    env.run(&["--format", "json", "--agent", agent, "sessions", "events"])
        .ok()
        .json_lines()
        .len()
}

#[test]
fn unknown_options_are_usage_errors_and_reach_no_agent() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let agent = env.agent_cmd("");
        env.run(&["--agent", &agent, "sessions", "new"]).ok();
        let before = event_count(&env, &agent);

        for (args, suggestion) in [
            (vec!["--formt", "json", "prompt", "hi"], Some("--format")),
            (vec!["prompt", "--formt", "json", "hi"], Some("--format")),
            (vec!["prompt", "hi", "--formt", "json"], Some("--format")),
            (vec!["--formt", "json", "hi"], Some("--format")),
            (vec!["--verbos", "hi"], Some("--verbose")),
            (vec!["prompt", "--sesion", "x", "hi"], Some("--session")),
            (vec!["-x", "hi"], None),
            (vec!["--ttl", "30", "sessions", "close", "--bogus"], None),
            (vec!["exec", "--bogus", "hi"], None),
        ] {
            let mut full = vec!["--agent", agent.as_str()];
            full.extend(&args);
            let r = env.run(&full);
            assert_eq!(r.code, 2, "{args:?}: {r:?}");
            assert!(r.stdout.is_empty(), "{args:?}: {}", r.stdout);
            assert!(
                r.stderr.contains("unexpected argument"),
                "{args:?}: {}",
                r.stderr
            );
            if let Some(s) = suggestion {
                assert!(
                    r.stderr
                        .contains(&format!("similar argument exists: '{s}'")),
                    "{args:?}: {}",
                    r.stderr
                );
            }

            let mut json = vec!["--format", "json"];
            json.extend(&full);
            let r = env.run(&json);
            assert_eq!(r.code, 2, "{json:?}: {r:?}");
            let e = r.json();
            assert_eq!(e["error"]["code"], -32602, "{e}");
            assert_eq!(e["error"]["data"]["acpxCode"], "USAGE", "{e}");
            if let Some(s) = suggestion {
                let hint = e["error"]["data"]["hint"].as_str().unwrap_or_default();
                assert!(hint.contains(s), "{e}");
            }
        }
        assert_eq!(
            event_count(&env, &agent),
            before,
            "a usage error reached the agent"
        );

        // The session is still open: `--ttl 30 sessions close --bogus` closed nothing.
        let st = env
            .run(&["--format", "json", "--agent", &agent, "sessions", "show"])
            .ok()
            .json();
        assert_eq!(st["closed"], false, "{st}");
    }
}

#[test]
fn double_dash_lets_prompt_text_start_with_a_dash() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let agent = env.agent_cmd("");
        env.run(&["--agent", &agent, "sessions", "new"]).ok();
        let r = env
            .run(&["--agent", &agent, "prompt", "--", "echo", "-v", "--x"])
            .ok();
        assert_eq!(r.stdout, "-v --x\n", "{r:?}");
        let r = env.run(&["--agent", &agent, "--", "echo", "-n"]).ok();
        assert_eq!(r.stdout, "-n\n", "{r:?}");
        // Command options follow their command; global options go anywhere, words stay text.
        let r = env
            .run(&[
                "--agent", &agent, "prompt", "echo", "a-b", "--format", "quiet",
            ])
            .ok();
        assert_eq!(r.stdout, "a-b\n", "{r:?}");
        // The default-command form stays.
        let r = env.run(&["--agent", &agent, "echo", "hello", "there"]).ok();
        assert_eq!(r.stdout, "hello there\n", "{r:?}");
    }
}

/// A command word after prompt options given first (`acpx -s api status`) runs that command
/// with them: the agent is not sent "status" as a prompt. `--` keeps it prompt text.
#[test]
fn a_command_after_leading_prompt_options_is_the_command() {
    let env = Env::new("fs");
    let agent = env.agent_cmd("");
    env.run(&["--agent", &agent, "sessions", "new", "--name", "api"])
        .ok();
    let before = event_count_named(&env, &agent, "api");
    let r = env.run(&["--agent", &agent, "-s", "api", "status"]).ok();
    assert!(
        // `sessions new` left the session's owner warm: alive.
        r.stdout.contains("api") || r.stdout.contains("idle") || r.stdout.contains("alive"),
        "{r:?}"
    );
    let r = env
        .run(&["--agent", &agent, "-s", "api", "set-mode", "code"])
        .ok();
    assert!(
        r.stdout.contains("code") || r.stderr.contains("code"),
        "{r:?}"
    );
    let after = event_count_named(&env, &agent, "api");
    let events = env
        .run(&[
            "--format", "json", "--agent", &agent, "sessions", "events", "-s", "api",
        ])
        .ok()
        .json_lines();
    assert!(
        !events.iter().any(|e| e["type"] == "prompt_started"),
        "{before} → {after}: a prompt was sent"
    );
    env.run(&["--agent", &agent, "-s", "api", "--", "status"])
        .ok();
    let events = env
        .run(&[
            "--format", "json", "--agent", &agent, "sessions", "events", "-s", "api",
        ])
        .ok()
        .json_lines();
    assert!(events.iter().any(|e| e["type"] == "prompt_started"));
}

fn event_count_named(env: &Env, agent: &str, name: &str) -> usize {
    env.run(&[
        "--format", "json", "--agent", agent, "sessions", "events", "-s", name,
    ])
    .ok()
    .json_lines()
    .len()
}
