//! `Store::create_sessions` on SQLite (the batch path of `acpx migrate`), on a real database:
//! what it stores equals what create + append + save store, in one transaction, all or
//! nothing, leaving no lock file.

use crate::common;
use crate::support;

use acpx_model::store::create_sessions_one_by_one;
use acpx_model::{EventQuery, ListQuery, NewSessionData, SearchQuery, Store, StoreError};
use common::*;
use support::{assert_fts_in_step, open, raw};

fn batch(prefix: &str, n: u64) -> Vec<NewSessionData> {
    (0..n)
        .map(|i| {
            let name = format!("{prefix}{i}");
            let mut r = record(&name, "/repo", 1_772_000_000_000 + i as i64);
            r.thread.messages.push(user(&format!("hello number {i}")));
            r.thread.messages.push(agent("a reply"));
            let id = rid(&name);
            NewSessionData {
                events: events(&id, 1, i * 3),
                record: r,
            }
        })
        .collect()
}

fn lock_files(dir: &tempfile::TempDir) -> usize {
    std::fs::read_dir(dir.path().join("acpx.db.locks"))
        .map(|d| d.count())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_stores_what_one_by_one_stores() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(&dir);
    let other = tempfile::tempdir().unwrap();
    let reference = open(&other);
    let input = batch("s", 5);
    let stored = s.create_sessions(input.clone()).await.unwrap();
    let expected = create_sessions_one_by_one(&reference, input.clone())
        .await
        .unwrap();
    for ((got, want), given) in stored.iter().zip(&expected).zip(&input) {
        let id = &given.record.acpx_record_id;
        let loaded = s.load(id).await.unwrap();
        assert_eq!(&loaded, got, "returned as stored");
        assert_eq!(loaded.revision, 2);
        assert_eq!(want.revision, 2);
        let state = s.event_log_state(id).await.unwrap();
        assert_eq!(
            state, loaded.acpx.event_log,
            "the snapshot describes its log"
        );
        assert_eq!(state.last_seq, want.acpx.event_log.last_seq);
        assert_eq!(state.segment_count, want.acpx.event_log.segment_count);
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
    // The message rows (and their full-text index) are written too.
    let hits = s
        .search(&SearchQuery {
            text: "number".into(),
            ..SearchQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(hits.len(), 5);
    assert_fts_in_step(&raw(&s));
    assert_eq!(lock_files(&dir), 0);
}

#[tokio::test]
async fn a_taken_id_fails_the_whole_batch() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(&dir);
    let mut existing = record("t2", "/other", 5);
    s.create(&mut existing).await.unwrap();
    match s.create_sessions(batch("t", 4)).await {
        Err(StoreError::AlreadyExists(taken)) => assert_eq!(taken.as_str(), "t2"),
        other => panic!("{other:?}"),
    }
    let page = s.list(&ListQuery::default()).await.unwrap();
    assert_eq!(page.sessions.len(), 1, "nothing of the batch is left");
    assert_eq!(s.load(&existing.acpx_record_id).await.unwrap(), existing);
    let rows: i64 = raw(&s)
        .query_row("SELECT count(*) FROM event_rows", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, 0);
    let mut bad = batch("u", 3);
    bad[2].events.remove(1);
    assert!(matches!(
        s.create_sessions(bad).await,
        Err(StoreError::SeqMismatch { .. })
    ));
    assert_eq!(
        s.list(&ListQuery::default()).await.unwrap().sessions.len(),
        1
    );
    assert_eq!(lock_files(&dir), 0);
}

#[tokio::test]
async fn lock_many_excludes_other_lockers_through_one_file_and_leaves_none() {
    use std::time::Duration;
    let dir = tempfile::tempdir().unwrap();
    let s = open(&dir);
    let other = open(&dir);
    s.create_sessions(batch("m", 3)).await.unwrap();
    let ids: Vec<_> = (0..3).map(|i| rid(&format!("m{i}"))).collect();
    // Links a killed batch left (one inode, nobody holding it) are cleared, not waited for.
    let locks_dir = dir.path().join("acpx.db.locks");
    let dead = locks_dir.join(".batch.dead.lock");
    std::fs::write(&dead, b"").unwrap();
    std::fs::hard_link(&dead, locks_dir.join("m1.lock")).unwrap();
    std::fs::hard_link(&dead, locks_dir.join("m2.lock")).unwrap();
    let held = s.lock_many(&ids, Duration::from_millis(200)).await.unwrap();
    for id in &ids {
        assert!(matches!(
            other.lock(id, Duration::from_millis(50)).await,
            Err(StoreError::Locked { .. })
        ));
    }
    // This store's own mutations go ahead while it holds them.
    let mut r = s.load(&ids[0]).await.unwrap();
    s.save(&mut r).await.unwrap();
    drop(held);
    other.lock(&ids[1], Duration::from_secs(1)).await.unwrap();
    let left: Vec<_> = std::fs::read_dir(&locks_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n != ".batch.dead.lock")
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// A log whose oldest events retention removed (seq 5..=9 here) is stored as a log retained
/// from seq 5: its rows start there, every reader (also after reopening) finds them with
/// `oldest_seq` 5, `event_logs.last_seq` and the snapshot say 9, appends continue at 10, and
/// a copy with a gap is still refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_retained_from_a_later_seq_is_stored_from_there() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(&dir);
    let id = rid("t0");
    let given = events(&id, 5, 5);
    let stored = s
        .create_sessions(vec![NewSessionData {
            record: record("t0", "/repo", 1_772_000_000_000),
            events: given.clone(),
        }])
        .await
        .unwrap();
    assert_eq!(stored[0].acpx.event_log.last_seq, 9);
    assert_eq!(
        s.event_log_state(&id).await.unwrap(),
        stored[0].acpx.event_log
    );
    let page = s.read_events(&id, &EventQuery::default()).await.unwrap();
    assert_eq!((page.oldest_seq, page.last_seq), (5, 9));
    assert_eq!(page.events, given);

    let w = s
        .lock(&id, std::time::Duration::from_secs(1))
        .await
        .unwrap();
    let gap = s
        .append(&w, &events(&id, 11, 1), acpx_model::Durability::Fsync)
        .await;
    assert!(
        matches!(gap, Err(StoreError::SeqMismatch { .. })),
        "{gap:?}"
    );
    s.append(&w, &events(&id, 10, 1), acpx_model::Durability::Fsync)
        .await
        .unwrap();
    drop(w);
    drop(s);
    let again = open(&dir);
    let page = again
        .read_events(&id, &EventQuery::default())
        .await
        .unwrap();
    assert_eq!((page.oldest_seq, page.last_seq), (5, 10));
    assert_eq!(page.events.len(), 6);

    let other = rid("t1");
    let mut holed = events(&other, 5, 2);
    holed.extend(events(&other, 8, 1));
    let refused = again
        .create_sessions(vec![NewSessionData {
            record: record("t1", "/repo", 1_772_000_000_000),
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
