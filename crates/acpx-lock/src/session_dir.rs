//! The per-session lock files of a store ([`SessionLockDir`]): `<dir>/<id>.lock`, one
//! exclusive [`FileLock`] a session, what the file and SQLite stores take as a session's
//! writer lock.
//!
//! A store removes a session's lock file when it is done with it (lock files do not pile up,
//! one per session ever written); [`SessionLockDir::try_lock`] says whether the lock it took
//! made the file, so that its holder knows to remove it on release. [`SessionLockDir::lock`]
//! makes the directory again when it was removed while the store was open.

use std::fs::DirBuilder;
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use acpx_model::RecordId;

use crate::{FileLock, LockError};

/// Mode of a lock directory this crate creates.
const DIR_MODE: u32 = 0o700;

/// The directory of a store's per-session lock files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionLockDir {
    dir: PathBuf,
}

/// A session's lock taken by [`SessionLockDir::try_lock`].
#[derive(Debug)]
pub struct TakenLock {
    /// The held lock.
    pub lock: FileLock,
    /// Whether the lock file did not exist before this call (its holder removes it again).
    pub created: bool,
}

impl SessionLockDir {
    /// The lock files under `dir` (not created: see [`SessionLockDir::create`]).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        SessionLockDir { dir: dir.into() }
    }

    /// The lock files under `dir`, created with its missing parents (mode 0700) if needed.
    pub fn create(dir: impl Into<PathBuf>) -> io::Result<Self> {
        let dir = SessionLockDir::new(dir);
        dir.make()?;
        Ok(dir)
    }

    /// Makes the directory (and its missing parents, mode 0700) if it is missing: where a
    /// store keeps files of its own beside the locks.
    pub fn make(&self) -> io::Result<()> {
        DirBuilder::new()
            .recursive(true)
            .mode(DIR_MODE)
            .create(&self.dir)
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `<dir>/<id>.lock`.
    pub fn path(&self, id: &RecordId) -> PathBuf {
        self.dir.join(format!("{id}.lock"))
    }

    /// One non-blocking attempt at session `id`'s lock; `Ok(None)` when someone holds it.
    pub fn try_lock(&self, id: &RecordId) -> io::Result<Option<TakenLock>> {
        let path = self.path(id);
        let existed =
            !matches!(path.symlink_metadata(), Err(e) if e.kind() == io::ErrorKind::NotFound);
        Ok(FileLock::try_exclusive(&path)?.map(|lock| TakenLock {
            lock,
            created: !existed,
        }))
    }

    /// Takes session `id`'s lock, waiting up to `timeout` ([`FileLock::exclusive`]); a lock
    /// directory removed while the store was open is made again.
    pub fn lock(&self, id: &RecordId, timeout: Duration) -> Result<FileLock, LockError> {
        let path = self.path(id);
        match FileLock::exclusive(&path, timeout) {
            Err(LockError::Io(e)) if e.kind() == io::ErrorKind::NotFound => {
                self.make()?;
                FileLock::exclusive(&path, timeout)
            }
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_says_whether_it_made_the_file_and_excludes_others() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = SessionLockDir::create(tmp.path().join("locks")).unwrap();
        let id = RecordId::parse("s1").unwrap();
        let first = dir.try_lock(&id).unwrap().unwrap();
        assert!(first.created);
        assert_eq!(first.lock.path(), tmp.path().join("locks/s1.lock"));
        assert!(dir.try_lock(&id).unwrap().is_none());
        let err = dir.lock(&id, Duration::from_millis(5)).unwrap_err();
        assert!(matches!(err, LockError::TimedOut { .. }), "{err}");
        drop(first);
        let again = dir.try_lock(&id).unwrap().unwrap();
        assert!(!again.created);
    }

    #[test]
    fn a_removed_directory_is_made_again_by_a_waiting_lock() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = SessionLockDir::create(tmp.path().join("locks")).unwrap();
        std::fs::remove_dir(dir.dir()).unwrap();
        let id = RecordId::parse("s1").unwrap();
        let lock = dir.lock(&id, Duration::from_millis(5)).unwrap();
        assert!(lock.path().exists());
    }
}
