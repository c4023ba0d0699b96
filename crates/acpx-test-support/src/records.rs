//! Records, events and store helpers shared by the SQLite and PostgreSQL stores' tests: the two
//! database stores are tested with the same shapes (fixed ids, timestamps and payloads).

use acpx_model::event::{ClientOperationPayload, PromptStartedPayload};
use acpx_model::thread::{AgentContent, AgentMessage, Message, UserContent, UserMessage};
use acpx_model::{
    Durability, EventContext, EventEnvelope, EventLogState, EventPayload, EventSource, EventStream,
    NewSession, RecordId, SessionRecord, Store, StoreResult, Timestamp,
};
use serde_json::{json, Map};

pub fn rid(s: &str) -> RecordId {
    RecordId::parse(s).unwrap()
}

pub fn ts(millis: i64) -> Timestamp {
    Timestamp::from_millis(millis).unwrap()
}

pub fn record(id: &str, cwd: &str, last_used_ms: i64) -> SessionRecord {
    let mut r = SessionRecord::new(
        NewSession {
            acpx_record_id: rid(id),
            acp_session_id: format!("acp-{id}"),
            agent_session_id: None,
            agent_command: "agent --acp".into(),
            cwd: cwd.into(),
            name: None,
        },
        ts(1_772_000_000_000),
    );
    r.last_used_at = ts(last_used_ms);
    r
}

pub fn user(text: &str) -> Message {
    let v = json!({"User": {"id": uuid_like(text), "content": [{"Text": text}]}});
    serde_json::from_value(v).unwrap()
}

pub fn agent(text: &str) -> Message {
    let v = json!({"Agent": {"content": [{"Text": text}], "tool_results": {}}});
    serde_json::from_value(v).unwrap()
}

fn uuid_like(text: &str) -> String {
    format!("u-{}", text.len())
}

pub fn user_text(m: &Message) -> Option<&str> {
    match m {
        Message::User(UserMessage { content, .. }) => content.iter().find_map(|c| match c {
            UserContent::Text(t) => Some(t.as_str()),
            _ => None,
        }),
        Message::Agent(AgentMessage { content, .. }) => content.iter().find_map(|c| match c {
            AgentContent::Text(t) => t.as_inline(),
            _ => None,
        }),
        Message::Resume => None,
    }
}

/// `n` events of assorted shapes starting at `from`, ~300 bytes each.
pub fn events(id: &RecordId, from: u64, n: u64) -> Vec<EventEnvelope> {
    (from..from + n)
        .map(|seq| {
            let request = format!("req_{}", seq / 10);
            let ctx = EventContext {
                acpx_record_id: id,
                acp_session_id: "acp-1",
                request_id: (seq % 3 != 0).then_some(request.as_str()),
                stream: if seq % 2 == 0 {
                    EventStream::Prompt
                } else {
                    EventStream::Control
                },
                source: EventSource::Acp,
            };
            let at = ts(1_772_000_000_000 + seq as i64);
            let payload = match seq % 4 {
                0 => EventPayload::PromptStarted(PromptStartedPayload {
                    message_preview: format!("preview {seq} with some words to fill the line"),
                    resumed: seq % 8 == 0,
                    extra: Map::new(),
                }),
                1 => EventPayload::ClientOperation(ClientOperationPayload {
                    method: "terminal/create".into(),
                    status: "completed".into(),
                    summary: "Ran command".into(),
                    details: Some("cargo test -p acpx-store-sqlite".into()),
                    timestamp: at,
                    extra: Map::new(),
                }),
                2 => EventPayload::Unknown {
                    event_type: "session_update".into(),
                    payload: json!({
                        "sessionId": "acp-1",
                        "update": {"sessionUpdate": "agent_message_chunk",
                                   "content": {"type": "text", "text": format!("chunk {seq} ünïcödé \"quoted\" \\ \n")}},
                        "_meta": null
                    }),
                },
                _ => EventPayload::Unknown {
                    event_type: "x.acme.metric".into(),
                    payload: json!({"z": 1, "a": [true, null, 0.1, 1e-7, 123_456_789.123_456_79, 2.2250738585072014e-308, 0.30000000000000004, -0.0, u64::MAX]}),
                },
            };
            let mut e = EventEnvelope::new(&ctx, seq, at, payload);
            if seq % 5 == 0 {
                e.extra.insert("futureKey".into(), json!({"k": seq}));
            }
            e
        })
        .collect()
}

/// Appends under the session's writer lock, taken for this call only (waiting up to 10 s) and
/// released after it, as any writer that does not hold it must.
pub async fn append_locked<S: Store + ?Sized>(
    s: &S,
    id: &RecordId,
    events: &[EventEnvelope],
    durability: Durability,
) -> StoreResult<EventLogState> {
    let writer = s.lock(id, std::time::Duration::from_secs(10)).await?;
    s.append(&writer, events, durability).await
}
