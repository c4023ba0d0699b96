//! Builders for realistic test data: session records whose thread uses every content kind,
//! and ~300-byte events of every stream, so that the checks exercise what production writes.

use acpx_model::{
    AcpxState, AgentContent, AgentMessage, AuditEvent, EventEnvelope, EventSource, EventStream,
    Image, ImageSize, LastTurn, Mention, Message, NewSession, PermissionStats, PlanState, RecordId,
    ResultContent, SessionRecord, Speed, Thinking, TokenUsage, ToolResult, ToolUse, UserContent,
    UserMessage, EVENT_VERSION,
};
use acpx_model::{EventLogState, Timestamp};
use serde_json::{json, Map, Value};

/// The agent command every fixture session uses unless told otherwise.
pub const AGENT: &str = "test-agent --acp";
/// The cwd every fixture session uses unless told otherwise.
pub const CWD: &str = "/work/repo";
/// 2026-02-27T12:00:00Z, the base of fixture timestamps.
pub const BASE_MILLIS: i64 = 1_772_193_600_000;

/// A record id from a literal that is known to be valid.
pub fn rid(s: &str) -> RecordId {
    RecordId::parse(s).unwrap_or_else(|e| panic!("fixture id {s:?} is invalid: {e}"))
}

/// `BASE_MILLIS + offset` milliseconds.
pub fn ts(offset_millis: i64) -> Timestamp {
    Timestamp::from_millis(BASE_MILLIS + offset_millis).expect("fixture timestamp in range")
}

/// A minimal valid session: empty thread, created and last used at `ts(offset_millis)`.
pub fn session(id: &str, offset_millis: i64) -> SessionRecord {
    SessionRecord::new(
        NewSession {
            acpx_record_id: rid(id),
            acp_session_id: format!("acp-{id}"),
            agent_session_id: None,
            agent_command: AGENT.into(),
            cwd: CWD.into(),
            name: None,
        },
        ts(offset_millis),
    )
}

/// A session with a thread of `messages` messages cycling through every message and content
/// kind (User text/mention/image, Agent text/thinking/redacted thinking/tool use with results,
/// "Resume"), a populated `acpx` namespace, and unknown fields at the top level, in `thread`
/// and in `acpx` that must survive storage unchanged.
pub fn rich_session(id: &str, messages: usize) -> SessionRecord {
    let mut r = session(id, 0);
    r.agent_session_id = Some(format!("native-{id}"));
    r.name = Some("backend".into());
    r.pid = Some(4242);
    r.agent_started_at = Some(ts(1_000));
    r.last_prompt_at = Some(ts(60_000));
    r.last_used_at = ts(61_000);
    r.protocol_version = Some(1);
    r.agent_capabilities = json!({"loadSession": true, "promptCapabilities": {"image": true}});
    r.extra.insert(
        "futureTopLevel".into(),
        json!({"z": [1, 2, {"nested": null}], "a": "kept in order"}),
    );

    let t = &mut r.thread;
    t.title = "Fix the flaky build".into();
    t.updated_at = ts(61_000);
    t.detailed_summary = Some("A summary.".into());
    t.profile = Some("write".into());
    t.speed = Some(Speed::Fast);
    t.thinking_enabled = true;
    t.thinking_effort = Some("high".into());
    t.cumulative_token_usage = TokenUsage {
        input_tokens: 1200,
        output_tokens: 340,
        cache_creation_input_tokens: 5,
        cache_read_input_tokens: 900,
        ..TokenUsage::default()
    };
    t.extra.insert(
        "draft_prompt".into(),
        json!([{"type": "text", "text": "half-typed"}]),
    );
    for i in 0..messages {
        let m = message(i);
        if let Message::User(u) = &m {
            t.request_token_usage.insert(
                u.id.clone(),
                TokenUsage {
                    input_tokens: 10 + i as u64,
                    output_tokens: 3,
                    ..TokenUsage::default()
                },
            );
        }
        t.messages.push(m);
    }

    r.acpx = AcpxState {
        current_mode_id: Some("code".into()),
        available_commands: vec!["create_plan".into(), "run".into()],
        config_options: vec![json!({"id": "model", "currentValue": "fast", "options": []})],
        plan: Some(PlanState {
            entries: vec![
                json!({"content": "write tests", "priority": "high", "status": "in_progress"}),
            ],
            updated_at: ts(30_000),
        }),
        audit_seq: 17,
        audit_dropped_count: 2,
        audit_events: vec![AuditEvent {
            seq: 17,
            timestamp: ts(60_500),
            event_type: "prompt_done".into(),
            summary: "end_turn".into(),
        }],
        last_turn: Some(LastTurn {
            request_id: "req_9".into(),
            started_at: ts(50_000),
            ended_at: Some(ts(60_500)),
            resumed: false,
            stop_reason: Some("end_turn".into()),
            outcome: "completed".into(),
            error: None,
            permission_stats: PermissionStats {
                requested: 2,
                approved: 1,
                denied: 1,
                cancelled: 0,
            },
        }),
        last_control_update: None,
        event_log: EventLogState::default(),
        extra: Map::from_iter([("future_bookkeeping".to_owned(), json!({"k": true}))]),
    };
    r
}

