//! `copy_store` run again into a target that holds some of the sessions: identical copies are
//! kept and reported, any other refuses the whole run before anything is written.

use std::time::Duration;

use super::tests::{events, fill, record};
use super::*;
use crate::memory::MemoryStore;

async fn ids_of(store: &MemoryStore) -> Vec<String> {
    let page = store
        .list(&ListQuery {
            closed: ClosedFilter::Any,
            limit: None,
            ..ListQuery::default()
        })
        .await
        .unwrap();
    let mut ids: Vec<String> = page
        .sessions
        .into_iter()
        .map(|s| s.acpx_record_id.as_str().to_owned())
        .collect();
    ids.sort();
    ids
}

async fn append(store: &MemoryStore, id: &RecordId, from: u64, n: u64) {
    let writer = store.lock(id, Duration::from_secs(1)).await.unwrap();
    store
        .append(&writer, &events(id, from, n), Durability::Flush)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_second_run_copies_only_the_new_sessions() {
    let from = MemoryStore::new();
    fill(&from, 5, 1_200).await;
    let to = MemoryStore::new();
    let first = copy_store(&from, &to).await.unwrap();
    assert_eq!(first.sessions.len(), 5);
    assert!(first.already_copied.is_empty());

    for name in ["n1", "n2"] {
        let mut r = record(name, 9_000);
        from.create(&mut r).await.unwrap();
        append(&from, &r.acpx_record_id, 1, 3).await;
    }
    let second = copy_store(&from, &to).await.unwrap();
    let copied: Vec<&str> = second
        .sessions
        .iter()
        .map(|s| s.acpx_record_id.as_str())
        .collect();
    let mut copied = copied;
    copied.sort_unstable();
    assert_eq!(copied, ["n1", "n2"], "only the new ones");
    assert_eq!(second.already_copied.len(), 5);
    // The figures of a kept copy are those of the first run.
    for kept in &second.already_copied {
        let was = first
            .sessions
            .iter()
            .find(|s| s.acpx_record_id == kept.acpx_record_id)
            .unwrap();
        assert_eq!(kept, was);
    }
    assert_eq!(ids_of(&to).await, ids_of(&from).await);

    // A third run has nothing to do.
    let third = copy_store(&from, &to).await.unwrap();
    assert!(third.sessions.is_empty());
    assert_eq!(third.already_copied.len(), 7);
}

#[tokio::test]
async fn a_changed_copy_in_the_target_is_refused_before_anything_is_written() {
    let from = MemoryStore::new();
    fill(&from, 3, 4).await;
    let to = MemoryStore::new();
    copy_store(&from, &to).await.unwrap();
    let changed = RecordId::parse("s001").unwrap();
    append(&to, &changed, 5, 1).await;
    let mut r = record("n1", 9_000);
    from.create(&mut r).await.unwrap();

    let err = copy_store(&from, &to).await.unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(&err, StoreError::AlreadyExistsDiffering { id, .. } if id == &changed),
        "{msg}"
    );
    assert_eq!(err.kind(), "already_exists");
    assert!(msg.contains("s001") && msg.contains("event count"), "{msg}");
    // The new source session was not copied.
    assert!(!ids_of(&to).await.contains(&"n1".to_owned()));
}

#[tokio::test]
async fn a_source_changed_since_the_copy_is_refused_naming_what_differs() {
    let from = MemoryStore::new();
    fill(&from, 3, 4).await;
    let to = MemoryStore::new();
    copy_store(&from, &to).await.unwrap();
    let id = RecordId::parse("s000").unwrap();
    let mut r = from.load(&id).await.unwrap();
    r.name = Some("renamed".into());
    from.save(&mut r).await.unwrap();

    let err = copy_store(&from, &to).await.unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, StoreError::AlreadyExistsDiffering { .. }),
        "{msg}"
    );
    assert!(
        msg.contains("s000") && msg.contains("SHA-256 of the snapshot"),
        "{msg}"
    );
}

