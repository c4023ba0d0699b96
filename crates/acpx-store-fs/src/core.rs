//! [`FsCore`]: every operation of the file store as a plain blocking method.
//!
//! [`crate::FsStore`] runs these on tokio's blocking pool. They may sleep (waiting for a lock)
//! and fsync, so they must not be called directly on an async worker thread.

use std::collections::HashMap;
use std::fmt;
use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use acpx_model::{
    check_append_batch, list_order_key, normalize_cwd, Durability, EventEnvelope, EventLogState,
    EventPage, EventQuery, ListPage, ListQuery, LockGuard, LockIssuer, RecordId, SearchHit,
    SearchQuery, SessionLock, SessionRecord, StoreError, StoreResult, Timestamp, TornTail,
};

use crate::failpoint::{self, failpoint};
use crate::fsutil::{
    create_new_file, ensure_dir, fsync_dir, io_err, open_read, random_suffix, read_file,
    remove_if_exists, stat_opt, FileIdent,
};
use crate::index::{parse_snapshot, read_revision_prefix, reason, IndexCache, Listing};
use crate::layout::{classify, is_log_file_of, Entry, Layout};
use crate::log::{self, LogWriter};
use acpx_lock::FileLock;

/// Events appended with [`Durability::None`] are written out once this many bytes are pending.
pub const PENDING_LIMIT: usize = 64 * 1024;

/// Cached open active segments beyond this many are closed (those of sessions not locked).
const MAX_OPEN_WRITERS: usize = 256;

/// Tuning of an [`crate::FsStore`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsStoreOptions {
    /// The active event segment rotates once it is larger than this (default 64 MiB).
    pub max_segment_bytes: u64,
    /// Event segments kept, the active one included (default 5; at least 2, because after a
    /// rotation the last seq is read from the previous segment).
    pub max_segments: u32,
    /// How long a mutation by a caller that does not hold the session's writer lock waits for
    /// that lock before failing with [`StoreError::Locked`] (default 10 s).
    pub lock_timeout: Duration,
}

impl Default for FsStoreOptions {
    fn default() -> Self {
        FsStoreOptions {
            max_segment_bytes: acpx_model::session::DEFAULT_MAX_SEGMENT_BYTES,
            max_segments: acpx_model::session::DEFAULT_MAX_SEGMENTS,
            lock_timeout: Duration::from_secs(10),
        }
    }
}

/// What this process knows about one session. Guarded by a per-session mutex, which
/// serializes this process's access to the session's files.
#[derive(Debug, Default)]
struct SlotState {
    /// Live lock guards of this store for the session (normally 0 or 1).
    held: u32,
    /// Whether the caches below can be trusted without looking at the files: true from the
    /// first check after the flock was acquired until it is released.
    validated: bool,
    /// Whether the snapshot exists, when known under the current lock.
    snapshot_present: Option<bool>,
    /// Identity and revision of the snapshot this process last wrote or read.
    snap: Option<(FileIdent, u64)>,
    writer: Option<LogWriter>,
    last_write_at: Option<Timestamp>,
    last_write_error: Option<String>,
}

type Slot = Mutex<SlotState>;

fn lock_slot(slot: &Slot) -> MutexGuard<'_, SlotState> {
    // A panic while holding the mutex leaves the state structurally valid; the next flock
    // acquisition revalidates it against the files anyway.
    slot.lock().unwrap_or_else(|p| p.into_inner())
}

/// The blocking implementation of the file store. Shared through `Arc`.
pub struct FsCore {
    root: PathBuf,
    layout: Layout,
    opts: FsStoreOptions,
    slots: Mutex<HashMap<RecordId, Arc<Slot>>>,
    index: Mutex<IndexCache>,
    open_writers: AtomicUsize,
    /// The token of the session locks this store (and its clones) issue.
    issuer: LockIssuer,
    #[cfg(test)]
    pub(crate) snapshot_parses: AtomicUsize,
}

impl fmt::Debug for FsCore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FsCore")
            .field("root", &self.root)
            .field("options", &self.opts)
            .finish_non_exhaustive()
    }
}

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

