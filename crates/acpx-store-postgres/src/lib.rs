//! # acpx-store-postgres
//!
//! [`PostgresStore`]: the acpx session store in a PostgreSQL database that several hosts
//! share. It implements [`acpx_model::Store`] and passes the same conformance suite as the
//! file and SQLite stores; its tables mirror the SQLite backend's (docs/format.md §
//! PostgreSQL backend):
//!
//! - `sessions`: one row per session, identity and lifecycle fields as columns, plus the
//!   `session.json` document byte-for-byte as the file store writes it;
//! - `event_rows` (and the `events` view with record ids): one row per event of the NDJSON
//!   audit log. Read back and serialized, the rows are exactly the lines the file store
//!   writes for the same operations;
//! - `messages`: the conversation text, searched by substring with a `pg_trgm` index
//!   ([`acpx_model::Store::search`]).
//!
//! Writers on different hosts: a session's writer lock ([`acpx_model::Store::lock`]) is a
//! `pg_advisory_lock` held by a connection of its own for the lock's lifetime, so it is
//! exclusive across machines and released by the server when its holder dies. Every append
//! checks the log's last seq in the transaction that inserts the rows, and that the lock is
//! still held: seq stays gap-free whatever the number of hosts. Appends notify
//! (`NOTIFY acpx_events`) so that followers on other hosts wake up at once
//! ([`acpx_model::Store::wait_for_events`]).
//!
//! Schemas are versioned and migrated forward on open; a schema written by a newer acpx is
//! refused with [`acpx_model::StoreError::TooNew`]. Connection strings are never printed with
//! their password ([`redact_url`]).
//!
//! ```no_run
//! use acpx_model::{NewSession, RecordId, SessionRecord, Store, Timestamp};
//! use acpx_store_postgres::{PostgresStore, PostgresStoreOptions};
//!
//! # async fn run() -> Result<(), acpx_model::StoreError> {
//! let store = PostgresStore::connect(
//!     "postgres://acpx:secret@db.internal/acpx",
//!     PostgresStoreOptions::default(),
//! )
//! .await?;
//! let id = RecordId::generate();
//! let mut record = SessionRecord::new(
//!     NewSession {
//!         acpx_record_id: id.clone(),
//!         acp_session_id: "acp-1".into(),
//!         agent_session_id: None,
//!         agent_command: "my-agent --acp".into(),
//!         cwd: "/repo".into(),
//!         name: None,
//!     },
//!     Timestamp::now(),
//! );
//! store.create(&mut record).await?;
//! let writer = store.lock(&id, std::time::Duration::from_secs(5)).await?;
//! # drop(writer);
//! # Ok(())
//! # }
//! ```
//!
//! See `examples/postgres_basic.rs` for a complete program.

#![warn(missing_docs)]

mod connection;
mod events;
mod lease;
mod lock;
mod retained;
mod rows;
mod schema;
mod search;
mod sessions;
mod stage;
mod tasks;
mod watch;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use acpx_model::search::{SearchHit, SearchQuery};
use acpx_model::session::{DEFAULT_MAX_SEGMENTS, DEFAULT_MAX_SEGMENT_BYTES};
use acpx_model::{
    Durability, EventEnvelope, EventLogState, EventPage, EventQuery, ListPage, ListQuery,
    NewSessionData, RecordId, SessionLock, SessionRecord, SettleOnLoad, StagedSession, Store,
    StoreError, StoreResult, Timestamp,
};
use async_trait::async_trait;
use deadpool_postgres::{Object, Pool};
use tokio_postgres::Config;

pub use crate::connection::redact_url;
use crate::connection::{parse_config, pool};
use crate::lock::HeldLocks;
use crate::rows::message_rows;
pub use crate::schema::SCHEMA_VERSION;
use crate::watch::Watcher;

const BACKEND: &str = "postgres";

