//! # acpx-store-sqlite
//!
//! [`SqliteStore`]: the acpx session store in one SQLite database file (default
//! `~/.acpx/acpx.db`), for users who want SQL over their sessions and fast queries across many
//! of them. It implements [`acpx_model::Store`] and passes the same conformance suite as the
//! file store.
//!
//! - `sessions`: one row per session, identity and lifecycle fields as columns, plus the
//!   `session.json` document byte-for-byte as the file store writes it.
//! - `events`: one row per event of the NDJSON audit log (a view over `event_rows`, which is
//!   keyed by an integer session key). Read back and serialized, the rows are exactly the
//!   lines the file store writes for the same operations.
//! - `messages` + `messages_fts`: the conversation text, indexed with FTS5 and kept in step
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

mod checkpoint;
mod lock;
mod rows;
pub mod schema;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::fs::{DirBuilder, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use acpx_model::search::{snippet, SearchHit, SearchQuery};
use acpx_model::session::{DEFAULT_MAX_SEGMENTS, DEFAULT_MAX_SEGMENT_BYTES};
use acpx_model::{
    check_append_batch, normalize_cwd, ClosedFilter, DamagedLine, Durability, EventEnvelope,
    EventLogState, EventPage, EventQuery, ListPage, ListQuery, ReadMode, RecordId, SessionLock,
    SessionRecord, SkippedEntry, Store, StoreError, StoreResult, Timestamp,
};
use async_trait::async_trait;
use rusqlite::types::Value as SqlValue;
use rusqlite::{
    params, Connection, OpenFlags, OptionalExtension, Transaction, TransactionBehavior,
};

use crate::checkpoint::Checkpointer;
use crate::lock::HeldLocks;
use crate::rows::{
    event_from_row, message_rows, parse_document, summary_difference, summary_from_row, ts_text,
    EventBatch, MessageRow, SessionColumns, EVENT_COLUMNS, INSERT_COLUMNS, SUMMARY_COLUMNS,
};
pub use crate::schema::SCHEMA_VERSION;
use acpx_lock::FileLock;

const BACKEND: &str = "sqlite";

/// Tuning of a [`SqliteStore`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqliteStoreOptions {
    /// With `max_segments`, the retention budget: at most `max_segment_bytes × max_segments`
    /// bytes of NDJSON event lines are kept per session (the file store's budget). Also the
    /// unit of the reported `segment_count`.
    pub max_segment_bytes: u64,
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
/// - [`Durability::None`] and [`Durability::Flush`]: the call's transaction is committed to
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
/// wait for a checkpoint in progress.
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    locks_dir: PathBuf,
    options: SqliteStoreOptions,
    conn: Mutex<Connection>,
    held: HeldLocks,
    /// The error of the last append per session, while that session's last append through
    /// this handle (or a clone) failed; reported as `last_write_error` (seed failure policy:
    /// never silent). Only failing sessions have an entry.
    write_errors: Mutex<HashMap<RecordId, String>>,
    /// Last, so that it is dropped (and its thread joined) after the store's connection.
    checkpointer: Checkpointer,
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
        let mut locks_dir = path.clone().into_os_string();
        locks_dir.push(".locks");
        let locks_dir = PathBuf::from(locks_dir);
        create_private_dir(&locks_dir)?;
        let checkpointer = Checkpointer::start(&path);
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                path,
                locks_dir,
                options,
                conn: Mutex::new(conn),
                held: HeldLocks::default(),
                write_errors: Mutex::new(HashMap::new()),
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
        let multi_thread = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        if multi_thread && self.inner.held.contains(&self.inner.lock_path(id)) {
            return tokio::task::block_in_place(|| f(&self.inner));
        }
        self.run(f).await
    }
}

fn create_private_dir(dir: &Path) -> StoreResult<()> {
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| StoreError::io(dir.display(), e))
}

/// Opens the connection: version check first (nothing is written to a database that is too
/// new), then the pragmas, then the migrations.
fn open_connection(path: &Path, options: &SqliteStoreOptions) -> StoreResult<Connection> {
    let err = |context: &'static str| {
        move |e: rusqlite::Error| sql_error(path, context, &options.busy_timeout, e)
    };
    let mut conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(err("open"))?;
    conn.busy_timeout(options.busy_timeout)
        .map_err(err("set busy_timeout"))?;
    let version = user_version(&conn).map_err(|e| match e {
        rusqlite::Error::SqliteFailure(f, _) if f.code == rusqlite::ErrorCode::NotADatabase => {
            StoreError::corrupt(
                path.display().to_string(),
                None,
                "not an SQLite database; move it away or choose another --db path",
            )
        }
        e => err("read the schema version")(e),
    })?;
    check_version(path, version)?;
    let mode: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
        .map_err(err("enable WAL"))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::Backend {
            backend: BACKEND,
            message: format!(
                "{}: could not switch to WAL journal mode (got {mode:?})",
                path.display()
            ),
        });
    }
    conn.execute_batch(
        "PRAGMA synchronous = NORMAL;
         PRAGMA foreign_keys = ON;
         PRAGMA cache_size = -16384;
         PRAGMA temp_store = MEMORY;",
    )
    .map_err(err("set pragmas"))?;
    // Checkpoints normally run on the store's checkpoint thread (see `checkpoint`).
    conn.pragma_update(None, "wal_autocheckpoint", checkpoint::FALLBACK_PAGES)
        .map_err(err("set pragmas"))?;
    conn.set_prepared_statement_cache_capacity(64);
    migrate(&mut conn, path).map_err(|e| match e {
        MigrateError::Sql(e) => err("migrate the schema")(e),
        MigrateError::Store(e) => e,
    })?;
    Ok(conn)
}

fn user_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row("PRAGMA user_version", [], |r| r.get(0))
}

fn check_version(path: &Path, version: i64) -> StoreResult<()> {
    if version > SCHEMA_VERSION {
        return Err(StoreError::TooNew(format!(
            "{} has schema version {version}; this acpx reads up to version {SCHEMA_VERSION} \
             and left the file untouched",
            path.display()
        )));
    }
    if version < 0 {
        return Err(StoreError::corrupt(
            path.display().to_string(),
            None,
            format!("PRAGMA user_version is {version}, which no acpx writes"),
        ));
    }
    Ok(())
}

enum MigrateError {
    Sql(rusqlite::Error),
    Store(StoreError),
}

