//! Staged new sessions (`Store::stage_session`, what `sessions import` writes with): nothing is
//! visible before the commit, everything after it; an abort, or a kill, leaves nothing a
//! reader sees, and a new stage of the same id (the rerun of an import) completes it.

use super::*;
use crate::fixtures::tagged_event;
use crate::ops::AppendLocked;

/// Asserts that no reader sees session `id`: not `list` (neither as a session nor as a
/// skipped entry), `load`, `summary`, `read_events`, nor `search`.
async fn assert_invisible(store: &dyn Store, id: &RecordId, when: &str) {
    let page = store
        .list(&ListQuery {
            closed: ClosedFilter::Any,
            ..ListQuery::default()
        })
        .await
        .unwrap();
    assert!(
        !page.sessions.iter().any(|s| &s.acpx_record_id == id),
        "{when}: {id} is listed"
    );
    assert!(
        !page
            .skipped
            .iter()
            .any(|s| s.acpx_record_id.as_ref() == Some(id)),
        "{when}: {id} is listed as damaged: {:?}",
        page.skipped
    );
    assert!(
        matches!(store.load(id).await, Err(StoreError::NotFound(_))),
        "{when}: {id} loads"
    );
    assert!(
        matches!(store.summary(id).await, Err(StoreError::NotFound(_))),
        "{when}: {id} has a summary"
    );
    assert!(
        store
            .read_events(id, &EventQuery::from_seq(0))
            .await
            .is_err()
            || read_all(store, id).await.events.is_empty(),
        "{when}: the staged events of {id} can be read"
    );
    let hits = store
        .search(&SearchQuery {
            text: "staged-words".into(),
            ..SearchQuery::default()
        })
        .await
        .unwrap();
    assert!(
        !hits.iter().any(|h| &h.acpx_record_id == id),
        "{when}: {id} is found by search"
    );
}

/// A record whose conversation holds a word only a staged session has.
fn staged_record(id: &str) -> SessionRecord {
    let mut r = rich_session(id, 6);
    r.thread
        .messages
        .push(user_text("u-staged", "staged-words"));
    r
}

/// Nothing of a staged session is visible before its commit; after it, the whole session is,
/// as `create`, the appends and a `save` with the log's state would have left it: the
/// snapshot as given (revision 2, `acpx.event_log` the store's own), every event byte for
/// byte, in order.
pub async fn staged_session_is_invisible_then_whole(b: &dyn Backend) {
    let store = b.open().await;
    let other = create(&*store, session("stage-neighbour", 5)).await;
    let record = staged_record("stage-whole");
    let id = record.acpx_record_id.clone();
    let all = events(&id, 1, 2_500);
    let mut stage = store.stage_session(record.clone()).await.unwrap();
    assert_eq!(stage.id(), &id);
    for (i, chunk) in all.chunks(1_000).enumerate() {
        stage.append(chunk).await.unwrap();
        // Another handle (another process for the file and database stores) sees nothing.
        assert_invisible(&*b.open().await, &id, &format!("after batch {i}")).await;
    }
    stage.append(&[]).await.unwrap();
    assert_invisible(&*store, &id, "before the commit").await;
    let stored = stage.commit().await.unwrap();
    assert_eq!(stored.revision, 2);
    assert_eq!(stored.acpx.event_log.last_seq, 2_500);

    let store = b.open().await;
    let mut loaded = store.load(&id).await.unwrap();
    assert_eq!(loaded, stored);
    assert_eq!(loaded.revision, 2);
    let state = store.event_log_state(&id).await.unwrap();
    assert_eq!(
        (
            loaded.acpx.event_log.last_seq,
            loaded.acpx.event_log.segment_count
        ),
        (state.last_seq, state.segment_count)
    );
    loaded.revision = record.revision;
    loaded.acpx.event_log = record.acpx.event_log.clone();
    assert_eq!(loaded, record, "the snapshot is the one staged");
    let page = read_all(&*store, &id).await;
    assert_eq!(page.events.len(), 2_500);
    for (got, want) in page.events.iter().zip(&all) {
        assert_eq!(ndjson_line(got), ndjson_line(want), "seq {}", want.seq);
    }
    let listed = store.list(&ListQuery::default()).await.unwrap();
    let ids: BTreeSet<_> = listed
        .sessions
        .iter()
        .map(|s| s.acpx_record_id.clone())
        .collect();
    assert_eq!(ids, BTreeSet::from([id.clone(), other.acpx_record_id]));
    assert!(listed.skipped.is_empty(), "{:?}", listed.skipped);
    let hits = store
        .search(&SearchQuery {
            text: "staged-words".into(),
            ..SearchQuery::default()
        })
        .await
        .unwrap();
    assert!(hits.iter().any(|h| h.acpx_record_id == id), "{hits:?}");
    // It is an ordinary session now: saved, appended to, deleted like any.
    let mut r = loaded;
    r.revision = 2;
    store.save(&mut r).await.unwrap();
    store
        .append_locked(&id, &events(&id, 2_501, 1), Durability::Flush)
        .await
        .unwrap();
    assert_eq!(read_all(&*store, &id).await.last_seq, 2_501);
    assert!(store.stale_stages().await.unwrap().is_empty());
}

