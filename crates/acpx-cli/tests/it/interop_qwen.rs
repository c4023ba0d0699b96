//! Interoperability with a real third-party coding agent: qwen-code 0.24.4 (npm
//! `@qwen-code/qwen-code`, run as `qwen --acp`, installed into `peers/node/` by
//! `scripts/install-interop-peer.sh`) talking to a fake OpenAI-compatible model on 127.0.0.1
//! (`scripts/peers/fake_openai.py`, Python stdlib only: no key, no network). Every step is a
//! separate `acpx` process, as a user runs them.
//!
//! The fake model answers from a script (see its header): a prompt `p: <text>` gets
//! `turns=<n>; heard=<the p: texts it was sent, joined by ' | '>`, so a reply shows whether
//! the agent sent the earlier turns; `p: write-file <path> <content>` makes it call qwen-code's
//! `write_file` tool; `p: slow` streams `tick …` for a minute (a turn to cancel).
//!
//! qwen-code is configured through a home of the test (`HOME`, `QWEN_HOME`): a settings.json
//! that selects the `openai` auth type and turns off usage statistics, telemetry, updates,
//! follow-up suggestions and the memory agent (which would send extra model requests), plus
//! `OPENAI_BASE_URL`/`OPENAI_API_KEY=dummy`/`OPENAI_MODEL`. Its only connections are to the
//! fake model (checked with strace when this test was written).
//!
//! What qwen-code 0.24.4 does over ACP: it advertises `loadSession` and `session/resume`
//! (no fork); it stores a session only once it has a message, so reattaching to a session
//! that never had a turn finds nothing; its `tool_call` update for a write carries an empty
//! input, and the write's title, path, input and diff come only in the `toolCall` of
//! `session/request_permission`; it writes through the client (`fs/write_text_file`); a
//! cancelled prompt stays in its conversation with its partial answer.
//!
//! The peer is found through `ACPX_INTEROP_QWEN_AGENT` (a full command line) or at the install
//! script's default path. When it (or `python3` for the fake model) is missing the test fails
//! under `CI=true` and is skipped (with a message) otherwise.
use crate::common;

use common::peers::{repo, runs, FakeModel};
use common::process::*;
use common::*;
use serde_json::Value;

fn peer_command() -> Option<String> {
    if let Ok(cmd) = std::env::var("ACPX_INTEROP_QWEN_AGENT") {
        if !cmd.trim().is_empty() {
            return Some(cmd);
        }
    }
    let qwen = repo().join("peers/node/node_modules/.bin/qwen");
    let installed = qwen.exists() && runs("node");
    installed.then(|| format!("'{}' --acp", qwen.display()))
}

fn require_peer() -> Option<String> {
    match peer_command().filter(|_| runs("python3")) {
        Some(c) => Some(c),
        None if std::env::var("CI").as_deref() == Ok("true") => panic!(
            "the qwen-code interop peer (or python3 for its fake model) is missing; run \
             scripts/install-interop-peer.sh (or set ACPX_INTEROP_QWEN_AGENT)"
        ),
        None => {
            eprintln!(
                "SKIPPED: qwen-code peer not installed; run scripts/install-interop-peer.sh \
                 or set ACPX_INTEROP_QWEN_AGENT to run this test"
            );
            None
        }
    }
}

/// qwen-code's user settings: the OpenAI auth type with the fake model, and nothing that
/// reaches the network or sends the model requests of its own.
const SETTINGS: &str = r#"{
  "security": {"auth": {"selectedType": "openai"}},
  "model": {"name": "fake-model"},
  "privacy": {"usageStatisticsEnabled": false},
  "telemetry": {"enabled": false},
  "general": {"enableAutoUpdate": false},
  "ui": {"enableFollowupSuggestions": false},
  "tools": {"approvalMode": "default"},
  "memory": {"enableManagedAutoMemory": false, "enableManagedAutoDream": false}
}
"#;

