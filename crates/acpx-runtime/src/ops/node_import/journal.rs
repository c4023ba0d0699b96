//! A Node journal (raw ACP frames and Node's markers) → acpx event envelopes.

use acpx_model::event::{
    AcpErrorObject, ClientOperationPayload, PromptDonePayload, PromptErrorPayload,
    PromptStartedPayload,
};
use acpx_model::{
    EventContext, EventEnvelope, EventPayload, EventSource, EventStream, PermissionStats, RecordId,
    Timestamp,
};
use serde_json::{json, Map, Value};

use super::record::{str_of, ts_of, JOURNAL_SCHEMA, NODE_FRAME_EVENT};

/// The events of a Node journal, given its lines oldest first.
#[derive(Debug)]
pub struct JournalConversion {
    /// The events, seqs 1.. without gaps.
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

/// The ACP session a frame names: `params.sessionId` of a request or notification, or
/// `result.sessionId` of a `session/new` response.
fn frame_session_id(v: &Value) -> Option<&str> {
    v.get("params")
        .and_then(|p| p.get("sessionId"))
        .or_else(|| v.get("result").and_then(|r| r.get("sessionId")))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
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
        let Ok(mut v) = serde_json::from_str::<Value>(line) else {
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

        let method = str_of(&v, "method").map(str::to_owned);
        let rpc_id = v.get("id").cloned();
        // A journal spans every ACP session the record had (Node's load -> new fallback):
        // each event carries the ACP session its frame names, so the reducer keeps them all.
        if let Some(sid) = frame_session_id(&v) {
            if sid != b.acp {
                b.acp = sid.to_owned();
            }
        }
        let rid = turn.as_ref().map(|t| t.request_id.clone());
        match method.as_deref() {
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
                // The params move into the event as they are (the most frequent line: no
                // typed round trip) when they have the notification's shape.
                let fits = v.get("params").is_some_and(|p| {
                    p.get("sessionId").is_some_and(Value::is_string) && p.get("update").is_some()
                });
                let payload = if fits {
                    EventPayload::Unknown {
                        event_type: "session_update".into(),
                        payload: v
                            .as_object_mut()
                            .and_then(|o| o.remove("params"))
                            .unwrap_or_default(),
                    }
                } else {
                    EventPayload::Unknown {
                        event_type: NODE_FRAME_EVENT.into(),
                        payload: json!({"message": v}),
                    }
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
                // A permission request is recorded as asked (status `running`, with its
                // `toolCall` and `options` at the top, as acpx records one), so its tool call
                // reaches the thread as it does live; the journal does not say the answer.
                let asked = m == "session/request_permission";
                if asked {
                    for key in ["toolCall", "options"] {
                        if let Some(x) = v.get("params").and_then(|p| p.get(key)) {
                            extra.insert(key.into(), x.clone());
                        }
                    }
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
                        status: if asked { "running" } else { "completed" }.into(),
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
