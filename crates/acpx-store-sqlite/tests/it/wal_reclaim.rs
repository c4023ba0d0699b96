//! A write-ahead log that checkpoints could not rewind (here a reader pinned it; on a full
//! disk the checkpoint itself fails) is copied into the database and truncated by the next
//! open of the store, so the space it holds comes back (the `SqliteStore` docs; the full-disk
//! torture scenario, `cargo xtask torture --store sqlite`).

use crate::common;

use acpx_model::{Durability, EventQuery, Store};
use acpx_store_sqlite::SqliteStore;
use common::*;

fn wal_len(db: &std::path::Path) -> u64 {
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    std::fs::metadata(wal).map_or(0, |m| m.len())
}

#[tokio::test]
async fn a_large_wal_is_truncated_when_the_store_opens() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("acpx.db");
    let id = rid("wal");
    {
        let store = SqliteStore::open(&db).unwrap();
        store
            .create(&mut record("wal", "/repo", 1_772_000_000_000))
            .await
            .unwrap();
        // A reader holding an old snapshot: no checkpoint can get past it, the WAL grows.
        let reader = rusqlite::Connection::open(&db).unwrap();
        reader.execute_batch("BEGIN").unwrap();
        let _: i64 = reader
            .query_row("SELECT count(*) FROM sessions", [], |r| r.get(0))
            .unwrap();
        for batch in 0..40 {
            append_locked(
                &store,
                &id,
                &events(&id, 1 + batch * 64, 64),
                Durability::Flush,
            )
            .await
            .unwrap();
        }
        reader.execute_batch("COMMIT").unwrap();
        drop(store);
        // Still open, so closing the store did not checkpoint and remove the WAL.
        assert!(
            wal_len(&db) > 1 << 20,
            "the test needs a WAL over 1 MiB, got {}",
            wal_len(&db)
        );
        let store = SqliteStore::open(&db).unwrap();
        assert_eq!(wal_len(&db), 0, "the WAL was not truncated at open");
        let page = store
            .read_events(&id, &EventQuery::from_seq(1))
            .await
            .unwrap();
        assert_eq!(page.last_seq, 40 * 64);
        drop(reader);
    }
}
