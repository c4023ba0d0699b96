//! Concurrent writers: processes and tasks appending and saving at once.

use super::*;

fn check_tagged(page: &EventPage, tags: &[(&str, u64)]) {
    let total: u64 = tags.iter().map(|(_, n)| n).sum();
    assert_contiguous(&page.events, 1, total, "concurrent appends");
    let mut next: BTreeMap<String, u64> = BTreeMap::new();
    for e in &page.events {
        let tag = e.payload["worker"]
            .as_str()
            .expect("tagged event")
            .to_owned();
        let n = e.payload["n"].as_u64().unwrap();
        let want = next.entry(tag.clone()).or_default();
        assert_eq!(
            n, *want,
            "writer {tag}: event n={n} out of order or duplicated (seq {})",
            e.seq
        );
        *want += 1;
    }
    for (tag, n) in tags {
        assert_eq!(
            next.get(*tag).copied().unwrap_or(0),
            *n,
            "writer {tag}: events lost"
        );
    }
}

async fn two_processes_append(b: &dyn Backend, check: &str, mode: &str) {
    let store = b.open().await;
    let id = create(&*store, session("shared-log", 0))
        .await
        .acpx_record_id;
    let op = |tag: &'static str| {
        [
            "append",
            "--id",
            "shared-log",
            "--count",
            "300",
            "--batch",
            "3",
            "--mode",
            mode,
            "--tag",
            tag,
        ]
    };
    let Some(mut w1) = Worker::spawn(b, &op("w1"), &[]) else {
        undeclared(b, check, "a worker");
    };
    let mut w2 = Worker::spawn(b, &op("w2"), &[]).unwrap();
    let (l1, l2) = tokio::join!(w1.finish(), w2.finish());
    assert_eq!(l1.iter().filter(|l| l.starts_with("ack")).count(), 100);
    assert_eq!(l2.iter().filter(|l| l.starts_with("ack")).count(), 100);
    for s in [store.clone(), b.open().await] {
        let page = read_all(&*s, &id).await;
        check_tagged(&page, &[("w1", 300), ("w2", 300)]);
        assert_eq!(s.event_log_state(&id).await.unwrap().last_seq, 600);
    }
}

/// Two processes append to one session, each holding the writer lock around "read last
/// seq, append": all events present once, seqs unique and gap-free, in order.
pub async fn two_processes_append_one_session_locked(b: &dyn Backend) {
    two_processes_append(b, "two_processes_append_one_session_locked", "lock").await;
}

/// Two processes append to one session optimistically, retrying on `SeqMismatch`.
pub async fn two_processes_append_one_session_retry(b: &dyn Backend) {
    two_processes_append(b, "two_processes_append_one_session_retry", "retry").await;
}

/// Eight writers save the same loaded revision at once, through separate handles: exactly
/// one wins, every other gets `Conflict` naming the winner's revision.
pub async fn concurrent_saves_exactly_one_wins(b: &dyn Backend) {
    let store = b.open().await;
    let base = create(&*store, rich_session("race", 10)).await;
    let mut tasks = Vec::new();
    for i in 0..8 {
        let s = b.open().await;
        let mut r = base.clone();
        r.thread.title = format!("writer {i}");
        tasks.push(tokio::spawn(
            async move { s.save(&mut r).await.map(|()| r) },
        ));
    }
    let mut winners = Vec::new();
    for t in tasks {
        match t.await.unwrap() {
            Ok(r) => winners.push(r),
            Err(StoreError::Conflict {
                expected: 1,
                actual: 2,
                ..
            }) => {}
            Err(e) => panic!("unexpected save error: {e:?}"),
        }
    }
    assert_eq!(
        winners.len(),
        1,
        "exactly one save of revision 1 may succeed"
    );
    let stored = b.open().await.load(&base.acpx_record_id).await.unwrap();
    assert_eq!(stored, winners[0]);
}

/// Two processes run load-modify-save loops on one session: no update is lost (the final
/// revision counts every acknowledged save of both).
pub async fn two_processes_save_one_session(b: &dyn Backend) {
    let store = b.open().await;
    let id = create(&*store, rich_session("shared-doc", 30))
        .await
        .acpx_record_id;
    let op = |tag: &'static str| {
        [
            "save-loop",
            "--id",
            "shared-doc",
            "--count",
            "40",
            "--tag",
            tag,
        ]
    };
    let Some(mut w1) = Worker::spawn(b, &op("s1"), &[]) else {
        undeclared(b, "two_processes_save_one_session", "a worker");
    };
    let mut w2 = Worker::spawn(b, &op("s2"), &[]).unwrap();
    let (l1, l2) = tokio::join!(w1.finish(), w2.finish());
    let revs: BTreeSet<u64> = l1
        .iter()
        .chain(&l2)
        .filter(|l| l.starts_with("ack "))
        .filter_map(|l| crate::worker::field(l, "revision"))
        .collect();
    assert_eq!(
        revs,
        (2..=81).collect(),
        "each revision acknowledged exactly once"
    );
    let r = b.open().await.load(&id).await.unwrap();
    assert_eq!(r.revision, 81);
    assert_eq!(r.extra["workerCounter"], json!(81));
}

