//! Damaged data: malformed snapshots, torn log tails, damaged log lines.

use super::*;
use crate::ops::AppendLocked;

/// Every kind of damaged snapshot, all at once: `list` returns every valid session and
/// reports each bad one in `skipped` (also across pages); `load` of each is `Corrupt` with a
/// message that names the session and the problem. No panic.
pub async fn malformed_snapshots_reported_not_fatal(b: &dyn Backend) {
    const CHECK: &str = "malformed_snapshots_reported_not_fatal";
    let base = |id: &str| {
        let mut v = serde_json::to_value(rich_session(id, 6)).unwrap();
        v["revision"] = json!(1);
        v
    };
    let edit = |id: &str, f: &dyn Fn(&mut Value)| {
        let mut v = base(id);
        f(&mut v);
        serde_json::to_vec_pretty(&v).unwrap()
    };
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "bad-json",
            br#"{"schema": "acpx.session.v1", "acpxRecordId": "#.to_vec(),
            "",
        ),
        ("bad-empty", Vec::new(), ""),
        ("bad-utf8", vec![b'{', 0xff, 0xfe, b'"', 0xc3, b'}'], ""),
        ("bad-array", b"[1, 2, 3]".to_vec(), ""),
        ("bad-null", b"null".to_vec(), ""),
        (
            "bad-missing",
            edit("bad-missing", &|v| {
                v.as_object_mut().unwrap().remove("acpSessionId");
            }),
            "acpSessionId",
        ),
        (
            "bad-type",
            edit("bad-type", &|v| v["closed"] = json!("yes")),
            "closed",
        ),
        (
            "bad-tzless",
            edit("bad-tzless", &|v| {
                v["createdAt"] = json!("2026-02-27T12:00:00")
            }),
            "createdAt",
        ),
        (
            "bad-schema",
            edit("bad-schema", &|v| v["schema"] = json!("acpx.session.v2")),
            "schema",
        ),
        (
            "bad-thread-version",
            edit("bad-thread-version", &|v| {
                v["thread"]["version"] = json!("0.2.0")
            }),
            "version",
        ),
        (
            "bad-legacy",
            edit("bad-legacy", &|v| {
                v["thread"]["messages"] = json!([{"kind": "user", "text": "hi"}])
            }),
            "legacy",
        ),
        (
            "bad-variant",
            edit("bad-variant", &|v| {
                v["thread"]["messages"] = json!([{"System": {"text": "hi"}}])
            }),
            "System",
        ),
        (
            "bad-tokens",
            edit("bad-tokens", &|v| {
                v["thread"]["cumulative_token_usage"]["input_tokens"] = json!(-5)
            }),
            "input_tokens",
        ),
        (
            "bad-speed",
            edit("bad-speed", &|v| v["thread"]["speed"] = json!("warp")),
            "speed",
        ),
        (
            "bad-mismatch",
            edit("bad-mismatch", &|v| v["acpxRecordId"] = json!("other-id")),
            "other-id",
        ),
    ];

    let store = b.open().await;
    for good in ["good-1", "good-2", "good-3"] {
        create(&*store, rich_session(good, 3)).await;
    }
    for (id, _, _) in &cases {
        create(&*store, session(id, 0)).await;
    }
    drop(store);
    for (id, bytes, _) in &cases {
        if b.inject_snapshot(&rid(id), bytes).await.is_none() {
            undeclared(b, CHECK, "raw snapshot bytes");
        }
    }

    let store = b.open().await;
    let page = store
        .list(&ListQuery::default())
        .await
        .expect("list must not fail");
    let listed: Vec<String> = page
        .sessions
        .iter()
        .map(|s| s.acpx_record_id.to_string())
        .collect();
    assert_eq!(sorted(listed), ids(&["good-1", "good-2", "good-3"]));
    assert_eq!(
        page.skipped.len(),
        cases.len(),
        "every bad snapshot is reported once: {:#?}",
        page.skipped
    );
    for (id, _, _) in &cases {
        let hits = page
            .skipped
            .iter()
            .filter(|s| s.location.contains(id) || s.reason.contains(id))
            .count();
        assert_eq!(
            hits, 1,
            "{id} must be reported exactly once: {:#?}",
            page.skipped
        );
    }
    for s in &page.skipped {
        assert!(!s.reason.is_empty());
    }
    let walked = walk_list(
        &*store,
        ListQuery {
            limit: Some(2),
            ..ListQuery::default()
        },
    )
    .await;
    assert_eq!(sorted(walked), ids(&["good-1", "good-2", "good-3"]));

    for (id, _, needle) in &cases {
        let err = store.load(&rid(id)).await.expect_err(id);
        let msg = err.to_string();
        assert!(
            matches!(err, StoreError::Corrupt { .. }),
            "{id}: expected Corrupt, got {err:?}"
        );
        assert!(
            msg.contains(id),
            "{id}: the error must name the session/file: {msg}"
        );
        assert!(
            msg.contains(needle),
            "{id}: the error must name {needle:?}: {msg}"
        );
    }
    for good in ["good-1", "good-2", "good-3"] {
        assert_eq!(store.load(&rid(good)).await.unwrap(), {
            let mut r = rich_session(good, 3);
            r.revision = 1;
            r
        });
    }
}

