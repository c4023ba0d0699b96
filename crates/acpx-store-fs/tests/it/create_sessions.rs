//! `Store::create_sessions` on the file store (the batch path of `acpx migrate`), on real
//! files: what it stores equals what create + append + save store, it is all or nothing, and
//! it leaves no lock file, tombstone or temp file behind.

use crate::common;

use std::time::Duration;

use acpx_model::store::create_sessions_one_by_one;
use acpx_model::{Durability, EventQuery, ListQuery, NewSessionData, Store, StoreError};
use common::*;

fn batch(prefix: &str, n: u64) -> Vec<NewSessionData> {
    (0..n)
        .map(|i| {
            let id = id(&format!("{prefix}{i}"));
            NewSessionData {
                record: record(&id, "/repo"),
                events: events(&id, 1..=i * 3, 40),
            }
        })
        .collect()
}

fn files(s: &acpx_store_fs::FsStore) -> Vec<String> {
    let root = s.sessions_dir().parent().map(std::path::Path::to_path_buf);
    session_files(&root.expect("the sessions directory is in the store's root"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_stores_what_one_by_one_stores_and_leaves_no_lock_file() {
    let tmp = tempfile::tempdir().unwrap();
    let s = store(tmp.path());
    let one = tempfile::tempdir().unwrap();
    let reference = store(one.path());
    let input = batch("s", 5);
    let stored = s.create_sessions(input.clone()).await.unwrap();
    let expected = create_sessions_one_by_one(&reference, input.clone())
        .await
        .unwrap();
    assert_eq!(stored.len(), 5);
    for ((got, want), given) in stored.iter().zip(&expected).zip(&input) {
        let id = &given.record.acpx_record_id;
        let loaded = s.load(id).await.unwrap();
        assert_eq!(&loaded, got, "returned as stored");
        assert_eq!(loaded.revision, 2);
        assert_eq!(loaded.revision, want.revision);
        // The log's state as the store reports it is what the snapshot says.
        let state = s.event_log_state(id).await.unwrap();
        assert_eq!(state.last_seq, loaded.acpx.event_log.last_seq);
        assert_eq!(state.segment_count, loaded.acpx.event_log.segment_count);
        assert_eq!(state.active_path, loaded.acpx.event_log.active_path);
        assert_eq!(
            loaded.acpx.event_log.segment_count,
            want.acpx.event_log.segment_count
        );
        assert_eq!(loaded.acpx.event_log.last_seq, want.acpx.event_log.last_seq);
        let mut a = loaded.clone();
        let mut b = want.clone();
        a.acpx.event_log = Default::default();
        b.acpx.event_log = Default::default();
        assert_eq!(a, b);
        let page = s.read_events(id, &EventQuery::default()).await.unwrap();
        assert_eq!(page.events, given.events);
    }
    assert_eq!(
        s.list(&ListQuery::default()).await.unwrap().sessions.len(),
        5
    );
    // Exactly a snapshot per session and a log per non-empty one: no lock file, tombstone
    // or temp file.
    let mut want: Vec<String> = (0..5)
        .flat_map(|i| {
            let mut v = vec![format!("s{i}.json")];
            if i > 0 {
                v.push(format!("s{i}.events.ndjson"));
            }
            v
        })
        .collect();
    want.sort();
    assert_eq!(files(&s), want);
    // The sessions go on as any other: an append continues the log, in a new process too.
    let fresh = store(tmp.path());
    let a = id("s2");
    append_locked(&fresh, &a, &events(&a, 7..=8, 10), Durability::Fsync)
        .await
        .unwrap();
    let mut r = fresh.load(&a).await.unwrap();
    fresh.save(&mut r).await.unwrap();
    assert_eq!(r.revision, 3);
}

#[tokio::test]
async fn a_taken_id_fails_the_whole_batch_and_removes_the_rest() {
    let tmp = tempfile::tempdir().unwrap();
    let s = store(tmp.path());
    let mut existing = record(&id("t2"), "/other");
    s.create(&mut existing).await.unwrap();
    let before = files(&s);
    match s.create_sessions(batch("t", 4)).await {
        Err(StoreError::AlreadyExists(taken)) => assert_eq!(taken.as_str(), "t2"),
        other => panic!("{other:?}"),
    }
    assert_eq!(files(&s), before, "nothing of the batch is left");
    assert_eq!(s.load(&existing.acpx_record_id).await.unwrap(), existing);
    // A bad log (a gap; a log may start above seq 1, see below, but not skip one) is refused
    // before anything is written.
    let mut bad = batch("u", 2);
    bad[1].events.remove(1);
    assert!(matches!(
        s.create_sessions(bad).await,
        Err(StoreError::SeqMismatch { .. })
    ));
    assert_eq!(files(&s), before);
}

#[tokio::test]
async fn a_batch_waits_for_a_writer_holding_one_of_its_ids() {
    let tmp = tempfile::tempdir().unwrap();
    let s = store(tmp.path());
    let other = acpx_store_fs::FsStore::open_with(
        tmp.path(),
        acpx_store_fs::FsStoreOptions {
            lock_timeout: Duration::from_millis(100),
            ..Default::default()
        },
    )
    .unwrap();
    let guard = s.lock(&id("w1"), Duration::from_secs(1)).await.unwrap();
    assert!(matches!(
        other.create_sessions(batch("w", 3)).await,
        Err(StoreError::Locked { .. })
    ));
    drop(guard);
    assert!(files(&s).is_empty(), "{:?}", files(&s));
    other.create_sessions(batch("w", 3)).await.unwrap();
}

#[tokio::test]
async fn locking_an_existing_session_leaves_no_lock_file_it_did_not_find() {
    let tmp = tempfile::tempdir().unwrap();
    let s = store(tmp.path());
    let a = id("a");
    s.create(&mut record(&a, "/r")).await.unwrap();
    assert!(!s.lock_path(&a).exists());
    let guard = s.lock(&a, Duration::from_secs(1)).await.unwrap();
    assert!(s.lock_path(&a).exists());
    drop(guard);
    assert!(!s.lock_path(&a).exists(), "the lock it created is removed");
    // A lock file that was there before is left as it was.
    std::fs::write(s.lock_path(&a), b"").unwrap();
    drop(s.lock(&a, Duration::from_secs(1)).await.unwrap());
    assert!(s.lock_path(&a).exists());
}

/// A log whose oldest events retention removed (seq 5..=9 here) is stored as a log retained
/// from seq 5: segment 0 holds those lines, every reader (also after reopening) finds them
/// with `oldest_seq` 5, the snapshot's log state says seq 9, appends continue at 10, and a
/// copy with a gap is still refused.
#[tokio::test]
async fn a_log_retained_from_a_later_seq_is_stored_from_there() {
    let tmp = tempfile::tempdir().unwrap();
    let s = store(tmp.path());
    let t0 = id("t0");
    let given = events(&t0, 5..=9, 40);
    let stored = s
        .create_sessions(vec![NewSessionData {
            record: record(&t0, "/repo"),
            events: given.clone(),
        }])
        .await
        .unwrap();
    assert_eq!(stored[0].acpx.event_log.last_seq, 9);
    // (`last_write_at` is the file's time here, the batch's clock in the snapshot.)
    let state = s.event_log_state(&t0).await.unwrap();
    assert_eq!(
        (state.last_seq, state.segment_count),
        (9, stored[0].acpx.event_log.segment_count)
    );
    let page = s.read_events(&t0, &EventQuery::default()).await.unwrap();
    assert_eq!((page.oldest_seq, page.last_seq), (5, 9));
    assert_eq!(page.events, given);

    let w = s.lock(&t0, Duration::from_secs(1)).await.unwrap();
    let gap = s
        .append(&w, &events(&t0, 11..=11, 40), Durability::Fsync)
        .await;
    assert!(
        matches!(gap, Err(StoreError::SeqMismatch { .. })),
        "{gap:?}"
    );
    s.append(&w, &events(&t0, 10..=10, 40), Durability::Fsync)
        .await
        .unwrap();
    drop(w);
    drop(s);
    let again = store(tmp.path());
    let page = again
        .read_events(&t0, &EventQuery::default())
        .await
        .unwrap();
    assert_eq!((page.oldest_seq, page.last_seq), (5, 10));
    assert_eq!(page.events.len(), 6);

    let other = id("t1");
    let mut holed = events(&other, 5..=6, 40);
    holed.extend(events(&other, 8..=8, 40));
    let refused = again
        .create_sessions(vec![NewSessionData {
            record: record(&other, "/repo"),
            events: holed,
        }])
        .await;
    assert!(
        matches!(refused, Err(StoreError::SeqMismatch { .. })),
        "{refused:?}"
    );
    assert!(matches!(
        again.load(&other).await,
        Err(StoreError::NotFound(_))
    ));
}
