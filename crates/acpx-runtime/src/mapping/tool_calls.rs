//! Tool calls: their open ACP state, the `ToolUse` and its `ToolResult` with the size caps,
//! and closing the tool uses a turn left open.

use std::collections::BTreeMap;

use acpx_model::{
    AgentContent, Image, ImageSize, Message, ResultContent, SessionRecord, ThreadJson, Timestamp,
    ToolResult, ToolUse,
};
use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::agent_message::current_agent_message;
use super::tool_content::{
    clear_terminal_outputs, content_extras, cut_at_char_boundary, ToolCallEnd, UNFINISHED_KEY,
};
use super::{Effect, OPEN_TOOL_CALLS_KEY, TOOL_OUTPUT_CAP_BYTES};

/// The ACP state of a tool call that has not finished.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(super) struct OpenToolCall {
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    kind: Option<String>,
    status: String,
    /// Whether the ToolUse name came from ACP `name` (else it follows the title).
    #[serde(default)]
    has_name: bool,
    #[serde(default)]
    content: Vec<Value>,
    #[serde(default)]
    locations: Vec<Value>,
    #[serde(default)]
    raw_output: Option<Value>,
    /// Every terminal the call showed, in order: a later `content` list replaces the earlier
    /// one, and agents often drop the terminal item when they report the final text.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) terminal_ids: Vec<String>,
    /// Every `diff` item the call showed, the latest per path, for the same reason: the
    /// permission request often carries the diff, and the update that ends the call only a
    /// line of text.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) diffs: Vec<Value>,
}

pub(super) fn open_tool_calls(record: &SessionRecord) -> BTreeMap<String, OpenToolCall> {
    record
        .acpx
        .extra
        .get(OPEN_TOOL_CALLS_KEY)
        .and_then(|v| serde_json::from_value(v.clone()).ok())
        .unwrap_or_default()
}

pub(super) fn store_open_tool_calls(
    record: &mut SessionRecord,
    calls: &BTreeMap<String, OpenToolCall>,
) {
    if calls.is_empty() {
        record.acpx.extra.remove(OPEN_TOOL_CALLS_KEY);
    } else {
        record.acpx.extra.insert(
            OPEN_TOOL_CALLS_KEY.into(),
            serde_json::to_value(calls).unwrap_or(Value::Null),
        );
    }
}

/// Index of the Agent message holding the ToolUse `id`, searching from the end of the latest
/// `turns` turns (docs/format.md § Tool calls, diffs, terminals and tokens in the thread): 1
/// for a `tool_call`, which starts a call of the running turn, 2 for a `tool_call_update`,
/// which may name a call of the turn before. A session that lives on holds no more than two
/// turns in memory (decision 17), and every process folds the log the same way, whatever it
/// holds.
pub(super) fn find_tool_use(record: &SessionRecord, id: &str, turns: usize) -> Option<usize> {
    let messages = &record.thread.messages;
    let from = messages
        .iter()
        .enumerate()
        .rev()
        .filter(|(_, m)| matches!(m, Message::User(_)))
        .nth(turns.saturating_sub(1))
        .map_or(0, |(i, _)| i);
    let found = messages[from..].iter().rposition(|m| match m {
        Message::Agent(a) => a
            .content
            .iter()
            .any(|c| matches!(c, AgentContent::ToolUse(t) if t.id == id)),
        _ => false,
    });
    found.map(|i| from + i)
}

pub(super) fn non_null<'a>(update: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    update.get(key).filter(|v| !v.is_null())
}

