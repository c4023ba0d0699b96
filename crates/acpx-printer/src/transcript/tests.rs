//! Tests of the readable forms: history text, Markdown, unified diffs, plans, record facts.

use super::*;
use acpx_model::{NewSession, RecordId, Timestamp, UserMessage};
use serde_json::{json, Map};

fn record_with_tools() -> SessionRecord {
    let mut r = SessionRecord::new(
        NewSession {
            acpx_record_id: RecordId::parse("rec-1").unwrap(),
            acp_session_id: "acp".into(),
            agent_session_id: None,
            agent_command: "agent".into(),
            cwd: "/repo".into(),
            name: None,
        },
        Timestamp::from_millis(1_000).unwrap(),
    );
    r.thread.messages.push(Message::User(UserMessage {
        id: "u1".into(),
        content: vec![UserContent::Text("fix it".into())],
        extra: Map::new(),
    }));
    let mut a = AgentMessage::new();
    let mut tool = |id: &str, kind: &str, title: &str| {
        let mut extra = Map::new();
        extra.insert("kind".into(), json!(kind));
        extra.insert("title".into(), json!(title));
        extra.insert("status".into(), json!("completed"));
        a.content.push(AgentContent::ToolUse(ToolUse {
            id: id.into(),
            name: title.into(),
            raw_input: "{}".into(),
            input: json!({}).into(),
            is_input_complete: true,
            thought_signature: None,
            extra,
        }));
    };
    tool("e", "edit", "Edit lib.rs");
    tool("t", "execute", "cargo test");
    let result = |id: &str, key: &str, v: Value| {
        let mut extra = Map::new();
        extra.insert(key.into(), v);
        ToolResult {
            tool_use_id: id.into(),
            tool_name: id.into(),
            is_error: false,
            content: vec![ResultContent::Text("done".into())],
            output: None,
            extra,
        }
    };
    a.tool_results.insert(
        "e".into(),
        result(
            "e",
            DIFFS_KEY,
            json!([{"path": "/repo/lib.rs", "old_text": "a\nb\nc\n", "new_text": "a\nB\nc\n"}]),
        ),
    );
    let output: String = (1..=8).map(|i| format!("line {i}\n")).collect();
    a.tool_results.insert(
        "t".into(),
        result(
            "t",
            TERMINALS_KEY,
            json!([{"terminal_id": "term-1", "output": output, "exit_status": {"exitCode": 0}, "truncated": false}]),
        ),
    );
    r.thread.messages.push(Message::Agent(a));
    r
}

/// Settled messages show as the others do; when they cannot be read back, the history
/// says so and still shows no more than its limit.
#[test]
fn history_reads_settled_messages_back() {
    use acpx_model::testing::MemorySpill;
    let mut r = record_with_tools();
    for i in 2..5 {
        r.thread.messages.push(Message::User(UserMessage {
            id: format!("u{i}"),
            content: vec![UserContent::Text(format!("turn {i}"))],
            extra: Map::new(),
        }));
    }
    let whole = r.clone();
    let spills: [std::sync::Arc<MemorySpill>; 3] = Default::default();
    let stores = spills.clone();
    r.thread
        .settle(3, move || Ok(stores.map(|s| s as _)))
        .unwrap();
    assert_eq!(r.thread.messages.len(), 2);
    assert_eq!(
        history_text(&r, None, true),
        history_text(&whole, None, true)
    );
    assert_eq!(
        history_text(&r, Some(3), false),
        history_text(&whole, Some(3), false)
    );
    assert_eq!(markdown(&r), markdown(&whole));
    spills[0].fail_reads(true);
    assert_eq!(
        history_text(&r, Some(1), false),
        history_text(&whole, Some(1), false),
        "the last message alone needs nothing read back"
    );
    let cut = history_text(&r, Some(3), false);
    assert!(cut.contains("could not be read back"), "{cut}");
    assert!(cut.contains("turn 3") && cut.contains("turn 4"), "{cut}");
    assert!(!cut.contains("fix it"), "{cut}");
}

#[test]
fn line_diff_is_a_standard_unified_diff() {
    assert_eq!(
        line_diff("/f", Some("a\nb\nc\n"), "a\nB\nc\n"),
        "--- /f\n+++ /f\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n"
    );
    assert_eq!(
        line_diff("/n", None, "x\n"),
        "--- /dev/null\n+++ /n\n@@ -0,0 +1 @@\n+x\n"
    );
}

#[test]
fn history_shows_diffs_and_terminal_output() {
    let r = record_with_tools();
    let short = history_text(&r, None, false);
    assert!(
        short.contains("[tool] Edit lib.rs (edit, completed)"),
        "{short}"
    );
    assert!(
        short.contains("edited /repo/lib.rs (-3 +3 lines)"),
        "{short}"
    );
    assert!(short.contains("terminal term-1 (exit code 0):"), "{short}");
    assert!(short.contains("… 3 earlier lines") && short.contains("    line 8"));
    assert!(!short.contains("    line 3\n"));
    let full = history_text(&r, None, true);
    assert!(full.contains("  -b\n  +B\n"), "{full}");
    assert!(full.contains("    line 1\n"));
}

#[test]
fn markdown_fences_diffs_and_terminals() {
    let md = markdown(&record_with_tools());
    assert!(md.contains("Diff of `/repo/lib.rs`:\n\n```diff\n"), "{md}");
    assert!(md.contains("@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n```"), "{md}");
    assert!(md.contains("Terminal `term-1` (exit code 0):\n\n```console\nline 1\n"));
    assert_eq!(fence("a ```` b"), "`````");
}

#[test]
fn clip_cuts_on_characters() {
    assert_eq!(clip("héllo wörld", 5), "héllo…");
    assert_eq!(clip("a\nb", 5), "a b");
}

#[test]
fn record_facts_say_ids_state_and_messages() {
    let r = record_with_tools();
    let facts = record_facts(&r, &Probe::Idle);
    let get = |k: &str| facts.iter().find(|(l, _)| *l == k).map(|(_, v)| v.clone());
    assert_eq!(facts[0], ("record id", "rec-1".to_owned()));
    assert_eq!(get("ACP session id").as_deref(), Some("acp"));
    assert_eq!(get("agent session id"), None);
    assert_eq!(get("state").as_deref(), Some("open"));
    assert_eq!(get("messages"), Some(r.thread.messages.len().to_string()));
    let running = record_facts(&r, &Probe::Running(None));
    assert!(running.contains(&("state", "open, prompt running".to_owned())));
}

#[test]
fn history_shows_a_plan_with_the_reply_that_joined_it() {
    let mut r = record_with_tools();
    let entries = json!([{"content": "Read", "priority": "high", "status": "completed"}]);
    let mut a = AgentMessage::new();
    a.extra
        .insert(acpx_runtime::mapping::PLAN_KEY.into(), entries.clone());
    a.content.push(AgentContent::Text("ok".into()));
    r.thread.messages.push(Message::Agent(a));
    let history = history_text(&r, None, false);
    assert!(history.contains("[plan] [x] Read"), "{history}");
}
