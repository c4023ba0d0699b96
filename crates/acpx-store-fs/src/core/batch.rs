//! [`acpx_model::Store::create_sessions`] for the file store: many new sessions, each with
//! its whole log, made durable together (`docs/format.md` § Writing many new sessions at
//! once).
//!
//! Under the writer locks of every session of the batch (held to the end):
//!
//! 1. per session, the snapshot (revision 2, `acpx.event_log` describing its log) is written
//!    to the session's tombstone `<id>.deleted`, and its log to `<id>.events.ndjson`, with
//!    plain writes: until step 3 the session is an interrupted delete to every reader (absent),
//!    and one a crash leaves is finished (removed) by the next sweep of `FsStore::open` (at
//!    most every 10 minutes), or `create` or `delete` of the id, as any interrupted delete is;
//! 2. every file written is made durable: on Linux 5.17 and later, on the local file systems
//!    known to report their files' errors to it, with one `syncfs(2)` of the
//!    store's file system (see [`FsCore::sync_files`]), elsewhere with an fsync of each file's
//!    data; then one fsync of the directory makes their names durable;
//! 3. per session, the tombstone is renamed to `<id>.json`: the commit point of that session,
//!    one atomic rename, after which it is whole and durable in its content;
//! 4. the directory is fsynced once: the renames are durable.
//!
//! A batch thus costs one `syncfs` and two directory fsyncs (elsewhere: two fsyncs per session,
//! issued from 4 threads so that the waits for the disk overlap), instead of, per
//! session, two snapshot writes (`create`, then the `save` with the log's state) each with its
//! fsync and a directory fsync, and a directory fsync for the new log (whose data was not
//! fsynced at all). The writer locks are taken through one lock file for the whole batch
//! (`batch_lock`), so that no lock file per session is created and removed.

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use acpx_model::RecordId;
use acpx_model::{SessionRecord, SessionSummary, StoreError, StoreResult};

use super::{lock_slot, FsCore};
use crate::failpoint::failpoint;
use crate::fsutil::{
    create_new_file, fsync_dir, io_err, open_dir, remove_if_exists, stat_opt, FileIdent,
};
use crate::index::{journal_saved, now_ns};
use crate::search_index;

/// Threads that fsync the files of a batch, so that the waits for the disk overlap.
const SYNC_THREADS: usize = 4;

/// One session of a batch, serialized before the batch's blocking work.
pub(crate) struct PreparedNew {
    pub id: RecordId,
    /// The snapshot document as it will be stored.
    pub snapshot: Vec<u8>,
    /// The log's NDJSON lines (empty for an empty log: no segment is written).
    pub log: Vec<u8>,
    pub summary: SessionSummary,
    pub search_messages: Option<Vec<u8>>,
}

impl PreparedNew {
    /// `record` must already carry revision 2 and its `acpx.event_log`.
    pub fn new(record: &SessionRecord, log: Vec<u8>) -> StoreResult<Self> {
        let mut snapshot = Vec::with_capacity(4096);
        record.write_json(&mut snapshot).map_err(|e| {
            StoreError::InvalidArgument(format!(
                "session {}: cannot serialize the snapshot: {e}",
                record.acpx_record_id
            ))
        })?;
        Ok(PreparedNew {
            id: record.acpx_record_id.clone(),
            snapshot,
            log,
            summary: record.summary(),
            search_messages: search_index::messages_part(record, search_index::SAVE_TEXT_MAX),
        })
    }
}

/// The files one session of the batch has written so far (for the undo of a failed batch).
struct Written {
    tomb: Option<File>,
    log: Option<File>,
    committed: bool,
}

impl FsCore {
    /// Writes a batch of new sessions (see the module docs). All or nothing: on an error,
    /// every session of the batch is removed again.
    pub(crate) fn create_sessions(self: &Arc<Self>, batch: Vec<PreparedNew>) -> StoreResult<()> {
        // Held to the end; no lock file is left (see `batch_lock`).
        let ids: Vec<&RecordId> = batch.iter().map(|s| &s.id).collect();
        let locks = self.lock_batch(&ids, self.opts.lock_timeout)?;
        let mut written: Vec<Written> = Vec::with_capacity(batch.len());
        let result = self.write_batch(&batch, &mut written);
        if result.is_err() {
            self.undo_batch(&batch, &written);
        }
        drop(locks);
        result
    }

    fn write_batch(&self, batch: &[PreparedNew], written: &mut Vec<Written>) -> StoreResult<()> {
        let dir = self.layout.dir();
        // Opened before the first file is written: `syncfs` on it reports the writeback errors
        // of the file system since this open (see `sync_files`).
        let dir_fd = open_dir(dir).map_err(|e| io_err(dir, e))?;
        for s in batch {
            let id = &s.id;
            let slot = self.slot(id);
            let mut st = lock_slot(&slot);
            self.claim_for_new(id, &mut st)?;
            let tomb = self.layout.tombstone(id);
            let mut w = Written {
                tomb: None,
                log: None,
                committed: false,
            };
            let mut f = create_new_file(&tomb).map_err(|e| io_err(&tomb, e))?;
            let wrote = f.write_all(&s.snapshot);
            w.tomb = Some(f);
            written.push(w);
            wrote.map_err(|e| io_err(&tomb, e))?;
            if !s.log.is_empty() {
                let path = self.layout.segment(id, 0);
                let mut f = create_new_file(&path).map_err(|e| io_err(&path, e))?;
                let wrote = f.write_all(&s.log);
                if let Some(w) = written.last_mut() {
                    w.log = Some(f);
                }
                wrote.map_err(|e| io_err(&path, e))?;
            }
        }
        self.sync_files(&dir_fd, batch, written)?;
        fsync_dir(dir).map_err(|e| io_err(dir, e))?;
        failpoint!("create_sessions.after_sync");
        for (s, w) in batch.iter().zip(written.iter_mut()) {
            let id = &s.id;
            let path = self.layout.snapshot(id);
            let slot = self.slot(id);
            let mut st = lock_slot(&slot);
            std::fs::rename(self.layout.tombstone(id), &path).map_err(|e| io_err(&path, e))?;
            w.committed = true;
            st.snapshot_present = Some(true);
            let verified_ns = now_ns();
            st.snap = stat_opt(&path)
                .ok()
                .flatten()
                .map(|m| (FileIdent::of(&m), 2));
            if let Some((ident, _)) = st.snap {
                journal_saved(&self.layout, id, ident, &s.summary, verified_ns);
                if let Some(messages) = &s.search_messages {
                    search_index::note_saved(&self.layout, id, ident, 2, messages);
                }
            }
            failpoint!("create_sessions.after_first_commit");
        }
        fsync_dir(dir).map_err(|e| io_err(dir, e))
    }

