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