/// Message `i` of a fixture thread; cycles through every shape.
pub fn message(i: usize) -> Message {
    match i % 5 {
        0 => Message::User(UserMessage {
            id: format!("00000000-0000-4000-8000-{i:012}"),
            content: vec![
                UserContent::Text(format!("Please fix the build, attempt {i}. Ünïcödé ✓")),
                UserContent::Mention(Mention {
                    uri: json!({"File": {"abs_path": "/work/repo/src/main.rs"}}),
                    content: "fn main() {}".into(),
                }),
            ],
            extra: Map::new(),
        }),
        1 => {
            let mut a = AgentMessage::new();
            a.content.push(AgentContent::Thinking(Thinking {
                text: format!("thinking about step {i}").into(),
                signature: Some("sig".into()),
            }));
            a.content
                .push(AgentContent::RedactedThinking("opaque==".into()));
            a.content.push(AgentContent::Text(
                format!("The build fails at step {i}.").into(),
            ));
            let call = format!("call_{i}");
            a.content.push(AgentContent::ToolUse(ToolUse {
                id: call.clone(),
                name: "terminal".into(),
                raw_input: r#"{"command":"cargo build"}"#.into(),
                input: json!({"command": "cargo build"}).into(),
                is_input_complete: true,
                thought_signature: None,
                extra: Map::new(),
            }));
            a.tool_results.insert(
                call.clone(),
                ToolResult {
                    tool_use_id: call,
                    tool_name: "terminal".into(),
                    is_error: i.is_multiple_of(2),
                    content: vec![ResultContent::Text("error[E0308]: mismatched types".into())],
                    output: Some(json!({"exitCode": 101}).into()),
                    extra: Map::new(),
                },
            );
            Message::Agent(a)
        }
        2 => Message::User(UserMessage {
            id: format!("00000000-0000-4000-8000-{i:012}"),
            content: vec![UserContent::Image(Image {
                source: "iVBORw0KGgo=".into(),
                size: Some(ImageSize {
                    width: 2,
                    height: 1,
                }),
                extra: Map::new(),
            })],
            extra: Map::from_iter([("future_user_field".to_owned(), json!(1))]),
        }),
        3 => {
            let mut a = AgentMessage::new();
            a.content
                .push(AgentContent::Text(format!("Done with {i}.").into()));
            a.reasoning_details = Some(json!([{"type": "summary"}]));
            a.extra.insert("future_agent_field".into(), json!("x"));
            Message::Agent(a)
        }
        _ => Message::Resume,
    }
}

/// A user message with the given text (for search checks).
pub fn user_text(id: &str, text: &str) -> Message {
    Message::User(UserMessage {
        id: id.into(),
        content: vec![UserContent::Text(text.into())],
        extra: Map::new(),
    })
}

