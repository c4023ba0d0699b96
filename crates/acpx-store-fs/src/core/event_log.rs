//! The event log of [`FsCore`]: appends (buffered, written or fsynced), the write-out of
//! buffered events, reads, the log state and torn-tail repair.

use std::fs;
use std::io::{self, Write};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use acpx_model::{
    check_append_batch, Durability, EventEnvelope, EventLogState, EventPage, EventQuery, EventType,
    RecordId, SessionLock, StoreError, StoreResult, Timestamp, TornTail,
};

use super::{lock_slot, FsCore, Slot, SlotState};
use crate::failpoint::{self};
use crate::fsutil::{io_err, stat_opt};
use crate::log::{self, LogWriter};

/// Events appended with [`Durability::None`] are written out once this many bytes are pending.
pub const PENDING_LIMIT: usize = 64 * 1024;

/// A turn's end rotates early only while at most this many older segments exist. Every
/// reader opens all of a log's segments, so this bounds the files a read holds (and a
/// rotation renames) at about this many plus one per 64 MiB: beyond it, the active segment
/// rotates at the size limit only, and retention drops the small segments as full ones take
/// their place in the window.
pub const TURN_END_ROTATE_MAX_OLDER: u32 = 32;

/// Cached open active segments beyond this many are closed (those of sessions not locked).
const MAX_OPEN_WRITERS: usize = 256;

/// A serialized event batch, ready to be written, with the seq checks of
/// [`check_append_batch`] split into the part that needs the log's last seq and the part that
/// does not (so that serialization happens before the session is locked).
#[derive(Debug)]
pub(crate) struct PreparedBatch {
    first_seq: u64,
    count: usize,
    first_id_ok: bool,
    /// `check_append_batch` against the last seq the batch itself implies (first seq − 1).
    internal: Option<StoreError>,
    last_seq: u64,
    /// Whether the batch ends a turn (holds `prompt_done` or `prompt_error`): the active
    /// segment may then rotate early ([`crate::FsStoreOptions::turn_end_rotate_bytes`]).
    ends_turn: bool,
    bytes: Vec<u8>,
}

impl PreparedBatch {
    pub fn new(id: &RecordId, events: &[EventEnvelope]) -> Self {
        let mut bytes = Vec::with_capacity(events.len() * 400);
        for e in events {
            e.write_ndjson_line(&mut bytes);
        }
        let internal = match events.first() {
            None => Ok(()),
            // No last seq can precede 0; only the id check of event 0 can matter then.
            Some(e) if e.seq == 0 => match check_append_batch(id, 0, &events[..1]) {
                Err(err @ StoreError::InvalidArgument(_)) => Err(err),
                _ => Ok(()),
            },
            Some(e) => check_append_batch(id, e.seq - 1, events),
        };
        PreparedBatch {
            first_seq: events.first().map_or(0, |e| e.seq),
            count: events.len(),
            first_id_ok: events.first().is_none_or(|e| e.acpx_record_id == *id),
            internal: internal.err(),
            last_seq: events.last().map_or(0, |e| e.seq),
            ends_turn: events
                .iter()
                .any(|e| matches!(e.event_type, EventType::PromptDone | EventType::PromptError)),
            bytes,
        }
    }

    /// Exactly `check_append_batch(id, last, events)`: event 0 is checked first (id, then seq
    /// against `last`), then the rest, whose checks do not depend on `last` once event 0 fits.
    fn check(&mut self, id: &RecordId, last: u64) -> StoreResult<()> {
        if self.count == 0 {
            return Ok(());
        }
        if !self.first_id_ok || last.checked_add(1) == Some(self.first_seq) {
            return self.internal.take().map_or(Ok(()), Err);
        }
        Err(StoreError::SeqMismatch {
            id: id.clone(),
            last,
            got: self.first_seq,
        })
    }
}

impl FsCore {
    /// Appends a batch under the held writer lock `writer` (see `Store::append`).
    #[cfg(any(test, feature = "testing"))]
    pub fn append(
        &self,
        writer: &SessionLock,
        events: &[EventEnvelope],
        durability: Durability,
    ) -> StoreResult<EventLogState> {
        self.check_writer(writer)?;
        let id = writer.id();
        self.append_prepared(id, PreparedBatch::new(id, events), durability)
    }

