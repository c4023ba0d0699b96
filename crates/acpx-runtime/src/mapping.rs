//! The pure reducer: folds one logged event into a [`SessionRecord`].
//!
//! Everything that changes `session.json` during a session goes through [`apply_event`]: the
//! live runtime records an event and then applies it, and [`roll_forward`] applies the logged
//! events that a snapshot has not seen yet (after a crash, or from `acpx fsck --repair`). The
//! reducer reads nothing but the record and the event (the event's own timestamp is the clock),
//! so replaying a log always rebuilds the same snapshot.
//!
//! # Mapping of ACP `session/update` kinds (seed `000_…`, `thread-json-shapes.md` §11)
//!
//! | update | effect |
//! |---|---|
//! | `agent_message_chunk` (text) | merged into the last `Text` of the current Agent message |
//! | `agent_thought_chunk` (text) | merged into the last `Thinking` of the current Agent message |
//! | `tool_call` / `tool_call_update` | upsert a `ToolUse`; on `completed`/`failed` write `tool_results[id]` |
//! | `plan` | `acpx.plan` |
//! | `available_commands_update` | `acpx.available_commands` (names) |
//! | `current_mode_update` | `acpx.current_mode_id` |
//! | `config_option_update` | `acpx.config_options` |
//! | `session_info_update` | `thread.title` (`null` clears), `thread.updated_at` |
//! | `usage_update` | `acpx.context_usage` (`used`, `size`, `cost`); token counts found in its `_meta` go to the turn's `request_token_usage` |
//! | `user_message_chunk`, non-text chunks, unknown kinds | nothing (the event log keeps them) |
//!
//! The "current Agent message" is the last message of the thread when it is an Agent message,
//! except that a new one starts when a chunk carries a `messageId` different from the one the
//! message was started with (kept as `acp_message_id` on the Agent message), and when text or
//! thinking arrives after a tool use of that message has finished (a new model round).
//!
//! Chunks and tool calls change the thread only while a turn is running (`acpx.last_turn` has
//! outcome `running`); updates that arrive after the turn ended are logged as late and do not
//! reopen it. Session-level updates (mode, commands, config, plan, title, usage) apply at any
//! time.
//!
//! # Tool calls (seed `003_…`)
//!
//! - Status moves `pending → in_progress → completed | failed`. `completed` and `failed` are
//!   final: a later `tool_call` or `tool_call_update` for that id is logged and ignored.
//! - While a call is open its ACP state (title, kind, status, content, locations, rawOutput) is
//!   kept under `acpx.open_tool_calls[<id>]`; it is removed when the call ends.
//! - The result text comes from the `content` items of the call; `output` is the `rawOutput`.
//!   Both are capped at [`TOOL_OUTPUT_CAP_BYTES`] in the snapshot. When something was cut, the
//!   result carries `"truncated": true`, `"content_bytes"` (full text size) and
//!   `"output_bytes"` (full size of the `rawOutput` JSON text); a cut `rawOutput` becomes a
//!   string holding the first bytes of its JSON text. An oversized `rawInput` is cut the same
//!   way (`ToolUse.raw_input` holds the first bytes, `input` a string preview, and the ToolUse
//!   carries `"input_truncated": true` and `"input_bytes"`). The event log keeps everything.
//! - When a turn ends (`prompt_done` / `prompt_error`), every tool use still without a result
//!   gets `{"is_error": true, "content": [{"Text": "Tool canceled by user"}]}` and
//!   `is_input_complete: true`.
//!
//! # Other events
//!
//! `prompt_started` pushes the `User` message (from its `userMessageId` and `prompt` keys) and
//! opens `last_turn`; `prompt_done` / `prompt_error` close it and store the prompt response's
//! usage; `control_done` / `control_error` set `last_control_update`; `lifecycle_event`s carry
//! identity and agent-process facts (see [`lifecycle`]). Every event bumps `acpx.audit_seq` and
//! pushes a compact summary into the `acpx.audit_events` ring.

use std::collections::BTreeMap;

use acpx_model::event::{
    ClientOperationPayload, ControlDonePayload, ControlErrorPayload, LifecycleEventPayload,
    PromptDonePayload, PromptErrorPayload, PromptStartedPayload, SessionUpdatePayload,
};
use acpx_model::session::DEFAULT_AUDIT_RING_CAPACITY;
use acpx_model::{
    AgentContent, AgentMessage, AuditEvent, EventEnvelope, EventPayload, Image, ImageSize,
    LastControlUpdate, LastTurn, Mention, Message, PermissionStats, PlanState, ResultContent,
    SessionRecord, Thinking, Timestamp, TokenUsage, ToolResult, ToolUse, TurnError, TurnState,
    UserContent, UserMessage,
};
use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

/// Most bytes of tool output (result text, and separately the `rawOutput` JSON) and tool input
/// kept in the thread for one tool call.
pub const TOOL_OUTPUT_CAP_BYTES: usize = 10 * 1024;

