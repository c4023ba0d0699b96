//! Interoperability with a real third-party agent: fast-agent 0.10.48 (PyPI `fast-agent-mcp`,
//! installed into `.venv-fast-agent/` by `scripts/install-interop-peer.sh`) run as
//! `fast-agent-acp --model passthrough -x`: its built-in `passthrough` model answers with the
//! user's text (no LLM, no key, no network), and a text `***CALL_TOOL <tool> <json>` makes it
//! call that tool. `-x` gives it the client's terminal (its `execute` tool runs through
//! `terminal/create`) beside the client's files (`read_text_file`, `write_text_file` through
//! `fs/*`). Every step is a separate `acpx` process, as a user runs them.
//!
//! What fast-agent 0.10.48 does over ACP: it advertises `loadSession`, `session/list` and
//! `session/resume` (no fork); it keeps its sessions under `.fast-agent/` in the project; it has
//! one mode (`agent`) and no model selection (no `models`, no config options, and
//! `session/set_config_option`/`session/set_model` answer -32601), so acpx refuses `set model`
//! with both of the agent's answers and keeps no model; it asks
//! `session/request_permission` before every tool call. Its `/history` command lists the
//! conversation it holds: how these tests see the context a later command continued.
//!
//! Each agent process takes seconds to start (fast-agent imports its whole provider stack), so
//! each test runs on one backend, fs or sqlite in turn, not on both.
use crate::common;

use common::peers::*;
use common::process::*;
use common::*;

fn peer_command() -> Option<String> {
    let bin = repo().join(".venv-fast-agent/bin/fast-agent-acp");
    require(
        "fast-agent",
        "ACPX_INTEROP_FAST_AGENT",
        bin.exists()
            .then(|| format!("'{}' --model passthrough -x", bin.display())),
    )
}

fn fast_agent(backend: &'static str) -> Option<Peer> {
    let agent = peer_command()?;
    let mut env = Env::new(backend);
    let agent_home = env.home().join("agent-home");
    std::fs::create_dir_all(&agent_home).unwrap();
    env.extra_env
        .push(("HOME".into(), agent_home.to_string_lossy().into_owned()));
    env.extra_env.extend(
        NO_PROXY
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
    );
    Some(Peer { env, agent })
}

/// The conversation, the mode and the (refused) model across commands: a warm owner's turn,
/// then a `--no-owner` command that resumes the session and sees the earlier turn in the
/// agent's own `/history`; `set-mode agent` is kept (fast-agent has that one mode, so the
/// resumed session already is in it and acpx has nothing to set again); `set model` is
/// refused with the agent's own answers and leaves no model in the record.
fn context_and_mode_are_kept(backend: &'static str) {
    let Some(p) = fast_agent(backend) else { return };
    let created = p.new_session();
    p.run(&["set-mode", "agent"]).ok();
    says(&p.run(&["prompt", "p: one"]).ok(), "p: one");

    let refused = p.run(&["set", "model", "gpt-5"]);
    assert_eq!(refused.code, 1, "{}\n{}", refused.stdout, refused.stderr);
    for said in ["session/set_config_option", "session/set_model", "-32601"] {
        assert!(
            refused.stderr.contains(said),
            "{said:?}: {}",
            refused.stderr
        );
    }

    let history = p.run(&["--no-owner", "prompt", "/history"]).ok();
    says(&history, "- user: p: one");
    says(&history, "- assistant: p: one");
    let events = p.events(None);
    let attached = lifecycle(&events, "session_attached");
    assert_eq!(
        attached.len(),
        1,
        "only --no-owner reattached: {attached:?}"
    );
    assert_eq!(attached[0]["payload"]["method"], "session/resume");
    assert_eq!(
        attached[0]["payload"]["acpSessionId"],
        created["acpxSessionId"]
    );
    assert!(lifecycle(&events, "session_fallback").is_empty());

    let shown = p.shown(None);
    assert_eq!(shown["acpx"]["current_mode_id"], "agent", "{shown}");
    assert_eq!(shown["acpx"]["desired_mode_id"], "agent", "{shown}");
    assert!(shown["acpx"]["desired_model_id"].is_null(), "{shown}");
    let doc = p.exported();
    let messages = doc["thread"]["messages"].as_array().unwrap();
    assert_eq!(messages[0]["User"]["content"][0]["Text"], "p: one", "{doc}");
    assert_eq!(messages.len(), 4, "two turns: {doc}");
    p.close(None);
}

#[test]
fn context_and_mode_are_kept_fs() {
    context_and_mode_are_kept("fs");
}

