//! Full-text search over conversation text.

use super::*;

/// User and agent text (and thinking) are found; all terms are required, case-insensitively;
/// the cwd filter applies; hits name session, message index and role, with a snippet.
pub async fn search_finds_conversation_text(b: &dyn Backend) {
    let store = b.open().await;
    let mut s1 = session("search-one", 2_000);
    s1.cwd = "/srch/one".into();
    s1.thread.title = "Flaky".into();
    s1.thread.messages = vec![
        user_text("u-1", "Please fix the flaky Build in CI"),
        agent_text(
            "The build is failing because of a linker problem",
            Some("maybe a Timeout"),
        ),
        user_text("u-2", "unrelated words here"),
    ];
    create(&*store, s1).await;
    let mut s2 = session("search-two", 1_000);
    s2.cwd = "/srch/two".into();
    s2.thread.messages = vec![agent_text("Another BUILD note", None)];
    create(&*store, s2).await;
    create(&*store, rich_session("search-other", 3)).await;

    let search = |text: &str, cwd: Option<&str>| SearchQuery {
        text: text.into(),
        cwd: cwd.map(Into::into),
        limit: None,
    };
    let key = |h: &acpx_model::SearchHit| (h.acpx_record_id.to_string(), h.message_index);

    let hits = store
        .search(&search("build", Some("/srch/one")))
        .await
        .unwrap();
    let got: Vec<_> = hits.iter().map(key).collect();
    assert_eq!(
        got,
        vec![("search-one".into(), 0), ("search-one".into(), 1)]
    );
    assert_eq!(hits[0].role, "user");
    assert_eq!(hits[0].message_id.as_deref(), Some("u-1"));
    assert_eq!(hits[1].role, "agent");
    assert_eq!(hits[0].title.as_deref(), Some("Flaky"));
    for h in &hits {
        assert!(h.snippet.to_lowercase().contains("build"), "{h:?}");
    }

    let hits = store.search(&search("BUILD timeout", None)).await.unwrap();
    assert_eq!(
        hits.iter().map(key).collect::<Vec<_>>(),
        vec![("search-one".into(), 1)]
    );

    let hits = store.search(&search("flaky linker", None)).await.unwrap();
    assert!(
        hits.is_empty(),
        "terms in different messages do not match: {hits:?}"
    );

    let hits = store
        .search(&search("note", Some("/srch/two/")))
        .await
        .unwrap();
    assert_eq!(
        hits.iter().map(key).collect::<Vec<_>>(),
        vec![("search-two".into(), 0)]
    );

    let hits = store.search(&search("build", None)).await.unwrap();
    let mut order: Vec<String> = hits.iter().map(|h| h.acpx_record_id.to_string()).collect();
    order.dedup();
    assert_eq!(
        order,
        ids(&["search-other", "search-one", "search-two"]),
        "hits follow list order, newest session first"
    );
    for w in hits.windows(2) {
        if w[0].acpx_record_id == w[1].acpx_record_id {
            assert!(w[0].message_index < w[1].message_index, "{hits:?}");
        }
    }

    let limited = store
        .search(&SearchQuery {
            limit: Some(1),
            ..search("build", None)
        })
        .await
        .unwrap();
    assert_eq!(limited.len(), 1);
    assert!(store
        .search(&search("xylophone", None))
        .await
        .unwrap()
        .is_empty());
    let err = store
        .search(&search("build", Some("srch")))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::InvalidArgument(_)), "{err:?}");
}

