//! Snapshots, listing, malformed files, close, delete and temp-file cleanup of the file store.

use crate::common;

use std::fs;
use std::time::Duration;

use acpx_model::{
    ClosedFilter, Durability, ListQuery, Message, SearchQuery, Store, StoreError, Timestamp,
    UserContent, UserMessage,
};
use acpx_store_fs::FsStore;
use common::*;
use serde_json::{json, Value};

#[tokio::test]
async fn layout_and_permissions() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("home/.acpx");
    let store = FsStore::open(&root).unwrap();
    assert_eq!(store.sessions_dir(), root.join("sessions"));
    assert_eq!(mode(&root), 0o700);
    assert_eq!(mode(&store.sessions_dir()), 0o700);
    // An existing root keeps the mode its owner gave it.
    let shared = tmp.path().join("shared");
    fs::create_dir(&shared).unwrap();
    fs::set_permissions(&shared, std::os::unix::fs::PermissionsExt::from_mode(0o750)).unwrap();
    let other = FsStore::open(&shared).unwrap();
    assert_eq!(mode(&shared), 0o750);
    assert_eq!(mode(&other.sessions_dir()), 0o700);
    fs::write(tmp.path().join("file"), b"").unwrap();
    assert!(matches!(
        FsStore::open(tmp.path().join("file")),
        Err(StoreError::Io { .. })
    ));

    let a = id("sess-a");
    let mut r = record(&a, "/repo");
    store.create(&mut r).await.unwrap();
    append_locked(&store, &a, &events(&a, 1..=3, 10), Durability::Flush)
        .await
        .unwrap();
    let snapshot = store.snapshot_path(&a);
    assert_eq!(snapshot, root.join("sessions/sess-a.json"));
    assert_eq!(
        store.active_log_path(&a),
        root.join("sessions/sess-a.events.ndjson")
    );
    assert_eq!(
        store.segment_path(&a, 2),
        root.join("sessions/sess-a.events.2.ndjson")
    );
    // The lock file exists while a lock is held (a lock that created it removes it again).
    let guard = store.lock(&a, Duration::from_secs(1)).await.unwrap();
    for f in [
        snapshot.clone(),
        store.active_log_path(&a),
        store.lock_path(&a),
    ] {
        assert!(f.exists(), "{}", f.display());
        assert_eq!(mode(&f), 0o600, "{}", f.display());
    }
    drop(guard);
    assert!(!store.lock_path(&a).exists());
    // The snapshot is the pretty-printed session.json of docs/format.md with the store's revision.
    let doc: Value = serde_json::from_slice(&fs::read(&snapshot).unwrap()).unwrap();
    assert_eq!(doc["schema"], "acpx.session.v1");
    assert_eq!(doc["acpxRecordId"], "sess-a");
    assert_eq!(doc["revision"], 1);
    // No temp file is left behind by a successful save.
    let names: Vec<String> = fs::read_dir(store.sessions_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(
        names.iter().all(|n| !n.contains(".tmp.")),
        "left-over temp file in {names:?}"
    );
}

#[tokio::test]
async fn relative_root_is_made_absolute() {
    let tmp = tempfile::tempdir().unwrap();
    let cwd = std::env::current_dir().unwrap();
    let rel = pathdiff(tmp.path(), &cwd);
    let store = FsStore::open(&rel).unwrap();
    assert!(store.root().is_absolute());
    let a = id("a");
    store.create(&mut record(&a, "/r")).await.unwrap();
    let state = append_locked(&store, &a, &events(&a, 1..=1, 1), Durability::Flush)
        .await
        .unwrap();
    assert!(std::path::Path::new(&state.active_path).is_absolute());
}

/// `target` relative to `base` (both absolute), with `..` segments.
fn pathdiff(target: &std::path::Path, base: &std::path::Path) -> std::path::PathBuf {
    let t: Vec<_> = target.components().collect();
    let b: Vec<_> = base.components().collect();
    let common = t.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let mut out = std::path::PathBuf::new();
    for _ in common..b.len() {
        out.push("..");
    }
    for c in &t[common..] {
        out.push(c);
    }
    out
}

