//! Interoperability with a real third-party coding agent: codex-acp 0.16.0 (npm
//! `@zed-industries/codex-acp`, Zed's ACP adapter of OpenAI's codex, installed into `peers/codex/`
//! by `scripts/install-interop-peer.sh`) talking to a fake OpenAI Responses API on 127.0.0.1
//! (`scripts/peers/fake_responses.py`, Python stdlib only: no key, no network). Every step is a
//! separate `acpx` process, as a user runs them.
//!
//! The fake model answers from a script (see its header): a prompt `p: <text>` gets
//! `turns=<n>; heard=<the p: texts it was sent, joined by ' | '>; model=<the model asked for>`,
//! so a reply shows whether codex sent the earlier turns and which model it used;
//! `p: write-file <path> <content>` makes it call codex's `apply_patch` tool; `p: slow` streams
//! `tick …` for a minute (a turn to cancel).
//!
//! codex is configured through a private `CODEX_HOME` of the test: a config.toml whose model
//! provider `fake` points at the fake server, with its key in `FAKE_MODEL_KEY=dummy` (a custom
//! provider needs no login: codex-acp checks auth only for its `openai` provider), no retries,
//! no update check, no analytics.
//!
//! What codex-acp 0.16.0 does over ACP: it advertises `loadSession` and `session/list`,
//! `session/resume` and `session/close` (no fork); its modes are approval presets (`read-only`,
//! the default, which asks before every edit; `auto`, which edits the workspace without
//! asking; `full-access`), also offered as a `mode` config option beside a `model` option
//! (gpt-5.x presets); it asks `session/request_permission` for an edit and writes the file
//! itself (not through `fs/write_text_file`); a refused edit ends the turn `cancelled`.
use crate::common;

use common::peers::*;
use common::process::*;
use common::*;

fn peer_command() -> Option<String> {
    let bin = repo().join("peers/codex/node_modules/.bin/codex-acp");
    let installed = bin.exists() && runs("node") && runs("python3");
    require(
        "codex-acp",
        "ACPX_INTEROP_CODEX_AGENT",
        installed.then(|| format!("'{}'", bin.display())),
    )
}

/// The model codex starts with (a preset it knows, so it has no "metadata not found" notice),
/// and the one a test switches to.
const START_MODEL: &str = "gpt-5.4-mini";
const OTHER_MODEL: &str = "gpt-5.2";

/// codex's config.toml: the fake provider, nothing else that reaches the network.
fn config_toml(url: &str) -> String {
    format!(
        r#"model = "{START_MODEL}"
model_provider = "fake"
check_for_update_on_startup = false

[model_providers.fake]
name = "fake"
base_url = "{url}"
env_key = "FAKE_MODEL_KEY"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0

[analytics]
enabled = false
"#
    )
}

/// A test's codex: acpx's home and project, the fake model, codex's own home.
struct Codex {
    peer: Peer,
    model: FakeModel,
}

impl Codex {
    fn new(backend: &'static str) -> Option<Codex> {
        let agent = peer_command()?;
        let mut env = Env::new(backend);
        let model = FakeModel::start("fake_responses.py", env.home());
        let agent_home = env.home().join("agent-home");
        let codex_home = agent_home.join(".codex");
        std::fs::create_dir_all(&codex_home).unwrap();
        std::fs::write(codex_home.join("config.toml"), config_toml(&model.url)).unwrap();
        let vars = [
            ("HOME", agent_home.to_string_lossy().into_owned()),
            ("CODEX_HOME", codex_home.to_string_lossy().into_owned()),
            ("FAKE_MODEL_KEY", "dummy".into()),
            ("NO_BROWSER", "1".into()),
        ];
        env.extra_env
            .extend(vars.into_iter().map(|(k, v)| (k.to_owned(), v)));
        env.extra_env.extend(
            NO_PROXY
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        );
        Some(Codex {
            peer: Peer { env, agent },
            model,
        })
    }

    fn run(&self, args: &[&str]) -> Run {
        self.peer.run(args)
    }

    /// The model turns codex asked for (its `POST /responses` requests).
    fn turns_sent(&self) -> usize {
        self.model
            .requests()
            .iter()
            .filter(|b| b.get("input").is_some())
            .count()
    }
}