/// The result text given to tool uses left open when a turn ends.
pub const CANCELED_TOOL_TEXT: &str = "Tool canceled by user";

/// `acpx` key holding the ACP state of tool calls that have not finished.
pub const OPEN_TOOL_CALLS_KEY: &str = "open_tool_calls";
/// `acpx` key holding the latest `usage_update` (context window, cost).
pub const CONTEXT_USAGE_KEY: &str = "context_usage";
/// `acpx` key holding config values the user set (`{configId: value}`), re-applied after a
/// fallback to a fresh ACP session.
pub const DESIRED_CONFIG_KEY: &str = "desired_config_options";
/// `acpx` key holding the mode the user chose with `set_mode`.
pub const DESIRED_MODE_KEY: &str = "desired_mode_id";
/// Agent-message key holding the ACP `messageId` its chunks carried.
pub const MESSAGE_ID_KEY: &str = "acp_message_id";

/// Lifecycle phases this crate writes, and what each does to the record.
pub mod lifecycle {
    /// The agent process was spawned: `pid`, `command`, `startedAt`. Sets `pid` and
    /// `agentStartedAt` (from `startedAt`, else the event's time).
    pub const AGENT_STARTED: &str = "agent_started";
    /// `initialize` answered: `protocolVersion`, `agentCapabilities`, `agentInfo`.
    pub const INITIALIZED: &str = "initialized";
    /// `session/new` answered: `acpSessionId`, `agentSessionId`, `modes`, `configOptions`
    /// (the same keys on the next two phases set the ACP session id, the agent session id
    /// when non-empty, the current mode and the config options).
    pub const SESSION_CREATED: &str = "session_created";
    /// `session/load` or `session/resume` succeeded: `method`, `acpSessionId`,
    /// `agentSessionId`, `replayedUpdates`.
    pub const SESSION_ATTACHED: &str = "session_attached";
    /// Load/resume failed (or is unsupported) and a fresh ACP session replaced the old one:
    /// `reason`, `previousAcpSessionId`, `acpSessionId`, `agentSessionId`, `error`.
    pub const SESSION_FALLBACK: &str = "session_fallback";
    /// The agent process ended: `exitCode`, `signal`, `reason`. Clears `pid`.
    pub const AGENT_EXIT: &str = "agent_exit";
    /// On open, the record named an agent process of an earlier acpx process that did not
    /// shut down cleanly: `pid`. Clears `pid`.
    pub const STALE_AGENT: &str = "stale_agent";
    /// Events the snapshot had folded in never reached the log: `fromSeq`, `toSeq`.
    pub const LOG_GAP: &str = "log_gap";
    /// The session was closed: sets `closed` and `closedAt`.
    pub const SESSION_CLOSED: &str = "session_closed";
}

/// What [`apply_event`] did with one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// The snapshot changed (beyond the audit bookkeeping).
    Applied,
    /// Logged only; the reason says why the snapshot was not changed.
    Ignored(String),
    /// The event's seq is not newer than `acpx.audit_seq`: already folded into the snapshot.
    AlreadyApplied,
}

impl Effect {
    fn ignored(reason: impl Into<String>) -> Self {
        Effect::Ignored(reason.into())
    }
}

/// Folds one logged event into the record: the snapshot changes of its type, then
/// `acpx.audit_seq`, the audit ring and `lastUsedAt`. Events with a seq not newer than
/// `acpx.audit_seq` are skipped ([`Effect::AlreadyApplied`]), so applying a log twice is
/// harmless.
pub fn apply_event(record: &mut SessionRecord, event: &EventEnvelope) -> Effect {
    if event.seq <= record.acpx.audit_seq {
        return Effect::AlreadyApplied;
    }
    let at = event.timestamp;
    let effect = match event.payload_typed() {
        Ok(EventPayload::SessionUpdate(p)) => apply_session_update(record, &p, event, at),
        Ok(EventPayload::PromptStarted(p)) => apply_prompt_started(record, &p, event, at),
        Ok(EventPayload::PromptDone(p)) => apply_prompt_done(record, &p, at),
        Ok(EventPayload::PromptError(p)) => apply_prompt_error(record, &p, event, at),
        Ok(EventPayload::ControlDone(p)) => apply_control_done(record, &p, event, at),
        Ok(EventPayload::ControlError(p)) => apply_control_error(record, &p, event, at),
        Ok(EventPayload::LifecycleEvent(p)) => apply_lifecycle(record, &p, at),
        Ok(EventPayload::ClientOperation(_))
        | Ok(EventPayload::ControlStarted(_))
        | Ok(EventPayload::QueueEvent(_)) => Effect::ignored("audit only"),
        Ok(EventPayload::Unknown { event_type, .. }) => {
            Effect::ignored(format!("unknown event type {event_type:?}"))
        }
        Err(e) => Effect::ignored(format!("payload does not fit its type: {e}")),
    };
    record.acpx.audit_seq = event.seq;
    if at > record.last_used_at {
        record.last_used_at = at;
    }
    record.acpx.push_audit_event(
        AuditEvent {
            seq: event.seq,
            timestamp: at,
            event_type: event.kind(),
            summary: summarize(event, &effect),
        },
        DEFAULT_AUDIT_RING_CAPACITY,
    );
    effect
}

