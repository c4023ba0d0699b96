//! Cross-process writer locks on lock files: one implementation for every acpx store backend
//! and for the CLI's run and scope locks.
//!
//! A [`FileLock`] is an `flock(2)` on a file, taken through [`std::fs::File::try_lock`] and
//! friends. Holding the open file is holding the lock: dropping the [`FileLock`] closes it, and
//! the kernel releases it when the process dies, however it dies, so a crashed holder never
//! leaves a lock behind.
//!
//! Lock files may be unlinked by their holder (a store removes the lock file of a session that
//! no longer exists, so that lock files never pile up). A waiter that opened the old file could
//! then lock an inode nobody else will ever look at; to rule that out, every acquisition checks
//! that the locked descriptor is still the file at the path (same device and inode), and
//! starts over on the new file otherwise. Lock files are opened with `O_NOFOLLOW`: a symbolic
//! link planted at the path is refused (`ELOOP`), never followed. New lock files get mode 0600
//! (set with `chmod`, so the umask cannot widen it).
//!
//! ```
//! use std::time::Duration;
//! use acpx_lock::FileLock;
//!
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("session.lock");
//! let held = FileLock::exclusive(&path, Duration::from_millis(10))?;
//! // A second locker (another process, or another open file in this one) has to wait.
//! assert!(FileLock::try_exclusive(&path)?.is_none());
//! drop(held);
//! assert!(FileLock::try_exclusive(&path)?.is_some());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod batch;
pub mod lease_file;
mod session_dir;

pub use batch::BatchLock;
pub use session_dir::{SessionLockDir, TakenLock};

use std::fmt;
use std::fs::{self, File, OpenOptions, Permissions, TryLockError};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Mode of the lock files this crate creates.
pub const LOCK_FILE_MODE: u32 = 0o600;

/// Longest pause between two attempts of [`FileLock::exclusive`].
const MAX_BACKOFF: Duration = Duration::from_millis(50);

/// A held `flock` on a lock file; released when dropped, and by the kernel when the process
/// dies.
#[derive(Debug)]
pub struct FileLock {
    /// Holding the descriptor is holding the lock; closing it releases it.
    file: File,
    path: PathBuf,
}

/// Why [`FileLock::exclusive`] gave up.
#[derive(Debug)]
pub enum LockError {
    /// Someone else held the lock for the whole timeout.
    TimedOut {
        /// How long the call waited.
        waited: Duration,
    },
    /// Opening, locking or inspecting the lock file failed.
    Io(io::Error),
}

impl fmt::Display for LockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LockError::TimedOut { waited } => {
                write!(f, "the lock is held by someone else (waited {waited:?})")
            }
            LockError::Io(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for LockError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LockError::TimedOut { .. } => None,
            LockError::Io(e) => Some(e),
        }
    }
}

impl From<io::Error> for LockError {
    fn from(e: io::Error) -> Self {
        LockError::Io(e)
    }
}

/// Which kind of `flock` an attempt asks for.
#[derive(Clone, Copy)]
enum Kind {
    Exclusive,
    Shared,
}

impl FileLock {
    /// One non-blocking attempt at the exclusive lock on `path` (created if missing).
    /// `Ok(None)` when another open file description holds it (another process, or another
    /// handle in this process).
    pub fn try_exclusive(path: &Path) -> io::Result<Option<FileLock>> {
        Self::try_kind(path, Kind::Exclusive)
    }

    /// One non-blocking attempt at a shared lock on `path` (created if missing): it succeeds
    /// unless someone holds the exclusive lock. Used to ask "is anyone holding it?" without
    /// taking it from them.
    pub fn try_shared(path: &Path) -> io::Result<Option<FileLock>> {
        Self::try_kind(path, Kind::Shared)
    }