/// Context, mode and model across separate commands: a warm owner's prompts, then a
/// `--no-owner` command that reattaches (codex's `session/resume`) and still has the
/// conversation, the model chosen with `set model` and the mode chosen with `set-mode` (in
/// `full-access` codex edits without asking, so a write under `--deny-all` succeeds: it would
/// be refused, exit 5, had the mode fallen back to `read-only`). `auto` would not do here:
/// it applies edits in codex's Linux sandbox, which fails in these tests (their homes are
/// under /tmp, where codex refuses to create its helper binaries), and then asks to retry
/// unsandboxed.
fn context_mode_and_model_are_kept(backend: &'static str) {
    let Some(c) = Codex::new(backend) else { return };
    let created = c.peer.new_session();
    let first = c.run(&["--timeout", "60", "prompt", "p: one"]).ok();
    says(&first, &format!("turns=1; heard=one; model={START_MODEL}"));
    let shown = c.peer.shown(None);
    assert_eq!(
        shown["acpx"]["current_mode_id"], "read-only",
        "codex starts read-only: {shown}"
    );

    c.run(&["set-mode", "full-access"]).ok();
    c.run(&["set", "model", OTHER_MODEL]).ok();
    let second = c.run(&["--timeout", "60", "prompt", "p: two"]).ok();
    says(
        &second,
        &format!("turns=2; heard=one | two; model={OTHER_MODEL}"),
    );

    // An agent process of its own: codex resumes the session from its rollout file, and
    // acpx sets the mode and the model again.
    let third = c
        .run(&["--no-owner", "--timeout", "60", "prompt", "p: three"])
        .ok();
    says(
        &third,
        &format!("turns=3; heard=one | two | three; model={OTHER_MODEL}"),
    );
    let path = c.peer.env.cwd().join("kept-mode.txt");
    let prompt = format!("p: write-file {} written in full-access", path.display());
    let write = c.run(&[
        "--no-owner",
        "--deny-all",
        "--timeout",
        "60",
        "prompt",
        &prompt,
    ]);
    assert_eq!(
        write.code, 0,
        "the full-access mode was lost:\n{}\n{}",
        write.stdout, write.stderr
    );
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "written in full-access\n"
    );

    // The record: both reattaches resumed the same ACP session, with no fallback; the
    // stored thread and the session's choices are codex's.
    let events = c.peer.events(None);
    let attached = lifecycle(&events, "session_attached");
    assert_eq!(attached.len(), 2, "the --no-owner commands: {attached:?}");
    for a in &attached {
        assert_eq!(a["payload"]["method"], "session/resume", "{a}");
        assert_eq!(
            a["payload"]["acpSessionId"], created["acpxSessionId"],
            "{a}"
        );
    }
    assert!(lifecycle(&events, "session_fallback").is_empty());
    let done = last_done(&events);
    assert_eq!(done["stopReason"], "end_turn", "{done}");
    assert_eq!(done["permissionStats"]["requested"], 0, "{done}");
    let shown = c.peer.shown(None);
    assert_eq!(shown["acpxSessionId"], created["acpxSessionId"], "{shown}");
    assert_eq!(shown["acpx"]["current_mode_id"], "full-access", "{shown}");
    assert_eq!(shown["acpx"]["desired_model_id"], OTHER_MODEL, "{shown}");
    // codex also shows both as config options (`mode`, `model`). Its `config_option_update`
    // after a reattach's `session/set_mode` comes after acpx has set the model again and
    // still names the starting model, so the stored model option lags (codex's ordering);
    // the model codex really uses is in its requests.
    let mode = shown["acpx"]["config_options"]
        .as_array()
        .and_then(|o| o.iter().find(|o| o["id"] == "mode"))
        .map(|o| o["currentValue"].clone());
    assert_eq!(mode, Some("full-access".into()), "{shown}");
    let models: Vec<_> = c
        .model
        .requests()
        .iter()
        .map(|b| b["model"].clone())
        .collect();
    assert_eq!(models[0], START_MODEL, "{models:?}");
    assert!(models[1..].iter().all(|m| m == OTHER_MODEL), "{models:?}");
    let doc = c.peer.exported();
    let messages = doc["thread"]["messages"].as_array().unwrap();
    assert_eq!(messages[0]["User"]["content"][0]["Text"], "p: one", "{doc}");
    let history = c.run(&["sessions", "history"]).ok().stdout;
    for text in ["p: one", "p: three", "heard=one | two | three"] {
        assert!(history.contains(text), "{text:?} not in:\n{history}");
    }
    // Four turns, one more model request for the write's result: nothing else.
    assert_eq!(c.turns_sent(), 5, "{:?}", c.model.requests());
    c.peer.close(None);
}

#[test]
fn context_mode_and_model_are_kept_fs() {
    context_mode_and_model_are_kept("fs");
}

#[test]
fn context_mode_and_model_are_kept_sqlite() {
    context_mode_and_model_are_kept("sqlite");
}