/// Tuning of a [`PostgresStore`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostgresStoreOptions {
    /// The PostgreSQL schema holding the tables (created if missing): lowercase ASCII letters,
    /// digits and `_`. Stores in different schemas of one database are independent.
    pub schema: String,
    /// With `max_segments`, the retention budget: at most `max_segment_bytes × max_segments`
    /// bytes of NDJSON event lines are kept per session (the file store's budget). Also the
    /// unit of the reported `segment_count`.
    pub max_segment_bytes: u64,
    /// The other factor of the retention budget (see `max_segment_bytes`).
    pub max_segments: u32,
    /// How long a mutation waits for a session's writer lock held by someone else.
    pub lock_timeout: Duration,
    /// Connections kept for ordinary calls (writer locks and followers have their own).
    pub pool_size: usize,
}

impl Default for PostgresStoreOptions {
    fn default() -> Self {
        PostgresStoreOptions {
            schema: "acpx".into(),
            max_segment_bytes: DEFAULT_MAX_SEGMENT_BYTES,
            max_segments: DEFAULT_MAX_SEGMENTS,
            lock_timeout: Duration::from_secs(10),
            pool_size: 8,
        }
    }
}

/// The PostgreSQL implementation of [`Store`]. Cloning gives another handle on the same
/// connection pool, sharing its held locks.
///
/// Locking: every mutation of a session (create, save, close, delete, append) runs under the
/// session's writer lock, a PostgreSQL advisory lock keyed by schema and record id, held
/// across processes and hosts and released by the server when its holder's connection ends.
/// An append requires the caller to hold it: [`Store::append`] takes the [`SessionLock`]
/// returned by [`Store::lock`] of this store or a clone, and refuses any other with
/// [`StoreError::InvalidArgument`]. While such a guard is alive, this store's other mutations
/// of that session go ahead without taking the lock again; any other mutation takes it for its
/// transaction (`pg_advisory_xact_lock`), waiting up to
/// [`PostgresStoreOptions::lock_timeout`], then fails with [`StoreError::Locked`].
///
/// Durability: every call commits its transaction before it returns.
/// - [`Durability::None`] and [`Durability::Flush`]: committed with
///   `synchronous_commit = off`: the server has the transaction, and it survives a crash of
///   the acpx process or host; a crash of the database server itself may lose the last
///   fraction of a second of such commits (never part of one).
/// - [`Durability::Fsync`]: committed with `synchronous_commit = on`: the server's
///   write-ahead log is on stable storage (and on synchronous replicas, if configured).
///
/// Snapshot saves, creates, closes and deletes use the server's default.
///
/// Runtime: calls run on the caller's tokio runtime; connections are driven by tasks spawned
/// on it. A connection that was closed (server restart, `pg_terminate_backend`) while a call
/// was using it fails that call with an error saying so. Between calls, a pooled connection
/// found closed is replaced, and one idle for a second or more is checked with an empty query
/// before use (and replaced if that fails): after a restart between turns, the next command
/// works.
#[derive(Clone)]
pub struct PostgresStore {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pool: Pool,
    config: Config,
    schema: String,
    /// The redacted URL and schema, for messages (`postgres://u:***@h/db#schema`).
    location: String,
    options: PostgresStoreOptions,
    held: HeldLocks,
    /// The error of the last append per session, while that session's last append through
    /// this handle (or a clone) failed; reported as `last_write_error` (docs/format.md §
    /// Write ordering: never silent). Only failing sessions have an entry.
    write_errors: acpx_store_sql::WriteErrors,
    watcher: Watcher,
    /// The owner leases held through this store, each with its lock's connection.
    leases: lease::HeldLeases,
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("location", &self.inner.location)
            .field("options", &self.inner.options)
            .finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// Connects to the database at `url` (a `postgres://` URL or a `key=value` connection
    /// string), creates the schema if needed and migrates it forward. A schema written by a
    /// newer acpx fails with [`StoreError::TooNew`] before anything is written to it. Errors
    /// name the URL without its password.
    pub async fn connect(url: &str, options: PostgresStoreOptions) -> StoreResult<Self> {
        if options.max_segment_bytes == 0 || options.max_segments == 0 {
            return Err(StoreError::InvalidArgument(
                "max_segment_bytes and max_segments must be at least 1".into(),
            ));
        }
        if !schema::valid_schema_name(&options.schema) {
            return Err(StoreError::InvalidArgument(format!(
                "schema name {:?}: use lowercase ASCII letters, digits and `_` (at most 63, \
                 not starting with a digit)",
                options.schema
            )));
        }
        let config = parse_config(url, &options.schema)?;
        let location = format!("{}#{}", redact_url(url), options.schema);
        let pool = pool(&config, options.pool_size)?;
        let inner = Inner {
            pool,
            config: config.clone(),
            schema: options.schema.clone(),
            location,
            options,
            held: HeldLocks::default(),
            write_errors: Default::default(),
            watcher: Watcher::new(config),
            leases: Default::default(),
        };
        let mut conn = inner.conn().await?;
        schema::migrate(&mut conn, &inner.schema, &inner.location).await?;
        drop(conn);
        Ok(PostgresStore {
            inner: Arc::new(inner),
        })
    }

