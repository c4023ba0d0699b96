//! Converting sessions written by the Node acpx 0.19 into the format of `docs/format.md`.
//!
//! Node keeps, per session, `<enc(id)>.json` (schema `acpx.session.v1` but snake_case, with the
//! conversation at the top level) and a journal `<enc(id)>.stream.ndjson` (plus rotated
//! `.stream.<N>.ndjson`, 1 the newest) of raw ACP JSON-RPC frames and
//! `{"schema":"acpx.session.journal.v1","type":"segment"|"turn_started"|"turn_result"}` markers.
//!
//! The journal becomes the event log:
//!
//! | journal line | event |
//! |---|---|
//! | `session/prompt` request | `prompt_started` (with `userMessageId` and the full `prompt`) |
//! | `session/update` notification | `session_update`, the `params` unchanged |
//! | response to `session/prompt` | `prompt_done` (`stopReason`, `usage`) or `prompt_error` |
//! | `turn_result` marker of a turn not ended yet | `prompt_done` / `prompt_error` |
//! | a turn that never got a result | `prompt_error` (`outcome: interrupted`) before the next turn |
//! | `fs/*`, `terminal/*`, `session/request_permission` requests | `client_operation` |
//! | any other frame (initialize, session/new, responses, …) | `node_journal` (`{"message": <frame>}`), kept verbatim |
//! | `segment` markers | nothing (anchors of Node's own reader) |
//!
//! Node trims the stored conversation (200 messages, long text cut with "..."), while the
//! journal holds every update. So the thread is rebuilt from the converted events with the
//! runtime's reducer, and used whenever it holds at least as many user turns as the record;
//! otherwise (older journal segments were rotated away) the record's own messages are kept.
//! Journal lines carry no timestamps: events take the time of the turn they belong to
//! (`turn_started` timestamps when present, else the record's), never going backwards.

use acpx_model::event::{
    AcpErrorObject, ClientOperationPayload, PromptDonePayload, PromptErrorPayload,
    PromptStartedPayload,
};
use acpx_model::{
    EventContext, EventEnvelope, EventPayload, EventSource, EventStream, Message, NewSession,
    PermissionStats, RecordId, SessionRecord, Thread, Timestamp,
};
use acpx_runtime::mapping::roll_forward;
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
    pub record: SessionRecord,
    pub events: Vec<EventEnvelope>,
    /// The Node record id (which may differ from the new one if it was not a valid id).
    pub original_id: String,
    pub thread_source: ThreadSource,
    /// Things worth telling the user (ids changed, journal incomplete, …).
    pub notes: Vec<String>,
}

/// Whether a parsed JSON document is a Node acpx record (snake_case keys).
pub fn is_node_record(v: &Value) -> bool {
    v.get("acpx_record_id").is_some() && v.get("acpxRecordId").is_none()
}

fn str_of<'a>(v: &'a Value, k: &str) -> Option<&'a str> {
    v.get(k).and_then(Value::as_str)
}

fn ts_of(v: &Value, k: &str) -> Option<Timestamp> {
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

/// The `session.json` document (`docs/format.md`, "`session.json`") of a Node record (the conversation as Node stored
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

/// The events of a Node journal, given its lines oldest first.
pub struct JournalConversion {
    pub events: Vec<EventEnvelope>,
    /// Whether the journal starts at the session's first message (its first segment anchor
    /// has `message_sequence` 0, or there is no anchor at all).
    pub complete: bool,
    /// Lines that are not JSON (skipped, counted).
    pub bad_lines: u64,
}

struct Builder<'a> {
    id: &'a RecordId,
    acp: String,
    events: Vec<EventEnvelope>,
    now: Timestamp,
}

impl Builder<'_> {
    fn push(
        &mut self,
        request_id: Option<&str>,
        stream: EventStream,
        source: EventSource,
        p: EventPayload,
    ) {
        let ctx = EventContext {
            acpx_record_id: self.id,
            acp_session_id: &self.acp,
            request_id,
            stream,
            source,
        };
        let seq = self.events.len() as u64 + 1;
        self.events.push(EventEnvelope::new(&ctx, seq, self.now, p));
    }
}

