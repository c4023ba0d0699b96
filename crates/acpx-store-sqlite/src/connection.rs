//! Opening the database (version check, pragmas, migrations), the mapping of SQLite errors
//! to [`StoreError`]s, and the transaction and per-session lock helpers every write uses.

use std::collections::BTreeMap;
use std::fs::DirBuilder;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::MutexGuard;
use std::time::Duration;

use acpx_model::{RecordId, StoreError, StoreResult};
use rusqlite::config::DbConfig;
use rusqlite::{Connection, OpenFlags, Transaction, TransactionBehavior};

use crate::{checkpoint, lock, schema, Inner, SqliteStoreOptions, BACKEND, SCHEMA_VERSION};
use acpx_lock::FileLock;

pub(crate) fn create_private_dir(dir: &Path) -> StoreResult<()> {
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| StoreError::io(dir.display(), e))
}

/// `PRAGMA cache_size` of the store's connection (negative: KiB): 2 MiB (SQLite's default is
/// 2,000 KiB).
/// A larger cache fills during a long turn with the pages of the growing event b-trees, which
/// are not read again: 16 MiB made a 1M-chunk turn's peak RSS 1.94× that of a 10k-chunk turn,
/// 2 MiB 1.45×. The cost of a prompt on a large session was measured the same with both
/// (docs/BENCHMARKS.md § Late evening: the page cache back to 2 MiB).
const CACHE_KIB: i64 = -2048;

/// `PRAGMA journal_mode = WAL`, retried while the database is busy, up to `busy_timeout`.
///
/// Switching a new database to WAL needs its exclusive lock. When several processes open a new
/// store at once (two `sessions ensure` in parallel), each reads the header with a shared lock
/// and then asks for the exclusive one; SQLite answers the second with `SQLITE_BUSY` at once,
/// without its busy handler (waiting could deadlock), so the wait is done here: the first
/// switches the file to WAL, after which the pragma is a read for the others.
fn enable_wal(conn: &Connection, busy_timeout: Duration) -> rusqlite::Result<String> {
    let start = std::time::Instant::now();
    let mut pause = Duration::from_millis(1);
    loop {
        match conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get::<_, String>(0)) {
            Err(rusqlite::Error::SqliteFailure(f, m))
                if matches!(
                    f.code,
                    rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
                ) =>
            {
                if start.elapsed() >= busy_timeout {
                    return Err(rusqlite::Error::SqliteFailure(f, m));
                }
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            other => return other,
        }
    }
}

/// Opens the connection: version check first (nothing is written to a database that is too
/// new), then the pragmas, then the migrations.
pub(crate) fn open_connection(
    path: &Path,
    options: &SqliteStoreOptions,
) -> StoreResult<Connection> {
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
    // The first read of the file: a file that is not a database, or one whose pages are
    // damaged, is corrupt data (what the caller can act on: move the file away or restore
    // it), not a backend failure that says nothing about the file.
    let version = user_version(&conn).map_err(|e| match e {
        rusqlite::Error::SqliteFailure(f, _) if f.code == rusqlite::ErrorCode::NotADatabase => {
            StoreError::corrupt(path.display().to_string(), None, "not an SQLite database")
        }
        rusqlite::Error::SqliteFailure(f, _) if f.code == rusqlite::ErrorCode::DatabaseCorrupt => {
            StoreError::corrupt(
                path.display().to_string(),
                None,
                format!("the SQLite database is damaged ({e})"),
            )
        }
        e => err("read the schema version")(e),
    })?;
    check_version(path, version)?;
    let mode = enable_wal(&conn, options.busy_timeout).map_err(err("enable WAL"))?;
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
         PRAGMA temp_store = MEMORY;",
    )
    .map_err(err("set pragmas"))?;
    conn.pragma_update(None, "cache_size", CACHE_KIB)
        .map_err(err("set pragmas"))?;
    // Checkpoints normally run on the store's checkpoint thread (see `checkpoint`).
    conn.pragma_update(None, "wal_autocheckpoint", checkpoint::FALLBACK_PAGES)
        .map_err(err("set pragmas"))?;
    conn.set_prepared_statement_cache_capacity(64);
    // The query planner's stability guarantee: no plan depends on a bound value. Without it
    // SQLite marks a statement whose plan looked at a parameter (here `read_events`', whose
    // LIMIT or key it inspects) to be prepared again whenever that parameter changes: once
    // per session read, 3 % of the CPU time of a migration (`perf probe` on
    // `sqlite3Reprepare`: 10,000 calls for 10,000 sessions). Our statements that depend on an
    // index name it (`INDEXED BY`), so no plan is lost.
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)
        .map_err(err("set the query planner's stability guarantee"))?;
    if (1..SCHEMA_VERSION).contains(&version) {
        refuse_upgrade_under_old_writers(path, version)?;
    }
    migrate(&mut conn, path).map_err(|e| match e {
        MigrateError::Sql(e) => err("migrate the schema")(e),
        MigrateError::Store(e) => e,
    })?;
    checkpoint::reclaim_large_wal(&conn, path, options.busy_timeout);
    Ok(conn)
}