    /// The URL (password redacted) and schema, as messages name this store.
    pub fn location(&self) -> &str {
        &self.inner.location
    }

    /// The options this store was opened with.
    pub fn options(&self) -> &PostgresStoreOptions {
        &self.inner.options
    }

    /// Removes the store's schema and everything in it (`DROP SCHEMA … CASCADE`). For tests
    /// and for tearing down a scratch store; the store must not be used afterwards.
    pub async fn drop_schema(&self) -> StoreResult<()> {
        let conn = self.inner.conn().await?;
        conn.batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {} CASCADE",
            self.inner.schema
        ))
        .await
        .map_err(|e| connection::pg_error(&self.inner.location, "drop the schema", e))
    }
}

impl Inner {
    /// A connection from the pool.
    pub(crate) async fn conn(&self) -> StoreResult<Object> {
        self.pool
            .get()
            .await
            .map_err(|e| connection::pool_error(&self.location, "connect", e))
    }

    pub(crate) fn row_location(&self, id: &str) -> String {
        format!("{} sessions row {id:?}", self.location)
    }
}

/// Runs a read, and runs it once more when the pooled connection it took had been closed
/// under it without the pool noticing yet (the server restarted or ended the backend just
/// before): a read changes nothing, so a second try on a fresh connection is safe, and a
/// long-lived process (the queue owner) does not fail a task on a connection the server
/// dropped between two of its calls. Writes are not retried: their caller decides.
async fn read_once_more<T, F, Fut>(read: F) -> StoreResult<T>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = StoreResult<T>>,
{
    match read().await {
        Err(e) if connection::is_closed_connection(&e) => {
            tracing::debug!(error = %e, "a pooled PostgreSQL connection was closed; reading again");
            read().await
        }
        other => other,
    }
}