/// A test's environment: acpx's home and project, the fake model, and qwen-code's own home.
struct Qwen {
    env: Env,
    model: FakeModel,
    agent: String,
}

impl Qwen {
    fn new(backend: &'static str) -> Option<Qwen> {
        Qwen::with_settings(backend, SETTINGS)
    }

    /// [`Qwen::new`] with other user settings (`{BASE_URL}` in them is the fake model's).
    fn with_settings(backend: &'static str, settings: &str) -> Option<Qwen> {
        let agent = require_peer()?;
        let mut env = Env::new(backend);
        let model = FakeModel::start("fake_openai.py", env.home());
        let agent_home = env.home().join("agent-home");
        let qwen_dir = agent_home.join(".qwen");
        std::fs::create_dir_all(&qwen_dir).unwrap();
        let settings = settings.replace("{BASE_URL}", &model.url);
        std::fs::write(qwen_dir.join("settings.json"), settings).unwrap();
        let vars = [
            ("HOME", agent_home.to_string_lossy().into_owned()),
            ("QWEN_HOME", qwen_dir.to_string_lossy().into_owned()),
            ("OPENAI_BASE_URL", model.url.clone()),
            ("OPENAI_API_KEY", "dummy".into()),
            ("OPENAI_MODEL", "fake-model".into()),
            ("QWEN_USAGE_STATISTICS_ENABLED", "false".into()),
            ("QWEN_CODE_DISABLE_PRECONNECT", "1".into()),
            ("QWEN_DISABLE_AUTO_TITLE", "1".into()),
            ("HTTP_PROXY", String::new()),
            ("HTTPS_PROXY", String::new()),
            ("http_proxy", String::new()),
            ("https_proxy", String::new()),
            ("NO_PROXY", "127.0.0.1,localhost".into()),
        ];
        env.extra_env
            .extend(vars.into_iter().map(|(k, v)| (k.to_owned(), v)));
        Some(Qwen { env, model, agent })
    }

    /// `acpx --agent <qwen> args…`.
    fn run(&self, args: &[&str]) -> Run {
        self.env
            .run(&[&["--agent", self.agent.as_str()][..], args].concat())
    }

    /// `sessions new` with a warm queue owner (ended by `close` or soon after the test).
    fn new_session(&self) -> Value {
        self.run(&["--format", "json", "--ttl", "30", "sessions", "new"])
            .ok()
            .json()
    }

    fn events(&self) -> Vec<Value> {
        self.run(&["--format", "json", "sessions", "events"])
            .ok()
            .json_lines()
    }

    /// The stored session document (`sessions export --as json`).
    fn exported(&self) -> Value {
        let out = self.run(&["sessions", "export", "--as", "json"]).ok();
        serde_json::from_str(&out.stdout).expect("session JSON")
    }

    fn close(&self) {
        self.run(&["sessions", "close"]).ok();
    }
}