impl From<rusqlite::Error> for MigrateError {
    fn from(e: rusqlite::Error) -> Self {
        MigrateError::Sql(e)
    }
}

fn migrate(conn: &mut Connection, path: &Path) -> Result<(), MigrateError> {
    if user_version(conn)? == SCHEMA_VERSION {
        return Ok(());
    }
    // A rebuilt table is dropped and replaced; with foreign keys on, dropping a parent table
    // would delete its children first. The pragma is a no-op inside a transaction, so it is
    // switched around it (and back on whatever happens).
    conn.pragma_update(None, "foreign_keys", "OFF")?;
    let result = migrate_steps(conn, path);
    let restored = conn.pragma_update(None, "foreign_keys", "ON");
    result?;
    restored?;
    Ok(())
}

fn migrate_steps(conn: &mut Connection, path: &Path) -> Result<(), MigrateError> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    // Read again under the write lock: another process may have migrated meanwhile.
    let version = user_version(&tx)?;
    check_version(path, version).map_err(MigrateError::Store)?;
    if version == SCHEMA_VERSION {
        return Ok(());
    }
    // The steps run without foreign key enforcement: they must not break a reference. Rows
    // that were already orphaned (a hand delete in a shell without `foreign_keys`) are not
    // this migration's doing and do not stop it.
    let before = foreign_key_violations(&tx)?;
    for (from, step) in schema::MIGRATIONS.iter().enumerate().skip(version as usize) {
        tx.execute_batch(step)?;
        tx.pragma_update(None, "user_version", from as i64 + 1)?;
    }
    let after = foreign_key_violations(&tx)?;
    let grown = after
        .iter()
        .find(|(table, n)| before.get(*table).copied().unwrap_or(0) < **n);
    if let Some((table, _)) = grown {
        return Err(MigrateError::Store(StoreError::corrupt(
            path.display().to_string(),
            None,
            format!(
                "migrating the schema from version {version} to {SCHEMA_VERSION} would leave \
                 rows of table `{table}` without their parent; the file was left unchanged"
            ),
        )));
    }
    tx.commit()?;
    Ok(())
}

/// How many rows `PRAGMA foreign_key_check` reports, per table.
fn foreign_key_violations(conn: &Connection) -> rusqlite::Result<BTreeMap<String, usize>> {
    let mut stmt = conn.prepare("PRAGMA foreign_key_check")?;
    let mut rows = stmt.query([])?;
    let mut counts = BTreeMap::new();
    while let Some(row) = rows.next()? {
        *counts.entry(row.get::<_, String>(0)?).or_insert(0) += 1;
    }
    Ok(counts)
}

fn sql_error(path: &Path, context: &str, busy: &Duration, e: rusqlite::Error) -> StoreError {
    let hint = match &e {
        rusqlite::Error::SqliteFailure(f, _)
            if matches!(
                f.code,
                rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
            ) =>
        {
            format!(
                " (another connection held the database's write lock for more than the busy \
                 timeout of {busy:?}; retry, or raise busy_timeout)"
            )
        }
        rusqlite::Error::SqliteFailure(f, _) if f.code == rusqlite::ErrorCode::DiskFull => {
            " (the disk is full)".to_owned()
        }
        _ => String::new(),
    };
    StoreError::Backend {
        backend: BACKEND,
        message: format!("{}: {context}: {e}{hint}", path.display()),
    }
}

/// Row-level outcome of a write closure: either a SQL error or a store error to return as is.
enum TxError {
    Sql(rusqlite::Error),
    Store(StoreError),
}

impl From<rusqlite::Error> for TxError {
    fn from(e: rusqlite::Error) -> Self {
        TxError::Sql(e)
    }
}

impl From<StoreError> for TxError {
    fn from(e: StoreError) -> Self {
        TxError::Store(e)
    }
}

type TxResult<T> = Result<T, TxError>;

/// `INSERT`/`UPDATE` column list of `sessions`, bound as `?2 … ?17` ( `?1` is the id).
const WRITE_COLUMNS: &str = "acp_session_id, agent_session_id, agent_command, cwd, cwd_key, \
     name, title, created_at, last_used_at, last_used_ms, closed, closed_at, last_prompt_at, \
     message_count, revision, document";

macro_rules! session_params {
    ($id:expr, $c:expr $(, $more:expr)*) => {
        params![
            $id,
            $c.acp_session_id,
            $c.agent_session_id,
            $c.agent_command,
            $c.cwd,
            $c.cwd_key,
            $c.name,
            $c.title,
            $c.created_at,
            $c.last_used_at,
            $c.last_used_ms,
            $c.closed,
            $c.closed_at,
            $c.last_prompt_at,
            $c.message_count,
            $c.revision,
            $c.document
            $(, $more)*
        ]
    };
}

impl Inner {
    fn conn(&self) -> MutexGuard<'_, Connection> {
        // A panic inside a call unwinds through the transaction guard, which rolls back: the
        // connection is still usable.
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn db(&self) -> String {
        self.path.display().to_string()
    }

    fn row_location(&self, id: &str) -> String {
        format!("{} sessions row {id:?}", self.db())
    }

    fn lock_path(&self, id: &RecordId) -> PathBuf {
        self.locks_dir.join(format!("{id}.lock"))
    }

