//! What a tool result keeps beside Zed's `content` and `output` (`docs/format.md`, § Tool
//! calls, diffs, terminals and tokens in the thread): the diffs of the files a tool wrote, the
//! output of the terminals it ran, and why a call that never finished ended.
//!
//! Diff and terminal texts share one budget of [`TOOL_OUTPUT_CAP_BYTES`] per result; what does
//! not fit is cut (a diff keeps its beginning, a terminal its end, as `terminal/output` does)
//! and the result says so. The event log keeps every byte.

use acpx_model::event::ClientOperationPayload;
use acpx_model::SessionRecord;
use serde_json::{json, Map, Value};

use super::{Effect, TOOL_OUTPUT_CAP_BYTES};

/// `acpx` key holding the latest output of the terminals of the running turn
/// (`{terminalId: {output, truncated, exit_status, output_bytes}}`), until a tool result takes
/// it or the turn ends.
pub const TERMINAL_OUTPUTS_KEY: &str = "terminal_outputs";

/// ToolResult key: the diffs of the call, `[{path, old_text, new_text, truncated?}]`.
pub const DIFFS_KEY: &str = "diffs";
/// ToolResult key: the terminals of the call, `[{terminal_id, output, exit_status, truncated,
/// output_bytes}]`.
pub const TERMINALS_KEY: &str = "terminals";
/// ToolResult key of a call closed at turn end: why it ended (see [`ToolCallEnd::key`]).
pub const UNFINISHED_KEY: &str = "unfinished";

/// Why a turn left a tool call without a terminal status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolCallEnd {
    /// The user cancelled the turn (Zed's "Tool canceled by user").
    Cancelled,
    /// The turn ended normally (this stop reason) while the call was still open.
    TurnEnded(String),
    /// The turn failed; the message says how.
    TurnFailed(String),
    /// The agent process exited or disconnected during the turn.
    AgentExited(String),
    /// The turn hit its timeout.
    TimedOut,
    /// acpx itself stopped mid-turn (the turn has no end in the log).
    Interrupted,
    /// The history an adopted session's agent replayed ended while the call was still open
    /// (see [`super::adopt`]).
    HistoryEnded,
}

impl ToolCallEnd {
    /// The value of the result's `unfinished` key.
    pub fn key(&self) -> &'static str {
        match self {
            ToolCallEnd::Cancelled => "cancelled",
            ToolCallEnd::TurnEnded(_) => "turn_ended",
            ToolCallEnd::TurnFailed(_) => "turn_failed",
            ToolCallEnd::AgentExited(_) => "agent_exited",
            ToolCallEnd::TimedOut => "timeout",
            ToolCallEnd::Interrupted => "interrupted",
            ToolCallEnd::HistoryEnded => "history_ended",
        }
    }

    /// The result text.
    pub fn text(&self) -> String {
        match self {
            ToolCallEnd::Cancelled => super::CANCELED_TOOL_TEXT.into(),
            ToolCallEnd::TurnEnded(stop) => {
                format!("Tool call unfinished: the turn ended ({stop}) before the tool did")
            }
            ToolCallEnd::TurnFailed(m) => format!("Tool call unfinished: the turn failed: {m}"),
            ToolCallEnd::AgentExited(m) => {
                format!("Tool call unfinished: the agent process ended: {m}")
            }
            ToolCallEnd::TimedOut => "Tool call unfinished: the turn timed out".into(),
            ToolCallEnd::Interrupted => {
                "Tool call unfinished: acpx stopped before the turn ended".into()
            }
            ToolCallEnd::HistoryEnded => {
                "Tool call unfinished: the history the agent replayed ended before the tool did"
                    .into()
            }
        }
    }

    /// The ToolUse `status` it leaves: `cancelled` for a cancel, else `failed`.
    pub fn status(&self) -> &'static str {
        match self {
            ToolCallEnd::Cancelled => "cancelled",
            _ => "failed",
        }
    }
}

