//! What the SQLite store's own tests share beyond `common` (which the PostgreSQL store's tests
//! include too, so it names no SQLite type): opening a store in a temporary directory, and a
//! raw connection to its database to inspect or damage rows.

#![allow(dead_code)]

use acpx_store_sqlite::SqliteStore;
use rusqlite::Connection;

/// A store at `<dir>/acpx.db`.
pub fn open(dir: &tempfile::TempDir) -> SqliteStore {
    SqliteStore::open(dir.path().join("acpx.db")).unwrap()
}

/// A second, plain connection to the store's database.
pub fn raw(store: &SqliteStore) -> Connection {
    Connection::open(store.path()).unwrap()
}

/// Fails unless the full-text index holds exactly what the `messages` rows say (FTS5's own
/// integrity check).
pub fn assert_fts_in_step(conn: &Connection) {
    let integrity: String = conn
        .query_row(
            "INSERT INTO messages_fts (messages_fts, rank) VALUES ('integrity-check', 1) RETURNING 'ok'",
            [],
            |r| r.get(0),
        )
        .unwrap_or_else(|e| panic!("FTS index out of step: {e}"));
    assert_eq!(integrity, "ok");
}
