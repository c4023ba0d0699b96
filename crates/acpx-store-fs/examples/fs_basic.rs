//! A session's life in the file store: create, append events, save, list, read back.
//!
//! Run with `cargo run -p acpx-store-fs --example fs_basic` (add a directory argument to keep
//! the files and look at them; by default a temp directory is used and removed).

use std::time::Duration;

use acpx_model::event::{PromptDonePayload, PromptStartedPayload, SessionUpdatePayload};
use acpx_model::{
    Durability, EventContext, EventEnvelope, EventPayload, EventQuery, EventSource, EventStream,
    ListQuery, Message, NewSession, RecordId, SessionRecord, Store, Timestamp, UserContent,
    UserMessage,
};
use acpx_store_fs::FsStore;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let temp;
    let root = match std::env::args_os().nth(1) {
        Some(dir) => std::path::PathBuf::from(dir),
        None => {
            temp = tempfile::tempdir()?;
            temp.path().to_owned()
        }
    };
    let store = FsStore::open(&root)?;
    println!("store: {}", store.sessions_dir().display());

    let id = RecordId::generate();
    let mut record = SessionRecord::new(
        NewSession {
            acpx_record_id: id.clone(),
            acp_session_id: "acp-demo-1".into(),
            agent_session_id: None,
            agent_command: "demo-agent --acp".into(),
            cwd: "/tmp/demo".into(),
            name: Some("demo".into()),
        },
        Timestamp::now(),
    );
    store.create(&mut record).await?;
    println!("created {id} (revision {})", record.revision);

    // A writer holds the session lock while it works; other writers wait.
    let lock = store.lock(&id, Duration::from_secs(10)).await?;
    let ctx = EventContext {
        acpx_record_id: &id,
        acp_session_id: "acp-demo-1",
        request_id: Some("req_1"),
        stream: EventStream::Prompt,
        source: EventSource::Runtime,
    };
    let payloads = [
        EventPayload::PromptStarted(PromptStartedPayload {
            message_preview: "hello".into(),
            resumed: false,
            extra: Default::default(),
        }),
        EventPayload::SessionUpdate(SessionUpdatePayload {
            session_id: "acp-demo-1".into(),
            update: serde_json::json!({
                "sessionUpdate": "agent_message_chunk",
                "content": { "type": "text", "text": "Hello!" }
            }),
            extra: Default::default(),
        }),
        EventPayload::PromptDone(PromptDonePayload {
            stop_reason: "end_turn".into(),
            permission_stats: Default::default(),
            extra: Default::default(),
        }),
    ];
    let batch: Vec<EventEnvelope> = payloads
        .into_iter()
        .enumerate()
        .map(|(i, p)| EventEnvelope::new(&ctx, i as u64 + 1, Timestamp::now(), p))
        .collect();
    // Appending requires that lock (a `SessionLock` of this store).
    let result = store.append(&lock, &batch, Durability::Fsync).await;
    record.note_append_result(&result);
    let state = result?;
    println!(
        "appended {} events: last seq {}, {} segment(s), active log {}",
        batch.len(),
        state.last_seq,
        state.segment_count,
        state.active_path
    );

    record.acpx.audit_seq = state.last_seq;
    record.thread.title = "Say hello".into();
    record.thread.messages.push(Message::User(UserMessage {
        id: "u-1".into(),
        content: vec![UserContent::Text("hello".into())],
        extra: Default::default(),
    }));
    record.last_used_at = Timestamp::now();
    store.save(&mut record).await?;
    drop(lock);
    println!("saved (revision {})", record.revision);

    for s in store.list(&ListQuery::default()).await?.sessions {
        println!(
            "listed {} {:?} cwd={} messages={} closed={}",
            s.acpx_record_id, s.title, s.cwd, s.message_count, s.closed
        );
    }
    let page = store.read_events(&id, &EventQuery::from_seq(2)).await?;
    for e in &page.events {
        println!("event seq {} type {}", e.seq, e.event_type);
    }
    let loaded = store.load(&id).await?;
    assert_eq!(loaded, record);
    println!(
        "loaded back revision {} with {} message(s)",
        loaded.revision,
        loaded.thread.messages.len()
    );
    Ok(())
}
