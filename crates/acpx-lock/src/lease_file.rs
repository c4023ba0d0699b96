//! A session's owner lease kept in a file beside its writer lock (`<id>.lease`): what the
//! file-based stores (files, SQLite) give as their [`acpx_model::SessionLeases`].
//!
//! The file holds one [`LeaseBook`] as JSON. A change takes an exclusive [`FileLock`] on the
//! file, reads it, and replaces it by atomic rename; the next locker finds the new file at
//! the path (the lock's inode check) and reads what was written. Readers need no lock: a
//! rename never shows a half-written file. The file is not fsynced: a lease is about live
//! processes, and after a crash of the machine none of them lives; a file a crash left
//! unreadable counts as a book whose generation is the current time in milliseconds, above
//! any generation handed out before, so no stale holder's fence can match it.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::Duration;

use acpx_model::{
    LeaseActivity, LeaseBook, LeaseGrant, LeaseHolder, OwnerLease, RecordId, StoreError,
    StoreResult, Timestamp,
};

use crate::{FileLock, LockError, LOCK_FILE_MODE};

/// How long a lease change waits for another change of the same lease.
const CHANGE_WAIT: Duration = Duration::from_secs(5);

/// Reads the book at `path`; a missing file is an empty book.
pub fn read_book(path: &Path) -> StoreResult<LeaseBook> {
    match fs::read(path) {
        Ok(bytes) if bytes.is_empty() => Ok(LeaseBook::default()),
        Ok(bytes) => Ok(serde_json::from_slice(&bytes).unwrap_or_else(|_| unreadable_book())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(LeaseBook::default()),
        Err(e) => Err(StoreError::io(path.display(), e)),
    }
}

fn unreadable_book() -> LeaseBook {
    LeaseBook {
        generation: u64::try_from(Timestamp::now().millis()).unwrap_or(u64::MAX / 2),
        lease: None,
    }
}

/// Applies `change` to the book at `path` under its lock and writes the result; returns what
/// `change` returned. `Err` from `change` writes nothing.
fn change<T>(path: &Path, change: impl FnOnce(&mut LeaseBook) -> StoreResult<T>) -> StoreResult<T> {
    let lock = FileLock::exclusive(path, CHANGE_WAIT).map_err(|e| match e {
        LockError::TimedOut { waited } => StoreError::io(
            path.display(),
            io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the lease file stayed locked for {waited:?}"),
            ),
        ),
        LockError::Io(e) => StoreError::io(path.display(), e),
    })?;
    let mut book = read_book(path)?;
    let out = change(&mut book)?;
    let tmp = path.with_extension(format!("lease.tmp-{}", std::process::id()));
    let bytes = serde_json::to_vec(&book).map_err(|e| StoreError::io(path.display(), e.into()))?;
    let written = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(LOCK_FILE_MODE)
        .open(&tmp)
        .and_then(|mut f| f.write_all(&bytes))
        .and_then(|()| fs::rename(&tmp, path));
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(StoreError::io(path.display(), e));
    }
    drop(lock);
    Ok(out)
}

/// [`acpx_model::SessionLeases::acquire_lease`] on the file at `path`.
pub fn acquire(
    path: &Path,
    id: &RecordId,
    holder: &LeaseHolder,
    ttl: Duration,
) -> StoreResult<LeaseGrant> {
    change(path, |b| Ok(b.acquire(id, holder, ttl, Timestamp::now())))
}

/// [`acpx_model::SessionLeases::renew_lease`] on the file at `path`.
pub fn renew(
    path: &Path,
    id: &RecordId,
    generation: u64,
    activity: &LeaseActivity,
    queue_depth: u32,
) -> StoreResult<OwnerLease> {
    change(path, |b| {
        b.renew(id, generation, activity, queue_depth, Timestamp::now())
    })
}

/// [`acpx_model::SessionLeases::release_lease`] on the file at `path`.
pub fn release(path: &Path, generation: u64) -> StoreResult<bool> {
    if !path.exists() {
        return Ok(false);
    }
    change(path, |b| Ok(b.release(generation)))
}

/// [`acpx_model::SessionLeases::read_lease`] on the file at `path`.
pub fn read(path: &Path) -> StoreResult<Option<OwnerLease>> {
    Ok(read_book(path)?.current(Timestamp::now()))
}

