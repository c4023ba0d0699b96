//! Per-session writer locks: `flock` on `<db>.locks/<id>.lock`.
//!
//! `flock` locks are released by the kernel when the process dies, so a crashed writer never
//! leaves a session locked. Locks taken through [`acpx_model::Store::lock`] are also recorded
//! in the store's [`HeldLocks`] (shared by its clones): a mutation made through that store while
//! the lock is held goes ahead without locking again (the holder is the caller, see the
//! `Store` trait), while any other mutation, including one through a separately opened store
//! in the same process, takes the lock for the duration of the call.

use std::collections::HashSet;
use std::fs::{File, OpenOptions, TryLockError};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use acpx_model::{LockGuard, RecordId, StoreError, StoreResult};

/// Lock files held through `Store::lock` by one store and its clones.
#[derive(Debug, Clone, Default)]
pub(crate) struct HeldLocks(Arc<Mutex<HashSet<PathBuf>>>);

impl HeldLocks {
    fn set(&self) -> MutexGuard<'_, HashSet<PathBuf>> {
        // The set stays consistent even if a holder panicked.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether this store holds the lock file at `path` through `Store::lock`.
    pub(crate) fn contains(&self, path: &Path) -> bool {
        self.set().contains(path)
    }
}

/// An acquired `flock` on a lock file; dropping it closes the file, which releases the lock.
#[derive(Debug)]
pub(crate) struct FileLock {
    /// Never read: owning the open file is what holds the lock.
    _file: File,
    path: PathBuf,
}

impl FileLock {
    /// Takes the exclusive lock on `path`, polling with backoff until `timeout`.
    pub(crate) fn acquire(path: &Path, id: &RecordId, timeout: Duration) -> StoreResult<Self> {
        let started = Instant::now();
        let mut backoff = Duration::from_millis(1);
        let mut file = open_lock_file(path)?;
        loop {
            match file.try_lock() {
                Ok(()) => {
                    // A deleter may have unlinked the file while we waited on it: the lock we
                    // now hold is on an orphan inode that nobody else will ever look at. Only
                    // a lock on the file that is at `path` right now counts.
                    if same_file(&file, path)? {
                        return Ok(FileLock {
                            _file: file,
                            path: path.to_owned(),
                        });
                    }
                    file = open_lock_file(path)?;
                    continue;
                }
                Err(TryLockError::WouldBlock) => {}
                Err(TryLockError::Error(e)) => return Err(StoreError::io(path.display(), e)),
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

    /// Removes the lock file while still holding the lock (used when the session is deleted).
    /// Waiters on the old file notice the unlink and start over on a fresh file.
    pub(crate) fn remove_file(&self) {
        if let Err(e) = std::fs::remove_file(&self.path) {
            tracing::debug!(path = %self.path.display(), error = %e, "could not remove lock file");
        }
    }

    /// Turns this lock into a `Store::lock` guard, recorded in the store's held locks.
    pub(crate) fn into_session_guard(self, held: &HeldLocks) -> SqliteLockGuard {
        held.set().insert(self.path.clone());
        SqliteLockGuard {
            lock: Some(self),
            held: held.clone(),
        }
    }
}

fn open_lock_file(path: &Path) -> StoreResult<File> {
    let open = || {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(path)
    };
    match open() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // The lock directory was removed while the store was open: make it again.
            if let Some(dir) = path.parent() {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(dir)
                    .map_err(|e| StoreError::io(dir.display(), e))?;
            }
            open()
        }
        other => other,
    }
    .map_err(|e| StoreError::io(path.display(), e))
}

fn same_file(file: &File, path: &Path) -> StoreResult<bool> {
    let open = file
        .metadata()
        .map_err(|e| StoreError::io(path.display(), e))?;
    match std::fs::metadata(path) {
        Ok(now) => Ok(now.ino() == open.ino() && now.dev() == open.dev()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(StoreError::io(path.display(), e)),
    }
}

/// The guard behind a [`acpx_model::SessionLock`] of this backend.
#[derive(Debug)]
pub(crate) struct SqliteLockGuard {
    lock: Option<FileLock>,
    held: HeldLocks,
}

impl LockGuard for SqliteLockGuard {}

impl Drop for SqliteLockGuard {
    fn drop(&mut self) {
        if let Some(lock) = self.lock.take() {
            // Unregister first: a mutation that starts now must take the file lock itself,
            // and it will get it as soon as the file is closed just below.
            self.held.set().remove(&lock.path);
            drop(lock);
        }
    }
}
