//! Copying every session from one [`Store`] to another, verified (what `acpx migrate` calls).
//!
//! [`copy_store`] copies each session's snapshot and its whole retained event log, then reads
//! both sides back and compares, per session, the number of events, the last seq and two
//! SHA-256 digests: one over the NDJSON lines of the log, one over the snapshot document.
//! Two fields of the snapshot are the target store's own and take fixed values in the
//! snapshot digest (0 and an empty log's state): `revision` (the target numbers its own
//! saves) and `acpx.event_log` (where the log lives, which the copy updates to the target's
//! log). The digest is over the document's compact JSON.

use std::time::Duration;

use futures::StreamExt;
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::error::{StoreError, StoreResult};
use crate::event::EventEnvelope;
use crate::id::RecordId;
use crate::session::SessionRecord;
use crate::store::{report_cleanup_failure, NEW_SESSION_LOCK_TIMEOUT};
use crate::store::{
    ClosedFilter, Durability, EventQuery, ListQuery, NewSessionData, ReadMode, SessionLock,
    SkippedEntry, Store,
};

/// Events read (and appended) per call while copying; a page also ends at
/// [`crate::PAGE_BYTES`] of lines.
const EVENT_PAGE: usize = 1_000;
/// Target lookups (an existing target) and checks of held copies (a rerun) at the same time.
const COPY_CONCURRENCY: usize = 8;
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
    /// Sessions the target already held as an identical copy (an earlier run of the same
    /// migration): checked like a fresh copy and left as they were.
    pub already_copied: Vec<SessionCopy>,
    /// Sessions the target held as an unfinished copy (an earlier run stopped before the
    /// copy's last save): removed and copied again, so they are also in `sessions`.
    pub recopied: Vec<RecordId>,
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
    /// SHA-256 (hex) over the snapshot's compact JSON, with `revision` 0 and `acpx.event_log`
    /// an empty log's state.
    pub snapshot_sha256: String,
    /// The source's log started above seq 1 (retention had removed its oldest events): the
    /// copy is the retained part, from `first_seq` on, and so is what was verified.
    pub trimmed: bool,
}