/// codex in its default `read-only` mode asks before an edit; `--deny-all` refuses it, codex
/// ends the turn `cancelled`, and acpx exits 5 (a turn with a denied permission). The file is
/// not written, and the record has the question with codex's tool call and the refusal.
fn a_denied_write_exits_5(backend: &'static str) {
    let Some(c) = Codex::new(backend) else { return };
    c.peer.new_session();
    let path = c.peer.env.cwd().join("denied.txt");
    let path_str = path.to_string_lossy().into_owned();
    let prompt = format!("p: write-file {path_str} never");
    let r = c.run(&["--deny-all", "--timeout", "60", "prompt", &prompt]);
    assert_eq!(r.code, 5, "{}\n{}", r.stdout, r.stderr);
    assert!(!path.exists(), "the refused write happened");

    let events = c.peer.events(None);
    let done = last_done(&events);
    assert_eq!(done["stopReason"], "cancelled", "{done}");
    assert_eq!(done["permissionStats"]["requested"], 1, "{done}");
    assert_eq!(done["permissionStats"]["denied"], 1, "{done}");
    let asked = events
        .iter()
        .find(|e| {
            e["type"] == "client_operation"
                && e["payload"]["method"] == "session/request_permission"
                && e["payload"].get("toolCall").is_some()
        })
        .expect("the permission question in the log");
    let call = &asked["payload"]["toolCall"];
    assert_eq!(call["kind"], "edit", "{call}");
    assert_eq!(call["locations"][0]["path"], path_str.as_str(), "{call}");
    assert!(
        !events
            .iter()
            .any(|e| e["payload"]["method"] == "fs/write_text_file"),
        "codex writes itself, never through the client"
    );

    // The next command continues the conversation: codex kept the refused turn.
    let after = c.run(&["--timeout", "60", "prompt", "p: after"]).ok();
    says(&after, "turns=2; heard=write-file");
    says(&after, "| after;");
    c.peer.close(None);
}

#[test]
fn a_denied_write_exits_5_fs() {
    a_denied_write_exits_5("fs");
}

#[test]
fn a_denied_write_exits_5_sqlite() {
    a_denied_write_exits_5("sqlite");
}

/// `acpx cancel` from another process while the model streams: the turn ends `cancelled`,
/// exit 0, and the next prompt works in the same conversation.
fn a_cancel_ends_a_long_answer(backend: &'static str) {
    let Some(c) = Codex::new(backend) else { return };
    c.peer.new_session();
    let agent = c.peer.agent.as_str();
    let running = spawn_until(
        &c.peer.env,
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
    let cancelled = c.run(&["--format", "json", "cancel"]).ok().json();
    assert_eq!(cancelled["cancelled"], true, "{cancelled}");
    let (code, lines, stderr) = running.finish();
    assert_eq!(code, 0, "{stderr}");
    let last = lines.last().expect("the turn's events");
    assert_eq!(last["type"], "prompt_done", "{last}");
    assert_eq!(last["payload"]["stopReason"], "cancelled", "{last}");
    let ticks = last_reply(&c.peer.events(None));
    assert!(
        ticks.starts_with("tick 1 tick 2") && !ticks.contains("tick 600"),
        "{ticks}"
    );

    let after = c.run(&["--timeout", "60", "prompt", "p: after"]).ok();
    says(&after, "heard=slow | after;");
    c.peer.close(None);
}

#[test]
fn a_cancel_ends_a_long_answer_fs() {
    a_cancel_ends_a_long_answer("fs");
}

#[test]
fn a_cancel_ends_a_long_answer_sqlite() {
    a_cancel_ends_a_long_answer("sqlite");
}

/// `sessions fork` of a parent with a turn: codex-acp advertises no `session/fork`, so the
/// fork is a copy, a fresh codex session whose first prompt carries the parent's turns
/// (copied text the fake model does not count as prompts of their own); the parent goes on
/// without the fork's turns.
fn a_fork_is_a_copy(backend: &'static str) {
    let Some(c) = Codex::new(backend) else { return };
    let parent = c.peer.new_session();
    says(
        &c.run(&["--timeout", "60", "prompt", "p: remember banana"])
            .ok(),
        "turns=1; heard=remember banana;",
    );
    let r = c
        .run(&[
            "--format", "json", "--ttl", "30", "sessions", "fork", "--name", "branch",
        ])
        .ok();
    let f = r.json();
    assert_eq!(f["method"], "copy", "codex-acp has no session/fork: {f}");
    assert_eq!(f["parentAcpxRecordId"], parent["acpxRecordId"], "{f}");
    assert_eq!(f["forkMessageCount"], 2, "{f}");
    let child = f["acpxRecordId"].as_str().unwrap().to_owned();

    let first = c
        .run(&["--timeout", "60", "-s", "branch", "prompt", "p: child"])
        .ok();
    says(&first, "turns=1; heard=child;");
    let sent = c.model.requests();
    let last = sent.last().expect("the fork's turn").to_string();
    assert!(
        last.contains("remember banana"),
        "the fork's first turn carries the parent's: {last}"
    );
    let events = c.peer.events(Some(&child));
    assert!(lifecycle(&events, "session_fallback").is_empty());
    assert_eq!(lifecycle(&events, "session_forked").len(), 1);
    says(
        &c.run(&["--timeout", "60", "prompt", "p: parent"]).ok(),
        "turns=2; heard=remember banana | parent;",
    );
    c.peer.close(Some("branch"));
    c.peer.close(None);
}

#[test]
fn a_fork_is_a_copy_fs() {
    a_fork_is_a_copy("fs");
}

#[test]
fn a_fork_is_a_copy_sqlite() {
    a_fork_is_a_copy("sqlite");
}
