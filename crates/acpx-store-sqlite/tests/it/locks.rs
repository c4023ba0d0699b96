//! The writer locks of `SqliteStore` and appends under them: lock files, exclusion across
//! handles, concurrent appends, failed appends undone, background checkpoints.

use crate::common;
use crate::support;

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use acpx_model::{Durability, EventQuery, Store, StoreError};
use acpx_store_sqlite::{SqliteStore, SqliteStoreOptions};
use common::*;
use rusqlite::Connection;
use support::{open, raw};

#[tokio::test]
async fn released_locks_leave_no_lock_files() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    for n in 0..20 {
        let name = format!("s{n}");
        let id = rid(&name);
        // A per-call lock (create, save) and a held one (lock, append), as a migration takes.
        store.create(&mut record(&name, "/r", 1)).await.unwrap();
        let guard = store.lock(&id, Duration::from_secs(1)).await.unwrap();
        store
            .append(&guard, &events(&id, 1, 2), Durability::Flush)
            .await
            .unwrap();
        let mut r = store.load(&id).await.unwrap();
        store.save(&mut r).await.unwrap();
        drop(guard);
        let mut again = store.load(&id).await.unwrap();
        store.save(&mut again).await.unwrap();
    }
    let mut locks = store.path().as_os_str().to_owned();
    locks.push(".locks");
    let left: Vec<_> = std::fs::read_dir(&locks).unwrap().flatten().collect();
    assert!(left.is_empty(), "lock files left behind: {left:?}");
    // The ids lock as before.
    let g = store
        .lock(&rid("s3"), Duration::from_millis(50))
        .await
        .unwrap();
    drop(g);
}

#[tokio::test]
async fn locks_exclude_other_holders_and_release_on_drop() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let other = SqliteStore::open_with(
        dir.path().join("acpx.db"),
        SqliteStoreOptions {
            lock_timeout: Duration::from_millis(100),
            ..SqliteStoreOptions::default()
        },
    )
    .unwrap();
    let id = rid("s1");
    store.create(&mut record("s1", "/r", 1)).await.unwrap();
    let guard = store.lock(&id, Duration::from_secs(1)).await.unwrap();
    match other.lock(&id, Duration::from_millis(50)).await {
        Err(StoreError::Locked { id: locked, waited }) => {
            assert_eq!(locked, id);
            assert!(waited >= Duration::from_millis(50));
        }
        other => panic!("{other:?}"),
    }
    // The holder (this store and its clones) mutates without waiting; a separately opened
    // store is another locker and waits, then gives up.
    let mut r = store.load(&id).await.unwrap();
    store.clone().save(&mut r).await.unwrap();
    store
        .append(&guard, &events(&id, 1, 2), Durability::Flush)
        .await
        .unwrap();
    // Another store cannot append: it cannot get the writer lock an append requires.
    assert!(matches!(
        other.lock(&id, other.options().lock_timeout).await,
        Err(StoreError::Locked { .. })
    ));
    let mut stale = r.clone();
    assert!(matches!(
        other.save(&mut stale).await,
        Err(StoreError::Locked { .. })
    ));
    drop(guard);
    append_locked(&other, &id, &events(&id, 3, 1), Durability::Flush)
        .await
        .unwrap();
    let g2 = other.lock(&id, Duration::from_millis(50)).await.unwrap();
    assert_eq!(g2.id(), &id);
    drop(g2);
    // Deleting removes the lock file; the id can be locked again afterwards.
    assert!(store.delete(&id).await.unwrap());
    let mut locks = store.path().as_os_str().to_owned();
    locks.push(".locks/s1.lock");
    assert!(!std::path::Path::new(&locks).exists());
    store.lock(&id, Duration::from_millis(50)).await.unwrap();
}