pub(super) fn upsert_tool_call(record: &mut SessionRecord, update: &Map<String, Value>) -> Effect {
    let Some(id) = update.get("toolCallId").and_then(Value::as_str) else {
        return Effect::ignored("tool call without toolCallId");
    };
    let mut open = open_tool_calls(record);
    let creates = update.get("sessionUpdate").and_then(Value::as_str) == Some("tool_call");
    let existing = find_tool_use(record, id, if creates { 1 } else { 2 });
    if let Some(ix) = existing {
        if let Message::Agent(m) = &record.thread.messages[ix] {
            if m.tool_results.contains_key(id) {
                return Effect::ignored(format!(
                    "tool call {id} already finished; terminal states are final"
                ));
            }
        }
    }
    let mut state = open.remove(id).unwrap_or_else(|| OpenToolCall {
        status: "pending".into(),
        ..OpenToolCall::default()
    });
    if let Some(t) = non_null(update, "title").and_then(Value::as_str) {
        state.title = Some(t.to_owned());
    }
    if let Some(k) = non_null(update, "kind").and_then(Value::as_str) {
        state.kind = Some(k.to_owned());
    }
    if let Some(s) = non_null(update, "status").and_then(Value::as_str) {
        state.status = s.to_owned();
    }
    if let Some(c) = non_null(update, "content").and_then(Value::as_array) {
        state.content = c.clone();
        for item in c {
            match item.get("type").and_then(Value::as_str) {
                Some("terminal") => {
                    if let Some(id) = item.get("terminalId").and_then(Value::as_str) {
                        if !state.terminal_ids.iter().any(|t| t == id) {
                            state.terminal_ids.push(id.to_owned());
                        }
                    }
                }
                Some("diff") => {
                    let path = item.get("path");
                    state.diffs.retain(|d| d.get("path") != path);
                    state.diffs.push(item.clone());
                }
                _ => {}
            }
        }
    }
    if let Some(l) = non_null(update, "locations").and_then(Value::as_array) {
        state.locations = l.clone();
    }
    if let Some(o) = non_null(update, "rawOutput") {
        state.raw_output = Some(o.clone());
    }
    let name = non_null(update, "name")
        .and_then(Value::as_str)
        .or_else(|| meta_tool_name(update));
    if name.is_some() {
        state.has_name = true;
    }
    let raw_input = non_null(update, "rawInput");
    let input_complete = state.status != "pending";
    let terminal = matches!(state.status.as_str(), "completed" | "failed");
    // Diffs and terminal output of a finished call, read before the message is borrowed.
    let mut content_extra = Map::new();
    let content_cut = terminal
        && content_extras(
            record,
            &state.diffs,
            &state.terminal_ids,
            &mut content_extra,
        );

    let ix = match existing {
        Some(ix) => ix,
        None => {
            let tool_use = ToolUse {
                id: id.to_owned(),
                name: String::new(),
                raw_input: "{}".into(),
                input: json!({}).into(),
                is_input_complete: false,
                thought_signature: None,
                extra: Map::new(),
            };
            current_agent_message(record, None, false)
                .content
                .push(AgentContent::ToolUse(tool_use));
            record.thread.messages.len() - 1
        }
    };
    let Message::Agent(msg) = &mut record.thread.messages[ix] else {
        unreachable!("find_tool_use and current_agent_message return Agent messages")
    };
    let Some(tool_use) = msg.tool_use_mut(id) else {
        unreachable!("the message was chosen because it holds this tool use")
    };
    if let Some(n) = name {
        tool_use.name = n.to_owned();
    } else if !state.has_name {
        tool_use.name = state.title.clone().unwrap_or_else(|| id.to_owned());
    }
    if let Some(input) = raw_input {
        set_tool_input(tool_use, input);
    }
    tool_use.is_input_complete |= input_complete;
    set_acp_fields(tool_use, &state);
    let tool_name = tool_use.name.clone();

    if terminal {
        let mut result = build_result(id, &tool_name, &state);
        if content_cut {
            result.extra.insert("truncated".into(), json!(true));
        }
        result.extra.extend(content_extra);
        msg.tool_results.insert(id.to_owned(), result);
    } else {
        open.insert(id.to_owned(), state);
    }
    store_open_tool_calls(record, &open);
    Effect::Applied
}

/// The `toolCall` of a permission request (`client_operation` of
/// `session/request_permission` with status `running`), applied like a `tool_call_update`:
/// ACP sends it as a `ToolCallUpdate`, and Zed upserts it into the thread's tool call. Its
/// decision (status `completed`) changes nothing: what the agent does next comes in its own
/// updates.
pub(super) fn apply_permission_request(
    record: &mut SessionRecord,
    p: &acpx_model::event::ClientOperationPayload,
) -> Effect {
    if p.status.as_str() != "running" {
        return Effect::ignored("audit only");
    }
    let Some(tool_call) = p.extra.get("toolCall").and_then(Value::as_object) else {
        return Effect::ignored("permission request without a toolCall");
    };
    if !super::turn_is_running(record) {
        return Effect::ignored("late: no turn is running");
    }
    let mut update = tool_call.clone();
    update.insert("sessionUpdate".into(), json!("tool_call_update"));
    upsert_tool_call(record, &update)
}

