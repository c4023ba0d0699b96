//! Workers that crash at named failpoints, and appends that fail (a full disk).

use super::*;
use crate::ops::AppendLocked;

/// Crash after the temp file is written and fsynced, before the rename: the old snapshot is
/// intact and nothing else is listed.
pub async fn failpoint_save_after_temp_fsync(b: &dyn Backend) {
    require_failpoint(
        b,
        "failpoint_save_after_temp_fsync",
        "save.after_temp_fsync",
    );
    let store = b.open().await;
    let mut r = create(&*store, rich_session("fp-temp", 50)).await;
    store.save(&mut r).await.unwrap();
    let op = [
        "save-loop",
        "--id",
        "fp-temp",
        "--count",
        "1",
        "--tag",
        "fp",
    ];
    let env = [("ACPX_FAILPOINT", "save.after_temp_fsync")];
    let lines = Worker::spawn(b, &op, &env).unwrap().finish_aborted().await;
    assert_eq!(last_ack(&lines, "revision"), None, "nothing acknowledged");
    let store = b.open().await;
    assert_eq!(
        store.load(&r.acpx_record_id).await.expect("old snapshot"),
        r
    );
    let page = store.list(&ListQuery::default()).await.unwrap();
    assert_eq!(page.sessions.len(), 1);
    assert!(
        page.skipped.is_empty(),
        "a temp file was listed: {:?}",
        page.skipped
    );
    store.save(&mut r).await.expect("save after the crash");
    assert_eq!(r.revision, 3);
}

/// Crash after the rename, before the directory fsync: the session is old or new, whole,
/// never missing.
pub async fn failpoint_save_after_rename(b: &dyn Backend) {
    require_failpoint(b, "failpoint_save_after_rename", "save.after_rename");
    let store = b.open().await;
    let r = create(&*store, rich_session("fp-rename", 50)).await;
    let op = [
        "save-loop",
        "--id",
        "fp-rename",
        "--count",
        "1",
        "--tag",
        "fp",
    ];
    let env = [("ACPX_FAILPOINT", "save.after_rename")];
    Worker::spawn(b, &op, &env).unwrap().finish_aborted().await;
    let store = b.open().await;
    let got = store.load(&r.acpx_record_id).await.expect("never missing");
    match got.revision {
        1 => assert_eq!(got, r),
        2 => assert_eq!(got.extra["workerCounter"], json!(2)),
        n => panic!("revision {n} after one interrupted save"),
    }
    assert_eq!(got.thread, r.thread);
    assert!(store
        .list(&ListQuery::default())
        .await
        .unwrap()
        .skipped
        .is_empty());
}

/// Crash in the middle of writing an event line: the partial line is withheld and reported,
/// and the next append (after reopening) continues cleanly.
pub async fn failpoint_append_after_partial_write(b: &dyn Backend) {
    require_failpoint(
        b,
        "failpoint_append_after_partial_write",
        "append.after_partial_write",
    );
    let store = b.open().await;
    let id = create(&*store, session("fp-append", 0))
        .await
        .acpx_record_id;
    store
        .append_locked(&id, &events(&id, 1, 10), Durability::Flush)
        .await
        .unwrap();
    let op = [
        "append",
        "--id",
        "fp-append",
        "--count",
        "1",
        "--batch",
        "1",
        "--tag",
        "fp",
    ];
    let env = [("ACPX_FAILPOINT", "append.after_partial_write")];
    let lines = Worker::spawn(b, &op, &env).unwrap().finish_aborted().await;
    assert_eq!(last_ack(&lines, "seq"), None);
    let store = b.open().await;
    let page = read_all(&*store, &id).await;
    assert_eq!(page.events, events(&id, 1, 10));
    assert!(
        page.torn_tail.is_some(),
        "the partial write must be reported as a torn tail"
    );
    store
        .append_locked(&id, &events(&id, 11, 3), Durability::Flush)
        .await
        .expect("append after the crash");
    let page = read_all(&*b.open().await, &id).await;
    assert_eq!(page.events, events(&id, 1, 13));
    assert!(page.torn_tail.is_none() && page.damaged.is_empty());
}

/// Crash after the snapshot is unlinked, before the logs are: the session is gone, and a
/// new session with the same id does not inherit the old events.
pub async fn failpoint_delete_after_snapshot_unlink(b: &dyn Backend) {
    require_failpoint(
        b,
        "failpoint_delete_after_snapshot_unlink",
        "delete.after_snapshot_unlink",
    );
    let store = b.open().await;
    let id = create(&*store, session("fp-delete", 0))
        .await
        .acpx_record_id;
    create(&*store, session("fp-keep", 0)).await;
    store
        .append_locked(&id, &events(&id, 1, 5), Durability::Flush)
        .await
        .unwrap();
    let op = ["delete", "--id", "fp-delete"];
    let env = [("ACPX_FAILPOINT", "delete.after_snapshot_unlink")];
    Worker::spawn(b, &op, &env).unwrap().finish_aborted().await;
    let store = b.open().await;
    assert!(matches!(
        store.load(&id).await,
        Err(StoreError::NotFound(_))
    ));
    let page = store.list(&ListQuery::default()).await.unwrap();
    assert_eq!(
        list_ids(&*store, ListQuery::default()).await,
        ids(&["fp-keep"])
    );
    assert!(page.skipped.is_empty(), "{:?}", page.skipped);
    create(&*store, session("fp-delete", 0)).await;
    let page = read_all(&*store, &id).await;
    assert!(
        page.events.is_empty(),
        "the recreated session inherited {} events",
        page.events.len()
    );
    store
        .append_locked(&id, &events(&id, 1, 1), Durability::Flush)
        .await
        .expect("fresh log starts at 1");
}