/// A damaged snapshot is rebuilt with `replace_snapshot` under the session's writer lock
/// (`docs/format.md` § Damaged snapshots): `list` reports the damaged one by id, the
/// replacement is what `load` returns afterwards with a revision past the damaged one, `list`
/// shows it again, the log is untouched, and ordinary saves go on from the new revision.
pub async fn damaged_snapshot_replaced_under_the_writer_lock(b: &dyn Backend) {
    const CHECK: &str = "damaged_snapshot_replaced_under_the_writer_lock";
    let id = rid("replace-me");
    let store = b.open().await;
    create(&*store, rich_session("replace-me", 2)).await;
    let writer = store.lock(&id, Duration::from_secs(5)).await.unwrap();
    store
        .append(&writer, &events(&id, 1, 3), Durability::Flush)
        .await
        .unwrap();
    drop(writer);
    drop(store);
    if b.inject_snapshot(&id, b"garbage{").await.is_none() {
        undeclared(b, CHECK, "raw snapshot bytes");
    }

    let store = b.open().await;
    let page = store.list(&ListQuery::default()).await.unwrap();
    assert!(page.sessions.is_empty(), "{:#?}", page.sessions);
    assert_eq!(page.skipped.len(), 1, "{:#?}", page.skipped);
    assert_eq!(page.skipped[0].acpx_record_id.as_ref(), Some(&id));
    assert!(matches!(
        store.load(&id).await,
        Err(StoreError::Corrupt { .. })
    ));

    let writer = store.lock(&id, Duration::from_secs(5)).await.unwrap();
    let mut rebuilt = rich_session("replace-me", 4);
    store
        .replace_snapshot(&writer, &mut rebuilt)
        .await
        .expect("replace the damaged snapshot");
    assert!(rebuilt.revision >= 1, "revision {}", rebuilt.revision);
    let loaded = store.load(&id).await.unwrap();
    assert_eq!(loaded, rebuilt);
    let page = store.list(&ListQuery::default()).await.unwrap();
    assert!(page.skipped.is_empty(), "{:#?}", page.skipped);
    assert_eq!(page.sessions.len(), 1);
    assert_eq!(seqs(&read_all(&*store, &id).await.events), vec![1, 2, 3]);

    // Another session's lock cannot replace this snapshot.
    create(&*store, session("replace-other", 0)).await;
    let other = store
        .lock(&rid("replace-other"), Duration::from_secs(5))
        .await
        .unwrap();
    let mut wrong = loaded.clone();
    assert!(matches!(
        store.replace_snapshot(&other, &mut wrong).await,
        Err(StoreError::InvalidArgument(_))
    ));
    drop(other);

    let mut next = loaded;
    next.thread.title = "after the repair".into();
    store.save(&mut next).await.unwrap();
    assert_eq!(next.revision, rebuilt.revision + 1);
    drop(writer);
}

