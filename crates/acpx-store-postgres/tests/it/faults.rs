//! Several hosts and the faults of a network database, against a real server: two stores
//! with their own connections stand for two hosts; `pg_terminate_backend` ends connections
//! the way an administrator, a network failure or a server restart does.

use crate::common;

use std::time::Duration;

use acpx_model::{Durability, EventQuery, Store, StoreError};
use common::server::{open, schema, terminate, url, url_with_app};
use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_writer_lock_is_exclusive_across_hosts_and_dies_with_its_connection() {
    let Some(url) = url() else { return };
    let schema = schema("hosts");
    let app_a = format!("{schema}_a");
    let host_a = open(&url_with_app(&url, &app_a), &schema).await;
    let host_b = open(&url, &schema).await;
    let mut r = record("shared", "/repo", 1);
    host_a.create(&mut r).await.unwrap();
    let id = r.acpx_record_id.clone();

    let lock_a = host_a.lock(&id, Duration::from_secs(5)).await.unwrap();
    host_a
        .append(&lock_a, &events(&id, 1, 3), Durability::Flush)
        .await
        .unwrap();
    // Host B waits, then gives up: the lock is held on another host.
    let err = host_b
        .lock(&id, Duration::from_millis(300))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Locked { .. }), "{err}");
    // B's other mutations wait for it too.
    let mut stale = host_b.load(&id).await.unwrap();
    stale.name = Some("from b".into());

    // Host A's connections end (its network dropped): the server frees the lock.
    assert!(terminate(&url, &app_a).await >= 1);
    let lock_b = host_b.lock(&id, Duration::from_secs(5)).await.unwrap();
    // A still has its SessionLock value, but not the lock: its append is refused, clearly,
    // and writes nothing.
    let err = host_a
        .append(&lock_a, &events(&id, 4, 1), Durability::Flush)
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("writer lock") || text.contains("connection"),
        "{text}"
    );
    assert!(!text.contains("password"), "{text}");
    // A's other pooled connections were ended with it; a call that takes one before its
    // client noticed fails with an error that says so, and the next call reconnects.
    let state = match host_a.event_log_state(&id).await {
        Ok(s) => s,
        Err(e) => {
            assert!(e.to_string().contains("closed"), "{e}");
            host_a.event_log_state(&id).await.unwrap()
        }
    };
    assert_eq!(state.last_seq, 3, "the refused append wrote nothing");
    assert!(state.last_write_error.is_some(), "the failure is reported");
    // B continues the log without a gap.
    host_b
        .append(&lock_b, &events(&id, 4, 2), Durability::Flush)
        .await
        .unwrap();
    drop(lock_a);
    drop(lock_b);
    // A reconnects on its next call.
    let lock_a = host_a.lock(&id, Duration::from_secs(5)).await.unwrap();
    let state = match host_a
        .append(&lock_a, &events(&id, 6, 1), Durability::Fsync)
        .await
    {
        Ok(s) => s,
        // The same: one more ended connection may still sit in A's pool.
        Err(e) if e.to_string().contains("closed") => host_a
            .append(&lock_a, &events(&id, 6, 1), Durability::Fsync)
            .await
            .unwrap(),
        Err(e) => panic!("{e}"),
    };
    assert_eq!(state.last_seq, 6);
    assert!(host_a
        .event_log_state(&id)
        .await
        .unwrap()
        .last_write_error
        .is_none());
    let seqs: Vec<u64> = host_b
        .read_events(&id, &EventQuery::default())
        .await
        .unwrap()
        .events
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(seqs, (1..=6).collect::<Vec<_>>());
    drop(lock_a);
    host_b.drop_schema().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_on_two_hosts_keep_seq_gap_free() {
    let Some(url) = url() else { return };
    let schema = schema("gapfree");
    let a = open(&url, &schema).await;
    let b = open(&url, &schema).await;
    let mut r = record("contended", "/repo", 1);
    a.create(&mut r).await.unwrap();
    let id = r.acpx_record_id.clone();
    let writer = |store: acpx_store_postgres::PostgresStore, id: acpx_model::RecordId| async move {
        let mut written = 0;
        while written < 40 {
            let lock = store.lock(&id, Duration::from_secs(30)).await.unwrap();
            let last = store.event_log_state(&id).await.unwrap().last_seq;
            store
                .append(&lock, &events(&id, last + 1, 4), Durability::Flush)
                .await
                .unwrap();
            written += 4;
        }
    };
    let (x, y) = tokio::join!(
        tokio::spawn(writer(a.clone(), id.clone())),
        tokio::spawn(writer(b.clone(), id.clone()))
    );
    x.unwrap();
    y.unwrap();
    let page = a.read_events(&id, &EventQuery::default()).await.unwrap();
    let seqs: Vec<u64> = page.events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=80).collect::<Vec<_>>());
    a.drop_schema().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_dropped_mid_turn_loses_no_acknowledged_event() {
    let Some(url) = url() else { return };
    let schema = schema("midturn");
    let app = format!("{schema}_w");
    let store = open(&url_with_app(&url, &app), &schema).await;
    let mut r = record("turn", "/repo", 1);
    store.create(&mut r).await.unwrap();
    let id = r.acpx_record_id.clone();
    let lock = store.lock(&id, Duration::from_secs(5)).await.unwrap();
    let mut acknowledged = 0;
    let mut failure = None;
    for i in 0..200u64 {
        if i == 50 {
            terminate(&url, &app).await;
        }
        match store
            .append(&lock, &events(&id, acknowledged + 1, 1), Durability::Flush)
            .await
        {
            Ok(state) => acknowledged = state.last_seq,
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    let failure = failure.expect("appends after the connections ended must fail");
    assert!(matches!(failure, StoreError::Backend { .. }), "{failure}");
    assert!(acknowledged >= 50, "{acknowledged}");
    drop(lock);
    // The next "command": a new lock, a fresh connection, every acknowledged event there.
    let lock = store.lock(&id, Duration::from_secs(5)).await.unwrap();
    let page = store
        .read_events(&id, &EventQuery::default())
        .await
        .unwrap();
    assert_eq!(page.last_seq, acknowledged);
    assert_eq!(page.events.len() as u64, acknowledged);
    store
        .append(&lock, &events(&id, acknowledged + 1, 1), Durability::Flush)
        .await
        .unwrap();
    drop(lock);
    store.drop_schema().await.unwrap();
}

/// What a server restart does to a client between two turns: every connection it had ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_connection_ended_between_turns_then_the_next_turn_works() {
    let Some(url) = url() else { return };
    let schema = schema("restart");
    let app = format!("{schema}_r");
    let store = open(&url_with_app(&url, &app), &schema).await;
    let mut r = record("restart", "/repo", 1);
    store.create(&mut r).await.unwrap();
    let id = r.acpx_record_id.clone();
    append_locked(&store, &id, &events(&id, 1, 5), Durability::Flush)
        .await
        .unwrap();
    // Wake the follower's connection too.
    store
        .wait_for_events(&id, 5, Duration::from_millis(10))
        .await
        .unwrap();
    // Between turns the pooled connections sit idle; then they are ended, and the next call
    // comes at once, before the client may have noticed: a pooled connection idle that long
    // is checked before use and replaced, so the first call works.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert!(terminate(&url, &app).await >= 1);
    let state = store.event_log_state(&id).await.unwrap();
    assert_eq!(state.last_seq, 5);
    append_locked(&store, &id, &events(&id, 6, 5), Durability::Flush)
        .await
        .unwrap();
    let mut loaded = store.load(&id).await.unwrap();
    store.save(&mut loaded).await.unwrap();
    store
        .wait_for_events(&id, 5, Duration::from_secs(1))
        .await
        .unwrap();
    store.drop_schema().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_wakes_on_an_append_from_another_host() {
    let Some(url) = url() else { return };
    let schema = schema("follow");
    let reader = open(&url, &schema).await;
    let writer = open(&url, &schema).await;
    let mut r = record("followed", "/repo", 1);
    writer.create(&mut r).await.unwrap();
    let id = r.acpx_record_id.clone();
    // Nothing new: the wait lasts its timeout.
    let started = std::time::Instant::now();
    reader
        .wait_for_events(&id, 0, Duration::from_millis(300))
        .await
        .unwrap();
    assert!(started.elapsed() >= Duration::from_millis(250));
    let waiting = {
        let reader = reader.clone();
        let id = id.clone();
        tokio::spawn(async move {
            let started = std::time::Instant::now();
            reader
                .wait_for_events(&id, 0, Duration::from_secs(20))
                .await
                .unwrap();
            started.elapsed()
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    append_locked(&writer, &id, &events(&id, 1, 1), Durability::Flush)
        .await
        .unwrap();
    let waited = waiting.await.unwrap();
    assert!(waited < Duration::from_secs(10), "{waited:?}");
    writer.drop_schema().await.unwrap();
}