/// The text of the agent's message chunks in `events`, from the last `prompt_started` on.
fn last_reply(events: &[Value]) -> String {
    let start = events
        .iter()
        .rposition(|e| e["type"] == "prompt_started")
        .expect("a prompt_started");
    events[start..]
        .iter()
        .filter(|e| e["payload"]["update"]["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|e| e["payload"]["update"]["content"]["text"].as_str())
        .collect()
}

/// A prompt, its answer on stdout, the stored thread and the log; a second prompt continues
/// the conversation in the owner's warm agent, a third in an agent process of its own
/// (`--no-owner`: qwen-code's `session/resume`).
fn the_conversation_is_stored_and_continued(backend: &'static str) {
    let Some(q) = Qwen::new(backend) else { return };
    let created = q.new_session();

    let first = q.run(&["--timeout", "60", "prompt", "p: one"]).ok();
    assert!(
        first.stdout.contains("turns=1; heard=one"),
        "{}\n{}",
        first.stdout,
        first.stderr
    );
    assert!(
        !first.stderr.contains("new ACP session"),
        "the owner kept the agent that created the session: {}",
        first.stderr
    );
    let events = q.events();
    assert_eq!(last_reply(&events), "turns=1; heard=one");
    let done = events.iter().rfind(|e| e["type"] == "prompt_done").unwrap();
    assert_eq!(done["payload"]["stopReason"], "end_turn", "{done}");
    let doc = q.exported();
    assert_eq!(doc["acpxRecordId"], created["acpxRecordId"]);
    let messages = doc["thread"]["messages"].as_array().unwrap();
    assert_eq!(messages[0]["User"]["content"][0]["Text"], "p: one", "{doc}");
    assert!(
        messages[1]["Agent"]["content"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["Text"] == "turns=1; heard=one"),
        "{doc}"
    );
    let read = q.run(&["sessions", "read"]).ok();
    assert!(
        read.stdout.contains("p: one") && read.stdout.contains("turns=1; heard=one"),
        "{}",
        read.stdout
    );

    let second = q.run(&["--timeout", "60", "prompt", "p: two"]).ok();
    assert!(
        second.stdout.contains("turns=2; heard=one | two"),
        "the second prompt lost the conversation:\n{}\n{}",
        second.stdout,
        second.stderr
    );

    // A command with an agent of its own: qwen-code restores the session from its storage.
    let third = q
        .run(&["--no-owner", "--timeout", "60", "prompt", "p: three"])
        .ok();
    assert!(
        third.stdout.contains("turns=3; heard=one | two | three"),
        "the agent process of --no-owner lost the conversation:\n{}\n{}",
        third.stdout,
        third.stderr
    );
    let events = q.events();
    let attached: Vec<_> = events
        .iter()
        .filter(|e| e["type"] == "lifecycle_event" && e["payload"]["phase"] == "session_attached")
        .collect();
    assert_eq!(
        attached.len(),
        1,
        "only --no-owner reattached: {attached:?}"
    );
    assert_eq!(attached[0]["payload"]["method"], "session/resume");
    assert!(!events
        .iter()
        .any(|e| e["payload"]["phase"] == "session_fallback"));
    let shown = q.run(&["--format", "json", "sessions", "show"]).ok().json();
    assert_eq!(shown["acpxSessionId"], created["acpxSessionId"], "{shown}");

    // Every model request was a turn of this conversation (no side queries of the agent).
    let requests = q.model.requests();
    assert_eq!(requests.len(), 3, "{requests:?}");
    assert!(requests.iter().all(|r| r["stream"] == true));
    q.close();
}

#[test]
fn the_conversation_is_stored_and_continued_fs() {
    the_conversation_is_stored_and_continued("fs");
}

#[test]
fn the_conversation_is_stored_and_continued_sqlite() {
    the_conversation_is_stored_and_continued("sqlite");
}

/// The events of a session of this home by record id (`sessions events <id>`).
fn events_of(q: &Qwen, record_id: &str) -> Vec<Value> {
    q.run(&["--format", "json", "sessions", "events", record_id])
        .ok()
        .json_lines()
}

fn lifecycle<'a>(events: &'a [Value], phase: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|e| e["type"] == "lifecycle_event" && e["payload"]["phase"] == phase)
        .collect()
}

