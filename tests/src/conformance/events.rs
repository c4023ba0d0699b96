//! Appending and reading the event log: seq continuity, batches, paging, filters, unknown
//! events, `event_log_state`, durability.

use super::*;
use crate::ops::AppendLocked;
use acpx_model::EventType;

/// Seqs must continue the log exactly; gaps, repeats, a wrong first seq and events of another
/// session are refused, and a refused batch writes nothing at all.
pub async fn append_seq_must_continue_exactly(b: &dyn Backend) {
    let store = b.open().await;
    let id = create(&*store, session("seq", 0)).await.acpx_record_id;
    let other = create(&*store, session("seq-other", 0))
        .await
        .acpx_record_id;

    let err = store
        .append_locked(&id, &events(&id, 2, 1), Durability::Flush)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::SeqMismatch {
                last: 0,
                got: 2,
                ..
            }
        ),
        "a log starts at seq 1: {err:?}"
    );
    let st = store
        .append_locked(&id, &events(&id, 1, 3), Durability::Flush)
        .await
        .expect("append 1..=3");
    assert_eq!(st.last_seq, 3);

    // (what, batch, the seq the error must name as refused; None: wrong session)
    let refusals: Vec<(&str, Vec<EventEnvelope>, Option<u64>)> = vec![
        ("gap", vec![event(&id, 5)], Some(5)),
        ("repeat", vec![event(&id, 3)], Some(3)),
        ("old seq", vec![event(&id, 1)], Some(1)),
        (
            "gap inside batch",
            vec![event(&id, 4), event(&id, 6)],
            Some(6),
        ),
        (
            "repeat inside batch",
            vec![event(&id, 4), event(&id, 4)],
            Some(4),
        ),
        ("other session", vec![event(&other, 4)], None),
        (
            "other session inside batch",
            vec![event(&id, 4), event(&other, 5)],
            None,
        ),
    ];
    for (what, batch, refused) in refusals {
        let err = store
            .append_locked(&id, &batch, Durability::Flush)
            .await
            .expect_err(what);
        match (&err, refused) {
            (StoreError::InvalidArgument(m), None) => {
                assert!(m.contains("seq-other"), "{what}: {m}")
            }
            (StoreError::SeqMismatch { got, .. }, Some(seq)) if *got == seq => {}
            _ => panic!("{what}: unexpected error {err:?}"),
        }
        for s in [store.clone(), b.open().await] {
            let page = read_all(&*s, &id).await;
            assert_eq!(
                seqs(&page.events),
                vec![1, 2, 3],
                "{what}: nothing may be written"
            );
            assert_eq!(s.event_log_state(&id).await.unwrap().last_seq, 3, "{what}");
        }
    }
    assert!(read_all(&*store, &other).await.events.is_empty());
    let err = store
        .append_locked(
            &rid("no-such"),
            &events(&rid("no-such"), 1, 1),
            Durability::Flush,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::NotFound(_)), "{err:?}");
    store
        .append_locked(&id, &events(&id, 4, 2), Durability::Flush)
        .await
        .expect("the log continues after refusals");
    assert_eq!(
        seqs(&read_all(&*store, &id).await.events),
        vec![1, 2, 3, 4, 5]
    );
}

/// Batches of various sizes read back equal; `from_seq` and limit/`next_seq` paging walk the
/// log without gaps or duplicates, also through a fresh handle.
pub async fn append_batches_and_page_back(b: &dyn Backend) {
    let store = b.open().await;
    let id = create(&*store, session("batches", 0)).await.acpx_record_id;
    let mut next = 1;
    for (i, size) in [1u64, 7, 64, 2, 1, 50, 75].iter().enumerate() {
        let d = [Durability::Flush, Durability::Fsync, Durability::None][i % 3];
        let st = store
            .append_locked(&id, &events(&id, next, *size), d)
            .await
            .expect("append batch");
        next += size;
        assert_eq!(st.last_seq, next - 1);
    }
    store.flush(&id).await.expect("flush");
    let all = events(&id, 1, 200);
    for s in [store.clone(), b.open().await] {
        let page = read_all(&*s, &id).await;
        assert_eq!(page.events, all, "every event reads back equal, in order");
        assert_eq!((page.last_seq, page.oldest_seq), (200, 1));
        assert!(page.torn_tail.is_none() && page.damaged.is_empty());

        let from = s
            .read_events(&id, &EventQuery::from_seq(150))
            .await
            .unwrap();
        assert_eq!(from.events, all[149..].to_vec(), "from_seq 150");
        let beyond = s
            .read_events(&id, &EventQuery::from_seq(201))
            .await
            .unwrap();
        assert!(beyond.events.is_empty() && beyond.next_seq.is_none());
        assert_eq!(beyond.last_seq, 200);

        for limit in [1usize, 17, 200, 500] {
            let walked = walk_events(&*s, &id, EventQuery::default(), limit).await;
            assert_eq!(
                seqs(&walked),
                (1..=200).collect::<Vec<_>>(),
                "limit {limit}"
            );
        }
    }
}