/// The result of [`roll_forward`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RollForward {
    /// Events folded into the snapshot.
    pub applied: u64,
    /// Events the snapshot already contained.
    pub already_applied: u64,
    /// Seq of the last event folded in, if any.
    pub last_seq: Option<u64>,
}

/// Applies, in order, the events the snapshot has not folded in yet (seq greater than
/// `acpx.audit_seq`). Used on open to bring a snapshot that was saved before a crash up to
/// date with its log.
pub fn roll_forward<'a>(
    record: &mut SessionRecord,
    events: impl IntoIterator<Item = &'a EventEnvelope>,
) -> RollForward {
    let mut report = RollForward::default();
    for event in events {
        match apply_event(record, event) {
            Effect::AlreadyApplied => report.already_applied += 1,
            _ => {
                report.applied += 1;
                report.last_seq = Some(event.seq);
            }
        }
    }
    report
}

/// Whether the record has a turn that started and never ended.
pub fn turn_is_running(record: &SessionRecord) -> bool {
    record
        .acpx
        .last_turn
        .as_ref()
        .is_some_and(|t| t.outcome == "running")
}

// ---------------------------------------------------------------------------------------------
// session/update
// ---------------------------------------------------------------------------------------------

fn apply_session_update(
    record: &mut SessionRecord,
    p: &SessionUpdatePayload,
    event: &EventEnvelope,
    at: Timestamp,
) -> Effect {
    if p.session_id != event.acp_session_id {
        return Effect::ignored(format!(
            "update for ACP session {:?}, not this session's {:?}",
            p.session_id, event.acp_session_id
        ));
    }
    let Some(update) = p.update.as_object() else {
        return Effect::ignored("`update` is not an object");
    };
    let kind = update
        .get("sessionUpdate")
        .and_then(Value::as_str)
        .unwrap_or("");
    let in_turn = turn_is_running(record);
    match kind {
        "agent_message_chunk" | "agent_thought_chunk" => {
            if !in_turn {
                return Effect::ignored("late: no turn is running");
            }
            let content = update.get("content");
            if content.and_then(|c| c.get("type")).and_then(Value::as_str) != Some("text") {
                return Effect::ignored("non-text chunk content has no thread slot");
            }
            let text = content
                .and_then(|c| c.get("text"))
                .and_then(Value::as_str)
                .unwrap_or("");
            let message_id = update.get("messageId").and_then(Value::as_str);
            let msg = current_agent_message(record, message_id, true);
            if kind == "agent_message_chunk" {
                match msg.content.last_mut() {
                    Some(AgentContent::Text(t)) => t.push_str(text),
                    _ => msg.content.push(AgentContent::Text(text.to_owned())),
                }
            } else {
                match msg.content.last_mut() {
                    Some(AgentContent::Thinking(t)) => t.text.push_str(text),
                    _ => msg.content.push(AgentContent::Thinking(Thinking {
                        text: text.to_owned(),
                        signature: None,
                    })),
                }
            }
            record.thread.updated_at = at;
            Effect::Applied
        }
        "tool_call" | "tool_call_update" => {
            if !in_turn {
                return Effect::ignored("late: no turn is running");
            }
            let effect = upsert_tool_call(record, update);
            if effect == Effect::Applied {
                record.thread.updated_at = at;
            }
            effect
        }
        "user_message_chunk" => {
            Effect::ignored("user chunks are not mapped: the prompt is recorded as sent")
        }
        "plan" => {
            let entries = update
                .get("entries")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            record.acpx.plan = Some(PlanState {
                entries,
                updated_at: at,
            });
            Effect::Applied
        }
        "available_commands_update" => {
            record.acpx.available_commands = update
                .get("availableCommands")
                .and_then(Value::as_array)
                .map(|cmds| {
                    cmds.iter()
                        .filter_map(|c| c.get("name").and_then(Value::as_str))
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default();
            Effect::Applied
        }
        "current_mode_update" => match update.get("currentModeId").and_then(Value::as_str) {
            Some(mode) => {
                record.acpx.current_mode_id = Some(mode.to_owned());
                Effect::Applied
            }
            None => Effect::ignored("current_mode_update without currentModeId"),
        },
        "config_option_update" => match update.get("configOptions").and_then(Value::as_array) {
            Some(options) => {
                record.acpx.config_options = options.clone();
                Effect::Applied
            }
            None => Effect::ignored("config_option_update without configOptions"),
        },
        "session_info_update" => {
            let mut changed = false;
            match update.get("title") {
                Some(Value::String(t)) => {
                    record.thread.title = t.clone();
                    changed = true;
                }
                Some(Value::Null) => {
                    record.thread.title.clear();
                    changed = true;
                }
                _ => {}
            }
            if let Some(ts) = update
                .get("updatedAt")
                .and_then(Value::as_str)
                .and_then(|s| Timestamp::parse(s).ok())
            {
                record.thread.updated_at = ts;
                changed = true;
            }
            if changed {
                Effect::Applied
            } else {
                Effect::ignored("session_info_update without title or updatedAt")
            }
        }
        "usage_update" => {
            let mut usage = Map::new();
            for key in ["used", "size", "cost"] {
                if let Some(v) = update.get(key) {
                    usage.insert(key.to_owned(), v.clone());
                }
            }
            usage.insert("updated_at".into(), json!(at));
            record
                .acpx
                .extra
                .insert(CONTEXT_USAGE_KEY.into(), Value::Object(usage));
            if in_turn {
                let tokens = update.get("_meta").and_then(|m| {
                    token_usage_from(m).or_else(|| m.get("usage").and_then(token_usage_from))
                });
                if let Some(tokens) = tokens {
                    set_request_usage(record, tokens);
                }
            }
            Effect::Applied
        }
        "" => Effect::ignored("update without a sessionUpdate tag"),
        other => Effect::ignored(format!("unknown update kind {other:?}")),
    }
}

/// The Agent message new content goes to, starting one when needed (see the module docs).
fn current_agent_message<'r>(
    record: &'r mut SessionRecord,
    message_id: Option<&str>,
    is_text: bool,
) -> &'r mut AgentMessage {
    let start_new = match record.thread.messages.last() {
        Some(Message::Agent(m)) => {
            let id_changed = match (
                message_id,
                m.extra.get(MESSAGE_ID_KEY).and_then(Value::as_str),
            ) {
                (Some(new), Some(old)) => new != old,
                _ => false,
            };
            let after_finished_tool = is_text
                && m.content.iter().any(
                    |c| matches!(c, AgentContent::ToolUse(t) if m.tool_results.contains_key(&t.id)),
                );
            id_changed || after_finished_tool
        }
        _ => true,
    };
    if start_new {
        record
            .thread
            .messages
            .push(Message::Agent(AgentMessage::new()));
    }
    let Some(Message::Agent(msg)) = record.thread.messages.last_mut() else {
        unreachable!("an Agent message was just ensured at the end of the thread")
    };
    if let Some(id) = message_id {
        msg.extra
            .entry(MESSAGE_ID_KEY)
            .or_insert_with(|| Value::String(id.to_owned()));
    }
    msg
}