    fn sql(&self, context: &str) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
        let context = context.to_owned();
        move |e| sql_error(&self.path, &context, &self.options.busy_timeout, e)
    }

    fn tx_error(&self, context: &str, e: TxError) -> StoreError {
        match e {
            TxError::Sql(e) => sql_error(&self.path, context, &self.options.busy_timeout, e),
            TxError::Store(e) => e,
        }
    }

    /// The per-call writer lock, unless this store holds the session's lock already.
    fn call_lock(&self, id: &RecordId) -> StoreResult<Option<FileLock>> {
        let path = self.lock_path(id);
        if self.held.contains(&path) {
            return Ok(None);
        }
        lock::acquire(&path, id, self.options.lock_timeout).map(Some)
    }

    /// Runs `f` in one `BEGIN IMMEDIATE` transaction; `fsync` commits it with
    /// `synchronous=FULL`.
    fn transaction<T>(
        &self,
        context: &str,
        fsync: bool,
        f: impl FnOnce(&Transaction<'_>) -> TxResult<T>,
    ) -> StoreResult<T> {
        let mut conn = self.conn();
        if fsync {
            conn.pragma_update(None, "synchronous", "FULL")
                .map_err(self.sql(context))?;
        }
        let result = (|| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let value = f(&tx)?;
            tx.commit()?;
            self.checkpointer.committed();
            Ok(value)
        })();
        if fsync {
            if let Err(e) = conn.pragma_update(None, "synchronous", "NORMAL") {
                tracing::warn!(db = %self.db(), error = %e, "could not restore synchronous=NORMAL");
            }
        }
        result.map_err(|e| self.tx_error(context, e))
    }

    /// A mutation of one session: its writer lock (unless held), then one transaction.
    fn mutate<T>(
        &self,
        id: &RecordId,
        context: &str,
        fsync: bool,
        f: impl FnOnce(&Transaction<'_>) -> TxResult<T>,
    ) -> StoreResult<T> {
        let _lock = self.call_lock(id)?;
        self.transaction(context, fsync, f)
    }

    fn create(
        &self,
        id: &RecordId,
        cols: SessionColumns,
        msgs: Vec<MessageRow>,
    ) -> StoreResult<()> {
        self.mutate(id, "create the session", false, |tx| {
            let exists = tx
                .prepare_cached("SELECT 1 FROM sessions WHERE acpx_record_id = ?1")?
                .exists([id.as_str()])?;
            if exists {
                return Err(StoreError::AlreadyExists(id.clone()).into());
            }
            tx.prepare_cached(&format!(
                "INSERT INTO sessions (acpx_record_id, {WRITE_COLUMNS}, document_checked) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, 1)"
            ))?
            .execute(session_params!(id.as_str(), cols))?;
            tx.prepare_cached("INSERT INTO event_logs (session_key) VALUES (?1)")?
                .execute([tx.last_insert_rowid()])?;
            sync_messages(tx, id, &msgs)?;
            Ok(())
        })
    }

    fn save(
        &self,
        id: &RecordId,
        expected: u64,
        cols: SessionColumns,
        msgs: Vec<MessageRow>,
    ) -> StoreResult<()> {
        let expected_i = rows::to_i64(expected, "revision")?;
        self.mutate(id, "save the session", false, |tx| {
            let changed = tx
                .prepare_cached(&format!(
                    "UPDATE sessions SET ({WRITE_COLUMNS}) = \
                     (?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17), \
                     document_checked = 1 \
                     WHERE acpx_record_id = ?1 AND revision = ?18"
                ))?
                .execute(session_params!(id.as_str(), cols, expected_i))?;
            if changed == 0 {
                let actual: Option<i64> = tx
                    .prepare_cached("SELECT revision FROM sessions WHERE acpx_record_id = ?1")?
                    .query_row([id.as_str()], |r| r.get(0))
                    .optional()?;
                return Err(match actual {
                    None => StoreError::NotFound(id.clone()),
                    Some(actual) => StoreError::Conflict {
                        id: id.clone(),
                        expected,
                        actual: u64::try_from(actual).unwrap_or(0),
                    },
                }
                .into());
            }
            sync_messages(tx, id, &msgs)?;
            Ok(())
        })
    }

    fn load(&self, id: &RecordId) -> StoreResult<SessionRecord> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare_cached("SELECT revision, document FROM sessions WHERE acpx_record_id = ?1")
            .map_err(self.sql("load the session"))?;
        let mut rows = stmt
            .query([id.as_str()])
            .map_err(self.sql("load the session"))?;
        let Some(row) = rows.next().map_err(self.sql("load the session"))? else {
            return Err(StoreError::NotFound(id.clone()));
        };
        let revision: i64 = row.get(0).map_err(self.sql("load the session"))?;
        let document = row.get_ref(1).map_err(self.sql("load the session"))?;
        parse_document(
            document,
            id.as_str(),
            revision,
            &self.row_location(id.as_str()),
        )
    }

    fn close(&self, id: &RecordId, at: Timestamp) -> StoreResult<SessionRecord> {
        let location = self.row_location(id.as_str());
        self.mutate(id, "close the session", false, |tx| {
            let mut stmt = tx.prepare_cached(
                "SELECT revision, document FROM sessions WHERE acpx_record_id = ?1",
            )?;
            let mut rows = stmt.query([id.as_str()])?;
            let Some(row) = rows.next()? else {
                return Err(StoreError::NotFound(id.clone()).into());
            };
            let revision: i64 = row.get(0)?;
            let mut record = parse_document(row.get_ref(1)?, id.as_str(), revision, &location)?;
            drop(rows);
            if record.closed {
                return Ok(record);
            }
            record.closed = true;
            record.closed_at = Some(at);
            record.pid = None;
            record.revision += 1;
            let cols = SessionColumns::from_record(&record)?;
            tx.prepare_cached(&format!(
                "UPDATE sessions SET ({WRITE_COLUMNS}) = \
                 (?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17), \
                 document_checked = 1 \
                 WHERE acpx_record_id = ?1 AND revision = ?18"
            ))?
            .execute(session_params!(id.as_str(), cols, revision))?;
            Ok(record)
        })
    }

    fn delete(&self, id: &RecordId) -> StoreResult<bool> {
        let lock = self.call_lock(id)?;
        let existed = self.transaction("delete the session", false, |tx| {
            let Some(key) = session_key(tx, id)? else {
                return Ok(false);
            };
            tx.prepare_cached("DELETE FROM messages WHERE acpx_record_id = ?1")?
                .execute([id.as_str()])?;
            for sql in [
                "DELETE FROM event_rows WHERE session_key = ?1",
                "DELETE FROM event_logs WHERE session_key = ?1",
                "DELETE FROM sessions WHERE session_key = ?1",
            ] {
                tx.prepare_cached(sql)?.execute([key])?;
            }
            Ok(true)
        })?;
        self.write_errors().remove(id);
        // Only a lock this call took is removed; a caller's held lock stays valid.
        if let Some(lock) = &lock {
            lock::remove_lock_file(lock);
        }
        Ok(existed)
    }

    fn list(&self, query: &ListQuery) -> StoreResult<ListPage> {
        let cwd = query.cwd.as_deref().map(normalize_cwd).transpose()?;
        let after = query.decode_cursor()?;
        if query.limit == Some(0) {
            return Err(StoreError::InvalidArgument(
                "limit must be at least 1".into(),
            ));
        }
        let mut sql = format!("SELECT {SUMMARY_COLUMNS} FROM sessions WHERE 1");
        let mut args: Vec<SqlValue> = Vec::new();
        let mut bind = |value: SqlValue| {
            args.push(value);
            format!("?{}", args.len())
        };
        if let Some(cwd) = cwd {
            sql.push_str(&format!(" AND cwd_key = {}", bind(SqlValue::Text(cwd))));
        }
        if let Some(a) = &query.agent_command {
            sql.push_str(&format!(
                " AND agent_command = {}",
                bind(SqlValue::Text(a.clone()))
            ));
        }
        if let Some(n) = &query.name {
            sql.push_str(&format!(" AND name = {}", bind(SqlValue::Text(n.clone()))));
        }
        match query.closed {
            ClosedFilter::Any => {}
            ClosedFilter::Open => sql.push_str(" AND closed = 0"),
            ClosedFilter::Closed => sql.push_str(" AND closed = 1"),
        }
        if let Some((t, last_id)) = after {
            // The redundant `<=` lets SQLite start the index scan at the cursor.
            let t = bind(SqlValue::Integer(t));
            let last_id = bind(SqlValue::Text(last_id));
            sql.push_str(&format!(
                " AND last_used_ms <= {t} AND (last_used_ms < {t} OR acpx_record_id > {last_id})"
            ));
        }
        sql.push_str(" ORDER BY last_used_ms DESC, acpx_record_id ASC");

        let conn = self.conn();
        let ctx = "list sessions";
        let mut stmt = conn.prepare_cached(&sql).map_err(self.sql(ctx))?;
        let mut rows = stmt
            .query(rusqlite::params_from_iter(args))
            .map_err(self.sql(ctx))?;
        let mut page = ListPage::default();
        // Bad rows between the last session of this page and the first of the next one are
        // reported by the next page (which reads them again), not twice.
        let mut pending: Vec<SkippedEntry> = Vec::new();
        while let Some(row) = rows.next().map_err(self.sql(ctx))? {
            let key = row
                .get_ref(0)
                .ok()
                .and_then(|v| v.as_str().ok().map(str::to_owned))
                .unwrap_or_default();
            let checked: i64 = row.get(15).unwrap_or(0);
            let summary = summary_from_row(row).and_then(|s| {
                if checked == 1 {
                    Ok(s)
                } else {
                    self.check_document(&conn, &s)
                }
            });
            match summary {
                Ok(s) => {
                    if query.limit.is_some_and(|l| page.sessions.len() >= l) {
                        page.next_cursor = page.sessions.last().map(|l| query.cursor_after(l));
                        pending.clear();
                        break;
                    }
                    page.skipped.append(&mut pending);
                    page.sessions.push(s);
                }
                Err(reason) => pending.push(SkippedEntry {
                    location: self.row_location(&key),
                    reason,
                }),
            }
        }
        page.skipped.append(&mut pending);
        for s in &page.skipped {
            tracing::warn!(location = %s.location, reason = %s.reason, "skipping malformed session row");
        }
        Ok(page)
    }

    /// For a row whose document was changed outside acpx: the columns are used only if the
    /// document validates and says the same.
    fn check_document(
        &self,
        conn: &Connection,
        columns: &acpx_model::SessionSummary,
    ) -> Result<acpx_model::SessionSummary, String> {
        let id = columns.acpx_record_id.as_str();
        let revision = i64::try_from(columns.revision).unwrap_or(i64::MAX);
        let record = conn
            .prepare_cached("SELECT document FROM sessions WHERE acpx_record_id = ?1")
            .and_then(|mut stmt| {
                stmt.query_row([id], |r| {
                    Ok(parse_document(
                        r.get_ref(0)?,
                        id,
                        revision,
                        &self.row_location(id),
                    ))
                })
            })
            .map_err(|e| format!("reading the document: {e}"))?
            .map_err(|e| match e {
                StoreError::Corrupt { reason, .. } => reason,
                other => other.to_string(),
            })?;
        let from_document = record.summary();
        match summary_difference(&from_document, columns) {
            None => Ok(from_document),
            Some(field) => Err(format!(
                "the document was edited outside acpx and its field `{field}` no longer \
                 matches the row's columns; load and save the session to re-derive them"
            )),
        }
    }

    fn append(
        &self,
        id: &RecordId,
        precheck: SeqPrecheck,
        batch: EventBatch,
        fsync: bool,
    ) -> StoreResult<EventLogState> {
        let budget = i64::try_from(
            self.options
                .max_segment_bytes
                .saturating_mul(u64::from(self.options.max_segments)),
        )
        .unwrap_or(i64::MAX);
        // No lock is taken here: the caller holds the session's writer lock (a `SessionLock`
        // of this store, checked by `Store::append`).
        let result = self.transaction("append events", fsync, |tx| {
            let mut log = log_row(tx, id)?;
            precheck.check(id, u64::try_from(log.last_seq).unwrap_or(0))?;
            let Some(last) = batch.rows().last() else {
                return Ok(log);
            };
            insert_events(tx, log.key, &batch)?;
            log.retained += batch.rows().iter().map(|r| r.bytes).sum::<i64>();
            log.last_seq = last.seq;
            if log.retained > budget {
                log.retained -= trim(tx, log.key, log.last_seq, log.retained - budget)?;
            }
            let now = ts_text(&Timestamp::now());
            // The log's bookkeeping is one row update per batch, whatever its size.
            tx.prepare_cached(
                "UPDATE event_logs SET last_seq = ?2, retained_bytes = ?3, last_write_at = ?4 \
                 WHERE session_key = ?1",
            )?
            .execute(params![log.key, log.last_seq, log.retained, now])?;
            log.last_write_at = Some(now);
            Ok(log)
        });
        match result {
            Ok(log) => {
                self.note_write_error(id, None);
                self.log_state(id, log, None)
            }
            Err(e) => {
                // A failed transaction (disk full, I/O error, a busy database) is a failed
                // write and stays reported until the next append succeeds. A refused call
                // (wrong seq, unknown session) wrote nothing and is only
                // the caller's error.
                if matches!(e, StoreError::Backend { .. } | StoreError::Io { .. }) {
                    self.note_write_error(id, Some(e.to_string()));
                }
                Err(e)
            }
        }
    }

    fn write_errors(&self) -> MutexGuard<'_, HashMap<RecordId, String>> {
        // The map stays consistent even if a holder panicked.
        self.write_errors.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn note_write_error(&self, id: &RecordId, error: Option<String>) {
        let mut errors = self.write_errors();
        match error {
            Some(e) => {
                errors.insert(id.clone(), e);
            }
            None => {
                // Most appends succeed: look before cloning the id.
                if !errors.is_empty() {
                    errors.remove(id);
                }
            }
        }
    }

    fn log_state(
        &self,
        id: &RecordId,
        log: LogRow,
        last_write_error: Option<String>,
    ) -> StoreResult<EventLogState> {
        let max = self.options.max_segment_bytes;
        let retained = u64::try_from(log.retained).unwrap_or(0);
        Ok(EventLogState {
            format_version: 1,
            active_path: format!("sqlite:{}#{id}", self.db()),
            // Retained bytes in units of max_segment_bytes: how many file segments the same
            // events would fill. See docs/format.md.
            segment_count: u32::try_from(retained.div_ceil(max))
                .unwrap_or(u32::MAX)
                .min(self.options.max_segments),
            max_segment_bytes: max,
            max_segments: self.options.max_segments,
            last_seq: u64::try_from(log.last_seq).unwrap_or(0),
            last_write_at: log
                .last_write_at
                .map(|t| {
                    Timestamp::parse(&t).map_err(|e| {
                        StoreError::corrupt(
                            format!("{} event_logs row {:?}", self.db(), id.as_str()),
                            None,
                            format!("column `last_write_at`: {e}"),
                        )
                    })
                })
                .transpose()?,
            last_write_error,
        })
    }

    fn event_log_state(&self, id: &RecordId) -> StoreResult<EventLogState> {
        let log = {
            let conn = self.conn();
            log_row(&conn, id).map_err(|e| self.tx_error("read the event log state", e))?
        };
        let error = self.write_errors().get(id).cloned();
        self.log_state(id, log, error)
    }

    fn read_events(&self, id: &RecordId, query: &EventQuery) -> StoreResult<EventPage> {
        let ctx = "read events";
        let conn = self.conn();
        let log = log_row(&conn, id).map_err(|e| self.tx_error(ctx, e))?;
        let oldest: Option<i64> = conn
            .prepare_cached("SELECT MIN(seq) FROM event_rows WHERE session_key = ?1")
            .and_then(|mut s| s.query_row([log.key], |r| r.get(0)))
            .map_err(self.sql(ctx))?;
        let (sql, args) = events_query(log.key, query);
        let mut stmt = conn.prepare_cached(&sql).map_err(self.sql(ctx))?;
        let mut rows = stmt
            .query(rusqlite::params_from_iter(args))
            .map_err(self.sql(ctx))?;
        let mut page = EventPage {
            last_seq: u64::try_from(log.last_seq).unwrap_or(0),
            oldest_seq: oldest.and_then(|s| u64::try_from(s).ok()).unwrap_or(0),
            ..EventPage::default()
        };
        while let Some(row) = rows.next().map_err(self.sql(ctx))? {
            let seq: i64 = row.get(0).map_err(self.sql(ctx))?;
            if query.limit.is_some_and(|l| page.events.len() >= l) {
                page.next_seq = u64::try_from(seq).ok();
                break;
            }
            match event_from_row(row, id) {
                Ok(e) => page.events.push(e),
                Err(reason) => match query.mode {
                    ReadMode::Strict => {
                        return Err(StoreError::corrupt(
                            format!("{} events row ({:?}, seq {seq})", self.db(), id.as_str()),
                            None,
                            reason,
                        ))
                    }
                    ReadMode::Lenient => page.damaged.push(DamagedLine {
                        location: format!("{} events", self.db()),
                        line: u64::try_from(seq).unwrap_or(0),
                        reason,
                    }),
                },
            }
        }
        Ok(page)
    }

    fn exists(&self, id: &RecordId) -> StoreResult<bool> {
        self.conn()
            .prepare_cached("SELECT 1 FROM sessions WHERE acpx_record_id = ?1")
            .and_then(|mut s| s.exists([id.as_str()]))
            .map_err(self.sql("look up the session"))
    }

    fn search(&self, query: &SearchQuery) -> StoreResult<Vec<acpx_model::SearchHit>> {
        let cwd = query.cwd.as_deref().map(normalize_cwd).transpose()?;
        let terms = query.terms();
        if terms.is_empty() {
            return Ok(Vec::new());
        }
        // Trigram matching needs 3 characters, and the FTS5 query parser stops at a NUL;
        // other terms are matched with instr() on the lowercased text, which is the shared
        // substring rule exactly.
        let (indexed, short): (Vec<&String>, Vec<&String>) = terms
            .iter()
            .partition(|t| t.chars().count() >= 3 && !t.contains('\0'));
        let mut args: Vec<SqlValue> = Vec::new();
        let mut sql = String::from(
            "SELECT m.acpx_record_id, s.title, m.message_index, m.role, m.message_id, m.text \
             FROM messages m JOIN sessions s ON s.acpx_record_id = m.acpx_record_id",
        );
        if !indexed.is_empty() {
            args.push(SqlValue::Text(fts_query(&indexed)));
            sql.push_str(&format!(
                " WHERE m.rowid IN (SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?{})",
                args.len()
            ));
        } else {
            sql.push_str(" WHERE 1");
        }
        for t in &short {
            args.push(SqlValue::Text((*t).clone()));
            sql.push_str(&format!(" AND instr(lower(m.text), ?{}) > 0", args.len()));
        }
        if let Some(cwd) = cwd {
            args.push(SqlValue::Text(cwd));
            sql.push_str(&format!(" AND s.cwd_key = ?{}", args.len()));
        }
        args.push(SqlValue::Integer(
            i64::try_from(query.effective_limit()).unwrap_or(i64::MAX),
        ));
        sql.push_str(&format!(
            " ORDER BY s.last_used_ms DESC, s.acpx_record_id, m.message_index LIMIT ?{}",
            args.len()
        ));
        let ctx = "search";
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(&sql).map_err(self.sql(ctx))?;
        let mut rows = stmt
            .query(rusqlite::params_from_iter(args))
            .map_err(self.sql(ctx))?;
        let mut hits = Vec::new();
        while let Some(row) = rows.next().map_err(self.sql(ctx))? {
            let key: String = row.get(0).map_err(self.sql(ctx))?;
            let Ok(id) = RecordId::parse(&key) else {
                tracing::warn!(location = %self.row_location(&key), "search skips a row with an invalid record id");
                continue;
            };
            let text: String = row.get(5).map_err(self.sql(ctx))?;
            let lower = text.to_ascii_lowercase();
            let at = lower.find(terms[0].as_str()).unwrap_or(0);
            hits.push(SearchHit {
                acpx_record_id: id,
                title: row
                    .get::<_, Option<String>>(1)
                    .map_err(self.sql(ctx))?
                    .filter(|t| !t.is_empty()),
                message_index: usize::try_from(row.get::<_, i64>(2).map_err(self.sql(ctx))?)
                    .unwrap_or(0),
                role: row.get(3).map_err(self.sql(ctx))?,
                message_id: row.get(4).map_err(self.sql(ctx))?,
                snippet: snippet(&text, at, terms[0].len()),
            });
        }
        Ok(hits)
    }
}