#[tokio::test]
async fn two_handles_append_concurrently_without_loss() {
    let dir = tempfile::tempdir().unwrap();
    let a = open(&dir);
    let b = open(&dir);
    let id = rid("s1");
    a.create(&mut record("s1", "/r", 1)).await.unwrap();
    let mut tasks = Vec::new();
    for store in [a.clone(), b.clone(), a.clone(), b.clone()] {
        let id = id.clone();
        tasks.push(tokio::spawn(async move {
            let mut written = 0;
            while written < 25 {
                let last = store.event_log_state(&id).await.unwrap().last_seq;
                match append_locked(&store, &id, &events(&id, last + 1, 4), Durability::Flush).await
                {
                    Ok(_) => written += 1,
                    Err(StoreError::SeqMismatch { .. }) => tokio::task::yield_now().await,
                    Err(e) => panic!("{e}"),
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let page = a.read_events(&id, &EventQuery::default()).await.unwrap();
    assert_eq!(page.events.len(), 400);
    assert!(page
        .events
        .iter()
        .enumerate()
        .all(|(i, e)| e.seq == i as u64 + 1));
}

#[tokio::test]
async fn a_removed_lock_directory_is_made_again() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let id = rid("s1");
    store.create(&mut record("s1", "/r", 1)).await.unwrap();
    let mut locks = store.path().as_os_str().to_owned();
    locks.push(".locks");
    std::fs::remove_dir_all(&locks).unwrap();
    append_locked(&store, &id, &events(&id, 1, 1), Durability::Flush)
        .await
        .unwrap();
    drop(store.lock(&id, Duration::from_secs(1)).await.unwrap());
    let mode = std::fs::metadata(&locks).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
}

/// A failed append transaction (here an error raised inside it by a trigger, as a full disk
/// or an I/O error would) is undone whole, returned, and kept as `last_write_error` by the
/// handle that saw it until an append succeeds. A refused call (wrong seq) is only the
/// caller's error and reports nothing.
#[tokio::test]
async fn a_failed_append_is_undone_and_reported_until_the_next_success() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let other = open(&dir);
    let id = rid("s1");
    store.create(&mut record("s1", "/r", 1)).await.unwrap();
    append_locked(&store, &id, &events(&id, 1, 3), Durability::Flush)
        .await
        .unwrap();
    let conn = raw(&store);
    conn.execute_batch(
        "CREATE TRIGGER fail_seq_6 BEFORE INSERT ON event_rows WHEN NEW.seq = 6 \
         BEGIN SELECT RAISE(ABORT, 'simulated write failure'); END;",
    )
    .unwrap();

    // seq 6 is the third row of the batch: the rows before it must not stay.
    let err = append_locked(&store, &id, &events(&id, 4, 5), Durability::Flush)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Backend { .. }), "{err:?}");
    assert!(err.to_string().contains("simulated write failure"), "{err}");
    let state = store.event_log_state(&id).await.unwrap();
    assert_eq!(state.last_seq, 3);
    assert_eq!(
        state.last_write_error.as_deref(),
        Some(err.to_string().as_str())
    );
    let page = store
        .read_events(&id, &EventQuery::default())
        .await
        .unwrap();
    assert_eq!(page.events.len(), 3);
    // Per handle: another handle saw no failure.
    assert_eq!(
        other.event_log_state(&id).await.unwrap().last_write_error,
        None
    );
    // A refused call does not replace or clear it.
    assert!(matches!(
        append_locked(&store, &id, &events(&id, 9, 1), Durability::Flush).await,
        Err(StoreError::SeqMismatch { .. })
    ));
    assert!(store
        .event_log_state(&id)
        .await
        .unwrap()
        .last_write_error
        .is_some());

    conn.execute_batch("DROP TRIGGER fail_seq_6").unwrap();
    let state = append_locked(&store, &id, &events(&id, 4, 5), Durability::Flush)
        .await
        .unwrap();
    assert_eq!((state.last_seq, state.last_write_error), (8, None));
    assert_eq!(
        store.event_log_state(&id).await.unwrap().last_write_error,
        None
    );

    // Deleting the session forgets its error too.
    conn.execute_batch(
        "CREATE TRIGGER fail_all BEFORE INSERT ON event_rows \
         BEGIN SELECT RAISE(ABORT, 'simulated write failure'); END;",
    )
    .unwrap();
    assert!(
        append_locked(&store, &id, &events(&id, 9, 1), Durability::Flush)
            .await
            .is_err()
    );
    assert!(store.delete(&id).await.unwrap());
    store.create(&mut record("s1", "/r", 1)).await.unwrap();
    assert_eq!(
        store.event_log_state(&id).await.unwrap().last_write_error,
        None
    );
}

/// The WAL is copied into the database file by the store's checkpoint thread, long before the
/// store's own connection would do it (at 10,000 pages), and dropping the store stops that
/// thread: the last connection is closed when the drop returns, which removes the `-wal` file.
#[tokio::test]
async fn checkpoints_run_in_the_background_and_stop_with_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let id = rid("s1");
    store.create(&mut record("s1", "/r", 1)).await.unwrap();
    let db_len = || std::fs::metadata(store.path()).unwrap().len();
    let before = db_len();
    // About 25 WAL pages per batch: ~1,000 pages in all, a tenth of the fallback threshold.
    for k in 0..40 {
        append_locked(&store, &id, &events(&id, k * 64 + 1, 64), Durability::Flush)
            .await
            .unwrap();
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while db_len() <= before {
        assert!(
            std::time::Instant::now() < deadline,
            "no checkpoint copied the WAL into {}",
            store.path().display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut wal = store.path().as_os_str().to_owned();
    wal.push("-wal");
    assert!(std::path::Path::new(&wal).exists());
    let path = store.path().to_owned();
    drop(store);
    assert!(
        !std::path::Path::new(&wal).exists(),
        "a connection of the dropped store is still open"
    );
    // Everything is in the database file.
    let conn = Connection::open(&path).unwrap();
    let n: i64 = conn
        .query_row("SELECT count(*) FROM events", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 40 * 64);
}

/// On a multi-threaded runtime, mutations by the holder of a session's lock run in place
/// (`block_in_place`) instead of on the blocking pool: same results, also from several
/// tasks at once, and the other paths (no lock held) still work beside them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holder_mutations_in_place_on_a_multi_threaded_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let id = rid("s1");
    let mut r = record("s1", "/r", 1);
    store.create(&mut r).await.unwrap();
    let guard = std::sync::Arc::new(store.lock(&id, Duration::from_secs(5)).await.unwrap());
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let store = store.clone();
        let id = id.clone();
        let guard = guard.clone();
        tasks.push(tokio::spawn(async move {
            let mut written = 0;
            while written < 20 {
                let last = store.event_log_state(&id).await.unwrap().last_seq;
                match store
                    .append(&guard, &events(&id, last + 1, 8), Durability::Flush)
                    .await
                {
                    Ok(_) => written += 1,
                    Err(StoreError::SeqMismatch { .. }) => tokio::task::yield_now().await,
                    Err(e) => panic!("{e}"),
                }
            }
        }));
    }
    // Meanwhile, a session whose lock nobody holds goes through the blocking pool.
    let other = rid("s2");
    store.create(&mut record("s2", "/r", 2)).await.unwrap();
    append_locked(&store, &other, &events(&other, 1, 5), Durability::Flush)
        .await
        .unwrap();
    for t in tasks {
        t.await.unwrap();
    }
    r.thread.messages.push(user("in place"));
    store.save(&mut r).await.unwrap();
    assert_eq!(r.revision, 2);
    let closed = store.close(&id, ts(9)).await.unwrap();
    assert!(closed.closed);
    drop(guard);

    let page = store
        .read_events(&id, &EventQuery::default())
        .await
        .unwrap();
    assert_eq!(page.events.len(), 3 * 20 * 8);
    assert!(page
        .events
        .iter()
        .enumerate()
        .all(|(i, e)| e.seq == i as u64 + 1));
    assert_eq!(store.load(&id).await.unwrap().revision, 3);
    assert_eq!(store.event_log_state(&other).await.unwrap().last_seq, 5);
}

#[tokio::test]
async fn append_refuses_a_lock_another_store_issued() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let other = open(&dir);
    let id = rid("s1");
    store.create(&mut record("s1", "/r", 1)).await.unwrap();
    let foreign = other.lock(&id, Duration::from_secs(1)).await.unwrap();
    match store
        .append(&foreign, &events(&id, 1, 1), Durability::Flush)
        .await
    {
        Err(StoreError::InvalidArgument(m)) => assert!(m.contains("not issued"), "{m}"),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    assert_eq!(store.event_log_state(&id).await.unwrap().last_seq, 0);
}
