//! Creating, loading, saving, closing and deleting sessions: revisions, conflicts,
//! idempotence.

use super::*;
use crate::ops::AppendLocked;

/// A rich record (every content kind, the acpx namespace, unknown fields everywhere) loads
/// back deeply equal, through the same handle and through a fresh one.
pub async fn create_load_round_trip(b: &dyn Backend) {
    let store = b.open().await;
    let mut rec = rich_session("round-trip", 23);
    store.create(&mut rec).await.expect("create");
    assert_eq!(rec.revision, 1, "create sets revision 1");
    let loaded = store.load(&rec.acpx_record_id).await.expect("load");
    assert_eq!(
        loaded, rec,
        "load after create returns the record as created"
    );
    drop(store);

    let store = b.open().await;
    let loaded = store
        .load(&rec.acpx_record_id)
        .await
        .expect("load after reopen");
    assert_eq!(loaded, rec, "the record survives a reopen unchanged");
    assert_eq!(
        String::from_utf8(loaded.to_json_vec().unwrap()).unwrap(),
        String::from_utf8(rec.to_json_vec().unwrap()).unwrap(),
        "serialized forms differ (key order of unknown fields?)"
    );
    assert_eq!(
        loaded.extra["futureTopLevel"],
        json!({"z": [1, 2, {"nested": null}], "a": "kept in order"})
    );
    assert_eq!(loaded.acpx.extra["future_bookkeeping"], json!({"k": true}));
    assert_eq!(
        loaded.thread.extra["draft_prompt"],
        json!([{"type": "text", "text": "half-typed"}])
    );
    assert_eq!(loaded.thread.messages.len(), 23);
}

/// Creating an id that exists fails with `AlreadyExists` and leaves the stored one alone.
pub async fn create_existing_id_is_refused(b: &dyn Backend) {
    let store = b.open().await;
    let mut first = session("taken", 0);
    first.name = Some("first".into());
    let first = create(&*store, first).await;
    let mut second = session("taken", 5_000);
    second.name = Some("second".into());
    let err = store
        .create(&mut second)
        .await
        .expect_err("duplicate create");
    assert!(
        matches!(&err, StoreError::AlreadyExists(id) if id.as_str() == "taken"),
        "{err:?}"
    );
    let stored = b.open().await.load(&rid("taken")).await.expect("load");
    assert_eq!(stored, first, "the stored session must be unchanged");
    assert_eq!(
        list_ids(&*store, ListQuery::default()).await,
        ids(&["taken"])
    );
}

/// Each save increments the revision, in the caller's record and in the store.
pub async fn save_increments_revision(b: &dyn Backend) {
    let store = b.open().await;
    let mut r = create(&*store, rich_session("rev", 4)).await;
    for expected in 2..=4 {
        r.thread.title = format!("title {expected}");
        store.save(&mut r).await.expect("save");
        assert_eq!(r.revision, expected);
        let loaded = b.open().await.load(&r.acpx_record_id).await.expect("load");
        assert_eq!(loaded, r, "stored record after save {expected}");
    }
}

/// A save based on a stale revision gets `Conflict` naming both revisions, and changes
/// nothing; the caller's record keeps its revision.
pub async fn save_stale_revision_conflicts(b: &dyn Backend) {
    let s1 = b.open().await;
    let s2 = b.open().await;
    let id = create(&*s1, session("stale", 0)).await.acpx_record_id;
    let mut a = s1.load(&id).await.unwrap();
    let mut c = s2.load(&id).await.unwrap();
    a.thread.title = "A".into();
    s1.save(&mut a).await.expect("first save");
    assert_eq!(a.revision, 2);
    c.thread.title = "C".into();
    let err = s2.save(&mut c).await.expect_err("stale save must fail");
    match &err {
        StoreError::Conflict {
            id: eid,
            expected,
            actual,
        } => {
            assert_eq!((eid, *expected, *actual), (&id, 1, 2), "{err}");
            let msg = err.to_string();
            assert!(msg.contains("revision 1") && msg.contains("is 2"), "{msg}");
        }
        other => panic!("expected Conflict, got {other:?}"),
    }
    assert_eq!(
        c.revision, 1,
        "a failed save must not touch the caller's revision"
    );
    let stored = b.open().await.load(&id).await.unwrap();
    assert_eq!(stored, a, "the stale save must not change the stored data");
    // The loser reloads and wins.
    let mut c = s2.load(&id).await.unwrap();
    c.thread.title = "C".into();
    s2.save(&mut c).await.expect("save after reload");
    assert_eq!(c.revision, 3);
}

/// Saving a session that was deleted is `NotFound` and does not resurrect it.
pub async fn save_deleted_session_not_found(b: &dyn Backend) {
    let store = b.open().await;
    let mut r = create(&*store, session("gone", 0)).await;
    assert!(store.delete(&r.acpx_record_id).await.unwrap());
    r.thread.title = "late write".into();
    let err = store.save(&mut r).await.expect_err("save of deleted");
    assert!(matches!(err, StoreError::NotFound(_)), "{err:?}");
    let err = b.open().await.load(&r.acpx_record_id).await.unwrap_err();
    assert!(matches!(err, StoreError::NotFound(_)), "{err:?}");
    assert!(list_ids(&*store, ListQuery::default()).await.is_empty());
}