/// Copies every session of `from` (open and closed, every page of `list`) with its whole
/// event log into `to`, then verifies each copy.
///
/// A session `to` already holds is compared with the source before anything is written, under
/// the source's writer lock, with the figures of the verification (event count, seq range,
/// both digests, the copy read back from `to`): an identical copy (left by an earlier run that
/// was interrupted, or before new sessions appeared in `from`) is kept and listed in
/// [`CopyReport::already_copied`]; an unfinished copy (its snapshot still at revision 1, the
/// source's snapshot, and a log that is a prefix of the source's: an earlier run stopped
/// before the copy's last save) is removed and copied again ([`CopyReport::recopied`]);
/// any other (different, or unreadable) is refused with
/// [`StoreError::AlreadyExistsDiffering`] naming it and what differs, and nothing is written.
/// Each source session is copied under its writer lock, so a
/// live writer cannot change it half-way. Sessions are written in batches
/// ([`Store::create_sessions`], one durable point per batch). When a copy fails (or does not
/// verify), every session of its batch is removed from the target again and the error is
/// returned; the batches written before it stay.
/// A source log whose oldest events were removed by retention (it starts at a seq above 1) is
/// copied as retained, from that seq on, and verified over that part
/// ([`SessionCopy::trimmed`]); the target creates such a log through
/// [`Store::create_sessions`] (a store that cannot refuses with `InvalidArgument`).
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
    let mut ids: Vec<RecordId> = Vec::new();
    // One page: the file store lists by reading its whole directory (and cache) whatever the
    // page size, so pages of 500 cost a full listing each (20 of them for 10,000 sessions).
    let mut query = ListQuery {
        closed: ClosedFilter::Any,
        limit: None,
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
    // An empty target (the usual first run) holds none of them: one listing says so, instead
    // of a lookup per session. Otherwise each is looked up, a few at a time: one round trip
    // each, and 10,000 of them in a row would be a noticeable part of a migration.
    let target = to
        .list(&ListQuery {
            closed: ClosedFilter::Any,
            limit: Some(1),
            ..ListQuery::default()
        })
        .await?;
    let target_empty = target.sessions.is_empty() && target.skipped.is_empty();
    let lookups: &[RecordId] = if target_empty { &[] } else { &ids };
    let mut present = futures::stream::iter(lookups)
        .map(|id| async move { (id, to.load(id).await) })
        .buffered(COPY_CONCURRENCY);
    let mut taken = std::collections::HashSet::new();
    while let Some((id, found)) = present.next().await {
        match found {
            Err(StoreError::NotFound(_)) => {}
            // Present but unreadable is still present: never overwrite it.
            Ok(_) | Err(StoreError::Corrupt { .. }) | Err(StoreError::Invalid(_)) => {
                taken.insert(id.clone());
            }
            Err(e) => return Err(e),
        }
    }
    drop(present);
    progress.begin(ids.len() as u64);
    // Every id the target already holds is checked before anything is written: an identical
    // copy (an earlier run, interrupted or followed by new sessions) is kept and reported; any
    // other stops the migration here, with the target untouched.
    let mut checks = futures::stream::iter(ids.iter().filter(|id| taken.contains(*id)))
        .map(|id| rerun::held(from, to, id))
        .buffered(COPY_CONCURRENCY);
    let mut unfinished = Vec::new();
    while let Some(checked) = checks.next().await {
        match checked? {
            rerun::Held::Copied(copy) => {
                progress.advance(copy.acpx_record_id.as_str());
                report.already_copied.push(copy);
            }
            rerun::Held::Unfinished(id) => unfinished.push(id),
        }
    }
    drop(checks);
    // Every check passed: the unfinished copies are removed, and copied again with the rest.
    rerun::remove_unfinished(from, to, &unfinished).await?;
    for id in unfinished {
        taken.remove(&id);
        report.recopied.push(id);
    }
    ids.retain(|id| !taken.contains(id));
    // The source is taken BATCH_SESSIONS sessions at a time: their writer locks at once
    // (`lock_many`, held until their copies are verified), then each read a few at a time,
    // gathered into batches and written with one `create_sessions` call per batch: one durable
    // point for many sessions instead of one each, which is what a copy of many small sessions
    // spends its time on. A session whose log does not fit in one page is copied alone, page by
    // page ([`copy_one`]). Batches are verified in list order, so the report keeps it.
    //
    // Three stages overlap: while a chunk is locked and read, the batch read before it is
    // written, and the batch written before that is read back and verified. Writing a batch
    // is mostly the target's durable point (an fsync), which the other two keep the cores busy
    // through; a copy of many small sessions was bound by writing and verifying one after the
    // other (docs/BENCHMARKS.md § Migrate: write and verify overlap). After a failure nothing
    // more is read or written: a batch written but not verified yet is verified (and kept) when
    // the failure is elsewhere, and removed when it came after a batch that failed to verify;
    // what was read ahead is dropped (reading changes nothing).
    let mut behind: Option<WriteBehind> = None;
    let mut unverified: Option<Unverified> = None;
    for chunk in ids.chunks(BATCH_SESSIONS) {
        let write = write_and_verify(
            from,
            to,
            behind.take(),
            unverified.take(),
            &mut report,
            progress,
        );
        // This group's locks are taken meanwhile too: a session held by a live writer delays
        // only the reads of its own group, not the writes of the groups before.
        let lock_and_read = async {
            let locks = from.lock_many(chunk, SOURCE_LOCK_WAIT).await?;
            read_ahead(from, chunk).await.map(|ahead| (locks, ahead))
        };
        let (written, ahead) = futures::future::join(write, lock_and_read).await;
        unverified = written?;
        let (locks, (ahead, read)) = match ahead {
            Ok(ahead) => ahead,
            Err(e) => {
                verify_batch(from, to, unverified.take(), &mut report, progress).await?;
                return Err(e);
            }
        };
        let rest = read_sources(from, &chunk[read..]);
        let mut reads = Box::pin(futures::stream::iter(ahead.into_iter().map(Ok)).chain(rest));
        let mut batch: Vec<SourceSession> = Vec::new();
        let mut batch_events = 0usize;
        while let Some(read) = reads.next().await {
            // (The batch pending verification is verified by the item read ahead that stopped
            // the read-ahead, before any later read; a failed read still leaves it verified.)
            let read = match read {
                Ok(read) => read,
                Err(e) => {
                    verify_batch(from, to, unverified.take(), &mut report, progress).await?;
                    return Err(e);
                }
            };
            match read {
                Read::Small(session) => {
                    batch_events += session.data.events.len();
                    batch.push(*session);
                    if batch_events >= BATCH_EVENTS {
                        verify_batch(from, to, unverified.take(), &mut report, progress).await?;
                        let full = std::mem::take(&mut batch);
                        write_batch(from, to, full, &mut report, progress).await?;
                        batch_events = 0;
                    }
                }
                Read::Large(id) => {
                    verify_batch(from, to, unverified.take(), &mut report, progress).await?;
                    let before = std::mem::take(&mut batch);
                    write_batch(from, to, before, &mut report, progress).await?;
                    batch_events = 0;
                    let copy = copy_one(from, to, &id).await?;
                    progress.advance(copy.acpx_record_id.as_str());
                    report.sessions.push(copy);
                }
            }
        }
        drop(reads);
        behind = Some(WriteBehind { batch, locks });
    }
    let last = write_and_verify(from, to, behind, unverified, &mut report, progress).await?;
    verify_batch(from, to, last, &mut report, progress).await?;
    Ok(report)
}