/// The diffs of a call (`diffs`: every ACP `diff` content item it showed, the latest per
/// path) and its terminals (`terminal_ids`, every one it showed), as ToolResult extras;
/// returns whether something was cut.
pub(super) fn content_extras(
    record: &mut SessionRecord,
    diffs_shown: &[Value],
    terminal_ids: &[String],
    extra: &mut Map<String, Value>,
) -> bool {
    let mut budget = TOOL_OUTPUT_CAP_BYTES;
    let mut truncated = false;
    let mut diffs = Vec::new();
    let mut terminals = Vec::new();
    let mut outputs = terminal_outputs(record);
    for item in diffs_shown {
        if item.get("type").and_then(Value::as_str) == Some("diff") {
            let path = item.get("path").cloned().unwrap_or(Value::Null);
            let old = item.get("oldText").and_then(Value::as_str);
            let new = item.get("newText").and_then(Value::as_str).unwrap_or("");
            let mut cut = false;
            let mut take = |s: &str| {
                let kept = cut_at_char_boundary(s, budget);
                budget -= kept.len();
                cut |= kept.len() < s.len();
                kept.to_owned()
            };
            let old_text = old.map(&mut take);
            let new_text = take(new);
            let mut d = json!({"path": path, "old_text": old_text, "new_text": new_text});
            if cut {
                d["truncated"] = json!(true);
                d["bytes"] = json!(old.map_or(0, str::len) + new.len());
                truncated = true;
            }
            diffs.push(d);
        }
    }
    for id in terminal_ids {
        let known = outputs.remove(id).unwrap_or_else(|| json!({}));
        let output = known.get("output").and_then(Value::as_str).unwrap_or("");
        let kept = tail_at_char_boundary(output, budget);
        budget -= kept.len();
        let cut = kept.len() < output.len();
        truncated |= cut;
        terminals.push(json!({
            "terminal_id": id,
            "output": kept,
            "exit_status": known.get("exit_status").cloned().unwrap_or(Value::Null),
            "truncated": cut || known.get("truncated").and_then(Value::as_bool).unwrap_or(false),
            "output_bytes": known.get("output_bytes").cloned().unwrap_or(json!(output.len())),
        }));
    }
    if !diffs.is_empty() {
        extra.insert(DIFFS_KEY.into(), Value::Array(diffs));
    }
    if !terminals.is_empty() {
        extra.insert(TERMINALS_KEY.into(), Value::Array(terminals));
        store_terminal_outputs(record, outputs);
    }
    truncated
}

/// The last bytes of `s`, at most `max`, starting on a char boundary.
pub(super) fn tail_at_char_boundary(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

fn terminal_outputs(record: &SessionRecord) -> Map<String, Value> {
    record
        .acpx
        .extra
        .get(TERMINAL_OUTPUTS_KEY)
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

fn store_terminal_outputs(record: &mut SessionRecord, outputs: Map<String, Value>) {
    if outputs.is_empty() {
        record.acpx.extra.remove(TERMINAL_OUTPUTS_KEY);
    } else {
        record
            .acpx
            .extra
            .insert(TERMINAL_OUTPUTS_KEY.into(), Value::Object(outputs));
    }
}

/// Forgets the terminal outputs no result took (at turn end).
pub(super) fn clear_terminal_outputs(record: &mut SessionRecord) {
    record.acpx.extra.remove(TERMINAL_OUTPUTS_KEY);
}

/// A human's "always" / "never" answer (`always`, `alwaysKey` of a permission decision or of
/// acpx's write and terminal gates), remembered in the record for the session. Returns
/// whether `p` carried one.
pub(super) fn remember_always(record: &mut SessionRecord, p: &ClientOperationPayload) -> bool {
    let (Some(word), Some(key)) = (
        p.extra.get("always").and_then(Value::as_str),
        p.extra.get("alwaysKey").and_then(Value::as_str),
    ) else {
        return false;
    };
    let slot = record
        .acpx
        .extra
        .entry(super::PERMISSION_ALWAYS_KEY.to_owned())
        .or_insert_with(|| json!({}));
    if !slot.is_object() {
        *slot = json!({});
    }
    slot[key] = json!(word);
    true
}

/// A `client_operation` of a terminal: `terminal/output`, `terminal/wait_for_exit` and
/// `terminal/release` (which carries the output the agent never asked for) record the
/// latest output and exit status of the terminal, kept (capped, its end) until the tool
/// result that shows the terminal is written. Other operations are audit only.
pub(super) fn apply_client_operation(
    record: &mut SessionRecord,
    p: &ClientOperationPayload,
) -> Effect {
    if remember_always(record, p) {
        return Effect::Applied;
    }
    if !matches!(
        p.method.as_str(),
        "terminal/output" | "terminal/wait_for_exit" | "terminal/release"
    ) {
        return Effect::ignored("audit only");
    }
    let Some(id) = p.extra.get("terminalId").and_then(Value::as_str) else {
        return Effect::ignored("terminal operation without terminalId");
    };
    let mut outputs = terminal_outputs(record);
    let entry = outputs.entry(id.to_owned()).or_insert_with(
        || json!({"output": "", "truncated": false, "exit_status": null, "output_bytes": 0}),
    );
    if let Some(out) = p.extra.get("output").and_then(Value::as_str) {
        let kept = tail_at_char_boundary(out, TOOL_OUTPUT_CAP_BYTES);
        let cut = kept.len() < out.len();
        entry["output"] = json!(kept);
        entry["output_bytes"] = json!(out.len());
        entry["truncated"] = json!(
            cut || p
                .extra
                .get("truncated")
                .and_then(Value::as_bool)
                .unwrap_or(false)
        );
    }
    if let Some(status) = p.extra.get("exitStatus").filter(|s| !s.is_null()) {
        entry["exit_status"] = status.clone();
    }
    store_terminal_outputs(record, outputs);
    Effect::Applied
}
/// `s` cut to at most `max` bytes, at a character boundary.
pub(super) fn cut_at_char_boundary(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}