/// `<db>.locks`: the directory of the sessions' writer lock files.
pub(crate) fn locks_dir(db: &Path) -> PathBuf {
    let mut dir = db.as_os_str().to_owned();
    dir.push(".locks");
    PathBuf::from(dir)
}

/// The schema version from which `sessions` is a view (schema version 6): an acpx of an
/// earlier version saves into it as into a table, and fails (see below).
const SPLIT_DOCUMENTS_VERSION: i64 = 6;

/// What an older acpx still writing would get wrong after an upgrade from `version`.
fn older_writer_harm(version: i64) -> &'static str {
    if version < SPLIT_DOCUMENTS_VERSION {
        "which writes `sessions` as a table and would fail its saves after the upgrade"
    } else if version < 8 {
        "which would append events without their request's range, so that `sessions events \
         --request-id` would miss them after the upgrade"
    } else {
        "which would save sessions without their usage column, so that `sessions usage` \
         would show an earlier total for them after the upgrade"
    }
}

/// Refuses to upgrade a database of an older version while another process holds a
/// session's writer lock (`<db>.locks/<id>.lock`): a queue owner or a prompt of an older acpx,
/// most likely, which writes the old schema.
/// - From versions 1–5: it writes `sessions` as a table. After the upgrade its saves would
///   fail (SQLite counts no changed rows for a view: the older acpx reports a save
///   conflict), every prompt it runs until it exits would end with an error, and its replies
///   would reach the session only when a newer acpx rolls it forward from the log.
/// - From versions 6–7: it appends without extending `event_requests` (version 8), so a read
///   by request id would not find those events.
/// - From version 8: its saves leave the `usage` column (version 9) as it was.
///
/// Nothing is lost either way; waiting for that process keeps its turns whole. Found by a
/// user test: an idle older queue owner (it lives for its TTL, 300 s by default) served the
/// next prompt of the new CLI.
fn refuse_upgrade_under_old_writers(path: &Path, version: i64) -> StoreResult<()> {
    let Ok(entries) = std::fs::read_dir(locks_dir(path)) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        let lock = entry.path();
        let name = entry.file_name();
        let Some(id) = name.to_str().and_then(|n| n.strip_suffix(".lock")) else {
            continue;
        };
        // A batch lock (`.batch.<n>.lock`) guards the new sessions of a migration or an
        // import, which writes them (and their events) with the old schema too.
        let holder = if id.starts_with('.') {
            format!("a migration or import (lock {id})")
        } else {
            format!("session {id}")
        };
        if let Ok(None) = acpx_lock::FileLock::try_exclusive(&lock) {
            return Err(StoreError::Backend {
                backend: BACKEND,
                message: format!(
                    "{}: the database needs its schema upgraded from version {version} to \
                     {SCHEMA_VERSION}, and another process holds the writer lock of \
                     {holder} (a queue owner, a prompt or a migration of an older acpx, most \
                     likely, {}); \
                     nothing was changed. Run the command \
                     again once that process has exited: an idle queue owner exits after its \
                     TTL (300 s by default), and can be ended sooner (`kill`) without harm to \
                     its session",
                    path.display(),
                    older_writer_harm(version)
                ),
            });
        }
    }
    Ok(())
}

pub(crate) fn user_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row("PRAGMA user_version", [], |r| r.get(0))
}

