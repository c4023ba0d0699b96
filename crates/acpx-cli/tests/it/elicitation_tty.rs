//! The agent's elicitations asked at a terminal (a pseudo-terminal from script(1)): a form
//! field by field (a bad value named and asked again, Enter takes the default), declined with
//! `:decline`, cancelled with Ctrl-D; a URL shown and confirmed with Enter, or its wait ended
//! by the agent's `elicitation/complete`; a URL of another scheme declined unasked; the
//! answers file winning over the terminal. With `--no-owner` (the command's own terminal) and
//! through the warm queue owner (forwarded to the submitting client's terminal), on both
//! stores, each answer checked in the record with who gave it, and in the viewer. A client
//! that goes away while asked: the owner answers by the non-interactive rule. Ctrl-C while
//! asked: the turn's cancel answers `cancel`.

use serde_json::{json, Value};

use crate::common;
use common::process::{args, kill, wait_for, MODES};
use common::terminal::Terminal;
use common::{Env, BACKENDS};

/// The session's recorded elicitation answers and completions, oldest first.
fn recorded(env: &Env, agent: &str) -> Vec<Value> {
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
    .map(|e| e["payload"].clone())
    .filter(|p| {
        p["method"]
            .as_str()
            .is_some_and(|m| m.starts_with("elicitation/"))
            && p["status"] == "completed"
    })
    .collect()
}

/// The session as the HTML viewer shows it (`sessions export --as html`).
fn viewer_page(env: &Env, agent: &str) -> String {
    let events = env
        .run(&["--format", "json", "--agent", agent, "sessions", "events"])
        .ok()
        .json_lines();
    let id = events[0]["acpxRecordId"].as_str().unwrap().to_owned();
    let out = env.home().join("page.html");
    env.run(&[
        "sessions",
        "export",
        &id,
        "--as",
        "html",
        "-o",
        out.to_str().unwrap(),
    ])
    .ok();
    std::fs::read_to_string(out).unwrap()
}

/// The last recorded answer to an `elicitation/create`.
fn last_answer(env: &Env, agent: &str) -> Value {
    recorded(env, agent)
        .into_iter()
        .rev()
        .find(|p| p["method"] == "elicitation/create")
        .expect("an answer is recorded")
}

