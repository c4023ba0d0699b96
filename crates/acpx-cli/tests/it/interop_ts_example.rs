//! Interoperability with the example agent of the TypeScript ACP SDK 1.9.0 (npm
//! `@agentclientprotocol/sdk`, `dist/examples/agent.js`, installed into `peers/node/` by
//! `scripts/install-interop-peer.sh`), the SDK maintainers' own agent. Every step is a
//! separate `acpx` process, as a user runs them.
//!
//! What it does over ACP: every prompt plays the same five-second turn (text, a completed
//! `read` tool call, text, then an `edit` tool call it asks `session/request_permission` about,
//! then text that says whether the edit was allowed); it stops at the next one-second step when
//! cancelled. It advertises nothing beyond prompts: no `loadSession`, no resume, no fork, no
//! modes, no models; it answers `session/set_mode` with `{}` whatever the id, and
//! `session/set_config_option`/`session/set_model` with -32601. So where the other interop
//! tests check that the agent continues a conversation, this one checks what acpx does
//! instead: the warm owner keeps the agent's session, and a command with an agent process of
//! its own continues in a new ACP session and says so (`session_fallback`).
use crate::common;

use common::peers::*;
use common::process::*;
use common::*;

fn example_agent(backend: &'static str) -> Option<Peer> {
    let script =
        repo().join("peers/node/node_modules/@agentclientprotocol/sdk/dist/examples/agent.js");
    let agent = require(
        "TypeScript SDK example agent",
        "ACPX_INTEROP_TS_EXAMPLE_AGENT",
        (script.exists() && runs("node")).then(|| format!("node '{}'", script.display())),
    )?;
    Some(Peer {
        env: Env::new(backend),
        agent,
    })
}

/// The agent's closing text when the edit was refused, and when it was allowed.
const REFUSED: &str = "I understand you prefer not to make that change.";
const ALLOWED: &str = "Perfect! I've successfully updated the configuration.";

/// A refused edit exits 5 and an allowed one 0, in the same ACP session of the warm owner; a
/// `--no-owner` command cannot reattach (nothing to load or resume) and continues in a new ACP
/// session, which the record and stderr say. The record has the turns' tool calls and the
/// questions with their answers.
fn edits_asked_about_across_commands(backend: &'static str) {
    let Some(p) = example_agent(backend) else {
        return;
    };
    let created = p.new_session();
    let denied = p.run(&["--deny-all", "prompt", "change the config"]);
    assert_eq!(denied.code, 5, "{}\n{}", denied.stdout, denied.stderr);
    says(&denied, REFUSED);
    let events = p.events(None);
    let done = last_done(&events);
    assert_eq!(done["stopReason"], "end_turn", "{done}");
    assert_eq!(done["permissionStats"]["denied"], 1, "{done}");
    let asked = events
        .iter()
        .find(|e| {
            e["type"] == "client_operation"
                && e["payload"]["method"] == "session/request_permission"
                && e["payload"].get("toolCall").is_some()
        })
        .expect("the question in the log");
    assert_eq!(asked["payload"]["toolCall"]["kind"], "edit", "{asked}");

    let allowed = p.run(&["--approve-all", "prompt", "again"]).ok();
    says(&allowed, ALLOWED);
    let events = p.events(None);
    assert!(lifecycle(&events, "session_attached").is_empty());
    assert!(lifecycle(&events, "session_fallback").is_empty());

    let alone = p
        .run(&["--no-owner", "--approve-all", "prompt", "third"])
        .ok();
    says(&alone, ALLOWED);
    assert!(
        alone
            .stderr
            .contains("supports neither session/resume nor session/load"),
        "{}",
        alone.stderr
    );
    let events = p.events(None);
    assert_eq!(
        lifecycle(&events, "session_fallback").len(),
        1,
        "{events:?}"
    );
    let shown = p.shown(None);
    assert_ne!(shown["acpxSessionId"], created["acpxSessionId"], "{shown}");
    // The record keeps all three turns, each with its read and its edit.
    let doc = p.exported();
    let tool_uses = doc["thread"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["Agent"]["content"].as_array())
        .flatten()
        .filter(|c| c.get("ToolUse").is_some())
        .count();
    assert_eq!(tool_uses, 6, "{doc}");
    let history = p.run(&["sessions", "history"]).ok().stdout;
    for text in ["change the config", "again", "third", REFUSED, ALLOWED] {
        assert!(history.contains(text), "{text:?} not in:\n{history}");
    }
    p.close(None);
}

#[test]
fn edits_asked_about_across_commands_fs() {
    edits_asked_about_across_commands("fs");
}

#[test]
fn edits_asked_about_across_commands_sqlite() {
    edits_asked_about_across_commands("sqlite");
}

/// `acpx cancel` during the turn: the agent stops at its next step and the turn ends
/// `cancelled`, exit 0, before the edit is asked about.
fn a_cancel_ends_the_turn(backend: &'static str) {
    let Some(p) = example_agent(backend) else {
        return;
    };
    p.new_session();
    let running = spawn_until(
        &p.env,
        &[
            "--agent",
            p.agent.as_str(),
            "--format",
            "json",
            "prompt",
            "go",
        ],
        "I'll help you with that",
    );
    let c = p.run(&["--format", "json", "cancel"]).ok().json();
    assert_eq!(c["cancelled"], true, "{c}");
    let (code, lines, stderr) = running.finish();
    assert_eq!(code, 0, "{stderr}");
    let last = lines.last().expect("the turn's events");
    assert_eq!(last["payload"]["stopReason"], "cancelled", "{last}");
    assert!(
        !lines
            .iter()
            .any(|e| e["payload"]["method"] == "session/request_permission"),
        "the cancelled turn went on to the edit"
    );
    p.close(None);
}

#[test]
fn a_cancel_ends_the_turn_fs() {
    a_cancel_ends_the_turn("fs");
}

#[test]
fn a_cancel_ends_the_turn_sqlite() {
    a_cancel_ends_the_turn("sqlite");
}

/// What acpx does with the choices this agent does not offer: `set model` is refused with
/// both of the agent's -32601 answers and no model is kept; `set-mode` is sent (the agent
/// answers `{}`, so the mode is taken as set and kept for later sessions, as the agent said);
/// `sessions fork` makes a copy.
fn unsupported_choices_and_fork(backend: &'static str) {
    let Some(p) = example_agent(backend) else {
        return;
    };
    let parent = p.new_session();
    let refused = p.run(&["set", "model", "gpt-5"]);
    assert_eq!(refused.code, 1, "{}\n{}", refused.stdout, refused.stderr);
    for said in ["session/set_config_option", "session/set_model", "-32601"] {
        assert!(
            refused.stderr.contains(said),
            "{said:?}: {}",
            refused.stderr
        );
    }
    p.run(&["set-mode", "code"]).ok();
    let shown = p.shown(None);
    assert!(shown["acpx"]["desired_model_id"].is_null(), "{shown}");
    assert_eq!(shown["acpx"]["desired_mode_id"], "code", "{shown}");

    let f = p
        .run(&["--format", "json", "sessions", "fork", "--name", "branch"])
        .ok()
        .json();
    assert_eq!(f["method"], "copy", "{f}");
    assert_eq!(f["parentAcpxRecordId"], parent["acpxRecordId"], "{f}");
    p.close(Some("branch"));
    p.close(None);
}

#[test]
fn unsupported_choices_and_fork_fs() {
    unsupported_choices_and_fork("fs");
}
