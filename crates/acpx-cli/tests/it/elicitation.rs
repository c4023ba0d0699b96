//! The agent's form elicitations (`elicitation/create`): answered from
//! `--elicitation-answers` (checked against the form), declined without answers and without a
//! terminal, and failing the turn (exit 5) under `--non-interactive-permissions fail`; each is
//! recorded as a `client_operation`. With the session owner and with `--no-owner`, on both
//! stores.

use crate::common;

use common::process::{args, MODES};
use common::{Env, BACKENDS};
use serde_json::Value;

/// The recorded answers (`client_operation`s of `elicitation/create` that are done).
fn answers(env: &Env, agent: &str) -> Vec<Value> {
    env.run(&[
        "--format",
        "json",
        "--agent",
        agent,
        "sessions",
        "events",
        "--type",
        "client_operation",
    ])
    .ok()
    .json_lines()
    .into_iter()
    .filter(|e| e["payload"]["method"] == "elicitation/create")
    .collect()
}

#[test]
fn form_elicitations_are_answered_from_the_answers_file_or_declined() {
    for backend in BACKENDS {
        for mode in MODES {
            let env = Env::new(backend);
            let agent = env.agent_cmd("");
            env.run(&args(&agent, mode, &["sessions", "new"])).ok();
            let file = env.home().join("answers.json");
            let file_arg = file.to_str().unwrap().to_owned();
            let elicit = |extra: &[&str]| {
                let mut a = args(&agent, mode, &["--format", "quiet"]);
                a.extend(extra);
                a.push("elicit");
                env.run(&a)
            };

            // Answered: the form's fields go back as the content, other answers stay out.
            std::fs::write(&file, r#"{"name": "Ada", "age": 36, "colour": "red"}"#).unwrap();
            let r = elicit(&["--elicitation-answers", &file_arg]).ok();
            let reply = r.stdout.trim();
            assert!(reply.starts_with("elicitation accept {"), "{reply}");
            let content: Value =
                serde_json::from_str(&reply["elicitation accept ".len()..]).unwrap();
            assert_eq!(content, serde_json::json!({"name": "Ada", "age": 36}));
            let ops = answers(&env, &agent);
            let asked = &ops[ops.len() - 2]["payload"];
            assert_eq!(asked["status"], "running", "{asked}");
            assert_eq!(asked["params"]["message"], "Who are you?", "{asked}");
            assert_eq!(asked["params"]["mode"], "form", "{asked}");
            let done = &ops[ops.len() - 1]["payload"];
            assert_eq!(done["action"], "accept", "{done}");
            assert_eq!(done["content"]["name"], "Ada", "{done}");

            // A required field without an answer, or an answer of the wrong type: declined,
            // and the record says why.
            for (bad, why) in [
                (r#"{"age": 3}"#, "the required field `name` has no answer"),
                (
                    r#"{"name": "Ada", "age": "old"}"#,
                    "field `age`: expected an integer",
                ),
            ] {
                std::fs::write(&file, bad).unwrap();
                let r = elicit(&["--elicitation-answers", &file_arg]).ok();
                assert_eq!(
                    r.stdout.trim(),
                    "elicitation decline null",
                    "{backend} {mode:?}"
                );
                let ops = answers(&env, &agent);
                let done = &ops[ops.len() - 1]["payload"];
                assert_eq!(done["action"], "decline", "{done}");
                assert!(
                    done["details"].as_str().unwrap_or("").contains(why),
                    "{done}"
                );
            }

            // No answers and no terminal: declined.
            let r = elicit(&[]).ok();
            assert_eq!(r.stdout.trim(), "elicitation decline null");
            let ops = answers(&env, &agent);
            assert_eq!(ops[ops.len() - 1]["payload"]["action"], "decline");

            // ... or, under `--non-interactive-permissions fail`, the turn fails (exit 5).
            let r = elicit(&["--non-interactive-permissions", "fail"]);
            assert_eq!(r.code, 5, "{r:?}");
            assert!(r.stderr.contains("no terminal to ask"), "{}", r.stderr);
            let ops = answers(&env, &agent);
            assert_eq!(ops[ops.len() - 1]["payload"]["action"], "cancel");
        }
    }
}

#[test]
fn an_answers_file_that_is_not_a_json_object_is_a_usage_error() {
    let env = Env::new("fs");
    let agent = env.agent_cmd("");
    let file = env.home().join("answers.json");
    for (text, says) in [
        ("[1]", "must hold a JSON object"),
        ("{", "is not valid JSON"),
    ] {
        std::fs::write(&file, text).unwrap();
        let r = env.run(&[
            "--agent",
            &agent,
            "--elicitation-answers",
            file.to_str().unwrap(),
            "elicit",
        ]);
        assert_eq!(r.code, 2, "{r:?}");
        assert!(r.stderr.contains(says), "{}", r.stderr);
    }
    let r = env.run(&[
        "--agent",
        &agent,
        "--elicitation-answers",
        "/nonexistent/a.json",
        "elicit",
    ]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("cannot read"), "{}", r.stderr);
}
