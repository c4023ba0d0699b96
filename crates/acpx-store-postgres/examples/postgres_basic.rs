//! A session's life in the PostgreSQL store: create, append events under the writer lock,
//! save the conversation, list, search, read the log back as NDJSON, close.
//!
//! ```text
//! eval "$(bash scripts/pg-test-server.sh start /tmp/acpx-pg)"   # or any server you have
//! cargo run -p acpx-store-postgres --example postgres_basic -- "$ACPX_TEST_POSTGRES_URL"
//! ```
//!
//! It works in a scratch schema (`acpx_example`), dropped at the end. Run it from two
//! terminals at once: the writer lock makes the second wait for the first.

use std::error::Error;
use std::time::Duration;

use acpx_model::thread::{AgentContent, AgentMessage, Message, UserContent, UserMessage};
use acpx_model::{
    Durability, EventContext, EventEnvelope, EventPayload, EventQuery, EventSource, EventStream,
    ListQuery, NewSession, RecordId, SearchQuery, SessionRecord, Store, Timestamp,
};
use acpx_store_postgres::{redact_url, PostgresStore, PostgresStoreOptions};
use serde_json::{json, Map};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn Error>> {
    let url = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("ACPX_STORE_URL").ok())
        .ok_or("give the server URL as the argument (or set ACPX_STORE_URL)")?;
    println!("database: {}", redact_url(&url));
    let store = PostgresStore::connect(
        &url,
        PostgresStoreOptions {
            schema: "acpx_example".into(),
            ..PostgresStoreOptions::default()
        },
    )
    .await?;

    let id = RecordId::generate();
    let mut record = SessionRecord::new(
        NewSession {
            acpx_record_id: id.clone(),
            acp_session_id: "acp-example".into(),
            agent_session_id: None,
            agent_command: "my-agent --acp".into(),
            cwd: "/home/me/project".into(),
            name: Some("example".into()),
        },
        Timestamp::now(),
    );
    store.create(&mut record).await?;

    let ctx = EventContext {
        acpx_record_id: &id,
        acp_session_id: "acp-example",
        request_id: Some("req_1"),
        stream: EventStream::Prompt,
        source: EventSource::Acp,
    };
    let chunk = |seq, text: &str| {
        EventEnvelope::new(
            &ctx,
            seq,
            Timestamp::now(),
            EventPayload::Unknown {
                event_type: "session_update".into(),
                payload: json!({
                    "sessionId": "acp-example",
                    "update": {"sessionUpdate": "agent_message_chunk",
                               "content": {"type": "text", "text": text}}
                }),
            },
        )
    };
    // The writer lock is held by a connection of its own, on whichever host takes it.
    let writer = store.lock(&id, Duration::from_secs(5)).await?;
    let state = store
        .append(
            &writer,
            &[chunk(1, "The flaky test "), chunk(2, "waits on a timer.")],
            Durability::Flush,
        )
        .await?;
    record.note_append_result(&Ok::<_, acpx_model::StoreError>(state));

    record.thread.title = "Why is the test flaky?".into();
    record.thread.messages.push(Message::User(UserMessage {
        id: RecordId::generate().to_string(),
        content: vec![UserContent::Text(
            "Why is the integration test flaky?".into(),
        )],
        extra: Map::new(),
    }));
    let mut reply = AgentMessage::new();
    reply.content.push(AgentContent::Text(
        "The flaky test waits on a timer.".into(),
    ));
    record.thread.messages.push(Message::Agent(reply));
    store.save(&mut record).await?;
    drop(writer);

    for s in store.list(&ListQuery::default()).await?.sessions {
        println!(
            "session {} in {} ({} messages, revision {})",
            s.acpx_record_id, s.cwd, s.message_count, s.revision
        );
    }
    for hit in store
        .search(&SearchQuery {
            text: "flaky timer".into(),
            ..SearchQuery::default()
        })
        .await?
    {
        println!(
            "hit: message {} ({}): {}",
            hit.message_index, hit.role, hit.snippet
        );
    }
    println!("the event log, as the file store would have written it:");
    for e in store
        .read_events(&id, &EventQuery::from_seq(1))
        .await?
        .events
    {
        println!("{}", e.to_ndjson());
    }
    let closed = store.close(&id, Timestamp::now()).await?;
    println!("closed at {:?}", closed.closed_at.map(|t| t.to_string()));
    store.drop_schema().await?;
    Ok(())
}
