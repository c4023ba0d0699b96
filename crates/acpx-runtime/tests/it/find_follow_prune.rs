//! Finding sessions (`ops::lookup`), following a log (`ops::watch`) and pruning
//! (`ops::prune`) on real stores: the file store in a temp directory and the memory store.

use crate::scope_fixtures;
use scope_fixtures::{at, create};

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use acpx_model::{
    EventPayload, EventQuery, EventSource, EventStream, MemoryStore, RecordId, Store,
};
use acpx_runtime::ops::lookup::{find_in_scope, resolve_id, walk_dirs};
use acpx_runtime::ops::prune::{days_before, prune, select, PruneOptions};
use acpx_runtime::ops::watch::{FollowEnd, Followed, LogFollower};
use acpx_runtime::ops::OpsError;
use acpx_runtime::recorder::{EventDraft, Recorder};
use acpx_store_fs::FsStore;
use serde_json::json;

fn stores(dir: &Path) -> Vec<Arc<dyn Store>> {
    let fs: Arc<dyn Store> = Arc::new(FsStore::open(dir.join("home")).unwrap());
    vec![fs, Arc::new(MemoryStore::new())]
}

/// Records `n` agent message chunks in the session's log, through the recorder.
async fn record_chunks(store: &Arc<dyn Store>, id: &RecordId, n: usize) {
    let writer = Arc::new(store.lock(id, Duration::from_secs(5)).await.unwrap());
    let snapshot = store.load(id).await.unwrap();
    let acp = snapshot.acp_session_id.clone();
    let mut rec = Recorder::new(
        store.clone(),
        &writer,
        snapshot,
        acpx_model::Durability::Flush,
        Duration::from_millis(0),
    );
    for i in 0..n {
        let payload = json!({"sessionId": acp, "update": {"sessionUpdate": "agent_message_chunk",
                             "content": {"type": "text", "text": format!("chunk {i}")}}});
        rec.record(EventDraft::new(
            None,
            EventStream::Prompt,
            EventSource::Acp,
            EventPayload::from_parts("session_update", &payload).unwrap(),
        ))
        .await
        .unwrap();
    }
    rec.save().await.unwrap();
}

