//! [`FsCore`]: every operation of the file store as a plain blocking method.
//!
//! [`crate::FsStore`] runs these on tokio's blocking pool. They may sleep (waiting for a lock)
//! and fsync, so they must not be called directly on an async worker thread.

mod batch;
mod batch_lock;
mod event_log;
mod snapshots;
mod stage;

pub(crate) use batch::PreparedNew;

use std::collections::HashMap;
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use acpx_model::{
    LockGuard, LockIssuer, RecordId, SessionLock, StoreError, StoreResult, Timestamp,
};

use crate::fsutil::{ensure_dir, io_err, open_append, remove_if_exists, stat_opt, FileIdent};
use crate::index::IndexCache;
use crate::layout::{classify, temp_writer_alive, tombstone_owner, Entry, Layout};
use crate::log::{self, LogWriter};
use crate::summary::SummaryMemo;
use acpx_lock::{FileLock, SessionLockDir};

/// Default of [`FsStoreOptions::turn_end_rotate_bytes`]: 1 MiB (docs/format.md § Rotation and
/// retention says why).
pub const DEFAULT_TURN_END_ROTATE_BYTES: u64 = 1024 * 1024;

/// Tuning of an [`crate::FsStore`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsStoreOptions {
    /// The active event segment rotates once it is larger than this (default 64 MiB).
    pub max_segment_bytes: u64,
    /// Event segments kept, the active one included (default 5; at least 2, because after a
    /// rotation the last seq is read from the previous segment).
    pub max_segments: u32,
    /// Keep rotated segments instead of deleting those beyond `max_segments` (default false):
    /// for a full audit trail. They stay compressed and readable; nothing bounds the log's
    /// size then.
    pub keep_rotated_segments: bool,
    /// At the end of a turn (a batch holding a `prompt_done` or `prompt_error` event), the
    /// active segment rotates, and so is compressed, when it holds at least this many bytes
    /// (default [`DEFAULT_TURN_END_ROTATE_BYTES`], 1 MiB; 0: only `max_segment_bytes`
    /// rotates). A session's log then stays plain for at most this much plus one turn, instead
    /// of up to a whole segment. Retention keeps more of these smaller segments, while they
    /// hold less than `max_segments − 1` full ones, so the window is the same.
    pub turn_end_rotate_bytes: u64,
    /// How long a mutation by a caller that does not hold the session's writer lock waits for
    /// that lock before failing with [`StoreError::Locked`] (default 10 s).
    pub lock_timeout: Duration,
}

impl Default for FsStoreOptions {
    fn default() -> Self {
        FsStoreOptions {
            max_segment_bytes: acpx_model::session::DEFAULT_MAX_SEGMENT_BYTES,
            max_segments: acpx_model::session::DEFAULT_MAX_SEGMENTS,
            keep_rotated_segments: false,
            turn_end_rotate_bytes: DEFAULT_TURN_END_ROTATE_BYTES,
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
    /// The lock file did not exist before this process's current flock on it was taken: it
    /// is removed when that flock is released, so that locking leaves no file behind (a
    /// migration locks every session of its source).
    created_lock_file: bool,
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
    /// The last summaries `Store::summary` read.
    summaries: SummaryMemo,
    open_writers: AtomicUsize,
    /// Whether a stage of this store swept the directory for stale stages already (the
    /// first stage of a process does: `core::stage`).
    stages_swept: std::sync::atomic::AtomicBool,
    /// The token of the session locks this store (and its clones) issue.
    issuer: LockIssuer,
    /// The fence checks of appends under a lock that carries a lease generation.
    fences: acpx_lock::lease_file::FenceChecks,
    /// The holder locks of the owner leases held through this store.
    pub(crate) leases: acpx_lock::lease_file::HolderLocks,
    #[cfg(test)]
    pub(crate) snapshot_parses: AtomicUsize,
}

impl FsCore {
    /// The owner lease file of `id`.
    pub(crate) fn lease_path(&self, id: &RecordId) -> PathBuf {
        self.layout.lease(id)
    }

    /// The fence check of an append under a lock carrying lease `generation`.
    pub(crate) fn check_fence(&self, id: &RecordId, generation: u64) -> StoreResult<()> {
        self.fences.check(&self.layout.lease(id), id, generation)
    }
}

impl fmt::Debug for FsCore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FsCore")
            .field("root", &self.root)
            .field("options", &self.opts)
            .finish_non_exhaustive()
    }
}

