//! Listing sessions: filters, order, cursor walks, invalid cursors, pagination while
//! sessions are being added.

use super::*;

/// cwd (with and without trailing slash), agent command, name and open/closed filters;
/// relative cwd refused; summaries carry the listing fields.
pub async fn list_filters(b: &dyn Backend) {
    let store = b.open().await;
    let mk = |id: &str, cwd: &str, agent: &str, name: Option<&str>, t: i64| {
        let mut r = session(id, t);
        r.cwd = cwd.into();
        r.agent_command = agent.into();
        r.name = name.map(Into::into);
        r
    };
    let mut a1 = mk("a1", "/repo/a", "agent-x", Some("alpha"), 5);
    a1.thread.title = "Title A1".into();
    a1.thread.messages = (0..7).map(crate::fixtures::message).collect();
    create(&*store, a1).await;
    create(&*store, mk("a2", "/repo/a/", "agent-y", None, 4)).await;
    create(&*store, mk("b1", "/repo/b", "agent-x", Some("alpha"), 3)).await;
    create(
        &*store,
        mk("b2", "/repo/b", "agent-x --flag", Some("beta"), 2),
    )
    .await;
    create(&*store, mk("root", "/", "agent-x", None, 1)).await;
    create(&*store, mk("deep", "/repo/a/sub", "agent-x", None, 0)).await;
    store.close(&rid("a2"), ts(10)).await.unwrap();
    store.close(&rid("b1"), ts(10)).await.unwrap();

    let q = |f: &dyn Fn(&mut ListQuery)| {
        let mut q = ListQuery::default();
        f(&mut q);
        q
    };
    let cases: Vec<(ListQuery, Vec<&str>)> = vec![
        (q(&|_| {}), vec!["a1", "a2", "b1", "b2", "root", "deep"]),
        (q(&|q| q.cwd = Some("/repo/a".into())), vec!["a1", "a2"]),
        (q(&|q| q.cwd = Some("/repo/a/".into())), vec!["a1", "a2"]),
        (q(&|q| q.cwd = Some("/repo/a//".into())), vec!["a1", "a2"]),
        (q(&|q| q.cwd = Some("/repo".into())), vec![]),
        (q(&|q| q.cwd = Some("/".into())), vec!["root"]),
        (
            q(&|q| q.agent_command = Some("agent-x".into())),
            vec!["a1", "b1", "root", "deep"],
        ),
        (q(&|q| q.name = Some("alpha".into())), vec!["a1", "b1"]),
        (q(&|q| q.name = Some("alp".into())), vec![]),
        (
            q(&|q| q.closed = ClosedFilter::Open),
            vec!["a1", "b2", "root", "deep"],
        ),
        (q(&|q| q.closed = ClosedFilter::Closed), vec!["a2", "b1"]),
        (
            q(&|q| {
                q.cwd = Some("/repo/b".into());
                q.closed = ClosedFilter::Open
            }),
            vec!["b2"],
        ),
    ];
    for (query, want) in cases {
        let got = list_ids(&*store, query.clone()).await;
        assert_eq!(sorted(got), sorted(ids(&want)), "{query:?}");
    }
    for bad in ["repo/a", "", "./repo", "~/repo"] {
        let err = store
            .list(&q(&|q| q.cwd = Some(bad.into())))
            .await
            .expect_err(bad);
        assert!(
            matches!(err, StoreError::InvalidArgument(_)),
            "cwd {bad:?}: {err:?}"
        );
    }
    let page = store
        .list(&q(&|q| q.name = Some("alpha".into())))
        .await
        .unwrap();
    let find = |id: &str| {
        page.sessions
            .iter()
            .find(|s| s.acpx_record_id.as_str() == id)
            .unwrap()
    };
    let a1 = find("a1");
    assert_eq!(a1.title.as_deref(), Some("Title A1"));
    assert_eq!(a1.message_count, 7);
    assert_eq!(a1.acp_session_id, "acp-a1");
    assert_eq!(
        (a1.cwd.as_str(), a1.agent_command.as_str()),
        ("/repo/a", "agent-x")
    );
    assert_eq!(a1.revision, 1);
    assert!(!a1.closed);
    let b1 = find("b1");
    assert!(b1.closed && b1.closed_at == Some(ts(10)));
    assert!(page.skipped.is_empty());
}

/// 30 sessions sharing three `lastUsedAt` values, created in scrambled order: the list is
/// newest first and, within a timestamp, by record id.
pub async fn list_order_newest_first_with_id_tie_break(b: &dyn Backend) {
    let store = b.open().await;
    let mut want = Vec::new();
    for i in 0..30 {
        let id = format!("o-{:02}", (i * 7) % 30);
        let t = ((i * 7) % 30 % 3) as i64 * 1_000;
        want.push((std::cmp::Reverse(t), id.clone()));
        create(&*store, session(&id, t)).await;
    }
    want.sort();
    let want: Vec<String> = want.into_iter().map(|(_, id)| id).collect();
    assert_eq!(list_ids(&*store, ListQuery::default()).await, want);
    assert_eq!(list_ids(&*b.open().await, ListQuery::default()).await, want);
    // An update that moves lastUsedAt moves the session.
    let mut r = store.load(&rid("o-29")).await.unwrap();
    r.last_used_at = ts(99_000);
    store.save(&mut r).await.unwrap();
    let got = list_ids(&*store, ListQuery::default()).await;
    assert_eq!(got[0], "o-29");
    assert_eq!(got.len(), 30);
}

