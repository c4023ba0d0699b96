//! The acpx data model without any I/O: build a session, record events in a `MemoryStore`,
//! read them back, and see what validation says about a damaged `session.json`.
//!
//! ```sh
//! cargo run -p acpx-model --example model
//! ```

use acpx_model::{
    AgentContent, AgentMessage, Durability, EventContext, EventEnvelope, EventPayload, EventQuery,
    EventSource, EventStream, ListQuery, MemoryStore, Message, NewSession, RecordId, SessionRecord,
    Store, Timestamp, UserContent, UserMessage,
};
use serde_json::json;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let store = MemoryStore::new();

    // A session: identity, lifecycle, a Zed-shaped thread and the acpx namespace.
    let id = RecordId::generate();
    let mut record = SessionRecord::new(
        NewSession {
            acpx_record_id: id.clone(),
            acp_session_id: "sess-123".into(),
            agent_session_id: None, // unknown: omitted from JSON, never null, never invented
            agent_command: "my-agent --acp".into(),
            cwd: "/repo".into(),
            name: Some("backend".into()),
        },
        Timestamp::now(),
    );
    store.create(&mut record).await?;

    // Events: seq continues the log exactly (1, 2, …); the store refuses anything else.
    let ctx = EventContext {
        acpx_record_id: &id,
        acp_session_id: "sess-123",
        request_id: Some("req_1"),
        stream: EventStream::Prompt,
        source: EventSource::Acp,
    };
    let update = json!({
        "sessionId": "sess-123",
        "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"}}
    });
    let event = EventEnvelope::new(
        &ctx,
        1,
        Timestamp::now(),
        EventPayload::from_parts("session_update", &update)?,
    );
    // Appending requires the session's writer lock, taken through the same store.
    let writer = store.lock(&id, std::time::Duration::from_secs(1)).await?;
    let state = store.append(&writer, &[event], Durability::Flush).await?;
    drop(writer);
    record.note_append_result::<acpx_model::StoreError>(&Ok(state));
    println!(
        "log line: {}",
        store
            .read_events(&id, &EventQuery::from_seq(1))
            .await?
            .events[0]
            .to_ndjson()
    );

    // The conversation, then an optimistic save (revision 1 → 2).
    record.thread.messages.push(Message::User(UserMessage {
        id: uuid::Uuid::new_v4().to_string(), // a User message id is a UUID
        content: vec![UserContent::Text("hello".into())],
        extra: Default::default(),
    }));
    let mut reply = AgentMessage::new();
    reply.content.push(AgentContent::Text("hi".into()));
    record.thread.messages.push(Message::Agent(reply));
    store.save(&mut record).await?;
    println!("saved at revision {}", record.revision);

    let page = store.list(&ListQuery::default()).await?;
    println!("{} session(s) listed", page.sessions.len());

    // Validation names the file and the field.
    let mut doc: serde_json::Value = serde_json::from_slice(&record.to_json_vec()?)?;
    doc["thread"]["speed"] = json!("warp");
    let err = SessionRecord::from_json_slice(&serde_json::to_vec(&doc)?, "example.json")
        .expect_err("an unknown speed is refused");
    println!("validation: {err}");
    Ok(())
}