/// Reads the sessions of `chunk` from its start, in order, while the previous chunk's batch is
/// written: up to the first session copied alone or until [`BATCH_EVENTS`] events are held
/// (what the write-behind batch may also hold, so memory stays within twice one batch, plus
/// the groups in flight: [`GROUPS_AT_ONCE`]). Groups read beyond where it stops are dropped
/// and read again by the caller (at most two groups of a chunk of [`BATCH_SESSIONS`]).
/// Returns what was read and how many sessions of `chunk` that covers.
async fn read_ahead(from: &dyn Store, chunk: &[RecordId]) -> StoreResult<(Vec<Read>, usize)> {
    let mut reads = Box::pin(read_sources(from, chunk));
    let mut ahead = Vec::new();
    let mut events = 0usize;
    while let Some(read) = reads.next().await {
        let read = read?;
        let stop = match &read {
            Read::Small(session) => {
                events += session.data.events.len();
                events >= BATCH_EVENTS
            }
            Read::Large(_) => true,
        };
        ahead.push(read);
        if stop {
            break;
        }
    }
    let read = ahead.len();
    Ok((ahead, read))
}

/// Sessions written per [`Store::create_sessions`] call.
const BATCH_SESSIONS: usize = 256;
/// A batch is written once its sessions hold this many events (bounds the memory it holds).
const BATCH_EVENTS: usize = 50_000;

/// A source session read whole (under its writer lock, which the caller holds), with its
/// figures.
struct SourceSession {
    side: Side,
    data: NewSessionData,
}

/// What [`read_sources`] found of one session.
enum Read {
    /// The whole session, ready for a batch.
    Small(Box<SourceSession>),
    /// A log longer than one page: copied alone by [`copy_one`].
    Large(RecordId),
}

fn differs(from: &dyn Store, to: &dyn Store, id: &RecordId, what: &str) -> StoreError {
    StoreError::Corrupt {
        location: format!(
            "the copy of session {id} in the {} store",
            to.backend_name()
        ),
        line: None,
        reason: format!(
            "{what} differs from the {} source; the copy was removed again",
            from.backend_name()
        ),
    }
}