/// Type, stream and requestId filters (alone, combined, and paged) return exactly the
/// matching events, in seq order.
pub async fn read_filters_by_type_stream_and_request_id(b: &dyn Backend) {
    let store = b.open().await;
    let id = create(&*store, session("filters", 0)).await.acpx_record_id;
    store
        .append_locked(&id, &events(&id, 1, 120), Durability::Flush)
        .await
        .unwrap();
    let expect =
        |pred: &dyn Fn(u64) -> bool| -> Vec<u64> { (1..=120).filter(|s| pred(*s)).collect() };
    let cases: Vec<(EventQuery, Vec<u64>)> = vec![
        (
            EventQuery {
                types: vec!["session_update".into(), "control_done".into()],
                ..EventQuery::default()
            },
            expect(&|s| s % 4 == 1 || s % 4 == 3),
        ),
        (
            EventQuery {
                streams: vec![EventStream::Lifecycle, EventStream::Control],
                ..EventQuery::default()
            },
            expect(&|s| s % 4 == 0 || s % 4 == 3),
        ),
        (
            EventQuery {
                request_id: Some("req_3".into()),
                ..EventQuery::default()
            },
            expect(&|s| s / 10 == 3 && (s % 4 == 1 || s % 4 == 2)),
        ),
        (
            EventQuery {
                request_id: Some("req_3".into()),
                types: vec!["client_operation".into()],
                ..EventQuery::default()
            },
            expect(&|s| s / 10 == 3 && s % 4 == 2),
        ),
        (
            EventQuery {
                from_seq: 50,
                streams: vec![EventStream::Prompt],
                ..EventQuery::default()
            },
            expect(&|s| s >= 50 && (s % 4 == 1 || s % 4 == 2)),
        ),
        (
            EventQuery {
                types: vec!["no_such_type".into()],
                ..EventQuery::default()
            },
            vec![],
        ),
    ];
    for (q, want) in cases {
        assert!(!want.is_empty() || q.types == vec![EventType::from("no_such_type")]);
        let page = store.read_events(&id, &q).await.unwrap();
        assert_eq!(seqs(&page.events), want, "{q:?}");
        assert_eq!(
            page.last_seq, 120,
            "last_seq is the log's, not the filter's"
        );
        for e in &page.events {
            let (ty, stream, req) = event_shape(e.seq);
            assert_eq!(
                (e.event_type.as_str(), &e.stream, &e.request_id),
                (ty, &stream, &req)
            );
        }
        let walked = walk_events(&*store, &id, q.clone(), 3).await;
        assert_eq!(seqs(&walked), want, "paged {q:?}");
    }
}