/// The write tool asks first: refused by `--deny-all`, the file is not written and acpx exits
/// 5; approved, fast-agent writes through the client (`fs/write_text_file`), which acpx
/// records. Both questions are in the log with the agent's tool call.
fn a_denied_write_exits_5(backend: &'static str) {
    let Some(p) = fast_agent(backend) else { return };
    p.new_session();
    let path = p.env.cwd().join("notes.txt");
    let call = serde_json::json!({"path": path, "content": "from fast-agent"});
    let prompt = format!("***CALL_TOOL write_text_file {call}");
    let denied = p.run(&["--deny-all", "prompt", &prompt]);
    assert_eq!(denied.code, 5, "{}\n{}", denied.stdout, denied.stderr);
    says(&denied, "declined permission");
    assert!(!path.exists(), "the refused write happened");
    let done = last_done(&p.events(None));
    assert_eq!(done["permissionStats"]["denied"], 1, "{done}");

    p.run(&["--approve-all", "prompt", &prompt]).ok();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "from fast-agent");
    let events = p.events(None);
    let asked: Vec<_> = events
        .iter()
        .filter(|e| {
            e["type"] == "client_operation"
                && e["payload"]["method"] == "session/request_permission"
                && e["payload"]["status"] == "completed"
        })
        .map(|e| e["payload"]["decision"].clone())
        .collect();
    assert_eq!(asked, ["denied", "approved"], "{events:?}");
    let written = events
        .iter()
        .find(|e| e["payload"]["method"] == "fs/write_text_file")
        .expect("fast-agent wrote through the client");
    assert_eq!(
        written["payload"]["path"],
        path.to_str().unwrap(),
        "{written}"
    );
    let done = last_done(&events);
    assert_eq!(done["permissionStats"]["approved"], 1, "{done}");
    p.close(None);
}

#[test]
fn a_denied_write_exits_5_sqlite() {
    a_denied_write_exits_5("sqlite");
}

/// `acpx cancel` while fast-agent's `execute` tool runs a long command in acpx's terminal: the
/// turn ends `cancelled` with exit 0 long before the command would have, and fast-agent keeps
/// the interrupted call in its conversation.
fn a_cancel_stops_a_running_command(backend: &'static str) {
    let Some(p) = fast_agent(backend) else { return };
    p.new_session();
    let call = r#"***CALL_TOOL execute {"command": "sleep 60; echo slept"}"#;
    let started = std::time::Instant::now();
    let running = spawn_until(
        &p.env,
        &[
            "--agent",
            p.agent.as_str(),
            "--approve-all",
            "--format",
            "json",
            "prompt",
            call,
        ],
        "terminal/create",
    );
    let cancelled = p.run(&["--format", "json", "cancel"]).ok().json();
    assert_eq!(cancelled["cancelled"], true, "{cancelled}");
    let (code, lines, stderr) = running.finish();
    assert_eq!(code, 0, "{stderr}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(45),
        "the cancel did not stop the turn"
    );
    let last = lines.last().expect("the turn's events");
    assert_eq!(last["type"], "prompt_done", "{last}");
    assert_eq!(last["payload"]["stopReason"], "cancelled", "{last}");
    let history = p.run(&["prompt", "/history"]).ok();
    says(&history, "interrupted this tool call");
    p.close(None);
}

#[test]
fn a_cancel_stops_a_running_command_fs() {
    a_cancel_stops_a_running_command("fs");
}

/// `sessions fork`: fast-agent advertises no `session/fork`, so the fork is a copy, a fresh
/// fast-agent session whose first prompt carries the parent's turns as text before its own
/// (the passthrough model echoes it all back); the parent's conversation is unchanged.
fn a_fork_is_a_copy(backend: &'static str) {
    let Some(p) = fast_agent(backend) else { return };
    let parent = p.new_session();
    p.run(&["prompt", "p: remember banana"]).ok();
    let f = p
        .run(&[
            "--format", "json", "--ttl", "30", "sessions", "fork", "--name", "branch",
        ])
        .ok()
        .json();
    assert_eq!(f["method"], "copy", "fast-agent has no session/fork: {f}");
    assert_eq!(f["parentAcpxRecordId"], parent["acpxRecordId"], "{f}");
    let child = p.run(&["-s", "branch", "prompt", "p: child"]).ok();
    says(&child, "p: remember banana");
    says(&child, "p: child");
    let history = p.run(&["prompt", "/history"]).ok();
    assert!(
        !history.stdout.contains("p: child"),
        "the parent heard the fork: {}",
        history.stdout
    );
    p.close(Some("branch"));
    p.close(None);
}

#[test]
fn a_fork_is_a_copy_sqlite() {
    a_fork_is_a_copy("sqlite");
}