/// The open turn while converting.
struct Turn {
    request_id: String,
    /// JSON-RPC id of its `session/prompt` request, to match the response.
    rpc_id: Option<Value>,
    started: bool,
    ended: bool,
}

fn preview(blocks: &[Value]) -> String {
    let text: String = blocks
        .iter()
        .filter_map(|b| b.get("text").and_then(Value::as_str))
        .collect::<Vec<_>>()
        .join(" ");
    text.chars().take(200).collect()
}

fn prompt_done(stop: &str, usage: Option<&Value>) -> EventPayload {
    let mut extra = Map::new();
    if let Some(u) = usage {
        extra.insert("usage".into(), u.clone());
    }
    EventPayload::PromptDone(PromptDonePayload {
        stop_reason: stop.to_owned(),
        permission_stats: PermissionStats::default(),
        extra,
    })
}

fn prompt_error(message: &str, outcome: &str, acp: Option<AcpErrorObject>) -> EventPayload {
    let mut extra = Map::new();
    extra.insert("outcome".into(), json!(outcome));
    EventPayload::PromptError(PromptErrorPayload {
        code: "RUNTIME".into(),
        detail_code: Some(if outcome == "interrupted" {
            "NODE_TURN_WITHOUT_RESULT".into()
        } else {
            "NODE_TURN_FAILED".into()
        }),
        message: message.to_owned(),
        retryable: false,
        acp,
        extra,
    })
}

fn is_client_method(m: &str) -> bool {
    m.starts_with("fs/") || m.starts_with("terminal/") || m == "session/request_permission"
}