/// An aborted stage leaves nothing, not even a stale stage; the id is free again, and an empty
/// stage commits a session with an empty log.
pub async fn aborted_stage_leaves_nothing(b: &dyn Backend) {
    let store = b.open().await;
    let record = staged_record("stage-abort");
    let id = record.acpx_record_id.clone();
    let mut stage = store.stage_session(record.clone()).await.unwrap();
    stage.append(&events(&id, 1, 1_500)).await.unwrap();
    stage.abort().await.unwrap();
    assert_invisible(&*store, &id, "after the abort").await;
    assert_invisible(&*b.open().await, &id, "after the abort, another handle").await;
    assert!(
        store.stale_stages().await.unwrap().is_empty(),
        "an abort left a stale stage"
    );
    // A dropped stage is no different.
    let mut stage = store.stage_session(record.clone()).await.unwrap();
    stage.append(&events(&id, 1, 10)).await.unwrap();
    drop(stage);
    assert_invisible(&*store, &id, "after a drop").await;

    let stored = store
        .stage_session(record.clone())
        .await
        .unwrap()
        .commit()
        .await
        .unwrap();
    assert_eq!(stored.acpx.event_log.last_seq, 0);
    let page = read_all(&*store, &id).await;
    assert!(page.events.is_empty());
    assert_eq!(store.load(&id).await.unwrap(), stored);
}

/// A stage refuses a taken id before it writes anything, and every batch that does not
/// continue its log (a gap, seq 0, another session's event), staging nothing of it and
/// going on; a log may start above seq 1 (retention removed its oldest events), and is then
/// stored as retained from there.
pub async fn stage_refuses_taken_ids_and_bad_batches(b: &dyn Backend) {
    let store = b.open().await;
    let taken = create(&*store, session("stage-taken", 0)).await;
    match store.stage_session(session("stage-taken", 1)).await {
        Err(StoreError::AlreadyExists(id)) => assert_eq!(id, taken.acpx_record_id),
        other => panic!("staging a taken id: {other:?}"),
    }
    assert_eq!(store.load(&taken.acpx_record_id).await.unwrap(), taken);

    let id = rid("stage-seqs");
    let mut stage = store.stage_session(session("stage-seqs", 0)).await.unwrap();
    assert!(matches!(
        stage.append(&events(&id, 0, 1)).await,
        Err(StoreError::SeqMismatch { .. })
    ));
    stage.append(&events(&id, 1, 2)).await.unwrap();
    assert!(matches!(
        stage.append(&events(&id, 4, 1)).await,
        Err(StoreError::SeqMismatch { .. })
    ));
    let foreign = events(&rid("someone-else"), 3, 1);
    assert!(matches!(
        stage.append(&foreign).await,
        Err(StoreError::InvalidArgument(_))
    ));
    stage.append(&events(&id, 3, 1)).await.unwrap();
    let stored = stage.commit().await.unwrap();
    assert_eq!(stored.acpx.event_log.last_seq, 3);
    assert_eq!(seqs(&read_all(&*store, &id).await.events), vec![1, 2, 3]);

    // A log retention trimmed: it starts at seq 501.
    let id = rid("stage-retained");
    let mut stage = store
        .stage_session(session("stage-retained", 0))
        .await
        .unwrap();
    stage.append(&events(&id, 501, 100)).await.unwrap();
    stage.append(&events(&id, 601, 50)).await.unwrap();
    let stored = stage.commit().await.unwrap();
    assert_eq!(stored.acpx.event_log.last_seq, 650);
    let page = read_all(&*b.open().await, &id).await;
    assert_eq!(page.oldest_seq, 501);
    assert_eq!(page.last_seq, 650);
    assert_contiguous(&page.events, 501, 650, "a staged log retained from seq 501");
    store
        .append_locked(&id, &events(&id, 651, 1), Durability::Flush)
        .await
        .expect("appends continue a staged retained log");
}