/// The `read_events` statement and its arguments.
///
/// Without statistics SQLite reads every filtered query along the primary key, from
/// `from_seq` on, testing each row: fine for a common type, a scan of the whole rest of a
/// long log for a rare one. A request id or a single type names the index whose entries are
/// exactly the matching rows, already in seq order, so it is used explicitly: at worst (a
/// type that almost every event has) each row costs one more lookup, and a page still stops
/// after `limit` rows. Several types keep the primary key order (an index would return each
/// type's rows separately and need a sort of all of them before the first page).
fn events_query(key: i64, query: &EventQuery) -> (String, Vec<SqlValue>) {
    let index = if query.request_id.is_some() {
        " INDEXED BY events_by_request"
    } else if query.types.len() == 1 {
        " INDEXED BY events_by_type"
    } else {
        ""
    };
    let mut sql = format!(
        "SELECT {EVENT_COLUMNS} FROM event_rows{index} WHERE session_key = ?1 AND seq >= ?2"
    );
    let mut args: Vec<SqlValue> = vec![
        SqlValue::Integer(key),
        SqlValue::Integer(i64::try_from(query.from_seq).unwrap_or(i64::MAX)),
    ];
    let json_list = |items: Vec<&str>| SqlValue::Text(serde_json::json!(items).to_string());
    match query.types.as_slice() {
        [] => {}
        [one] => {
            args.push(SqlValue::Text(one.clone()));
            sql.push_str(&format!(" AND type = ?{}", args.len()));
        }
        many => {
            args.push(json_list(many.iter().map(String::as_str).collect()));
            sql.push_str(&format!(
                " AND type IN (SELECT value FROM json_each(?{}))",
                args.len()
            ));
        }
    }
    if !query.streams.is_empty() {
        args.push(json_list(
            query.streams.iter().map(|s| s.as_str()).collect(),
        ));
        sql.push_str(&format!(
            " AND stream IN (SELECT value FROM json_each(?{}))",
            args.len()
        ));
    }
    if let Some(r) = &query.request_id {
        args.push(SqlValue::Text(r.clone()));
        sql.push_str(&format!(" AND request_id = ?{}", args.len()));
    }
    sql.push_str(" ORDER BY seq");
    if let Some(limit) = query.limit {
        // One more than asked: its seq is where the next page starts.
        args.push(SqlValue::Integer(
            i64::try_from(limit)
                .unwrap_or(i64::MAX - 1)
                .saturating_add(1),
        ));
        sql.push_str(&format!(" LIMIT ?{}", args.len()));
    }
    (sql, args)
}

