//! # acpx-store-sqlite
//!
//! [`SqliteStore`]: the acpx session store in one SQLite database file (default
//! `~/.acpx/acpx.db`), for users who want SQL over their sessions and fast queries across many
//! of them. It implements [`acpx_model::Store`] and passes the same conformance suite as the
//! file store.
//!
//! - `sessions`: one row per session, identity and lifecycle fields as columns, plus the
//!   `session.json` document byte-for-byte as the file store writes it. A view over
//!   `session_rows` (the columns; the list's index `sessions_list` holds every column a list
//!   reads) and `session_documents` (the document, written in place by a save when it is
//!   long: a prompt on a long conversation writes what changed, not the conversation).
//! - `events`: one row per event of the NDJSON audit log (a view over `event_rows`, which is
//!   keyed by an integer session key). Read back and serialized, the rows are exactly the
//!   lines the file store writes for the same operations.
//! - `messages` + `messages_fts`: the conversation text in parts of 64 KiB, indexed with FTS5 and kept in step
//!   with every snapshot save ([`acpx_model::Store::search`]).
//!
//! The schema, with queries to run by hand, is documented in `docs/format.md`
//! ("SQLite backend"). To move existing sessions from the file store (or any other store)
//! into a database, use [`acpx_model::migrate::copy_store`], which also verifies the copy.
//!
//! ```
//! use acpx_model::{
//!     Durability, EventContext, EventEnvelope, EventPayload, EventQuery, EventSource,
//!     EventStream, NewSession, RecordId, SessionRecord, Store, Timestamp,
//! };
//! use acpx_store_sqlite::SqliteStore;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let dir = tempfile::tempdir().unwrap();
//! let store = SqliteStore::open(dir.path().join("acpx.db")).unwrap();
//!
//! let id = RecordId::generate();
//! let mut record = SessionRecord::new(
//!     NewSession {
//!         acpx_record_id: id.clone(),
//!         acp_session_id: "acp-1".into(),
//!         agent_session_id: None,
//!         agent_command: "my-agent --acp".into(),
//!         cwd: "/repo".into(),
//!         name: Some("backend".into()),
//!     },
//!     Timestamp::now(),
//! );
//! store.create(&mut record).await.unwrap();
//!
//! let ctx = EventContext {
//!     acpx_record_id: &id,
//!     acp_session_id: "acp-1",
//!     request_id: None,
//!     stream: EventStream::Lifecycle,
//!     source: EventSource::Runtime,
//! };
//! let event = EventEnvelope::new(
//!     &ctx,
//!     1,
//!     Timestamp::now(),
//!     EventPayload::Unknown { event_type: "x.example".into(), payload: serde_json::json!({"a": 1}) },
//! );
//! // Appending requires the session's writer lock, taken through the same store.
//! let writer = store.lock(&id, std::time::Duration::from_secs(5)).await.unwrap();
//! let state = store.append(&writer, &[event], Durability::Flush).await.unwrap();
//! assert_eq!(state.last_seq, 1);
//!
//! let page = store.read_events(&id, &EventQuery::from_seq(1)).await.unwrap();
//! assert_eq!(page.events.len(), 1);
//! # });
//! ```

#![warn(missing_docs)]

mod batch;
mod batch_lock;
mod checkpoint;
mod connection;
mod document;
mod event_row;
mod events;
mod lease;
mod lock;
mod pending;
mod repair;
mod rows;
mod schema;
mod search;
mod sessions;
mod stage;
mod text_hash;
mod usage_column;

use std::collections::HashMap;
use std::fmt;
use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use acpx_model::search::{SearchHit, SearchQuery};
use acpx_model::session::{DEFAULT_MAX_SEGMENTS, DEFAULT_MAX_SEGMENT_BYTES};
use acpx_model::{
    Durability, EventEnvelope, EventLogState, EventPage, EventQuery, ListPage, ListQuery,
    ManyLocks, NewSessionData, RecordId, SessionLock, SessionRecord, SessionSummary, SettleOnLoad,
    StagedSession, StaleStage, Store, StoreError, StoreResult, Timestamp,
};
use async_trait::async_trait;
use rusqlite::Connection;

use crate::checkpoint::Checkpointer;
use crate::connection::{create_private_dir, open_connection};
use crate::events::SeqPrecheck;
use crate::lock::HeldLocks;
use crate::rows::{message_texts, EventBatch, MessageText};
pub use crate::schema::SCHEMA_VERSION;

const BACKEND: &str = "sqlite";

