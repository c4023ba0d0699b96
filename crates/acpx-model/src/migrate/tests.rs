//! The tests of `copy_store`: a whole copy, a copy that differs, a trimmed source into a
//! store that cannot hold it; and the helpers the other test modules share.

use super::*;
use crate::event::{EventContext, EventPayload, EventSource, EventStream};
use crate::memory::MemoryStore;
use crate::session::NewSession;
use crate::testing::{FaultStore, Faults};
use crate::time::Timestamp;
use serde_json::json;
use std::sync::Arc;

pub(super) fn record(id: &str, t: i64) -> SessionRecord {
    let mut r = SessionRecord::new(
        NewSession {
            acpx_record_id: RecordId::parse(id).unwrap(),
            acp_session_id: format!("acp-{id}"),
            agent_session_id: None,
            agent_command: "agent".into(),
            cwd: "/repo".into(),
            name: None,
        },
        Timestamp::from_millis(t).unwrap(),
    );
    r.extra.insert("futureKey".into(), json!({"kept": [1, 2]}));
    r
}

pub(super) fn events(id: &RecordId, from: u64, n: u64) -> Vec<EventEnvelope> {
    (from..from + n)
        .map(|seq| {
            let ctx = EventContext {
                acpx_record_id: id,
                acp_session_id: "acp",
                request_id: None,
                stream: EventStream::Prompt,
                source: EventSource::Acp,
            };
            let payload = EventPayload::Unknown {
                event_type: "x.test".into(),
                payload: json!({"n": seq, "f": 0.1}),
            };
            EventEnvelope::new(
                &ctx,
                seq,
                Timestamp::from_millis(seq as i64).unwrap(),
                payload,
            )
        })
        .collect()
}

pub(super) async fn fill(store: &MemoryStore, sessions: usize, per_session: u64) -> Vec<RecordId> {
    let mut ids = Vec::new();
    for i in 0..sessions {
        let mut r = record(&format!("s{i:03}"), 1_000 + i as i64);
        store.create(&mut r).await.unwrap();
        let id = r.acpx_record_id.clone();
        let n = per_session * (i as u64 % 3);
        let writer = store.lock(&id, Duration::from_secs(1)).await.unwrap();
        for chunk in events(&id, 1, n).chunks(700) {
            store
                .append(&writer, chunk, Durability::Flush)
                .await
                .unwrap();
        }
        drop(writer);
        if i % 4 == 0 {
            store
                .close(&id, Timestamp::from_millis(5).unwrap())
                .await
                .unwrap();
        }
        ids.push(id);
    }
    ids
}

#[tokio::test]
async fn copies_everything_and_verifies() {
    let from = MemoryStore::new();
    let ids = fill(&from, 7, 1_300).await;
    let to = MemoryStore::new();
    let report = copy_store(&from, &to).await.unwrap();
    assert_eq!(report.sessions.len(), 7);
    assert!(report.skipped.is_empty());
    for id in &ids {
        let a = from.load(id).await.unwrap();
        let mut b = to.load(id).await.unwrap();
        assert_eq!(b.revision, 2);
        assert_eq!(b.acpx.event_log, to.event_log_state(id).await.unwrap());
        b.revision = a.revision;
        b.acpx.event_log = a.acpx.event_log.clone();
        assert_eq!(a, b);
        let ea = from.read_events(id, &EventQuery::default()).await.unwrap();
        let eb = to.read_events(id, &EventQuery::default()).await.unwrap();
        assert_eq!(ea.events, eb.events);
        let entry = report
            .sessions
            .iter()
            .find(|s| &s.acpx_record_id == id)
            .unwrap();
        assert_eq!(entry.events, ea.events.len() as u64);
        assert_eq!(entry.last_seq, ea.last_seq);
        assert_eq!(entry.events_sha256.len(), 64);
    }
    // The closed ones stay closed.
    assert!(to.load(&ids[0]).await.unwrap().closed);
}

/// A session whose log is few events but many bytes (large tool outputs) is read in pages
/// bounded by bytes: the group read sends it the one-at-a-time way, and it is copied and
/// verified like any other, among small ones.
#[tokio::test]
async fn copies_a_log_of_few_large_events_among_small_sessions() {
    let from = MemoryStore::new();
    let mut ids = fill(&from, 5, 10).await;
    let mut r = record("big", 9_000);
    from.create(&mut r).await.unwrap();
    let id = r.acpx_record_id.clone();
    let big = "x".repeat(8 << 10);
    let large: Vec<EventEnvelope> = events(&id, 1, 200)
        .into_iter()
        .map(|mut e| {
            e.payload = json!({"out": big, "n": e.seq});
            e
        })
        .collect();
    let writer = from.lock(&id, Duration::from_secs(1)).await.unwrap();
    from.append(&writer, &large, Durability::Flush)
        .await
        .unwrap();
    drop(writer);
    ids.push(id.clone());
    let to = MemoryStore::new();
    let report = copy_store(&from, &to).await.unwrap();
    assert_eq!(report.sessions.len(), 6);
    let copied = to.read_events(&id, &EventQuery::default()).await.unwrap();
    assert_eq!(copied.events, large);
    let entry = report
        .sessions
        .iter()
        .find(|s| s.acpx_record_id == id)
        .unwrap();
    assert_eq!((entry.events, entry.last_seq), (200, 200));
}