/// A worker staging a session is SIGKILLed after some batches: nothing of the session is
/// visible (to list, load, summary, read_events, search); what it left, if anything, is a
/// stale stage of that session only, which a new stage of the same id (the rerun of the
/// import) reclaims before it writes the whole session, and which `remove_stale_stages`
/// removes.
pub async fn killed_stage_leaves_nothing_and_a_rerun_completes(b: &dyn Backend) {
    let id = rid("stage-killed");
    let op = [
        "stage",
        "--id",
        "stage-killed",
        "--count",
        "1000000",
        "--batch",
        "500",
        "--tag",
        "k",
    ];
    let Some(mut w) = Worker::spawn(b, &op, &[]) else {
        undeclared(
            b,
            "killed_stage_leaves_nothing_and_a_rerun_completes",
            "a worker",
        );
    };
    for _ in 0..20 {
        w.expect_line("ack ").await;
    }
    w.kill().await;
    let lines = w.rest().await;
    assert!(
        !lines.iter().any(|l| l.starts_with("committed")),
        "the worker committed before the kill"
    );
    let store = b.open().await;
    assert_invisible(&*store, &id, "after the kill").await;
    let stale = store.stale_stages().await.unwrap();
    assert!(
        stale.iter().all(|s| s.acpx_record_id.as_ref() == Some(&id)),
        "stale stages of other sessions: {stale:?}"
    );
    // A second killed stage, of another session: removed by `remove_stale_stages`.
    let other = rid("stage-killed-2");
    let op = [
        "stage",
        "--id",
        "stage-killed-2",
        "--count",
        "1000000",
        "--batch",
        "500",
        "--tag",
        "k",
    ];
    let mut w = Worker::spawn(b, &op, &[]).unwrap();
    for _ in 0..5 {
        w.expect_line("ack ").await;
    }
    w.kill().await;
    w.rest().await;
    assert_invisible(&*store, &other, "after the second kill").await;
    let stale: BTreeSet<_> = store
        .stale_stages()
        .await
        .unwrap()
        .into_iter()
        .filter_map(|s| s.acpx_record_id)
        .collect();
    assert!(
        stale.is_subset(&BTreeSet::from([id.clone(), other.clone()])),
        "{stale:?}"
    );

    // The rerun: a new stage of the same id takes the whole log and commits.
    let all: Vec<_> = (1..=3_000)
        .map(|seq| tagged_event(&id, seq, "r", seq))
        .collect();
    let mut stage = store
        .stage_session(session("stage-killed", 0))
        .await
        .unwrap();
    for chunk in all.chunks(1_000) {
        stage.append(chunk).await.unwrap();
    }
    let stored = stage.commit().await.unwrap();
    assert_eq!(stored.acpx.event_log.last_seq, 3_000);
    let store = b.open().await;
    let page = read_all(&*store, &id).await;
    assert_contiguous(&page.events, 1, 3_000, "the rerun's log");
    for e in &page.events {
        assert_eq!(
            e.payload["worker"],
            json!("r"),
            "seq {} is the killed stage's",
            e.seq
        );
    }
    assert_eq!(store.load(&id).await.unwrap(), stored);

    let removed = store.remove_stale_stages().await.unwrap();
    assert!(
        removed
            .iter()
            .all(|s| s.acpx_record_id.as_ref() == Some(&other)),
        "{removed:?}"
    );
    assert!(store.stale_stages().await.unwrap().is_empty());
    assert_invisible(&*store, &other, "after removing the stale stages").await;
    let page = store.list(&ListQuery::default()).await.unwrap();
    assert_eq!(page.sessions.len(), 1);
    assert!(page.skipped.is_empty(), "{:?}", page.skipped);
    // The other id is free again.
    store
        .stage_session(session("stage-killed-2", 0))
        .await
        .unwrap()
        .commit()
        .await
        .unwrap();
}

/// A worker crashes at the last step before a staged session's commit point (the file
/// store: the snapshot has replaced the tombstone and everything is fsynced, the rename to
/// `<id>.json` not done): the session is absent, and a rerun completes it.
pub async fn failpoint_stage_before_commit(b: &dyn Backend) {
    require_failpoint(b, "failpoint_stage_before_commit", "stage.before_commit");
    let id = rid("stage-fp");
    let op = [
        "stage", "--id", "stage-fp", "--count", "2000", "--batch", "500",
    ];
    let env = [("ACPX_FAILPOINT", "stage.before_commit")];
    let lines = Worker::spawn(b, &op, &env).unwrap().finish_aborted().await;
    assert_eq!(last_ack(&lines, "seq"), Some(2_000), "{lines:?}");
    let store = b.open().await;
    assert_invisible(&*store, &id, "after a crash before the commit point").await;
    assert_eq!(store.stale_stages().await.unwrap().len(), 1);
    let mut stage = store.stage_session(session("stage-fp", 0)).await.unwrap();
    stage.append(&events(&id, 1, 2_000)).await.unwrap();
    stage.commit().await.unwrap();
    assert_contiguous(&read_all(&*store, &id).await.events, 1, 2_000, "the rerun");
    assert!(store.stale_stages().await.unwrap().is_empty());
}