#[tokio::test]
async fn an_unrelated_session_with_a_taken_id_is_refused_and_left_alone() {
    let from = MemoryStore::new();
    fill(&from, 3, 2).await;
    let to = MemoryStore::new();
    let mut existing = record("s002", 1);
    to.create(&mut existing).await.unwrap();
    match copy_store(&from, &to).await {
        Err(StoreError::AlreadyExistsDiffering { id, what }) => {
            assert_eq!(id.as_str(), "s002");
            assert!(what.contains("event count"), "{what}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(ids_of(&to).await, ["s002"]);
    assert_eq!(to.load(&existing.acpx_record_id).await.unwrap(), existing);
}

/// A copy stopped after `create` (and perhaps some appends) but before its last save: the
/// target holds the source's snapshot at revision 1 and a prefix of its log. A rerun removes
/// it and copies the session again; a finished copy beside it is kept.
#[tokio::test]
async fn an_unfinished_copy_is_removed_and_copied_again() {
    let from = MemoryStore::new();
    fill(&from, 3, 4).await;
    let to = MemoryStore::new();
    let kept = RecordId::parse("s000").unwrap();
    let first = copy_store(&from, &to).await.unwrap();
    assert!(first.recopied.is_empty());
    // Replace s001's and s002's copies by unfinished ones: the snapshot as `create` wrote it
    // and the first events (none, for s001; 3 of 8, for s002).
    for (name, prefix) in [("s001", 0u64), ("s002", 3)] {
        let id = RecordId::parse(name).unwrap();
        to.delete(&id).await.unwrap();
        let mut r = from.load(&id).await.unwrap();
        to.create(&mut r).await.unwrap();
        if prefix > 0 {
            append(&to, &id, 1, prefix).await;
        }
    }
    // And one whose every event was appended, the last save missing.
    let full = RecordId::parse("s002").unwrap();
    append(&to, &full, 4, 5).await;

    let second = copy_store(&from, &to).await.unwrap();
    let mut recopied: Vec<&str> = second.recopied.iter().map(|id| id.as_str()).collect();
    recopied.sort_unstable();
    assert_eq!(recopied, ["s001", "s002"]);
    let mut copied: Vec<&str> = second
        .sessions
        .iter()
        .map(|s| s.acpx_record_id.as_str())
        .collect();
    copied.sort_unstable();
    assert_eq!(copied, ["s001", "s002"]);
    assert_eq!(second.already_copied.len(), 1);
    assert_eq!(second.already_copied[0].acpx_record_id, kept);
    for name in ["s001", "s002"] {
        let id = RecordId::parse(name).unwrap();
        assert!(to.load(&id).await.unwrap().revision >= 2);
    }
    let third = copy_store(&from, &to).await.unwrap();
    assert!(third.recopied.is_empty() && third.sessions.is_empty());
    assert_eq!(third.already_copied.len(), 3);
}

/// A log retention trimmed, copied alone and stopped half-way: `create_sessions` made the copy
/// with its first event (a revision-2 snapshot recording that one event), some appends
/// followed, the last save never ran. A rerun removes it and copies the session again.
#[tokio::test]
async fn an_unfinished_copy_of_a_trimmed_log_is_removed_and_copied_again() {
    let from = super::tests::trimmed_source().await;
    let id = RecordId::parse("s000").unwrap();
    let to = MemoryStore::new();
    let record = from.load(&id).await.unwrap();
    let first = events(&id, 5, 1);
    to.create_sessions(vec![NewSessionData {
        record,
        events: first,
    }])
    .await
    .unwrap();
    append(&to, &id, 6, 2).await;
    assert!(to.load(&id).await.unwrap().acpx.event_log.last_seq < 9);

    let rerun = copy_store(&from, &to).await.unwrap();
    assert_eq!(rerun.recopied, vec![id.clone()]);
    assert_eq!(rerun.sessions.len(), 1);
    assert_eq!(
        (rerun.sessions[0].first_seq, rerun.sessions[0].last_seq),
        (5, 9)
    );
    let again = copy_store(&from, &to).await.unwrap();
    assert!(again.recopied.is_empty() && again.sessions.is_empty());
    assert_eq!(again.already_copied.len(), 1);
}

/// A session at revision 1 whose log is not a prefix of the source's is not a copy of it:
/// refused, and left alone.
#[tokio::test]
async fn a_revision_one_session_that_is_no_prefix_is_refused() {
    let from = MemoryStore::new();
    fill(&from, 3, 4).await;
    let to = MemoryStore::new();
    let id = RecordId::parse("s002").unwrap();
    let mut r = from.load(&id).await.unwrap();
    to.create(&mut r).await.unwrap();
    let writer = to.lock(&id, Duration::from_secs(1)).await.unwrap();
    let mut other = events(&id, 1, 2);
    other[1].payload = serde_json::json!({"not": "the source's"});
    to.append(&writer, &other, Durability::Flush).await.unwrap();
    drop(writer);
    match copy_store(&from, &to).await {
        Err(StoreError::AlreadyExistsDiffering { id: got, what }) => {
            assert_eq!(got, id);
            assert!(what.contains("differs"), "{what}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        to.read_events(&id, &EventQuery::default())
            .await
            .unwrap()
            .events,
        other
    );
}

/// A refusal leaves the target as it was: an unfinished copy found before the differing
/// session is not removed.
#[tokio::test]
async fn a_refused_rerun_removes_no_unfinished_copy() {
    let from = MemoryStore::new();
    fill(&from, 3, 4).await;
    let to = MemoryStore::new();
    copy_store(&from, &to).await.unwrap();
    let unfinished = RecordId::parse("s000").unwrap();
    to.delete(&unfinished).await.unwrap();
    let mut r = from.load(&unfinished).await.unwrap();
    to.create(&mut r).await.unwrap();
    let changed = RecordId::parse("s002").unwrap();
    append(&to, &changed, 9, 1).await;
    match copy_store(&from, &to).await {
        Err(StoreError::AlreadyExistsDiffering { id, .. }) => assert_eq!(id, changed),
        other => panic!("{other:?}"),
    }
    assert_eq!(to.load(&unfinished).await.unwrap().revision, 1);
}