/// A held session writer lock of the file store (the guard inside the
/// [`acpx_model::SessionLock`] that [`acpx_model::Store::lock`] returns). Dropping it writes
/// out buffered events and releases the lock.
pub(crate) struct FsLockGuard {
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

/// How often [`FsCore::open`] sweeps the directory for a crash's leftovers.
pub(crate) const CLEANUP_INTERVAL: Duration = Duration::from_secs(600);

impl FsCore {
    /// Opens (creating if needed, mode 0700) `<root>` and `<root>/sessions`, then removes
    /// stale temp files (see [`FsCore::cleanup_stale_temp_files`]) when the last sweep is
    /// older than [`CLEANUP_INTERVAL`].
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
            layout: Layout {
                locks: SessionLockDir::new(&sessions),
                sessions,
            },
            opts,
            slots: Mutex::new(HashMap::new()),
            index: Mutex::new(IndexCache::default()),
            summaries: SummaryMemo::default(),
            open_writers: AtomicUsize::new(0),
            stages_swept: Default::default(),
            issuer: LockIssuer::unique(),
            fences: Default::default(),
            leases: Default::default(),
            #[cfg(test)]
            snapshot_parses: AtomicUsize::new(0),
        };
        if core.cleanup_due() {
            match core.cleanup_stale_temp_files() {
                Ok(_) => core.note_cleanup(),
                // A read-only store is still readable: report, do not refuse to open.
                Err(e) => tracing::warn!(error = %e, "could not clean up stale temp files"),
            }
        }
        Ok(core)
    }

    /// Whether opening the store should sweep its directory: the sweep reads every entry (three
    /// or more per session), which on a store of 10k sessions cost each command several
    /// milliseconds. What it removes is garbage that nothing reads (dead writers' temp files;
    /// a tombstoned session's log, which `create` also finishes removing), so once per
    /// [`CLEANUP_INTERVAL`] is enough. Due when the mark is missing or unreadable, or its time
    /// is not within the interval before now (a clock set back counts as due).
    fn cleanup_due(&self) -> bool {
        let mark = self.layout.cleanup_mark();
        let Ok(modified) = fs::symlink_metadata(&mark).and_then(|m| m.modified()) else {
            return true;
        };
        match std::time::SystemTime::now().duration_since(modified) {
            Ok(age) => age >= CLEANUP_INTERVAL,
            Err(_) => true,
        }
    }

    /// Records that a sweep just ran (best effort: a store that cannot be written sweeps at
    /// every open, as it always did).
    fn note_cleanup(&self) {
        let mark = self.layout.cleanup_mark();
        let touched = open_append(&mark).and_then(|f| f.set_modified(std::time::SystemTime::now()));
        if let Err(e) = touched {
            tracing::debug!(file = %mark.display(), error = %e, "could not record the sweep");
        }
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

    /// `<root>/sessions/<id>.events.<n>.ndjson.zst`.
    pub fn compressed_segment_path(&self, id: &RecordId, n: u32) -> PathBuf {
        self.layout.segment_zst(id, n)
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
            if let Some(taken) = self
                .layout
                .locks
                .try_lock(id)
                .map_err(|e| io_err(&lock_path, e))?
            {
                st.validated = false;
                st.created_lock_file = taken.created;
                break Some(taken.lock);
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
    /// unlink the lock file if the session does not exist (nothing is left to guard) or if
    /// this flock created it (lock files do not pile up, one per session ever locked).
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
        let created = std::mem::take(&mut st.created_lock_file);
        if !exists {
            st.writer = None;
            st.snap = None;
        }
        if !exists || created {
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

    /// Makes `id` free for a new session (a batch create, a stage): refused when a snapshot,
    /// or a log without one (a damaged session `fsck --repair` rebuilds), holds the id; what
    /// an interrupted delete or a killed stage left (the tombstone and its log) is removed,
    /// so none of it becomes the new session's history.
    fn claim_for_new(&self, id: &RecordId, st: &mut SlotState) -> StoreResult<()> {
        self.ensure_valid(id, st)?;
        if self.snapshot_present(id, st)? {
            return Err(StoreError::AlreadyExists(id.clone()));
        }
        st.writer = None;
        let tomb = self.layout.tombstone(id);
        if stat_opt(&tomb).map_err(|e| io_err(&tomb, e))?.is_some() {
            self.finish_delete(id)?;
        } else if self.segments_exist(id)? {
            return Err(StoreError::AlreadyExists(id.clone()));
        }
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
                if let Some(taken) = self
                    .layout
                    .locks
                    .try_lock(id)
                    .map_err(|e| io_err(&lock_path, e))?
                {
                    let fl = taken.lock;
                    if st.held == 0 {
                        st.created_lock_file = taken.created;
                    }
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
}

impl FsCore {
    /// Removes temp files left by interrupted saves: `.<id>.json.tmp.*` of processes that are
    /// gone, of sessions whose lock is free (a save streams its temp file before it takes the
    /// lock, so a live process's temp file may be a save in flight), and
    /// `.index.json.tmp.*` (`.search.ndjson.tmp.*`) when the listing (search) index lock is
    /// free; and finishes deletes a crash
    /// interrupted (a tombstone `<id>.deleted` whose session lock is free: its log files, then
    /// the tombstone, are removed). Returns how many temp files and deletes were cleaned up.
    pub fn cleanup_stale_temp_files(&self) -> StoreResult<usize> {
        let dir = self.layout.dir();
        let mut by_session: HashMap<RecordId, Vec<PathBuf>> = HashMap::new();
        let mut tombstones = Vec::new();
        let mut index_temps = Vec::new();
        let mut search_temps = Vec::new();
        let rd = fs::read_dir(dir).map_err(|e| io_err(dir, e))?;
        for entry in rd {
            let entry = entry.map_err(|e| io_err(dir, e))?;
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            match classify(&name) {
                Some(Entry::SnapshotTemp(id)) if !temp_writer_alive(&name) => {
                    by_session.entry(id).or_default().push(entry.path())
                }
                Some(Entry::SnapshotTemp(_)) => {}
                Some(Entry::IndexTemp) => index_temps.push(entry.path()),
                Some(Entry::SearchTemp) => search_temps.push(entry.path()),
                _ => {
                    if let Some(id) = tombstone_owner(&name) {
                        tombstones.push(id);
                    }
                }
            }
        }
        let mut removed = self.finish_interrupted_deletes(tombstones)?.len();
        for (id, temps) in by_session {
            let lock_path = self.layout.lock(&id);
            let Some(flock) = self
                .layout
                .locks
                .try_lock(&id)
                .map_err(|e| io_err(&lock_path, e))?
                .map(|taken| taken.lock)
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
        for (temps, lock_path) in [
            (index_temps, self.layout.index_lock()),
            (search_temps, self.layout.search_lock()),
        ] {
            if temps.is_empty() {
                continue;
            }
            if let Some(_flock) =
                FileLock::try_exclusive(&lock_path).map_err(|e| io_err(&lock_path, e))?
            {
                for t in temps {
                    if remove_if_exists(&t).map_err(|e| io_err(&t, e))? {
                        removed += 1;
                    }
                }
            }
        }
        Ok(removed)
    }
}

impl FsCore {
    /// Finishes the deletes whose tombstones are given, for each session whose lock is free
    /// (a delete, or a stage, runs under the lock: a busy lock is one still running). Returns
    /// the sessions whose delete was finished.
    fn finish_interrupted_deletes(&self, tombstones: Vec<RecordId>) -> StoreResult<Vec<RecordId>> {
        let mut finished = Vec::new();
        for id in tombstones {
            let slot = self.slot(&id);
            let mut st = lock_slot(&slot);
            if st.held > 0 {
                continue;
            }
            let lock_path = self.layout.lock(&id);
            let Some(flock) = self
                .layout
                .locks
                .try_lock(&id)
                .map_err(|e| io_err(&lock_path, e))?
                .map(|taken| taken.lock)
            else {
                continue;
            };
            st.writer = None;
            st.snap = None;
            st.snapshot_present = None;
            st.validated = false;
            // A snapshot next to a tombstone was written by a create after the delete's
            // commit point, which would have finished the delete first: leave such a session
            // alone rather than guess.
            let snapshot = self.layout.snapshot(&id);
            if stat_opt(&snapshot)
                .map_err(|e| io_err(&snapshot, e))?
                .is_none()
            {
                self.finish_delete(&id)?;
                tracing::info!(session = %id, "finished a delete that a crash interrupted");
                let _ = flock.unlink();
                finished.push(id);
            }
        }
        Ok(finished)
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

pub(crate) use event_log::PreparedBatch;
#[cfg(feature = "testing")]
pub use event_log::PENDING_LIMIT;
pub use event_log::TURN_END_ROTATE_MAX_OLDER;