#[test]
fn a_person_at_the_terminal_answers_forms_and_urls() {
    for backend in BACKENDS {
        for mode in MODES {
            let env = Env::new(backend);
            let agent = env.agent_cmd("");
            env.run(&args(&agent, mode, &["sessions", "new"])).ok();
            let person = if mode.is_empty() {
                "owner-forwarded"
            } else {
                "terminal"
            };
            let start = |rest: &[&str]| Terminal::start(&env, &args(&agent, mode, rest));
            let ctx = format!("{backend} {mode:?}");

            // A form, field by field: title, description, type, bounds, choices, default.
            let mut t = start(&["elicit", "rich"]);
            t.expect("[elicitation] Who are you?");
            t.expect("Profile");
            t.expect("? Name (`name`, string, required, at least 1 characters)");
            t.expect("Your full name");
            t.type_keys("Ada\n");
            t.expect("? Age (`age`, integer, required, 0 to 150)");
            t.type_keys("old\n");
            t.expect("! field `age`: `old` is not a whole number; try again");
            t.type_keys("200\n");
            t.expect("! field `age`: 200 is above the maximum 150; try again");
            t.type_keys("36\n");
            t.expect("? Colour (`colour`, one of the choices, optional, default red)");
            t.expect("2) blue (Blue)");
            t.type_keys("2\n");
            t.expect("? Subscribe (`subscribe`, yes/no, optional)");
            t.type_keys("\n");
            let (code, screen) = t.finish();
            assert_eq!(code, 0, "{ctx}: {screen}");
            assert!(
                screen.contains(r#"elicitation accept {"name":"Ada","age":36,"colour":"blue"}"#),
                "{ctx}: {screen}"
            );
            let a = last_answer(&env, &agent);
            assert_eq!(a["action"], "accept", "{ctx}: {a}");
            assert_eq!(a["answeredBy"], person, "{ctx}: {a}");
            assert_eq!(
                a["content"],
                json!({"name": "Ada", "age": 36, "colour": "blue"}),
                "{ctx}"
            );

            // Declined, and cancelled with Ctrl-D.
            for (keys, action) in [(":decline\n", "decline"), ("\x04", "cancel")] {
                let mut t = start(&["elicit"]);
                t.expect("? Name (`name`, string, required)");
                t.type_keys(keys);
                let (code, screen) = t.finish();
                assert_eq!(code, 0, "{ctx}: {screen}");
                assert!(
                    screen.contains(&format!("elicitation {action} null")),
                    "{ctx}: {screen}"
                );
                let a = last_answer(&env, &agent);
                assert_eq!(a["action"], action, "{ctx}: {a}");
                assert_eq!(a["answeredBy"], person, "{ctx}: {a}");
                assert!(a.get("content").is_none(), "{ctx}: {a}");
            }

            // A URL: shown, never opened; Enter says the visit is done.
            let mut t = start(&["elicit-url"]);
            t.expect("[elicitation] Sign in to continue");
            t.expect("https://example.com/authorize?session=1");
            t.expect("Press Enter when you are done");
            t.type_keys("\n");
            let (code, screen) = t.finish();
            assert_eq!(code, 0, "{ctx}: {screen}");
            assert!(screen.contains("elicitation accept"), "{ctx}: {screen}");
            let a = last_answer(&env, &agent);
            assert_eq!(
                (&a["action"], &a["mode"]),
                (&json!("accept"), &json!("url"))
            );
            assert_eq!(a["answeredBy"], person, "{ctx}: {a}");

            // ... or the agent's elicitation/complete ends the wait, nothing typed.
            let mut t = start(&["elicit-url", "complete"]);
            t.expect("Press Enter when you are done");
            t.expect("[elicitation] no answer needed any more");
            let (code, screen) = t.finish();
            assert_eq!(code, 0, "{ctx}: {screen}");
            assert!(screen.contains("elicitation accept"), "{ctx}: {screen}");
            let a = last_answer(&env, &agent);
            assert_eq!(a["action"], "accept", "{ctx}: {a}");
            assert_eq!(a["answeredBy"], "agent-complete", "{ctx}: {a}");
            let complete = recorded(&env, &agent)
                .into_iter()
                .rfind(|p| p["method"] == "elicitation/complete")
                .expect("the completion is recorded");
            assert_eq!(complete["params"]["elicitationId"], "url-1", "{ctx}");
            assert_eq!(complete["endedWait"], true, "{ctx}: {complete}");

            // A URL that is not http(s): declined without asking anyone.
            let mut t = start(&["elicit-url", "file:///etc/passwd"]);
            let (code, screen) = {
                t.expect("elicitation decline");
                t.finish()
            };
            assert_eq!(code, 0, "{ctx}: {screen}");
            assert!(!screen.contains("Press Enter"), "{ctx}: {screen}");
            let a = last_answer(&env, &agent);
            assert_eq!(a["answeredBy"], "acpx", "{ctx}: {a}");
            assert!(
                a["details"]
                    .as_str()
                    .unwrap_or("")
                    .contains("scheme is `file`"),
                "{ctx}: {a}"
            );

            // The answers file wins over the terminal (scripts).
            let file = env.home().join("answers.json");
            std::fs::write(&file, r#"{"name": "Grace"}"#).unwrap();
            let file_arg = file.to_str().unwrap();
            let t = start(&["--elicitation-answers", file_arg, "elicit"]);
            let (code, screen) = t.finish();
            assert_eq!(code, 0, "{ctx}: {screen}");
            assert!(!screen.contains("? Name"), "not asked: {ctx}: {screen}");
            assert!(
                screen.contains(r#"elicitation accept {"name":"Grace"}"#),
                "{ctx}: {screen}"
            );
            assert_eq!(last_answer(&env, &agent)["answeredBy"], "answers-file");

            // The viewer shows each question and its answer.
            let page = viewer_page(&env, &agent);
            for shown in [
                "Who are you? — form: name*, age*, colour, subscribe",
                &format!(
                    "accept by {person} {{&quot;name&quot;:&quot;Ada&quot;,&quot;age&quot;:36"
                ),
                &format!("decline by {person}"),
                "Sign in to continue — URL https://example.com/authorize?session=1",
                "accept by agent-complete",
                "url-1 (ended the wait for the person)",
                "decline by acpx: acpx takes only http and https URLs",
                "accept by answers-file",
            ] {
                assert!(page.contains(shown), "{ctx}: {shown} is not in the viewer");
            }
        }
    }
}

/// A client that goes away while its user is asked: the owner no longer has anyone to ask,
/// and the non-interactive rule answers (decline; cancel and a failed turn under `fail`).
#[test]
fn a_client_gone_while_asked_leaves_the_answer_to_the_non_interactive_rule() {
    for backend in BACKENDS {
        for (rule, action) in [("deny", "decline"), ("fail", "cancel")] {
            let env = Env::new(backend);
            let agent = env.agent_cmd("");
            env.run(&["--agent", &agent, "sessions", "new"]).ok();
            let mut t = Terminal::start(
                &env,
                &[
                    "--agent",
                    &agent,
                    "--non-interactive-permissions",
                    rule,
                    "elicit-url",
                ],
            );
            t.expect("Press Enter when you are done");
            kill(t.acpx_pid(), libc::SIGKILL);
            let _ = t.finish();
            wait_for("the owner's answer", || {
                recorded(&env, &agent)
                    .iter()
                    .any(|p| p["method"] == "elicitation/create")
            });
            let a = last_answer(&env, &agent);
            assert_eq!(a["action"], action, "{backend} {rule}: {a}");
            assert_eq!(a["answeredBy"], "non-interactive", "{backend} {rule}: {a}");
            env.run(&["--agent", &agent, "sessions", "close"]);
        }
    }
}

/// Ctrl-C while a form is asked cancels the turn, and the cancel answers the open elicitation
/// `cancel` (as it answers an open permission question), in one process and through the owner.
#[test]
fn an_interrupt_while_asked_cancels_the_elicitation() {
    for mode in MODES {
        let env = Env::new("fs");
        let agent = env.agent_cmd("");
        env.run(&args(&agent, mode, &["sessions", "new"])).ok();
        let mut t = Terminal::start(&env, &args(&agent, mode, &["elicit"]));
        t.expect("? Name (`name`, string, required)");
        kill(t.acpx_pid(), libc::SIGINT);
        let (code, screen) = t.finish();
        assert!([0, 130].contains(&code), "{mode:?}: {code} {screen}");
        let a = last_answer(&env, &agent);
        assert_eq!(a["action"], "cancel", "{mode:?}: {a}");
        assert_eq!(a["answeredBy"], "cancelled-turn", "{mode:?}: {a}");
        assert!(
            screen.contains("[elicitation] no answer needed any more"),
            "{mode:?}: {screen}"
        );
    }
}