    /// Refuses a writer lock this store (or a clone) did not issue.
    pub(crate) fn check_writer(&self, writer: &SessionLock) -> StoreResult<()> {
        writer.check_issuer(self.issuer, "fs")
    }

    /// Whether this store (or a clone) holds the writer lock of `id` right now. Never waits: a
    /// session busy in another thread answers `false`.
    pub(crate) fn holds_lock(&self, id: &RecordId) -> bool {
        self.existing_slot(id)
            .and_then(|slot| slot.try_lock().ok().map(|st| st.held > 0))
            .unwrap_or(false)
    }

    /// The non-blocking part of a [`Durability::None`] append: when this store holds the
    /// session's lock, its writer is open and validated, and the batch fits in the buffer, the
    /// append is a copy into memory and needs no I/O, so it can run on an async worker.
    /// `None` means the blocking path must do it.
    pub(crate) fn try_append_buffered(
        &self,
        id: &RecordId,
        batch: &mut PreparedBatch,
    ) -> Option<StoreResult<EventLogState>> {
        let slot = self.existing_slot(id)?;
        // Never wait here: another thread may be in the middle of an fsync for this session.
        let mut st = slot.try_lock().ok()?;
        let ready = st.held > 0 && st.validated && st.snapshot_present == Some(true);
        let w = st.writer.as_mut().filter(|_| ready)?;
        if w.pending.len() + batch.bytes.len() > PENDING_LIMIT {
            return None;
        }
        if let Err(e) = batch.check(id, w.last_seq) {
            return Some(Err(e));
        }
        if batch.count > 0 {
            w.pending.extend_from_slice(&batch.bytes);
            w.last_seq = batch.last_seq;
            w.turn_ended |= batch.ends_turn;
            st.last_write_at = Some(Timestamp::now());
        }
        Some(Ok(self.log_state(id, &st)))
    }

    /// Appends a serialized batch. Only called with a writer lock of this store checked by
    /// [`FsCore::check_writer`]: the session's slot counts it as held, so no lock is taken here.
    pub(crate) fn append_prepared(
        &self,
        id: &RecordId,
        batch: PreparedBatch,
        durability: Durability,
    ) -> StoreResult<EventLogState> {
        self.append_to(id, batch, durability, None)
    }

    /// [`FsCore::append_prepared`], or with `staged` the append of a stage (`core::stage`):
    /// the session's snapshot is then its tombstone, and an empty log starts after seq
    /// `staged` (the first batch of a log retention trimmed starts above seq 1).
    pub(super) fn append_to(
        &self,
        id: &RecordId,
        mut batch: PreparedBatch,
        durability: Durability,
        staged: Option<u64>,
    ) -> StoreResult<EventLogState> {
        let slot = self.slot(id);
        let mut guard = lock_slot(&slot);
        let st = &mut *guard;
        if st.held == 0 {
            // Unreachable while the checked `SessionLock` is alive; refuse rather than write
            // without the lock.
            return Err(StoreError::InvalidArgument(format!(
                "the writer lock of session {id} is not held by this fs store"
            )));
        }
        self.ensure_valid(id, st)?;
        if staged.is_none() && !self.snapshot_present(id, st)? {
            // A prompt still running must not recreate a deleted session.
            return Err(StoreError::NotFound(id.clone()));
        }
        let w = self.writer(id, st)?;
        if let Some(before) = staged {
            if w.last_seq == 0 && w.len == 0 && w.pending.is_empty() && w.segment_count <= 1 {
                w.last_seq = before;
            }
        }
        let last = w.last_seq;
        batch.check(id, last)?;
        if batch.count == 0 {
            return Ok(self.log_state(id, st));
        }
        let now = Timestamp::now();
        let Some(w) = st.writer.as_mut() else {
            return Err(self.writer_gone(id));
        };
        w.last_seq = batch.last_seq;
        w.turn_ended |= batch.ends_turn;
        st.last_write_at = Some(now);
        if durability == Durability::None {
            w.pending.extend_from_slice(&batch.bytes);
            if w.pending.len() > PENDING_LIMIT {
                self.write_pending(id, st)?;
            }
        } else if w.pending.is_empty() {
            self.write_out(id, st, &batch.bytes, durability == Durability::Fsync)?;
        } else {
            let mut buf = std::mem::take(&mut w.pending);
            buf.extend_from_slice(&batch.bytes);
            self.write_out(id, st, &buf, durability == Durability::Fsync)?;
        }
        Ok(self.log_state(id, st))
    }