/// A held session writer lock of the file store (the guard inside the
/// [`acpx_model::SessionLock`] that [`acpx_model::Store::lock`] returns). Dropping it writes
/// out buffered events and releases the lock.
pub struct FsLockGuard {
    core: Arc<FsCore>,
    id: RecordId,
    slot: Arc<Slot>,
    flock: Option<FileLock>,
}

impl fmt::Debug for FsLockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FsLockGuard")
            .field("id", &self.id)
            .field("lock_file", &self.core.layout.lock(&self.id))
            .finish()
    }
}

impl LockGuard for FsLockGuard {}

impl Drop for FsLockGuard {
    fn drop(&mut self) {
        let mut st = lock_slot(&self.slot);
        st.held = st.held.saturating_sub(1);
        if st.held == 0 {
            if let Some(flock) = self.flock.as_ref() {
                self.core.release(&self.id, &mut st, flock);
            }
        }
        // The flock goes while the slot mutex is still held, so no operation of this process
        // can observe `held == 0` with the lock still taken, or the reverse.
        drop(self.flock.take());
    }
}

impl FsCore {
    /// Opens (creating if needed, mode 0700) `<root>` and `<root>/sessions`, then removes
    /// stale temp files (see [`FsCore::cleanup_stale_temp_files`]).
    pub fn open(root: impl Into<PathBuf>, opts: FsStoreOptions) -> StoreResult<Self> {
        if opts.max_segments < 2 {
            // After a rotation the active segment is empty and the last seq is read from `.1`;
            // with one segment it would be gone, and the next writer would reuse seqs.
            return Err(StoreError::InvalidArgument(format!(
                "max_segments is {}; it must be at least 2 (the active segment and the one the \
                 last seq is read from after a rotation)",
                opts.max_segments
            )));
        }
        if opts.max_segment_bytes == 0 {
            return Err(StoreError::InvalidArgument(
                "max_segment_bytes must be at least 1".into(),
            ));
        }
        let root = root.into();
        let root = std::path::absolute(&root).map_err(|e| io_err(&root, e))?;
        let sessions = root.join("sessions");
        for dir in [&root, &sessions] {
            ensure_dir(dir).map_err(|e| io_err(dir, e))?;
        }
        let core = FsCore {
            root,
            layout: Layout { sessions },
            opts,
            slots: Mutex::new(HashMap::new()),
            index: Mutex::new(IndexCache::default()),
            open_writers: AtomicUsize::new(0),
            issuer: LockIssuer::unique(),
            #[cfg(test)]
            snapshot_parses: AtomicUsize::new(0),
        };
        if let Err(e) = core.cleanup_stale_temp_files() {
            // A read-only store is still readable: report, do not refuse to open.
            tracing::warn!(error = %e, "could not clean up stale temp files");
        }
        Ok(core)
    }

    /// The root directory (absolute).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The options the store was opened with.
    pub fn options(&self) -> &FsStoreOptions {
        &self.opts
    }

    /// `<root>/sessions`.
    pub fn sessions_dir(&self) -> &Path {
        self.layout.dir()
    }

    /// `<root>/sessions/<id>.json`.
    pub fn snapshot_path(&self, id: &RecordId) -> PathBuf {
        self.layout.snapshot(id)
    }

    /// `<root>/sessions/<id>.events.<n>.ndjson` (`n = 0`: the active `<id>.events.ndjson`).
    pub fn segment_path(&self, id: &RecordId, n: u32) -> PathBuf {
        self.layout.segment(id, n)
    }

    /// `<root>/sessions/<id>.lock`.
    pub fn lock_path(&self, id: &RecordId) -> PathBuf {
        self.layout.lock(id)
    }

    /// The slot of `id` if this process has touched the session (read paths use this so that
    /// reading unknown ids does not grow the map).
    fn existing_slot(&self, id: &RecordId) -> Option<Arc<Slot>> {
        let slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        slots.get(id).cloned()
    }