#[tokio::test]
async fn create_refuses_existing_and_load_round_trips() {
    let tmp = tempfile::tempdir().unwrap();
    let store = store(tmp.path());
    let a = id("a");
    let mut r = record(&a, "/repo");
    r.name = Some("backend".into());
    r.extra.insert("futureField".into(), json!({"k": [1, 2]}));
    store.create(&mut r).await.unwrap();
    assert_eq!(r.revision, 1);
    let loaded = store.load(&a).await.unwrap();
    assert_eq!(loaded, r);
    let mut again = record(&a, "/elsewhere");
    assert!(matches!(
        store.create(&mut again).await,
        Err(StoreError::AlreadyExists(_))
    ));
    assert_eq!(again.revision, 0);
    assert_eq!(store.load(&a).await.unwrap().cwd, "/repo");
    assert!(matches!(
        store.load(&id("missing")).await,
        Err(StoreError::NotFound(_))
    ));
}

#[tokio::test]
async fn invalid_record_is_refused_before_touching_disk() {
    let tmp = tempfile::tempdir().unwrap();
    let store = store(tmp.path());
    let a = id("a");
    let mut r = record(&a, "/repo");
    r.acp_session_id = String::new();
    let e = store.create(&mut r).await.unwrap_err();
    assert!(matches!(e, StoreError::Invalid(_)), "{e}");
    assert!(e.to_string().contains("acpSessionId"), "{e}");
    assert!(!store.snapshot_path(&a).exists());
}

#[tokio::test]
async fn abandoned_temp_write_leaves_old_snapshot_intact() {
    let tmp = tempfile::tempdir().unwrap();
    let store = store(tmp.path());
    let a = id("a");
    let mut r = record(&a, "/repo");
    r.name = Some("v1".into());
    store.create(&mut r).await.unwrap();
    // What a writer that died between writing its temp file and renaming it leaves behind:
    // half of the next version.
    let mut next = r.clone();
    next.name = Some("v2".into());
    next.revision = 2;
    let bytes = next.to_json_vec().unwrap();
    let temp = store
        .sessions_dir()
        .join(format!(".{a}.json.tmp.999999.deadbeef"));
    fs::write(&temp, &bytes[..bytes.len() / 2]).unwrap();

    // Opened again at once, the store does not sweep (the first open just did); the temp
    // file is harmless meanwhile.
    let reopened = FsStore::open(tmp.path()).unwrap();
    assert!(temp.exists(), "a sweep runs at most every 10 minutes");
    let loaded = reopened.load(&a).await.unwrap();
    assert_eq!(loaded.name.as_deref(), Some("v1"));
    assert_eq!(loaded.revision, 1);
    // Once the last sweep is older than that, open() removes temp files of dead writers.
    let mark = store.sessions_dir().join(".cleanup");
    let eleven_minutes_ago = std::time::SystemTime::now() - Duration::from_secs(660);
    fs::File::options()
        .write(true)
        .open(&mark)
        .unwrap()
        .set_modified(eleven_minutes_ago)
        .unwrap();
    let reopened = FsStore::open(tmp.path()).unwrap();
    assert!(!temp.exists(), "open() removes temp files of dead writers");
    let loaded = reopened.load(&a).await.unwrap();
    assert_eq!(loaded.revision, 1);
    // The temp file never shows up as a session.
    let page = reopened.list(&ListQuery::default()).await.unwrap();
    assert_eq!(page.sessions.len(), 1);
    assert!(page.skipped.is_empty());
}