#[async_trait]
impl Store for PostgresStore {
    fn backend_name(&self) -> &'static str {
        BACKEND
    }

    async fn create(&self, record: &mut SessionRecord) -> StoreResult<()> {
        let id = record.acpx_record_id.clone();
        record.validate(&self.inner.row_location(id.as_str()))?;
        let previous = record.revision;
        record.revision = 1;
        let cols = crate::rows::session_columns(record);
        let msgs = message_rows(record);
        record.revision = previous;
        self.inner.create(&id, cols?, msgs?, 0).await?;
        record.revision = 1;
        Ok(())
    }

    async fn load(&self, id: &RecordId) -> StoreResult<SessionRecord> {
        read_once_more(|| self.inner.load(id)).await
    }

    async fn load_settling(
        &self,
        id: &RecordId,
        settle: Arc<SettleOnLoad>,
    ) -> StoreResult<SessionRecord> {
        read_once_more(|| self.inner.load_with(id, Some(&settle))).await
    }

    async fn create_sessions(
        &self,
        sessions: Vec<NewSessionData>,
    ) -> StoreResult<Vec<SessionRecord>> {
        if sessions.iter().all(|s| s.seq_before() == 0) {
            return acpx_model::store::create_sessions_one_by_one(self, sessions).await;
        }
        retained::create_sessions(self, sessions).await
    }

    async fn stage_session<'s>(
        &'s self,
        record: SessionRecord,
    ) -> StoreResult<Box<dyn StagedSession + 's>> {
        Ok(Box::new(self.begin_stage(record).await?))
    }

    async fn save(&self, record: &mut SessionRecord) -> StoreResult<()> {
        let id = record.acpx_record_id.clone();
        record.validate(&self.inner.row_location(id.as_str()))?;
        let expected = record.revision;
        record.revision = expected.checked_add(1).ok_or_else(|| {
            StoreError::InvalidArgument(format!("session {id}: revision {expected} overflows"))
        })?;
        let cols = crate::rows::session_columns(record);
        let msgs = message_rows(record);
        record.revision = expected;
        self.inner.save(&id, expected, cols?, msgs?).await?;
        record.revision = expected + 1;
        Ok(())
    }

    async fn replace_snapshot(
        &self,
        writer: &SessionLock,
        record: &mut SessionRecord,
    ) -> StoreResult<()> {
        writer.check_issuer(self.inner.held.issuer(), BACKEND)?;
        let id = record.acpx_record_id.clone();
        if writer.id() != &id {
            return Err(StoreError::InvalidArgument(format!(
                "the writer lock of {} cannot replace the snapshot of {id}",
                writer.id()
            )));
        }
        // The row's columns survive a damaged `document`: saving against the row's own
        // revision replaces the document (and the columns and messages derived from it).
        record.revision = self.inner.row_revision(&id).await?;
        self.save(record).await
    }

    async fn summary(&self, id: &RecordId) -> StoreResult<acpx_model::SessionSummary> {
        read_once_more(|| self.inner.summary(id)).await
    }

    async fn close(&self, id: &RecordId, at: Timestamp) -> StoreResult<SessionRecord> {
        self.inner.close(id, at, None).await
    }

    async fn close_settling(
        &self,
        id: &RecordId,
        at: Timestamp,
        settle: Arc<SettleOnLoad>,
    ) -> StoreResult<SessionRecord> {
        self.inner.close(id, at, Some(&settle)).await
    }

    async fn delete(&self, id: &RecordId) -> StoreResult<bool> {
        self.inner.delete(id).await
    }

    async fn list(&self, query: &ListQuery) -> StoreResult<ListPage> {
        read_once_more(|| self.inner.list(query)).await
    }

    async fn append(
        &self,
        writer: &SessionLock,
        events: &[EventEnvelope],
        durability: Durability,
    ) -> StoreResult<EventLogState> {
        writer.check_issuer(self.inner.held.issuer(), BACKEND)?;
        self.inner
            .append(
                writer.id(),
                events,
                durability == Durability::Fsync,
                writer.fence(),
            )
            .await
    }

    async fn read_events(&self, id: &RecordId, query: &EventQuery) -> StoreResult<EventPage> {
        read_once_more(|| self.inner.read_events(id, query)).await
    }

    async fn event_log_state(&self, id: &RecordId) -> StoreResult<EventLogState> {
        read_once_more(|| self.inner.event_log_state(id)).await
    }

    async fn flush(&self, id: &RecordId) -> StoreResult<()> {
        // Every append is committed before it returns: nothing is buffered in the process.
        if self.inner.exists(id).await? {
            Ok(())
        } else {
            Err(StoreError::NotFound(id.clone()))
        }
    }

    async fn search(&self, query: &SearchQuery) -> StoreResult<Vec<SearchHit>> {
        read_once_more(|| self.inner.search(query)).await
    }

    async fn lock(&self, id: &RecordId, timeout: Duration) -> StoreResult<SessionLock> {
        let guard = self.inner.acquire(id, timeout).await?;
        Ok(SessionLock::new(
            id.clone(),
            self.inner.held.issuer(),
            Box::new(guard),
        ))
    }

    fn leases(&self) -> &dyn acpx_model::SessionLeases {
        self
    }

    fn remote_tasks(&self) -> Option<&dyn acpx_model::RemoteTasks> {
        Some(self)
    }

    async fn wait_for_events(
        &self,
        id: &RecordId,
        after_seq: u64,
        timeout: Duration,
    ) -> StoreResult<()> {
        self.inner.wait_for_events(id, after_seq, timeout).await
    }
}
