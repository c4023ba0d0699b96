//! Copying every session from one [`Store`] to another, verified (what `acpx migrate` calls).
//!
//! [`copy_store`] copies each session's snapshot and its whole retained event log, then reads
//! both sides back and compares, per session, the number of events, the last seq and two
//! SHA-256 digests: one over the NDJSON lines of the log, one over the snapshot document.
//! Two fields of the snapshot are the target store's own and are left out of the snapshot
//! digest: `revision` (the target numbers its own saves) and `acpx.event_log` (where the log
//! lives, which the copy updates to the target's log).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt;
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::error::{StoreError, StoreResult};
use crate::event::EventEnvelope;
use crate::id::RecordId;
use crate::session::SessionRecord;
use crate::store::{
    ClosedFilter, Durability, EventQuery, ListQuery, ReadMode, SessionLock, SkippedEntry, Store,
};

/// Events read (and appended) per call while copying.
const EVENT_PAGE: usize = 1_000;
/// Sessions copied at the same time.
const COPY_CONCURRENCY: usize = 8;
/// Sessions listed per page.
const LIST_PAGE: usize = 500;
/// How long to wait for a source session's writer lock (a live agent may be writing it).
const SOURCE_LOCK_WAIT: Duration = Duration::from_secs(30);

/// What [`copy_store`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CopyReport {
    /// Every copied session, verified, in the source's list order.
    pub sessions: Vec<SessionCopy>,
    /// Source entries that could not be read (malformed snapshots) and were not copied.
    pub skipped: Vec<SkippedEntry>,
}

/// The verified copy of one session. Every figure was computed on the source and, reading
/// the copy back, on the target, and they agreed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionCopy {
    /// The session.
    pub acpx_record_id: RecordId,
    /// Events copied (the source's retained log).
    pub events: u64,
    /// Oldest and last seq of the copied log (0 and the log's last seq when empty).
    pub first_seq: u64,
    /// See `first_seq`.
    pub last_seq: u64,
    /// SHA-256 (hex) over the log's NDJSON lines, each with its `\n`.
    pub events_sha256: String,
    /// SHA-256 (hex) over the snapshot without `revision` and `acpx.event_log`.
    pub snapshot_sha256: String,
}

/// Copies every session of `from` (open and closed, every page of `list`) with its whole
/// event log into `to`, then verifies each copy.
///
/// Refuses with [`StoreError::AlreadyExists`], before copying anything, when `to` already has
/// a session with one of the ids. Each source session is copied under its writer lock, so a
/// live writer cannot change it half-way. A session whose copy fails (or does not verify) is
/// removed from the target again and the error is returned; sessions copied before it stay.
/// A source log whose oldest events were removed by retention (it does not start at seq 1)
/// cannot be recreated through [`Store::append`] and is refused with `InvalidArgument`.
pub async fn copy_store(from: &dyn Store, to: &dyn Store) -> StoreResult<CopyReport> {
    copy_store_with_progress(from, to, &crate::progress::NoProgress).await
}