/// Tuning of a [`SqliteStore`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqliteStoreOptions {
    /// With `max_segments`, the retention budget: at most `max_segment_bytes × max_segments`
    /// bytes of NDJSON event lines are kept per session (the file store's budget). Also the
    /// unit of the reported `segment_count`.
    pub max_segment_bytes: u64,
    /// The other factor of the retention budget (see `max_segment_bytes`): the number of
    /// file-store segments the kept events would fill at most.
    pub max_segments: u32,
    /// How long a mutation waits for a session's writer lock held by someone else.
    pub lock_timeout: Duration,
    /// How long a statement waits for SQLite's database write lock (`PRAGMA busy_timeout`).
    pub busy_timeout: Duration,
}

impl Default for SqliteStoreOptions {
    fn default() -> Self {
        SqliteStoreOptions {
            max_segment_bytes: DEFAULT_MAX_SEGMENT_BYTES,
            max_segments: DEFAULT_MAX_SEGMENTS,
            lock_timeout: Duration::from_secs(10),
            busy_timeout: Duration::from_secs(10),
        }
    }
}

/// The SQLite implementation of [`Store`]. Cloning gives another handle to the same
/// connection, sharing its held locks.
///
/// Locking: every mutation of a session (create, save, close, delete, append) runs under the
/// session's writer lock, an exclusive `flock` on `<db>.locks/<id>.lock` ([`acpx_lock`]), held
/// across processes and released by the kernel when the holder dies. An append requires the
/// caller to hold it: [`Store::append`] takes the [`SessionLock`] returned by [`Store::lock`]
/// of this store or a clone, and refuses any other with [`StoreError::InvalidArgument`]. While
/// such a guard is alive, this store's other mutations of that session go ahead without
/// taking the lock again; any other mutation takes it for the duration of the call, waiting up
/// to [`SqliteStoreOptions::lock_timeout`], then fails with [`StoreError::Locked`]. Separately
/// opened stores, even in one process, are independent lockers (as in the file store).
///
/// Durability (the database runs in WAL mode with `synchronous=NORMAL`):
/// - [`Durability::None`]: the batch waits in an in-process buffer (256 KiB of lines per
///   session), committed when it fills, with the next append of another durability, on
///   [`Store::flush`], when the session's lock guard is dropped, and before any other call of
///   this store on the session. Lost if the process dies before that.
/// - [`Durability::Flush`]: the call's transaction is committed to
///   the write-ahead log before the call returns. It survives a crash of the process (the
///   data is in the operating system's hands); a power loss or kernel crash may roll back the
///   most recent transactions, never leaving a half-applied one.
/// - [`Durability::Fsync`]: that transaction is committed with `synchronous=FULL`: the WAL is
///   fsynced before the call returns, so the call survives a power loss too.
///
/// Snapshot saves, creates, closes and deletes use the `NORMAL` level.
///
/// Threads: every call runs on tokio's blocking pool, except a save, close or append by the
/// holder of the session's lock on a multi-threaded runtime, which runs in place with
/// `tokio::task::block_in_place` (no thread hand-off; other futures of the calling task wait
/// for it, other tasks do not). Each opened store also runs one thread, with its own
/// connection, that copies the write-ahead log back into the database file (checkpoints) off
/// the path of the calls; dropping the last clone of the store stops and joins it, which may
/// wait for a checkpoint in progress. Opening the store checkpoints a write-ahead log over
/// 1 MiB to its end and truncates it when no other connection is busy (never waiting): after
/// a full disk, where no checkpoint could grow the database file, that gives the space back.
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    /// `<db>.locks/`: the sessions' lock files, the batches' and the leases'.
    locks: acpx_lock::SessionLockDir,
    options: SqliteStoreOptions,
    conn: Mutex<Connection>,
    held: HeldLocks,
    /// The error of the last append per session, while that session's last append through
    /// this handle (or a clone) failed; reported as `last_write_error` (docs/format.md § Write ordering:
    /// never silent). Only failing sessions have an entry.
    write_errors: acpx_store_sql::WriteErrors,
    /// Batches appended with `Durability::None`, not yet committed (see `pending`).
    pending: Mutex<pending::PendingMap>,
    /// The fence checks of appends under a lock that carries a lease generation.
    fences: acpx_lock::lease_file::FenceChecks,
    /// The holder locks of the owner leases held through this store.
    leases: acpx_lock::lease_file::HolderLocks,
    /// Last, so that it is dropped (and its thread joined) after the store's connection.
    checkpointer: Checkpointer,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.commit_all_pending();
    }
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.inner.path)
            .field("options", &self.inner.options)
            .finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// `$HOME/.acpx/acpx.db`, or `None` when `HOME` is not set.
    pub fn default_path() -> Option<PathBuf> {
        std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(|h| PathBuf::from(h).join(".acpx").join("acpx.db"))
    }

    /// Opens (creating it if needed) the database at `path` with default options.
    pub fn open(path: impl AsRef<Path>) -> StoreResult<Self> {
        Self::open_with(path, SqliteStoreOptions::default())
    }

    /// Opens (creating it if needed) the database at `path`.
    ///
    /// Missing parent directories are created with mode 0700 and a new database file with
    /// mode 0600 (SQLite gives its `-wal` and `-shm` files the same mode). Older schemas are
    /// migrated forward; a database written by a newer acpx fails with
    /// [`StoreError::TooNew`] before anything is written to it.
    pub fn open_with(path: impl AsRef<Path>, options: SqliteStoreOptions) -> StoreResult<Self> {
        if options.max_segment_bytes == 0 || options.max_segments == 0 {
            return Err(StoreError::InvalidArgument(
                "max_segment_bytes and max_segments must be at least 1".into(),
            ));
        }
        let path = std::path::absolute(path.as_ref())
            .map_err(|e| StoreError::io(path.as_ref().display(), e))?;
        if let Some(parent) = path.parent() {
            create_private_dir(parent)?;
        }
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
        {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(StoreError::io(path.display(), e)),
        }
        // One canonical path per database: lock files and the in-process lock registry are
        // keyed by it, so two handles opened through different paths still agree.
        let path = path
            .canonicalize()
            .map_err(|e| StoreError::io(path.display(), e))?;
        let conn = open_connection(&path, &options)?;
        let locks_dir = connection::locks_dir(&path);
        let locks = acpx_lock::SessionLockDir::create(&locks_dir)
            .map_err(|e| StoreError::io(locks_dir.display(), e))?;
        let checkpointer = Checkpointer::start(&path);
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                path,
                locks,
                options,
                conn: Mutex::new(conn),
                held: HeldLocks::default(),
                fences: Default::default(),
                leases: Default::default(),
                write_errors: Default::default(),
                pending: Mutex::new(HashMap::new()),
                checkpointer,
            }),
        })
    }

    /// The (canonical) path of the database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The options this store was opened with.
    pub fn options(&self) -> &SqliteStoreOptions {
        &self.inner.options
    }

    /// Runs a database call on tokio's blocking pool, so that waiting (for a lock, for
    /// SQLite's write lock, for the disk) never holds up an async worker.
    async fn run<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Inner) -> StoreResult<T> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        match tokio::task::spawn_blocking(move || f(&inner)).await {
            Ok(result) => result,
            Err(e) => Err(StoreError::Backend {
                backend: BACKEND,
                message: format!(
                    "{}: a database call did not complete: {e}",
                    self.inner.path.display()
                ),
            }),
        }
    }

    /// Saves the row and message parts of `record` (its revision already the new one). With
    /// the session's lock held it runs in place ([`Self::run_held`]): the message texts are
    /// borrowed from the record and the document is serialized straight into the row
    /// ([`rows::Document::Streamed`]); on a pool thread the document is serialized first and
    /// the texts are copied (all of the conversation's text, megabytes after a long turn).
    async fn save_row(
        &self,
        id: &RecordId,
        expected: u64,
        record: &SessionRecord,
    ) -> StoreResult<()> {
        if self.runs_in_place(id) {
            let cols = rows::streamed_columns(record)?;
            let msgs = message_texts(record)?;
            return tokio::task::block_in_place(|| self.inner.save(id, expected, cols, &msgs));
        }
        let cols = rows::session_columns(record)?;
        let msgs: Vec<MessageText<'static>> = message_texts(record)?
            .into_iter()
            .map(MessageText::into_owned)
            .collect();
        let owned = id.clone();
        self.run(move |inner| inner.save(&owned, expected, cols, &msgs))
            .await
    }

    /// Whether a call on session `id` runs on the calling thread: see [`Self::run_held`].
    fn runs_in_place(&self, id: &RecordId) -> bool {
        tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
            && self.inner.held.contains(&self.inner.lock_path(id))
    }

    /// A mutation of session `id`: when this store holds the session's lock (no lock wait
    /// ahead) and the caller runs on tokio's multi-threaded runtime, it runs right here with
    /// `block_in_place`, which first hands this worker's other tasks to another thread;
    /// otherwise as [`Self::run`]. Handing each call to a pool thread and waking the caller
    /// afterwards costs two thread wake-ups: under load, measured at a quarter of the time of
    /// an append of 64 events. The cost of running in place: other futures polled by the
    /// calling task itself (`join!`, `select!` branches) wait until the call returns.
    async fn run_held<T, F>(&self, id: &RecordId, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Inner) -> StoreResult<T> + Send + 'static,
    {
        if self.runs_in_place(id) {
            return tokio::task::block_in_place(|| f(&self.inner));
        }
        self.run(f).await
    }
}