pub(crate) fn check_version(path: &Path, version: i64) -> StoreResult<()> {
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

#[derive(Debug)]
pub(crate) enum MigrateError {
    Sql(rusqlite::Error),
    Store(StoreError),
}

impl From<rusqlite::Error> for MigrateError {
    fn from(e: rusqlite::Error) -> Self {
        MigrateError::Sql(e)
    }
}

pub(crate) fn migrate(conn: &mut Connection, path: &Path) -> Result<(), MigrateError> {
    if user_version(conn)? == SCHEMA_VERSION {
        return Ok(());
    }
    // A rebuilt table is dropped and replaced; with foreign keys on, dropping a parent table
    // would delete its children first. The pragma is a no-op inside a transaction, so it is
    // switched around it (and back on whatever happens).
    // Version 6 computes the search parts' hashes in SQL with acpx's own function.
    crate::text_hash::register(conn)?;
    // Version 9 derives each row's usage from its document the way a save does.
    crate::usage_column::register(conn)?;
    conn.pragma_update(None, "foreign_keys", "OFF")?;
    let result = migrate_steps(conn, path);
    let unregistered =
        crate::text_hash::unregister(conn).and(crate::usage_column::unregister(conn));
    let restored = conn.pragma_update(None, "foreign_keys", "ON");
    result?;
    unregistered?;
    restored?;
    Ok(())
}

pub(crate) fn migrate_steps(conn: &mut Connection, path: &Path) -> Result<(), MigrateError> {
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
        if from as i64 + 1 == schema::USAGE_VERSION {
            schema::add_usage_column(&tx)?;
        }
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
pub(crate) fn foreign_key_violations(
    conn: &Connection,
) -> rusqlite::Result<BTreeMap<String, usize>> {
    let mut stmt = conn.prepare("PRAGMA foreign_key_check")?;
    let mut rows = stmt.query([])?;
    let mut counts = BTreeMap::new();
    while let Some(row) = rows.next()? {
        *counts.entry(row.get::<_, String>(0)?).or_insert(0) += 1;
    }
    Ok(counts)
}

pub(crate) fn sql_error(
    path: &Path,
    context: &str,
    busy: &Duration,
    e: rusqlite::Error,
) -> StoreError {
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
pub(crate) enum TxError {
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

pub(crate) type TxResult<T> = Result<T, TxError>;

impl Inner {
    pub(crate) fn conn(&self) -> MutexGuard<'_, Connection> {
        // A panic inside a call unwinds through the transaction guard, which rolls back: the
        // connection is still usable.
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn db(&self) -> String {
        self.path.display().to_string()
    }

    pub(crate) fn row_location(&self, id: &str) -> String {
        format!("{} sessions row {id:?}", self.db())
    }

    pub(crate) fn lock_path(&self, id: &RecordId) -> PathBuf {
        self.locks.path(id)
    }

    pub(crate) fn sql(&self, context: &str) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
        let context = context.to_owned();
        move |e| sql_error(&self.path, &context, &self.options.busy_timeout, e)
    }

    pub(crate) fn tx_error(&self, context: &str, e: TxError) -> StoreError {
        match e {
            TxError::Sql(e) => sql_error(&self.path, context, &self.options.busy_timeout, e),
            TxError::Store(e) => e,
        }
    }

    /// The per-call writer lock, unless this store holds the session's lock already.
    pub(crate) fn call_lock(&self, id: &RecordId) -> StoreResult<Option<FileLock>> {
        if self.held.contains(&self.lock_path(id)) {
            return Ok(None);
        }
        lock::acquire(&self.locks, id, self.options.lock_timeout).map(Some)
    }

    /// Runs `f` in one `BEGIN IMMEDIATE` transaction; `fsync` commits it with
    /// `synchronous=FULL`.
    pub(crate) fn transaction<T>(
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
    pub(crate) fn mutate<T>(
        &self,
        id: &RecordId,
        context: &str,
        fsync: bool,
        f: impl FnOnce(&Transaction<'_>) -> TxResult<T>,
    ) -> StoreResult<T> {
        // Events appended before this call come before it in the database too.
        self.commit_pending(id)?;
        let lock = self.call_lock(id)?;
        let result = self.transaction(context, fsync, f);
        // A per-call lock leaves no file behind (see `lock::remove_lock_file`): a migration of
        // 10,000 sessions would otherwise leave 10,000 lock files.
        if let Some(lock) = &lock {
            crate::lock::remove_lock_file(lock);
        }
        result
    }
}