/// [`copy_store`], telling `progress` about each session copied and verified.
pub async fn copy_store_with_progress(
    from: &dyn Store,
    to: &dyn Store,
    progress: &dyn crate::progress::Progress,
) -> StoreResult<CopyReport> {
    let mut report = CopyReport::default();
    let mut ids = Vec::new();
    let mut query = ListQuery {
        closed: ClosedFilter::Any,
        limit: Some(LIST_PAGE),
        ..ListQuery::default()
    };
    loop {
        let page = from.list(&query).await?;
        ids.extend(page.sessions.into_iter().map(|s| s.acpx_record_id));
        report.skipped.extend(page.skipped);
        match page.next_cursor {
            Some(c) => query.cursor = Some(c),
            None => break,
        }
    }
    for id in &ids {
        match to.load(id).await {
            Err(StoreError::NotFound(_)) => {}
            // Present but unreadable is still present: never overwrite it.
            Ok(_) | Err(StoreError::Corrupt { .. }) | Err(StoreError::Invalid(_)) => {
                return Err(StoreError::AlreadyExists(id.clone()))
            }
            Err(e) => return Err(e),
        }
    }
    progress.begin(ids.len() as u64);
    // Several sessions are copied at once: each one's cost is mostly waiting for its durable
    // writes (fsyncs on the file store, commits on the databases), which overlap. Results come
    // back in list order. After a failure no further copy starts, but the ones under way are
    // driven to their end (each removes its own partial copy when it fails), so nothing is
    // left half-written by a copy that was dropped.
    let stop = AtomicBool::new(false);
    let mut first_error = None;
    let mut copies = futures::stream::iter(&ids)
        .map(|id| {
            let stop = &stop;
            async move {
                if stop.load(Ordering::Relaxed) {
                    return None;
                }
                let copied = copy_one(from, to, id).await;
                if copied.is_err() {
                    stop.store(true, Ordering::Relaxed);
                }
                Some(copied)
            }
        })
        .buffered(COPY_CONCURRENCY);
    while let Some(copied) = copies.next().await {
        match copied {
            Some(Ok(copy)) => {
                progress.advance(copy.acpx_record_id.as_str());
                report.sessions.push(copy);
            }
            Some(Err(e)) => {
                first_error.get_or_insert(e);
            }
            None => {}
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(report),
    }
}

/// Copies session `id` under its source writer lock and verifies the copy; a copy that fails
/// or does not verify is removed from `to` again.
async fn copy_one(from: &dyn Store, to: &dyn Store, id: &RecordId) -> StoreResult<SessionCopy> {
    let _lock = from.lock(id, SOURCE_LOCK_WAIT).await?;
    let mut created = false;
    let checked = match copy_session(from, to, id, &mut created).await {
        Ok(source) => match verify_side(to, id).await {
            Ok(target) => match source.difference(&target) {
                None => Ok(source),
                Some(what) => Err(StoreError::Corrupt {
                    location: format!(
                        "the copy of session {id} in the {} store",
                        to.backend_name()
                    ),
                    line: None,
                    reason: format!(
                        "{what} differs from the {} source; the copy was removed again",
                        from.backend_name()
                    ),
                }),
            },
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    };
    let source = match checked {
        Ok(source) => source,
        Err(e) => {
            // Only what this call created is removed: a session that appeared in the
            // target meanwhile belongs to someone else.
            if created {
                if let Err(cleanup) = to.delete(id).await {
                    report_cleanup_failure(id, &cleanup);
                }
            }
            return Err(e);
        }
    };
    Ok(SessionCopy {
        acpx_record_id: id.clone(),
        events: source.events,
        first_seq: source.first_seq,
        last_seq: source.last_seq,
        events_sha256: hex(&source.events_digest),
        snapshot_sha256: hex(&source.snapshot_digest),
    })
}

/// Writes one new session into a store: the one way acpx fills a store with a session that
/// comes from elsewhere (another store, an export archive, a converted Node acpx session).
///
/// [`NewSessionWriter::create`] creates the snapshot, [`NewSessionWriter::append`] adds the
/// log in order (seqs as given; a store refuses a gap), and [`NewSessionWriter::finish`]
/// flushes the log and saves the snapshot with the target's own `acpx.event_log`, so the
/// snapshot describes the log it now sits next to.
#[derive(Debug)]
pub struct NewSessionWriter<'s> {
    store: &'s dyn Store,
    record: SessionRecord,
    /// The new session's writer lock, held until the snapshot is saved: appends require it,
    /// and nobody else can write to the half-written session.
    writer: SessionLock,
}

/// How long a new session's writer waits for its lock (a fresh id: normally free at once).
const NEW_SESSION_LOCK_TIMEOUT: Duration = Duration::from_secs(10);

impl<'s> NewSessionWriter<'s> {
    /// Creates `record` in `store` ([`Store::create`]: fails with `AlreadyExists` when the id
    /// is taken).
    pub async fn create(store: &'s dyn Store, mut record: SessionRecord) -> StoreResult<Self> {
        let writer = store
            .lock(&record.acpx_record_id, NEW_SESSION_LOCK_TIMEOUT)
            .await?;
        store.create(&mut record).await?;
        Ok(NewSessionWriter {
            store,
            record,
            writer,
        })
    }

    /// The id of the session being written.
    pub fn id(&self) -> &RecordId {
        &self.record.acpx_record_id
    }

    /// Appends `events` (in calls of at most 1,000 events) with
    /// [`Durability::Flush`]; [`NewSessionWriter::finish`] makes them durable.
    pub async fn append(&mut self, events: &[EventEnvelope]) -> StoreResult<()> {
        for chunk in events.chunks(EVENT_PAGE) {
            self.store
                .append(&self.writer, chunk, Durability::Flush)
                .await?;
        }
        Ok(())
    }

    /// Flushes the log, records its state in the snapshot and saves it; returns the snapshot
    /// as saved.
    pub async fn finish(mut self) -> StoreResult<SessionRecord> {
        let id = self.record.acpx_record_id.clone();
        self.store.flush(&id).await?;
        self.record.acpx.event_log = self.store.event_log_state(&id).await?;
        self.store.save(&mut self.record).await?;
        Ok(self.record)
    }
}

/// Figures of one side of a copy.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Side {
    events: u64,
    first_seq: u64,
    last_seq: u64,
    events_digest: [u8; 32],
    snapshot_digest: [u8; 32],
}

