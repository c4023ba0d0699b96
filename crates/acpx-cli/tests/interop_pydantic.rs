//! Interoperability with a real third-party agent: pydantic-acp 1.10.0 serving a pydantic-ai
//! agent with a scripted `FunctionModel` (`scripts/peers/pydantic_peer.py`, installed by
//! `scripts/install-interop-peer.sh`; no LLM, no key). Every step is a separate `acpx`
//! process, as a user runs them.
//!
//! The peer answers `session/resume` with -32601 although it advertises it, and keeps its mode
//! only in process memory: the case where a session used to lose its context and its mode on
//! every command. Its reply states what it remembers:
//! `mode=<mode>; turns=<n>; heard=<user texts joined by ' | '>`. A prompt `read-note <name>`
//! makes it call its `read_note` tool first (about 2 KB of raw output).
//!
//! The peer is found through `ACPX_INTEROP_PYDANTIC_AGENT` (a full command line) or at the
//! install script's default paths. When it is missing the test fails under `CI=true` and is
//! skipped (with a message) otherwise.
mod common;

use std::path::PathBuf;

use common::*;

fn peer_command() -> Option<String> {
    if let Ok(cmd) = std::env::var("ACPX_INTEROP_PYDANTIC_AGENT") {
        if !cmd.trim().is_empty() {
            return Some(cmd);
        }
    }
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let python = repo.join(".venv-acp/bin/python");
    let script = repo.join("scripts/peers/pydantic_peer.py");
    let installed = python.exists()
        && script.exists()
        && std::process::Command::new(&python)
            .args(["-c", "import pydantic_acp"])
            .output()
            .is_ok_and(|o| o.status.success());
    installed.then(|| format!("'{}' '{}'", python.display(), script.display()))
}

fn require_peer() -> Option<String> {
    match peer_command() {
        Some(c) => Some(c),
        None if std::env::var("CI").as_deref() == Ok("true") => panic!(
            "the pydantic-acp interop peer is missing; run scripts/install-interop-peer.sh \
             (or set ACPX_INTEROP_PYDANTIC_AGENT)"
        ),
        None => {
            eprintln!(
                "SKIPPED: pydantic-acp peer not installed; run scripts/install-interop-peer.sh \
                 or set ACPX_INTEROP_PYDANTIC_AGENT to run this test"
            );
            None
        }
    }
}

/// An environment whose agent keeps its sessions in a directory of the test.
fn peer_env(backend: &'static str) -> Env {
    let mut env = Env::new(backend);
    let sessions = env.home().join("peer-sessions");
    env.extra_env.push((
        "PYD_PEER_SESSIONS".into(),
        sessions.to_string_lossy().into_owned(),
    ));
    env
}

/// Each command runs its own agent process (`--no-owner`), so every later command has to
/// reattach: resume is refused as unsupported, then `session/load` restores the conversation.
fn continues_the_conversation_in_the_chosen_mode(backend: &'static str) {
    let Some(agent) = require_peer() else { return };
    let env = peer_env(backend);
    let a = ["--agent", agent.as_str(), "--no-owner"];
    let run = |args: &[&str]| env.run(&[&a[..], args].concat());

    let created = run(&["--format", "json", "sessions", "new"]).ok().json();
    let acp_id = created["acpxSessionId"].as_str().unwrap().to_owned();
    run(&["set-mode", "code"]).ok();

    let first = run(&["prompt", "one"]).ok();
    assert!(
        first.stdout.contains("mode=code; turns=1; heard=one"),
        "{}\n{}",
        first.stdout,
        first.stderr
    );
    let second = run(&["prompt", "two"]).ok();
    assert!(
        second
            .stdout
            .contains("mode=code; turns=2; heard=one | two"),
        "the second command lost the context or the mode:\n{}\n{}",
        second.stdout,
        second.stderr
    );
    assert!(
        !second.stderr.contains("new ACP session"),
        "no fallback was needed: {}",
        second.stderr
    );

    let shown = run(&["--format", "json", "sessions", "show"]).ok().json();
    assert_eq!(
        shown["acpxSessionId"],
        acp_id.as_str(),
        "load kept the ACP session"
    );
    assert_eq!(shown["acpxRecordId"], created["acpxRecordId"]);

    // The log says how each command attached: resume refused as unsupported, then load.
    let events = run(&["--format", "json", "sessions", "events"])
        .ok()
        .json_lines();
    let attached: Vec<_> = events
        .iter()
        .filter(|e| e["type"] == "lifecycle_event" && e["payload"]["phase"] == "session_attached")
        .collect();
    assert_eq!(attached.len(), 3, "set-mode and both prompts reattached");
    for e in &attached {
        assert_eq!(e["payload"]["method"], "session/load", "{e}");
        assert_eq!(
            e["payload"]["failedAttempts"][0]["method"], "session/resume",
            "{e}"
        );
        assert_eq!(
            e["payload"]["failedAttempts"][0]["reason"], "unsupported",
            "{e}"
        );
    }
    assert!(!events
        .iter()
        .any(|e| e["payload"]["phase"] == "session_fallback"));
}