    /// Makes the data of every file written durable (their names are the directory fsync's).
    ///
    /// On Linux 5.17 and later, on ext2/3/4, XFS, btrfs or tmpfs: one `syncfs(2)` of the file
    /// system holding the store. On ext4
    /// every fsync ends with a flush of the disk's write cache, even of a file with nothing
    /// left to write, so two fsyncs per session were two cache flushes per session; `syncfs`
    /// writes back everything dirty and flushes once (`docs/BENCHMARKS.md` § One syncfs per
    /// migrate batch). Since 5.8 `syncfs` returns any writeback error recorded on the file system
    /// since `dir_fd` was opened (opened before the batch's first file was created), which
    /// covers every file of the batch; an error of another file on that file system fails
    /// the batch too, the safe direction; since 5.17 it also returns the file system's own
    /// sync error (a failed journal commit). Older kernels can return success whatever
    /// happened, and other file systems need not pass the errors of the files on: overlayfs
    /// reports only its upper layer's sync, FUSE does not ask its server to sync at all. So
    /// elsewhere, off Linux, and when `syncfs` itself is refused (`ENOSYS`, `EPERM` under a
    /// seccomp filter), each file is fsynced instead (`sync_each_file`).
    ///
    /// The cost: `syncfs` also writes back what other processes left dirty on that file
    /// system, which a batch then waits for.
    fn sync_files(
        &self,
        dir_fd: &File,
        batch: &[PreparedNew],
        written: &[Written],
    ) -> StoreResult<()> {
        #[cfg(target_os = "linux")]
        if crate::fsutil::syncfs_reports_errors(dir_fd) {
            match rustix::fs::syncfs(dir_fd) {
                Ok(()) => return Ok(()),
                Err(e) if e == rustix::io::Errno::NOSYS || e == rustix::io::Errno::PERM => {}
                Err(e) => {
                    return Err(StoreError::io(
                        format_args!(
                            "syncfs of the file system holding {}",
                            self.layout.dir().display()
                        ),
                        e.into(),
                    ))
                }
            }
        }
        #[cfg(not(target_os = "linux"))]
        let _ = dir_fd;
        self.sync_each_file(batch, written)
    }

    /// fsyncs the data of every file written, from a few threads at once.
    fn sync_each_file(&self, batch: &[PreparedNew], written: &[Written]) -> StoreResult<()> {
        let files: Vec<(PathBuf, &File)> = batch
            .iter()
            .zip(written)
            .flat_map(|(s, w)| {
                let tomb = w.tomb.as_ref().map(|f| (self.layout.tombstone(&s.id), f));
                let log = w.log.as_ref().map(|f| (self.layout.segment(&s.id, 0), f));
                tomb.into_iter().chain(log)
            })
            .collect();
        let per_thread = files.len().div_ceil(SYNC_THREADS).max(1);
        std::thread::scope(|scope| {
            let handles: Vec<_> = files
                .chunks(per_thread)
                .map(|chunk| {
                    scope.spawn(move || {
                        for (path, f) in chunk {
                            f.sync_data().map_err(|e| io_err(path, e))?;
                        }
                        Ok::<(), StoreError>(())
                    })
                })
                .collect();
            for h in handles {
                match h.join() {
                    Ok(r) => r?,
                    Err(p) => std::panic::resume_unwind(p),
                }
            }
            Ok(())
        })
    }

    /// Removes what a failed batch wrote: committed sessions through `delete` (the caller
    /// holds their locks), the others' log and then their tombstone (a crash in between
    /// leaves an interrupted delete, finished by the next open).
    fn undo_batch(&self, batch: &[PreparedNew], written: &[Written]) {
        for (s, w) in batch.iter().zip(written) {
            let id = &s.id;
            let undone = if w.committed {
                self.delete(id).map(|_| ())
            } else {
                let log = self.layout.segment(id, 0);
                let tomb = self.layout.tombstone(id);
                let slot = self.slot(id);
                let mut st = lock_slot(&slot);
                st.writer = None;
                st.snapshot_present = Some(false);
                let mut r = Ok(());
                if w.log.is_some() {
                    r = remove_if_exists(&log)
                        .map(|_| ())
                        .map_err(|e| io_err(&log, e));
                }
                r.and_then(|()| {
                    remove_if_exists(&tomb)
                        .map(|_| ())
                        .map_err(|e| io_err(&tomb, e))
                })
            };
            if let Err(e) = undone {
                tracing::error!(session = %id, error = %e, "could not remove a session of a failed batch");
            }
        }
        let dir = self.layout.dir();
        if let Err(e) = fsync_dir(dir) {
            tracing::error!(error = %e, "could not fsync {} after undoing a batch", dir.display());
        }
    }
}