/// Search answers for what is stored now, whoever wrote it: saves (new text, a new title, a
/// name, a close) and deletes through another handle, a session recreated under a deleted id,
/// and a message larger than any cache entry. A new handle gives the same hits.
pub async fn search_follows_saves_deletes_and_other_handles(b: &dyn Backend) {
    let store = b.open().await;
    let other = b.open().await;
    let q = |text: &str| SearchQuery {
        text: text.into(),
        cwd: None,
        limit: None,
    };
    let found = |hits: Vec<acpx_model::SearchHit>| -> Vec<(String, usize, Option<String>)> {
        hits.into_iter()
            .map(|h| (h.acpx_record_id.to_string(), h.message_index, h.title))
            .collect()
    };
    let mut alpha = session("srch-alpha", 1_000);
    alpha.thread.messages = vec![user_text("u-a", "alpha build log")];
    let mut alpha = create(&*store, alpha).await;
    let mut beta = session("srch-beta", 2_000);
    beta.thread.messages = vec![user_text("u-b", "beta notes")];
    let mut beta = create(&*store, beta).await;
    assert_eq!(
        found(store.search(&q("build")).await.unwrap()),
        vec![("srch-alpha".into(), 0, None)]
    );

    // Saved through another handle: new text, a title, a name.
    beta.thread
        .messages
        .push(agent_text("the build is green", None));
    beta.thread.title = "Green".into();
    beta.name = Some("renamed".into());
    other.save(&mut beta).await.unwrap();
    assert_eq!(
        found(store.search(&q("build")).await.unwrap()),
        vec![
            ("srch-beta".into(), 1, Some("Green".into())),
            ("srch-alpha".into(), 0, None)
        ]
    );
    // Text removed by a save is no longer found.
    alpha.thread.messages = vec![user_text("u-a", "alpha only")];
    other.save(&mut alpha).await.unwrap();
    assert_eq!(
        found(store.search(&q("build")).await.unwrap()),
        vec![("srch-beta".into(), 1, Some("Green".into()))]
    );
    // Closed sessions are searched; deleted ones are not, and their id's next session is
    // searched for what it holds.
    other.close(&beta.acpx_record_id, ts(3_000)).await.unwrap();
    assert_eq!(store.search(&q("green")).await.unwrap().len(), 1);
    assert!(other.delete(&alpha.acpx_record_id).await.unwrap());
    assert!(store.search(&q("alpha")).await.unwrap().is_empty());
    let mut again = session("srch-alpha", 4_000);
    again.thread.messages = vec![agent_text("a second alpha", None)];
    create(&*other, again).await;
    assert_eq!(
        found(store.search(&q("alpha")).await.unwrap()),
        vec![("srch-alpha".into(), 0, None)]
    );

    // A message far larger than a save's cache entry.
    let mut huge = session("srch-huge", 500);
    let reply = "filler ".repeat(100_000) + "needle at the end";
    huge.thread.messages = vec![agent_text(&reply, None)];
    let mut huge = create(&*store, huge).await;
    store.save(&mut huge).await.unwrap();
    let hits = store.search(&q("NEEDLE")).await.unwrap();
    assert_eq!(found(hits.clone()), vec![("srch-huge".into(), 0, None)]);
    assert!(hits[0].snippet.contains("needle"), "{:?}", hits[0].snippet);
    assert_eq!(
        Some(hits[0].snippet.clone()),
        acpx_model::match_text(&reply, &q("NEEDLE").terms()),
        "the snippet is the shared rule's"
    );
    // A match in the middle of a long message, multi-byte characters on both sides: the
    // snippet is exactly the shared rule's (a backend may read only a window of the message).
    let mut mid = session("srch-mid", 400);
    let text = "é…ü ".repeat(30_000) + "the Middle Marker here " + &"ß漢 ".repeat(30_000);
    mid.thread.messages = vec![agent_text(&text, None)];
    create(&*store, mid).await;
    let hits = store.search(&q("middle marker")).await.unwrap();
    assert_eq!(found(hits.clone()), vec![("srch-mid".into(), 0, None)]);
    assert_eq!(
        Some(hits[0].snippet.clone()),
        acpx_model::match_text(&text, &q("middle marker").terms())
    );

    let fresh = b.open().await;
    for text in ["alpha", "needle", "green", "build"] {
        assert_eq!(
            fresh.search(&q(text)).await.unwrap(),
            store.search(&q(text)).await.unwrap(),
            "{text}"
        );
    }
}

