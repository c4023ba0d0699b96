//! `Store::lock_many` for SQLite: the writer locks of many sessions through one lock file, as
//! the file store takes them: an [`acpx_lock::BatchLock`] `<db>.locks/.batch.<n>.lock` with each
//! session's `<id>.lock` a hard link to it, so that no inode is created and freed per session
//! (a migration from SQLite locks every session of the store). A session whose lock file is
//! held is locked the ordinary way.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use acpx_lock::BatchLock;
use acpx_model::{LockGuard, RecordId, StoreError, StoreResult};

use crate::lock::{self, SqliteLockGuard};
use crate::Inner;

/// The held locks of a batch; released when dropped.
pub(crate) struct SqliteBatchGuard {
    /// Releasing a session's lock commits the events buffered under it (`pending`).
    store: Arc<Inner>,
    /// Dropped after the links are removed (see `Drop`).
    batch: Option<BatchLock>,
    linked: Vec<(RecordId, PathBuf)>,
    _guards: Vec<SqliteLockGuard>,
}

impl std::fmt::Debug for SqliteBatchGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteBatchGuard")
            .field("batch", &self.batch)
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
        let path = self.locks.dir().join(name);
        let batch = BatchLock::create(path.clone()).map_err(|e| io(&path, e))?;
        let mut guard = SqliteBatchGuard {
            store: Arc::clone(self),
            batch,
            linked: Vec::with_capacity(ids.len()),
            _guards: Vec::new(),
        };
        for id in ids {
            let lock_path = self.lock_path(id);
            // Without a batch file (a fresh name someone holds: never expected), every session
            // is locked the ordinary way.
            let linked = match &guard.batch {
                Some(b) => b.link(&lock_path).map_err(|e| io(&lock_path, e))?,
                None => false,
            };
            if linked {
                self.held.insert(lock_path.clone(), ());
                guard.linked.push((id.clone(), lock_path));
            } else {
                let l = lock::acquire(&self.locks, id, timeout)?;
                guard
                    ._guards
                    .push(lock::session_guard(l, Arc::clone(self), id.clone()));
            }
        }
        Ok(guard)
    }
}

impl Drop for SqliteBatchGuard {
    fn drop(&mut self) {
        for (id, path) in &self.linked {
            lock::commit_before_release(&self.store, id);
            self.store.held.remove(path);
            if let Err(e) = std::fs::remove_file(path) {
                tracing::debug!(path = %path.display(), error = %e, "could not remove lock file");
            }
        }
        // The batch file goes, and the lock with it, once every link is gone.
        drop(self.batch.take());
    }
}
