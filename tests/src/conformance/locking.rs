//! The per-session writer lock, in one process and across processes.

use super::*;
use crate::ops::AppendLocked;

/// A second `lock` waits, then fails with `Locked` after its timeout; dropping the guard
/// releases the lock and wakes a waiter; a fresh handle in this process is excluded too.
pub async fn lock_waits_times_out_and_releases_on_drop(b: &dyn Backend) {
    let store = b.open().await;
    let id = create(&*store, session("locked", 0)).await.acpx_record_id;
    let guard = store
        .lock(&id, Duration::from_secs(5))
        .await
        .expect("first lock");
    assert_eq!(guard.id(), &id);
    for s in [store.clone(), b.open().await] {
        let timeout = Duration::from_millis(150);
        let t0 = Instant::now();
        let err = s.lock(&id, timeout).await.expect_err("lock is held");
        match &err {
            StoreError::Locked { id: eid, waited } => {
                assert_eq!(eid, &id);
                assert!(
                    *waited >= timeout,
                    "gave up after {waited:?}, before its timeout"
                );
                assert!(err.to_string().contains("locked"), "{err}");
            }
            other => panic!("expected Locked, got {other:?}"),
        }
        assert!(
            t0.elapsed() >= timeout,
            "returned before waiting its timeout"
        );
    }
    let waiter = {
        let s = b.open().await;
        let id = id.clone();
        tokio::spawn(async move { s.lock(&id, Duration::from_secs(60)).await.map(drop) })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !waiter.is_finished(),
        "a second lock must wait while the first is held"
    );
    drop(guard);
    tokio::time::timeout(Duration::from_secs(60), waiter)
        .await
        .expect("waiter woke after the drop")
        .unwrap()
        .expect("waiter gets the lock once it is released");
    // A holder that panics releases the lock while unwinding.
    let panicker = {
        let s = store.clone();
        let id = id.clone();
        tokio::spawn(async move {
            let _guard = s.lock(&id, Duration::from_secs(5)).await.unwrap();
            panic!("holder panics while holding the lock (expected by the check)");
        })
    };
    assert!(panicker.await.unwrap_err().is_panic());
    let again = store
        .lock(&id, Duration::from_millis(500))
        .await
        .expect("released");
    // Locks are per session.
    let other = create(&*store, session("unlocked", 0)).await.acpx_record_id;
    store
        .lock(&other, Duration::from_millis(500))
        .await
        .expect("another session's lock is independent");
    drop(again);
}

/// A worker process holds the lock: this process cannot take it, and its save and append
/// wait for the holder (they then see the holder's writes: `Conflict` / `SeqMismatch`).
pub async fn lock_cross_process_mutations_wait(b: &dyn Backend) {
    const CHECK: &str = "lock_cross_process_mutations_wait";
    let store = b.open().await;
    let id = create(&*store, session("xlock", 0)).await.acpx_record_id;
    let Some(mut w) = Worker::spawn(b, &["hold-lock", "--id", "xlock", "--seconds", "120"], &[])
    else {
        undeclared(b, CHECK, "a worker");
    };
    w.expect_line("locked").await;
    let err = store
        .lock(&id, Duration::from_millis(200))
        .await
        .expect_err("lock held by another process");
    assert!(matches!(err, StoreError::Locked { .. }), "{err:?}");

    let stale = store.load(&id).await.unwrap();
    let save = {
        let s = b.open().await;
        let mut r = stale.clone();
        tokio::spawn(async move { s.save(&mut r).await })
    };
    let append = {
        let s = b.open().await;
        let id = id.clone();
        tokio::spawn(async move {
            s.append_locked(&id, &events(&id, 1, 1), Durability::Flush)
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !save.is_finished(),
        "a save must wait while another process holds the lock"
    );
    assert!(
        !append.is_finished(),
        "an append must wait while another process holds the lock"
    );
    w.send("save").await;
    w.expect_line("saved revision=2").await;
    w.send("append").await;
    w.expect_line("appended seq=1").await;
    w.send("release").await;
    w.expect_line("released").await;
    w.finish().await;

    let save = tokio::time::timeout(Duration::from_secs(60), save)
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(
            save,
            Err(StoreError::Conflict {
                expected: 1,
                actual: 2,
                ..
            })
        ),
        "the waiting save must see the holder's save: {save:?}"
    );
    let append = tokio::time::timeout(Duration::from_secs(60), append)
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(
            append,
            Err(StoreError::SeqMismatch {
                last: 1,
                got: 1,
                ..
            })
        ),
        "the waiting append must see the holder's append: {append:?}"
    );
    let page = read_all(&*store, &id).await;
    assert_eq!(page.events.len(), 1);
    assert_eq!(page.events[0].payload["worker"], json!("holder"));
    assert_eq!(
        store.load(&id).await.unwrap().extra["workerTag"],
        json!("holder")
    );
}

/// A lock held by a process that is SIGKILLed is released.
pub async fn lock_released_when_holder_killed(b: &dyn Backend) {
    let store = b.open().await;
    let id = create(&*store, session("xkill", 0)).await.acpx_record_id;
    let Some(mut w) = Worker::spawn(b, &["hold-lock", "--id", "xkill", "--seconds", "120"], &[])
    else {
        undeclared(b, "lock_released_when_holder_killed", "a worker");
    };
    w.expect_line("locked").await;
    assert!(matches!(
        store.lock(&id, Duration::from_millis(100)).await,
        Err(StoreError::Locked { .. })
    ));
    w.kill().await;
    store
        .lock(&id, Duration::from_secs(10))
        .await
        .expect("the dead holder's lock is released");
    let mut r = store.load(&id).await.unwrap();
    store
        .save(&mut r)
        .await
        .expect("writes proceed after the holder died");
}