/// Converts journal lines (oldest first) into event envelopes for session `id`.
pub fn convert_journal(
    lines: &[String],
    id: &RecordId,
    acp_session_id: &str,
    start: Timestamp,
) -> JournalConversion {
    let mut b = Builder {
        id,
        acp: acp_session_id.to_owned(),
        events: Vec::new(),
        now: start,
    };
    let mut complete = true;
    let mut seen_anchor = false;
    let mut bad_lines = 0;
    let mut turn: Option<Turn> = None;

    let end_open_turn = |b: &mut Builder, turn: &mut Option<Turn>| {
        if let Some(t) = turn.take() {
            if t.started && !t.ended {
                b.push(
                    Some(&t.request_id),
                    EventStream::Prompt,
                    EventSource::Runtime,
                    prompt_error(
                        "the Node acpx journal has no result for this turn (its process ended mid-turn)",
                        "interrupted",
                        None,
                    ),
                );
            }
        }
    };

    for line in lines {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            if !line.trim().is_empty() {
                bad_lines += 1;
            }
            continue;
        };
        if str_of(&v, "schema") == Some(JOURNAL_SCHEMA) {
            for k in ["timestamp", "at", "started_at", "created_at", "ended_at"] {
                if let Some(t) = ts_of(&v, k) {
                    if t > b.now {
                        b.now = t;
                    }
                }
            }
            match str_of(&v, "type") {
                Some("segment") => {
                    if !seen_anchor {
                        seen_anchor = true;
                        let ms = v
                            .get("message_sequence")
                            .and_then(Value::as_u64)
                            .unwrap_or(0);
                        complete = ms == 0;
                    }
                }
                Some("turn_started") => {
                    end_open_turn(&mut b, &mut turn);
                    turn = Some(Turn {
                        request_id: str_of(&v, "request_id")
                            .map(str::to_owned)
                            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string()),
                        rpc_id: None,
                        started: false,
                        ended: false,
                    });
                }
                Some("turn_result") => {
                    let result = v.get("result").cloned().unwrap_or(Value::Null);
                    if let Some(t) = turn.as_mut() {
                        if t.started && !t.ended {
                            let status = str_of(&result, "status").unwrap_or("completed");
                            let p = match status {
                                "failed" => {
                                    let msg = result
                                        .get("error")
                                        .and_then(|e| {
                                            e.get("message").and_then(Value::as_str).or(e.as_str())
                                        })
                                        .unwrap_or("the turn failed");
                                    prompt_error(msg, "failed", None)
                                }
                                "cancelled" => prompt_done(
                                    str_of(&result, "stopReason").unwrap_or("cancelled"),
                                    None,
                                ),
                                _ => prompt_done(
                                    str_of(&result, "stopReason").unwrap_or("end_turn"),
                                    None,
                                ),
                            };
                            let rid = t.request_id.clone();
                            b.push(Some(&rid), EventStream::Prompt, EventSource::Runtime, p);
                            t.ended = true;
                        }
                    }
                    turn = None;
                }
                _ => {
                    // An unknown marker: keep it.
                    b.push(
                        None,
                        EventStream::Lifecycle,
                        EventSource::Runtime,
                        EventPayload::Unknown {
                            event_type: NODE_FRAME_EVENT.into(),
                            payload: json!({"message": v}),
                        },
                    );
                }
            }
            continue;
        }

        let method = str_of(&v, "method");
        let rpc_id = v.get("id").cloned();
        let rid = turn.as_ref().map(|t| t.request_id.clone());
        match method {
            Some("session/prompt") if rpc_id.is_some() => {
                if turn.as_ref().is_none_or(|t| t.started) {
                    end_open_turn(&mut b, &mut turn);
                    turn = Some(Turn {
                        request_id: uuid::Uuid::new_v4().to_string(),
                        rpc_id: None,
                        started: false,
                        ended: false,
                    });
                }
                let Some(t) = turn.as_mut() else { continue };
                t.rpc_id = rpc_id;
                t.started = true;
                let blocks: Vec<Value> = v
                    .get("params")
                    .and_then(|p| p.get("prompt"))
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                let mut extra = Map::new();
                extra.insert(
                    "userMessageId".into(),
                    json!(uuid::Uuid::new_v4().to_string()),
                );
                extra.insert("prompt".into(), Value::Array(blocks.clone()));
                let rid = t.request_id.clone();
                b.push(
                    Some(&rid),
                    EventStream::Prompt,
                    EventSource::Runtime,
                    EventPayload::PromptStarted(PromptStartedPayload {
                        message_preview: preview(&blocks),
                        resumed: false,
                        extra,
                    }),
                );
            }
            Some("session/update") => {
                let params = v.get("params").cloned().unwrap_or_else(|| json!({}));
                let payload = match EventPayload::from_parts("session_update", &params) {
                    Ok(p) => p,
                    Err(_) => EventPayload::Unknown {
                        event_type: NODE_FRAME_EVENT.into(),
                        payload: json!({"message": v}),
                    },
                };
                let stream = if rid.is_some() {
                    EventStream::Prompt
                } else {
                    EventStream::Lifecycle
                };
                b.push(rid.as_deref(), stream, EventSource::Acp, payload);
            }
            Some(m) if is_client_method(m) => {
                let mut extra = Map::new();
                extra.insert(
                    "params".into(),
                    v.get("params").cloned().unwrap_or(Value::Null),
                );
                if let Some(i) = &rpc_id {
                    extra.insert("rpcId".into(), i.clone());
                }
                let stream = if rid.is_some() {
                    EventStream::Prompt
                } else {
                    EventStream::Lifecycle
                };
                b.push(
                    rid.as_deref(),
                    stream,
                    EventSource::Client,
                    EventPayload::ClientOperation(ClientOperationPayload {
                        method: m.to_owned(),
                        status: "completed".into(),
                        summary: format!("{m} (imported from the Node acpx journal)"),
                        details: None,
                        timestamp: b.now,
                        extra,
                    }),
                );
            }
            None if rpc_id.is_some()
                && turn
                    .as_ref()
                    .is_some_and(|t| t.started && !t.ended && t.rpc_id == rpc_id) =>
            {
                // The response to the turn's session/prompt.
                let Some(t) = turn.as_mut() else { continue };
                let rid = t.request_id.clone();
                let p = if let Some(result) = v.get("result") {
                    prompt_done(
                        str_of(result, "stopReason").unwrap_or("end_turn"),
                        result.get("usage"),
                    )
                } else {
                    let err = v.get("error").cloned().unwrap_or(Value::Null);
                    let acp = AcpErrorObject {
                        code: err.get("code").and_then(Value::as_i64).unwrap_or(-32603),
                        message: str_of(&err, "message").unwrap_or("error").to_owned(),
                        data: err.get("data").cloned(),
                    };
                    prompt_error(&acp.message.clone(), "failed", Some(acp))
                };
                b.push(Some(&rid), EventStream::Prompt, EventSource::Acp, p);
                t.ended = true;
            }
            _ => {
                let stream = if rid.is_some() {
                    EventStream::Prompt
                } else {
                    EventStream::Lifecycle
                };
                b.push(
                    rid.as_deref(),
                    stream,
                    EventSource::Acp,
                    EventPayload::Unknown {
                        event_type: NODE_FRAME_EVENT.into(),
                        payload: json!({"message": v}),
                    },
                );
            }
        }
    }
    end_open_turn(&mut b, &mut turn);
    JournalConversion {
        events: b.events,
        complete,
        bad_lines,
    }
}

