//! The writer locks a store holds through `Store::lock`, shared by its clones, and the issuer
//! token their `SessionLock`s carry.
//!
//! A mutation made through the store while it holds the session's lock goes ahead without
//! locking again (the holder is the caller, see the `Store` trait); any other mutation takes
//! the lock for the duration of the call. What identifies a held lock (`K`: a lock file's
//! path, a session) and what the store keeps of it (`V`) are the backend's.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard};

use acpx_model::LockIssuer;

/// Locks held through `Store::lock` by one store and its clones.
#[derive(Debug)]
pub struct HeldLocks<K, V = ()> {
    locks: Arc<Mutex<HashMap<K, V>>>,
    issuer: LockIssuer,
}

impl<K, V> Clone for HeldLocks<K, V> {
    fn clone(&self) -> Self {
        HeldLocks {
            locks: Arc::clone(&self.locks),
            issuer: self.issuer,
        }
    }
}

impl<K, V> Default for HeldLocks<K, V> {
    fn default() -> Self {
        HeldLocks {
            locks: Arc::default(),
            issuer: LockIssuer::unique(),
        }
    }
}

impl<K: Eq + Hash, V: Clone> HeldLocks<K, V> {
    fn map(&self) -> MutexGuard<'_, HashMap<K, V>> {
        // The map stays consistent even if a holder panicked.
        self.locks.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What the store keeps of the lock `key` it holds, if it holds it.
    pub fn get<Q>(&self, key: &Q) -> Option<V>
    where
        K: std::borrow::Borrow<Q>,
        Q: Eq + Hash + ?Sized,
    {
        self.map().get(key).cloned()
    }

    /// Whether the store holds the lock `key`.
    pub fn contains<Q>(&self, key: &Q) -> bool
    where
        K: std::borrow::Borrow<Q>,
        Q: Eq + Hash + ?Sized,
    {
        self.map().contains_key(key)
    }

    /// Records the lock `key` as held.
    pub fn insert(&self, key: K, value: V) {
        self.map().insert(key, value);
    }

    /// Forgets the lock `key` (released).
    pub fn remove<Q>(&self, key: &Q)
    where
        K: std::borrow::Borrow<Q>,
        Q: Eq + Hash + ?Sized,
    {
        self.map().remove(key);
    }

    /// The token of the locks this store (and its clones) issue.
    pub fn issuer(&self) -> LockIssuer {
        self.issuer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_the_locks_and_the_issuer() {
        let held: HeldLocks<String> = HeldLocks::default();
        let clone = held.clone();
        held.insert("a".into(), ());
        assert!(clone.contains("a"));
        assert_eq!(held.issuer(), clone.issuer());
        clone.remove("a");
        assert!(!held.contains("a"));
        assert_ne!(held.issuer(), HeldLocks::<String>::default().issuer());
    }
}
