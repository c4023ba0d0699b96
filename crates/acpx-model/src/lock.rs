//! The writer locks of sessions as the [`crate::Store`] trait hands them out: a backend's
//! guard wrapped in a [`SessionLock`] (or [`ManyLocks`]) that names the session, the store
//! that issued it, and the owner lease generation its appends are fenced by.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{StoreError, StoreResult};
use crate::id::RecordId;

/// Something a lock guard owns; dropping it releases the lock.
pub trait LockGuard: Send + Sync + fmt::Debug {}

/// Identifies the store instance (shared by its clones) that issued a [`SessionLock`], so
/// that a backend can refuse a lock it did not issue: the lock of another store, even on the
/// same files, is not this store's writer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LockIssuer(u64);

impl LockIssuer {
    /// A token no other call in this process returns.
    pub fn unique() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        LockIssuer(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

/// An exclusive per-session writer lock, held until dropped (or until the process dies).
///
/// Holding it is the only way to append to the session's event log: [`crate::Store::append`] takes
/// it as its first argument.
#[derive(Debug)]
pub struct SessionLock {
    id: RecordId,
    issuer: LockIssuer,
    fence: Option<u64>,
    _guard: Box<dyn LockGuard>,
}

impl SessionLock {
    /// Wraps a backend's held lock of session `id`; `issuer` is the issuing store's token.
    pub fn new(id: RecordId, issuer: LockIssuer, guard: Box<dyn LockGuard>) -> Self {
        SessionLock {
            id,
            issuer,
            fence: None,
            _guard: guard,
        }
    }

    /// Makes every append under this lock check that the session's owner lease is still the
    /// one of `generation` ([`crate::lease`]); the store refuses it with
    /// [`StoreError::Fenced`] once another holder took the lease over or it was released.
    pub fn with_fence(mut self, generation: u64) -> Self {
        self.fence = Some(generation);
        self
    }

    /// The lease generation appends under this lock are checked against, if any.
    pub fn fence(&self) -> Option<u64> {
        self.fence
    }

    /// The session this lock is for.
    pub fn id(&self) -> &RecordId {
        &self.id
    }

    /// The token of the store that issued this lock.
    pub fn issuer(&self) -> LockIssuer {
        self.issuer
    }

    /// `Ok` when this lock was issued by the store whose token is `issuer`; otherwise
    /// [`StoreError::InvalidArgument`] naming the problem (`backend` names the refusing store).
    pub fn check_issuer(&self, issuer: LockIssuer, backend: &str) -> StoreResult<()> {
        if self.issuer == issuer {
            Ok(())
        } else {
            Err(StoreError::InvalidArgument(format!(
                "the writer lock of session {} was not issued by this {backend} store; append \
                 with a lock taken through the same store (Store::lock)",
                self.id
            )))
        }
    }
}

/// The writer locks of several sessions ([`crate::Store::lock_many`]), held until dropped.
#[derive(Debug)]
pub struct ManyLocks {
    _locks: Vec<SessionLock>,
    _guard: Option<Box<dyn LockGuard>>,
}

impl ManyLocks {
    /// One [`SessionLock`] per session.
    pub fn each(locks: Vec<SessionLock>) -> Self {
        ManyLocks {
            _locks: locks,
            _guard: None,
        }
    }

    /// One guard a backend holds for all the sessions at once.
    pub fn guard(guard: Box<dyn LockGuard>) -> Self {
        ManyLocks {
            _locks: Vec::new(),
            _guard: Some(guard),
        }
    }
}
