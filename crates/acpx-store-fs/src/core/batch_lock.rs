//! The writer locks of a batch of sessions through one lock file (`create_sessions`,
//! `lock_many`): an [`acpx_lock::BatchLock`] with each session's `<id>.lock` a hard link to
//! it, so that no inode is created and freed per session (see that type). A session whose
//! `<id>.lock` is held by someone is locked the ordinary way, waiting for it.

use std::sync::Arc;
use std::time::Duration;

use acpx_lock::BatchLock;
use acpx_model::{LockGuard, RecordId, SessionLock, StoreResult};

use super::{lock_slot, FsCore};
use crate::fsutil::{io_err, random_suffix};

/// Held writer locks of a batch; released (links and batch file removed) when dropped.
#[derive(Debug)]
pub struct BatchLocks {
    core: Arc<FsCore>,
    /// Dropped after the links are removed (see `Drop`).
    batch: Option<BatchLock>,
    /// Sessions whose `<id>.lock` is a link to the batch file (counted as held in their slot).
    linked: Vec<RecordId>,
    /// Sessions locked the ordinary way.
    _guards: Vec<SessionLock>,
}

impl FsCore {
    /// Takes the writer locks of `ids` (see the module docs), waiting up to `timeout` for each
    /// session that someone else holds.
    pub(crate) fn lock_batch(
        self: &Arc<Self>,
        ids: &[&RecordId],
        timeout: Duration,
    ) -> StoreResult<BatchLocks> {
        let path = self
            .layout
            .dir()
            .join(format!(".batch.{}.lock", random_suffix()));
        let batch = BatchLock::create(path.clone()).map_err(|e| io_err(&path, e))?;
        let mut locks = BatchLocks {
            core: self.clone(),
            batch,
            linked: Vec::with_capacity(ids.len()),
            _guards: Vec::new(),
        };
        for id in ids {
            let lock_path = self.layout.lock(id);
            let slot = self.slot(id);
            let mut st = lock_slot(&slot);
            // Without a batch file (a fresh random name someone holds: never expected), every
            // session is locked the ordinary way.
            let linked = match &locks.batch {
                Some(b) => b.link(&lock_path).map_err(|e| io_err(&lock_path, e))?,
                None => false,
            };
            if linked {
                st.held += 1;
                st.validated = false;
                locks.linked.push((*id).clone());
            } else {
                drop(st);
                locks._guards.push(self.lock(id, timeout)?);
            }
        }
        Ok(locks)
    }
}

impl LockGuard for BatchLocks {}

impl Drop for BatchLocks {
    fn drop(&mut self) {
        for id in &self.linked {
            let slot = self.core.slot(id);
            let mut st = lock_slot(&slot);
            st.held = st.held.saturating_sub(1);
            st.validated = false;
            let lock_path = self.core.layout.lock(id);
            if let Err(e) = std::fs::remove_file(&lock_path) {
                tracing::debug!(session = %id, error = %e, "could not remove the lock file");
            }
        }
        // The batch file goes, and the lock with it, once every link is gone.
        drop(self.batch.take());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::FsStoreOptions;
    use acpx_model::StoreError;

    #[test]
    fn a_batch_lock_excludes_every_locker_of_its_sessions_and_leaves_no_file() {
        let tmp = tempfile::tempdir().unwrap();
        let core = Arc::new(FsCore::open(tmp.path(), FsStoreOptions::default()).unwrap());
        let other = Arc::new(FsCore::open(tmp.path(), FsStoreOptions::default()).unwrap());
        let (a, b, c) = (
            RecordId::parse("a").unwrap(),
            RecordId::parse("b").unwrap(),
            RecordId::parse("c").unwrap(),
        );
        // `c` is held by another store: the batch waits for it (and here gives up).
        let held = other.lock(&c, Duration::from_secs(1)).unwrap();
        let short = Arc::new(
            FsCore::open(
                tmp.path(),
                FsStoreOptions {
                    lock_timeout: Duration::from_millis(50),
                    ..FsStoreOptions::default()
                },
            )
            .unwrap(),
        );
        assert!(matches!(
            short.lock_batch(&[&a, &c], Duration::from_millis(50)),
            Err(StoreError::Locked { .. })
        ));
        drop(held);
        let locks = core.lock_batch(&[&a, &b], Duration::from_secs(1)).unwrap();
        for id in [&a, &b] {
            assert!(matches!(
                other.lock(id, Duration::from_millis(50)),
                Err(StoreError::Locked { .. })
            ));
        }
        // A waiter on a link gets a lock of its own once the batch is released.
        let waiter = std::thread::spawn({
            let other = other.clone();
            let a = a.clone();
            move || other.lock(&a, Duration::from_secs(10)).map(drop)
        });
        std::thread::sleep(Duration::from_millis(100));
        drop(locks);
        waiter.join().unwrap().unwrap();
        let names: Vec<String> = std::fs::read_dir(core.layout.dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(".lock"))
            .collect();
        assert!(names.is_empty(), "{names:?}");
    }

    #[test]
    fn links_left_by_a_batch_that_died_do_not_make_the_next_batch_wait_for_itself() {
        let tmp = tempfile::tempdir().unwrap();
        let core = Arc::new(FsCore::open(tmp.path(), FsStoreOptions::default()).unwrap());
        let ids: Vec<RecordId> = (0..3)
            .map(|i| RecordId::parse(&format!("s{i}")).unwrap())
            .collect();
        // What a killed batch leaves: its file and the links, all one inode, nobody holding it.
        let dead = core.layout.dir().join(".batch.dead.lock");
        std::fs::write(&dead, b"").unwrap();
        for id in &ids {
            std::fs::hard_link(&dead, core.layout.lock(id)).unwrap();
        }
        let refs: Vec<&RecordId> = ids.iter().collect();
        let locks = core.lock_batch(&refs, Duration::from_millis(200)).unwrap();
        assert_eq!(locks.linked.len(), 3);
        drop(locks);
        for id in &ids {
            assert!(!core.layout.lock(id).exists());
        }
    }
}
