//! Flags scripts rely on (Node acpx's meanings): `--json-strict`, `--no-fs`, `--no-terminal`,
//! and `config init`, with the session owner and with `--no-owner`, on both stores.

use crate::common;

use common::process::{args, MODES};
use common::{Env, BACKENDS};

#[test]
fn json_strict_keeps_stderr_silent_and_needs_json() {
    for backend in BACKENDS {
        for mode in MODES {
            let env = Env::new(backend);
            let agent = env.agent_cmd("");
            // No session yet: the error is a JSON line, exit 4, and stderr stays empty.
            let r = env.run(&args(
                &agent,
                mode,
                &["--json-strict", "--format", "json", "hi"],
            ));
            assert_eq!(r.code, 4, "{r:?}");
            assert!(r.stderr.is_empty(), "{}", r.stderr);
            assert_eq!(r.json()["error"]["data"]["acpxCode"], "NO_SESSION");

            env.run(&args(&agent, mode, &["sessions", "new"])).ok();
            // `tools` normally prints `[tool]` and `[done]` notes on stderr.
            let r = env
                .run(&args(
                    &agent,
                    mode,
                    &["--json-strict", "--format", "json", "tools"],
                ))
                .ok();
            assert!(r.stderr.is_empty(), "{backend} {mode:?}: {}", r.stderr);
            let lines = r.json_lines();
            assert_eq!(lines.last().unwrap()["type"], "prompt_done");

            for bad in [
                vec!["--json-strict", "hi"],
                vec!["--json-strict", "--format", "json", "--verbose", "hi"],
            ] {
                let r = env.run(&args(&agent, mode, &bad));
                assert_eq!(r.code, 2, "{bad:?}: {r:?}");
            }
        }
    }
}

#[test]
fn no_fs_and_no_terminal_neither_advertise_nor_serve() {
    for backend in BACKENDS {
        for mode in MODES {
            let env = Env::new(backend);
            let agent = env.agent_cmd("");
            env.run(&args(&agent, mode, &["sessions", "new"])).ok();
            let file = env.cwd().join("notes.txt");
            std::fs::write(&file, "secret").unwrap();
            let path = file.to_str().unwrap();

            let r = env
                .run(&args(
                    &agent,
                    mode,
                    &["--format", "quiet", "read-file", path],
                ))
                .ok();
            assert!(r.stdout.contains("secret"), "{r:?}");
            let r = env
                .run(&args(
                    &agent,
                    mode,
                    &["--no-fs", "--format", "quiet", "read-file", path],
                ))
                .ok();
            assert!(!r.stdout.contains("secret"), "{r:?}");
            assert!(
                r.stdout.contains("acpx refused fs/read_text_file") && r.stdout.contains("--no-fs"),
                "{backend} {mode:?}: {r:?}"
            );

            let r = env
                .run(&args(
                    &agent,
                    mode,
                    &[
                        "--no-terminal",
                        "--approve-all",
                        "--format",
                        "quiet",
                        "terminal",
                        "echo",
                        "hi",
                    ],
                ))
                .ok();
            assert!(
                r.stdout.contains("acpx refused terminal/create")
                    && r.stdout.contains("--no-terminal"),
                "{backend} {mode:?}: {r:?}"
            );
            // And the next command without the flags has both again (the owner reattaches).
            let r = env
                .run(&args(
                    &agent,
                    mode,
                    &["--format", "quiet", "read-file", path],
                ))
                .ok();
            assert!(r.stdout.contains("secret"), "{r:?}");
        }
        // What `initialize` advertised (the agent says it on its stderr, shown by --verbose).
        let env = Env::new(backend);
        let agent = env.agent_cmd("");
        let r = env
            .run(&[
                "--agent",
                &agent,
                "--no-owner",
                "--verbose",
                "--no-fs",
                "--no-terminal",
                "sessions",
                "new",
            ])
            .ok();
        assert!(r.stderr.contains("read_text_file: false"), "{}", r.stderr);
        assert!(r.stderr.contains("terminal=false"), "{}", r.stderr);
    }
}

#[test]
fn config_init_writes_a_template_and_never_overwrites_silently() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let r = env.run(&["--format", "json", "config", "init"]).ok();
        let path = env.home().join("config.json");
        assert_eq!(r.json()["path"], path.to_str().unwrap());
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("\"// defaultAgent\""), "{text}");
        // The template loads without a warning and is what `config show` reads.
        let r = env.run(&["config", "show"]).ok();
        assert!(r.stderr.is_empty(), "{}", r.stderr);
        assert!(r.stdout.contains(path.to_str().unwrap()), "{}", r.stdout);

        std::fs::write(&path, "{\"ttl\": 5}").unwrap();
        let r = env.run(&["config", "init"]);
        assert_eq!(r.code, 2, "{r:?}");
        assert!(r.stderr.contains("--force"), "{}", r.stderr);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "{\"ttl\": 5}");
        env.run(&["config", "init", "--force"]).ok();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
    }
}

