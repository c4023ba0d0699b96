//! Appends with `Durability::None`: buffered in the process (docs/format.md § SQLite backend,
//! Locks, durability, retention) and committed when the buffer fills, with the next append of
//! another durability, on `flush`, when the lock is released, and before any other call of
//! the store on that session.

use crate::common;
use crate::support;

use std::time::Duration;

use acpx_model::{Durability, EventQuery, Store, StoreError};
use common::*;
use support::{open, raw};

/// How many event rows of the session the database file holds (as another process sees it).
fn committed_rows(store: &acpx_store_sqlite::SqliteStore, id: &str) -> i64 {
    raw(store)
        .query_row(
            "SELECT count(*) FROM events WHERE acpx_record_id = ?1",
            [id],
            |r| r.get(0),
        )
        .unwrap()
}

#[tokio::test]
async fn none_appends_wait_for_the_buffer_and_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let id = rid("buf");
    store.create(&mut record("buf", "/repo", 1)).await.unwrap();
    let lock = store.lock(&id, Duration::from_secs(5)).await.unwrap();
    let evs = events(&id, 1, 40);

    // The first batch of a stream is committed (it reads the log's last seq); the next ones
    // wait in the buffer, and the state already counts them.
    store
        .append(&lock, &evs[..10], Durability::None)
        .await
        .unwrap();
    let state = store
        .append(&lock, &evs[10..20], Durability::None)
        .await
        .unwrap();
    assert_eq!(state.last_seq, 20);
    assert!(state.last_write_at.is_some());
    assert_eq!(committed_rows(&store, "buf"), 10);

    // A refused batch leaves the buffer as it was.
    let err = store.append(&lock, &evs[25..30], Durability::None).await;
    assert!(
        matches!(
            err,
            Err(StoreError::SeqMismatch {
                last: 20,
                got: 26,
                ..
            })
        ),
        "{err:?}"
    );
    assert_eq!(committed_rows(&store, "buf"), 10);

    // This process reads everything whose append returned.
    let page = store
        .read_events(&id, &EventQuery::default())
        .await
        .unwrap();
    assert_eq!(page.events.len(), 20);
    assert_eq!(committed_rows(&store, "buf"), 20);

    // An append with `flush` commits the buffer with its own batch, in one transaction.
    store
        .append(&lock, &evs[20..25], Durability::None)
        .await
        .unwrap();
    store
        .append(&lock, &evs[25..30], Durability::None)
        .await
        .unwrap();
    assert_eq!(committed_rows(&store, "buf"), 25);
    store
        .append(&lock, &evs[30..35], Durability::Flush)
        .await
        .unwrap();
    assert_eq!(committed_rows(&store, "buf"), 35);

    // Releasing the lock commits what is buffered.
    store
        .append(&lock, &evs[35..36], Durability::None)
        .await
        .unwrap();
    store
        .append(&lock, &evs[36..40], Durability::None)
        .await
        .unwrap();
    assert_eq!(committed_rows(&store, "buf"), 36);
    drop(lock);
    assert_eq!(committed_rows(&store, "buf"), 40);
    let state = store.event_log_state(&id).await.unwrap();
    assert_eq!(state.last_seq, 40);
    let page = store
        .read_events(&id, &EventQuery::default())
        .await
        .unwrap();
    let seqs: Vec<u64> = page.events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=40).collect::<Vec<_>>());
}

#[tokio::test]
async fn flush_save_and_a_full_buffer_commit() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let id = rid("full");
    let mut r = record("full", "/repo", 1);
    store.create(&mut r).await.unwrap();
    let lock = store.lock(&id, Duration::from_secs(5)).await.unwrap();
    let evs = events(&id, 1, 3_000);
    store
        .append(&lock, &evs[..1], Durability::None)
        .await
        .unwrap();
    store
        .append(&lock, &evs[1..3], Durability::None)
        .await
        .unwrap();
    assert_eq!(committed_rows(&store, "full"), 1);
    store.flush(&id).await.unwrap();
    assert_eq!(committed_rows(&store, "full"), 3);

    store
        .append(&lock, &evs[3..4], Durability::None)
        .await
        .unwrap();
    store.save(&mut r).await.unwrap();
    assert_eq!(
        committed_rows(&store, "full"),
        4,
        "a save comes after the events"
    );

    // A stream of batches never waits in the buffer beyond its limit (256 KiB of lines).
    let mut written = 4;
    for chunk in evs[4..].chunks(64) {
        store.append(&lock, chunk, Durability::None).await.unwrap();
        written += chunk.len();
    }
    let committed = committed_rows(&store, "full") as usize;
    let bytes: usize = evs[committed..written]
        .iter()
        .map(|e| e.to_ndjson().len() + 1)
        .sum();
    assert!(
        committed > 4 && bytes < 256 * 1024 + 64 * 1024,
        "{committed} {bytes}"
    );
    drop(lock);
    assert_eq!(committed_rows(&store, "full") as usize, written);
}

#[tokio::test]
async fn a_dropped_store_and_a_delete_leave_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let (a, b) = (rid("a"), rid("b"));
    store.create(&mut record("a", "/repo", 1)).await.unwrap();
    store.create(&mut record("b", "/repo", 2)).await.unwrap();
    let lock_a = store.lock(&a, Duration::from_secs(5)).await.unwrap();
    store
        .append(&lock_a, &events(&a, 1, 1), Durability::None)
        .await
        .unwrap();
    store
        .append(&lock_a, &events(&a, 2, 5), Durability::None)
        .await
        .unwrap();
    // Deleting the session drops its buffer (its events go with it).
    assert!(store.delete(&a).await.unwrap());
    drop(lock_a);
    assert_eq!(committed_rows(&store, "a"), 0);

    // The lock guard keeps the store alive: dropping the store first loses nothing.
    let lock_b = store.lock(&b, Duration::from_secs(5)).await.unwrap();
    store
        .append(&lock_b, &events(&b, 1, 1), Durability::None)
        .await
        .unwrap();
    store
        .append(&lock_b, &events(&b, 2, 5), Durability::None)
        .await
        .unwrap();
    let path = store.path().to_owned();
    drop(store);
    drop(lock_b);
    let rows: i64 = rusqlite::Connection::open(path)
        .unwrap()
        .query_row(
            "SELECT count(*) FROM events WHERE acpx_record_id = 'b'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(rows, 6);
}