/// `sessions fork` of a parent with two turns. qwen-code has no `session/fork`, so the fork is a
/// copy: a fresh ACP session made in the fork's queue owner, with a copy of the stored
/// conversation. qwen-code stores a session only once it has a message, so before the fork
/// was made in its owner (a short-lived process made it and stopped) the fork's first prompt
/// found nothing to reattach and fell back to yet another ACP session; now the owner keeps
/// the agent that made it warm, and a later process (`--no-owner`) resumes what the first
/// turn stored.
fn a_fork_is_a_copy_continued_by_its_owner(backend: &'static str) {
    let Some(q) = Qwen::new(backend) else { return };
    let parent = q.new_session();
    let parent_id = parent["acpxRecordId"].as_str().unwrap().to_owned();
    for (p, reply) in [
        ("p: one", "turns=1; heard=one"),
        ("p: two", "turns=2; heard=one | two"),
    ] {
        let r = q.run(&["--timeout", "60", "prompt", p]).ok();
        assert!(r.stdout.contains(reply), "{}\n{}", r.stdout, r.stderr);
    }

    let r = q
        .run(&[
            "--format", "json", "--ttl", "30", "sessions", "fork", "--name", "branch",
        ])
        .ok();
    assert!(
        r.stderr.contains("does not support session/fork"),
        "the copy is said: {}",
        r.stderr
    );
    let f = r.json();
    assert_eq!(f["action"], "session_forked", "{f}");
    assert_eq!(f["method"], "copy", "qwen-code has no session/fork: {f}");
    assert_eq!(f["parentAcpxRecordId"], parent_id.as_str(), "{f}");
    assert_eq!(f["forkMessageCount"], 4, "{f}");
    assert_ne!(f["acpxSessionId"], parent["acpxSessionId"], "{f}");
    let child = f["acpxRecordId"].as_str().unwrap().to_owned();
    let child_acp = f["acpxSessionId"].as_str().unwrap().to_owned();
    // The fork's queue owner keeps the agent that made the fork's ACP session.
    let st = q
        .run(&["--format", "json", "-s", "branch", "status"])
        .ok()
        .json();
    assert_eq!(st["status"], "alive", "{st}");

    // The fork's first prompt runs in that agent, in the session it made: no fallback. A
    // copy: qwen-code starts the fork without the parent's turns (ACP has no request that
    // hands an agent a conversation), so acpx sends them before this prompt's text, as
    // `User: p: one` lines the fake model does not count as prompts of their own.
    let first = q
        .run(&["--timeout", "60", "-s", "branch", "prompt", "p: three"])
        .ok();
    assert!(
        first.stdout.contains("turns=1; heard=three"),
        "{}\n{}",
        first.stdout,
        first.stderr
    );
    assert!(
        !first.stderr.contains("new ACP session"),
        "no fallback: {}",
        first.stderr
    );
    let events = events_of(&q, &child);
    assert!(
        lifecycle(&events, "session_fallback").is_empty(),
        "the fork's first prompt fell back: {:?}",
        lifecycle(&events, "session_fallback")
    );
    assert!(
        lifecycle(&events, "session_attached").is_empty(),
        "the owner kept the agent that made the fork"
    );
    assert_eq!(lifecycle(&events, "session_created").len(), 1);
    assert_eq!(lifecycle(&events, "session_forked").len(), 1);

    // A process of its own: qwen-code stored the fork's session at its first turn and
    // resumes it, with the fork's own turn.
    let second = q
        .run(&[
            "--no-owner",
            "--timeout",
            "60",
            "-s",
            "branch",
            "prompt",
            "p: four",
        ])
        .ok();
    assert!(
        second.stdout.contains("turns=2; heard=three | four"),
        "the fork's --no-owner prompt lost its own turn:\n{}\n{}",
        second.stdout,
        second.stderr
    );
    let events = events_of(&q, &child);
    assert!(lifecycle(&events, "session_fallback").is_empty());
    let attached = lifecycle(&events, "session_attached");
    assert_eq!(
        attached.len(),
        1,
        "only --no-owner reattached: {attached:?}"
    );
    assert_eq!(attached[0]["payload"]["method"], "session/resume");
    assert_eq!(attached[0]["payload"]["acpSessionId"], child_acp.as_str());
    let shown = q
        .run(&["--format", "json", "sessions", "show", &child])
        .ok()
        .json();
    assert_eq!(shown["acpxSessionId"], child_acp.as_str(), "{shown}");
    assert_eq!(shown["acpx"]["forked_from"]["method"], "copy", "{shown}");

    // The fork's record keeps the parent's conversation before its own turns; the parent is
    // unchanged.
    let hist = q.run(&["sessions", "history", &child]).ok().stdout;
    for text in [
        "p: one",
        "turns=2; heard=one | two",
        "p: three",
        "turns=2; heard=three | four",
    ] {
        assert!(
            hist.contains(text),
            "{text:?} not in the fork's history:\n{hist}"
        );
    }
    let hist = q.run(&["sessions", "history", &parent_id]).ok().stdout;
    assert!(
        hist.contains("p: two") && !hist.contains("p: three"),
        "{hist}"
    );
    // Two turns of the parent, two of the fork: no other model request.
    assert_eq!(q.model.requests().len(), 4);
    q.run(&["sessions", "close", "branch"]).ok();
    q.close();
}

