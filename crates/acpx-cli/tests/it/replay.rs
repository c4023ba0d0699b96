//! `acpx replay`, `sessions diff`, `compare` and `serve-agent` (issue 47, items 3 and 4), on
//! the fs and SQLite backends, with real `acpx` processes and the scripted test agent; and
//! `serve-agent` driven by a client nobody here wrote, the TypeScript SDK's
//! `ClientSideConnection` (scripts/peers/ts_client_serve_agent.mjs). When node or the SDK
//! (installed by scripts/install-interop-peer.sh) is missing, that test fails under `CI=true`
//! and is skipped (with a message) otherwise.
use crate::common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use common::*;
use serde_json::{json, Value};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// One `--no-owner` prompt of `agent` in the project's unnamed session, with `policy` flags.
fn prompt(env: &Env, agent: &str, policy: &[&str], text: &str) -> Run {
    let mut args = vec!["--no-owner", "--agent", agent];
    args.extend_from_slice(policy);
    args.extend_from_slice(&["prompt", "--", text]);
    env.run(&args)
}

/// A source session: a read and a failed search, a question approved, a question refused,
/// thinking, and usage with a cost.
fn source(env: &Env) -> (String, String) {
    let agent = env.agent_cmd("");
    let id = env.new_session(&agent);
    prompt(env, &agent, &[], "tools").ok();
    let approved = prompt(
        env,
        &agent,
        &["--approve-all"],
        "permission execute Run tests",
    )
    .ok();
    assert!(approved.stdout.contains("selected allow"), "{approved:?}");
    // A refused question fails the command (exit 5); the turn is recorded all the same.
    let refused = prompt(env, &agent, &["--deny-all"], "permission edit Edit main.rs");
    assert_eq!(refused.code, 5, "{refused:?}");
    assert!(refused.stdout.contains("selected reject"), "{refused:?}");
    prompt(env, &agent, &[], "think 2").ok();
    prompt(env, &agent, &[], "usage").ok();
    (id, agent)
}

/// The session.json of `id` (with its `acpx` namespace).
fn document(env: &Env, id: &str) -> Value {
    let out = env
        .run(&["sessions", "export", "--as", "json", id])
        .ok()
        .stdout;
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("not a session.json: {e}: {out}"))
}

/// The permission decisions of a session's log, in order.
fn decisions(env: &Env, id: &str) -> Vec<(String, Option<bool>)> {
    env.run(&[
        "--format",
        "json",
        "sessions",
        "events",
        id,
        "--type",
        "client_operation",
    ])
    .ok()
    .json_lines()
    .into_iter()
    .filter(|e| e["payload"]["status"] == "completed")
    .map(|e| {
        (
            e["payload"]["decision"].as_str().unwrap_or("").to_owned(),
            e["payload"]["recorded"].as_bool(),
        )
    })
    .collect()
}

#[test]
fn replay_sends_the_prompts_and_answers_as_the_source_did() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let (src, agent) = source(&env);
        // Without a terminal the default policy refuses every question; the recorded answers
        // approve the first one and refuse the second, as in the source.
        let replayed = env.run(&["--format", "json", "replay", &src]).ok().json();
        assert_eq!(replayed["action"], "replayed", "{backend}: {replayed}");
        assert_eq!(replayed["replayOf"], json!(src));
        assert_eq!(replayed["turns"], 5);
        assert_eq!(replayed["answersFromSource"], 2);
        assert_eq!(replayed["agentCommand"], json!(agent));
        let new = replayed["acpxRecordId"].as_str().unwrap().to_owned();
        assert_ne!(new, src);
        let doc = document(&env, &new);
        assert_eq!(doc["acpx"]["replayOf"], json!(src), "{backend}");
        assert_eq!(doc["closed"], true, "a replay is a finished run");
        assert_eq!(
            decisions(&env, &new),
            vec![
                ("approved".to_owned(), Some(true)),
                ("denied".to_owned(), Some(true))
            ],
            "{backend}"
        );
        // The same agent gave the same turns: nothing differs but the time.
        let diff = env
            .run(&["--format", "json", "sessions", "diff", &src, &new])
            .ok()
            .json();
        assert_eq!(diff["differs"], false, "{backend}: {diff}");
        let turns = diff["turns"].as_array().unwrap();
        assert_eq!(turns.len(), 5);
        assert_eq!(turns[0]["a"]["toolCalls"], turns[0]["b"]["toolCalls"]);
        assert_eq!(turns[0]["b"]["toolCalls"][0]["title"], "Read README.md");
        assert_eq!(turns[1]["b"]["reply"], "selected allow");
        assert_eq!(turns[2]["b"]["reply"], "selected reject");
        assert_eq!(turns[4]["b"]["tokens"], 150);
        assert_eq!(
            turns[4]["b"]["cost"],
            json!({"amount": 0.01, "currency": "USD"})
        );
        assert!(turns[4]["b"]["wallMs"].is_number());
        // Text: one line per turn, what differs (nothing), no colour off a terminal.
        let text = env.run(&["sessions", "diff", &src, &new]).ok().stdout;
        assert!(
            text.contains("turn 2  same  \"permission execute Run tests\""),
            "{text}"
        );
        assert!(text.contains("0 of 5 turns differ"), "{text}");
        assert!(!text.contains('\x1b'), "{text}");
    }
}

