//! The per-session writer lock of the file store.
//!
//! Separately opened `FsStore` instances lock through `flock` exactly as two processes would
//! (each opens its own descriptor), so these tests exercise the cross-process protocol in one
//! process; the conformance suite repeats the essentials with real processes.

use crate::common;

use std::time::Duration;

use acpx_model::{Durability, Store, StoreError};
use acpx_store_fs::{FsStore, FsStoreOptions};
use common::*;

fn short_timeout(dir: &std::path::Path) -> FsStore {
    FsStore::open_with(
        dir,
        FsStoreOptions {
            lock_timeout: Duration::from_millis(150),
            ..FsStoreOptions::default()
        },
    )
    .unwrap()
}

#[tokio::test]
async fn second_writer_waits_then_gets_locked_and_drop_releases() {
    let tmp = tempfile::tempdir().unwrap();
    let s1 = store(tmp.path());
    let s2 = short_timeout(tmp.path());
    let a = id("a");
    s1.create(&mut record(&a, "/r")).await.unwrap();
    let guard = s1.lock(&a, Duration::from_secs(1)).await.unwrap();
    assert_eq!(guard.id(), &a);

    match s2.lock(&a, Duration::from_millis(120)).await {
        Err(StoreError::Locked { id, waited }) => {
            assert_eq!(id, a);
            assert!(waited >= Duration::from_millis(120));
        }
        other => panic!("expected Locked, got {other:?}"),
    }
    // The same store's second lock() waits like anyone else.
    assert!(matches!(
        s1.lock(&a, Duration::from_millis(50)).await,
        Err(StoreError::Locked { .. })
    ));
    // Mutations by a store that does not hold the lock wait up to its lock timeout.
    let mut r = s2.load(&a).await.unwrap();
    assert!(matches!(
        s2.save(&mut r).await,
        Err(StoreError::Locked { .. })
    ));
    assert!(matches!(
        append_locked(&s2, &a, &events(&a, 1..=1, 1), Durability::Flush).await,
        Err(StoreError::Locked { .. })
    ));
    assert!(matches!(
        s2.delete(&a).await,
        Err(StoreError::Locked { .. })
    ));
    // Reads never wait.
    assert_eq!(s2.load(&a).await.unwrap().revision, 1);
    s2.read_events(&a, &Default::default()).await.unwrap();
    s2.list(&Default::default()).await.unwrap();

    // The holder's own mutations go through without waiting for itself.
    let mut mine = s1.load(&a).await.unwrap();
    s1.save(&mut mine).await.unwrap();
    s1.append(&guard, &events(&a, 1..=2, 1), Durability::Flush)
        .await
        .unwrap();
    s1.clone()
        .append(&guard, &events(&a, 3..=3, 1), Durability::Flush)
        .await
        .unwrap();

    drop(guard);
    let g2 = s2.lock(&a, Duration::from_millis(500)).await.unwrap();
    s2.append(&g2, &events(&a, 4..=4, 1), Durability::Flush)
        .await
        .unwrap();
    drop(g2);
    s2.save(&mut r).await.unwrap_err(); // stale revision: a Conflict, not a lock problem
    assert_eq!(
        s1.event_log_state(&a).await.unwrap().last_seq,
        4,
        "both holders' appends are in one sequence"
    );
}