/// The ACP state of a tool call that has not finished.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct OpenToolCall {
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
}

fn open_tool_calls(record: &SessionRecord) -> BTreeMap<String, OpenToolCall> {
    record
        .acpx
        .extra
        .get(OPEN_TOOL_CALLS_KEY)
        .and_then(|v| serde_json::from_value(v.clone()).ok())
        .unwrap_or_default()
}

fn store_open_tool_calls(record: &mut SessionRecord, calls: &BTreeMap<String, OpenToolCall>) {
    if calls.is_empty() {
        record.acpx.extra.remove(OPEN_TOOL_CALLS_KEY);
    } else {
        record.acpx.extra.insert(
            OPEN_TOOL_CALLS_KEY.into(),
            serde_json::to_value(calls).unwrap_or(Value::Null),
        );
    }
}

/// Index of the Agent message holding the ToolUse `id`, searching from the end.
fn find_tool_use(record: &SessionRecord, id: &str) -> Option<usize> {
    record.thread.messages.iter().rposition(|m| match m {
        Message::Agent(a) => a
            .content
            .iter()
            .any(|c| matches!(c, AgentContent::ToolUse(t) if t.id == id)),
        _ => false,
    })
}

fn non_null<'a>(update: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    update.get(key).filter(|v| !v.is_null())
}

