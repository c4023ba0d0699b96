//! The Node record document → a `session.json` document of `docs/format.md`.

use acpx_model::{EventEnvelope, RecordId, SessionRecord, Timestamp};
use serde_json::{json, Map, Value};

/// The journal marker schema.
pub const JOURNAL_SCHEMA: &str = "acpx.session.journal.v1";
/// Type of the events that keep journal frames acpx has no typed event for.
pub const NODE_FRAME_EVENT: &str = "node_journal";

/// Where the conversation of an imported session came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThreadSource {
    /// Rebuilt from the journal (nothing trimmed).
    Journal,
    /// The Node record's stored messages (the journal did not cover them all).
    Record,
}

impl ThreadSource {
    /// The name used in reports (`journal`, `record`).
    pub fn as_str(self) -> &'static str {
        match self {
            ThreadSource::Journal => "journal",
            ThreadSource::Record => "record",
        }
    }
}

/// One converted session.
#[derive(Debug)]
pub struct Converted {
    /// The converted snapshot (thread rebuilt from the journal when that covers it).
    pub record: SessionRecord,
    /// The converted journal, seqs 1.. without gaps.
    pub events: Vec<EventEnvelope>,
    /// The Node record id (which may differ from the new one if it was not a valid id).
    pub original_id: String,
    /// Where the conversation came from.
    pub thread_source: ThreadSource,
    /// Things worth telling the user (ids changed, journal incomplete, …).
    pub notes: Vec<String>,
}

/// Whether a parsed JSON document is a Node acpx record (snake_case keys).
pub fn is_node_record(v: &Value) -> bool {
    v.get("acpx_record_id").is_some() && v.get("acpxRecordId").is_none()
}

/// The string at key `k`, if any.
pub(super) fn str_of<'a>(v: &'a Value, k: &str) -> Option<&'a str> {
    v.get(k).and_then(Value::as_str)
}

/// The timestamp at key `k`, if it parses.
pub(super) fn ts_of(v: &Value, k: &str) -> Option<Timestamp> {
    str_of(v, k).and_then(|s| Timestamp::parse(s).ok())
}

/// Moves content items this version cannot represent (Node's `Audio`) out of `content` into
/// an `acpx_node_content` list on the message, so nothing is dropped.
fn convert_message(m: &Value) -> Value {
    let mut m = m.clone();
    for role in ["User", "Agent"] {
        let Some(msg) = m.get_mut(role).and_then(Value::as_object_mut) else {
            continue;
        };
        let Some(Value::Array(items)) = msg.get("content").cloned() else {
            continue;
        };
        let known: &[&str] = if role == "User" {
            &["Text", "Mention", "Image"]
        } else {
            &["Text", "Thinking", "RedactedThinking", "ToolUse"]
        };
        let (keep, moved): (Vec<Value>, Vec<Value>) = items.into_iter().partition(|item| {
            item.as_object()
                .and_then(|o| o.keys().next())
                .is_some_and(|k| known.contains(&k.as_str()))
        });
        if !moved.is_empty() {
            msg.insert("content".into(), Value::Array(keep));
            msg.insert("acpx_node_content".into(), Value::Array(moved));
        }
        if role == "Agent" && !msg.contains_key("tool_results") {
            msg.insert("tool_results".into(), json!({}));
        }
    }
    m
}