    fn slot(&self, id: &RecordId) -> Arc<Slot> {
        // Slots are never removed: two slots for one id would break the in-process exclusion.
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        slots.entry(id.clone()).or_default().clone()
    }

    // ----- locking -------------------------------------------------------------------------

    /// Runs `f` with exclusive write access to session `id`: under the lock guard this store
    /// already holds, or else under the flock taken for the duration of the call (waiting up
    /// to `lock_timeout`).
    fn with_write<T>(
        &self,
        id: &RecordId,
        f: impl FnOnce(&Self, &mut SlotState) -> StoreResult<T>,
    ) -> StoreResult<T> {
        let slot = self.slot(id);
        let lock_path = self.layout.lock(id);
        let started = Instant::now();
        let mut backoff = Duration::from_millis(1);
        let mut st = lock_slot(&slot);
        let transient = loop {
            if st.held > 0 {
                break None;
            }
            if let Some(fl) =
                FileLock::try_exclusive(&lock_path).map_err(|e| io_err(&lock_path, e))?
            {
                st.validated = false;
                break Some(fl);
            }
            let waited = started.elapsed();
            if waited >= self.opts.lock_timeout {
                return Err(StoreError::Locked {
                    id: id.clone(),
                    waited,
                });
            }
            // Let a lock guard of this process register while we sleep.
            drop(st);
            std::thread::sleep(backoff.min(self.opts.lock_timeout - waited));
            backoff = (backoff * 2).min(Duration::from_millis(50));
            st = lock_slot(&slot);
        };
        let result = f(self, &mut st);
        if let Some(fl) = transient {
            self.release(id, &mut st, &fl);
        }
        result
    }

    /// Bookkeeping before the flock of `id` is released: write out pending events, remember
    /// the active file's identity (to detect changes by others at the next acquisition), and
    /// unlink the lock file if the session does not exist (nothing is left to guard).
    fn release(&self, id: &RecordId, st: &mut SlotState, flock: &FileLock) {
        if let Err(e) = self.write_pending(id, st) {
            tracing::error!(
                session = %id,
                error = %e,
                "events appended with durability None could not be written when the lock was released"
            );
        }
        if let Some(w) = st.writer.as_mut() {
            match w.file.metadata() {
                Ok(m) => w.ident = FileIdent::of(&m),
                Err(_) => st.writer = None,
            }
        }
        st.validated = false;
        let exists = match st.snapshot_present {
            Some(b) => b,
            None => !matches!(stat_opt(&self.layout.snapshot(id)), Ok(None)),
        };
        if !exists {
            st.writer = None;
            st.snap = None;
            if let Err(e) = flock.unlink() {
                tracing::debug!(session = %id, error = %e, "could not remove the lock file");
            }
        }
    }

    /// First step of every operation under the lock: after a (re)acquisition, drop caches
    /// that another process may have made stale.
    fn ensure_valid(&self, id: &RecordId, st: &mut SlotState) -> StoreResult<()> {
        if st.validated {
            return Ok(());
        }
        if let Some(w) = &st.writer {
            let path = self.layout.segment(id, 0);
            let now = stat_opt(&path).map_err(|e| io_err(&path, e))?;
            // Identities can repeat (inode reuse within one timestamp tick), so the last line
            // must also still be the one this store wrote: one small read.
            let unchanged = now.map(|m| FileIdent::of(&m)) == Some(w.ident)
                && (w.len == 0
                    || log::last_seq_lenient(&w.file, w.len).map_err(|e| io_err(&path, e))?
                        == Some(w.last_seq));
            if !unchanged {
                tracing::debug!(session = %id, "event log changed by another writer; reopening it");
                st.writer = None;
            }
        }
        st.snapshot_present = None;
        // File identities can repeat (a freed inode reused within one timestamp tick), so the
        // cached revision is only trusted while the lock is held without a break.
        st.snap = None;
        st.validated = true;
        Ok(())
    }