/// Events of unknown types, streams and sources, with unknown envelope and payload fields,
/// come back byte-for-byte equal.
pub async fn unknown_events_round_trip_byte_equal(b: &dyn Backend) {
    let store = b.open().await;
    let id = create(&*store, session("future", 0)).await.acpx_record_id;
    let lines = [
        r#"{"eventVersion":1,"seq":1,"timestamp":"2026-02-27T12:10:00.000Z","acpxRecordId":"future","acpSessionId":"acp-future","stream":"telemetry","source":"sidecar","type":"x.acme.metric","payload":{"z":1,"a":[true,null,{"b":"é\u0000"}]},"futureKey":{"k":"v"}}"#,
        r#"{"eventVersion":1,"seq":2,"timestamp":"2026-02-27T12:10:00.001Z","acpxRecordId":"future","acpSessionId":"acp-future","requestId":"req_1","stream":"prompt","source":"acp","type":"session_update","payload":{"sessionId":"acp-future","update":{"sessionUpdate":"brand_new_kind","x":{"deep":[1,2,3]}},"_meta":null},"zz":0,"aa":[]}"#,
        r#"{"eventVersion":2,"seq":3,"timestamp":"2026-02-27T12:10:00.002Z","acpxRecordId":"future","acpSessionId":"acp-future","stream":"lifecycle","source":"runtime","type":"lifecycle_event","payload":{"phase":"agent_exit","exitCode":0,"futureDetail":"kept"}}"#,
    ];
    let evs: Vec<EventEnvelope> = lines
        .iter()
        .map(|l| EventEnvelope::from_ndjson_line(l.as_bytes()).expect("fixture line parses"))
        .collect();
    for e in &evs {
        assert!(
            lines.contains(&e.to_ndjson().as_str()),
            "fixture must round-trip in memory"
        );
    }
    store
        .append_locked(&id, &evs[..1], Durability::Flush)
        .await
        .unwrap();
    store
        .append_locked(&id, &evs[1..], Durability::Flush)
        .await
        .unwrap();
    for s in [store.clone(), b.open().await] {
        let page = read_all(&*s, &id).await;
        let got: Vec<String> = page.events.iter().map(|e| e.to_ndjson()).collect();
        assert_eq!(got, lines, "unknown content must come back byte-for-byte");
    }
}

/// `event_log_state` agrees with what `append` returned and what the log holds, across a
/// reopen; an empty log reports seq 0.
pub async fn event_log_state_is_consistent(b: &dyn Backend) {
    let store = b.open().await;
    let id = create(&*store, session("state", 0)).await.acpx_record_id;
    let empty = store
        .event_log_state(&id)
        .await
        .expect("state of empty log");
    assert_eq!(empty.last_seq, 0);
    assert!(empty.last_write_error.is_none());
    let mut returned = None;
    for start in [1u64, 11, 21] {
        returned = Some(
            store
                .append_locked(&id, &events(&id, start, 10), Durability::Flush)
                .await
                .unwrap(),
        );
    }
    let returned = returned.unwrap();
    assert_eq!(returned.last_seq, 30);
    for s in [store.clone(), b.open().await] {
        let st = s.event_log_state(&id).await.unwrap();
        assert_eq!(st.last_seq, 30);
        assert_eq!(st.last_seq, read_all(&*s, &id).await.last_seq);
        assert!(
            st.segment_count >= 1 && st.segment_count <= st.max_segments,
            "{st:?}"
        );
        assert!(st.last_write_error.is_none(), "{st:?}");
        assert_eq!(
            (
                st.format_version,
                st.max_segments,
                st.max_segment_bytes,
                st.segment_count
            ),
            (
                returned.format_version,
                returned.max_segments,
                returned.max_segment_bytes,
                returned.segment_count
            )
        );
        assert!(
            !st.active_path.is_empty(),
            "active_path names where the log lives"
        );
    }
    assert!(returned.last_write_at.is_some());
    let err = store.event_log_state(&rid("no-such")).await.unwrap_err();
    assert!(matches!(err, StoreError::NotFound(_)), "{err:?}");
}

/// Appends with `Durability::None` are readable by the writer at once, and by a fresh
/// handle after `flush`.
pub async fn append_durability_none_then_flush(b: &dyn Backend) {
    let store = b.open().await;
    let id = create(&*store, session("lazy", 0)).await.acpx_record_id;
    for start in (1..=40).step_by(4) {
        store
            .append_locked(&id, &events(&id, start, 4), Durability::None)
            .await
            .unwrap();
    }
    assert_eq!(
        seqs(&read_all(&*store, &id).await.events),
        (1..=40).collect::<Vec<_>>(),
        "the writer reads its own unflushed appends"
    );
    store.flush(&id).await.expect("flush");
    let fresh = b.open().await;
    assert_eq!(read_all(&*fresh, &id).await.events, events(&id, 1, 40));
    assert_eq!(fresh.event_log_state(&id).await.unwrap().last_seq, 40);
    let err = store.flush(&rid("no-such")).await.unwrap_err();
    assert!(matches!(err, StoreError::NotFound(_)), "{err:?}");
}