/// A partial last line is withheld and reported; the next append starts on a fresh line and
/// continues the seq; afterwards the log reads strictly with no damage.
pub async fn torn_tail_withheld_and_next_append_is_clean(b: &dyn Backend) {
    let store = b.open().await;
    let id = create(&*store, session("torn", 0)).await.acpx_record_id;
    store
        .append_locked(&id, &events(&id, 1, 3), Durability::Flush)
        .await
        .unwrap();
    drop(store);
    let full = ndjson_line(&event(&id, 4));
    let torn = &full[..full.len() / 2];
    if b.inject_log_bytes(&id, torn).await.is_none() {
        undeclared(
            b,
            "torn_tail_withheld_and_next_append_is_clean",
            "raw log bytes",
        );
    }
    let store = b.open().await;
    let page = read_all(&*store, &id).await;
    assert_eq!(
        page.events,
        events(&id, 1, 3),
        "complete lines read, torn tail withheld"
    );
    let tail = page.torn_tail.as_ref().expect("the torn tail is reported");
    assert_eq!(tail.bytes, torn.len() as u64, "{tail:?}");
    assert_eq!(page.last_seq, 3);
    assert_eq!(store.event_log_state(&id).await.unwrap().last_seq, 3);

    store
        .append_locked(&id, &events(&id, 4, 2), Durability::Flush)
        .await
        .expect("append after a torn tail continues at seq 4");
    for s in [store.clone(), b.open().await] {
        let page = read_all(&*s, &id).await;
        assert_eq!(
            page.events,
            events(&id, 1, 5),
            "every record parses after the repair"
        );
        assert!(page.torn_tail.is_none(), "{:?}", page.torn_tail);
        assert!(page.damaged.is_empty());
    }
}

/// A damaged complete line in the middle: the strict reader fails naming the line, the
/// lenient reader skips and reports it without renumbering the others.
pub async fn mid_log_damage_strict_and_lenient(b: &dyn Backend) {
    let store = b.open().await;
    let id = create(&*store, session("damaged", 0)).await.acpx_record_id;
    store
        .append_locked(&id, &events(&id, 1, 3), Durability::Flush)
        .await
        .unwrap();
    drop(store);
    let mut raw = b"{\"this is\": not json}\n".to_vec();
    raw.extend(ndjson_line(&event(&id, 4)));
    raw.extend(ndjson_line(&event(&id, 5)));
    if b.inject_log_bytes(&id, &raw).await.is_none() {
        undeclared(b, "mid_log_damage_strict_and_lenient", "raw log bytes");
    }
    let store = b.open().await;
    let err = store
        .read_events(&id, &EventQuery::from_seq(0))
        .await
        .expect_err("strict read of a damaged log");
    match &err {
        StoreError::Corrupt { line, .. } => assert_eq!(*line, Some(4), "{err}"),
        other => panic!("expected Corrupt, got {other:?}"),
    }
    assert!(err.to_string().contains("line 4"), "{err}");
    let page = store
        .read_events(
            &id,
            &EventQuery {
                mode: ReadMode::Lenient,
                ..EventQuery::default()
            },
        )
        .await
        .expect("lenient read");
    assert_eq!(
        page.events,
        events(&id, 1, 5),
        "others kept, with their own seqs"
    );
    assert_eq!(page.damaged.len(), 1, "{:?}", page.damaged);
    assert_eq!(page.damaged[0].line, 4);
    assert!(!page.damaged[0].reason.is_empty());
    assert_eq!(page.last_seq, 5);
    assert_eq!(store.event_log_state(&id).await.unwrap().last_seq, 5);
}