/// A cursor walk returns every session exactly once, in list order, with full pages and no
/// cursor on the last page, with and without filters.
pub async fn list_cursor_walk_exactly_once(b: &dyn Backend) {
    let store = b.open().await;
    for i in 0..37 {
        let mut r = session(&format!("w-{i:02}"), (i % 4) as i64 * 10);
        r.name = Some(if i % 2 == 0 { "even" } else { "odd" }.into());
        create(&*store, r).await;
    }
    let all = list_ids(&*store, ListQuery::default()).await;
    assert_eq!(all.len(), 37);
    for limit in [1usize, 4, 36, 37, 100] {
        let walked = walk_list(
            &*store,
            ListQuery {
                limit: Some(limit),
                ..ListQuery::default()
            },
        )
        .await;
        assert_eq!(walked, all, "limit {limit}");
    }
    let evens = list_ids(
        &*store,
        ListQuery {
            name: Some("even".into()),
            ..ListQuery::default()
        },
    )
    .await;
    assert_eq!(evens.len(), 19);
    let walked = walk_list(
        &*b.open().await,
        ListQuery {
            name: Some("even".into()),
            limit: Some(5),
            ..ListQuery::default()
        },
    )
    .await;
    assert_eq!(walked, evens);
}

/// Malformed, tampered and foreign cursors are `InvalidCursor`; a cursor from another
/// handle on the same data works.
pub async fn list_invalid_cursors_refused(b: &dyn Backend) {
    let store = b.open().await;
    for i in 0..6 {
        create(&*store, session(&format!("c-{i}"), i)).await;
    }
    let q = ListQuery {
        limit: Some(2),
        ..ListQuery::default()
    };
    let cursor = store
        .list(&q)
        .await
        .unwrap()
        .next_cursor
        .expect("a next page");
    let truncated = cursor[..cursor.len() / 2].to_string();
    let reversed: String = cursor.chars().rev().collect();
    let foreign = store
        .list(&ListQuery {
            limit: Some(1),
            closed: ClosedFilter::Open,
            ..ListQuery::default()
        })
        .await
        .unwrap()
        .next_cursor
        .expect("a next page");
    let cases = [
        ("garbage", "not a cursor!".to_string()),
        ("empty", String::new()),
        ("truncated", truncated),
        ("reversed", reversed),
        ("extended", format!("{cursor}AAAA")),
        ("json", r#"{"v":1,"t":0,"id":"c-1","f":"x"}"#.to_string()),
        ("made for another filter", foreign),
    ];
    for (what, c) in cases {
        let err = store
            .list(&ListQuery {
                cursor: Some(c),
                ..q.clone()
            })
            .await
            .expect_err(what);
        assert!(
            matches!(err, StoreError::InvalidCursor(_)),
            "{what}: {err:?}"
        );
    }
    let next = b
        .open()
        .await
        .list(&ListQuery {
            cursor: Some(cursor),
            ..q
        })
        .await
        .expect("a cursor is not tied to the handle");
    assert_eq!(next.sessions.len(), 2);
}

/// An empty store lists an empty page without a cursor.
pub async fn list_empty_store(b: &dyn Backend) {
    let store = b.open().await;
    for q in [
        ListQuery::default(),
        ListQuery {
            limit: Some(5),
            cwd: Some("/x".into()),
            ..ListQuery::default()
        },
    ] {
        let page = store.list(&q).await.unwrap();
        assert!(page.sessions.is_empty() && page.next_cursor.is_none() && page.skipped.is_empty());
    }
}

/// A cursor walk while sessions are being created (between pages, at the cursor's own
/// timestamp, and by a concurrent task through another handle): every session that existed
/// unchanged for the whole walk appears exactly once, new ones at most once.
pub async fn list_pagination_while_adding(b: &dyn Backend) {
    let store = b.open().await;
    let mut before = BTreeSet::new();
    for i in 0..45 {
        let id = format!("p-{i:02}");
        create(&*store, session(&id, 100_000 + (i / 3) as i64 * 1_000)).await;
        before.insert(id);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let bg = {
        let other = b.open().await;
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) && n < 150 {
                let t = 100_000 + ((n * 7_919) % 20_000) as i64;
                let mut r = session(&format!("bg-{n:04}"), t);
                other.create(&mut r).await.expect("background create");
                n += 1;
                tokio::task::yield_now().await;
            }
            n
        })
    };
    let mut q = ListQuery {
        limit: Some(5),
        ..ListQuery::default()
    };
    let mut seen: BTreeMap<String, u32> = BTreeMap::new();
    let mut added = 0;
    for page_no in 0.. {
        assert!(page_no < 5_000, "walk did not end");
        let page = store.list(&q).await.expect("page");
        for s in &page.sessions {
            *seen.entry(s.acpx_record_id.to_string()).or_default() += 1;
        }
        let Some(c) = page.next_cursor else { break };
        // Sessions newer than everything, older than everything, and tied with the last
        // session of this page (ids on both sides of it).
        let last = page.sessions.last().unwrap();
        let t_last = last.last_used_at.millis() - BASE_MILLIS;
        for (id, t) in [
            (format!("new-{added:03}-top"), 900_000),
            (format!("new-{added:03}-bottom"), 0),
            (format!("a-new-{added:03}"), t_last),
            (format!("z-new-{added:03}"), t_last),
        ] {
            create(&*store, session(&id, t)).await;
        }
        added += 1;
        q.cursor = Some(c);
    }
    stop.store(true, Ordering::Relaxed);
    let bg_created = bg.await.unwrap();
    for id in &before {
        assert_eq!(
            seen.get(id).copied(),
            Some(1),
            "pre-existing {id} must appear exactly once"
        );
    }
    for (id, n) in &seen {
        assert!(*n <= 1, "{id} appeared {n} times");
    }
    assert!(added > 5, "the walk had pages to interleave with");
    println!("pagination walk: {added} pages, {bg_created} concurrent creates");
}