#[tokio::test]
async fn the_nearest_directory_wins_then_the_newest_session() {
    let tmp = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(tmp.path()).unwrap().join("repo");
    let deep = root.join("a/b");
    std::fs::create_dir_all(&deep).unwrap();
    std::fs::write(root.join(".git"), "gitdir: elsewhere").unwrap();
    assert_eq!(
        walk_dirs(&deep),
        [deep.clone(), root.join("a"), root.clone()]
    );
    for store in stores(tmp.path()) {
        let s = &*store;
        create(s, "root-old", "agent", &root, None, 1_000).await;
        create(s, "root-new", "agent", &root, None, 3_000).await;
        create(s, "in-a", "agent", &root.join("a"), None, 2_000).await;
        create(s, "named", "agent", &root.join("a"), Some("n"), 4_000).await;
        create(s, "other-agent", "other", &deep, None, 5_000).await;
        // The nearest directory with a candidate wins over a newer session further up, and
        // a session with a name is no candidate for an unnamed lookup.
        let found = find_in_scope(s, "agent", &deep, None)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(found.acpx_record_id.as_str(), "in-a");
        let found = find_in_scope(s, "agent", &root, None)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(found.acpx_record_id.as_str(), "root-new");
        let found = find_in_scope(s, "agent", &deep, Some("n"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(found.acpx_record_id.as_str(), "named");
        // Closed sessions are not found.
        s.close(&RecordId::parse("in-a").unwrap(), at(6_000))
            .await
            .unwrap();
        let found = find_in_scope(s, "agent", &deep, None)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(found.acpx_record_id.as_str(), "root-new");
        assert!(find_in_scope(s, "nobody", &deep, None)
            .await
            .unwrap()
            .is_none());
    }
}

#[tokio::test]
async fn ids_resolve_exactly_then_by_a_unique_suffix() {
    let tmp = tempfile::tempdir().unwrap();
    for store in stores(tmp.path()) {
        let s = &*store;
        create(s, "rec-alpha-1", "agent", tmp.path(), None, 1_000).await;
        create(s, "rec-beta-1", "agent", tmp.path(), None, 2_000).await;
        let by = |text: &'static str| async move {
            resolve_id(s, text)
                .await
                .map(|r| r.map(|r| r.acpx_record_id.as_str().to_owned()))
        };
        assert_eq!(
            by("rec-alpha-1").await.unwrap().as_deref(),
            Some("rec-alpha-1")
        );
        assert_eq!(
            by("acp-rec-beta-1").await.unwrap().as_deref(),
            Some("rec-beta-1")
        );
        assert_eq!(by("beta-1").await.unwrap().as_deref(), Some("rec-beta-1"));
        assert_eq!(by("nothing").await.unwrap(), None);
        match by("-1").await {
            Err(OpsError::AmbiguousId { text, matches }) => {
                assert_eq!(text, "-1");
                assert_eq!(matches.len(), 2);
            }
            other => panic!("expected an ambiguous id, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_follower_sees_each_event_once_and_stops_at_the_close() {
    let tmp = tempfile::tempdir().unwrap();
    for store in stores(tmp.path()) {
        let r = create(&*store, "watched", "agent", tmp.path(), None, 1_000).await;
        let id = r.acpx_record_id.clone();
        record_chunks(&store, &id, 3).await;
        let mut follower = LogFollower::new(id.clone(), EventQuery::from_seq(2));
        let first = follower.poll(&*store).await.unwrap();
        let seqs = |items: &[Followed]| -> Vec<u64> {
            items
                .iter()
                .filter_map(|i| match i {
                    Followed::Event(e) => Some(e.seq),
                    _ => None,
                })
                .collect()
        };
        assert_eq!(seqs(&first.items), [2, 3]);
        assert_eq!(first.end, None);
        assert!(follower.poll(&*store).await.unwrap().items.is_empty());
        record_chunks(&store, &id, 2).await;
        assert_eq!(seqs(&follower.poll(&*store).await.unwrap().items), [4, 5]);
        store.close(&id, at(9_000)).await.unwrap();
        let mut end = None;
        for _ in 0..10 {
            let poll = follower.poll(&*store).await.unwrap();
            assert!(seqs(&poll.items).is_empty());
            if poll.end.is_some() {
                end = poll.end;
                break;
            }
        }
        assert_eq!(end, Some(FollowEnd::Closed));
    }
}

#[tokio::test]
async fn a_follower_stops_at_its_limit_and_when_the_session_is_deleted() {
    let tmp = tempfile::tempdir().unwrap();
    for store in stores(tmp.path()) {
        let r = create(&*store, "limited", "agent", tmp.path(), None, 1_000).await;
        let id = r.acpx_record_id.clone();
        record_chunks(&store, &id, 4).await;
        let query = EventQuery {
            limit: Some(2),
            ..EventQuery::default()
        };
        let mut follower = LogFollower::new(id.clone(), query);
        let poll = follower.poll(&*store).await.unwrap();
        assert_eq!(poll.items.len(), 2);
        assert_eq!(poll.end, Some(FollowEnd::LimitReached));

        let mut follower = LogFollower::new(id.clone(), EventQuery::default());
        assert_eq!(follower.poll(&*store).await.unwrap().items.len(), 4);
        store.delete(&id).await.unwrap();
        let poll = follower.poll(&*store).await.unwrap();
        assert_eq!(poll.end, Some(FollowEnd::Deleted));
    }
}

#[tokio::test]
async fn prune_deletes_closed_sessions_past_the_cutoff_and_keeps_their_logs() {
    let tmp = tempfile::tempdir().unwrap();
    for (n, store) in stores(tmp.path()).into_iter().enumerate() {
        let s = &*store;
        let old = create(s, "old", "agent", tmp.path(), None, 1_000).await;
        record_chunks(&store, &old.acpx_record_id, 3).await;
        s.close(&old.acpx_record_id, at(2_000)).await.unwrap();
        let recent = create(s, "recent", "agent", tmp.path(), None, 1_000).await;
        s.close(&recent.acpx_record_id, at(50_000)).await.unwrap();
        let other = create(s, "other", "other-agent", tmp.path(), None, 1_000).await;
        s.close(&other.acpx_record_id, at(2_000)).await.unwrap();
        create(s, "open", "agent", tmp.path(), None, 1_000).await;

        let keep = tmp.path().join(format!("pruned-{n}"));
        let mut options = PruneOptions {
            agent_command: Some("agent".into()),
            before: Some(at(10_000)),
            keep_logs_in: Some(keep.clone()),
            dry_run: true,
        };
        let chosen = select(s, &options).await.unwrap();
        assert_eq!(chosen.len(), 1);
        assert_eq!(chosen[0].acpx_record_id.as_str(), "old");
        let dry = prune(s, &options).await.unwrap();
        assert_eq!(dry.len(), 1);
        assert!(dry[0].kept_log.is_none());
        assert!(s.load(&old.acpx_record_id).await.is_ok());

        options.dry_run = false;
        let pruned = prune(s, &options).await.unwrap();
        assert_eq!(pruned.len(), 1);
        assert_eq!(pruned[0].closed_at, at(2_000));
        let kept = pruned[0].kept_log.clone().unwrap();
        assert_eq!(kept.events, 3);
        let text = std::fs::read_to_string(&kept.path).unwrap();
        assert_eq!(text.lines().count(), 3);
        assert!(s.load(&old.acpx_record_id).await.is_err());
        for still in ["recent", "other", "open"] {
            assert!(s.load(&RecordId::parse(still).unwrap()).await.is_ok());
        }
    }
    assert_eq!(days_before(at(86_400_000), 1.0), Some(at(0)));
    assert_eq!(days_before(at(0), -1.0), None);
    assert_eq!(days_before(at(0), f64::NAN), None);
}