#[test]
fn a_fork_is_a_copy_continued_by_its_owner_fs() {
    a_fork_is_a_copy_continued_by_its_owner("fs");
}

#[test]
fn a_fork_is_a_copy_continued_by_its_owner_sqlite() {
    a_fork_is_a_copy_continued_by_its_owner("sqlite");
}

/// The model calls qwen-code's `write_file`; qwen-code asks permission (the write's title,
/// path, input and diff come only in the request's `toolCall`), `--approve-all` grants it, and
/// qwen-code writes through the client (`fs/write_text_file`).
fn an_approved_write_is_recorded_with_its_input(backend: &'static str) {
    let Some(q) = Qwen::new(backend) else { return };
    q.new_session();
    let path = q.env.cwd().join("approved.txt");
    let path_str = path.to_string_lossy().into_owned();
    let prompt = format!("p: write-file {path_str} hello from qwen");
    let out = q
        .run(&["--approve-all", "--timeout", "60", "prompt", &prompt])
        .ok();
    assert!(
        out.stdout.contains("done: Successfully created and wrote"),
        "{}\n{}",
        out.stdout,
        out.stderr
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "hello from qwen");

    let events = q.events();
    let done = events.iter().rfind(|e| e["type"] == "prompt_done").unwrap();
    assert_eq!(done["payload"]["stopReason"], "end_turn", "{done}");
    assert_eq!(done["payload"]["permissionStats"]["approved"], 1, "{done}");
    let written = events
        .iter()
        .find(|e| e["payload"]["method"] == "fs/write_text_file")
        .expect("qwen-code wrote through the client");
    assert_eq!(written["payload"]["path"], path_str.as_str(), "{written}");
    // The permission request is logged with its toolCall as qwen-code sent it.
    let asked = events
        .iter()
        .find(|e| {
            e["type"] == "client_operation"
                && e["payload"]["method"] == "session/request_permission"
                && e["payload"].get("toolCall").is_some()
        })
        .expect("a session/request_permission with its toolCall in the log");
    let call = &asked["payload"]["toolCall"];
    assert_eq!(call["rawInput"]["file_path"], path_str.as_str(), "{call}");
    assert_eq!(call["rawInput"]["content"], "hello from qwen", "{call}");
    assert_eq!(call["locations"][0]["path"], path_str.as_str(), "{call}");
    assert_eq!(call["content"][0]["type"], "diff", "{call}");
    assert_eq!(call["content"][0]["newText"], "hello from qwen", "{call}");
    // qwen-code's own tool_call update has an empty input: only the permission request names
    // the file.
    let announced = events
        .iter()
        .find(|e| e["payload"]["update"]["sessionUpdate"] == "tool_call")
        .expect("a tool_call update");
    let call_id = announced["payload"]["update"]["toolCallId"].clone();
    assert_eq!(call["toolCallId"], call_id, "{call}");

    // The stored tool use has what the permission request said (issue 52, item 1).
    let doc = q.exported();
    let tool_use = doc["thread"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["Agent"]["content"].as_array())
        .flatten()
        .map(|c| &c["ToolUse"])
        .find(|u| u["id"] == call_id)
        .unwrap_or_else(|| panic!("no ToolUse {call_id} in {doc}"))
        .clone();
    let raw_input = match &tool_use["raw_input"] {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    assert!(
        raw_input.contains(&path_str),
        "the stored tool use has no input naming the file (the permission request's toolCall \
         was not applied): {tool_use}"
    );
    assert_eq!(
        tool_use["locations"][0]["path"],
        path_str.as_str(),
        "{tool_use}"
    );
    let read = q.run(&["sessions", "read"]).ok();
    assert!(read.stdout.contains(&path_str), "{}", read.stdout);
    q.close();
}

#[test]
fn an_approved_write_is_recorded_with_its_input_fs() {
    an_approved_write_is_recorded_with_its_input("fs");
}

#[test]
fn an_approved_write_is_recorded_with_its_input_sqlite() {
    an_approved_write_is_recorded_with_its_input("sqlite");
}

/// `acpx cancel` from another process while the model streams: the turn ends `cancelled`,
/// exit 0, and the next prompt works in the same conversation.
fn a_cancel_ends_a_long_answer(backend: &'static str) {
    let Some(q) = Qwen::new(backend) else { return };
    q.new_session();
    let agent = q.agent.as_str();
    let running = spawn_until(
        &q.env,
        &[
            "--format",
            "json",
            "--agent",
            agent,
            "--timeout",
            "60",
            "prompt",
            "p: slow",
        ],
        "tick 2",
    );
    let c = q.run(&["--format", "json", "cancel"]).ok().json();
    assert_eq!(c["cancelled"], true, "{c}");
    let (code, lines, stderr) = running.finish();
    assert_eq!(code, 0, "{stderr}");
    let last = lines.last().unwrap();
    assert_eq!(last["type"], "prompt_done", "{last}");
    assert_eq!(last["payload"]["stopReason"], "cancelled", "{last}");
    let ticks = last_reply(&q.events());
    assert!(
        ticks.starts_with("tick 1 tick 2") && !ticks.contains("tick 600"),
        "{ticks}"
    );

    // qwen-code keeps the cancelled prompt (and its partial answer) in the conversation.
    let after = q.run(&["--timeout", "60", "prompt", "p: after"]).ok();
    assert!(
        after.stdout.contains("turns=2; heard=slow | after"),
        "{}\n{}",
        after.stdout,
        after.stderr
    );
    q.close();
}

#[test]
fn a_cancel_ends_a_long_answer_fs() {
    a_cancel_ends_a_long_answer("fs");
}

#[test]
fn a_cancel_ends_a_long_answer_sqlite() {
    a_cancel_ends_a_long_answer("sqlite");
}

/// qwen-code's settings with two models of the fake server (`modelProviders`), so a model
/// can be chosen: qwen-code names them `fake-a(openai)` and `fake-b(openai)`.
const TWO_MODELS: &str = r#"{
  "security": {"auth": {"selectedType": "openai"}},
  "modelProviders": {"openai": [
    {"id": "fake-a", "name": "Fake A", "baseUrl": "{BASE_URL}", "envKey": "OPENAI_API_KEY"},
    {"id": "fake-b", "name": "Fake B", "baseUrl": "{BASE_URL}", "envKey": "OPENAI_API_KEY"}
  ]},
  "model": {"name": "fake-a"},
  "privacy": {"usageStatisticsEnabled": false},
  "telemetry": {"enabled": false},
  "general": {"enableAutoUpdate": false},
  "ui": {"enableFollowupSuggestions": false},
  "tools": {"approvalMode": "default"},
  "memory": {"enableManagedAutoMemory": false, "enableManagedAutoDream": false}
}
"#;