/// The ACP `kind`, `title` and `status` of a call, kept on its ToolUse (`docs/format.md`,
/// § Tool calls, diffs, terminals and tokens in the thread).
fn set_acp_fields(tool_use: &mut ToolUse, state: &OpenToolCall) {
    if let Some(k) = &state.kind {
        tool_use.extra.insert("kind".into(), json!(k));
    }
    if let Some(t) = &state.title {
        tool_use.extra.insert("title".into(), json!(t));
    }
    tool_use.extra.insert("status".into(), json!(state.status));
    if !state.locations.is_empty() {
        tool_use
            .extra
            .insert("locations".into(), Value::Array(state.locations.clone()));
    }
}

/// A programmatic tool name some agents send in `_meta` (`{"<agent>": {"toolName": ..}}`)
/// when ACP `name` is absent.
fn meta_tool_name(update: &Map<String, Value>) -> Option<&str> {
    let meta = update.get("_meta")?.as_object()?;
    meta.get("toolName").and_then(Value::as_str).or_else(|| {
        meta.values()
            .find_map(|v| v.get("toolName").and_then(Value::as_str))
    })
}

pub(super) fn set_tool_input(tool_use: &mut ToolUse, input: &Value) {
    let text = serde_json::to_string(input).unwrap_or_default();
    tool_use.extra.remove("input_truncated");
    tool_use.extra.remove("input_bytes");
    if text.len() > TOOL_OUTPUT_CAP_BYTES {
        let cut = cut_at_char_boundary(&text, TOOL_OUTPUT_CAP_BYTES).to_owned();
        tool_use.input = Value::String(cut.clone()).into();
        tool_use.raw_input = cut.into();
        tool_use.extra.insert("input_truncated".into(), json!(true));
        tool_use
            .extra
            .insert("input_bytes".into(), json!(text.len()));
    } else {
        tool_use.input = input.clone().into();
        tool_use.raw_input = text.into();
    }
}

pub(super) fn build_result(id: &str, tool_name: &str, state: &OpenToolCall) -> ToolResult {
    let mut items = Vec::new();
    for item in &state.content {
        if item.get("type").and_then(Value::as_str) != Some("content") {
            // diff and terminal items have no result slot; the event log keeps them.
            continue;
        }
        if let Some(block) = item.get("content") {
            if let Some(rc) = result_content_from_block(block) {
                items.push(rc);
            }
        }
    }
    let content_bytes: usize = items
        .iter()
        .map(|c| match c {
            ResultContent::Text(t) => t.len(),
            ResultContent::Image(_) => 0,
        })
        .sum();
    let mut truncated = false;
    if content_bytes > TOOL_OUTPUT_CAP_BYTES {
        truncated = true;
        let mut budget = TOOL_OUTPUT_CAP_BYTES;
        let mut capped = Vec::new();
        for item in items {
            match item {
                ResultContent::Text(t) => {
                    if budget == 0 {
                        break;
                    }
                    // Just built from the update: in memory, so this borrows.
                    let whole = t.to_text_lossy();
                    let cut = cut_at_char_boundary(&whole, budget).to_owned();
                    budget -= cut.len();
                    capped.push(ResultContent::Text(cut.into()));
                }
                image => capped.push(image),
            }
        }
        items = capped;
    }
    if items.is_empty() {
        let title = state.title.as_deref().unwrap_or(tool_name);
        items.push(ResultContent::Text(
            format!("{title} ({})", state.status).into(),
        ));
    }
    let mut output_bytes = 0;
    let output = state.raw_output.as_ref().map(|o| {
        let text = serde_json::to_string(o).unwrap_or_default();
        output_bytes = text.len();
        if text.len() > TOOL_OUTPUT_CAP_BYTES {
            truncated = true;
            Value::String(cut_at_char_boundary(&text, TOOL_OUTPUT_CAP_BYTES).to_owned())
        } else {
            o.clone()
        }
    });
    let mut extra = Map::new();
    if truncated {
        extra.insert("truncated".into(), json!(true));
        extra.insert("content_bytes".into(), json!(content_bytes));
        extra.insert("output_bytes".into(), json!(output_bytes));
    }
    ToolResult {
        tool_use_id: id.to_owned(),
        tool_name: tool_name.to_owned(),
        is_error: state.status == "failed",
        content: items,
        output: output.map(ThreadJson::from),
        extra,
    }
}