/// An FTS5 query in which every term is one quoted string (an embedded `"` doubled), so no
/// user text is ever read as FTS syntax. Strings side by side are ANDed.
fn fts_query(terms: &[&String]) -> String {
    let mut q = String::new();
    for t in terms {
        if !q.is_empty() {
            q.push(' ');
        }
        q.push('"');
        q.push_str(&t.replace('"', "\"\""));
        q.push('"');
    }
    q
}

/// Row counts of the multi-row `INSERT` statements a batch is split into. Few distinct
/// statements keep the statement cache small; many rows per statement save most of the
/// per-statement cost of a batch.
const INSERT_CHUNKS: [usize; 4] = [64, 16, 4, 1];

fn insert_events(tx: &Transaction<'_>, key: i64, batch: &EventBatch) -> TxResult<()> {
    let mut rest = batch.rows();
    while !rest.is_empty() {
        let size = INSERT_CHUNKS
            .into_iter()
            .find(|&n| n <= rest.len())
            .unwrap_or(1);
        let (chunk, tail) = rest.split_at(size);
        let row = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
        let sql = format!(
            "INSERT INTO event_rows ({INSERT_COLUMNS}) VALUES {}",
            vec![row; size].join(", ")
        );
        let mut stmt = tx.prepare_cached(&sql)?;
        let values = chunk.iter().flat_map(|r| batch.values(key, r));
        for (i, value) in values.enumerate() {
            stmt.raw_bind_parameter(i + 1, value)?;
        }
        stmt.raw_execute()?;
        rest = tail;
    }
    Ok(())
}