    fn snapshot_present(&self, id: &RecordId, st: &mut SlotState) -> StoreResult<bool> {
        if let Some(b) = st.snapshot_present {
            return Ok(b);
        }
        let path = self.layout.snapshot(id);
        let b = stat_opt(&path).map_err(|e| io_err(&path, e))?.is_some();
        st.snapshot_present = Some(b);
        Ok(b)
    }

    /// Takes the exclusive writer lock of `id`, waiting up to `timeout` (see `Store::lock`).
    pub fn lock(self: &Arc<Self>, id: &RecordId, timeout: Duration) -> StoreResult<SessionLock> {
        let slot = self.slot(id);
        let lock_path = self.layout.lock(id);
        let started = Instant::now();
        let mut backoff = Duration::from_millis(1);
        loop {
            {
                let mut st = lock_slot(&slot);
                if let Some(fl) =
                    FileLock::try_exclusive(&lock_path).map_err(|e| io_err(&lock_path, e))?
                {
                    st.held += 1;
                    st.validated = false;
                    let guard = FsLockGuard {
                        core: self.clone(),
                        id: id.clone(),
                        slot: slot.clone(),
                        flock: Some(fl),
                    };
                    return Ok(SessionLock::new(id.clone(), self.issuer, Box::new(guard)));
                }
            }
            let waited = started.elapsed();
            if waited >= timeout {
                return Err(StoreError::Locked {
                    id: id.clone(),
                    waited,
                });
            }
            std::thread::sleep(backoff.min(timeout - waited));
            backoff = (backoff * 2).min(Duration::from_millis(50));
        }
    }

    // ----- snapshots -----------------------------------------------------------------------

    /// Stores a new session (revision 1). [`StoreError::AlreadyExists`] if the id is taken.
    pub fn create(&self, record: &mut SessionRecord) -> StoreResult<()> {
        let bytes = self.prepare_snapshot(record, 1)?;
        self.create_bytes(&record.acpx_record_id, &bytes)?;
        record.revision = 1;
        Ok(())
    }

    /// Validates `record` and serializes it with `revision` (restoring the caller's value).
    pub(crate) fn prepare_snapshot(
        &self,
        record: &mut SessionRecord,
        revision: u64,
    ) -> StoreResult<Vec<u8>> {
        let path = self.layout.snapshot(&record.acpx_record_id);
        record.validate(&path.display().to_string())?;
        let old = std::mem::replace(&mut record.revision, revision);
        let bytes = record.to_json_vec();
        record.revision = old;
        Ok(bytes)
    }

    pub(crate) fn create_bytes(&self, id: &RecordId, bytes: &[u8]) -> StoreResult<()> {
        self.with_write(id, |core, st| {
            core.ensure_valid(id, st)?;
            if core.snapshot_present(id, st)? {
                return Err(StoreError::AlreadyExists(id.clone()));
            }
            // Log files without a snapshot are what an interrupted delete leaves behind; they
            // must not become the history of the new session.
            st.writer = None;
            core.remove_segments(id)?;
            core.write_snapshot(id, st, bytes, 1)
        })
    }

    /// Replaces the snapshot if the stored revision equals `record.revision`, then increments
    /// `record.revision`.
    pub fn save(&self, record: &mut SessionRecord) -> StoreResult<()> {
        let expected = record.revision;
        let bytes = self.prepare_snapshot(record, expected + 1)?;
        self.save_bytes(&record.acpx_record_id, expected, &bytes)?;
        record.revision = expected + 1;
        Ok(())
    }

    pub(crate) fn save_bytes(&self, id: &RecordId, expected: u64, bytes: &[u8]) -> StoreResult<()> {
        self.with_write(id, |core, st| {
            core.ensure_valid(id, st)?;
            let actual = core.stored_revision(id, st)?;
            if actual != expected {
                return Err(StoreError::Conflict {
                    id: id.clone(),
                    expected,
                    actual,
                });
            }
            core.write_snapshot(id, st, bytes, expected + 1)
        })
    }