/// An agent message with the given text and thinking (for search checks).
pub fn agent_text(text: &str, thinking: Option<&str>) -> Message {
    let mut a = AgentMessage::new();
    if let Some(t) = thinking {
        a.content.push(AgentContent::Thinking(Thinking {
            text: t.into(),
            signature: None,
        }));
    }
    a.content.push(AgentContent::Text(text.into()));
    Message::Agent(a)
}

/// What kind of event [`event`] builds for a seq: cycles through four shapes so that filters
/// by type, stream and requestId have something to tell apart.
pub fn event_shape(seq: u64) -> (&'static str, EventStream, Option<String>) {
    match seq % 4 {
        0 => ("lifecycle_event", EventStream::Lifecycle, None),
        1 => (
            "session_update",
            EventStream::Prompt,
            Some(format!("req_{}", seq / 10)),
        ),
        2 => (
            "client_operation",
            EventStream::Prompt,
            Some(format!("req_{}", seq / 10)),
        ),
        _ => (
            "control_done",
            EventStream::Control,
            Some(format!("ctl_{}", seq / 10)),
        ),
    }
}

/// An event of about 300 bytes (as an NDJSON line) for session `id` at `seq`.
pub fn event(id: &RecordId, seq: u64) -> EventEnvelope {
    let (ty, stream, request_id) = event_shape(seq);
    let payload = match ty {
        "session_update" => json!({
            "sessionId": format!("acp-{id}"),
            "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": format!("chunk {seq} of the answer, with some words")}},
        }),
        "client_operation" => json!({
            "method": "fs/read_text_file", "status": "completed",
            "summary": format!("read src/file_{seq}.rs"), "details": null,
            "timestamp": ts(seq as i64).to_rfc3339(),
        }),
        "control_done" => json!({"action": "set_mode", "ok": true, "result": {"modeId": "code"}}),
        _ => json!({"phase": "agent_started", "reason": "spawn"}),
    };
    let mut e = envelope(id, seq, ty, stream, request_id, payload);
    pad_to(&mut e, 300);
    e
}

/// `count` consecutive [`event`]s starting at `first_seq`.
pub fn events(id: &RecordId, first_seq: u64, count: u64) -> Vec<EventEnvelope> {
    (first_seq..first_seq + count)
        .map(|s| event(id, s))
        .collect()
}

/// An event that records which writer produced it (`worker` tag, per-writer counter `n`),
/// for concurrency checks that must find every write exactly once.
pub fn tagged_event(id: &RecordId, seq: u64, tag: &str, n: u64) -> EventEnvelope {
    let mut e = envelope(
        id,
        seq,
        "x.acpx-tests.write",
        EventStream::Other("test".into()),
        None,
        json!({"worker": tag, "n": n}),
    );
    pad_to(&mut e, 300);
    e
}

fn envelope(
    id: &RecordId,
    seq: u64,
    ty: &str,
    stream: EventStream,
    request_id: Option<String>,
    payload: Value,
) -> EventEnvelope {
    EventEnvelope {
        event_version: EVENT_VERSION,
        seq,
        timestamp: ts(seq as i64),
        acpx_record_id: id.clone(),
        acp_session_id: format!("acp-{id}"),
        request_id,
        stream,
        source: EventSource::Runtime,
        event_type: ty.into(),
        payload,
        extra: Map::new(),
    }
}

/// Grows the payload with a `pad` field until the NDJSON line is about `target` bytes.
fn pad_to(e: &mut EventEnvelope, target: usize) {
    let len = e.to_ndjson().len() + ",\"pad\":\"\"".len();
    if let Value::Object(m) = &mut e.payload {
        m.insert("pad".into(), json!("p".repeat(target.saturating_sub(len))));
    }
}

/// A complete NDJSON line (with `\n`) for an event, as a backend's log would hold it.
pub fn ndjson_line(e: &EventEnvelope) -> Vec<u8> {
    let mut out = Vec::new();
    e.write_ndjson_line(&mut out);
    out
}