/// A record whose first messages are settled in spill stores (a queue owner's earlier turns,
/// `acpx_model::SettledMessages`) saves as the whole conversation: it loads back with every
/// message in `thread.messages`, byte for byte what the same record unsettled writes, and
/// search finds a settled message's text at its index in the whole conversation.
pub async fn settled_messages_save_and_search_whole(b: &dyn Backend) {
    let store = b.open().await;
    let whole = rich_session("settled-whole", 12);
    let mut rec = whole.clone();
    let acpx_model::Message::User(first) = &mut rec.thread.messages[0] else {
        panic!("a rich session starts with a user message")
    };
    first.content = vec![acpx_model::UserContent::Text(
        "an obscure quokka question".into(),
    )];
    let first_id = first.id.clone();
    let mut whole = rec.clone();
    rec = create(&*store, rec).await;
    let spills: acpx_model::SettledStores = [
        Arc::new(VecSpill::default()),
        Arc::new(VecSpill::default()),
        Arc::new(VecSpill::default()),
    ];
    // Settled in two steps, with a save after each, as turns end.
    for settle in [4, 5] {
        rec.thread
            .settle(settle, || Ok(spills.clone()))
            .expect("settle");
        store
            .save(&mut rec)
            .await
            .expect("save with settled messages");
        whole.revision = rec.revision;
        let loaded = store.load(&rec.acpx_record_id).await.expect("load");
        assert!(
            loaded.thread.settled.is_empty(),
            "a record read back has none settled"
        );
        assert_eq!(loaded.thread.messages, whole.thread.messages);
        assert_eq!(
            String::from_utf8(loaded.to_json_vec().unwrap()).unwrap(),
            String::from_utf8(whole.to_json_vec().unwrap()).unwrap(),
        );
        let hits = store
            .search(&SearchQuery {
                text: "quokka".into(),
                cwd: None,
                limit: None,
            })
            .await
            .expect("search");
        let got: Vec<_> = hits
            .iter()
            .map(|h| {
                (
                    h.acpx_record_id.to_string(),
                    h.message_index,
                    h.role.clone(),
                )
            })
            .collect();
        assert_eq!(got, [("settled-whole".to_owned(), 0, "user".to_owned())]);
        assert_eq!(hits[0].message_id.as_deref(), Some(first_id.as_str()));
    }
    assert_eq!(rec.thread.settled.len(), 9);
    assert!(
        rec.thread.settled.usage_len() > 0,
        "the settled turns' token usage settled with them"
    );
    assert_eq!(
        rec.thread.request_usage_total(),
        whole.thread.request_usage_total()
    );
    assert_eq!(rec.thread.message_count(), 12);
}

/// `load_settling` reads the record `load` reads, its finished turns settled: a document of a
/// few kilobytes and one past 64 KiB (SQLite keeps those padded, read as a blob).
pub async fn a_settling_load_reads_the_same_record(b: &dyn Backend) {
    let store = b.open().await;
    let settle = || {
        Arc::new(acpx_model::SettleOnLoad::new(|| {
            Ok([
                Arc::new(VecSpill::default()) as _,
                Arc::new(VecSpill::default()) as _,
                Arc::new(VecSpill::default()) as _,
            ])
        }))
    };
    for (id, long) in [("settling-short", 0), ("settling-long", 100_000)] {
        let mut rec = rich_session(id, 23);
        if let acpx_model::Message::User(u) = &mut rec.thread.messages[5] {
            u.content
                .push(acpx_model::UserContent::Text("z\n".repeat(long / 2)));
        }
        let rec = create(&*store, rec).await;
        let whole = store.load(&rec.acpx_record_id).await.expect("load");
        let s = settle();
        let loaded = store
            .load_settling(&rec.acpx_record_id, s.clone())
            .await
            .expect("load_settling");
        assert_eq!(s.failure(), None);
        // 23 messages, user messages at 0, 2, 5, 7, …, 20, 22: the last two turns stay.
        assert_eq!(loaded.thread.settled.len(), 20, "{id}");
        assert_eq!(loaded.thread.messages, whole.thread.messages[20..], "{id}");
        assert_eq!(loaded.revision, whole.revision);
        assert_eq!(
            loaded.to_json_vec().unwrap(),
            whole.to_json_vec().unwrap(),
            "{id}: the same document"
        );
        let mut back = loaded.clone();
        back.thread.unsettle().expect("unsettle");
        assert_eq!(back, whole, "{id}");
    }
    let missing = RecordId::parse("settling-missing").unwrap();
    assert!(matches!(
        store.load_settling(&missing, settle()).await,
        Err(StoreError::NotFound(_))
    ));
}

/// A spill store in memory, as a queue owner's temp files hold settled messages (the model's
/// own `testing::MemorySpill` is behind a feature this crate's library does not enable).
#[derive(Debug, Default)]
struct VecSpill(std::sync::Mutex<Vec<u8>>);

impl acpx_model::TextSpill for VecSpill {
    fn len(&self) -> u64 {
        self.0.lock().map_or(0, |b| b.len() as u64)
    }

    fn append_at(&self, expected: u64, text: &str) -> std::io::Result<bool> {
        let mut b = self
            .0
            .lock()
            .map_err(|_| std::io::Error::other("poisoned"))?;
        if b.len() as u64 != expected {
            return Ok(false);
        }
        b.extend_from_slice(text.as_bytes());
        Ok(true)
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<usize> {
        let b = self
            .0
            .lock()
            .map_err(|_| std::io::Error::other("poisoned"))?;
        let from = usize::try_from(offset).unwrap_or(usize::MAX).min(b.len());
        let n = buf.len().min(b.len() - from);
        buf[..n].copy_from_slice(&b[from..from + n]);
        Ok(n)
    }
}