#[test]
fn replay_until_n_to_another_agent_and_its_text_output() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let (src, _) = source(&env);
        let other = env.agent_cmd("--cancel-on-deny");
        let run = env
            .run(&["--agent", &other, "replay", &src, "--until", "3"])
            .ok();
        let new = run.stdout.trim().to_owned();
        assert!(run.stderr.contains("[replay] turn 3"), "{run:?}");
        assert!(!run.stderr.contains("[replay] turn 4"), "{run:?}");
        let doc = document(&env, &new);
        assert_eq!(doc["agentCommand"], json!(other), "{backend}");
        assert_eq!(doc["acpx"]["replayOf"], json!(src));
        // The other agent ends a refused turn with `cancelled`, and two turns are missing.
        let diff = env
            .run(&["--format", "json", "sessions", "diff", &src, &new])
            .ok()
            .json();
        let turns = diff["turns"].as_array().unwrap();
        assert_eq!(turns[2]["differences"], json!(["stopReason"]), "{diff}");
        assert_eq!(turns[2]["b"]["stopReason"], "cancelled");
        assert_eq!(turns[3]["differences"], json!(["missing"]));
        assert_eq!(turns[3]["b"], Value::Null);
        assert_eq!(diff["differs"], true);
        let text = env.run(&["sessions", "diff", &src, &new]).ok().stdout;
        assert!(text.contains("turn 3  differs"), "{text}");
        assert!(text.contains("stop reason  A end_turn"), "{text}");
        assert!(text.contains("B cancelled"), "{text}");
        assert!(text.contains("B has no turn 4"), "{text}");
        // Bad input is a usage error naming what is wrong.
        let bad = env.run(&["replay", &src, "--until", "0"]);
        assert_eq!(bad.code, 2, "{bad:?}");
        let missing = env.run(&["replay", "no-such-session"]);
        assert_eq!(missing.code, 4, "{missing:?}");
    }
}

#[test]
fn ctrl_c_cancels_the_replayed_turn_and_sends_no_more() {
    use common::process::{finish, kill_child, spawn, wait_for};
    let env = Env::new("fs");
    let agent = env.agent_cmd("");
    let src = env.new_session(&agent);
    prompt(&env, &agent, &[], "slow 60").ok();
    prompt(&env, &agent, &[], "echo never sent").ok();
    let child = spawn(&env, &["replay", &src]);
    // The replay's session exists and its turn runs: its log has the prompt and an update.
    let mut new = String::new();
    wait_for("the replayed turn to start", || {
        let list = env.run(&["--format", "json", "sessions", "list"]).json();
        let Some(id) = list["sessions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s["acpxRecordId"].as_str())
            .find(|id| *id != src)
        else {
            return false;
        };
        new = id.to_owned();
        let events = env
            .run(&[
                "--format",
                "json",
                "sessions",
                "events",
                id,
                "--type",
                "session_update",
            ])
            .json_lines();
        events.len() >= 3
    });
    kill_child(&child, libc::SIGINT);
    let run = finish(child);
    assert_eq!(run.code, 130, "{run:?}");
    assert_eq!(run.stdout.trim(), new, "the new record id is printed first");
    let doc = document(&env, &new);
    assert_eq!(doc["closed"], true);
    assert_eq!(
        doc["acpx"]["last_turn"]["stop_reason"], "cancelled",
        "{doc}"
    );
    let diff = env
        .run(&["--format", "json", "sessions", "diff", &src, &new])
        .ok()
        .json();
    assert_eq!(
        diff["b"]["turns"], 1,
        "the second prompt was not sent: {diff}"
    );
}

#[test]
fn compare_runs_each_agent_in_a_stored_session() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let plain = env.agent_cmd("");
        let loads = env.agent_cmd("--load");
        let json = env
            .run(&[
                "--format",
                "json",
                "compare",
                "usage",
                "--agent",
                &plain,
                "--agent",
                &loads,
                "--agent",
                "/nonexistent/agent --acp",
            ])
            .ok()
            .json();
        assert_eq!(json["action"], "compared", "{backend}: {json}");
        let runs = json["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 3);
        for (run, agent) in runs.iter().zip([&plain, &loads]) {
            assert_eq!(run["agent"], json!(agent));
            assert_eq!(run["stopReason"], "end_turn", "{run}");
            assert_eq!(run["tokens"], 150);
            assert_eq!(run["cost"], json!({"amount": 0.01, "currency": "USD"}));
            let id = run["acpxRecordId"].as_str().unwrap();
            let doc = document(&env, id);
            assert_eq!(doc["agentCommand"], json!(agent));
            assert_eq!(doc["closed"], true);
        }
        assert_eq!(runs[2]["acpxRecordId"], Value::Null);
        assert!(runs[2]["error"].as_str().is_some(), "{}", runs[2]);
        // The table: a header row, the columns aligned.
        let text = env
            .run(&["compare", "echo hi", "--agent", &plain, "--agent", &loads])
            .ok()
            .stdout;
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(lines[0].starts_with("AGENT"), "{text}");
        let col = lines[0].find("RECORD ID").unwrap();
        for l in &lines[1..] {
            assert!(l.contains("end_turn"), "{text}");
            assert!(
                l[col..].trim().len() >= 36,
                "a record id under RECORD ID: {text}"
            );
        }
        // Its agents come from --agent only.
        let positional = env.run(&["demo", "compare", "hi"]);
        assert_eq!(positional.code, 2, "{positional:?}");
        let none = env.run(&["compare", "hi"]);
        assert_eq!(none.code, 2, "{none:?}");
        assert!(none.stderr.contains("--agent"), "{none:?}");
    }
}