#[test]
fn permission_policy_rules_decide_before_the_mode() {
    for backend in BACKENDS {
        for mode in MODES {
            let env = Env::new(backend);
            let agent = env.agent_cmd("");
            env.run(&args(&agent, mode, &["sessions", "new"])).ok();
            let ask = |extra: &[&str], tool: &[&str]| {
                let mut a = args(&agent, mode, &["--format", "quiet"]);
                a.extend(extra);
                a.push("permission");
                a.extend(tool);
                env.run(&a)
            };
            // Without rules, approve-reads refuses an edit without a terminal (exit 5).
            let r = ask(&[], &["edit", "Edit", "README.md"]);
            assert_eq!(
                (r.code, r.stdout.as_str()),
                (5, "selected reject\n"),
                "{r:?}"
            );
            // A title word approves it (`--policy` is the alias).
            let r = ask(
                &["--policy", r#"{"autoApprove": ["readme.md"]}"#],
                &["edit", "Edit", "README.md"],
            );
            assert_eq!(
                (r.code, r.stdout.as_str()),
                (0, "selected allow\n"),
                "{r:?}"
            );
            // A kind denies a read that the mode would allow; deny beats approve.
            let r = ask(
                &[
                    "--permission-policy",
                    r#"{"autoApprove": ["*"], "autoDeny": ["read"]}"#,
                ],
                &["read", "Read", "x"],
            );
            assert_eq!(
                (r.code, r.stdout.as_str()),
                (5, "selected reject\n"),
                "{r:?}"
            );
            // defaultAction when nothing matches, even under --deny-all.
            let r = ask(
                &[
                    "--deny-all",
                    "--permission-policy",
                    r#"{"defaultAction": "approve"}"#,
                ],
                &["execute", "Run", "ls"],
            );
            assert_eq!(
                (r.code, r.stdout.as_str()),
                (0, "selected allow\n"),
                "{r:?}"
            );
            // Escalate needs a human: none here, so with `fail` the turn fails (exit 5).
            let r = ask(
                &[
                    "--approve-all",
                    "--non-interactive-permissions",
                    "fail",
                    "--policy",
                    r#"{"escalate": ["execute"]}"#,
                ],
                &["execute", "Run", "ls"],
            );
            assert_eq!(r.code, 5, "{r:?}");
            assert!(r.stderr.contains("no terminal to ask"), "{}", r.stderr);
            // The rule is recorded with the decision.
            let ops = env
                .run(&[
                    "--format",
                    "json",
                    "--agent",
                    &agent,
                    "sessions",
                    "events",
                    "--type",
                    "client_operation",
                ])
                .ok()
                .json_lines();
            assert!(
                ops.iter().any(|e| e["payload"]["rule"] == "escalate"),
                "{ops:?}"
            );

            // A policy file works too; bad rules are usage errors before anything is sent.
            let file = env.home().join("policy.json");
            std::fs::write(&file, r#"{"autoApprove": ["edit"]}"#).unwrap();
            let r = ask(
                &["--policy", file.to_str().unwrap()],
                &["edit", "Edit", "x"],
            );
            assert_eq!(r.code, 0, "{r:?}");
            let r = ask(
                &["--policy", r#"{"autoAprove": []}"#],
                &["edit", "Edit", "x"],
            );
            assert_eq!(r.code, 2, "{r:?}");
            assert!(r.stderr.contains("autoAprove"), "{}", r.stderr);
        }
    }
}

#[test]
fn exec_config_options_are_set_before_the_prompt() {
    let env = Env::new("fs");
    let agent = env.agent_cmd("");
    let r = env
        .run(&[
            "--agent",
            &agent,
            "--format",
            "quiet",
            "exec",
            "--config-option",
            "model=large",
            "state",
        ])
        .ok();
    assert_eq!(r.stdout, "mode=default; model=large; mcp=\n");
    // An option the session does not offer fails before the prompt, a usage error naming
    // the ones it does (exit 2, issue 51); a malformed one is a usage error too.
    let r = env.run(&[
        "--agent",
        &agent,
        "exec",
        "--config-option",
        "nope=1",
        "state",
    ]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr.contains("nope") && r.stderr.contains("model"),
        "{}",
        r.stderr
    );
    assert!(r.stdout.is_empty(), "{}", r.stdout);
    let r = env.run(&["--agent", &agent, "exec", "--config-option", "bad", "state"]);
    assert_eq!(r.code, 2, "{r:?}");
    // exec stores nothing.
    let list = env
        .run(&["--format", "json", "sessions", "list"])
        .ok()
        .json();
    assert_eq!(list["sessions"].as_array().unwrap().len(), 0, "{list}");
}

#[test]
fn prompt_retries_retry_only_transient_failures_before_any_update() {
    for backend in BACKENDS {
        for mode in MODES {
            let env = Env::new(backend);
            let agent = env.agent_cmd("");
            env.run(&args(&agent, mode, &["sessions", "new"])).ok();
            let ends = |env: &Env| {
                env.run(&["--format", "json", "--agent", &agent, "sessions", "events"])
                    .ok()
                    .json_lines()
                    .into_iter()
                    .filter(|e| e["type"] == "prompt_error" || e["type"] == "prompt_done")
                    .collect::<Vec<_>>()
            };
            // Two -32603 failures before any update, then an answer: 3 turns, exit 0, and
            // the JSON output shows every attempt up to the last turn's end.
            let r = env
                .run(&args(
                    &agent,
                    mode,
                    &["--format", "json", "--prompt-retries", "2", "flaky", "2"],
                ))
                .ok();
            let lines = r.json_lines();
            assert_eq!(
                lines.last().unwrap()["type"],
                "prompt_done",
                "{backend} {mode:?}"
            );
            assert_eq!(
                lines.iter().filter(|e| e["type"] == "prompt_error").count(),
                2,
                "{backend} {mode:?}"
            );
            let e = ends(&env);
            assert_eq!(e.len(), 3, "{e:?}");
            let ids: std::collections::HashSet<_> = e
                .iter()
                .map(|e| e["requestId"].as_str().unwrap().to_owned())
                .collect();
            assert_eq!(ids.len(), 3, "each attempt is a turn of its own");

            // A failure after an update is not retried, whatever --prompt-retries says.
            let r = env.run(&args(&agent, mode, &["--prompt-retries", "3", "error"]));
            assert_eq!(r.code, 1, "{r:?}");
            assert_eq!(ends(&env).len(), 4);
        }
    }
}