/// The fence check of an append under a lock carrying `generation`
/// ([`acpx_model::SessionLock::fence`]).
pub fn check_fence(path: &Path, id: &RecordId, generation: u64) -> StoreResult<()> {
    read_book(path)?.check_fence(id, generation)
}

/// What identifies one version of a lease file: every change replaces the file (a new
/// inode, times and size), so an unchanged stamp is an unchanged book.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileStamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i64,
    ctime_ns: i64,
}

fn stamp(path: &Path) -> io::Result<Option<FileStamp>> {
    use std::os::unix::fs::MetadataExt;
    match fs::metadata(path) {
        Ok(m) => Ok(Some(FileStamp {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime_ns: m.mtime() * 1_000_000_000 + m.mtime_nsec(),
            ctime_ns: m.ctime() * 1_000_000_000 + m.ctime_nsec(),
        })),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// The fence checks of one store: a lease file whose stamp has not changed since it passed
/// the check for a generation passes again without being read, so an append of a streamed
/// chunk costs one `stat`, not a read and a parse.
#[derive(Debug, Default)]
pub struct FenceChecks {
    passed: std::sync::Mutex<std::collections::HashMap<std::path::PathBuf, (FileStamp, u64)>>,
}

impl FenceChecks {
    /// [`check_fence`], remembering a pass.
    pub fn check(&self, path: &Path, id: &RecordId, generation: u64) -> StoreResult<()> {
        let now = stamp(path).map_err(|e| StoreError::io(path.display(), e))?;
        let mut passed = self.passed.lock().unwrap_or_else(|p| p.into_inner());
        if let (Some(now), Some((was, g))) = (now, passed.get(path)) {
            if now == *was && *g == generation {
                return Ok(());
            }
        }
        let result = check_fence(path, id, generation);
        match (&result, now) {
            // Stamped before the read: a change in between makes the next check read again.
            (Ok(()), Some(now)) => {
                passed.insert(path.to_owned(), (now, generation));
            }
            _ => {
                passed.remove(path);
            }
        }
        result
    }
}

/// Removes the lease file of a deleted session, unless a lease is held in it (the session's
/// owner is then still running and will release it).
pub fn remove_unheld(path: &Path) -> StoreResult<()> {
    if !path.exists() {
        return Ok(());
    }
    if read_book(path)?.lease.is_some() {
        return Ok(());
    }
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(StoreError::io(path.display(), e)),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(pid: u32) -> LeaseHolder {
        LeaseHolder {
            host: "h".into(),
            pid,
            started_at: Timestamp::now(),
            authority: None,
        }
    }

    #[test]
    fn the_file_keeps_the_generation_across_release_and_fences_a_stale_holder() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.lease");
        let id = RecordId::parse("s").unwrap();
        let ttl = Duration::from_secs(30);
        let LeaseGrant::Granted(a) = acquire(&path, &id, &holder(1), ttl).unwrap() else {
            panic!()
        };
        assert!(matches!(
            acquire(&path, &id, &holder(2), ttl).unwrap(),
            LeaseGrant::Held(_)
        ));
        assert!(release(&path, a.generation).unwrap());
        let LeaseGrant::Granted(b) = acquire(&path, &id, &holder(2), ttl).unwrap() else {
            panic!()
        };
        assert_eq!(b.generation, a.generation + 1);
        assert!(check_fence(&path, &id, a.generation).is_err());
        assert!(check_fence(&path, &id, b.generation).is_ok());
        let leftovers: Vec<_> = fs::read_dir(dir.path()).unwrap().flatten().collect();
        assert_eq!(leftovers.len(), 1, "no temp file is left");
    }

    #[test]
    fn an_unreadable_file_fences_every_earlier_generation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.lease");
        let id = RecordId::parse("s").unwrap();
        fs::write(&path, b"{torn").unwrap();
        assert!(check_fence(&path, &id, 1).is_err());
        let LeaseGrant::Granted(l) =
            acquire(&path, &id, &holder(1), Duration::from_secs(1)).unwrap()
        else {
            panic!()
        };
        assert!(l.generation > 1_000_000);
    }
}