/// A target that silently changes the payload of the event with seq 3 it stores.
fn lossy() -> FaultStore<MemoryStore> {
    FaultStore::new(
        Arc::new(MemoryStore::new()),
        Faults::new().tamper_appends(|events| {
            if let Some(e) = events.iter_mut().find(|e| e.seq == 3) {
                e.payload = json!({"n": 3, "f": 0.1000001});
            }
        }),
    )
}

/// A source whose log starts at seq 5, as after retention.
fn trimmed(inner: MemoryStore) -> FaultStore<MemoryStore> {
    FaultStore::new(
        Arc::new(inner),
        Faults::new().tamper_reads(|page| {
            page.events.retain(|e| e.seq >= 5);
            page.oldest_seq = 5;
        }),
    )
}

#[tokio::test]
async fn a_copy_that_differs_fails_clearly_and_is_removed() {
    let from = MemoryStore::new();
    fill(&from, 3, 5).await;
    let to = lossy();
    let err = copy_store(&from, &to).await.unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{msg}");
    assert!(msg.contains("SHA-256 of the event log"), "{msg}");
    // s002 is first in list order and the first with a seq 3.
    assert!(msg.contains("s002"), "{msg}");
    // Its partial copy is gone again.
    assert!(to
        .list(&ListQuery::default())
        .await
        .unwrap()
        .sessions
        .is_empty());
}

/// Reads and verification go 16 sessions per store call: a copy that differs in the middle of
/// a group (the 21st of 40, in the second group) is found and named, and the whole batch is
/// removed from the target.
#[tokio::test]
async fn a_copy_that_differs_inside_a_group_is_found_and_named() {
    let from = MemoryStore::new();
    let ids = fill(&from, 40, 5).await;
    let bad = ids[20].clone();
    assert_eq!(bad.as_str(), "s020");
    let to = FaultStore::new(
        Arc::new(MemoryStore::new()),
        Faults::new().tamper_appends(|events| {
            if let Some(e) = events
                .iter_mut()
                .find(|e| e.acpx_record_id.as_str() == "s020" && e.seq == 3)
            {
                e.payload = json!({"n": 3, "f": 0.1000001});
            }
        }),
    );
    let err = copy_store(&from, &to).await.unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{msg}");
    assert!(msg.contains(bad.as_str()), "{msg}");
    assert!(msg.contains("SHA-256 of the event log"), "{msg}");
    let left = to
        .list(&ListQuery {
            closed: ClosedFilter::Any,
            ..ListQuery::default()
        })
        .await
        .unwrap();
    assert!(left.sessions.is_empty(), "{:?}", left.sessions.len());
}

/// A source holding one session whose log retention trimmed to seqs 5..=9.
pub(super) async fn trimmed_source() -> FaultStore<MemoryStore> {
    let inner = MemoryStore::new();
    fill(&inner, 1, 0).await;
    let id = RecordId::parse("s000").unwrap();
    let writer = inner.lock(&id, Duration::from_secs(1)).await.unwrap();
    inner
        .append(&writer, &events(&id, 1, 9), Durability::Flush)
        .await
        .unwrap();
    drop(writer);
    trimmed(inner)
}

/// The memory store's `create_sessions` starts a log at a later seq: the copy holds 5..=9.
#[tokio::test]
async fn a_trimmed_source_log_is_copied_from_its_first_seq() {
    let to = MemoryStore::new();
    let report = copy_store(&trimmed_source().await, &to).await.unwrap();
    assert!(report.sessions[0].trimmed);
    let id = RecordId::parse("s000").unwrap();
    let page = to.read_events(&id, &EventQuery::default()).await.unwrap();
    let seqs: Vec<u64> = page.events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, [5, 6, 7, 8, 9]);
    // Finished like any copy: a rerun keeps it.
    let again = copy_store(&trimmed_source().await, &to).await.unwrap();
    assert!(again.recopied.is_empty() && again.sessions.is_empty());
    assert_eq!(again.already_copied.len(), 1);
}

/// A store on the trait's default `create_sessions` writes through `append`, which cannot
/// start a log at seq 5: the target refuses it, naming the seq, before creating anything.
#[tokio::test]
async fn a_trimmed_source_log_into_a_store_that_cannot_hold_it_is_refused_cleanly() {
    let to = FaultStore::new(Arc::new(MemoryStore::new()), Faults::new());
    let err = copy_store(&trimmed_source().await, &to).await.unwrap_err();
    assert!(matches!(err, StoreError::InvalidArgument(_)), "{err}");
    assert!(err.to_string().contains("seq 5"), "{err}");
    assert!(to
        .list(&ListQuery::default())
        .await
        .unwrap()
        .sessions
        .is_empty());
}
