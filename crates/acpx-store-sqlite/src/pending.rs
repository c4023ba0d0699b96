//! Appends with [`Durability::None`], buffered in the process and committed together.
//!
//! Every commit costs a WAL write of every page it changed: the last leaf of the events'
//! primary key and of each of their three indexes, the log row, the interior pages above
//! them, each written whole (4 KiB) however little of it changed. For a stream of batches of
//! 64 events (about 19 KiB of rows) that write was most of an append's time (measured with
//! `perf`: `walWriteOneFrame` and the kernel's write path under it). `Durability::None`
//! promises that much less (the batch may sit in an in-process buffer until the session's lock
//! is released, the buffer fills, or `Store::flush`: see `acpx_model::Durability`), which is
//! what the file store does too: such batches are kept here and committed in one transaction
//! once [`PENDING_LIMIT`] bytes of them are waiting, when an append with another durability
//! comes (in its transaction), when the session's lock guard is dropped, on `flush`, and
//! before any other call of this store touches the session (reads included, so this process
//! reads what it appended).
//!
//! A buffer exists only while this store holds the session's writer lock: it keeps the log
//! row as last committed, so that a batch is checked against the buffered last seq without a
//! query. When the commit of a buffer fails, its events are lost, like the file store's
//! pending bytes whose write fails; the error (returned, and reported as the session's
//! `last_write_error`) says how many.

use std::collections::HashMap;
use std::sync::MutexGuard;

use acpx_model::{Durability, EventLogState, RecordId, StoreError, StoreResult, Timestamp};

use crate::events::{LogRow, SeqPrecheck};
use crate::rows::{ts_text, EventBatch};
use crate::Inner;

/// Bytes of NDJSON lines (the retention unit) buffered before they are committed: a commit
/// every ~850 events of ~300 bytes. 64 KiB (the file store's limit) and 1 MiB measured the
/// same within the noise of a shared machine (docs/BENCHMARKS.md); what is lost with the
/// process stays small.
pub(crate) const PENDING_LIMIT: i64 = 256 * 1024;

/// The buffered batches of one session, and its log as the buffer continues it.
pub(crate) struct Pending {
    /// The log row as committed.
    committed: LogRow,
    batches: Vec<EventBatch>,
    /// Bytes of the buffered events (NDJSON lines).
    bytes: i64,
    /// The last seq buffered (`committed.last_seq` when nothing is).
    last_seq: i64,
    /// When the last batch was accepted.
    last_write_at: Option<String>,
}

impl Pending {
    fn new(committed: LogRow) -> Self {
        Pending {
            last_seq: committed.last_seq,
            last_write_at: committed.last_write_at.clone(),
            committed,
            batches: Vec::new(),
            bytes: 0,
        }
    }

    fn events(&self) -> usize {
        self.batches.iter().map(|b| b.rows().len()).sum()
    }

    /// The log as it will be once the buffer is committed (before any retention trim).
    fn state(&self) -> LogRow {
        LogRow {
            key: self.committed.key,
            last_seq: self.last_seq,
            retained: self.committed.retained.saturating_add(self.bytes),
            last_write_at: self.last_write_at.clone(),
        }
    }
}

pub(crate) type PendingMap = HashMap<RecordId, Pending>;

impl Inner {
    /// The buffers. Lock order: this map, then the connection (never the other way round).
    pub(crate) fn pending(&self) -> MutexGuard<'_, PendingMap> {
        // Each entry is replaced whole: the map stays consistent even if a holder panicked.
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends a batch (see `Store::append`; the caller holds the session's writer lock).
    pub(crate) fn append(
        &self,
        id: &RecordId,
        precheck: SeqPrecheck,
        batch: EventBatch,
        durability: Durability,
    ) -> StoreResult<EventLogState> {
        let mut map = self.pending();
        let entry = map.remove(id);
        let buffered = durability == Durability::None;
        let log = match entry {
            Some(mut pending) => {
                // Checked against the buffered seq, before anything is committed: a refused
                // batch leaves the buffer as it was.
                if let Err(e) = precheck.check(id, u64::try_from(pending.last_seq).unwrap_or(0)) {
                    map.insert(id.clone(), pending);
                    return Err(e);
                }
                if buffered {
                    if let Some(end) = batch.rows().last() {
                        pending.last_seq = end.seq;
                        pending.bytes += batch.rows().iter().map(|r| r.bytes).sum::<i64>();
                        pending.last_write_at = Some(ts_text(&Timestamp::now()));
                        pending.batches.push(batch);
                    }
                    if pending.bytes < PENDING_LIMIT {
                        let state = pending.state();
                        map.insert(id.clone(), pending);
                        return self.log_state(id, state, None);
                    }
                    self.commit_buffer(id, &pending, None, false)?
                } else {
                    let fsync = durability == Durability::Fsync;
                    self.commit_buffer(id, &pending, Some((None, &batch)), fsync)?
                }
            }
            None => self.commit_events(
                id,
                &[],
                Some((Some(precheck), &batch)),
                durability == Durability::Fsync,
            )?,
        };
        if buffered {
            // The next batches of this stream are buffered, continuing this row.
            map.insert(id.clone(), Pending::new(log.clone()));
        }
        drop(map);
        self.log_state(id, log, None)
    }

    /// Commits a buffer, and `new` after it; the error of a failed commit names the buffered
    /// events it lost.
    fn commit_buffer(
        &self,
        id: &RecordId,
        pending: &Pending,
        new: Option<(Option<SeqPrecheck>, &EventBatch)>,
        fsync: bool,
    ) -> StoreResult<LogRow> {
        let lost = pending.events();
        self.commit_events(id, &pending.batches, new, fsync)
            .map_err(|e| match e {
                StoreError::Backend { backend, message } if lost > 0 => StoreError::Backend {
                    backend,
                    message: format!(
                        "{message}; the {lost} events appended to session {id} with durability \
                         `none` before this call, buffered until now, were not written"
                    ),
                },
                e => e,
            })
    }

    /// Commits the buffered events of `id`, if any, and forgets its buffer (the next append
    /// with `Durability::None` starts a new one from the committed log).
    pub(crate) fn commit_pending(&self, id: &RecordId) -> StoreResult<()> {
        let mut map = self.pending();
        let Some(pending) = map.remove(id) else {
            return Ok(());
        };
        if pending.batches.is_empty() {
            return Ok(());
        }
        self.commit_buffer(id, &pending, None, false).map(drop)
    }

    /// Commits every buffer (when the store is dropped: normally the lock guards, which keep
    /// the store alive, have committed them already).
    pub(crate) fn commit_all_pending(&self) {
        let ids: Vec<RecordId> = self.pending().keys().cloned().collect();
        for id in ids {
            if let Err(e) = self.commit_pending(&id) {
                tracing::error!(session = %id, error = %e, "could not write events appended with durability none");
            }
        }
    }
}
