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
use crate::common;

use std::path::PathBuf;

use common::*;
use serde_json::Value;

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

pub(crate) fn require_peer() -> Option<String> {
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
pub(crate) fn peer_env(backend: &'static str) -> Env {
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

fn lifecycle<'a>(events: &'a [Value], phase: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|e| e["type"] == "lifecycle_event" && e["payload"]["phase"] == phase)
        .collect()
}

/// `sessions fork` of a parent with two turns. pydantic-acp advertises `session/fork` but
/// answers it -32601, so the fork is a copy: a fresh ACP session made in the fork's queue
/// owner, with a copy of the stored conversation; the fork's first prompt runs there without
/// a fallback and carries the copied conversation, so the agent answers from the parent's
/// turns; a later process (`--no-owner`) loads the fork's session.
///
/// Why the fork lost the conversation on pydantic-acp (issue 48, item 6). pydantic-acp
/// 1.10.0 does implement `session/fork` (its `FileSessionStore.fork` clones the stored
/// messages) and advertises `sessionCapabilities.fork` and `.resume`, but it serves ACP
/// through the `acp` Python SDK 0.12.1, whose router treats `session/fork` and
/// `session/resume` as unstable methods: unless the agent is run with
/// `run_agent(…, use_unstable_protocol=True)` it answers them -32601 "Method not found" (and
/// warns "part of the unstable protocol" on the agent's stderr), and pydantic-acp's `run_acp`
/// does not pass that flag. The request's session id, process and the child's attach were
/// right (the wire shows `session/fork` with the parent's ACP session, in the process that
/// loaded it). acpx then makes the copy, and a fresh ACP session starts empty (ACP has no
/// request that hands an agent a conversation), so acpx now sends the copied turns before
/// the text of the fork's first prompt (`fork_context` in acpx-runtime).
fn a_fork_is_a_copy_continued_by_its_owner(backend: &'static str) {
    let Some(agent) = require_peer() else { return };
    let env = peer_env(backend);
    let a = ["--agent", agent.as_str()];
    let run = |args: &[&str]| env.run(&[&a[..], args].concat());
    let events_of = |id: &str| {
        run(&["--format", "json", "sessions", "events", id])
            .ok()
            .json_lines()
    };

    let parent = run(&["--format", "json", "sessions", "new"]).ok().json();
    let parent_id = parent["acpxRecordId"].as_str().unwrap().to_owned();
    for (p, reply) in [
        ("one", "mode=ask; turns=1; heard=one"),
        ("two", "mode=ask; turns=2; heard=one | two"),
    ] {
        let r = run(&["prompt", p]).ok();
        assert!(r.stdout.contains(reply), "{}\n{}", r.stdout, r.stderr);
    }

    let r = run(&["--format", "json", "sessions", "fork", "--name", "branch"]).ok();
    assert!(
        r.stderr.contains("does not support session/fork"),
        "the copy is said: {}",
        r.stderr
    );
    let f = r.json();
    assert_eq!(f["action"], "session_forked", "{f}");
    assert_eq!(f["method"], "copy", "session/fork was answered -32601: {f}");
    assert_eq!(f["parentAcpxRecordId"], parent_id.as_str(), "{f}");
    assert_eq!(f["forkMessageCount"], 4, "{f}");
    let child = f["acpxRecordId"].as_str().unwrap().to_owned();
    let child_acp = f["acpxSessionId"].as_str().unwrap().to_owned();
    // The peer stored the fork's fresh session at `session/new`, before any turn.
    let stored = env
        .home()
        .join("peer-sessions")
        .join(format!("{child_acp}.json"));
    assert!(stored.exists(), "{} is not stored", stored.display());
    let st = run(&["--format", "json", "-s", "branch", "status"])
        .ok()
        .json();
    assert_eq!(
        st["status"], "alive",
        "the fork's owner keeps its agent: {st}"
    );

    // The fork's first prompt: no fallback, in the session the owner made; the agent hears
    // the parent's turns before the prompt's text, once.
    let first = run(&["-s", "branch", "prompt", "what did I ask you to remember?"]).ok();
    for heard in [
        "mode=ask; turns=1; heard=[This conversation was forked",
        "User:\n> one\n\nAgent:\n> mode=ask; turns=1; heard=one",
        "User:\n> two\n\nAgent:\n> mode=ask; turns=2; heard=one | two",
        "[End of the earlier conversation.]\n\nwhat did I ask you to remember?; model=alpha",
    ] {
        assert!(
            first.stdout.contains(heard),
            "{heard:?}:\n{}\n{}",
            first.stdout,
            first.stderr
        );
    }
    assert!(
        !first.stderr.contains("new ACP session"),
        "no fallback: {}",
        first.stderr
    );
    let events = events_of(&child);
    assert!(
        lifecycle(&events, "session_fallback").is_empty(),
        "{:?}",
        lifecycle(&events, "session_fallback")
    );
    assert!(lifecycle(&events, "session_attached").is_empty());
    assert_eq!(lifecycle(&events, "session_created").len(), 1);

    // A process of its own reattaches: resume refused as unsupported, then load, with the
    // fork's own turn.
    let second = run(&["--no-owner", "-s", "branch", "prompt", "four"]).ok();
    assert!(
        second
            .stdout
            .contains("turns=2; heard=[This conversation was forked")
            && second
                .stdout
                .contains("what did I ask you to remember? | four; model=alpha")
            && second.stdout.matches("User:\n> one").count() == 1,
        "{}\n{}",
        second.stdout,
        second.stderr
    );
    let events = events_of(&child);
    assert!(lifecycle(&events, "session_fallback").is_empty());
    let attached = lifecycle(&events, "session_attached");
    assert_eq!(
        attached.len(),
        1,
        "only --no-owner reattached: {attached:?}"
    );
    let attached = &attached[0]["payload"];
    assert_eq!(attached["method"], "session/load", "{attached}");
    assert_eq!(attached["acpSessionId"], child_acp.as_str(), "{attached}");
    assert_eq!(
        attached["failedAttempts"][0]["method"], "session/resume",
        "{attached}"
    );
    assert_eq!(
        attached["failedAttempts"][0]["error"]["code"], -32601,
        "{attached}"
    );

    // The fork's record keeps the parent's conversation before its own turns.
    let hist = run(&["sessions", "history", &child]).ok().stdout;
    for text in [
        "one",
        "mode=ask; turns=2; heard=one | two",
        "\nwhat did I ask you to remember?\n",
        "what did I ask you to remember? | four",
    ] {
        assert!(
            hist.contains(text),
            "{text:?} not in the fork's history:\n{hist}"
        );
    }
    let hist = run(&["sessions", "history", &parent_id]).ok().stdout;
    assert!(
        !hist.contains("remember"),
        "the parent is unchanged: {hist}"
    );
    run(&["sessions", "close", "branch"]).ok();
    run(&["sessions", "close"]).ok();
}