/// A tool-result item from an ACP ContentBlock.
pub(super) fn result_content_from_block(block: &Value) -> Option<ResultContent> {
    match block.get("type").and_then(Value::as_str)? {
        "text" => Some(ResultContent::Text(
            block.get("text").and_then(Value::as_str)?.into(),
        )),
        "image" => {
            let data = block.get("data").and_then(Value::as_str)?;
            // Tool-result images must carry a size; one we cannot measure becomes a marker.
            match png_size(data) {
                Some(size) => Some(ResultContent::Image(Image {
                    source: data.to_owned(),
                    size: Some(size),
                    extra: Map::new(),
                })),
                None => Some(ResultContent::Text("[image]".into())),
            }
        }
        "resource_link" => {
            let uri = block.get("uri").and_then(Value::as_str).unwrap_or("");
            let name = block.get("name").and_then(Value::as_str).unwrap_or(uri);
            Some(ResultContent::Text(format!("[{name}]({uri})").into()))
        }
        "resource" => {
            let res = block.get("resource")?;
            match res.get("text").and_then(Value::as_str) {
                Some(text) => Some(ResultContent::Text(text.into())),
                None => Some(ResultContent::Text("[blob]".into())),
            }
        }
        "audio" => Some(ResultContent::Text("[audio]".into())),
        _ => None,
    }
}

/// Width and height of a base64 PNG, read from its IHDR chunk.
pub(super) fn png_size(base64_data: &str) -> Option<ImageSize> {
    // Only the first 24 bytes are needed: 32 base64 characters decode to exactly 24.
    let head: String = base64_data.chars().take(32).collect();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(head.as_bytes())
        .ok()?;
    if bytes.len() < 24 || &bytes[..8] != b"\x89PNG\r\n\x1a\n" || &bytes[12..16] != b"IHDR" {
        return None;
    }
    let width = u32::from_be_bytes([bytes[16], bytes[17], bytes[18], bytes[19]]);
    let height = u32::from_be_bytes([bytes[20], bytes[21], bytes[22], bytes[23]]);
    Some(ImageSize { width, height })
}

/// Gives every tool use without a result an error result that says why it ended (`end`), and
/// marks every input complete (`docs/format.md`, § Tool calls, diffs, terminals and tokens in
/// the thread). Returns how many tool uses were closed.
pub fn flush_open_tool_uses(record: &mut SessionRecord, at: Timestamp, end: &ToolCallEnd) -> usize {
    let open = open_tool_calls(record);
    clear_terminal_outputs(record);
    let mut closed = 0;
    for message in &mut record.thread.messages {
        let Message::Agent(m) = message else { continue };
        let mut dangling = Vec::new();
        for c in &mut m.content {
            if let AgentContent::ToolUse(t) = c {
                t.is_input_complete = true;
                if !m.tool_results.contains_key(&t.id) {
                    if let Some(state) = open.get(&t.id) {
                        set_acp_fields(t, state);
                    }
                    t.extra.insert("status".into(), json!(end.status()));
                    dangling.push((t.id.clone(), t.name.clone()));
                }
            }
        }
        for (id, name) in dangling {
            let mut extra = Map::new();
            extra.insert(UNFINISHED_KEY.into(), json!(end.key()));
            m.tool_results.insert(
                id.clone(),
                ToolResult {
                    tool_use_id: id,
                    tool_name: name,
                    is_error: true,
                    content: vec![ResultContent::Text(end.text().into())],
                    output: None,
                    extra,
                },
            );
            closed += 1;
        }
    }
    record.acpx.extra.remove(OPEN_TOOL_CALLS_KEY);
    if closed > 0 {
        record.thread.updated_at = at;
    }
    closed
}