#[tokio::test]
async fn a_waiter_gets_the_lock_when_the_holder_releases_it() {
    let tmp = tempfile::tempdir().unwrap();
    let s1 = store(tmp.path());
    let s2 = store(tmp.path());
    let a = id("a");
    s1.create(&mut record(&a, "/r")).await.unwrap();
    let guard = s1.lock(&a, Duration::from_secs(1)).await.unwrap();
    let waiter = tokio::spawn({
        let s2 = s2.clone();
        let a = a.clone();
        async move {
            let g = s2.lock(&a, Duration::from_secs(30)).await.unwrap();
            s2.append(&g, &events(&a, 2..=2, 1), Durability::Flush)
                .await
                .unwrap();
            drop(g);
        }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiter.is_finished());
    s1.append(&guard, &events(&a, 1..=1, 1), Durability::Flush)
        .await
        .unwrap();
    drop(guard);
    waiter.await.unwrap();
    assert_eq!(s1.event_log_state(&a).await.unwrap().last_seq, 2);
}

#[tokio::test]
async fn lock_is_released_when_the_holder_panics() {
    let tmp = tempfile::tempdir().unwrap();
    let s1 = store(tmp.path());
    let a = id("a");
    s1.create(&mut record(&a, "/r")).await.unwrap();
    let task = tokio::spawn({
        let s1 = s1.clone();
        let a = a.clone();
        async move {
            let _g = s1.lock(&a, Duration::from_secs(1)).await.unwrap();
            panic!("holder crashed");
        }
    });
    assert!(task.await.unwrap_err().is_panic());
    let other = store(tmp.path());
    other.lock(&a, Duration::from_millis(200)).await.unwrap();
}

#[tokio::test]
async fn delete_under_a_held_lock_and_waiters_on_the_old_lock_file() {
    let tmp = tempfile::tempdir().unwrap();
    let s1 = store(tmp.path());
    let s2 = store(tmp.path());
    let s3 = store(tmp.path());
    let a = id("a");
    s1.create(&mut record(&a, "/r")).await.unwrap();
    let guard = s1.lock(&a, Duration::from_secs(1)).await.unwrap();
    // s2 starts waiting on the current lock file.
    let waiter = tokio::spawn({
        let s2 = s2.clone();
        let a = a.clone();
        async move { s2.lock(&a, Duration::from_secs(30)).await.unwrap() }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(s1.delete(&a).await.unwrap());
    assert!(
        s1.lock_path(&a).exists(),
        "the holder keeps its lock file while its guard lives"
    );
    // The holder may recreate the session under the same guard.
    s1.create(&mut record(&a, "/r")).await.unwrap();
    assert!(s1.delete(&a).await.unwrap());
    drop(guard);
    // The released lock file of a deleted session is unlinked; the waiter notices that it
    // locked a dead file and locks a fresh one, which still excludes everyone else.
    let g2 = waiter.await.unwrap();
    assert!(matches!(
        s3.lock(&a, Duration::from_millis(100)).await,
        Err(StoreError::Locked { .. })
    ));
    drop(g2);
    assert!(
        !s1.lock_path(&a).exists(),
        "no lock file is left for a deleted session"
    );
    s3.lock(&a, Duration::from_millis(100)).await.unwrap();
}

#[tokio::test]
async fn lock_of_a_session_that_does_not_exist_yet() {
    // A runtime may lock first and create second.
    let tmp = tempfile::tempdir().unwrap();
    let s1 = store(tmp.path());
    let a = id("fresh");
    let guard = s1.lock(&a, Duration::from_secs(1)).await.unwrap();
    s1.create(&mut record(&a, "/r")).await.unwrap();
    s1.append(&guard, &events(&a, 1..=3, 1), Durability::None)
        .await
        .unwrap();
    drop(guard);
    // The lock created the lock file, so its release removes it, session or not.
    assert!(!s1.lock_path(&a).exists());
    let s2 = store(tmp.path());
    assert_eq!(s2.event_log_state(&a).await.unwrap().last_seq, 3);
    // Locking an id that is never created leaves nothing behind.
    let ghost = id("ghost");
    drop(s1.lock(&ghost, Duration::from_secs(1)).await.unwrap());
    assert!(!s1.lock_path(&ghost).exists());
}

#[tokio::test]
async fn append_refuses_a_lock_another_store_issued() {
    let tmp = tempfile::tempdir().unwrap();
    let s1 = store(tmp.path());
    let s2 = store(tmp.path());
    let a = id("a");
    s1.create(&mut record(&a, "/r")).await.unwrap();
    let foreign = s2.lock(&a, Duration::from_secs(1)).await.unwrap();
    match s1
        .append(&foreign, &events(&a, 1..=1, 1), Durability::Flush)
        .await
    {
        Err(StoreError::InvalidArgument(m)) => assert!(m.contains("not issued"), "{m}"),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    // A clone shares the issuer: its lock is this store's lock.
    drop(foreign);
    let mine = s1.clone().lock(&a, Duration::from_secs(1)).await.unwrap();
    s1.append(&mine, &events(&a, 1..=1, 1), Durability::Flush)
        .await
        .unwrap();
}