impl Side {
    fn difference(&self, other: &Side) -> Option<String> {
        if self.events != other.events {
            return Some(format!(
                "the event count ({} copied, {} in the source)",
                other.events, self.events
            ));
        }
        if (self.first_seq, self.last_seq) != (other.first_seq, other.last_seq) {
            return Some(format!(
                "the seq range ({}..={} copied, {}..={} in the source)",
                other.first_seq, other.last_seq, self.first_seq, self.last_seq
            ));
        }
        if self.events_digest != other.events_digest {
            return Some("the SHA-256 of the event log".into());
        }
        if self.snapshot_digest != other.snapshot_digest {
            return Some("the SHA-256 of the snapshot".into());
        }
        None
    }
}

/// Copies one session, computing the source side's figures from what it read.
/// Sets `created` once the target session exists.
async fn copy_session(
    from: &dyn Store,
    to: &dyn Store,
    id: &RecordId,
    created: &mut bool,
) -> StoreResult<Side> {
    let record = from.load(id).await?;
    let snapshot_digest = snapshot_digest(&record);
    let mut query = page_query(1);
    let mut page = from.read_events(id, &query).await?;
    if page.oldest_seq > 1 {
        return Err(StoreError::InvalidArgument(format!(
            "session {id}: the {} store kept its event log from seq {} on (older events were \
             removed by retention), and a log can only be recreated from seq 1",
            from.backend_name(),
            page.oldest_seq
        )));
    }
    let mut writer = NewSessionWriter::create(to, record).await?;
    *created = true;
    let mut hasher = Sha256::new();
    let mut events = 0u64;
    let first_seq = page.events.first().map_or(0, |e| e.seq);
    let mut last_seq = page.last_seq;
    loop {
        hash_events(&mut hasher, &page.events);
        events += page.events.len() as u64;
        if let Some(e) = page.events.last() {
            last_seq = e.seq;
        }
        writer.append(&page.events).await?;
        match page.next_seq {
            Some(next) => {
                query.from_seq = next;
                page = from.read_events(id, &query).await?;
            }
            None => break,
        }
    }
    writer.finish().await?;
    Ok(Side {
        events,
        first_seq,
        last_seq,
        events_digest: hasher.finalize().into(),
        snapshot_digest,
    })
}