    /// The revision of the stored snapshot: from the cache while this store has held the lock
    /// continuously since it wrote the file, else from the first bytes of the file (the layout
    /// this store writes), else by parsing the document.
    fn stored_revision(&self, id: &RecordId, st: &mut SlotState) -> StoreResult<u64> {
        let path = self.layout.snapshot(id);
        let not_found = |st: &mut SlotState| {
            st.snapshot_present = Some(false);
            StoreError::NotFound(id.clone())
        };
        if let Some((cached, rev)) = st.snap {
            match stat_opt(&path).map_err(|e| io_err(&path, e))? {
                None => return Err(not_found(st)),
                Some(m) if FileIdent::of(&m) == cached => return Ok(rev),
                Some(_) => st.snap = None,
            }
        }
        let file = match open_read(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(not_found(st)),
            Err(e) => return Err(io_err(&path, e)),
        };
        st.snapshot_present = Some(true);
        if let Some(rev) = read_revision_prefix(&file).map_err(|e| io_err(&path, e))? {
            return Ok(rev);
        }
        #[derive(serde::Deserialize)]
        struct RevisionProbe {
            #[serde(default)]
            revision: u64,
        }
        let mut bytes = Vec::new();
        (&file)
            .read_to_end(&mut bytes)
            .map_err(|e| io_err(&path, e))?;
        let probe: RevisionProbe = serde_json::from_slice(&bytes).map_err(|e| {
            StoreError::corrupt(
                path.display().to_string(),
                None,
                format!(
                    "field `revision`: cannot read the stored revision ({e}); delete or repair \
                     the file before saving over it"
                ),
            )
        })?;
        Ok(probe.revision)
    }

    /// Temp file in the same directory, write, fsync, rename over the snapshot, fsync the
    /// directory. A crash at any point leaves the old or the new snapshot.
    fn write_snapshot(
        &self,
        id: &RecordId,
        st: &mut SlotState,
        bytes: &[u8],
        revision: u64,
    ) -> StoreResult<()> {
        let path = self.layout.snapshot(id);
        let dir = self.layout.dir();
        let mut attempt = 0;
        let (tmp, mut file) = loop {
            let tmp = self.layout.snapshot_temp(id, &random_suffix());
            match create_new_file(&tmp) {
                Ok(f) => break (tmp, f),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempt < 8 => attempt += 1,
                Err(e) => return Err(io_err(&tmp, e)),
            }
        };
        let written = file.write_all(bytes).and_then(|()| file.sync_all());
        if let Err(e) = written {
            let _ = fs::remove_file(&tmp);
            return Err(io_err(&tmp, e));
        }
        failpoint!("save.after_temp_fsync");
        drop(file);
        if let Err(e) = fs::rename(&tmp, &path) {
            let _ = fs::remove_file(&tmp);
            return Err(io_err(&path, e));
        }
        failpoint!("save.after_rename");
        st.snapshot_present = Some(true);
        st.snap = stat_opt(&path)
            .ok()
            .flatten()
            .map(|m| (FileIdent::of(&m), revision));
        fsync_dir(dir).map_err(|e| io_err(dir, e))
    }