#[async_trait]
impl Store for SqliteStore {
    fn backend_name(&self) -> &'static str {
        BACKEND
    }

    fn leases(&self) -> &dyn acpx_model::SessionLeases {
        self
    }

    async fn create(&self, record: &mut SessionRecord) -> StoreResult<()> {
        let id = record.acpx_record_id.clone();
        record.validate(&self.inner.row_location(id.as_str()))?;
        let previous = record.revision;
        record.revision = 1;
        let cols = rows::session_columns(record);
        let msgs = message_texts(record).map(|msgs| {
            msgs.into_iter()
                .map(MessageText::into_owned)
                .collect::<Vec<MessageText<'static>>>()
        });
        record.revision = previous;
        let cols = cols?;
        let msgs = msgs?;
        self.run(move |inner| inner.create(&id, cols, &msgs))
            .await?;
        record.revision = 1;
        Ok(())
    }

    async fn load(&self, id: &RecordId) -> StoreResult<SessionRecord> {
        let id = id.clone();
        self.run(move |inner| inner.load(&id)).await
    }

    async fn load_settling(
        &self,
        id: &RecordId,
        settle: Arc<SettleOnLoad>,
    ) -> StoreResult<SessionRecord> {
        let id = id.clone();
        self.run(move |inner| inner.load_settling(&id, &settle))
            .await
    }

    async fn summary(&self, id: &RecordId) -> StoreResult<SessionSummary> {
        let id = id.clone();
        self.run(move |inner| inner.summary(&id)).await
    }

    async fn create_sessions(
        &self,
        sessions: Vec<NewSessionData>,
    ) -> StoreResult<Vec<SessionRecord>> {
        // Serializing a batch is most of its CPU: on the blocking pool, not the caller's task.
        match self
            .run(move |inner| batch::prepare(inner, sessions))
            .await?
        {
            batch::Prepared::Batch(prepared, records) => {
                self.run(move |inner| inner.create_sessions(prepared))
                    .await?;
                Ok(records)
            }
            batch::Prepared::TooLarge(sessions) => {
                // A log retention trimmed is started with the events that fit the batch path.
                let budget = self
                    .inner
                    .options
                    .max_segment_bytes
                    .saturating_mul(u64::from(self.inner.options.max_segments));
                acpx_model::store::create_sessions_in_parts(self, sessions, |s| {
                    Some(acpx_model::store::prefix_within(&s.events, budget))
                })
                .await
            }
        }
    }

    async fn stage_session<'s>(
        &'s self,
        record: SessionRecord,
    ) -> StoreResult<Box<dyn StagedSession + 's>> {
        Ok(Box::new(self.begin_stage(record).await?))
    }

    async fn stale_stages(&self) -> StoreResult<Vec<StaleStage>> {
        self.run(|inner| inner.stale_stages(false, None)).await
    }

    async fn remove_stale_stages(&self) -> StoreResult<Vec<StaleStage>> {
        self.run(|inner| inner.stale_stages(true, None)).await
    }

    async fn save(&self, record: &mut SessionRecord) -> StoreResult<()> {
        let id = record.acpx_record_id.clone();
        record.validate(&self.inner.row_location(id.as_str()))?;
        let expected = record.revision;
        record.revision = expected.checked_add(1).ok_or_else(|| {
            StoreError::InvalidArgument(format!("session {id}: revision {expected} overflows"))
        })?;
        let saved = self.save_row(&id, expected, record).await;
        record.revision = if saved.is_ok() {
            expected + 1
        } else {
            expected
        };
        saved
    }

    async fn replace_snapshot(
        &self,
        writer: &SessionLock,
        record: &mut SessionRecord,
    ) -> StoreResult<()> {
        writer.check_issuer(self.inner.held.issuer(), "sqlite")?;
        let id = record.acpx_record_id.clone();
        if writer.id() != &id {
            return Err(StoreError::InvalidArgument(format!(
                "the writer lock of {} cannot replace the snapshot of {id}",
                writer.id()
            )));
        }
        // The row's columns survive a damaged `document`: saving against the row's own
        // revision replaces the document (and the columns and messages derived from it).
        let owned = id.clone();
        record.revision = self.run(move |inner| inner.row_revision(&owned)).await?;
        self.save(record).await
    }

    async fn replace_damaged_events(&self, writer: &SessionLock) -> StoreResult<Vec<u64>> {
        writer.check_issuer(self.inner.held.issuer(), "sqlite")?;
        let id = writer.id().clone();
        self.run(move |inner| inner.replace_damaged_events(&id))
            .await
    }

    async fn close(&self, id: &RecordId, at: Timestamp) -> StoreResult<SessionRecord> {
        let owned = id.clone();
        self.run_held(id, move |inner| inner.close(&owned, at, None))
            .await
    }

    async fn close_settling(
        &self,
        id: &RecordId,
        at: Timestamp,
        settle: Arc<SettleOnLoad>,
    ) -> StoreResult<SessionRecord> {
        let owned = id.clone();
        self.run_held(id, move |inner| inner.close(&owned, at, Some(&settle)))
            .await
    }

    async fn delete(&self, id: &RecordId) -> StoreResult<bool> {
        let id = id.clone();
        self.run(move |inner| inner.delete(&id)).await
    }

    async fn list(&self, query: &ListQuery) -> StoreResult<ListPage> {
        let query = query.clone();
        self.run(move |inner| inner.list(&query)).await
    }

    async fn sessions_matching_id(&self, text: &str) -> StoreResult<Vec<SessionSummary>> {
        let text = text.to_owned();
        self.run(move |inner| inner.sessions_matching_id(&text))
            .await
    }

    async fn append(
        &self,
        writer: &SessionLock,
        events: &[EventEnvelope],
        durability: Durability,
    ) -> StoreResult<EventLogState> {
        writer.check_issuer(self.inner.held.issuer(), "sqlite")?;
        let id = writer.id();
        if let Some(generation) = writer.fence() {
            self.inner.check_fence(id, generation)?;
        }
        let precheck = SeqPrecheck::new(id, events);
        let batch = EventBatch::new(events)?;
        let owned = id.clone();
        self.run_held(id, move |inner| {
            inner.append(&owned, precheck, batch, durability)
        })
        .await
    }

    async fn read_events(&self, id: &RecordId, query: &EventQuery) -> StoreResult<EventPage> {
        let id = id.clone();
        let query = query.clone();
        self.run(move |inner| inner.read_events(&id, &query)).await
    }

    async fn load_many_with_events(
        &self,
        ids: &[RecordId],
        query: &EventQuery,
    ) -> StoreResult<Vec<(SessionRecord, EventPage)>> {
        let ids = ids.to_vec();
        let query = query.clone();
        self.run(move |inner| {
            ids.iter()
                .map(|id| Ok((inner.load(id)?, inner.read_events(id, &query)?)))
                .collect()
        })
        .await
    }

    async fn event_log_state(&self, id: &RecordId) -> StoreResult<EventLogState> {
        let id = id.clone();
        self.run(move |inner| inner.event_log_state(&id)).await
    }

    async fn flush(&self, id: &RecordId) -> StoreResult<()> {
        // Commits what appends with `Durability::None` buffered (see `pending`).
        let id = id.clone();
        self.run_held(&id.clone(), move |inner| {
            inner.commit_pending(&id)?;
            if inner.exists(&id)? {
                Ok(())
            } else {
                Err(StoreError::NotFound(id))
            }
        })
        .await
    }

    async fn search(&self, query: &SearchQuery) -> StoreResult<Vec<SearchHit>> {
        let query = query.clone();
        self.run(move |inner| inner.search(&query)).await
    }

    async fn lock_many(&self, ids: &[RecordId], timeout: Duration) -> StoreResult<ManyLocks> {
        // Through one lock file: no inode created and freed per session (`batch_lock`).
        let ids = ids.to_vec();
        let store = Arc::clone(&self.inner);
        let guard = self.run(move |_| store.lock_batch(&ids, timeout)).await?;
        Ok(ManyLocks::guard(Box::new(guard)))
    }

    async fn lock(&self, id: &RecordId, timeout: Duration) -> StoreResult<SessionLock> {
        let id = id.clone();
        let store = Arc::clone(&self.inner);
        self.run(move |inner| {
            let lock = lock::acquire(&inner.locks, &id, timeout)?;
            let guard = lock::session_guard(lock, store, id.clone());
            Ok(SessionLock::new(id, inner.held.issuer(), Box::new(guard)))
        })
        .await
    }
}
