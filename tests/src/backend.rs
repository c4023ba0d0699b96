//! The [`Backend`] trait: what a conformance check needs from a store implementation beyond
//! the [`Store`] trait itself (reopening, raw damage, a worker process).

use std::path::PathBuf;
use std::sync::Arc;

use acpx_model::{MemoryStore, RecordId, Store};
use async_trait::async_trait;

/// A store implementation under test, with the hooks the checks need.
#[async_trait]
pub trait Backend: Send + Sync {
    /// Short name for messages: `memory`, `fs`, `sqlite`.
    fn name(&self) -> &'static str;

    /// A new handle on the same underlying data (as if the process restarted).
    async fn open(&self) -> Arc<dyn Store>;

    /// The argv (after the binary) that makes `acpx-store-worker` open this backend's data,
    /// for cross-process checks; `None` when the data cannot be shared with another process.
    fn worker_args(&self) -> Option<Vec<String>>;

    /// Overwrites the stored snapshot/document of `id` (which must exist) with raw bytes, for
    /// malformed-data checks. `None` if the backend has no raw snapshot.
    async fn inject_snapshot(&self, id: &RecordId, bytes: &[u8]) -> Option<()>;

    /// Appends raw bytes to the session's event log (torn tails, mid-log damage). `None` if
    /// the backend's log cannot hold partial or damaged records (memory, SQLite rows).
    async fn inject_log_bytes(&self, id: &RecordId, bytes: &[u8]) -> Option<()>;

    /// The directory holding every file of this backend. Its parent is a fresh temporary
    /// directory that holds nothing else, so a check can prove nothing was written outside.
    /// `None` for backends without files.
    fn data_dir(&self) -> Option<PathBuf>;

    /// Crash points (`ACPX_FAILPOINT=<name>` in the worker's environment) at which this
    /// backend aborts the process, for the failpoint checks. Empty when it has none.
    fn failpoints(&self) -> Vec<&'static str> {
        Vec::new()
    }
}

/// [`MemoryStore`]: every handle shares one in-process map; nothing raw, no other process.
#[derive(Debug, Clone, Default)]
pub struct MemoryBackend {
    store: MemoryStore,
}

impl MemoryBackend {
    /// A backend over a fresh, empty [`MemoryStore`].
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl Backend for MemoryBackend {
    fn name(&self) -> &'static str {
        "memory"
    }

    async fn open(&self) -> Arc<dyn Store> {
        Arc::new(self.store.clone())
    }

    fn worker_args(&self) -> Option<Vec<String>> {
        None
    }

    async fn inject_snapshot(&self, _id: &RecordId, _bytes: &[u8]) -> Option<()> {
        None
    }

    async fn inject_log_bytes(&self, _id: &RecordId, _bytes: &[u8]) -> Option<()> {
        None
    }

    fn data_dir(&self) -> Option<PathBuf> {
        None
    }
}
