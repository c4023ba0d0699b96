//! `Store::lock_many` for SQLite: the writer locks of many sessions through one lock file, as
//! the file store takes them (`acpx_store_fs`'s `core::batch_lock`): `<db>.locks/.batch.<n>.lock`
//! is created and locked, and each session's `<id>.lock` made a hard link to it, so every
//! other locker of a session waits for the batch; the links and the file are removed before
//! the lock is released. No inode is created and freed per session (a migration from SQLite
//! locks every session of the store). A session whose lock file is held is locked the ordinary
//! way; a free one (left by a holder that died) is removed and linked anew.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use acpx_lock::FileLock;
use acpx_model::{LockGuard, RecordId, StoreError, StoreResult};

use crate::lock::{self, SqliteLockGuard};
use crate::Inner;

/// The held locks of a batch; released when dropped.
pub(crate) struct SqliteBatchGuard {
    /// Releasing a session's lock commits the events buffered under it (`pending`).
    store: Arc<Inner>,
    path: PathBuf,
    file: Option<FileLock>,
    linked: Vec<(RecordId, PathBuf)>,
    _guards: Vec<SqliteLockGuard>,
}

impl std::fmt::Debug for SqliteBatchGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteBatchGuard")
            .field("path", &self.path)
            .field("linked", &self.linked)
            .finish_non_exhaustive()
    }
}

impl LockGuard for SqliteBatchGuard {}

fn io(path: &std::path::Path, e: std::io::Error) -> StoreError {
    StoreError::io(path.display(), e)
}

impl Inner {
    pub(crate) fn lock_batch(
        self: &Arc<Self>,
        ids: &[RecordId],
        timeout: Duration,
    ) -> StoreResult<SqliteBatchGuard> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let name = format!(
            ".batch.{}.{nanos}.{}.lock",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let path = self.locks_dir.join(name);
        let file = FileLock::try_exclusive(&path).map_err(|e| io(&path, e))?;
        let mut guard = SqliteBatchGuard {
            store: Arc::clone(self),
            path,
            file,
            linked: Vec::with_capacity(ids.len()),
            _guards: Vec::new(),
        };
        for id in ids {
            let lock_path = self.lock_path(id);
            if guard.file.is_none() {
                let l = lock::acquire(&lock_path, id, timeout)?;
                guard
                    ._guards
                    .push(lock::session_guard(l, Arc::clone(self), id.clone()));
                continue;
            }
            let mut cleared = false;
            loop {
                match std::fs::hard_link(&guard.path, &lock_path) {
                    Ok(()) => {
                        self.held.insert(&lock_path);
                        guard.linked.push((id.clone(), lock_path));
                        break;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && !cleared => {
                        match FileLock::try_exclusive(&lock_path).map_err(|e| io(&lock_path, e))? {
                            Some(free) => {
                                free.unlink().map_err(|e| io(&lock_path, e))?;
                                cleared = true;
                            }
                            None => {
                                let l = lock::acquire(&lock_path, id, timeout)?;
                                guard._guards.push(lock::session_guard(
                                    l,
                                    Arc::clone(self),
                                    id.clone(),
                                ));
                                break;
                            }
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                        let l = lock::acquire(&lock_path, id, timeout)?;
                        guard
                            ._guards
                            .push(lock::session_guard(l, Arc::clone(self), id.clone()));
                        break;
                    }
                    Err(e) => return Err(io(&lock_path, e)),
                }
            }
        }
        Ok(guard)
    }
}

impl Drop for SqliteBatchGuard {
    fn drop(&mut self) {
        for (id, path) in &self.linked {
            // Buffered events are written while the lock still guards the log.
            if let Err(e) = self.store.commit_pending(id) {
                tracing::error!(
                    session = %id,
                    error = %e,
                    "events appended with durability none could not be written when the lock was released"
                );
            }
            self.store.held.remove(path);
            if let Err(e) = std::fs::remove_file(path) {
                tracing::debug!(path = %path.display(), error = %e, "could not remove lock file");
            }
        }
        if let Err(e) = std::fs::remove_file(&self.path) {
            tracing::debug!(path = %self.path.display(), error = %e, "could not remove lock file");
        }
        // Released last: every link is gone by the time a waiter gets the lock.
        drop(self.file.take());
    }
}