/// The mode and the model chosen in the warm owner are kept by a later command with an agent
/// process of its own (`--no-owner`, qwen-code's `session/resume`): in `auto-edit` qwen-code
/// writes without asking (in `default` it sends `session/request_permission` first), and
/// every model request after `set model` names `fake-b`. `--approve-all` lets acpx's own
/// write gate admit the `fs/write_text_file` that no approved tool call covers.
fn mode_and_model_are_kept_across_commands(backend: &'static str) {
    let Some(mut q) = Qwen::with_settings(backend, TWO_MODELS) else {
        return;
    };
    // The model comes from the settings here, not from the environment.
    q.env.extra_env.retain(|(k, _)| k != "OPENAI_MODEL");
    q.new_session();
    q.run(&["set-mode", "auto-edit"]).ok();
    q.run(&["set", "model", "fake-b(openai)"]).ok();
    let first = q.run(&["--timeout", "60", "prompt", "p: one"]).ok();
    assert!(first.stdout.contains("turns=1; heard=one"), "{first:?}");

    let path = q.env.cwd().join("kept-mode.txt");
    let prompt = format!("p: write-file {} in auto-edit", path.display());
    q.run(&[
        "--no-owner",
        "--approve-all",
        "--timeout",
        "60",
        "prompt",
        &prompt,
    ])
    .ok();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "in auto-edit");

    let events = q.events();
    let attached = lifecycle(&events, "session_attached");
    assert_eq!(
        attached.len(),
        1,
        "only --no-owner reattached: {attached:?}"
    );
    assert_eq!(attached[0]["payload"]["method"], "session/resume");
    assert!(
        !events
            .iter()
            .any(|e| e["payload"]["method"] == "session/request_permission"),
        "qwen-code asked: the auto-edit mode was lost"
    );
    assert!(events
        .iter()
        .any(|e| e["payload"]["method"] == "fs/write_text_file"));
    let shown = q.run(&["--format", "json", "sessions", "show"]).ok().json();
    assert_eq!(shown["acpx"]["current_mode_id"], "auto-edit", "{shown}");
    assert_eq!(
        shown["acpx"]["desired_model_id"], "fake-b(openai)",
        "{shown}"
    );
    let models: Vec<_> = q
        .model
        .requests()
        .iter()
        .map(|b| b["model"].clone())
        .collect();
    assert!(
        !models.is_empty() && models.iter().all(|m| m == "fake-b"),
        "{models:?}"
    );
    q.close();
}

