//! Workers SIGKILLed in the middle of appends, save loops and rewrites.

use super::*;
use crate::ops::AppendLocked;

/// A worker appending (under the lock) is SIGKILLed mid-run: every acknowledged seq is
/// readable, seqs are contiguous from 1, and the log takes the next append (so the dead
/// writer's lock is gone, too).
pub async fn crash_kill_mid_append(b: &dyn Backend) {
    let store = b.open().await;
    let id = create(&*store, session("kill-append", 0))
        .await
        .acpx_record_id;
    store
        .append_locked(&id, &events(&id, 1, 5), Durability::Flush)
        .await
        .unwrap();
    let op = [
        "append",
        "--id",
        "kill-append",
        "--count",
        "200000",
        "--batch",
        "4",
        "--durability",
        "flush",
        "--mode",
        "lock",
        "--tag",
        "k",
    ];
    let Some(mut w) = Worker::spawn(b, &op, &[]) else {
        undeclared(b, "crash_kill_mid_append", "a worker");
    };
    let mut lines = Vec::new();
    for _ in 0..150 {
        lines.push(w.expect_line("ack ").await);
    }
    w.kill().await;
    lines.extend(w.rest().await);
    assert!(
        !lines.iter().any(|l| l.starts_with("done")),
        "the worker finished before the kill"
    );
    let acked = last_ack(&lines, "seq").expect("acks");

    let store = b.open().await;
    let page = read_all(&*store, &id).await;
    assert!(
        page.last_seq >= acked,
        "acknowledged seq {acked} lost (last {})",
        page.last_seq
    );
    assert_contiguous(&page.events, 1, page.last_seq, "after SIGKILL");
    for e in &page.events[5..] {
        assert_eq!(e.payload["worker"], json!("k"));
        assert_eq!(e.payload["n"], json!(e.seq - 6));
    }
    assert_eq!(
        store.event_log_state(&id).await.unwrap().last_seq,
        page.last_seq
    );
    let next = page.last_seq + 1;
    store
        .append_locked(&id, &events(&id, next, 2), Durability::Flush)
        .await
        .expect("append after the crash");
    let page = read_all(&*b.open().await, &id).await;
    assert_contiguous(&page.events, 1, next + 1, "after the next append");
    assert!(page.torn_tail.is_none());
}

/// A worker in a load-modify-save loop is SIGKILLed: the snapshot loads, is whole, and its
/// revision is at least the last acknowledged one.
pub async fn crash_kill_mid_save_loop(b: &dyn Backend) {
    let store = b.open().await;
    let original = create(&*store, rich_session("kill-save", 200)).await;
    let op = [
        "save-loop",
        "--id",
        "kill-save",
        "--count",
        "1000000",
        "--tag",
        "k",
    ];
    let Some(mut w) = Worker::spawn(b, &op, &[]) else {
        undeclared(b, "crash_kill_mid_save_loop", "a worker");
    };
    let mut lines = Vec::new();
    for _ in 0..30 {
        lines.push(w.expect_line("ack ").await);
    }
    w.kill().await;
    lines.extend(w.rest().await);
    let acked = last_ack(&lines, "revision").expect("acks");
    assert!(acked >= 31);

    let store = b.open().await;
    let r = store
        .load(&original.acpx_record_id)
        .await
        .expect("snapshot loads after SIGKILL");
    assert!(
        r.revision >= acked,
        "acknowledged revision {acked} lost: {}",
        r.revision
    );
    assert_eq!(
        r.extra["workerCounter"],
        json!(r.revision),
        "snapshot is not whole"
    );
    assert_eq!(r.thread, original.thread);
    let page = store.list(&ListQuery::default()).await.unwrap();
    assert_eq!(page.sessions.len(), 1);
    assert!(
        page.skipped.is_empty(),
        "leftovers listed as sessions: {:?}",
        page.skipped
    );
    let mut r = r;
    store.save(&mut r).await.expect("save after the crash");
}

/// While a worker rewrites a large snapshot over and over, a reader in this process always
/// loads a complete document (old or new), never an error.
pub async fn reader_during_rewrite_sees_whole_documents(b: &dyn Backend) {
    let store = b.open().await;
    let original = create(&*store, rich_session("rewrite", 500)).await;
    let op = [
        "save-loop",
        "--id",
        "rewrite",
        "--count",
        "60",
        "--tag",
        "r",
    ];
    let Some(mut w) = Worker::spawn(b, &op, &[]) else {
        undeclared(b, "reader_during_rewrite_sees_whole_documents", "a worker");
    };
    let reader = {
        let s = b.open().await;
        let id = original.acpx_record_id.clone();
        let thread = original.thread.clone();
        tokio::spawn(async move {
            let mut last = 0;
            let mut loads = 0u64;
            loop {
                let r = s
                    .load(&id)
                    .await
                    .expect("a load during rewrites must succeed");
                assert!(
                    r.revision >= last,
                    "revision went back: {} < {last}",
                    r.revision
                );
                if r.revision > 1 {
                    assert_eq!(r.extra["workerCounter"], json!(r.revision));
                }
                assert_eq!(r.thread, thread);
                last = r.revision;
                loads += 1;
                if last == 61 {
                    return loads;
                }
                tokio::task::yield_now().await;
            }
        })
    };
    let lines = w.finish().await;
    assert_eq!(last_ack(&lines, "revision"), Some(61));
    let loads = tokio::time::timeout(Duration::from_secs(120), reader)
        .await
        .expect("reader finished")
        .unwrap();
    println!("reader made {loads} loads during 60 rewrites");
}