/// The `session.json` document (`docs/format.md`) of a Node record (the conversation as Node stored
/// it). Validation is left to [`SessionRecord::from_json_slice`].
pub fn convert_record(node: &Value, new_id: &RecordId, now: Timestamp) -> Value {
    let created = ts_of(node, "created_at").unwrap_or(now);
    let last_used = ts_of(node, "last_used_at").unwrap_or(created);
    let closed = node.get("closed").and_then(Value::as_bool).unwrap_or(false);
    let mut doc = Map::new();
    doc.insert("schema".into(), json!("acpx.session.v1"));
    doc.insert("acpxRecordId".into(), json!(new_id));
    let acp = str_of(node, "acp_session_id")
        .filter(|s| !s.is_empty())
        .or_else(|| str_of(node, "acpx_record_id"))
        .unwrap_or(new_id.as_str());
    doc.insert("acpSessionId".into(), json!(acp));
    if let Some(a) = str_of(node, "agent_session_id").filter(|s| !s.is_empty()) {
        doc.insert("agentSessionId".into(), json!(a));
    }
    doc.insert(
        "agentCommand".into(),
        json!(str_of(node, "agent_command").unwrap_or("")),
    );
    doc.insert("cwd".into(), json!(str_of(node, "cwd").unwrap_or("/")));
    doc.insert(
        "name".into(),
        node.get("name").cloned().unwrap_or(Value::Null),
    );
    doc.insert("createdAt".into(), json!(created));
    doc.insert("lastUsedAt".into(), json!(last_used));
    doc.insert("closed".into(), json!(closed));
    doc.insert(
        "closedAt".into(),
        if closed {
            json!(ts_of(node, "closed_at").unwrap_or(last_used))
        } else {
            Value::Null
        },
    );
    // The Node process that owned `pid` is not ours to track.
    doc.insert("pid".into(), Value::Null);
    for (from, to) in [
        ("agent_started_at", "agentStartedAt"),
        ("last_prompt_at", "lastPromptAt"),
        ("last_agent_exit_at", "lastAgentExitAt"),
    ] {
        doc.insert(
            to.into(),
            ts_of(node, from).map_or(Value::Null, |t| json!(t)),
        );
    }
    for (from, to) in [
        ("last_agent_exit_code", "lastAgentExitCode"),
        ("last_agent_exit_signal", "lastAgentExitSignal"),
        ("last_agent_disconnect_reason", "lastAgentDisconnectReason"),
        ("protocol_version", "protocolVersion"),
    ] {
        doc.insert(to.into(), node.get(from).cloned().unwrap_or(Value::Null));
    }
    let caps = node
        .get("agent_capabilities")
        .filter(|c| c.is_object())
        .cloned()
        .unwrap_or_else(|| json!({}));
    doc.insert("agentCapabilities".into(), caps);

    let mut thread = Map::new();
    thread.insert("version".into(), json!("0.3.0"));
    thread.insert(
        "title".into(),
        json!(str_of(node, "title").unwrap_or_default()),
    );
    let messages: Vec<Value> = node
        .get("messages")
        .and_then(Value::as_array)
        .map(|ms| ms.iter().map(convert_message).collect())
        .unwrap_or_default();
    thread.insert("messages".into(), Value::Array(messages));
    thread.insert(
        "updated_at".into(),
        json!(ts_of(node, "updated_at").unwrap_or(last_used)),
    );
    for k in ["cumulative_token_usage", "request_token_usage"] {
        if let Some(v) = node.get(k).filter(|v| v.is_object()) {
            thread.insert(k.into(), v.clone());
        }
    }
    if let Some(c) = node.get("cumulative_cost") {
        thread.insert("cumulative_cost".into(), c.clone());
    }
    thread.insert("imported".into(), json!(true));
    doc.insert("thread".into(), Value::Object(thread));

    let mut acpx = Map::new();
    let nacpx = node.get("acpx").cloned().unwrap_or_else(|| json!({}));
    if let Some(m) = nacpx.get("current_mode_id") {
        acpx.insert("current_mode_id".into(), m.clone());
    }
    if let Some(Value::Array(cmds)) = nacpx.get("available_commands") {
        let names: Vec<Value> = cmds
            .iter()
            .filter_map(|c| c.get("name").and_then(Value::as_str).or_else(|| c.as_str()))
            .map(|n| json!(n))
            .collect();
        acpx.insert("available_commands".into(), Value::Array(names));
        acpx.insert("node_available_commands".into(), Value::Array(cmds.clone()));
    }
    if let Some(Value::Array(opts)) = nacpx.get("config_options") {
        acpx.insert("config_options".into(), Value::Array(opts.clone()));
    }
    // Kept under the keys the runtime re-applies after a fallback to a fresh ACP session.
    for k in [
        "desired_mode_id",
        "desired_config_options",
        "current_model_id",
        "available_models",
        "session_options",
    ] {
        if let Some(v) = nacpx.get(k) {
            acpx.insert(k.into(), v.clone());
        }
    }
    doc.insert("acpx".into(), Value::Object(acpx));
    if let Some(a) = node.get("agent_argv") {
        doc.insert("agentArgv".into(), a.clone());
    }
    Value::Object(doc)
}
