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

/// `<id>.lease.lock` beside `<id>.lease`: held by the lease's holder for as long as it holds
/// the lease, so a holder that died (however it died) is known at once by its free lock.
fn holder_lock_path(path: &Path) -> std::path::PathBuf {
    path.with_extension("lease.lock")
}

/// The holder locks of the leases one store (and its clones) holds.
#[derive(Debug, Default)]
pub struct HolderLocks(std::sync::Mutex<std::collections::HashMap<std::path::PathBuf, FileLock>>);

impl HolderLocks {
    fn map(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<std::path::PathBuf, FileLock>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// [`acpx_model::SessionLeases::acquire_lease`] on the file at `path`: the holder lock
    /// taken means any earlier holder is gone, and its lease is taken over at once; a held
    /// one means a live holder, unless its heartbeat lapsed (a process frozen for the whole
    /// TTL: it is not taken over while it holds the lock, since its writer lock stays held
    /// too; docs/format.md § Owner lease).
    pub fn acquire(
        &self,
        path: &Path,
        id: &RecordId,
        holder: &LeaseHolder,
        ttl: Duration,
    ) -> StoreResult<LeaseGrant> {
        let lock_path = holder_lock_path(path);
        let lock = FileLock::try_exclusive(&lock_path)
            .map_err(|e| StoreError::io(lock_path.display(), e))?;
        let Some(lock) = lock else {
            // A live holder's lock: its lease is held, unless its heartbeat lapsed (a
            // process frozen for the whole TTL), which is taken over and fenced; the new
            // holder takes the lock once the frozen one lets it go (`renew`).
            match read_book(path)?.current(Timestamp::now()) {
                Some(l) if !l.lapsed => return Ok(LeaseGrant::Held(l)),
                // Its holder is between taking the lock and writing the book.
                None => return Ok(LeaseGrant::Held(placeholder(id, holder, ttl))),
                Some(_) => {}
            }
            return change(path, |b| Ok(b.acquire(id, holder, ttl, Timestamp::now())));
        };
        let grant = change(path, |b| {
            Ok(b.acquire_unless_held(id, holder, ttl, Timestamp::now(), false))
        })?;
        if let LeaseGrant::Granted(_) = &grant {
            self.map().insert(path.to_owned(), lock);
        }
        Ok(grant)
    }

    /// [`acpx_model::SessionLeases::renew_lease`] on the file at `path`; a holder that took
    /// over a frozen holder's lease takes the holder lock as soon as it is free.
    pub fn renew(
        &self,
        path: &Path,
        id: &RecordId,
        generation: u64,
        activity: &LeaseActivity,
        queue_depth: u32,
    ) -> StoreResult<OwnerLease> {
        let lease = renew(path, id, generation, activity, queue_depth)?;
        let mut held = self.map();
        if !held.contains_key(path) {
            let lock_path = holder_lock_path(path);
            if let Some(lock) = FileLock::try_exclusive(&lock_path)
                .map_err(|e| StoreError::io(lock_path.display(), e))?
            {
                held.insert(path.to_owned(), lock);
            }
        }
        Ok(lease)
    }

    /// [`acpx_model::SessionLeases::release_lease`] on the file at `path`.
    pub fn release(&self, path: &Path, generation: u64) -> StoreResult<bool> {
        let released = release(path, generation)?;
        if released {
            // Unlinked while held: a waiter that opened it notices, and no lock file stays
            // behind per session that once had an owner.
            if let Some(lock) = self.map().remove(path) {
                let _ = lock.unlink();
            }
        }
        Ok(released)
    }

    /// [`acpx_model::SessionLeases::read_lease`] on the file at `path`: a lease whose holder
    /// lock is free has lapsed, whatever its heartbeat says.
    pub fn read(&self, path: &Path) -> StoreResult<Option<OwnerLease>> {
        let Some(mut lease) = read(path)? else {
            return Ok(None);
        };
        if !lease.lapsed && !self.map().contains_key(path) {
            let lock_path = holder_lock_path(path);
            let free = FileLock::try_shared(&lock_path)
                .map_err(|e| StoreError::io(lock_path.display(), e))?
                .is_some();
            lease.lapsed = free;
        }
        Ok(Some(lease))
    }
}

/// What a lease being acquired right now looks like to another acquirer.
fn placeholder(id: &RecordId, holder: &LeaseHolder, ttl: Duration) -> OwnerLease {
    let now = Timestamp::now();
    let mut book = LeaseBook::default();
    match book.acquire(id, holder, ttl, now) {
        LeaseGrant::Granted(mut l) | LeaseGrant::Held(mut l) => {
            l.generation = 0;
            l
        }
    }
}

/// Renews the lease of `generation` in the file at `path`.
fn renew(
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

/// Releases the lease of `generation` in the file at `path` (the holder lock is the
/// caller's to drop: [`HolderLocks::release`]).
fn release(path: &Path, generation: u64) -> StoreResult<bool> {
    if !path.exists() {
        return Ok(false);
    }
    change(path, |b| Ok(b.release(generation)))
}

/// The lease in the file at `path`, lapsed by its heartbeat only.
fn read(path: &Path) -> StoreResult<Option<OwnerLease>> {
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
    for p in [path.to_owned(), holder_lock_path(path)] {
        match fs::remove_file(&p) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                return Err(StoreError::io(p.display(), e))
            }
            _ => {}
        }
    }
    Ok(())
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
        let (one, two) = (HolderLocks::default(), HolderLocks::default());
        let LeaseGrant::Granted(a) = one.acquire(&path, &id, &holder(1), ttl).unwrap() else {
            panic!()
        };
        assert!(matches!(
            two.acquire(&path, &id, &holder(2), ttl).unwrap(),
            LeaseGrant::Held(_)
        ));
        assert!(one.release(&path, a.generation).unwrap());
        let LeaseGrant::Granted(b) = two.acquire(&path, &id, &holder(2), ttl).unwrap() else {
            panic!()
        };
        assert_eq!(b.generation, a.generation + 1);
        assert!(check_fence(&path, &id, a.generation).is_err());
        assert!(check_fence(&path, &id, b.generation).is_ok());
        let mut left: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["s.lease", "s.lease.lock"], "no temp file is left");
    }

    #[test]
    fn a_holder_that_is_gone_is_taken_over_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.lease");
        let id = RecordId::parse("s").unwrap();
        let ttl = Duration::from_secs(600);
        let dead = HolderLocks::default();
        let LeaseGrant::Granted(a) = dead.acquire(&path, &id, &holder(1), ttl).unwrap() else {
            panic!()
        };
        let other = HolderLocks::default();
        assert!(!other.read(&path).unwrap().unwrap().lapsed);
        drop(dead); // the holder's process is gone: its lock with it
        assert!(other.read(&path).unwrap().unwrap().lapsed);
        let LeaseGrant::Granted(b) = other.acquire(&path, &id, &holder(2), ttl).unwrap() else {
            panic!("a dead holder's lease is taken over before its TTL")
        };
        assert_eq!(b.generation, a.generation + 1);
    }

    #[test]
    fn an_unreadable_file_fences_every_earlier_generation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.lease");
        let id = RecordId::parse("s").unwrap();
        fs::write(&path, b"{torn").unwrap();
        assert!(check_fence(&path, &id, 1).is_err());
        let LeaseGrant::Granted(l) = HolderLocks::default()
            .acquire(&path, &id, &holder(1), Duration::from_secs(1))
            .unwrap()
        else {
            panic!()
        };
        assert!(l.generation > 1_000_000);
    }
}