/// The user's default path: `sessions new` starts a queue owner that keeps the agent warm, so
/// the mode and the conversation live on in that process without any reattach; a later
/// `--no-owner` command still continues the same conversation through `session/load`.
fn the_warm_owner_keeps_the_agent_between_commands(backend: &'static str) {
    let Some(agent) = require_peer() else { return };
    let env = peer_env(backend);
    let a = ["--agent", agent.as_str()];
    let run = |args: &[&str]| env.run(&[&a[..], args].concat());

    run(&["sessions", "new"]).ok();
    run(&["set-mode", "code"]).ok();
    let first = run(&["prompt", "one"]).ok();
    assert!(
        first.stdout.contains("mode=code; turns=1; heard=one"),
        "{}\n{}",
        first.stdout,
        first.stderr
    );
    let second = run(&["prompt", "two"]).ok();
    assert!(
        second
            .stdout
            .contains("mode=code; turns=2; heard=one | two"),
        "{}\n{}",
        second.stdout,
        second.stderr
    );
    let events = run(&["--format", "json", "sessions", "events"])
        .ok()
        .json_lines();
    assert!(
        !events
            .iter()
            .any(|e| e["payload"]["phase"] == "session_attached"),
        "the owner kept the agent that created the session"
    );

    let third = run(&["--no-owner", "prompt", "three"]).ok();
    assert!(
        third
            .stdout
            .contains("mode=code; turns=3; heard=one | two | three"),
        "{}\n{}",
        third.stdout,
        third.stderr
    );
}

#[test]
fn the_warm_owner_keeps_the_agent_between_commands_fs() {
    the_warm_owner_keeps_the_agent_between_commands("fs");
}

#[test]
fn the_warm_owner_keeps_the_agent_between_commands_sqlite() {
    the_warm_owner_keeps_the_agent_between_commands("sqlite");
}

#[test]
fn a_later_command_continues_the_conversation_in_the_chosen_mode_fs() {
    continues_the_conversation_in_the_chosen_mode("fs");
}

#[test]
fn a_later_command_continues_the_conversation_in_the_chosen_mode_sqlite() {
    continues_the_conversation_in_the_chosen_mode("sqlite");
}

/// A tool call of the real agent (its `read_note` tool, about 2 KB of raw output) goes through
/// the queue owner, which moves the finished call out of memory at the turn's end; the next
/// turn's save writes it back whole, as the first turn's did.
fn a_tool_call_is_stored_whole_after_later_turns(backend: &'static str) {
    let Some(agent) = require_peer() else { return };
    let env = peer_env(backend);
    let a = ["--agent", agent.as_str()];
    let run = |args: &[&str]| env.run(&[&a[..], args].concat());
    run(&["sessions", "new"]).ok();
    let first = run(&["prompt", "read-note todo"]).ok();
    assert!(
        first.stderr.contains("[tool] read_note (completed)"),
        "{}",
        first.stderr
    );
    let exported = || -> serde_json::Value {
        let out = run(&["sessions", "export", "--as", "json"]).ok();
        serde_json::from_str(&out.stdout).expect("session JSON")
    };
    let tool_turn = exported();
    let second = run(&["prompt", "hello"]).ok();
    assert!(second.stdout.contains("turns=2"), "{}", second.stdout);
    let later = exported();
    let tool_message = |doc: &serde_json::Value| doc["thread"]["messages"][1]["Agent"].clone();
    let before = tool_message(&tool_turn);
    assert_eq!(
        before,
        tool_message(&later),
        "the tool call is the same after another turn"
    );
    let results = before["tool_results"].as_object().unwrap();
    assert_eq!(results.len(), 1, "{before}");
    let output = results.values().next().unwrap()["output"].as_str().unwrap();
    let expected = format!("note todo: {}", "lorem ipsum dolor sit amet ".repeat(80));
    assert_eq!(output, expected);
    assert_eq!(
        before["content"][0]["ToolUse"]["input"],
        serde_json::json!({"name": "todo"})
    );
}

#[test]
fn a_tool_call_is_stored_whole_after_later_turns_fs() {
    a_tool_call_is_stored_whole_after_later_turns("fs");
}

#[test]
fn a_tool_call_is_stored_whole_after_later_turns_sqlite() {
    a_tool_call_is_stored_whole_after_later_turns("sqlite");
}