fn upsert_tool_call(record: &mut SessionRecord, update: &Map<String, Value>) -> Effect {
    let Some(id) = update.get("toolCallId").and_then(Value::as_str) else {
        return Effect::ignored("tool call without toolCallId");
    };
    let mut open = open_tool_calls(record);
    let existing = find_tool_use(record, id);
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
    }
    if let Some(l) = non_null(update, "locations").and_then(Value::as_array) {
        state.locations = l.clone();
    }
    if let Some(o) = non_null(update, "rawOutput") {
        state.raw_output = Some(o.clone());
    }
    let name = non_null(update, "name").and_then(Value::as_str);
    if name.is_some() {
        state.has_name = true;
    }
    let raw_input = non_null(update, "rawInput");
    let input_complete = state.status != "pending";

    let ix = match existing {
        Some(ix) => ix,
        None => {
            let tool_use = ToolUse {
                id: id.to_owned(),
                name: String::new(),
                raw_input: "{}".into(),
                input: json!({}),
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
    let tool_name = tool_use.name.clone();

    if matches!(state.status.as_str(), "completed" | "failed") {
        let result = build_result(id, &tool_name, &state);
        msg.tool_results.insert(id.to_owned(), result);
    } else {
        open.insert(id.to_owned(), state);
    }
    store_open_tool_calls(record, &open);
    Effect::Applied
}

fn set_tool_input(tool_use: &mut ToolUse, input: &Value) {
    let text = serde_json::to_string(input).unwrap_or_default();
    tool_use.extra.remove("input_truncated");
    tool_use.extra.remove("input_bytes");
    if text.len() > TOOL_OUTPUT_CAP_BYTES {
        let cut = cut_at_char_boundary(&text, TOOL_OUTPUT_CAP_BYTES).to_owned();
        tool_use.input = Value::String(cut.clone());
        tool_use.raw_input = cut;
        tool_use.extra.insert("input_truncated".into(), json!(true));
        tool_use
            .extra
            .insert("input_bytes".into(), json!(text.len()));
    } else {
        tool_use.input = input.clone();
        tool_use.raw_input = text;
    }
}

fn cut_at_char_boundary(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

fn build_result(id: &str, tool_name: &str, state: &OpenToolCall) -> ToolResult {
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
                    let cut = cut_at_char_boundary(&t, budget).to_owned();
                    budget -= cut.len();
                    capped.push(ResultContent::Text(cut));
                }
                image => capped.push(image),
            }
        }
        items = capped;
    }
    if items.is_empty() {
        let title = state.title.as_deref().unwrap_or(tool_name);
        items.push(ResultContent::Text(format!("{title} ({})", state.status)));
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
        output,
        extra,
    }
}