#[tokio::test]
async fn stale_revision_conflicts_across_handles_and_instances() {
    let tmp = tempfile::tempdir().unwrap();
    let s1 = store(tmp.path());
    let s2 = store(tmp.path());
    let a = id("a");
    let mut r = record(&a, "/repo");
    s1.create(&mut r).await.unwrap();

    let mut copy1 = s1.load(&a).await.unwrap();
    let mut copy2 = s2.load(&a).await.unwrap();
    copy1.name = Some("first".into());
    s1.save(&mut copy1).await.unwrap();
    assert_eq!(copy1.revision, 2);

    copy2.name = Some("second".into());
    match s2.save(&mut copy2).await {
        Err(StoreError::Conflict {
            expected, actual, ..
        }) => assert_eq!((expected, actual), (1, 2)),
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert_eq!(
        copy2.revision, 1,
        "a refused save leaves the revision alone"
    );
    assert_eq!(
        s2.load(&a).await.unwrap().name.as_deref(),
        Some("first"),
        "never a silent overwrite"
    );
    // The same handle also sees the stale revision.
    let mut stale = copy1.clone();
    stale.revision = 1;
    assert!(matches!(
        s1.save(&mut stale).await,
        Err(StoreError::Conflict { .. })
    ));
    // Reload, reapply, save.
    let mut fresh = s2.load(&a).await.unwrap();
    fresh.name = Some("second".into());
    s2.save(&mut fresh).await.unwrap();
    assert_eq!(s1.load(&a).await.unwrap().revision, 3);
    // Saving a session that does not exist is NotFound, not a create.
    let mut ghost = record(&id("ghost"), "/repo");
    ghost.revision = 1;
    assert!(matches!(
        s1.save(&mut ghost).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(!s1.snapshot_path(&id("ghost")).exists());
    assert!(
        !s1.lock_path(&id("ghost")).exists(),
        "no lock file is left for a session that does not exist"
    );
}

#[tokio::test]
async fn revision_written_by_another_process_is_read_from_the_file() {
    // A snapshot replaced behind the store's back (same revision key, new inode) must be
    // re-read, not taken from the cache.
    let tmp = tempfile::tempdir().unwrap();
    let store = store(tmp.path());
    let a = id("a");
    let mut r = record(&a, "/repo");
    store.create(&mut r).await.unwrap();
    let mut other = r.clone();
    other.revision = 7;
    let path = store.snapshot_path(&a);
    let tmp_path = path.with_extension("other");
    fs::write(&tmp_path, other.to_json_vec().unwrap()).unwrap();
    fs::rename(&tmp_path, &path).unwrap();
    match store.save(&mut r).await {
        Err(StoreError::Conflict { actual: 7, .. }) => {}
        other => panic!("expected a conflict with revision 7, got {other:?}"),
    }
}

fn valid_doc(id: &str) -> Value {
    serde_json::from_slice(&record(&common::id(id), "/repo").to_json_vec().unwrap()).unwrap()
}

#[tokio::test]
async fn malformed_snapshots_are_skipped_by_list_and_corrupt_for_load() {
    let tmp = tempfile::tempdir().unwrap();
    let store = store(tmp.path());
    for good in ["good-1", "good-2"] {
        store.create(&mut record(&id(good), "/repo")).await.unwrap();
    }
    let dir = store.sessions_dir();
    let with = |f: &dyn Fn(&mut Value)| {
        let mut v = valid_doc("x");
        f(&mut v);
        v
    };
    // (id, bytes, a word the reason must contain)
    let mut cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "bad-json",
            b"{\"schema\": \"acpx.session.v1\",".to_vec(),
            "EOF",
        ),
        ("empty", Vec::new(), "EOF"),
        ("not-utf8", vec![0xff, 0xfe, 0x00, 0x41], ""),
        ("array", b"[1, 2, 3]".to_vec(), ""),
    ];
    let json_cases: Vec<(&str, Value, &str)> = vec![
        (
            "wrong-schema",
            with(&|v| v["schema"] = json!("acpx.session.v2")),
            "schema",
        ),
        ("wrong-type", with(&|v| v["cwd"] = json!(5)), "cwd"),
        (
            "missing-field",
            with(&|v| {
                v.as_object_mut().unwrap().remove("agentCommand");
            }),
            "agentCommand",
        ),
        (
            "negative-tokens",
            with(&|v| v["thread"]["cumulative_token_usage"] = json!({"input_tokens": -1})),
            "thread.cumulative_token_usage.input_tokens",
        ),
        (
            "tz-less",
            with(&|v| v["createdAt"] = json!("2026-02-27T12:00:00")),
            "createdAt",
        ),
        (
            "legacy-message",
            with(&|v| v["thread"]["messages"] = json!([{"kind": "user", "text": "hi"}])),
            "thread.messages[0]",
        ),
        (
            "bad-speed",
            with(&|v| v["thread"]["speed"] = json!("warp")),
            "thread.speed",
        ),
    ];
    for (name, mut v, word) in json_cases {
        v["acpxRecordId"] = json!(name);
        cases.push((name, serde_json::to_vec(&v).unwrap(), word));
    }
    // A valid document stored under another id's file name.
    cases.push((
        "renamed",
        serde_json::to_vec(&valid_doc("good-1")).unwrap(),
        "acpxRecordId",
    ));
    for (name, bytes, _) in &cases {
        fs::write(dir.join(format!("{name}.json")), bytes).unwrap();
    }
    // Files that are not the store's are ignored, never reported or deleted.
    fs::write(dir.join("notes.txt"), "hello").unwrap();
    fs::write(dir.join("a b.json"), "{}").unwrap();

    for round in 0..2 {
        let page = store.list(&ListQuery::default()).await.unwrap();
        let mut listed: Vec<_> = page
            .sessions
            .iter()
            .map(|s| s.acpx_record_id.to_string())
            .collect();
        listed.sort();
        assert_eq!(listed, ["good-1", "good-2"], "round {round}");
        assert_eq!(
            page.skipped.len(),
            cases.len(),
            "round {round}: {:?}",
            page.skipped
        );
        for (name, _, word) in &cases {
            let file = dir.join(format!("{name}.json"));
            let skipped = page
                .skipped
                .iter()
                .find(|s| s.location == file.display().to_string())
                .unwrap_or_else(|| panic!("{name} not reported: {:?}", page.skipped));
            assert!(
                skipped.reason.contains(word),
                "{name}: reason {:?} lacks {word:?}",
                skipped.reason
            );
        }
    }
    for (name, _, word) in &cases {
        match store.load(&id(name)).await {
            Err(StoreError::Corrupt {
                location, reason, ..
            }) => {
                assert_eq!(
                    location,
                    dir.join(format!("{name}.json")).display().to_string()
                );
                assert!(reason.contains("field `"), "{name}: {reason}");
                assert!(reason.contains(word), "{name}: {reason} lacks {word:?}");
            }
            other => panic!("{name}: expected Corrupt, got {other:?}"),
        }
    }
    assert!(dir.join("notes.txt").exists() && dir.join("a b.json").exists());
    // A renamed copy never surfaces under the other id.
    assert_eq!(
        store.load(&id("good-1")).await.unwrap().acpx_record_id,
        id("good-1")
    );
}

#[tokio::test]
async fn list_uses_the_index_while_files_are_unchanged() {
    let tmp = tempfile::tempdir().unwrap();
    let store = store(tmp.path());
    let a = id("a");
    let mut r = record(&a, "/repo");
    r.name = Some("real".into());
    store.create(&mut r).await.unwrap();
    store.create(&mut record(&id("b"), "/repo")).await.unwrap();
    store.list(&ListQuery::default()).await.unwrap();

    // Tamper with the cached summary (not the snapshot): a fresh store that trusts the cache
    // for unchanged files reports the tampered value, which proves it did not parse a.json.
    let index_path = store.sessions_dir().join(".index.json");
    assert_eq!(mode(&index_path), 0o600);
    let mut index: Value = serde_json::from_slice(&fs::read(&index_path).unwrap()).unwrap();
    index["entries"]["a.json"]["summary"]["name"] = json!("from-cache");
    fs::write(&index_path, serde_json::to_vec(&index).unwrap()).unwrap();
    let fresh = FsStore::open(tmp.path()).unwrap();
    let names = |page: &acpx_model::ListPage| {
        page.sessions
            .iter()
            .find(|s| s.acpx_record_id == a)
            .and_then(|s| s.name.clone())
    };
    let page = fresh.list(&ListQuery::default()).await.unwrap();
    assert_eq!(names(&page).as_deref(), Some("from-cache"));

    // An entry whose revision disagrees with the start of the file is not trusted even when
    // the identity matches (identities can repeat after inode reuse).
    let mut index: Value = serde_json::from_slice(&fs::read(&index_path).unwrap()).unwrap();
    index["entries"]["a.json"]["summary"]["revision"] = json!(99);
    fs::write(&index_path, serde_json::to_vec(&index).unwrap()).unwrap();
    let page = FsStore::open(tmp.path())
        .unwrap()
        .list(&ListQuery::default())
        .await
        .unwrap();
    assert_eq!(names(&page).as_deref(), Some("real"));

    // Any change to the file invalidates its entry.
    r.name = Some("renamed".into());
    fresh.save(&mut r).await.unwrap();
    let page = fresh.list(&ListQuery::default()).await.unwrap();
    assert_eq!(names(&page).as_deref(), Some("renamed"));

    // A corrupt cache is ignored, not trusted and not fatal.
    fs::write(&index_path, b"{not json").unwrap();
    let page = FsStore::open(tmp.path())
        .unwrap()
        .list(&ListQuery::default())
        .await
        .unwrap();
    assert_eq!(page.sessions.len(), 2);
    assert_eq!(names(&page).as_deref(), Some("renamed"));
    // Deleted sessions disappear from the list and from the cache.
    fresh.delete(&id("b")).await.unwrap();
    let page = fresh.list(&ListQuery::default()).await.unwrap();
    assert_eq!(page.sessions.len(), 1);
    let index: Value = serde_json::from_slice(&fs::read(&index_path).unwrap()).unwrap();
    assert!(index["entries"].get("b.json").is_none());
}

#[tokio::test]
async fn list_filters_and_pages() {
    let tmp = tempfile::tempdir().unwrap();
    let store = store(tmp.path());
    for i in 0..7 {
        let mut r = record(
            &id(&format!("s{i}")),
            if i % 2 == 0 { "/even" } else { "/odd" },
        );
        r.last_used_at = Timestamp::from_millis(1_000 + i / 2).unwrap();
        store.create(&mut r).await.unwrap();
    }
    store.close(&id("s0"), Timestamp::now()).await.unwrap();
    let q = ListQuery {
        cwd: Some("/even/".into()),
        closed: ClosedFilter::Open,
        ..ListQuery::default()
    };
    let page = store.list(&q).await.unwrap();
    let ids: Vec<_> = page
        .sessions
        .iter()
        .map(|s| s.acpx_record_id.to_string())
        .collect();
    assert_eq!(ids, ["s6", "s4", "s2"]);
    let mut q = ListQuery {
        limit: Some(3),
        ..ListQuery::default()
    };
    let mut seen = Vec::new();
    loop {
        let page = store.list(&q).await.unwrap();
        seen.extend(page.sessions.iter().map(|s| s.acpx_record_id.to_string()));
        match page.next_cursor {
            Some(c) => q.cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(seen, ["s6", "s4", "s5", "s2", "s3", "s0", "s1"]);
}

#[tokio::test]
async fn close_is_idempotent_and_keeps_the_session() {
    let tmp = tempfile::tempdir().unwrap();
    let store = store(tmp.path());
    let a = id("a");
    let mut r = record(&a, "/repo");
    r.pid = Some(4242);
    store.create(&mut r).await.unwrap();
    let at = Timestamp::parse("2026-03-01T10:00:00Z").unwrap();
    let closed = store.close(&a, at).await.unwrap();
    assert!(closed.closed);
    assert_eq!(closed.closed_at, Some(at));
    assert_eq!(closed.pid, None);
    assert_eq!(closed.revision, 2);
    assert_eq!(store.load(&a).await.unwrap(), closed);
    let again = store
        .close(&a, Timestamp::parse("2026-03-02T10:00:00Z").unwrap())
        .await
        .unwrap();
    assert_eq!(again, closed, "closing a closed session changes nothing");
    let page = store.list(&ListQuery::default()).await.unwrap();
    assert!(page.sessions[0].closed);
    assert!(matches!(
        store.close(&id("nope"), at).await,
        Err(StoreError::NotFound(_))
    ));
}

#[tokio::test]
async fn delete_removes_every_file_and_is_idempotent() {
    let tmp = tempfile::tempdir().unwrap();
    let store = store_with(tmp.path(), 300, 3);
    let a = id("a");
    let keep = id("a.keep");
    store.create(&mut record(&a, "/repo")).await.unwrap();
    store.create(&mut record(&keep, "/repo")).await.unwrap();
    for seq in 1..=20 {
        append_locked(
            &store,
            &a,
            &[event(&a, seq, "note", 100)],
            Durability::Flush,
        )
        .await
        .unwrap();
    }
    append_locked(&store, &keep, &events(&keep, 1..=2, 10), Durability::Flush)
        .await
        .unwrap();
    // A torn tail set aside, and a stale temp file.
    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(store.active_log_path(&a))
        .unwrap();
    std::io::Write::write_all(&mut f, b"{\"eventVer").unwrap();
    assert!(store.set_aside_torn_tail(&a).unwrap().is_some());
    let dir = store.sessions_dir();
    // Of a process that is gone (no pid is that large).
    fs::write(dir.join(format!(".{a}.json.tmp.999999999.2")), b"{").unwrap();
    let files_of = |prefix: &str| -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| {
                let bare = n.trim_start_matches('.');
                bare.starts_with(&format!("{prefix}.")) && !bare.starts_with("a.keep")
            })
            .collect();
        v.sort();
        v
    };
    assert!(files_of("a").len() >= 6, "{:?}", files_of("a"));

    assert!(store.delete(&a).await.unwrap());
    assert_eq!(files_of("a"), Vec::<String>::new(), "lock file included");
    assert!(
        !store.delete(&a).await.unwrap(),
        "second delete finds nothing"
    );
    assert!(matches!(store.load(&a).await, Err(StoreError::NotFound(_))));
    assert!(matches!(
        store.read_events(&a, &Default::default()).await,
        Err(StoreError::NotFound(_))
    ));
    // A prompt still running cannot bring it back.
    assert!(matches!(
        append_locked(&store, &a, &[event(&a, 21, "note", 1)], Durability::Flush).await,
        Err(StoreError::NotFound(_))
    ));
    assert_eq!(files_of("a"), Vec::<String>::new());
    // The other session, whose id shares the prefix, is untouched.
    assert_eq!(
        store
            .read_events(&keep, &Default::default())
            .await
            .unwrap()
            .events
            .len(),
        2
    );
    let page = store.list(&ListQuery::default()).await.unwrap();
    assert_eq!(page.sessions.len(), 1);
    // A new session with the deleted id starts a fresh log.
    store.create(&mut record(&a, "/repo")).await.unwrap();
    append_locked(&store, &a, &[event(&a, 1, "note", 1)], Durability::Flush)
        .await
        .unwrap();
}

#[tokio::test]
async fn create_ignores_log_files_left_by_an_interrupted_delete() {
    let tmp = tempfile::tempdir().unwrap();
    let store = store(tmp.path());
    let a = id("a");
    store.create(&mut record(&a, "/repo")).await.unwrap();
    append_locked(&store, &a, &events(&a, 1..=5, 10), Durability::Flush)
        .await
        .unwrap();
    // What a crash right after the commit point of a delete leaves: the snapshot renamed to
    // the tombstone, the log still there.
    fs::rename(
        store.snapshot_path(&a),
        store.sessions_dir().join("a.deleted"),
    )
    .unwrap();
    assert!(matches!(store.load(&a).await, Err(StoreError::NotFound(_))));
    store.create(&mut record(&a, "/repo")).await.unwrap();
    assert!(!store.sessions_dir().join("a.deleted").exists());
    let state = append_locked(&store, &a, &[event(&a, 1, "note", 1)], Durability::Flush)
        .await
        .unwrap();
    assert_eq!(state.last_seq, 1);
    let page = store.read_events(&a, &Default::default()).await.unwrap();
    assert_eq!(seqs(&page.events), [1]);
}

/// A missing snapshot without a tombstone is damage, not a delete (docs/format.md § Damaged
/// snapshots): the session is reported by `list` and `load`, its id stays taken, and
/// `replace_snapshot` brings it back with its log untouched.
#[tokio::test]
async fn missing_snapshot_with_a_log_is_damaged_not_deleted() {
    let tmp = tempfile::tempdir().unwrap();
    let store = store(tmp.path());
    let a = id("a");
    let mut rec = record(&a, "/repo");
    store.create(&mut rec).await.unwrap();
    store.create(&mut record(&id("b"), "/repo")).await.unwrap();
    append_locked(&store, &a, &events(&a, 1..=5, 10), Durability::Flush)
        .await
        .unwrap();
    fs::remove_file(store.snapshot_path(&a)).unwrap();
    for s in [store.clone(), FsStore::open(tmp.path()).unwrap()] {
        match s.load(&a).await {
            Err(StoreError::Corrupt {
                location, reason, ..
            }) => {
                assert!(location.ends_with("a.json"), "{location}");
                assert!(
                    reason.contains("missing") && reason.contains("fsck --repair"),
                    "{reason}"
                );
            }
            other => panic!("{other:?}"),
        }
        let page = s.list(&ListQuery::default()).await.unwrap();
        assert_eq!(page.sessions.len(), 1);
        assert_eq!(page.skipped.len(), 1, "{:?}", page.skipped);
        assert_eq!(page.skipped[0].acpx_record_id.as_ref(), Some(&a));
        assert!(page.skipped[0].reason.contains("missing"));
        assert!(matches!(
            s.create(&mut record(&a, "/repo")).await,
            Err(StoreError::AlreadyExists(_))
        ));
    }
    // Nothing was removed by the reads and the refused create.
    let page = store.read_events(&a, &Default::default()).await.unwrap();
    assert_eq!(seqs(&page.events), [1, 2, 3, 4, 5]);
    let writer = store.lock(&a, Duration::from_secs(5)).await.unwrap();
    store.replace_snapshot(&writer, &mut rec).await.unwrap();
    drop(writer);
    assert_eq!(store.load(&a).await.unwrap().acpx_record_id, a);
    let page = store.list(&ListQuery::default()).await.unwrap();
    assert_eq!((page.sessions.len(), page.skipped.len()), (2, 0));
    // Deleting a damaged session removes its log too.
    fs::remove_file(store.snapshot_path(&a)).unwrap();
    assert!(store.delete(&a).await.unwrap());
    assert!(matches!(store.load(&a).await, Err(StoreError::NotFound(_))));
    let page = store.list(&ListQuery::default()).await.unwrap();
    assert_eq!((page.sessions.len(), page.skipped.len()), (1, 0));
}

#[tokio::test]
async fn stale_temp_cleanup_spares_temps_of_locked_sessions() {
    let tmp = tempfile::tempdir().unwrap();
    let store = store(tmp.path());
    let (a, b) = (id("a"), id("b"));
    store.create(&mut record(&a, "/repo")).await.unwrap();
    store.create(&mut record(&b, "/repo")).await.unwrap();
    // Another store instance (like another process) holds a's lock: a save of a may be
    // between its temp write and its rename.
    let other = FsStore::open(tmp.path()).unwrap();
    let guard = other.lock(&a, Duration::from_secs(1)).await.unwrap();
    let dir = store.sessions_dir();
    let temp_a = dir.join(format!(".{a}.json.tmp.999999999.live"));
    let temp_b = dir.join(format!(".{b}.json.tmp.999999999.dead"));
    let temp_gone = dir.join(".gone.json.tmp.999999999.x");
    let index_temp = dir.join(".index.json.tmp.77.dead");
    for t in [&temp_a, &temp_b, &temp_gone, &index_temp] {
        fs::write(t, b"partial").unwrap();
    }
    assert_eq!(store.cleanup_stale_temp_files().unwrap(), 3);
    assert!(temp_a.exists(), "the temp file of a locked session is kept");
    assert!(!temp_b.exists() && !temp_gone.exists() && !index_temp.exists());
    assert!(
        !store.lock_path(&id("gone")).exists(),
        "cleanup leaves no lock file for a session that does not exist"
    );
    // Opening a store while the lock is held keeps it too.
    drop(FsStore::open(tmp.path()).unwrap());
    assert!(temp_a.exists());
    drop(guard);
    assert_eq!(store.cleanup_stale_temp_files().unwrap(), 1);
    assert!(!temp_a.exists());
    assert_eq!(store.load(&a).await.unwrap().revision, 1);
    // A save streams its temp file before it takes the lock: a temp file of a live process
    // is spared even when the session's lock is free, by cleanup and by delete.
    let in_flight = dir.join(format!(".{b}.json.tmp.{}.flight", std::process::id()));
    fs::write(&in_flight, b"partial").unwrap();
    assert_eq!(store.cleanup_stale_temp_files().unwrap(), 0);
    assert!(in_flight.exists());
    assert!(store.delete(&b).await.unwrap());
    assert!(
        in_flight.exists(),
        "delete leaves a live writer's temp file to it"
    );
}

fn user(text: &str) -> Message {
    Message::User(UserMessage {
        id: format!("u-{text}"),
        content: vec![UserContent::Text(text.into())],
        extra: Default::default(),
    })
}

#[tokio::test]
async fn search_scans_sessions_in_list_order_with_cwd_filter() {
    let tmp = tempfile::tempdir().unwrap();
    let store = store(tmp.path());
    for (i, (name, cwd, text)) in [
        ("old", "/repo", "fix the flaky build"),
        ("new", "/repo", "the build is flaky again"),
        ("other", "/other", "flaky build elsewhere"),
        ("none", "/repo", "nothing to see"),
    ]
    .into_iter()
    .enumerate()
    {
        let mut r = record(&id(name), cwd);
        r.last_used_at = Timestamp::from_millis(1_000 + i as i64).unwrap();
        r.thread.messages.push(user(text));
        store.create(&mut r).await.unwrap();
    }
    let hits = store
        .search(&SearchQuery {
            text: "FLAKY build".into(),
            cwd: Some("/repo".into()),
            limit: None,
        })
        .await
        .unwrap();
    let ids: Vec<_> = hits.iter().map(|h| h.acpx_record_id.to_string()).collect();
    assert_eq!(ids, ["new", "old"]);
    assert_eq!(hits[0].role, "user");
    let all = store
        .search(&SearchQuery {
            text: "flaky".into(),
            cwd: None,
            limit: Some(2),
        })
        .await
        .unwrap();
    assert_eq!(all.len(), 2);
    assert!(matches!(
        store
            .search(&SearchQuery {
                text: "x".into(),
                cwd: Some("relative".into()),
                limit: None
            })
            .await,
        Err(StoreError::InvalidArgument(_))
    ));
}

#[tokio::test]
async fn store_is_usable_as_a_trait_object_and_cheap_to_clone() {
    let tmp = tempfile::tempdir().unwrap();
    let store = store(tmp.path());
    let dyn_store: std::sync::Arc<dyn Store> = std::sync::Arc::new(store.clone());
    assert_eq!(dyn_store.backend_name(), "fs");
    let a = id("a");
    dyn_store.create(&mut record(&a, "/r")).await.unwrap();
    assert_eq!(store.load(&a).await.unwrap().revision, 1);
    assert!(format!("{store:?}").contains("FsStore"));
}

#[tokio::test]
async fn symlinks_planted_in_the_store_are_never_followed() {
    let tmp = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let store = store(tmp.path());
    let a = id("a");
    let mut r = record(&a, "/r");
    store.create(&mut r).await.unwrap();
    append_locked(&store, &a, &events(&a, 1..=1, 1), Durability::Flush)
        .await
        .unwrap();
    let plant = |inside: &std::path::Path, name: &str| {
        let target = outside.path().join(name);
        fs::write(&target, b"outside\n").unwrap();
        // The lock file is not there when no lock is held: nothing to remove then.
        let _ = fs::remove_file(inside);
        std::os::unix::fs::symlink(&target, inside).unwrap();
        target
    };
    let log_target = plant(&store.active_log_path(&a), "log");
    let fresh = FsStore::open(tmp.path()).unwrap();
    let e = append_locked(&fresh, &a, &events(&a, 2..=2, 1), Durability::Flush)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("symbolic link"), "{e}");
    assert!(matches!(
        fresh.read_events(&a, &Default::default()).await,
        Err(StoreError::Corrupt { .. })
    ));
    assert_eq!(fs::read(&log_target).unwrap(), b"outside\n");

    let doc_target = plant(&store.snapshot_path(&a), "doc");
    match fresh.load(&a).await {
        Err(StoreError::Corrupt { reason, .. }) => assert!(reason.contains("symbolic link")),
        other => panic!("expected Corrupt, got {other:?}"),
    }
    let page = fresh.list(&ListQuery::default()).await.unwrap();
    assert!(page.sessions.is_empty());
    assert_eq!(page.skipped.len(), 1);
    // A save replaces the link itself (rename), never writes through it.
    let _ = fresh.save(&mut r).await;
    assert_eq!(fs::read(&doc_target).unwrap(), b"outside\n");

    let lock_target = plant(&store.lock_path(&a), "lock");
    assert!(fresh.lock(&a, Duration::from_millis(50)).await.is_err());
    assert_eq!(fs::read(&lock_target).unwrap(), b"outside\n");
    assert!(outside.path().join("log").exists() && outside.path().join("doc").exists());
}