/// The size limit of every file the worker of [`append_failure_is_reported_and_undone`] may
/// write: room for a few thousand events, far less than the 100,000 it tries to append.
const FULL_DISK_BYTES: u64 = 1024 * 1024;

/// Append failure is not silent (docs/format.md § Write ordering): a worker
/// appends batches until its files hit a size limit, the way they hit a full disk. The
/// failing append returns a typed error (any kind: `EFBIG`, `SQLITE_FULL`, …), and it is all
/// or nothing: afterwards, without the limit, the log holds exactly the acknowledged events
/// (seqs 1..=last ack, none of the failed batch, nothing torn), and the next append continues
/// at last ack + 1. `event_log_state` of the handle that saw the failure reports it in
/// `last_write_error`. Assumes one file of the backend grows past 1 MiB within 100,000 events
/// (true unless event segments are smaller than that).
pub async fn append_failure_is_reported_and_undone(b: &dyn Backend) {
    let check = "append_failure_is_reported_and_undone";
    if b.worker_args().is_none() {
        undeclared(b, check, "a worker");
    }
    // Created here, without the limit: only appends are to meet it.
    let store = b.open().await;
    let id = create(&*store, session("disk-full", 0))
        .await
        .acpx_record_id;
    store
        .append_locked(&id, &events(&id, 1, 3), Durability::Flush)
        .await
        .unwrap();
    // Batches of 25 events: a write stopped part-way likely ends after whole events of it.
    let op = [
        "append-until-error",
        "--id",
        "disk-full",
        "--batch",
        "25",
        "--tag",
        "full",
    ];
    let mut w = Worker::spawn_with_file_limit(b, &op, FULL_DISK_BYTES).unwrap();
    let lines = w.finish().await;
    assert!(
        !lines.iter().any(|l| l == "no-error"),
        "100,000 events were appended under a 1 MiB file-size limit without any error: \
         a failed write went unreported"
    );
    let error = lines
        .iter()
        .find(|l| l.starts_with("error "))
        .unwrap_or_else(|| panic!("the worker reported no failed append: {lines:?}"));
    let acked = last_ack(&lines, "seq").unwrap_or_else(|| {
        panic!("no append succeeded under the limit (it is too low for this backend): {error}")
    });
    let state = lines
        .iter()
        .find(|l| l.starts_with("state "))
        .unwrap_or_else(|| panic!("no state line: {lines:?}"));
    assert_eq!(
        field(state, "last_seq"),
        Some(acked),
        "after `{error}`, event_log_state in the failing process disagrees with the last \
         acknowledged seq {acked}: {state}"
    );
    // Never silent (docs/format.md § Write ordering): the store handle that saw the append fail reports
    // it in `last_write_error` (until an append through it succeeds).
    let recorded = state
        .split_once("last_write_error=")
        .map_or("none", |(_, r)| r);
    assert_ne!(
        recorded, "none",
        "after `{error}`, event_log_state in the failing process does not report it in \
         last_write_error: {state}"
    );

    let store = b.open().await;
    let page = read_all(&*store, &id).await;
    assert_eq!(page.last_seq, acked, "after `{error}`");
    assert_contiguous(&page.events, 1, acked, "after a failed append");
    assert_eq!(
        page.events[..3],
        events(&id, 1, 3)[..],
        "stored events lost"
    );
    for e in &page.events[3..] {
        assert_eq!(e.payload["worker"], json!("full"));
        assert_eq!(e.payload["n"], json!(e.seq - 4));
    }
    assert!(
        page.torn_tail.is_none() && page.damaged.is_empty(),
        "the failed append left bytes behind: {:?} {:?}",
        page.torn_tail,
        page.damaged
    );
    assert_eq!(store.event_log_state(&id).await.unwrap().last_seq, acked);
    let state = store
        .append_locked(&id, &events(&id, acked + 1, 2), Durability::Flush)
        .await
        .expect("append after the failure, without the limit");
    assert_eq!(state.last_seq, acked + 2);
    assert_eq!(state.last_write_error, None);
    let page = read_all(&*b.open().await, &id).await;
    assert_contiguous(&page.events, 1, acked + 2, "after the next append");
}