    /// Takes the exclusive lock on `path`, polling with backoff (1 ms doubling to 50 ms) for
    /// up to `timeout`, then failing with [`LockError::TimedOut`].
    pub fn exclusive(path: &Path, timeout: Duration) -> Result<FileLock, LockError> {
        let started = Instant::now();
        let mut backoff = Duration::from_millis(1);
        loop {
            if let Some(lock) = Self::try_exclusive(path)? {
                return Ok(lock);
            }
            let waited = started.elapsed();
            if waited >= timeout {
                return Err(LockError::TimedOut { waited });
            }
            std::thread::sleep(backoff.min(timeout - waited));
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// Takes the exclusive lock on `path`, blocking the thread for as long as it takes. Run it
    /// where blocking is allowed (`tokio::task::spawn_blocking`).
    pub fn exclusive_blocking(path: &Path) -> io::Result<FileLock> {
        loop {
            let file = open_lock_file(path)?;
            loop {
                match file.lock() {
                    Ok(()) => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                }
            }
            if let Some(lock) = Self::still_at_path(file, path)? {
                return Ok(lock);
            }
        }
    }

    /// The path the lock file was opened at.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Unlinks the lock file while still holding it. Waiters that opened it notice the inode
    /// change when they get the lock, and start over on a fresh file. A file already gone is
    /// not an error.
    pub fn unlink(&self) -> io::Result<()> {
        match fs::remove_file(&self.path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    fn try_kind(path: &Path, kind: Kind) -> io::Result<Option<FileLock>> {
        loop {
            let file = open_lock_file(path)?;
            let attempt = match kind {
                Kind::Exclusive => file.try_lock(),
                Kind::Shared => file.try_lock_shared(),
            };
            match attempt {
                Ok(()) => {}
                Err(TryLockError::WouldBlock) => return Ok(None),
                Err(TryLockError::Error(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(TryLockError::Error(e)) => return Err(e),
            }
            if let Some(lock) = Self::still_at_path(file, path)? {
                return Ok(Some(lock));
            }
        }
    }

    /// The lock just taken on `file`, if `file` is still the file at `path`; `None` when the
    /// previous holder unlinked it after we opened it (our lock then guards nothing: the caller
    /// drops it and locks whatever is at the path now).
    fn still_at_path(file: File, path: &Path) -> io::Result<Option<FileLock>> {
        let held = file.metadata()?;
        match fs::symlink_metadata(path) {
            Ok(now) if now.dev() == held.dev() && now.ino() == held.ino() => Ok(Some(FileLock {
                file,
                path: path.to_owned(),
            })),
            Ok(_) => Ok(None),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }
}

impl FileLock {
    /// The open lock file (for `fstat`; closing it is only done by dropping the lock).
    pub fn file(&self) -> &File {
        &self.file
    }
}

/// `OpenOptions` that refuse to open a symbolic link (`O_NOFOLLOW`, failing with `ELOOP`).
fn nofollow() -> OpenOptions {
    let mut o = OpenOptions::new();
    o.custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32);
    o
}

/// Opens the lock file at `path`, creating it (mode 0600) if missing. An existing file is
/// opened read-only: `flock` needs no write access, so a lock can be taken in a store the
/// caller may only read.
fn open_lock_file(path: &Path) -> io::Result<File> {
    loop {
        match nofollow().read(true).open(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            other => return other,
        }
        match nofollow()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(LOCK_FILE_MODE)
            .open(path)
        {
            Ok(f) => {
                f.set_permissions(Permissions::from_mode(LOCK_FILE_MODE))?;
                return Ok(f);
            }
            // Another locker created it between our two opens, and may already have unlinked
            // it again on release (opening it then failed with "not found", which a save
            // reported as an I/O error): start over.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Whether an I/O error is `ELOOP`: what opening a symbolic link with `O_NOFOLLOW` gives.
pub fn is_symlink_refusal(e: &io::Error) -> bool {
    e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error())
}

/// The real user id of this process (for private per-user directories such as
/// `/tmp/acpx-<uid>`).
pub fn current_uid() -> u32 {
    rustix::process::getuid().as_raw()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exclusive_between_handles_of_one_process() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.lock");
        let a = FileLock::try_exclusive(&p).unwrap().expect("free");
        assert!(FileLock::try_exclusive(&p).unwrap().is_none());
        assert!(FileLock::try_shared(&p).unwrap().is_none());
        drop(a);
        assert!(FileLock::try_exclusive(&p).unwrap().is_some());
    }

    #[test]
    fn shared_locks_coexist_and_exclude_the_exclusive_one() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.lock");
        let a = FileLock::try_shared(&p).unwrap().expect("free");
        let b = FileLock::try_shared(&p).unwrap().expect("shared twice");
        assert!(FileLock::try_exclusive(&p).unwrap().is_none());
        drop((a, b));
        assert!(FileLock::try_exclusive(&p).unwrap().is_some());
    }

    #[test]
    fn lockers_that_unlink_on_release_never_see_the_file_vanish() {
        // Found by the conformance suite: a locker whose create lost the race to another one
        // opened the file the other had created, which it had meanwhile unlinked on release.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("race.lock");
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let path = path.clone();
                std::thread::spawn(move || {
                    for _ in 0..300 {
                        let lock = FileLock::exclusive(&path, Duration::from_secs(10))?;
                        lock.unlink()?;
                    }
                    Ok::<(), LockError>(())
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap().unwrap();
        }
    }

    #[test]
    fn unlinked_lock_file_is_not_reused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.lock");
        let a = FileLock::try_exclusive(&p).unwrap().unwrap();
        a.unlink().unwrap();
        a.unlink().unwrap();
        // While `a` still holds the old inode, a new locker gets the new file at the path.
        let b = FileLock::try_exclusive(&p)
            .unwrap()
            .expect("fresh file is free");
        assert!(p.exists());
        drop(a);
        assert!(
            FileLock::try_exclusive(&p).unwrap().is_none(),
            "b still holds it"
        );
        drop(b);
    }

    #[test]
    fn a_waiter_on_an_unlinked_file_moves_to_the_new_one() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.lock");
        let a = FileLock::try_exclusive(&p).unwrap().unwrap();
        let waiter = {
            let p = p.clone();
            std::thread::spawn(move || FileLock::exclusive_blocking(&p).unwrap())
        };
        std::thread::sleep(Duration::from_millis(50));
        a.unlink().unwrap();
        drop(a);
        let got = waiter.join().unwrap();
        let at_path = fs::metadata(&p).unwrap();
        assert_eq!(got.file().metadata().unwrap().ino(), at_path.ino());
    }

    #[test]
    fn exclusive_times_out_then_succeeds_once_released() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.lock");
        let a = FileLock::try_exclusive(&p).unwrap().unwrap();
        match FileLock::exclusive(&p, Duration::from_millis(30)) {
            Err(LockError::TimedOut { waited }) => assert!(waited >= Duration::from_millis(30)),
            other => panic!("expected a timeout, got {other:?}"),
        }
        let releaser = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            drop(a);
        });
        assert!(FileLock::exclusive(&p, Duration::from_secs(5)).is_ok());
        releaser.join().unwrap();
    }

    #[test]
    fn new_lock_files_are_private() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.lock");
        let _a = FileLock::try_exclusive(&p).unwrap().unwrap();
        assert_eq!(fs::metadata(&p).unwrap().mode() & 0o777, LOCK_FILE_MODE);
    }

    #[test]
    fn symlinks_are_refused_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("elsewhere");
        let p = dir.path().join("x.lock");
        std::os::unix::fs::symlink(&target, &p).unwrap();
        let e = FileLock::try_exclusive(&p).unwrap_err();
        assert!(is_symlink_refusal(&e), "{e}");
        assert!(!target.exists(), "the link target was created");
    }

    #[test]
    fn current_uid_owns_the_files_we_create() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(fs::metadata(dir.path()).unwrap().uid(), current_uid());
    }
}

// The README's examples are compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