/// `acpx serve-agent SRC` on this env's home and store, as an agent command line.
fn served(env: &Env, src: &str, fast: bool) -> String {
    format!(
        "{} --home {} --store {} serve-agent {src}{}",
        acpx_bin().display(),
        env.home().display(),
        env.backend,
        if fast { " --fast" } else { "" }
    )
}

#[test]
fn serve_agent_plays_a_recording_back_to_acpx() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let (src, _) = source(&env);
        // acpx as the client: a new session of the served recording, its prompts in order,
        // through the session's queue owner (one serve-agent process for all of them: the
        // recorded agent cannot load a session, so a new process would not know where the
        // last one got to).
        let agent = served(&env, &src, true);
        let new = env.new_session(&agent);
        for (text, policy) in [
            ("tools", "--approve-reads"),
            ("permission execute Run tests", "--approve-all"),
            ("permission edit Edit main.rs", "--approve-all"),
            ("think 2", "--approve-reads"),
            ("usage", "--approve-reads"),
        ] {
            env.run(&["--agent", &agent, policy, "prompt", "--", text])
                .ok();
        }
        env.run(&["--agent", &agent, "sessions", "close"]).ok();
        let diff = env
            .run(&["--format", "json", "sessions", "diff", &src, &new])
            .ok()
            .json();
        assert_eq!(diff["differs"], false, "{backend}: {diff}");
        // The recorded agent's capabilities and name.
        let doc = document(&env, &new);
        assert_eq!(
            doc["agentCapabilities"],
            document(&env, &src)["agentCapabilities"]
        );
        // Whatever the client answered, the recording goes on: the question approved here
        // was refused in the source, and the reply is still the source's.
        let events = env
            .run(&[
                "--format",
                "json",
                "sessions",
                "events",
                &new,
                "--type",
                "client_operation",
            ])
            .ok()
            .json_lines();
        assert!(events
            .iter()
            .any(|e| e["payload"]["decision"] == "approved"));
        // Another prompt: a JSON-RPC error naming the one expected.
        let fresh = served(&env, &src, true);
        env.run(&[
            "--no-owner",
            "--agent",
            &fresh,
            "sessions",
            "new",
            "-s",
            "wrong",
        ])
        .ok();
        let wrong = env.run(&[
            "--format",
            "json",
            "--no-owner",
            "--agent",
            &fresh,
            "prompt",
            "-s",
            "wrong",
            "not recorded",
        ]);
        assert_ne!(wrong.code, 0, "{wrong:?}");
        assert!(
            wrong.stdout.contains("expected \\\"tools\\\"") || wrong.stdout.contains("-32602"),
            "{wrong:?}"
        );
    }
}