/// Six processes write six different sessions at once (appends, save loops, creates):
/// nothing is lost and nothing lands in another session.
pub async fn processes_write_different_sessions(b: &dyn Backend) {
    const CHECK: &str = "processes_write_different_sessions";
    if b.worker_args().is_none() {
        undeclared(b, CHECK, "a worker");
    }
    let store = b.open().await;
    for id in ["log-a", "log-b"] {
        create(&*store, session(id, 0)).await;
    }
    for id in ["doc-a", "doc-b"] {
        create(&*store, rich_session(id, 40)).await;
    }
    let ops: Vec<Vec<&str>> = vec![
        vec![
            "append", "--id", "log-a", "--count", "300", "--batch", "2", "--tag", "a",
        ],
        vec![
            "append", "--id", "log-b", "--count", "300", "--batch", "2", "--tag", "b",
        ],
        vec!["save-loop", "--id", "doc-a", "--count", "40", "--tag", "a"],
        vec!["save-loop", "--id", "doc-b", "--count", "40", "--tag", "b"],
        vec!["create-many", "--prefix", "pa", "--count", "30"],
        vec!["create-many", "--prefix", "pb", "--count", "30"],
    ];
    let mut workers: Vec<Worker> = ops
        .iter()
        .map(|op| Worker::spawn(b, op, &[]).unwrap())
        .collect();
    let mut outputs = Vec::new();
    for w in &mut workers {
        outputs.push(w.finish().await);
    }
    let store = b.open().await;
    for (id, tag) in [("log-a", "a"), ("log-b", "b")] {
        let page = read_all(&*store, &rid(id)).await;
        check_tagged(&page, &[(tag, 300)]);
        assert!(page.events.iter().all(|e| e.acpx_record_id.as_str() == id));
    }
    for (id, tag) in [("doc-a", "a"), ("doc-b", "b")] {
        let r = store.load(&rid(id)).await.unwrap();
        assert_eq!(r.revision, 41, "{id}");
        assert_eq!(r.extra["workerTag"], json!(tag), "{id}");
        assert_eq!(r.extra["workerCounter"], json!(41));
        assert_eq!(r.thread, rich_session(id, 40).thread);
    }
    let listed: HashSet<String> = list_ids(&*store, ListQuery::default())
        .await
        .into_iter()
        .collect();
    assert_eq!(listed.len(), 4 + 60);
    for prefix in ["pa", "pb"] {
        for i in 0..30 {
            let id = format!("{prefix}-{i}");
            assert!(listed.contains(&id), "{id} lost");
            let r = store.load(&rid(&id)).await.unwrap();
            assert_eq!(r.name.as_deref(), Some(prefix));
        }
    }
    assert_eq!(
        outputs[4].iter().filter(|l| l.starts_with("ack")).count(),
        30
    );
}

/// Many tasks in one process append through one store handle, some with the lock, some
/// optimistically: every event once, gap-free, in order.
pub async fn tasks_append_concurrently_in_process(b: &dyn Backend) {
    let store = b.open().await;
    for id in ["tasks-retry", "tasks-lock"] {
        create(&*store, session(id, 0)).await;
    }
    let mut handles = Vec::new();
    for (id, mode, n) in [
        ("tasks-retry", AppendMode::Retry, 8),
        ("tasks-lock", AppendMode::Lock, 4),
    ] {
        for t in 0..n {
            let s = store.clone();
            handles.push(tokio::spawn(async move {
                let tag = format!("t{t}");
                let plan = AppendPlan {
                    tag: &tag,
                    count: 40,
                    batch: 1 + t % 3,
                    mode,
                    durability: Durability::Flush,
                };
                append_tagged(&*s, &rid(id), &plan, |_| {}).await
            }));
        }
    }
    for h in handles {
        h.await.unwrap().expect("append task");
    }
    for s in [store.clone(), b.open().await] {
        let tags: Vec<String> = (0..8).map(|t| format!("t{t}")).collect();
        let retry: Vec<(&str, u64)> = tags.iter().map(|t| (t.as_str(), 40)).collect();
        check_tagged(&read_all(&*s, &rid("tasks-retry")).await, &retry);
        check_tagged(&read_all(&*s, &rid("tasks-lock")).await, &retry[..4]);
    }
    // Concurrent save loops in one process: every save lands exactly once.
    let id = create(&*store, session("tasks-save", 0))
        .await
        .acpx_record_id;
    let mut saves = Vec::new();
    for t in 0..4 {
        let s = store.clone();
        let id = id.clone();
        saves.push(tokio::spawn(async move {
            save_loop(&*s, &id, &format!("s{t}"), 10, |_| {}).await
        }));
    }
    for h in saves {
        h.await.unwrap().expect("save task");
    }
    assert_eq!(store.load(&id).await.unwrap().revision, 41);
}