#[test]
fn mode_and_model_are_kept_across_commands_sqlite() {
    mode_and_model_are_kept_across_commands("sqlite");
}

/// In its `default` mode qwen-code asks before a write; `--deny-all` refuses it, the file is
/// not written, and acpx exits 5. The conversation goes on in the next command. (qwen-code
/// starts slowly, so this test and the one above run on one backend each; the others cover
/// both.)
fn a_denied_write_exits_5(backend: &'static str) {
    let Some(q) = Qwen::new(backend) else { return };
    q.new_session();
    let path = q.env.cwd().join("denied.txt");
    let prompt = format!("p: write-file {} never", path.display());
    let r = q.run(&["--deny-all", "--timeout", "60", "prompt", &prompt]);
    assert_eq!(r.code, 5, "{}\n{}", r.stdout, r.stderr);
    assert!(!path.exists(), "the refused write happened");
    let events = q.events();
    let done = events.iter().rfind(|e| e["type"] == "prompt_done").unwrap();
    assert_eq!(done["payload"]["permissionStats"]["denied"], 1, "{done}");
    assert!(
        !events
            .iter()
            .any(|e| e["payload"]["method"] == "fs/write_text_file"),
        "nothing was written through the client"
    );
    let after = q.run(&["--timeout", "60", "prompt", "p: after"]).ok();
    assert!(after.stdout.contains("| after"), "{}", after.stdout);
    q.close();
}

#[test]
fn a_denied_write_exits_5_fs() {
    a_denied_write_exits_5("fs");
}