/// A valid record id derived from a Node id that is not one: the same id every time (so a
/// second import finds the first), readable, and distinct for distinct originals (a hash of
/// the original is appended).
pub fn safe_id(original: &str) -> RecordId {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in original.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100000001b3);
    }
    let cleaned: String = original
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let cleaned = cleaned.trim_start_matches('.');
    let stem: String = cleaned.chars().take(100).collect();
    let candidate = if stem.is_empty() {
        format!("node-{h:016x}")
    } else {
        format!("{stem}-{:08x}", h as u32)
    };
    RecordId::parse(&candidate).unwrap_or_else(|_| RecordId::generate())
}

fn user_turns(messages: &[Message]) -> usize {
    messages
        .iter()
        .filter(|m| matches!(m, Message::User(_)))
        .count()
}

/// Converts one Node session: the record document and its journal lines (oldest first).
pub fn convert_session(
    node: &Value,
    journal: &[String],
    origin: &str,
    now: Timestamp,
) -> Result<Converted, String> {
    let original_id = str_of(node, "acpx_record_id")
        .unwrap_or_default()
        .to_owned();
    let mut notes = Vec::new();
    let new_id = match RecordId::parse(&original_id) {
        Ok(id) => id,
        Err(e) => {
            let id = safe_id(&original_id);
            notes.push(format!(
                "the Node record id {original_id:?} cannot be a file name here ({e}); imported as {id}"
            ));
            id
        }
    };
    let doc = convert_record(node, &new_id, now);
    let bytes = serde_json::to_vec(&doc).unwrap_or_default();
    let mut record = SessionRecord::from_json_slice(&bytes, origin).map_err(|e| e.to_string())?;

    let conv = convert_journal(journal, &new_id, &record.acp_session_id, record.created_at);
    if conv.bad_lines > 0 {
        notes.push(format!(
            "{} journal line(s) were not JSON and were skipped",
            conv.bad_lines
        ));
    }

    // Rebuild the thread from the journal with the runtime's reducer, on a copy of the record
    // with an empty conversation.
    let mut rebuilt = SessionRecord::new(
        NewSession {
            acpx_record_id: new_id.clone(),
            acp_session_id: record.acp_session_id.clone(),
            agent_session_id: record.agent_session_id.clone(),
            agent_command: record.agent_command.clone(),
            cwd: record.cwd.clone(),
            name: record.name.clone(),
        },
        record.created_at,
    );
    roll_forward(&mut rebuilt, conv.events.iter());
    let stored_turns = user_turns(&record.thread.messages);
    let journal_turns = user_turns(&rebuilt.thread.messages);
    let thread_source = if journal_turns > 0 && journal_turns >= stored_turns {
        let stored = std::mem::replace(&mut record.thread, Thread::new(record.created_at));
        record.thread = rebuilt.thread;
        if record.thread.title.is_empty() {
            record.thread.title = stored.title;
        }
        if record.thread.request_token_usage.is_empty() {
            record.thread.request_token_usage = stored.request_token_usage;
        }
        if record.thread.cumulative_token_usage == Default::default() {
            record.thread.cumulative_token_usage = stored.cumulative_token_usage;
        }
        record.thread.updated_at = record.thread.updated_at.max(stored.updated_at);
        for (k, v) in stored.extra {
            record.thread.extra.entry(k).or_insert(v);
        }
        record.thread.imported = true;
        ThreadSource::Journal
    } else {
        if stored_turns > 0 || !journal.is_empty() {
            notes.push(format!(
                "the journal holds {journal_turns} of the {stored_turns} turns (older segments were rotated away{}); \
                 kept the record's messages, which Node may have trimmed",
                if conv.complete { "" } else { ", it does not start at the first message" }
            ));
        }
        ThreadSource::Record
    };
    // Bookkeeping the reducer derived from the log; identity and lifecycle stay the record's.
    record.acpx.audit_seq = conv.events.len() as u64;
    record.acpx.audit_events = rebuilt.acpx.audit_events;
    record.acpx.audit_dropped_count = rebuilt.acpx.audit_dropped_count;
    if record.acpx.last_turn.is_none() {
        record.acpx.last_turn = rebuilt.acpx.last_turn;
    }
    if record.acpx.plan.is_none() {
        record.acpx.plan = rebuilt.acpx.plan;
    }
    if record.acpx.current_mode_id.is_none() {
        record.acpx.current_mode_id = rebuilt.acpx.current_mode_id;
    }
    if record.acpx.available_commands.is_empty() {
        record.acpx.available_commands = rebuilt.acpx.available_commands;
    }
    if record.acpx.config_options.is_empty() {
        record.acpx.config_options = rebuilt.acpx.config_options;
    }
    record.extra.insert(
        "importedFrom".into(),
        json!({
            "source": "node-acpx",
            "path": origin,
            "acpxRecordId": original_id,
            "importedAt": now,
            "threadSource": thread_source.as_str(),
            "journalComplete": conv.complete,
            "nodeImportedFrom": node.get("imported_from").cloned().unwrap_or(Value::Null),
            "nodeEventLog": node.get("event_log").cloned().unwrap_or(Value::Null),
            "nodeLastSeq": node.get("last_seq").cloned().unwrap_or(Value::Null),
        }),
    );
    Ok(Converted {
        record,
        events: conv.events,
        original_id,
        thread_source,
        notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use acpx_model::AgentContent;

    fn node_record() -> Value {
        json!({
            "schema": "acpx.session.v1",
            "acpx_record_id": "sess-1",
            "acp_session_id": "sess-1",
            "agent_session_id": "native-1",
            "agent_command": "node agent.js",
            "cwd": "/repo",
            "name": "api",
            "created_at": "2026-01-01T00:00:00.000Z",
            "last_used_at": "2026-01-01T00:05:00.000Z",
            "last_seq": 6,
            "closed": false,
            "pid": 4242,
            "title": "Greeting",
            "messages": [
                {"User": {"id": "u1", "content": [{"Text": "hello"}, {"Audio": {"data": "AAA", "mime_type": "audio/wav"}}]}},
                {"Agent": {"content": [{"Text": "hi th..."}], "tool_results": {}}}
            ],
            "updated_at": "2026-01-01T00:05:00.000Z",
            "cumulative_token_usage": {"input_tokens": 3, "output_tokens": 4},
            "cumulative_cost": {"amount": 0.01, "currency": "USD"},
            "acpx": {"current_mode_id": "code", "available_commands": [{"name": "plan", "has_input": false}], "desired_mode_id": "code"}
        })
    }

    fn journal() -> Vec<String> {
        [
            json!({"schema": JOURNAL_SCHEMA, "type": "segment", "record_id": "sess-1", "sequence": 0, "message_sequence": 0, "request_id": null}),
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}}),
            json!({"schema": JOURNAL_SCHEMA, "type": "turn_started", "request_id": "r1"}),
            json!({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": {"sessionId": "sess-1", "prompt": [{"type": "text", "text": "hello"}]}}),
            json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "sess-1", "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi there, the whole untrimmed text"}}}}),
            json!({"jsonrpc": "2.0", "id": 2, "result": {"stopReason": "end_turn"}}),
            json!({"schema": JOURNAL_SCHEMA, "type": "turn_result", "request_id": "r1", "result": {"status": "completed", "stopReason": "end_turn"}}),
        ]
        .iter()
        .map(|v| v.to_string())
        .collect()
    }

    #[test]
    fn journal_rebuilds_the_untrimmed_thread() {
        let c = convert_session(&node_record(), &journal(), "x.json", Timestamp::now()).unwrap();
        assert_eq!(c.thread_source, ThreadSource::Journal);
        let Message::Agent(a) = &c.record.thread.messages[1] else {
            panic!()
        };
        assert_eq!(
            a.content[0],
            AgentContent::Text("hi there, the whole untrimmed text".into())
        );
        assert_eq!(c.record.thread.title, "Greeting");
        assert_eq!(c.record.agent_session_id.as_deref(), Some("native-1"));
        assert_eq!(c.record.pid, None);
        assert_eq!(c.record.acpx.available_commands, vec!["plan".to_owned()]);
        assert_eq!(c.record.acpx.audit_seq, c.events.len() as u64);
        let types: Vec<&str> = c.events.iter().map(|e| e.event_type.as_str()).collect();
        assert_eq!(
            types,
            [
                "node_journal",
                "prompt_started",
                "session_update",
                "prompt_done"
            ]
        );
        assert!(c
            .events
            .iter()
            .enumerate()
            .all(|(i, e)| e.seq == i as u64 + 1));
        assert_eq!(
            c.record.acpx.last_turn.as_ref().unwrap().outcome,
            "completed"
        );
    }

    #[test]
    fn without_a_journal_the_record_messages_are_kept_audio_included() {
        let c = convert_session(&node_record(), &[], "x.json", Timestamp::now()).unwrap();
        assert_eq!(c.thread_source, ThreadSource::Record);
        assert_eq!(c.record.thread.messages.len(), 2);
        let Message::User(u) = &c.record.thread.messages[0] else {
            panic!()
        };
        assert_eq!(u.extra["acpx_node_content"][0]["Audio"]["data"], "AAA");
        assert_eq!(c.record.thread.extra["cumulative_cost"]["currency"], "USD");
    }

    #[test]
    fn a_turn_without_result_is_marked_interrupted() {
        let mut j = journal();
        j.truncate(5);
        let c = convert_session(&node_record(), &j, "x.json", Timestamp::now()).unwrap();
        let last = c.events.last().unwrap();
        assert_eq!(last.event_type, "prompt_error");
        assert_eq!(
            c.record.acpx.last_turn.as_ref().unwrap().outcome,
            "interrupted"
        );
    }

    #[test]
    fn invalid_ids_get_a_stable_safe_one() {
        let mut n = node_record();
        n["acpx_record_id"] = json!("a/b");
        let c = convert_session(&n, &[], "x.json", Timestamp::now()).unwrap();
        assert!(c.record.acpx_record_id.as_str().starts_with("a_b-"));
        assert_eq!(c.original_id, "a/b");
        assert!(!c.notes.is_empty());
        let again = convert_session(&n, &[], "x.json", Timestamp::now()).unwrap();
        assert_eq!(again.record.acpx_record_id, c.record.acpx_record_id);
        assert_ne!(safe_id("a:b"), safe_id("a/b"));
        assert!(safe_id("..").as_str().starts_with("node-"));
    }
}