/// Copies session `id` (the caller holds its source writer lock) and verifies the copy; a copy that fails
/// or does not verify is removed from `to` again.
async fn copy_one(from: &dyn Store, to: &dyn Store, id: &RecordId) -> StoreResult<SessionCopy> {
    let mut created = false;
    let checked = match copy_session(from, to, id, &mut created).await {
        Ok(source) => match verify_side(to, id).await {
            Ok(target) => match source.difference(&target) {
                None => Ok(source),
                Some(what) => Err(differs(from, to, id, &what)),
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
    Ok(source.copy_of(id.clone()))
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

    /// Creates `record` with the first events of a log retention trimmed (`first` starts
    /// above seq 1) through [`Store::create_sessions`], which is the only way to start a new
    /// log at a later seq. [`NewSessionWriter::append`] then continues the log after `first`.
    pub async fn create_retained(
        store: &'s dyn Store,
        record: SessionRecord,
        first: Vec<EventEnvelope>,
    ) -> StoreResult<Self> {
        let id = record.acpx_record_id.clone();
        let mut stored = store
            .create_sessions(vec![NewSessionData {
                record,
                events: first,
            }])
            .await?;
        let record = stored.pop().ok_or_else(|| StoreError::Backend {
            backend: store.backend_name(),
            message: format!("creating session {id} returned no snapshot"),
        })?;
        let writer = match store.lock(&id, NEW_SESSION_LOCK_TIMEOUT).await {
            Ok(writer) => writer,
            Err(e) => {
                if let Err(cleanup) = store.delete(&id).await {
                    report_cleanup_failure(&id, &cleanup);
                }
                return Err(e);
            }
        };
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
    fn copy_of(&self, id: RecordId) -> SessionCopy {
        SessionCopy {
            acpx_record_id: id,
            events: self.events,
            first_seq: self.first_seq,
            last_seq: self.last_seq,
            events_sha256: hex(&self.events_digest),
            snapshot_sha256: hex(&self.snapshot_digest),
            trimmed: self.first_seq > 1,
        }
    }

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
    let mut record = from.load(id).await?;
    let snapshot_digest = snapshot_digest(&mut record)?;
    let mut query = page_query(1);
    let mut page = from.read_events(id, &query).await?;
    // A log retention trimmed (it starts above seq 1) is created with its first event through
    // `create_sessions`, the one way to start a new log at a later seq; the rest continues it
    // through `append`, as for any log.
    let (mut writer, mut written) = match page.events.first().filter(|e| e.seq > 1) {
        Some(first) => {
            let first = vec![first.clone()];
            (
                NewSessionWriter::create_retained(to, record, first).await?,
                1,
            )
        }
        None => (NewSessionWriter::create(to, record).await?, 0),
    };
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
        writer
            .append(page.events.get(written..).unwrap_or_default())
            .await?;
        written = 0;
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
    verify_side_and_record(store, id)
        .await
        .map(|(side, _)| side)
}

/// [`verify_side`], with the snapshot it read (a rerun's check also looks at its revision
/// and recorded log state).
async fn verify_side_and_record(
    store: &dyn Store,
    id: &RecordId,
) -> StoreResult<(Side, SessionRecord)> {
    let mut record = store.load(id).await?;
    let mut query = page_query(1);
    let mut page = store.read_events(id, &query).await?;
    let mut hasher = Sha256::new();
    let mut events = 0u64;
    let mut first_seq = None;
    let last_seq = loop {
        hash_events(&mut hasher, &page.events);
        events += page.events.len() as u64;
        if first_seq.is_none() {
            first_seq = page.events.first().map(|e| e.seq);
        }
        match page.next_seq {
            Some(next) => {
                query.from_seq = next;
                page = store.read_events(id, &query).await?;
            }
            None => break page.last_seq,
        }
    };
    let side = Side {
        events,
        first_seq: first_seq.unwrap_or(0),
        last_seq,
        events_digest: hasher.finalize().into(),
        snapshot_digest: snapshot_digest(&mut record)?,
    };
    Ok((side, record))
}

fn page_query(from_seq: u64) -> EventQuery {
    EventQuery {
        from_seq,
        limit: Some(EVENT_PAGE),
        max_bytes: Some(crate::PAGE_BYTES),
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

/// SHA-256 of the snapshot with the store-owned fields (`revision`, `acpx.event_log`) set to
/// fixed values (0 and the empty log's state), put back before it returns: compact JSON written
/// straight into the hash. It built a tree of values first, then its text, then dropped both:
/// a tenth of a migration's CPU for small sessions went to that (docs/BENCHMARKS.md § Migrate
/// without a tree of values).
fn snapshot_digest(record: &mut SessionRecord) -> StoreResult<[u8; 32]> {
    let revision = std::mem::take(&mut record.revision);
    let event_log = std::mem::take(&mut record.acpx.event_log);
    let mut hasher = Sha256::new();
    // serde_json writes a piece at a time (a bracket, a key): gathered 8 KiB at a time.
    let mut out = std::io::BufWriter::with_capacity(8 << 10, HashWriter(&mut hasher));
    let written = serde_json::to_writer(&mut out, &*record)
        .map_err(std::io::Error::from)
        .and_then(|()| std::io::Write::flush(&mut out));
    drop(out);
    record.revision = revision;
    record.acpx.event_log = event_log;
    // What can fail is reading back a part of the thread kept in a spill file.
    written.map_err(|e| {
        StoreError::io(
            format_args!(
                "the snapshot of session {} (to compare it)",
                record.acpx_record_id
            ),
            e,
        )
    })?;
    Ok(hasher.finalize().into())
}

/// An [`std::io::Write`] into a SHA-256.
struct HashWriter<'a>(&'a mut Sha256);

impl std::io::Write for HashWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

mod batches;
mod reads;
mod rerun;

use batches::{verify_batch, write_and_verify, write_batch, Unverified, WriteBehind};
use reads::{read_sources, verify_group, GROUPS_AT_ONCE, READ_GROUP};

#[cfg(test)]
mod write_behind_tests;

#[cfg(test)]
mod rerun_tests;

#[cfg(test)]
mod tests;