#[test]
fn a_fork_is_a_copy_continued_by_its_owner_fs() {
    a_fork_is_a_copy_continued_by_its_owner("fs");
}

#[test]
fn a_fork_is_a_copy_continued_by_its_owner_sqlite() {
    a_fork_is_a_copy_continued_by_its_owner("sqlite");
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

/// Model selection on an agent that lists no `model` option in its session answers
/// (`PYD_PEER_MODEL_OPTION=hidden`, pydantic-acp's `enable_model_config_option=False`) and
/// refuses the unstable `session/set_model` with -32601, yet accepts
/// `session/set_config_option` with configId `model`: `set model beta` succeeds through that
/// probe, and the model stays beta in the warm owner, after a `--no-owner` reattach and in
/// a new owner (the choice is replayed on every reattach).
fn a_hidden_model_option_is_set_and_kept(backend: &'static str) {
    let Some(agent) = require_peer() else { return };
    let mut env = peer_env(backend);
    env.extra_env
        .push(("PYD_PEER_MODEL_OPTION".into(), "hidden".into()));
    let a = ["--agent", agent.as_str()];
    let run = |args: &[&str]| env.run(&[&a[..], args].concat());
    let says = |r: &Run, text: &str| {
        assert!(
            r.stdout.contains(text),
            "{text:?}:\n{}\n{}",
            r.stdout,
            r.stderr
        );
    };

    run(&["sessions", "new"]).ok();
    says(&run(&["prompt", "one"]).ok(), "heard=one; model=alpha");
    let set = run(&["--ttl", "1", "set", "model", "beta"]).ok();
    says(&set, "model set to beta");
    says(&run(&["prompt", "two"]).ok(), "heard=one | two; model=beta");
    says(
        &run(&["--no-owner", "prompt", "three"]).ok(),
        "heard=one | two | three; model=beta",
    );
    // The owner started with `--ttl 1` stops; the next command starts a new one.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while run(&["--format", "json", "status"]).ok().json()["status"] == "alive" {
        assert!(std::time::Instant::now() < deadline, "the owner stays");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    says(
        &run(&["prompt", "four"]).ok(),
        "heard=one | two | three | four; model=beta",
    );
    let shown = run(&["--format", "json", "sessions", "show"]).ok().json();
    assert!(
        shown.to_string().contains("beta"),
        "the record keeps the model: {shown}"
    );
    run(&["sessions", "close"]).ok();
}

#[test]
fn a_hidden_model_option_is_set_and_kept_fs() {
    a_hidden_model_option_is_set_and_kept("fs");
}

#[test]
fn a_hidden_model_option_is_set_and_kept_sqlite() {
    a_hidden_model_option_is_set_and_kept("sqlite");
}

/// The same peer with its SDK's unstable methods on (`PYD_PEER_UNSTABLE=1`): it serves the
/// `session/fork` it advertises, so the agent forks its own session and the child continues
/// the parent's conversation with no copied text; a later process resumes the child's ACP
/// session, and the parent goes on without the child's turns.
fn a_fork_by_the_agent_keeps_the_conversation(backend: &'static str) {
    let Some(agent) = require_peer() else { return };
    let mut env = peer_env(backend);
    env.extra_env.push(("PYD_PEER_UNSTABLE".into(), "1".into()));
    let a = ["--agent", agent.as_str()];
    let run = |args: &[&str]| env.run(&[&a[..], args].concat());
    let says = |r: &Run, text: &str| {
        assert!(
            r.stdout.contains(text),
            "{text:?}:\n{}\n{}",
            r.stdout,
            r.stderr
        );
    };

    run(&["sessions", "new"]).ok();
    says(
        &run(&["prompt", "remember banana"]).ok(),
        "heard=remember banana;",
    );
    let f = run(&["--format", "json", "sessions", "fork", "--name", "child"])
        .ok()
        .json();
    assert_eq!(f["method"], "session/fork", "{f}");
    says(
        &run(&["-s", "child", "prompt", "what did I ask you to remember?"]).ok(),
        "turns=2; heard=remember banana | what did I ask you to remember?; model=alpha",
    );
    let later = run(&["--no-owner", "-s", "child", "prompt", "again?"]).ok();
    says(
        &later,
        "turns=3; heard=remember banana | what did I ask you to remember? | again?;",
    );
    assert!(
        !later.stdout.contains("[This conversation"),
        "{}",
        later.stdout
    );
    let child = f["acpxRecordId"].as_str().unwrap();
    let events = run(&["--format", "json", "sessions", "events", child])
        .ok()
        .json_lines();
    let attached = lifecycle(&events, "session_attached");
    assert_eq!(attached.len(), 1, "{attached:?}");
    assert_eq!(
        attached[0]["payload"]["method"], "session/resume",
        "{attached:?}"
    );
    says(
        &run(&["prompt", "parent"]).ok(),
        "turns=2; heard=remember banana | parent;",
    );
    run(&["sessions", "close", "child"]).ok();
    run(&["sessions", "close"]).ok();
}

#[test]
fn a_fork_by_the_agent_keeps_the_conversation_fs() {
    a_fork_by_the_agent_keeps_the_conversation("fs");
}

#[test]
fn a_fork_by_the_agent_keeps_the_conversation_sqlite() {
    a_fork_by_the_agent_keeps_the_conversation("sqlite");
}

/// `--add-dir` with pydantic-acp, which advertises `sessionCapabilities.additionalDirectories`:
/// it takes the directory on `session/new` and again on the `session/load` of a later process
/// (`--no-owner`) that names none (acpx sends the record's), with no fallback; both lifecycle
/// events carry it.
fn add_dir_is_taken_on_new_and_load(backend: &'static str) {
    let Some(agent) = require_peer() else { return };
    let env = peer_env(backend);
    let extra = env.home().join("extra");
    std::fs::create_dir_all(&extra).unwrap();
    let extra_s = std::fs::canonicalize(&extra)
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let a = ["--agent", agent.as_str(), "--no-owner"];
    let run = |args: &[&str]| env.run(&[&a[..], args].concat());
    let created = run(&["--add-dir", &extra_s, "--format", "json", "sessions", "new"])
        .ok()
        .json();
    let id = created["acpxRecordId"].as_str().unwrap().to_owned();
    let r = run(&["prompt", "one"]).ok();
    assert!(r.stdout.contains("turns=1; heard=one"), "{r:?}");
    assert!(!r.stderr.contains("new ACP session"), "{}", r.stderr);
    let events = run(&["--format", "json", "sessions", "events", &id])
        .ok()
        .json_lines();
    for phase in ["session_created", "session_attached"] {
        let found = lifecycle(&events, phase);
        assert_eq!(found.len(), 1, "{phase}: {events:?}");
        assert_eq!(
            found[0]["payload"]["additionalDirectories"],
            serde_json::json!([extra_s]),
            "{phase}"
        );
    }
}

#[test]
fn add_dir_is_taken_on_new_and_load_fs() {
    add_dir_is_taken_on_new_and_load("fs");
}

#[test]
fn add_dir_is_taken_on_new_and_load_sqlite() {
    add_dir_is_taken_on_new_and_load("sqlite");
}

/// A write the agent asks about (its `write_file` tool needs approval, so pydantic-acp sends
/// `session/request_permission`) refused by `--deny-all`: the agent hears the refusal and ends
/// its turn normally, the file is not written, and acpx exits 5 (a turn with a denied
/// permission). The log has the question with the agent's tool call and the failed call.
fn a_denied_write_exits_5(backend: &'static str) {
    let Some(agent) = require_peer() else { return };
    let env = peer_env(backend);
    let a = ["--agent", agent.as_str()];
    let run = |args: &[&str]| env.run(&[&a[..], args].concat());
    run(&["sessions", "new"]).ok();
    let path = env.cwd().join("denied.txt");
    let path_str = path.to_string_lossy().into_owned();
    let r = run(&[
        "--deny-all",
        "prompt",
        &format!("write-file {path_str} never"),
    ]);
    assert_eq!(r.code, 5, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("not written"), "{}", r.stdout);
    assert!(!path.exists(), "the refused write happened");

    let events = run(&["--format", "json", "sessions", "events"])
        .ok()
        .json_lines();
    let done = events.iter().rfind(|e| e["type"] == "prompt_done").unwrap();
    assert_eq!(done["payload"]["stopReason"], "end_turn", "{done}");
    assert_eq!(done["payload"]["permissionStats"]["denied"], 1, "{done}");
    let asked = events
        .iter()
        .find(|e| {
            e["type"] == "client_operation"
                && e["payload"]["method"] == "session/request_permission"
                && e["payload"].get("toolCall").is_some()
        })
        .expect("the permission question in the log");
    assert_eq!(
        asked["payload"]["toolCall"]["rawInput"]["path"],
        path_str.as_str(),
        "{asked}"
    );
    assert!(
        events.iter().any(|e| {
            e["payload"]["update"]["sessionUpdate"] == "tool_call_update"
                && e["payload"]["update"]["status"] == "failed"
        }),
        "the refused call is recorded as failed"
    );
    // Approved, the same write happens (the agent writes itself).
    let ok = run(&[
        "--approve-all",
        "prompt",
        &format!("write-file {path_str} yes"),
    ])
    .ok();
    assert!(ok.stdout.contains("written;"), "{}", ok.stdout);
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "yes");
    run(&["sessions", "close"]).ok();
}

