//! Exclusive `flock(2)` locks on lock files that may be unlinked while held.
//!
//! A lock file is unlinked by its holder when the session it guards no longer exists (after a
//! delete, or when a mutation found nothing), so that lock files never pile up. A waiter that
//! opened the old file could then lock an inode nobody else will ever look at; to rule that out,
//! every acquisition checks that the locked descriptor is still the file at the path, and
//! starts over otherwise.

use std::fs::{self, File, Permissions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::fsutil::{nofollow, FILE_MODE};

/// A held exclusive lock; released when dropped (and by the kernel when the process dies).
#[derive(Debug)]
pub(crate) struct Flock {
    /// Holding the descriptor is holding the lock; closing it releases it.
    _file: File,
    path: PathBuf,
}

impl Flock {
    /// One non-blocking attempt. `Ok(None)` when another open file description holds the lock
    /// (another process, or another handle in this process).
    pub fn try_acquire(path: &Path) -> io::Result<Option<Flock>> {
        loop {
            let file = open_lock_file(path)?;
            match file.try_lock() {
                Ok(()) => {}
                Err(fs::TryLockError::WouldBlock) => return Ok(None),
                Err(fs::TryLockError::Error(e)) => return Err(e),
            }
            let held = file.metadata()?;
            match fs::metadata(path) {
                Ok(now) if now.dev() == held.dev() && now.ino() == held.ino() => {
                    return Ok(Some(Flock {
                        _file: file,
                        path: path.to_owned(),
                    }))
                }
                // The previous holder unlinked the file after we opened it: our lock guards
                // nothing. Drop it and lock whatever is at the path now.
                Ok(_) => continue,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Unlinks the lock file while still holding it. Waiters that opened it notice the inode
    /// change when they get the lock, and start over on a fresh file.
    pub fn unlink(&self) -> io::Result<()> {
        match fs::remove_file(&self.path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }
}

fn open_lock_file(path: &Path) -> io::Result<File> {
    match nofollow().read(true).open(path) {
        Ok(f) => Ok(f),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            match nofollow()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(FILE_MODE)
                .open(path)
            {
                Ok(f) => {
                    f.set_permissions(Permissions::from_mode(FILE_MODE))?;
                    Ok(f)
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    nofollow().read(true).open(path)
                }
                Err(e) => Err(e),
            }
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exclusive_between_handles_of_one_process() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.lock");
        let a = Flock::try_acquire(&p).unwrap().expect("free");
        assert!(Flock::try_acquire(&p).unwrap().is_none());
        drop(a);
        assert!(Flock::try_acquire(&p).unwrap().is_some());
    }

    #[test]
    fn unlinked_lock_file_is_not_reused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.lock");
        let a = Flock::try_acquire(&p).unwrap().unwrap();
        a.unlink().unwrap();
        // While `a` still holds the old inode, a new locker gets the new file at the path.
        let b = Flock::try_acquire(&p).unwrap().expect("fresh file is free");
        assert!(p.exists());
        drop(a);
        assert!(
            Flock::try_acquire(&p).unwrap().is_none(),
            "b still holds it"
        );
        drop(b);
    }
}