/// A session's key and its `event_logs` row.
struct LogRow {
    key: i64,
    last_seq: i64,
    retained: i64,
    last_write_at: Option<String>,
}

/// The `session_key` of a session, if it exists.
fn session_key(conn: &Connection, id: &RecordId) -> rusqlite::Result<Option<i64>> {
    conn.prepare_cached("SELECT session_key FROM sessions WHERE acpx_record_id = ?1")?
        .query_row([id.as_str()], |r| r.get(0))
        .optional()
}

/// A session's key and log row; `NotFound` without a session. A session row without a log
/// row (made by hand) gets one, computed from its events.
fn log_row(conn: &Connection, id: &RecordId) -> TxResult<LogRow> {
    let row = conn
        .prepare_cached(
            "SELECT s.session_key, l.last_seq, l.retained_bytes, l.last_write_at \
             FROM sessions s LEFT JOIN event_logs l ON l.session_key = s.session_key \
             WHERE s.acpx_record_id = ?1",
        )?
        .query_row([id.as_str()], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, Option<i64>>(1)?,
                r.get::<_, Option<i64>>(2)?,
                r.get::<_, Option<String>>(3)?,
            ))
        })
        .optional()?;
    let Some((key, last_seq, retained, last_write_at)) = row else {
        return Err(StoreError::NotFound(id.clone()).into());
    };
    if let (Some(last_seq), Some(retained)) = (last_seq, retained) {
        return Ok(LogRow {
            key,
            last_seq,
            retained,
            last_write_at,
        });
    }
    let (last, bytes): (Option<i64>, Option<i64>) = conn
        .prepare_cached("SELECT MAX(seq), SUM(bytes) FROM event_rows WHERE session_key = ?1")?
        .query_row([key], |r| Ok((r.get(0)?, r.get(1)?)))?;
    let (last_seq, retained) = (last.unwrap_or(0), bytes.unwrap_or(0));
    conn.prepare_cached(
        "INSERT OR IGNORE INTO event_logs (session_key, last_seq, retained_bytes) \
         VALUES (?1, ?2, ?3)",
    )?
    .execute(params![key, last_seq, retained])?;
    Ok(LogRow {
        key,
        last_seq,
        retained,
        last_write_at: None,
    })
}

