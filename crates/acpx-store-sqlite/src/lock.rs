//! Per-session writer locks: an [`acpx_lock::FileLock`] on `<db>.locks/<id>.lock`.
//!
//! The lock is released by the kernel when the process dies, so a crashed writer never leaves
//! a session locked. Locks taken through [`acpx_model::Store::lock`] are also recorded in the
//! store's [`HeldLocks`] (shared by its clones): a mutation made through that store while the
//! lock is held goes ahead without locking again (the holder is the caller, see the `Store`
//! trait), while any other mutation, including one through a separately opened store in the
//! same process, takes the lock for the duration of the call.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use acpx_lock::{FileLock, LockError, SessionLockDir};
use acpx_model::{LockGuard, RecordId, StoreError, StoreResult};

use crate::Inner;

/// Lock files held through `Store::lock` by one store and its clones, and the issuer token
/// their [`acpx_model::SessionLock`]s carry.
pub(crate) type HeldLocks = acpx_store_sql::HeldLocks<PathBuf>;

/// Takes the exclusive lock of session `id` in `locks`, polling with backoff until `timeout`
/// (a lock directory removed while the store was open is made again).
pub(crate) fn acquire(
    locks: &SessionLockDir,
    id: &RecordId,
    timeout: Duration,
) -> StoreResult<FileLock> {
    locks.lock(id, timeout).map_err(|e| match e {
        LockError::TimedOut { waited } => StoreError::Locked {
            id: id.clone(),
            waited,
        },
        LockError::Io(e) => StoreError::io(locks.path(id).display(), e),
    })
}

/// Removes the lock file while still holding the lock (when the session is deleted, and on
/// every release: lock files are not left behind, one per session ever written). Waiters on
/// the old file notice the unlink ([`acpx_lock`] re-checks the inode after acquiring) and
/// start over on a fresh file.
pub(crate) fn remove_lock_file(lock: &FileLock) {
    if let Err(e) = lock.unlink() {
        tracing::debug!(path = %lock.path().display(), error = %e, "could not remove lock file");
    }
}

/// What releasing session `id`'s lock does first: the events buffered under it (`pending`)
/// are written while the lock still guards the log.
pub(crate) fn commit_before_release(store: &Inner, id: &RecordId) {
    if let Err(e) = store.commit_pending(id) {
        tracing::error!(
            session = %id,
            error = %e,
            "events appended with durability none could not be written when the lock was released"
        );
    }
}

/// Turns a lock into a `Store::lock` guard, recorded in the store's held locks.
pub(crate) fn session_guard(lock: FileLock, store: Arc<Inner>, id: RecordId) -> SqliteLockGuard {
    store.held.insert(lock.path().to_owned(), ());
    SqliteLockGuard {
        lock: Some(lock),
        store,
        id,
    }
}

/// The guard behind a [`acpx_model::SessionLock`] of this backend. It keeps the store alive:
/// releasing the lock commits the events buffered under it (`pending`).
pub(crate) struct SqliteLockGuard {
    lock: Option<FileLock>,
    store: Arc<Inner>,
    id: RecordId,
}

impl std::fmt::Debug for SqliteLockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteLockGuard")
            .field("id", &self.id)
            .field("lock", &self.lock)
            .finish_non_exhaustive()
    }
}

impl LockGuard for SqliteLockGuard {}

impl Drop for SqliteLockGuard {
    fn drop(&mut self) {
        if let Some(lock) = self.lock.take() {
            commit_before_release(&self.store, &self.id);
            // Unregister first: a mutation that starts now must take the file lock itself,
            // and it will get it as soon as the file is closed just below.
            self.store.held.remove(lock.path());
            remove_lock_file(&lock);
            drop(lock);
        }
    }
}