/// A tool-result item from an ACP ContentBlock.
fn result_content_from_block(block: &Value) -> Option<ResultContent> {
    match block.get("type").and_then(Value::as_str)? {
        "text" => Some(ResultContent::Text(
            block.get("text").and_then(Value::as_str)?.to_owned(),
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
            Some(ResultContent::Text(format!("[{name}]({uri})")))
        }
        "resource" => {
            let res = block.get("resource")?;
            match res.get("text").and_then(Value::as_str) {
                Some(text) => Some(ResultContent::Text(text.to_owned())),
                None => Some(ResultContent::Text("[blob]".into())),
            }
        }
        "audio" => Some(ResultContent::Text("[audio]".into())),
        _ => None,
    }
}

/// Width and height of a base64 PNG, read from its IHDR chunk.
fn png_size(base64_data: &str) -> Option<ImageSize> {
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

/// Gives every tool use without a result the "canceled" error result and marks every input
/// complete (`thread-json-shapes.md` §11.5). Returns how many tool uses were closed.
pub fn flush_open_tool_uses(record: &mut SessionRecord, at: Timestamp) -> usize {
    let mut closed = 0;
    for message in &mut record.thread.messages {
        let Message::Agent(m) = message else { continue };
        let mut dangling = Vec::new();
        for c in &mut m.content {
            if let AgentContent::ToolUse(t) = c {
                t.is_input_complete = true;
                if !m.tool_results.contains_key(&t.id) {
                    dangling.push((t.id.clone(), t.name.clone()));
                }
            }
        }
        for (id, name) in dangling {
            m.tool_results.insert(
                id.clone(),
                ToolResult {
                    tool_use_id: id,
                    tool_name: name,
                    is_error: true,
                    content: vec![ResultContent::Text(CANCELED_TOOL_TEXT.into())],
                    output: None,
                    extra: Map::new(),
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

// ---------------------------------------------------------------------------------------------
// Token usage
// ---------------------------------------------------------------------------------------------

/// Reads an ACP usage object (`inputTokens`, `outputTokens`, `cachedReadTokens`,
/// `cachedWriteTokens`; snake_case spellings are accepted too). `None` when it holds no count.
pub fn token_usage_from(v: &Value) -> Option<TokenUsage> {
    let o = v.as_object()?;
    let get = |camel: &str, snake: &str| {
        o.get(camel)
            .or_else(|| o.get(snake))
            .and_then(Value::as_u64)
    };
    let input = get("inputTokens", "input_tokens");
    let output = get("outputTokens", "output_tokens");
    let cache_read = get("cachedReadTokens", "cache_read_input_tokens");
    let cache_write = get("cachedWriteTokens", "cache_creation_input_tokens");
    if input.is_none() && output.is_none() && cache_read.is_none() && cache_write.is_none() {
        return None;
    }
    Some(TokenUsage {
        input_tokens: input.unwrap_or(0),
        output_tokens: output.unwrap_or(0),
        cache_creation_input_tokens: cache_write.unwrap_or(0),
        cache_read_input_tokens: cache_read.unwrap_or(0),
    })
}

/// Stores the turn's usage under its user message id (the latest value wins, as in Zed) and
/// recomputes the cumulative usage as the sum over all turns.
fn set_request_usage(record: &mut SessionRecord, usage: TokenUsage) {
    let Some(user_id) = record.thread.last_user_message_id().map(str::to_owned) else {
        return;
    };
    record.thread.request_token_usage.insert(user_id, usage);
    record.thread.cumulative_token_usage = record
        .thread
        .request_token_usage
        .values()
        .fold(TokenUsage::default(), |acc, u| acc.saturating_add(*u));
}

// ---------------------------------------------------------------------------------------------
// Prompt turn events
// ---------------------------------------------------------------------------------------------

fn apply_prompt_started(
    record: &mut SessionRecord,
    p: &PromptStartedPayload,
    event: &EventEnvelope,
    at: Timestamp,
) -> Effect {
    // A turn that never ended (a crash) is closed before the next one opens.
    if turn_is_running(record) {
        flush_open_tool_uses(record, at);
        if let Some(t) = record.acpx.last_turn.as_mut() {
            t.outcome = "interrupted".into();
            t.ended_at = Some(at);
        }
    }
    let user_id = p
        .extra
        .get("userMessageId")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| format!("user-{}", event.seq));
    let blocks = p
        .extra
        .get("prompt")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_else(|| vec![json!({"type": "text", "text": p.message_preview})]);
    record.thread.messages.push(Message::User(UserMessage {
        id: user_id,
        content: user_content_from_acp(&blocks),
        extra: Map::new(),
    }));
    record.thread.updated_at = at;
    record.last_prompt_at = Some(at);
    record.acpx.last_turn = Some(LastTurn {
        request_id: event.request_id.clone().unwrap_or_default(),
        started_at: at,
        ended_at: None,
        resumed: p.resumed,
        stop_reason: None,
        outcome: "running".into(),
        error: None,
        permission_stats: PermissionStats::default(),
    });
    Effect::Applied
}

fn apply_prompt_done(record: &mut SessionRecord, p: &PromptDonePayload, at: Timestamp) -> Effect {
    flush_open_tool_uses(record, at);
    if let Some(usage) = p.extra.get("usage").and_then(token_usage_from) {
        set_request_usage(record, usage);
    }
    let outcome = if p.stop_reason == "cancelled" {
        "cancelled"
    } else {
        "completed"
    };
    end_turn(record, at, |t| {
        t.stop_reason = Some(p.stop_reason.clone());
        t.outcome = outcome.into();
        t.permission_stats = p.permission_stats;
    });
    record.thread.updated_at = at;
    Effect::Applied
}

fn apply_prompt_error(
    record: &mut SessionRecord,
    p: &PromptErrorPayload,
    event: &EventEnvelope,
    at: Timestamp,
) -> Effect {
    flush_open_tool_uses(record, at);
    let outcome = p
        .extra
        .get("outcome")
        .and_then(Value::as_str)
        .map_or(TurnState::Failed, TurnState::from);
    let stats = p
        .extra
        .get("permissionStats")
        .and_then(|v| serde_json::from_value::<PermissionStats>(v.clone()).ok());
    let error = TurnError {
        code: p.code.clone(),
        detail_code: p.detail_code.clone(),
        message: p.message.clone(),
        retryable: p.retryable,
    };
    let request_id = event.request_id.clone().unwrap_or_default();
    if record.acpx.last_turn.is_none() {
        // An error for a turn whose start the snapshot never saw (its log was rotated away).
        record.acpx.last_turn = Some(LastTurn {
            request_id,
            started_at: at,
            ended_at: None,
            resumed: false,
            stop_reason: None,
            outcome: "running".into(),
            error: None,
            permission_stats: PermissionStats::default(),
        });
    }
    let stop_reason = p
        .extra
        .get("stopReason")
        .and_then(Value::as_str)
        .map(str::to_owned);
    end_turn(record, at, |t| {
        t.outcome = outcome;
        t.error = Some(error);
        t.stop_reason = stop_reason;
        if let Some(s) = stats {
            t.permission_stats = s;
        }
    });
    record.thread.updated_at = at;
    Effect::Applied
}

fn end_turn(record: &mut SessionRecord, at: Timestamp, f: impl FnOnce(&mut LastTurn)) {
    if let Some(t) = record.acpx.last_turn.as_mut() {
        t.ended_at = Some(at);
        f(t);
    }
}

/// Converts ACP prompt ContentBlocks to thread user content (`thread-json-shapes.md` §4.3).
pub fn user_content_from_acp(blocks: &[Value]) -> Vec<UserContent> {
    blocks.iter().map(user_content_from_block).collect()
}

fn user_content_from_block(block: &Value) -> UserContent {
    let s = |k: &str| block.get(k).and_then(Value::as_str);
    match s("type").unwrap_or("") {
        "text" => UserContent::Text(s("text").unwrap_or("").to_owned()),
        "image" => UserContent::Image(Image {
            source: s("data").unwrap_or("").to_owned(),
            size: s("data").and_then(png_size),
            extra: Map::new(),
        }),
        "audio" => UserContent::Text("[audio]".into()),
        "resource_link" => {
            let uri = s("uri").unwrap_or("");
            match mention_uri(uri) {
                Some(m) => UserContent::Mention(Mention {
                    uri: m,
                    content: String::new(),
                }),
                None => UserContent::Text(format!("[{}]({uri})", s("name").unwrap_or(uri))),
            }
        }
        "resource" => {
            let res = block.get("resource");
            let uri = res
                .and_then(|r| r.get("uri"))
                .and_then(Value::as_str)
                .unwrap_or("");
            match res.and_then(|r| r.get("text")).and_then(Value::as_str) {
                Some(text) => match mention_uri(uri) {
                    Some(m) => UserContent::Mention(Mention {
                        uri: m,
                        content: text.to_owned(),
                    }),
                    None => UserContent::Text(format!("{uri}\n```\n{text}\n```")),
                },
                None => UserContent::Text("[blob]".into()),
            }
        }
        _ => UserContent::Text("[unknown]".into()),
    }
}

/// Zed's `MentionUri` for the URIs that map to a stable variant: `file://` (File, or Directory
/// for a trailing `/`) and `http(s)://` (Fetch).
fn mention_uri(uri: &str) -> Option<Value> {
    if let Some(path) = uri.strip_prefix("file://") {
        let path = percent_decode(path)?;
        if !path.starts_with('/') {
            return None;
        }
        return Some(if path.len() > 1 && path.ends_with('/') {
            json!({"Directory": {"abs_path": path.trim_end_matches('/')}})
        } else {
            json!({"File": {"abs_path": path}})
        });
    }
    if uri.starts_with("http://") || uri.starts_with("https://") {
        return Some(json!({"Fetch": {"url": uri}}));
    }
    None
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

// ---------------------------------------------------------------------------------------------
// Control and lifecycle events
// ---------------------------------------------------------------------------------------------

/// `last_control_update.payload` in the seed's snake_case shape, from a control input.
fn control_payload(action: &str, input: &Value) -> Value {
    let get = |k: &str| input.get(k).cloned().unwrap_or(Value::Null);
    match action {
        "set_mode" => json!({"mode_id": get("modeId")}),
        "set_config_option" => json!({"config_id": get("configId"), "value": get("value")}),
        _ => input.clone(),
    }
}

fn apply_control_done(
    record: &mut SessionRecord,
    p: &ControlDonePayload,
    event: &EventEnvelope,
    at: Timestamp,
) -> Effect {
    let input = p.extra.get("input").cloned().unwrap_or(Value::Null);
    match p.action.as_str() {
        "set_mode" => {
            if let Some(mode) = input.get("modeId").and_then(Value::as_str) {
                record.acpx.current_mode_id = Some(mode.to_owned());
                record
                    .acpx
                    .extra
                    .insert(DESIRED_MODE_KEY.into(), json!(mode));
            }
        }
        "set_config_option" => {
            if let Some(options) = p.result.get("configOptions").and_then(Value::as_array) {
                record.acpx.config_options = options.clone();
            }
            if let (Some(id), Some(value)) = (
                input.get("configId").and_then(Value::as_str),
                input.get("value"),
            ) {
                let desired = record
                    .acpx
                    .extra
                    .entry(DESIRED_CONFIG_KEY)
                    .or_insert_with(|| json!({}));
                if let Some(map) = desired.as_object_mut() {
                    map.insert(id.to_owned(), value.clone());
                }
            }
        }
        _ => {}
    }
    record.acpx.last_control_update = Some(LastControlUpdate {
        action: p.action.clone(),
        request_id: event.request_id.clone().unwrap_or_default(),
        updated_at: at,
        ok: true,
        payload: control_payload(&p.action, &input),
        error: None,
    });
    Effect::Applied
}

fn apply_control_error(
    record: &mut SessionRecord,
    p: &ControlErrorPayload,
    event: &EventEnvelope,
    at: Timestamp,
) -> Effect {
    let input = p.extra.get("input").cloned().unwrap_or(Value::Null);
    record.acpx.last_control_update = Some(LastControlUpdate {
        action: p.action.clone(),
        request_id: event.request_id.clone().unwrap_or_default(),
        updated_at: at,
        ok: false,
        payload: control_payload(&p.action, &input),
        error: serde_json::to_value(&p.error).ok(),
    });
    Effect::Applied
}

fn apply_lifecycle(record: &mut SessionRecord, p: &LifecycleEventPayload, at: Timestamp) -> Effect {
    let extra = &p.extra;
    let non_empty = |k: &str| {
        extra
            .get(k)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    match p.phase.as_str() {
        lifecycle::AGENT_STARTED => {
            record.pid = extra
                .get("pid")
                .and_then(Value::as_u64)
                .and_then(|p| u32::try_from(p).ok());
            record.agent_started_at = Some(
                extra
                    .get("startedAt")
                    .and_then(Value::as_str)
                    .and_then(|s| Timestamp::parse(s).ok())
                    .unwrap_or(at),
            );
        }
        lifecycle::INITIALIZED => {
            if let Some(v) = extra
                .get("protocolVersion")
                .and_then(Value::as_u64)
                .and_then(|v| u32::try_from(v).ok())
            {
                record.protocol_version = Some(v);
            }
            if let Some(caps) = extra.get("agentCapabilities").filter(|c| c.is_object()) {
                record.agent_capabilities = caps.clone();
            }
        }
        lifecycle::SESSION_CREATED | lifecycle::SESSION_ATTACHED | lifecycle::SESSION_FALLBACK => {
            if let Some(id) = non_empty("acpSessionId") {
                record.acp_session_id = id;
            }
            // Seed 004: replaced only by a new non-empty value, never invented.
            if let Some(id) = non_empty("agentSessionId") {
                record.agent_session_id = Some(id);
            }
            if let Some(mode) = extra
                .get("modes")
                .and_then(|m| m.get("currentModeId"))
                .and_then(Value::as_str)
            {
                record.acpx.current_mode_id = Some(mode.to_owned());
            }
            if let Some(options) = extra.get("configOptions").and_then(Value::as_array) {
                record.acpx.config_options = options.clone();
            }
        }
        lifecycle::AGENT_EXIT => {
            record.pid = None;
            record.last_agent_exit_code = p.exit_code;
            record.last_agent_exit_signal = p.signal.clone();
            record.last_agent_exit_at = Some(at);
            record.last_agent_disconnect_reason = p.reason.clone();
        }
        lifecycle::STALE_AGENT => {
            record.pid = None;
            record.last_agent_disconnect_reason = p.reason.clone();
        }
        lifecycle::SESSION_CLOSED => {
            record.closed = true;
            record.closed_at = Some(at);
            record.pid = None;
        }
        _ => {
            return Effect::ignored(format!(
                "lifecycle phase {:?} has no snapshot effect",
                p.phase
            ))
        }
    }
    Effect::Applied
}

// ---------------------------------------------------------------------------------------------
// Audit summaries
// ---------------------------------------------------------------------------------------------

const SUMMARY_MAX_CHARS: usize = 160;

fn clip(s: &str, max: usize) -> String {
    let mut chars = s.chars();
    let head: String = chars.by_ref().take(max).collect();
    if chars.next().is_some() {
        format!("{head}…")
    } else {
        head
    }
}

/// The one-line summary kept in the `acpx.audit_events` ring for an event.
pub fn summarize(event: &EventEnvelope, effect: &Effect) -> String {
    let p = &event.payload;
    let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
    let base = match event.event_type.as_str() {
        "session_update" => {
            let u = p.get("update").cloned().unwrap_or(Value::Null);
            let kind = s(&u, "sessionUpdate");
            match kind.as_str() {
                "agent_message_chunk" | "agent_thought_chunk" | "user_message_chunk" => {
                    let content = u.get("content").cloned().unwrap_or(Value::Null);
                    match content.get("text").and_then(Value::as_str) {
                        Some(t) => format!("{kind} ({} chars)", t.chars().count()),
                        None => format!("{kind} ({})", s(&content, "type")),
                    }
                }
                "tool_call" | "tool_call_update" => {
                    let mut line = format!("{kind} {}", s(&u, "toolCallId"));
                    let title = s(&u, "title");
                    if !title.is_empty() {
                        line.push_str(&format!(" {title:?}"));
                    }
                    let status = s(&u, "status");
                    if !status.is_empty() {
                        line.push_str(&format!(" ({status})"));
                    }
                    line
                }
                "plan" => format!(
                    "plan ({} entries)",
                    u.get("entries")
                        .and_then(Value::as_array)
                        .map_or(0, Vec::len)
                ),
                "current_mode_update" => format!("current_mode_update {}", s(&u, "currentModeId")),
                "session_info_update" => format!("session_info_update {}", s(&u, "title")),
                "" => "session_update (no kind)".into(),
                other => other.to_owned(),
            }
        }
        "client_operation" => match serde_json::from_value::<ClientOperationPayload>(p.clone()) {
            Ok(op) => format!("{} {}: {}", op.method, op.status, op.summary),
            Err(_) => "client_operation".into(),
        },
        "prompt_started" => format!("prompt: {}", s(p, "message_preview")),
        "prompt_done" => format!("done: {}", s(p, "stopReason")),
        "prompt_error" => format!("error {}: {}", s(p, "code"), s(p, "message")),
        "control_started" | "control_done" | "control_error" => {
            format!("{} {}", event.event_type, s(p, "action"))
        }
        "lifecycle_event" => {
            let mut line = s(p, "phase");
            let reason = s(p, "reason");
            if !reason.is_empty() {
                line.push_str(&format!(": {reason}"));
            }
            line
        }
        other => other.to_owned(),
    };
    let line = match effect {
        Effect::Ignored(why) if event.event_type == "session_update" => {
            format!("{base} [not mapped: {why}]")
        }
        _ => base,
    };
    clip(&line, SUMMARY_MAX_CHARS)
}

#[cfg(test)]
mod tests;