/// `load_many_with_events` answers, in the order asked, what `load` and then `read_events`
/// answer for each session; a missing session among them is `NotFound`, as `load` says.
pub async fn load_many_with_events_equals_load_then_read(b: &dyn Backend) {
    let store = b.open().await;
    let mut ids = Vec::new();
    for (i, n) in [30u64, 0, 12].into_iter().enumerate() {
        let id = create(&*store, session(&format!("load-many-{i}"), 0))
            .await
            .acpx_record_id;
        if n > 0 {
            store
                .append_locked(&id, &events(&id, 1, n), Durability::Flush)
                .await
                .expect("append");
        }
        ids.push(id);
    }
    ids.swap(0, 2);
    let query = EventQuery {
        limit: Some(10),
        ..EventQuery::from_seq(5)
    };
    for s in [store.clone(), b.open().await] {
        let read = s
            .load_many_with_events(&ids, &query)
            .await
            .expect("every read");
        assert_eq!(read.len(), ids.len());
        for (id, (record, page)) in ids.iter().zip(&read) {
            assert_eq!(record, &s.load(id).await.expect("load"));
            let apart = s.read_events(id, &query).await.expect("read");
            assert_eq!(page.events, apart.events, "{id}");
            assert_eq!(
                (page.next_seq, page.last_seq, page.oldest_seq),
                (apart.next_seq, apart.last_seq, apart.oldest_seq),
                "{id}"
            );
        }
        assert_eq!(seqs(&read[0].1.events), (5..=12).collect::<Vec<_>>());
        assert_eq!(seqs(&read[2].1.events), (5..=14).collect::<Vec<_>>());
        assert_eq!(read[2].1.next_seq, Some(15));
        assert!(read[1].1.events.is_empty());
    }
    let mut with_missing = ids.clone();
    with_missing.insert(1, RecordId::generate());
    let err = store
        .load_many_with_events(&with_missing, &query)
        .await
        .expect_err("a missing session");
    assert!(
        matches!(&err, StoreError::NotFound(id) if *id == with_missing[1]),
        "{err:?}"
    );
}

/// `max_bytes` bounds a page by the size of its events, whatever their number: every page
/// holds at least one event, the walk gives the whole log in order, and `limit` still applies.
pub async fn pages_are_bounded_by_bytes(b: &dyn Backend) {
    let store = b.open().await;
    let id = create(&*store, session("page-bytes", 0))
        .await
        .acpx_record_id;
    let mut all = events(&id, 1, 30);
    for e in &mut all {
        if let Value::Object(m) = &mut e.payload {
            m.insert("pad".into(), json!("p".repeat(4000)));
        }
    }
    store
        .append_locked(&id, &all, Durability::Flush)
        .await
        .expect("append");
    // About 4 KB an event, by any store's count: a page of 10,000 bytes holds two or three.
    let bounded = |max_bytes| EventQuery {
        max_bytes: Some(max_bytes),
        ..EventQuery::default()
    };
    let walked = walk_events(&*store, &id, bounded(10_000), 100).await;
    assert_eq!(walked, all, "the pages bounded by bytes hold the whole log");
    let first = store.read_events(&id, &bounded(10_000)).await.unwrap();
    assert!(
        (2..=3).contains(&first.events.len()),
        "a page of 10,000 bytes of 4 KB events holds {}",
        first.events.len()
    );
    assert_eq!(
        first.next_seq,
        first.events.last().map(|e| e.seq + 1),
        "the next page starts after it"
    );
    let one = store.read_events(&id, &bounded(1)).await.unwrap();
    assert_eq!(
        seqs(&one.events),
        vec![1],
        "a page holds at least one event"
    );
    assert_eq!(one.next_seq, Some(2));
    let mut both = bounded(1 << 20);
    both.limit = Some(5);
    let page = store.read_events(&id, &both).await.unwrap();
    assert_eq!(
        seqs(&page.events),
        (1..=5).collect::<Vec<_>>(),
        "limit first"
    );
    let whole = store.read_events(&id, &bounded(1 << 20)).await.unwrap();
    assert_eq!(
        whole.events, all,
        "a bound past the log's size reads it all"
    );
    assert_eq!(whole.next_seq, None);
}