/// Close marks the session closed (and drops the pid), is idempotent, and keeps it listable
/// and loadable.
pub async fn close_is_idempotent_and_keeps_session(b: &dyn Backend) {
    let store = b.open().await;
    let mut r = session("to-close", 0);
    r.pid = Some(77);
    let id = create(&*store, r).await.acpx_record_id;
    let closed = store.close(&id, ts(5_000)).await.expect("close");
    assert!(closed.closed);
    assert_eq!(closed.closed_at, Some(ts(5_000)));
    assert_eq!(closed.pid, None);
    let again = store.close(&id, ts(9_000)).await.expect("second close");
    assert_eq!(
        again, closed,
        "closing a closed session returns it unchanged"
    );
    let loaded = b
        .open()
        .await
        .load(&id)
        .await
        .expect("closed session loads");
    assert_eq!(loaded, closed);
    let q = |closed| ListQuery {
        closed,
        ..ListQuery::default()
    };
    assert_eq!(
        list_ids(&*store, q(ClosedFilter::Closed)).await,
        ids(&["to-close"])
    );
    assert_eq!(
        list_ids(&*store, q(ClosedFilter::Any)).await,
        ids(&["to-close"])
    );
    assert!(list_ids(&*store, q(ClosedFilter::Open)).await.is_empty());
    let err = store.close(&rid("never-was"), ts(0)).await.unwrap_err();
    assert!(matches!(err, StoreError::NotFound(_)), "{err:?}");
}

/// `summary` gives what `list` gives for the session, follows the saves and the close made
/// through another handle (asked again and again, as a follower asks), and is `NotFound`
/// for a session that was deleted or never existed.
pub async fn summary_is_the_listed_one_and_follows_changes(b: &dyn Backend) {
    let store = b.open().await;
    let id = create(&*store, rich_session("summed", 23))
        .await
        .acpx_record_id;
    let listed = |store: Arc<dyn Store>, id: RecordId| async move {
        let page = store
            .list(&ListQuery {
                closed: ClosedFilter::Any,
                ..ListQuery::default()
            })
            .await
            .expect("list");
        page.sessions
            .into_iter()
            .find(|s| s.acpx_record_id == id)
            .expect("listed")
    };
    let first = store.summary(&id).await.expect("summary");
    assert_eq!(first, listed(store.clone(), id.clone()).await);
    assert_eq!(first.message_count, 23);
    assert_eq!(store.summary(&id).await.expect("asked again"), first);

    let other = b.open().await;
    let mut r = other.load(&id).await.expect("load");
    r.name = Some("renamed".into());
    other.save(&mut r).await.expect("save");
    let saved = store.summary(&id).await.expect("summary after a save");
    assert_eq!(saved.name.as_deref(), Some("renamed"));
    assert_eq!(saved.revision, first.revision + 1);
    assert_eq!(saved, listed(store.clone(), id.clone()).await);

    other.close(&id, ts(7_000)).await.expect("close");
    for _ in 0..3 {
        let closed = store.summary(&id).await.expect("summary after the close");
        assert!(closed.closed, "the close made by another handle is seen");
        assert_eq!(closed, listed(store.clone(), id.clone()).await);
    }

    other.delete(&id).await.expect("delete");
    let err = store.summary(&id).await.expect_err("deleted");
    assert!(matches!(err, StoreError::NotFound(_)), "{err:?}");
    let err = store.summary(&rid("never-was")).await.expect_err("absent");
    assert!(matches!(err, StoreError::NotFound(_)), "{err:?}");
}

/// Delete removes the snapshot and the events, from every view; it is idempotent; appends
/// after it are `NotFound`; a new session with the same id starts with an empty log.
pub async fn delete_removes_everything_idempotently(b: &dyn Backend) {
    let store = b.open().await;
    let id = create(&*store, rich_session("doomed", 6))
        .await
        .acpx_record_id;
    create(&*store, session("bystander", 0)).await;
    store
        .append_locked(&id, &events(&id, 1, 5), Durability::Flush)
        .await
        .unwrap();
    assert!(
        store.delete(&id).await.expect("delete"),
        "delete reports it existed"
    );
    for s in [store.clone(), b.open().await] {
        assert!(matches!(s.load(&id).await, Err(StoreError::NotFound(_))));
        assert_eq!(
            list_ids(&*s, ListQuery::default()).await,
            ids(&["bystander"])
        );
        let err = s
            .read_events(&id, &EventQuery::default())
            .await
            .unwrap_err();
        assert!(
            matches!(err, StoreError::NotFound(_)),
            "read_events after delete: {err:?}"
        );
    }
    assert!(
        !store.delete(&id).await.expect("second delete"),
        "nothing left to delete"
    );
    let err = store
        .append_locked(&id, &events(&id, 6, 1), Durability::Flush)
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::NotFound(_)),
        "append after delete: {err:?}"
    );
    let err = store
        .append_locked(&id, &events(&id, 1, 1), Durability::Flush)
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::NotFound(_)),
        "append after delete: {err:?}"
    );

    create(&*store, session("doomed", 0)).await;
    let page = read_all(&*b.open().await, &id).await;
    assert!(
        page.events.is_empty(),
        "a recreated session must not inherit old events"
    );
    assert_eq!(page.last_seq, 0);
    assert_eq!(store.event_log_state(&id).await.unwrap().last_seq, 0);
    store
        .append_locked(&id, &events(&id, 1, 1), Durability::Flush)
        .await
        .expect("the recreated session's log starts at seq 1");
    assert!(b.open().await.load(&rid("bystander")).await.is_ok());
}
