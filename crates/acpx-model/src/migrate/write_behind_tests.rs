//! `copy_store` writes a group's last batch while the next group is read and the batch before
//! it is verified: a failure in any of the three leaves the batches verified before it, whole,
//! and nothing after it.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::*;
use crate::memory::MemoryStore;
use crate::session::NewSession;
use crate::testing::{Fault, FaultStore};
use crate::time::Timestamp;

/// Fails the `load` (a source read) or the `create` (a target write) of one session.
#[derive(Debug, Default)]
struct FailOne {
    load: Option<RecordId>,
    create: Option<RecordId>,
}

#[async_trait]
impl Fault<MemoryStore> for FailOne {
    async fn load(&self, inner: &MemoryStore, id: &RecordId) -> StoreResult<SessionRecord> {
        if self.load.as_ref() == Some(id) {
            return Err(StoreError::Backend {
                backend: "memory",
                message: format!("injected read failure of {id}"),
            });
        }
        inner.load(id).await
    }

    async fn create(&self, inner: &MemoryStore, record: &mut SessionRecord) -> StoreResult<()> {
        if self.create.as_ref() == Some(&record.acpx_record_id) {
            return Err(StoreError::Backend {
                backend: "memory",
                message: format!("injected write failure of {}", record.acpx_record_id),
            });
        }
        inner.create(record).await
    }
}

fn id(i: usize) -> RecordId {
    RecordId::parse(&format!("w{i:03}")).unwrap()
}

/// 600 sessions of 2 events; `w599` is the newest, so list order is w599, w598, … and the
/// groups of 256 are w599..=w344, w343..=w088, w087..=w000.
async fn source() -> MemoryStore {
    let store = MemoryStore::new();
    for i in 0..600 {
        let mut r = SessionRecord::new(
            NewSession {
                acpx_record_id: id(i),
                acp_session_id: format!("acp-{i}"),
                agent_session_id: None,
                agent_command: "agent".into(),
                cwd: "/repo".into(),
                name: None,
            },
            Timestamp::from_millis(10_000 + i as i64).unwrap(),
        );
        store.create(&mut r).await.unwrap();
        let writer = store.lock(&id(i), Duration::from_secs(1)).await.unwrap();
        let events: Vec<EventEnvelope> = (1..=2)
            .map(|seq| {
                let ctx = crate::event::EventContext {
                    acpx_record_id: &r.acpx_record_id,
                    acp_session_id: "acp",
                    request_id: None,
                    stream: crate::event::EventStream::Prompt,
                    source: crate::event::EventSource::Acp,
                };
                let payload = crate::event::EventPayload::Unknown {
                    event_type: "x.test".into(),
                    payload: serde_json::json!({"n": seq}),
                };
                EventEnvelope::new(
                    &ctx,
                    seq,
                    Timestamp::from_millis(seq as i64).unwrap(),
                    payload,
                )
            })
            .collect();
        store
            .append(&writer, &events, Durability::Flush)
            .await
            .unwrap();
    }
    store
}

async fn stored_ids(store: &dyn Store) -> Vec<String> {
    let page = store
        .list(&ListQuery {
            closed: ClosedFilter::Any,
            ..ListQuery::default()
        })
        .await
        .unwrap();
    page.sessions
        .into_iter()
        .map(|s| s.acpx_record_id.to_string())
        .collect()
}

fn first_group() -> Vec<String> {
    (344..600).rev().map(|i| id(i).to_string()).collect()
}

#[tokio::test]
async fn a_read_failure_in_the_next_group_keeps_the_batch_written_behind() {
    let from = FaultStore::new(
        Arc::new(source().await),
        FailOne {
            load: Some(id(300)),
            ..FailOne::default()
        },
    );
    let to = MemoryStore::new();
    let err = copy_store(&from, &to).await.unwrap_err();
    assert!(err.to_string().contains("injected read failure"), "{err}");
    // The first group was written (behind the read of the second) and verified; nothing of
    // the second group was.
    assert_eq!(stored_ids(&to).await, first_group());
}

#[tokio::test]
async fn a_failed_write_behind_stops_the_copy_and_keeps_the_batches_before_it() {
    let from = source().await;
    let to = FaultStore::new(
        Arc::new(MemoryStore::new()),
        FailOne {
            create: Some(id(100)),
            ..FailOne::default()
        },
    );
    let err = copy_store(&from, &to).await.unwrap_err();
    assert!(err.to_string().contains("injected write failure"), "{err}");
    // The second group's batch failed while the third group was read: it is removed whole,
    // the first group stays, and the third group (read ahead) is never written.
    assert_eq!(stored_ids(&to).await, first_group());
}

/// Changes the payload of session `bad`'s event with seq 2 among `events`.
fn change_seq_2_of(events: &mut [EventEnvelope], bad: &str) {
    if let Some(e) = events
        .iter_mut()
        .find(|e| e.acpx_record_id.as_str() == bad && e.seq == 2)
    {
        e.payload = serde_json::json!({"n": 2, "changed": true});
    }
}

/// A target that silently changes what it stores, as `tamper` does.
fn tampering(tamper: fn(&mut Vec<EventEnvelope>)) -> FaultStore<MemoryStore> {
    FaultStore::new(
        Arc::new(MemoryStore::new()),
        crate::testing::Faults::new().tamper_appends(tamper),
    )
}

#[tokio::test]
async fn a_copy_that_fails_to_verify_removes_the_batch_written_meanwhile() {
    // w200 is in the second group: its batch is verified while the third group's is written.
    let from = source().await;
    let to = tampering(|events| change_seq_2_of(events, "w200"));
    let err = copy_store(&from, &to).await.unwrap_err();
    assert!(err.to_string().contains("w200"), "{err}");
    // The second group's batch is removed, and so is the third's, written after it; the
    // first, verified before, stays.
    assert_eq!(stored_ids(&to).await, first_group());
}

#[tokio::test]
async fn a_first_batch_that_fails_to_verify_leaves_the_target_empty() {
    let from = source().await;
    let to = tampering(|events| change_seq_2_of(events, "w500"));
    let err = copy_store(&from, &to).await.unwrap_err();
    assert!(err.to_string().contains("w500"), "{err}");
    assert_eq!(stored_ids(&to).await, Vec::<String>::new());
}