/// Reads one side back and computes its figures.
async fn verify_side(store: &dyn Store, id: &RecordId) -> StoreResult<Side> {
    let record = store.load(id).await?;
    let mut hasher = Sha256::new();
    let mut events = 0u64;
    let mut first_seq = None;
    let mut query = page_query(1);
    let last_seq = loop {
        let page = store.read_events(id, &query).await?;
        hash_events(&mut hasher, &page.events);
        events += page.events.len() as u64;
        if first_seq.is_none() {
            first_seq = page.events.first().map(|e| e.seq);
        }
        match page.next_seq {
            Some(next) => query.from_seq = next,
            None => break page.last_seq,
        }
    };
    Ok(Side {
        events,
        first_seq: first_seq.unwrap_or(0),
        last_seq,
        events_digest: hasher.finalize().into(),
        snapshot_digest: snapshot_digest(&record),
    })
}

fn page_query(from_seq: u64) -> EventQuery {
    EventQuery {
        from_seq,
        limit: Some(EVENT_PAGE),
        mode: ReadMode::Strict,
        ..EventQuery::default()
    }
}

fn hash_events(hasher: &mut Sha256, events: &[EventEnvelope]) {
    let mut line = Vec::new();
    for e in events {
        line.clear();
        e.write_ndjson_line(&mut line);
        hasher.update(&line);
    }
}

/// SHA-256 of the snapshot with the store-owned fields (`revision`, `acpx.event_log`) left out.
fn snapshot_digest(record: &SessionRecord) -> [u8; 32] {
    let mut value = serde_json::to_value(record).unwrap_or(serde_json::Value::Null);
    if let Some(doc) = value.as_object_mut() {
        doc.remove("revision");
        if let Some(acpx) = doc.get_mut("acpx").and_then(|a| a.as_object_mut()) {
            acpx.remove("event_log");
        }
    }
    let bytes = serde_json::to_vec(&value).unwrap_or_default();
    Sha256::digest(&bytes).into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// This crate does no logging; a failed cleanup is reported on stderr so it is not lost.
fn report_cleanup_failure(id: &RecordId, e: &StoreError) {
    eprintln!("acpx: could not remove the partial copy of session {id}: {e}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{EventContext, EventPayload, EventSource, EventStream};
    use crate::memory::MemoryStore;
    use crate::session::NewSession;
    use crate::testing::{FaultStore, Faults};
    use crate::time::Timestamp;
    use serde_json::json;
    use std::sync::Arc;

    fn record(id: &str, t: i64) -> SessionRecord {
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

    fn events(id: &RecordId, from: u64, n: u64) -> Vec<EventEnvelope> {
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

    async fn fill(store: &MemoryStore, sessions: usize, per_session: u64) -> Vec<RecordId> {
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

    #[tokio::test]
    async fn refuses_to_overwrite_and_copies_nothing() {
        let from = MemoryStore::new();
        fill(&from, 3, 2).await;
        let to = MemoryStore::new();
        let mut existing = record("s002", 1);
        to.create(&mut existing).await.unwrap();
        match copy_store(&from, &to).await {
            Err(StoreError::AlreadyExists(id)) => assert_eq!(id.as_str(), "s002"),
            other => panic!("{other:?}"),
        }
        let page = to.list(&ListQuery::default()).await.unwrap();
        assert_eq!(page.sessions.len(), 1);
        assert_eq!(to.load(&existing.acpx_record_id).await.unwrap(), existing);
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

    #[tokio::test]
    async fn a_trimmed_source_log_is_refused_without_a_partial_copy() {
        let inner = MemoryStore::new();
        fill(&inner, 1, 0).await;
        let id = RecordId::parse("s000").unwrap();
        let writer = inner.lock(&id, Duration::from_secs(1)).await.unwrap();
        inner
            .append(&writer, &events(&id, 1, 9), Durability::Flush)
            .await
            .unwrap();
        drop(writer);
        let to = MemoryStore::new();
        let err = copy_store(&trimmed(inner), &to).await.unwrap_err();
        assert!(matches!(err, StoreError::InvalidArgument(_)), "{err}");
        assert!(err.to_string().contains("seq 5"), "{err}");
        assert!(to
            .list(&ListQuery::default())
            .await
            .unwrap()
            .sessions
            .is_empty());
    }
}