    /// Reads and validates a session snapshot.
    pub fn load(&self, id: &RecordId) -> StoreResult<SessionRecord> {
        let path = self.layout.snapshot(id);
        let bytes = match read_file(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(StoreError::NotFound(id.clone()))
            }
            Err(e) => return Err(io_err(&path, e)),
        };
        #[cfg(test)]
        self.snapshot_parses.fetch_add(1, Ordering::Relaxed);
        parse_snapshot(id, &path, &bytes).map_err(|(field, message)| {
            StoreError::corrupt(path.display().to_string(), None, reason(&field, &message))
        })
    }

    /// Marks a session closed; idempotent.
    pub fn close(&self, id: &RecordId, at: Timestamp) -> StoreResult<SessionRecord> {
        self.with_write(id, |core, st| {
            core.ensure_valid(id, st)?;
            let mut record = core.load(id)?;
            if record.closed {
                return Ok(record);
            }
            record.closed = true;
            record.closed_at = Some(at);
            record.pid = None;
            let expected = record.revision;
            let bytes = core.prepare_snapshot(&mut record, expected + 1)?;
            core.write_snapshot(id, st, &bytes, expected + 1)?;
            record.revision = expected + 1;
            Ok(record)
        })
    }

    /// Removes the snapshot, every log segment, set-aside torn tails and temp files of `id`.
    pub fn delete(&self, id: &RecordId) -> StoreResult<bool> {
        self.with_write(id, |core, st| {
            core.ensure_valid(id, st)?;
            // Pending events of a deleted session are dropped with it.
            st.writer = None;
            st.snap = None;
            let snapshot = core.layout.snapshot(id);
            let mut existed = remove_if_exists(&snapshot).map_err(|e| io_err(&snapshot, e))?;
            st.snapshot_present = Some(false);
            failpoint!("delete.after_snapshot_unlink");
            existed |= core.remove_segments(id)?;
            let dir = core.layout.dir();
            let rd = fs::read_dir(dir).map_err(|e| io_err(dir, e))?;
            for entry in rd {
                let entry = entry.map_err(|e| io_err(dir, e))?;
                let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                    continue;
                };
                let ours = is_log_file_of(&name, id)
                    || classify(&name) == Some(Entry::SnapshotTemp(id.clone()));
                if ours {
                    let p = entry.path();
                    existed |= remove_if_exists(&p).map_err(|e| io_err(&p, e))?;
                }
            }
            fsync_dir(dir).map_err(|e| io_err(dir, e))?;
            Ok(existed)
        })
    }

    /// Removes the active and older segments of `id` that the probe finds.
    fn remove_segments(&self, id: &RecordId) -> StoreResult<bool> {
        let dir = self.layout.dir();
        let mut any = false;
        let older = log::probe_older(&self.layout, id, self.opts.max_segments)
            .map_err(|e| io_err(dir, e))?;
        for n in std::iter::once(0).chain(older) {
            let p = self.layout.segment(id, n);
            any |= remove_if_exists(&p).map_err(|e| io_err(&p, e))?;
        }
        Ok(any)
    }

    /// Every stored session, without reading conversations (see the crate docs on the listing
    /// cache).
    pub fn list(&self, query: &ListQuery) -> StoreResult<ListPage> {
        let listing = self.list_all()?;
        query.paginate(listing.summaries, listing.skipped)
    }

    pub(crate) fn list_all(&self) -> StoreResult<Listing> {
        let mut index = self.index.lock().unwrap_or_else(|p| p.into_inner());
        let listing = index.list_all(&self.layout)?;
        #[cfg(test)]
        self.snapshot_parses
            .fetch_add(listing.parsed, Ordering::Relaxed);
        Ok(listing)
    }

    /// Scans the conversations of the sessions (in list order) for `query`.
    pub fn search(&self, query: &SearchQuery) -> StoreResult<Vec<SearchHit>> {
        let cwd = query.cwd.as_deref().map(normalize_cwd).transpose()?;
        if query.terms().is_empty() {
            return Ok(Vec::new());
        }
        let mut summaries: Vec<_> = self
            .list_all()?
            .summaries
            .into_iter()
            .filter(|s| {
                cwd.as_deref()
                    .is_none_or(|c| normalize_cwd(&s.cwd).is_ok_and(|sc| sc == c))
            })
            .collect();
        summaries.sort_by(|a, b| list_order_key(a).cmp(&list_order_key(b)));
        let limit = query.effective_limit();
        let mut hits = Vec::new();
        for s in &summaries {
            match self.load(&s.acpx_record_id) {
                Ok(r) => hits.extend(acpx_model::search_record(&r, query)),
                // Deleted since the listing, or damaged: search what can be read.
                Err(StoreError::NotFound(_)) => {}
                Err(e) => tracing::warn!(error = %e, "search skipped a session"),
            }
            if hits.len() >= limit {
                break;
            }
        }
        hits.truncate(limit);
        Ok(hits)
    }

    // ----- event log -----------------------------------------------------------------------

    /// Appends a batch under the held writer lock `writer` (see `Store::append`).
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
            st.last_write_at = Some(Timestamp::now());
        }
        Some(Ok(self.log_state(id, &st)))
    }

    /// Appends a serialized batch. Only called with a writer lock of this store checked by
    /// [`FsCore::check_writer`]: the session's slot counts it as held, so no lock is taken here.
    pub(crate) fn append_prepared(
        &self,
        id: &RecordId,
        mut batch: PreparedBatch,
        durability: Durability,
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
        if !self.snapshot_present(id, st)? {
            // A prompt still running must not recreate a deleted session.
            return Err(StoreError::NotFound(id.clone()));
        }
        let last = self.writer(id, st)?.last_seq;
        batch.check(id, last)?;
        if batch.count == 0 {
            return Ok(self.log_state(id, st));
        }
        let now = Timestamp::now();
        let Some(w) = st.writer.as_mut() else {
            return Err(self.writer_gone(id));
        };
        w.last_seq = batch.last_seq;
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

    fn writer_gone(&self, id: &RecordId) -> StoreError {
        StoreError::Backend {
            backend: "fs",
            message: format!("the event log writer of session {id} was closed unexpectedly"),
        }
    }

    /// The open writer of `id`, opening it (and setting a torn tail aside) if needed.
    fn writer<'a>(&self, id: &RecordId, st: &'a mut SlotState) -> StoreResult<&'a mut LogWriter> {
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
    fn evict_writers(&self, current: &RecordId) {
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
    fn write_out(
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
        if w.len > self.opts.max_segment_bytes {
            if let Err(e) = log::rotate(&self.layout, id, self.opts.max_segments, w) {
                // The events are written; only the rotation failed. Report it without failing
                // the append, and re-derive everything from the files next time.
                tracing::error!(session = %id, error = %e, "event log rotation failed");
                st.last_write_error = Some(format!("rotation failed: {e}"));
                st.writer = None;
            }
        }
        Ok(())
    }

    fn write_pending(&self, id: &RecordId, st: &mut SlotState) -> StoreResult<()> {
        let Some(w) = st.writer.as_mut() else {
            return Ok(());
        };
        if w.pending.is_empty() {
            return Ok(());
        }
        let buf = std::mem::take(&mut w.pending);
        self.write_out(id, st, &buf, false)
    }

    fn log_state(&self, id: &RecordId, st: &SlotState) -> EventLogState {
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

    fn require_snapshot(&self, id: &RecordId) -> StoreResult<()> {
        let path = self.layout.snapshot(id);
        match stat_opt(&path).map_err(|e| io_err(&path, e))? {
            Some(_) => Ok(()),
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

    // ----- temp files ----------------------------------------------------------------------

    /// Removes temp files left by interrupted saves: `.<id>.json.tmp.*` of sessions whose lock
    /// is free (a save only runs under the lock, so nobody is writing them), and
    /// `.index.json.tmp.*` when the index lock is free. Returns how many were removed.
    pub fn cleanup_stale_temp_files(&self) -> StoreResult<usize> {
        let dir = self.layout.dir();
        let mut by_session: HashMap<RecordId, Vec<PathBuf>> = HashMap::new();
        let mut index_temps = Vec::new();
        let rd = fs::read_dir(dir).map_err(|e| io_err(dir, e))?;
        for entry in rd {
            let entry = entry.map_err(|e| io_err(dir, e))?;
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            match classify(&name) {
                Some(Entry::SnapshotTemp(id)) => {
                    by_session.entry(id).or_default().push(entry.path())
                }
                Some(Entry::IndexTemp) => index_temps.push(entry.path()),
                _ => {}
            }
        }
        let mut removed = 0;
        for (id, temps) in by_session {
            let lock_path = self.layout.lock(&id);
            let Some(flock) =
                FileLock::try_exclusive(&lock_path).map_err(|e| io_err(&lock_path, e))?
            else {
                tracing::debug!(session = %id, "session is locked; leaving its temp files to their writer");
                continue;
            };
            for t in temps {
                if remove_if_exists(&t).map_err(|e| io_err(&t, e))? {
                    tracing::info!(file = %t.display(), "removed a stale temp file");
                    removed += 1;
                }
            }
            if stat_opt(&self.layout.snapshot(&id))
                .map_err(|e| io_err(dir, e))?
                .is_none()
            {
                let _ = flock.unlink();
            }
        }
        if !index_temps.is_empty() {
            let lock_path = self.layout.index_lock();
            if let Some(_flock) =
                FileLock::try_exclusive(&lock_path).map_err(|e| io_err(&lock_path, e))?
            {
                for t in index_temps {
                    if remove_if_exists(&t).map_err(|e| io_err(&t, e))? {
                        removed += 1;
                    }
                }
            }
        }
        Ok(removed)
    }
}

impl Drop for FsCore {
    fn drop(&mut self) {
        // Lock guards keep the core alive and write out on release, so this finds pending
        // events only if a guard was leaked; write them anyway.
        let ids: Vec<(RecordId, Arc<Slot>)> = {
            let slots = self.slots.get_mut().unwrap_or_else(|p| p.into_inner());
            slots.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
        };
        for (id, slot) in ids {
            let mut st = lock_slot(&slot);
            if let Err(e) = self.write_pending(&id, &mut st) {
                tracing::error!(session = %id, error = %e, "could not write pending events on drop");
            }
        }
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
    use acpx_model::{EventContext, EventPayload, EventSource, EventStream, NewSession};

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

    fn record(id: &str) -> SessionRecord {
        SessionRecord::new(
            NewSession {
                acpx_record_id: RecordId::parse(id).unwrap(),
                acp_session_id: "acp".into(),
                agent_session_id: None,
                agent_command: "agent".into(),
                cwd: "/r".into(),
                name: None,
            },
            Timestamp::now(),
        )
    }

    #[test]
    fn list_parses_only_new_or_changed_snapshots() {
        let tmp = tempfile::tempdir().unwrap();
        let core = FsCore::open(tmp.path(), FsStoreOptions::default()).unwrap();
        for i in 0..5 {
            core.create(&mut record(&format!("s{i}"))).unwrap();
        }
        let parses = || core.snapshot_parses.load(Ordering::Relaxed);
        assert_eq!(core.list(&ListQuery::default()).unwrap().sessions.len(), 5);
        assert_eq!(parses(), 5);
        core.list(&ListQuery::default()).unwrap();
        assert_eq!(parses(), 5, "unchanged snapshots come from the cache");
        let mut r = core.load(&RecordId::parse("s1").unwrap()).unwrap();
        assert_eq!(parses(), 6);
        r.name = Some("n".into());
        core.save(&mut r).unwrap();
        let page = core.list(&ListQuery::default()).unwrap();
        assert_eq!(parses(), 7, "only the saved snapshot is parsed again");
        assert!(page.sessions.iter().any(|s| s.name.as_deref() == Some("n")));
        // A new process (fresh core) reuses the cache file.
        let other = FsCore::open(tmp.path(), FsStoreOptions::default()).unwrap();
        other.list(&ListQuery::default()).unwrap();
        assert_eq!(other.snapshot_parses.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn saves_read_the_revision_from_the_cache() {
        let tmp = tempfile::tempdir().unwrap();
        let core = FsCore::open(tmp.path(), FsStoreOptions::default()).unwrap();
        let mut r = record("a");
        core.create(&mut r).unwrap();
        // Back-to-back saves take the stored revision from the cache, which must describe
        // the file exactly as it is on disk.
        for _ in 0..3 {
            core.save(&mut r).unwrap();
        }
        let slot = core.slot(&r.acpx_record_id);
        let st = lock_slot(&slot);
        let (ident, rev) = st.snap.expect("cached");
        assert_eq!(rev, 4);
        let m = fs::metadata(core.snapshot_path(&r.acpx_record_id)).unwrap();
        assert_eq!(ident, FileIdent::of(&m));
    }
}