#[test]
fn serve_agent_after_a_load_goes_on_from_the_prompt_it_gets() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        // A recording of an agent that loads sessions: a client that reattaches (here every
        // `--no-owner` prompt starts serve-agent again) is served from the turn it asks for.
        let agent = env.agent_cmd(&format!(
            "--load --state-dir {}",
            env.home().join("agent-state").display()
        ));
        let src = env.new_session(&agent);
        for text in ["echo one", "echo two", "echo three"] {
            prompt(&env, &agent, &[], text).ok();
        }
        let served = served(&env, &src, true);
        let new = env.new_session(&served);
        for text in ["echo one", "echo two", "echo three"] {
            let run = prompt(&env, &served, &[], text).ok();
            assert_eq!(run.stdout.trim(), &text[5..], "{run:?}");
        }
        let diff = env
            .run(&["--format", "json", "sessions", "diff", &src, &new])
            .ok()
            .json();
        assert_eq!(diff["differs"], false, "{backend}: {diff}");
        // Past the last recorded turn: refused, naming why.
        let more = prompt(&env, &served, &[], "echo four");
        assert_ne!(more.code, 0, "{more:?}");
        assert!(more.stderr.contains("expected \"echo one\""), "{more:?}");
    }
}

#[test]
fn serve_agent_keeps_the_recorded_pacing_unless_fast() {
    let env = Env::new("fs");
    let agent = env.agent_cmd("");
    let src = env.new_session(&agent);
    // Ten chunks 50 ms apart: about half a second recorded.
    prompt(&env, &agent, &[], "slow 10").ok();
    let time = |fast: bool| {
        let a = served(&env, &src, fast);
        env.run(&[
            "--no-owner",
            "--agent",
            &a,
            "sessions",
            "new",
            "-s",
            if fast { "f" } else { "p" },
        ])
        .ok();
        let start = Instant::now();
        env.run(&[
            "--no-owner",
            "--agent",
            &a,
            "prompt",
            "-s",
            if fast { "f" } else { "p" },
            "slow 10",
        ])
        .ok();
        start.elapsed()
    };
    let paced = time(false);
    let fast = time(true);
    assert!(paced.as_millis() >= 400, "paced {paced:?}");
    assert!(fast < paced, "fast {fast:?}, paced {paced:?}");
}

/// The TypeScript SDK's package in peers/node, if installed, and node.
fn ts_sdk() -> Option<PathBuf> {
    let sdk = repo().join("peers/node/node_modules/@agentclientprotocol/sdk/package.json");
    let node = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    (node && sdk.exists()).then_some(sdk)
}

#[test]
fn serve_agent_with_the_typescript_sdk_client() {
    if ts_sdk().is_none() {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!(
                "node or the TypeScript ACP SDK is missing; run scripts/install-interop-peer.sh"
            );
        }
        eprintln!(
            "SKIPPED: the TypeScript ACP SDK is not installed; run scripts/install-interop-peer.sh"
        );
        return;
    }
    for backend in BACKENDS {
        let env = Env::new(backend);
        let (src, _) = source(&env);
        let expected = json!({
            "agentName": "acpx-test-agent",
            "turns": [
                {"prompt": "tools", "stopReason": "end_turn",
                 "reply": "Read the README; the search failed.",
                 "toolTitles": ["Read README.md", "Search TODO"], "permissions": 0,
                 "updateKinds": ["tool_call", "tool_call_update", "tool_call_update",
                                 "tool_call", "tool_call_update", "agent_message_chunk"]},
                {"prompt": "permission execute Run tests", "stopReason": "end_turn",
                 "reply": "selected allow", "toolTitles": [], "permissions": 1,
                 "updateKinds": ["agent_message_chunk"]},
                {"prompt": "permission edit Edit main.rs", "stopReason": "end_turn",
                 "reply": "selected reject", "toolTitles": [], "permissions": 1,
                 "updateKinds": ["agent_message_chunk"]}
            ]
        });
        let file = env.home().join("expected.json");
        std::fs::write(&file, expected.to_string()).unwrap();
        let out = Command::new("node")
            .arg(repo().join("scripts/peers/ts_client_serve_agent.mjs"))
            .arg(&file)
            .arg(acpx_bin())
            .args(["--home"])
            .arg(env.home())
            .args(["--store", backend, "serve-agent", &src, "--fast"])
            .current_dir(env.cwd())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{backend}: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let seen: Value = serde_json::from_str(stdout.trim()).unwrap();
        assert_eq!(seen["problems"], json!([]));
        assert_eq!(seen["wrongPrompt"]["code"], -32602);
        assert!(
            seen["wrongPrompt"]["message"]
                .as_str()
                .unwrap()
                .contains("expected \"think 2\""),
            "{seen}"
        );
    }
}
