//! The locks of many paths through one lock file ([`BatchLock`]).
//!
//! Creating and removing one lock file per lock costs an inode each, which on some file
//! systems is the largest cost of writing many small sessions (ext4 without a journal skips
//! every recently freed inode when it allocates one). A batch creates one file, takes its
//! `flock`, and makes each lock path a hard link to it ([`BatchLock::link`]): every other
//! locker that opens the path gets the batch's inode and waits for the batch's lock, exactly as
//! if the path's own file were held. Its holder removes the links, then the batch file is
//! removed and the lock released (dropping the [`BatchLock`]); a waiter that locked a link
//! notices, by inode, that it is no longer the file at the path and starts over on a new one,
//! as after any unlink of a lock file (see the crate docs).

use std::io;
use std::path::{Path, PathBuf};

use crate::FileLock;

/// One held lock file standing for the lock files linked to it. Dropping it removes the batch
/// file, then releases the lock: remove the links first.
#[derive(Debug)]
pub struct BatchLock {
    path: PathBuf,
    file: Option<FileLock>,
}

impl BatchLock {
    /// Creates (if needed) and locks the batch file `path`, which should be a fresh name.
    /// `None` when someone else holds it.
    pub fn create(path: PathBuf) -> io::Result<Option<BatchLock>> {
        Ok(FileLock::try_exclusive(&path)?.map(|file| BatchLock {
            path,
            file: Some(file),
        }))
    }

    /// The batch file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Makes `lock_path` a hard link to the batch file, so that its lockers wait for the
    /// batch; `Ok(false)` when its lock is held by someone else, to be waited for the ordinary
    /// way. A free lock file already there is left over (by a holder that died, maybe a batch
    /// whose links all share one inode: locking two of them would make this batch wait for
    /// itself), so it is removed while held, as any holder may, and the link made again.
    pub fn link(&self, lock_path: &Path) -> io::Result<bool> {
        let mut cleared = false;
        loop {
            match std::fs::hard_link(&self.path, lock_path) {
                Ok(()) => return Ok(true),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && !cleared => {
                    match FileLock::try_exclusive(lock_path)? {
                        Some(free) => {
                            free.unlink()?;
                            cleared = true;
                        }
                        None => return Ok(false),
                    }
                }
                // Someone made a new one meanwhile: theirs to wait for.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(false),
                Err(e) => return Err(e),
            }
        }
    }
}

impl Drop for BatchLock {
    fn drop(&mut self) {
        // A batch file that cannot be removed is harmless: nobody holds it once this process
        // ends, and the next batch that meets one of its links replaces it (see `link`).
        let _ = std::fs::remove_file(&self.path);
        // Released last: every link is gone by the time a waiter gets the lock.
        drop(self.file.take());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_makes_lockers_wait_for_the_batch_and_a_free_leftover_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let held = dir.path().join("held.lock");
        let left = dir.path().join("left.lock");
        let fresh = dir.path().join("fresh.lock");
        let holder = FileLock::try_exclusive(&held).unwrap().unwrap();
        std::fs::write(&left, b"").unwrap();
        let batch = BatchLock::create(dir.path().join(".batch.x.lock"))
            .unwrap()
            .unwrap();
        assert!(!batch.link(&held).unwrap(), "a held lock is waited for");
        assert!(batch.link(&left).unwrap(), "a free leftover is replaced");
        assert!(batch.link(&fresh).unwrap());
        for p in [&left, &fresh] {
            assert!(FileLock::try_exclusive(p).unwrap().is_none(), "{p:?}");
        }
        for p in [&left, &fresh] {
            std::fs::remove_file(p).unwrap();
        }
        drop(batch);
        drop(holder);
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["held.lock"]);
        assert!(FileLock::try_exclusive(&left).unwrap().is_some());
    }
}