    pub(super) fn writer_gone(&self, id: &RecordId) -> StoreError {
        StoreError::Backend {
            backend: "fs",
            message: format!("the event log writer of session {id} was closed unexpectedly"),
        }
    }

    /// The open writer of `id`, opening it (and setting a torn tail aside) if needed.
    pub(super) fn writer<'a>(
        &self,
        id: &RecordId,
        st: &'a mut SlotState,
    ) -> StoreResult<&'a mut LogWriter> {
        if st.writer.is_none() {
            let (w, torn) = log::open_writer(&self.layout, id, self.opts.max_segments)?;
            if let Some(t) = torn {
                tracing::warn!(session = %id, moved_to = %t.location, bytes = t.bytes, "set aside a torn event-log tail before appending");
            }
            self.open_writers.fetch_add(1, Ordering::Relaxed);
            st.writer = Some(w);
            self.evict_writers(id);
        }
        st.writer.as_mut().ok_or_else(|| self.writer_gone(id))
    }

    /// Closes cached writers of sessions nobody in this process is using, when too many are
    /// open (each holds a file descriptor).
    pub(super) fn evict_writers(&self, current: &RecordId) {
        if self.open_writers.load(Ordering::Relaxed) <= MAX_OPEN_WRITERS {
            return;
        }
        let slots: Vec<(RecordId, Arc<Slot>)> = {
            let map = self.slots.lock().unwrap_or_else(|p| p.into_inner());
            map.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
        };
        let mut open = 0;
        for (id, slot) in slots {
            if id == *current {
                continue;
            }
            let Ok(mut st) = slot.try_lock() else {
                continue;
            };
            if st.writer.is_some() {
                if st.held == 0 {
                    st.writer = None;
                } else {
                    open += 1;
                }
            }
        }
        self.open_writers.store(open + 1, Ordering::Relaxed);
    }

    /// Writes `buf` with one write call, all or nothing: on failure the file is cut back to
    /// its length before the write (see [`undo_partial_write`]), the writer is dropped (the
    /// next append re-derives the last seq from the file) and the error is remembered.
    pub(super) fn write_out(
        &self,
        id: &RecordId,
        st: &mut SlotState,
        buf: &[u8],
        fsync: bool,
    ) -> StoreResult<()> {
        let path = self.layout.segment(id, 0);
        let Some(w) = st.writer.as_mut() else {
            return Err(self.writer_gone(id));
        };
        if failpoint::armed("append.after_partial_write") {
            let _ = w.file.write_all(&buf[..buf.len() / 2]);
            std::process::abort();
        }
        let old_len = w.len;
        let result =
            w.file
                .write_all(buf)
                .and_then(|()| if fsync { w.file.sync_data() } else { Ok(()) });
        if let Err(e) = result {
            // A full disk (ENOSPC), a file-size limit (EFBIG) or EIO can stop the write
            // part-way, and the part written may end exactly on a line boundary: whole events
            // the caller is about to be told failed. They must not stay in the log.
            let note = match undo_partial_write(&w.file, old_len, buf.len() as u64) {
                Ok(()) => "the write was undone: the log holds none of these events".to_owned(),
                Err(undo) => format!(
                    "undoing the partial write also failed ({undo}): whole events of this \
                     append may remain in the log (an incomplete last line is set aside when \
                     the log is next opened)"
                ),
            };
            tracing::error!(session = %id, file = %path.display(), error = %e, "event log append failed; {note}");
            let err = io_err(&path, io::Error::new(e.kind(), format!("{e}; {note}")));
            st.writer = None;
            st.last_write_error = Some(err.to_string());
            return Err(err);
        }
        w.len += buf.len() as u64;
        st.last_write_error = None;
        // Everything pending is written with this call, so a turn end it held is now on disk.
        let turn_ended = std::mem::take(&mut w.turn_ended);
        let turn_end_rotate = turn_ended
            && self.opts.turn_end_rotate_bytes > 0
            && w.len >= self.opts.turn_end_rotate_bytes
            && w.segment_count.saturating_sub(1) < TURN_END_ROTATE_MAX_OLDER;
        if w.len > self.opts.max_segment_bytes || turn_end_rotate {
            if let Err(e) = crate::log::rotate::rotate(
                &self.layout,
                id,
                self.opts.max_segments,
                self.opts.max_segment_bytes,
                self.opts.keep_rotated_segments,
                w,
            ) {
                // The events are written; only the rotation failed. Report it without failing
                // the append, and re-derive everything from the files next time.
                tracing::error!(session = %id, error = %e, "event log rotation failed");
                st.last_write_error = Some(format!("rotation failed: {e}"));
                st.writer = None;
            }
        }
        Ok(())
    }

    pub(super) fn write_pending(&self, id: &RecordId, st: &mut SlotState) -> StoreResult<()> {
        let Some(w) = st.writer.as_mut() else {
            return Ok(());
        };
        if w.pending.is_empty() {
            return Ok(());
        }
        let buf = std::mem::take(&mut w.pending);
        self.write_out(id, st, &buf, false)
    }

    pub(super) fn log_state(&self, id: &RecordId, st: &SlotState) -> EventLogState {
        let (last_seq, segment_count) = st
            .writer
            .as_ref()
            .map_or((0, 0), |w| (w.last_seq, w.segment_count));
        EventLogState {
            format_version: 1,
            active_path: self.layout.segment(id, 0).display().to_string(),
            segment_count,
            max_segment_bytes: self.opts.max_segment_bytes,
            max_segments: self.opts.max_segments,
            last_seq,
            last_write_at: st.last_write_at,
            last_write_error: st.last_write_error.clone(),
        }
    }

    /// Writes out events appended with [`Durability::None`].
    pub fn flush(&self, id: &RecordId) -> StoreResult<()> {
        if let Some(slot) = self.existing_slot(id) {
            let mut st = lock_slot(&slot);
            if st.writer.as_ref().is_some_and(|w| !w.pending.is_empty()) {
                return self.write_pending(id, &mut st);
            }
        }
        self.require_snapshot(id)
    }

    /// `NotFound` unless the session exists: its snapshot, or else its log without a
    /// tombstone (a damaged session, whose log is what `fsck --repair` rebuilds it from).
    pub(super) fn require_snapshot(&self, id: &RecordId) -> StoreResult<()> {
        let path = self.layout.snapshot(id);
        match stat_opt(&path).map_err(|e| io_err(&path, e))? {
            Some(_) => Ok(()),
            None if self.snapshot_missing_log_left(id)? => Ok(()),
            None => Err(StoreError::NotFound(id.clone())),
        }
    }

    /// Reads events (see `Store::read_events`). Pending events of this process are written
    /// out first, so a reader in this process sees everything that was acknowledged.
    pub fn read_events(&self, id: &RecordId, query: &EventQuery) -> StoreResult<EventPage> {
        if let Some(slot) = self.existing_slot(id) {
            let mut st = lock_slot(&slot);
            self.write_pending(id, &mut st)?;
        }
        self.require_snapshot(id)?;
        log::read_events(&self.layout, id, query, self.opts.max_segments)
    }

    /// The state of the log: this process's writer while it holds the lock, else what the
    /// files show.
    pub fn event_log_state(&self, id: &RecordId) -> StoreResult<EventLogState> {
        let (last_write_at, last_write_error) = match self.existing_slot(id) {
            Some(slot) => {
                let st = lock_slot(&slot);
                if st.held > 0 && st.validated && st.writer.is_some() {
                    return Ok(self.log_state(id, &st));
                }
                (st.last_write_at, st.last_write_error.clone())
            }
            None => (None, None),
        };
        self.require_snapshot(id)?;
        let seen = log::inspect(&self.layout, id, self.opts.max_segments)?;
        Ok(EventLogState {
            format_version: 1,
            active_path: self.layout.segment(id, 0).display().to_string(),
            segment_count: seen.segment_count,
            max_segment_bytes: self.opts.max_segment_bytes,
            max_segments: self.opts.max_segments,
            last_seq: seen.last_seq,
            last_write_at: last_write_at.or_else(|| seen.active_mtime.and_then(timestamp_of)),
            last_write_error,
        })
    }

    /// Moves an incomplete last line of the active log aside (see
    /// [`crate::FsStore::set_aside_torn_tail`]).
    pub fn set_aside_torn_tail(&self, id: &RecordId) -> StoreResult<Option<TornTail>> {
        self.with_write(id, |core, st| {
            core.ensure_valid(id, st)?;
            // An open writer only ever leaves complete lines behind.
            if st.writer.is_some() {
                return Ok(None);
            }
            log::set_aside_active(&core.layout, id)
        })
    }
}