/// Deletes the oldest events until at least `excess` bytes are freed, never the newest event
/// (a single line larger than the budget stays, like the file store's active segment).
/// Returns the bytes freed.
fn trim(tx: &Transaction<'_>, key: i64, newest: i64, excess: i64) -> TxResult<i64> {
    let mut freed = 0;
    let mut cut = None;
    {
        let mut stmt = tx.prepare_cached(
            "SELECT seq, bytes FROM event_rows WHERE session_key = ?1 AND seq < ?2 ORDER BY seq",
        )?;
        let mut rows = stmt.query(params![key, newest])?;
        while let Some(row) = rows.next()? {
            freed += row.get::<_, i64>(1)?;
            cut = Some(row.get::<_, i64>(0)?);
            if freed >= excess {
                break;
            }
        }
    }
    if let Some(cut) = cut {
        tx.prepare_cached("DELETE FROM event_rows WHERE session_key = ?1 AND seq <= ?2")?
            .execute(params![key, cut])?;
    }
    Ok(freed)
}

/// Brings the `messages` rows (and through its triggers the FTS index) in step with a
/// snapshot, touching only the messages that changed.
fn sync_messages(tx: &Transaction<'_>, id: &RecordId, msgs: &[MessageRow]) -> TxResult<()> {
    let mut existing = std::collections::HashMap::new();
    {
        let mut stmt = tx.prepare_cached(
            "SELECT message_index, text_hash FROM messages WHERE acpx_record_id = ?1",
        )?;
        let mut rows = stmt.query([id.as_str()])?;
        while let Some(row) = rows.next()? {
            existing.insert(row.get::<_, i64>(0)?, row.get::<_, i64>(1)?);
        }
    }
    let mut insert = tx.prepare_cached(
        "INSERT INTO messages (acpx_record_id, message_index, role, message_id, text, text_hash) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?;
    let mut update = tx.prepare_cached(
        "UPDATE messages SET role = ?3, message_id = ?4, text = ?5, text_hash = ?6 \
         WHERE acpx_record_id = ?1 AND message_index = ?2",
    )?;
    for m in msgs {
        let args = params![id.as_str(), m.index, m.role, m.message_id, m.text, m.hash];
        match existing.remove(&m.index) {
            Some(hash) if hash == m.hash => {}
            Some(_) => {
                update.execute(args)?;
            }
            None => {
                insert.execute(args)?;
            }
        }
    }
    if !existing.is_empty() {
        let mut delete = tx.prepare_cached(
            "DELETE FROM messages WHERE acpx_record_id = ?1 AND message_index = ?2",
        )?;
        for index in existing.keys() {
            delete.execute(params![id.as_str(), index])?;
        }
    }
    Ok(())
}

/// The part of [`check_append_batch`] that does not depend on the stored log, computed before
/// the transaction, so the transaction can give exactly the answer `check_append_batch` would
/// give against the log's real last seq without copying the events.
#[derive(Debug)]
struct SeqPrecheck {
    first_seq: Option<u64>,
    /// `check_append_batch` against the last seq the batch assumes (`first_seq - 1`).
    assuming_contiguous: StoreResult<()>,
    /// `check_append_batch`'s error for a first event of another session (it does not depend
    /// on the last seq).
    first_id_error: Option<StoreError>,
}

impl SeqPrecheck {
    fn new(id: &RecordId, events: &[EventEnvelope]) -> Self {
        let first_seq = events.first().map(|e| e.seq);
        SeqPrecheck {
            first_seq,
            assuming_contiguous: match first_seq {
                Some(s) if s >= 1 => check_append_batch(id, s - 1, events),
                _ => Ok(()),
            },
            first_id_error: match events.first() {
                Some(e) if e.acpx_record_id != *id => check_append_batch(id, 0, &events[..1]).err(),
                _ => None,
            },
        }
    }

    /// What `check_append_batch(id, last_seq, events)` returns.
    fn check(self, id: &RecordId, last_seq: u64) -> StoreResult<()> {
        let Some(first) = self.first_seq else {
            return Ok(());
        };
        if first >= 1 && first - 1 == last_seq {
            return self.assuming_contiguous;
        }
        // The batch does not continue the log: check_append_batch stops at the first event,
        // on its record id if that is wrong, else on its seq.
        if let Some(e) = self.first_id_error {
            return Err(e);
        }
        Err(StoreError::SeqMismatch {
            id: id.clone(),
            last: last_seq,
            got: first,
        })
    }
}

#[async_trait]
impl Store for SqliteStore {
    fn backend_name(&self) -> &'static str {
        BACKEND
    }

    async fn create(&self, record: &mut SessionRecord) -> StoreResult<()> {
        let id = record.acpx_record_id.clone();
        record.validate(&self.inner.row_location(id.as_str()))?;
        let previous = record.revision;
        record.revision = 1;
        let cols = SessionColumns::from_record(record);
        let msgs = message_rows(record);
        record.revision = previous;
        let cols = cols?;
        self.run(move |inner| inner.create(&id, cols, msgs)).await?;
        record.revision = 1;
        Ok(())
    }

    async fn load(&self, id: &RecordId) -> StoreResult<SessionRecord> {
        let id = id.clone();
        self.run(move |inner| inner.load(&id)).await
    }

    async fn save(&self, record: &mut SessionRecord) -> StoreResult<()> {
        let id = record.acpx_record_id.clone();
        record.validate(&self.inner.row_location(id.as_str()))?;
        let expected = record.revision;
        record.revision = expected.checked_add(1).ok_or_else(|| {
            StoreError::InvalidArgument(format!("session {id}: revision {expected} overflows"))
        })?;
        let cols = SessionColumns::from_record(record);
        let msgs = message_rows(record);
        record.revision = expected;
        let cols = cols?;
        let owned = id.clone();
        self.run_held(&id, move |inner| inner.save(&owned, expected, cols, msgs))
            .await?;
        record.revision = expected + 1;
        Ok(())
    }

    async fn close(&self, id: &RecordId, at: Timestamp) -> StoreResult<SessionRecord> {
        let owned = id.clone();
        self.run_held(id, move |inner| inner.close(&owned, at))
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

    async fn append(
        &self,
        writer: &SessionLock,
        events: &[EventEnvelope],
        durability: Durability,
    ) -> StoreResult<EventLogState> {
        writer.check_issuer(self.inner.held.issuer(), "sqlite")?;
        let id = writer.id();
        let precheck = SeqPrecheck::new(id, events);
        let batch = EventBatch::new(events)?;
        let owned = id.clone();
        let fsync = durability == Durability::Fsync;
        self.run_held(id, move |inner| {
            inner.append(&owned, precheck, batch, fsync)
        })
        .await
    }

    async fn read_events(&self, id: &RecordId, query: &EventQuery) -> StoreResult<EventPage> {
        let id = id.clone();
        let query = query.clone();
        self.run(move |inner| inner.read_events(&id, &query)).await
    }

    async fn event_log_state(&self, id: &RecordId) -> StoreResult<EventLogState> {
        let id = id.clone();
        self.run(move |inner| inner.event_log_state(&id)).await
    }

    async fn flush(&self, id: &RecordId) -> StoreResult<()> {
        // Every append is committed before it returns: nothing is buffered in the process.
        let id = id.clone();
        self.run(move |inner| {
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

    async fn lock(&self, id: &RecordId, timeout: Duration) -> StoreResult<SessionLock> {
        let id = id.clone();
        self.run(move |inner| {
            let lock = lock::acquire(&inner.lock_path(&id), &id, timeout)?;
            Ok(SessionLock::new(
                id,
                inner.held.issuer(),
                Box::new(lock::session_guard(lock, &inner.held)),
            ))
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use acpx_model::{EventContext, EventPayload, EventSource, EventStream};

    fn batch(id: &RecordId, seqs: &[u64], foreign_at: Option<usize>) -> Vec<EventEnvelope> {
        let other = RecordId::parse("other").unwrap();
        seqs.iter()
            .enumerate()
            .map(|(i, &seq)| {
                let owner = if foreign_at == Some(i) { &other } else { id };
                let ctx = EventContext {
                    acpx_record_id: owner,
                    acp_session_id: "a",
                    request_id: None,
                    stream: EventStream::Prompt,
                    source: EventSource::Acp,
                };
                let payload = EventPayload::Unknown {
                    event_type: "t".into(),
                    payload: serde_json::Value::Null,
                };
                EventEnvelope::new(&ctx, seq, Timestamp::now(), payload)
            })
            .collect()
    }

    fn outcome(r: StoreResult<()>) -> String {
        match r {
            Ok(()) => "ok".into(),
            Err(StoreError::SeqMismatch { last, got, .. }) => format!("seq {last} {got}"),
            Err(e) => format!("{}: {e}", e.kind()),
        }
    }

    #[test]
    fn precheck_answers_exactly_like_check_append_batch() {
        let id = RecordId::parse("s").unwrap();
        let shapes: &[&[u64]] = &[
            &[],
            &[0],
            &[1],
            &[1, 2, 3],
            &[4, 5, 6],
            &[4, 6],
            &[5, 5],
            &[3, 4, 9],
            &[u64::MAX],
        ];
        for seqs in shapes {
            for foreign in [None, Some(0), Some(1), Some(2)] {
                if foreign.is_some_and(|f| f >= seqs.len()) {
                    continue;
                }
                let events = batch(&id, seqs, foreign);
                for last in [0, 2, 3, 4, 5, 8] {
                    let expected = outcome(check_append_batch(&id, last, &events));
                    let got = outcome(SeqPrecheck::new(&id, &events).check(&id, last));
                    assert_eq!(
                        got, expected,
                        "seqs {seqs:?} foreign {foreign:?} last {last}"
                    );
                }
            }
        }
    }

    /// The plan SQLite picks for each shape of `read_events` query (no statistics, as in a
    /// fresh database): always in seq order without a sort, through the index that holds
    /// exactly the rows asked for when there is one.
    #[test]
    fn read_events_queries_use_the_narrowest_index() {
        let mut conn = Connection::open_in_memory().unwrap();
        migrate(&mut conn, Path::new(":memory:")).unwrap_or_else(|_| panic!("migrate"));
        let plan = |query: &EventQuery| -> String {
            let (sql, args) = events_query(1, query);
            let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
            let rows = stmt
                .query_map(rusqlite::params_from_iter(args), |r| r.get::<_, String>(3))
                .unwrap();
            rows.collect::<Result<Vec<_>, _>>().unwrap().join("; ")
        };
        let with = |f: &dyn Fn(&mut EventQuery)| {
            let mut q = EventQuery {
                limit: Some(10),
                ..EventQuery::from_seq(5)
            };
            f(&mut q);
            q
        };
        let cases: [(EventQuery, &str); 5] = [
            (with(&|_| {}), "USING PRIMARY KEY (session_key=? AND seq>?)"),
            (
                with(&|q| q.types = vec!["prompt_error".into()]),
                "USING INDEX events_by_type (session_key=? AND type=? AND seq>?)",
            ),
            (
                with(&|q| {
                    q.types = vec!["a".into(), "b".into()];
                    q.streams = vec![EventStream::Prompt];
                }),
                "USING PRIMARY KEY (session_key=? AND seq>?)",
            ),
            (
                with(&|q| q.request_id = Some("req_1".into())),
                "USING INDEX events_by_request (session_key=? AND request_id=? AND seq>?)",
            ),
            (
                with(&|q| {
                    q.request_id = Some("req_1".into());
                    q.types = vec!["a".into()];
                }),
                "USING INDEX events_by_request (session_key=? AND request_id=? AND seq>?)",
            ),
        ];
        for (query, expected) in cases {
            let plan = plan(&query);
            assert!(plan.contains(expected), "{query:?}: {plan}");
            assert!(!plan.contains("TEMP B-TREE"), "{query:?}: {plan}");
        }
    }

    #[test]
    fn fts_query_quotes_every_term() {
        let terms = ["a\"b".to_owned(), "NEAR(x".to_owned()];
        let refs: Vec<&String> = terms.iter().collect();
        assert_eq!(fts_query(&refs), r#""a""b" "NEAR(x""#);
    }
}
