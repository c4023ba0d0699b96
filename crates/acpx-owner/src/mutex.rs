//! A mutex of the owner's shared state taken whatever a panicked holder left: what the
//! mutexes guard (counters, handles, the task being run) is whole at every step, so a panic in
//! one task must not stop the accept loop, the worker and the lease keeper with it.

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, taking the data over from a holder that panicked.
pub(super) fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