/// Cuts the active segment back to `old_len` after a failed write of `attempted` bytes that
/// started there, then makes that durable (best effort: the same disk may fail the sync, and
/// the bytes cut were never acknowledged, so a failed sync only leaves them to a machine
/// crash). The file must be `old_len..=old_len + attempted` bytes long: anything else means
/// the writer's view is stale, and cutting could destroy another writer's events.
fn undo_partial_write(file: &fs::File, old_len: u64, attempted: u64) -> io::Result<()> {
    let now = file.metadata()?.len();
    if now == old_len {
        return Ok(());
    }
    if now < old_len || now - old_len > attempted {
        return Err(io::Error::other(format!(
            "the file is {now} bytes long, not between {old_len} and {}; left as it is",
            old_len + attempted
        )));
    }
    file.set_len(old_len)?;
    if let Err(e) = file.sync_data() {
        tracing::warn!(error = %e, "could not sync the event log after undoing a partial write");
    }
    Ok(())
}

fn timestamp_of(t: std::time::SystemTime) -> Option<Timestamp> {
    let d = t.duration_since(std::time::UNIX_EPOCH).ok()?;
    Timestamp::from_millis(i64::try_from(d.as_millis()).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use acpx_model::{EventContext, EventPayload, EventSource, EventStream};

    fn ev(id: &RecordId, seq: u64) -> EventEnvelope {
        let ctx = EventContext {
            acpx_record_id: id,
            acp_session_id: "acp",
            request_id: None,
            stream: EventStream::Prompt,
            source: EventSource::Runtime,
        };
        let payload = EventPayload::Unknown {
            event_type: "t".into(),
            payload: serde_json::Value::Null,
        };
        EventEnvelope::new(&ctx, seq, Timestamp::now(), payload)
    }

    #[test]
    fn prepared_batch_check_equals_check_append_batch() {
        let a = RecordId::parse("a").unwrap();
        let b = RecordId::parse("b").unwrap();
        let batches: Vec<Vec<EventEnvelope>> = vec![
            vec![],
            vec![ev(&a, 1)],
            vec![ev(&a, 0)],
            vec![ev(&b, 0)],
            vec![ev(&a, 5), ev(&a, 6)],
            vec![ev(&a, 5), ev(&a, 7)],
            vec![ev(&a, 5), ev(&b, 6)],
            vec![ev(&b, 5), ev(&a, 6)],
            vec![ev(&a, 4), ev(&b, 9)],
            vec![ev(&a, 0), ev(&a, 1)],
            vec![ev(&a, 1), ev(&a, 1)],
        ];
        for batch in &batches {
            for last in [0u64, 3, 4, 5, 6] {
                let want = check_append_batch(&a, last, batch).map_err(|e| e.to_string());
                let got = PreparedBatch::new(&a, batch)
                    .check(&a, last)
                    .map_err(|e| e.to_string());
                let seqs: Vec<u64> = batch.iter().map(|e| e.seq).collect();
                assert_eq!(got, want, "batch {seqs:?}, last {last}");
            }
        }
    }
}