#[test]
fn a_denied_write_exits_5_fs() {
    a_denied_write_exits_5("fs");
}

#[test]
fn a_denied_write_exits_5_sqlite() {
    a_denied_write_exits_5("sqlite");
}

/// `acpx cancel` from another process while the agent's model thinks (`slow`): pydantic-acp
/// cancels the run, the turn ends `cancelled` with exit 0, and the next prompt continues the
/// conversation.
fn a_cancel_ends_a_slow_turn(backend: &'static str) {
    use common::process::{spawn_until, STARTED};
    let Some(agent) = require_peer() else { return };
    let env = peer_env(backend);
    let a = ["--agent", agent.as_str()];
    let run = |args: &[&str]| env.run(&[&a[..], args].concat());
    run(&["sessions", "new"]).ok();
    says_turn(&run(&["prompt", "one"]).ok(), "turns=1; heard=one");
    let started = std::time::Instant::now();
    let running = spawn_until(
        &env,
        &[&a[..], &["--format", "json", "prompt", "slow"]].concat(),
        STARTED,
    );
    // The prompt has reached the agent once the owner says the turn is running.
    std::thread::sleep(std::time::Duration::from_millis(500));
    let c = run(&["--format", "json", "cancel"]).ok().json();
    assert_eq!(c["cancelled"], true, "{c}");
    let (code, lines, stderr) = running.finish();
    assert_eq!(code, 0, "{stderr}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "the cancel did not stop the minute-long turn"
    );
    let last = lines.last().unwrap();
    assert_eq!(last["type"], "prompt_done", "{last}");
    assert_eq!(last["payload"]["stopReason"], "cancelled", "{last}");
    let after = run(&["prompt", "after"]).ok();
    assert!(after.stdout.contains("heard=one |"), "{}", after.stdout);
    assert!(
        after.stdout.contains("after; model=alpha"),
        "{}",
        after.stdout
    );
    run(&["sessions", "close"]).ok();
}

fn says_turn(r: &Run, text: &str) {
    assert!(
        r.stdout.contains(text),
        "{text:?}:\n{}\n{}",
        r.stdout,
        r.stderr
    );
}

#[test]
fn a_cancel_ends_a_slow_turn_fs() {
    a_cancel_ends_a_slow_turn("fs");
}

#[test]
fn a_cancel_ends_a_slow_turn_sqlite() {
    a_cancel_ends_a_slow_turn("sqlite");
}
