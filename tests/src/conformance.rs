//! The checks. Each is `pub async fn name(b: &dyn Backend)`, asserts behaviour through the
//! `Store` trait only (plus the [`Backend`] hooks), and uses its own session ids, so that one
//! data set per test is enough. A check that cannot apply to a backend says so with
//! [`skip`] and returns.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use acpx_model::{
    ClosedFilter, Durability, EventEnvelope, EventPage, EventQuery, EventStream, ListQuery,
    ReadMode, RecordId, SearchQuery, SessionRecord, Store, StoreError, MAX_RECORD_ID_LEN,
};
use serde_json::{json, Value};

use crate::backend::Backend;
use crate::fixtures::{
    agent_text, event, event_shape, events, ndjson_line, rich_session, rid, session, ts, user_text,
    BASE_MILLIS,
};
use crate::ops::{append_tagged, save_loop, AppendMode, AppendPlan};
use crate::worker::{field, last_ack, Worker};

/// Reports that a check does not apply to this backend, and why.
pub fn skip(b: &dyn Backend, check: &str, why: &str) {
    println!("skipped: {check} on {}: {why}", b.name());
}

async fn create(store: &dyn Store, mut r: SessionRecord) -> SessionRecord {
    store
        .create(&mut r)
        .await
        .unwrap_or_else(|e| panic!("create {}: {e}", r.acpx_record_id));
    r
}

/// Every retained event of `id`, strict.
async fn read_all(store: &dyn Store, id: &RecordId) -> EventPage {
    store
        .read_events(id, &EventQuery::from_seq(0))
        .await
        .unwrap_or_else(|e| panic!("read_events {id}: {e}"))
}

fn seqs(events: &[EventEnvelope]) -> Vec<u64> {
    events.iter().map(|e| e.seq).collect()
}

fn assert_contiguous(events: &[EventEnvelope], first: u64, last: u64, what: &str) {
    let got = seqs(events);
    let want: Vec<u64> = (first..=last).collect();
    if got != want {
        let missing: Vec<_> = want.iter().filter(|s| !got.contains(s)).take(10).collect();
        panic!(
            "{what}: expected seqs {first}..={last} exactly once in order; got {} events \
             (first {:?}, last {:?}), missing e.g. {missing:?}",
            got.len(),
            got.first(),
            got.last()
        );
    }
}

/// Walks every page of `q` and returns the record ids in the order they came.
async fn walk_list(store: &dyn Store, mut q: ListQuery) -> Vec<String> {
    let mut out = Vec::new();
    for _ in 0..10_000 {
        let page = store.list(&q).await.expect("list page");
        if let (Some(limit), Some(_)) = (q.limit, &page.next_cursor) {
            assert_eq!(
                page.sessions.len(),
                limit,
                "a page before the last must be full"
            );
        }
        out.extend(page.sessions.iter().map(|s| s.acpx_record_id.to_string()));
        match page.next_cursor {
            Some(c) => q.cursor = Some(c),
            None => return out,
        }
    }
    panic!("list cursor walk did not end after 10,000 pages");
}

fn ids(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

async fn list_ids(store: &dyn Store, q: ListQuery) -> Vec<String> {
    let page = store
        .list(&q)
        .await
        .unwrap_or_else(|e| panic!("{q:?}: {e}"));
    page.sessions
        .iter()
        .map(|s| s.acpx_record_id.to_string())
        .collect()
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

// ---------------------------------------------------------------------------------------
// 1. create / load

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
        String::from_utf8(loaded.to_json_vec()).unwrap(),
        String::from_utf8(rec.to_json_vec()).unwrap(),
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

// ---------------------------------------------------------------------------------------
// 2. save

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

// ---------------------------------------------------------------------------------------
// 3. close / delete

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

/// Delete removes the snapshot and the events, from every view; it is idempotent; appends
/// after it are `NotFound`; a new session with the same id starts with an empty log.
pub async fn delete_removes_everything_idempotently(b: &dyn Backend) {
    let store = b.open().await;
    let id = create(&*store, rich_session("doomed", 6))
        .await
        .acpx_record_id;
    create(&*store, session("bystander", 0)).await;
    store
        .append(&id, &events(&id, 1, 5), Durability::Flush)
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
        .append(&id, &events(&id, 6, 1), Durability::Flush)
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::NotFound(_)),
        "append after delete: {err:?}"
    );
    let err = store
        .append(&id, &events(&id, 1, 1), Durability::Flush)
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
        .append(&id, &events(&id, 1, 1), Durability::Flush)
        .await
        .expect("the recreated session's log starts at seq 1");
    assert!(b.open().await.load(&rid("bystander")).await.is_ok());
}

// ---------------------------------------------------------------------------------------
// 4. append / read

/// Seqs must continue the log exactly; gaps, repeats, a wrong first seq and events of another
/// session are refused, and a refused batch writes nothing at all.
pub async fn append_seq_must_continue_exactly(b: &dyn Backend) {
    let store = b.open().await;
    let id = create(&*store, session("seq", 0)).await.acpx_record_id;
    let other = create(&*store, session("seq-other", 0))
        .await
        .acpx_record_id;

    let err = store
        .append(&id, &events(&id, 2, 1), Durability::Flush)
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
        .append(&id, &events(&id, 1, 3), Durability::Flush)
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
            .append(&id, &batch, Durability::Flush)
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
        .append(
            &rid("no-such"),
            &events(&rid("no-such"), 1, 1),
            Durability::Flush,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::NotFound(_)), "{err:?}");
    store
        .append(&id, &events(&id, 4, 2), Durability::Flush)
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
            .append(&id, &events(&id, next, *size), d)
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

/// Pages through `q` with `limit`, following `next_seq`; checks that pages make progress.
async fn walk_events(
    store: &dyn Store,
    id: &RecordId,
    mut q: EventQuery,
    limit: usize,
) -> Vec<EventEnvelope> {
    q.limit = Some(limit);
    let mut out: Vec<EventEnvelope> = Vec::new();
    for _ in 0..100_000 {
        let page = store.read_events(id, &q).await.expect("read page");
        assert!(page.events.len() <= limit, "page larger than the limit");
        out.extend(page.events.iter().cloned());
        match page.next_seq {
            Some(n) => {
                assert!(
                    !page.events.is_empty(),
                    "a page with next_seq must not be empty"
                );
                assert!(
                    n > page.events.last().map_or(0, |e| e.seq),
                    "next_seq {n} does not move past the page"
                );
                q.from_seq = n;
            }
            None => return out,
        }
    }
    panic!("event paging did not end");
}

/// Type, stream and requestId filters (alone, combined, and paged) return exactly the
/// matching events, in seq order.
pub async fn read_filters_by_type_stream_and_request_id(b: &dyn Backend) {
    let store = b.open().await;
    let id = create(&*store, session("filters", 0)).await.acpx_record_id;
    store
        .append(&id, &events(&id, 1, 120), Durability::Flush)
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
        assert!(!want.is_empty() || q.types == vec!["no_such_type".to_string()]);
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
        .append(&id, &evs[..1], Durability::Flush)
        .await
        .unwrap();
    store
        .append(&id, &evs[1..], Durability::Flush)
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
                .append(&id, &events(&id, start, 10), Durability::Flush)
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
            .append(&id, &events(&id, start, 4), Durability::None)
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

// ---------------------------------------------------------------------------------------
// 5. list

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

// ---------------------------------------------------------------------------------------
// 6. lock

/// A second `lock` waits, then fails with `Locked` after its timeout; dropping the guard
/// releases the lock and wakes a waiter; a fresh handle in this process is excluded too.
pub async fn lock_waits_times_out_and_releases_on_drop(b: &dyn Backend) {
    let store = b.open().await;
    let id = create(&*store, session("locked", 0)).await.acpx_record_id;
    let guard = store
        .lock(&id, Duration::from_secs(5))
        .await
        .expect("first lock");
    assert_eq!(guard.id(), &id);
    for s in [store.clone(), b.open().await] {
        let timeout = Duration::from_millis(150);
        let t0 = Instant::now();
        let err = s.lock(&id, timeout).await.expect_err("lock is held");
        match &err {
            StoreError::Locked { id: eid, waited } => {
                assert_eq!(eid, &id);
                assert!(
                    *waited >= timeout,
                    "gave up after {waited:?}, before its timeout"
                );
                assert!(err.to_string().contains("locked"), "{err}");
            }
            other => panic!("expected Locked, got {other:?}"),
        }
        assert!(
            t0.elapsed() >= timeout,
            "returned before waiting its timeout"
        );
    }
    let waiter = {
        let s = b.open().await;
        let id = id.clone();
        tokio::spawn(async move { s.lock(&id, Duration::from_secs(60)).await.map(drop) })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !waiter.is_finished(),
        "a second lock must wait while the first is held"
    );
    drop(guard);
    tokio::time::timeout(Duration::from_secs(60), waiter)
        .await
        .expect("waiter woke after the drop")
        .unwrap()
        .expect("waiter gets the lock once it is released");
    // A holder that panics releases the lock while unwinding.
    let panicker = {
        let s = store.clone();
        let id = id.clone();
        tokio::spawn(async move {
            let _guard = s.lock(&id, Duration::from_secs(5)).await.unwrap();
            panic!("holder panics while holding the lock (expected by the check)");
        })
    };
    assert!(panicker.await.unwrap_err().is_panic());
    let again = store
        .lock(&id, Duration::from_millis(500))
        .await
        .expect("released");
    // Locks are per session.
    let other = create(&*store, session("unlocked", 0)).await.acpx_record_id;
    store
        .lock(&other, Duration::from_millis(500))
        .await
        .expect("another session's lock is independent");
    drop(again);
}

/// A worker process holds the lock: this process cannot take it, and its save and append
/// wait for the holder (they then see the holder's writes: `Conflict` / `SeqMismatch`).
pub async fn lock_cross_process_mutations_wait(b: &dyn Backend) {
    const CHECK: &str = "lock_cross_process_mutations_wait";
    let store = b.open().await;
    let id = create(&*store, session("xlock", 0)).await.acpx_record_id;
    let Some(mut w) = Worker::spawn(b, &["hold-lock", "--id", "xlock", "--seconds", "120"], &[])
    else {
        return skip(b, CHECK, "backend has no worker (single-process data)");
    };
    w.expect_line("locked").await;
    let err = store
        .lock(&id, Duration::from_millis(200))
        .await
        .expect_err("lock held by another process");
    assert!(matches!(err, StoreError::Locked { .. }), "{err:?}");

    let stale = store.load(&id).await.unwrap();
    let save = {
        let s = b.open().await;
        let mut r = stale.clone();
        tokio::spawn(async move { s.save(&mut r).await })
    };
    let append = {
        let s = b.open().await;
        let id = id.clone();
        tokio::spawn(async move { s.append(&id, &events(&id, 1, 1), Durability::Flush).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !save.is_finished(),
        "a save must wait while another process holds the lock"
    );
    assert!(
        !append.is_finished(),
        "an append must wait while another process holds the lock"
    );
    w.send("save").await;
    w.expect_line("saved revision=2").await;
    w.send("append").await;
    w.expect_line("appended seq=1").await;
    w.send("release").await;
    w.expect_line("released").await;
    w.finish().await;

    let save = tokio::time::timeout(Duration::from_secs(60), save)
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(
            save,
            Err(StoreError::Conflict {
                expected: 1,
                actual: 2,
                ..
            })
        ),
        "the waiting save must see the holder's save: {save:?}"
    );
    let append = tokio::time::timeout(Duration::from_secs(60), append)
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(
            append,
            Err(StoreError::SeqMismatch {
                last: 1,
                got: 1,
                ..
            })
        ),
        "the waiting append must see the holder's append: {append:?}"
    );
    let page = read_all(&*store, &id).await;
    assert_eq!(page.events.len(), 1);
    assert_eq!(page.events[0].payload["worker"], json!("holder"));
    assert_eq!(
        store.load(&id).await.unwrap().extra["workerTag"],
        json!("holder")
    );
}

/// A lock held by a process that is SIGKILLed is released.
pub async fn lock_released_when_holder_killed(b: &dyn Backend) {
    let store = b.open().await;
    let id = create(&*store, session("xkill", 0)).await.acpx_record_id;
    let Some(mut w) = Worker::spawn(b, &["hold-lock", "--id", "xkill", "--seconds", "120"], &[])
    else {
        return skip(
            b,
            "lock_released_when_holder_killed",
            "backend has no worker",
        );
    };
    w.expect_line("locked").await;
    assert!(matches!(
        store.lock(&id, Duration::from_millis(100)).await,
        Err(StoreError::Locked { .. })
    ));
    w.kill().await;
    store
        .lock(&id, Duration::from_secs(10))
        .await
        .expect("the dead holder's lock is released");
    let mut r = store.load(&id).await.unwrap();
    store
        .save(&mut r)
        .await
        .expect("writes proceed after the holder died");
}

// ---------------------------------------------------------------------------------------
// 7. hostile ids

/// Everything that could escape a directory is refused by `RecordId::parse`.
pub async fn record_id_rejects_hostile_strings(b: &dyn Backend) {
    let _ = b;
    let long = "x".repeat(MAX_RECORD_ID_LEN + 1);
    for bad in [
        "",
        ".",
        "..",
        "../x",
        "a/../b",
        "a/b",
        "/abs",
        "a\\b",
        "..\\x",
        "a\0b",
        ".hidden",
        "C:x",
        "C:\\x",
        "a b",
        "a\nb",
        "é",
        "\u{202e}x",
        long.as_str(),
    ] {
        assert!(RecordId::parse(bad).is_err(), "{bad:?} must be rejected");
        let derived = RecordId::from_untrusted_or_generate(bad);
        assert_ne!(derived.as_str(), bad);
    }
    assert!(RecordId::parse(&"x".repeat(MAX_RECORD_ID_LEN)).is_ok());
    assert!(serde_json::from_value::<RecordId>(json!("../etc/passwd")).is_err());
}

/// A stored snapshot whose inner id is hostile is corrupt: `load` and `list` refuse it and
/// nothing is written outside the store.
pub async fn hostile_inner_id_is_corrupt(b: &dyn Backend) {
    let store = b.open().await;
    create(&*store, session("victim", 0)).await;
    create(&*store, session("fine", 0)).await;
    let mut doc = serde_json::to_value(session("victim", 0)).unwrap();
    doc["acpxRecordId"] = json!("../escape");
    doc["revision"] = json!(1);
    drop(store);
    if b.inject_snapshot(&rid("victim"), &serde_json::to_vec(&doc).unwrap())
        .await
        .is_none()
    {
        return skip(
            b,
            "hostile_inner_id_is_corrupt",
            "backend has no raw snapshot",
        );
    }
    let store = b.open().await;
    let err = store
        .load(&rid("victim"))
        .await
        .expect_err("hostile inner id");
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
    assert!(err.to_string().contains("acpxRecordId"), "{err}");
    let page = store
        .list(&ListQuery::default())
        .await
        .expect("list survives");
    assert_eq!(page.sessions.len(), 1);
    assert_eq!(page.sessions[0].acpx_record_id.as_str(), "fine");
    assert_eq!(page.skipped.len(), 1, "{:?}", page.skipped);
    assert_fenced(b);
}

/// Operations fed with hostile strings (through every entry point that takes them) create
/// nothing outside the backend's data directory.
pub async fn nothing_created_outside_the_store(b: &dyn Backend) {
    let Some(data) = b.data_dir() else {
        return skip(
            b,
            "nothing_created_outside_the_store",
            "backend has no files",
        );
    };
    let store = b.open().await;
    let mut r = session("placeholder", 0);
    r.acpx_record_id = RecordId::from_untrusted_or_generate("../../escape");
    r.cwd = "/../../escape".into();
    r.name = Some("../../escape".into());
    r.acp_session_id = "../../escape".into();
    r.agent_command = "../../escape\0".into();
    let mut r = create(&*store, r).await;
    let id = r.acpx_record_id.clone();
    store.save(&mut r).await.unwrap();
    let mut e = event(&id, 1);
    e.acp_session_id = "../../escape".into();
    e.request_id = Some("/etc/passwd".into());
    e.event_type = "../../escape".into();
    store.append(&id, &[e], Durability::Fsync).await.unwrap();
    let _ = store
        .list(&ListQuery {
            cwd: Some("/../../escape/".into()),
            name: Some("../../escape".into()),
            ..ListQuery::default()
        })
        .await
        .unwrap();
    drop(store.lock(&id, Duration::from_secs(5)).await.unwrap());
    store.close(&id, ts(1)).await.unwrap();
    let page = store.list(&ListQuery::default()).await.unwrap();
    assert_eq!(page.sessions.len(), 1);
    assert!(store.delete(&id).await.unwrap());
    assert_fenced(b);
    assert!(data.exists());
}

/// The parent of the backend's data directory holds nothing but the data directory.
fn assert_fenced(b: &dyn Backend) {
    let Some(data) = b.data_dir() else { return };
    let parent = data.parent().expect("data dir has a parent");
    let names: Vec<_> = std::fs::read_dir(parent)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        names,
        vec![data.file_name().unwrap().to_owned()],
        "something was created next to the store's data directory"
    );
}

// ---------------------------------------------------------------------------------------
// 8. malformed snapshots

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
            return skip(b, CHECK, "backend has no raw snapshot");
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

// ---------------------------------------------------------------------------------------
// 9. torn tail, damaged lines

/// A partial last line is withheld and reported; the next append starts on a fresh line and
/// continues the seq; afterwards the log reads strictly with no damage.
pub async fn torn_tail_withheld_and_next_append_is_clean(b: &dyn Backend) {
    let store = b.open().await;
    let id = create(&*store, session("torn", 0)).await.acpx_record_id;
    store
        .append(&id, &events(&id, 1, 3), Durability::Flush)
        .await
        .unwrap();
    drop(store);
    let full = ndjson_line(&event(&id, 4));
    let torn = &full[..full.len() / 2];
    if b.inject_log_bytes(&id, torn).await.is_none() {
        return skip(
            b,
            "torn_tail_withheld_and_next_append_is_clean",
            "backend has no raw log",
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
        .append(&id, &events(&id, 4, 2), Durability::Flush)
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
        .append(&id, &events(&id, 1, 3), Durability::Flush)
        .await
        .unwrap();
    drop(store);
    let mut raw = b"{\"this is\": not json}\n".to_vec();
    raw.extend(ndjson_line(&event(&id, 4)));
    raw.extend(ndjson_line(&event(&id, 5)));
    if b.inject_log_bytes(&id, &raw).await.is_none() {
        return skip(
            b,
            "mid_log_damage_strict_and_lenient",
            "backend has no raw log",
        );
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

// ---------------------------------------------------------------------------------------
// 10. crashes

/// A worker appending (under the lock) is SIGKILLed mid-run: every acknowledged seq is
/// readable, seqs are contiguous from 1, and the log takes the next append (so the dead
/// writer's lock is gone, too).
pub async fn crash_kill_mid_append(b: &dyn Backend) {
    let store = b.open().await;
    let id = create(&*store, session("kill-append", 0))
        .await
        .acpx_record_id;
    store
        .append(&id, &events(&id, 1, 5), Durability::Flush)
        .await
        .unwrap();
    let op = [
        "append",
        "--id",
        "kill-append",
        "--count",
        "200000",
        "--batch",
        "4",
        "--durability",
        "flush",
        "--mode",
        "lock",
        "--tag",
        "k",
    ];
    let Some(mut w) = Worker::spawn(b, &op, &[]) else {
        return skip(b, "crash_kill_mid_append", "backend has no worker");
    };
    let mut lines = Vec::new();
    for _ in 0..150 {
        lines.push(w.expect_line("ack ").await);
    }
    w.kill().await;
    lines.extend(w.rest().await);
    assert!(
        !lines.iter().any(|l| l.starts_with("done")),
        "the worker finished before the kill"
    );
    let acked = last_ack(&lines, "seq").expect("acks");

    let store = b.open().await;
    let page = read_all(&*store, &id).await;
    assert!(
        page.last_seq >= acked,
        "acknowledged seq {acked} lost (last {})",
        page.last_seq
    );
    assert_contiguous(&page.events, 1, page.last_seq, "after SIGKILL");
    for e in &page.events[5..] {
        assert_eq!(e.payload["worker"], json!("k"));
        assert_eq!(e.payload["n"], json!(e.seq - 6));
    }
    assert_eq!(
        store.event_log_state(&id).await.unwrap().last_seq,
        page.last_seq
    );
    let next = page.last_seq + 1;
    store
        .append(&id, &events(&id, next, 2), Durability::Flush)
        .await
        .expect("append after the crash");
    let page = read_all(&*b.open().await, &id).await;
    assert_contiguous(&page.events, 1, next + 1, "after the next append");
    assert!(page.torn_tail.is_none());
}

/// A worker in a load-modify-save loop is SIGKILLed: the snapshot loads, is whole, and its
/// revision is at least the last acknowledged one.
pub async fn crash_kill_mid_save_loop(b: &dyn Backend) {
    let store = b.open().await;
    let original = create(&*store, rich_session("kill-save", 200)).await;
    let op = [
        "save-loop",
        "--id",
        "kill-save",
        "--count",
        "1000000",
        "--tag",
        "k",
    ];
    let Some(mut w) = Worker::spawn(b, &op, &[]) else {
        return skip(b, "crash_kill_mid_save_loop", "backend has no worker");
    };
    let mut lines = Vec::new();
    for _ in 0..30 {
        lines.push(w.expect_line("ack ").await);
    }
    w.kill().await;
    lines.extend(w.rest().await);
    let acked = last_ack(&lines, "revision").expect("acks");
    assert!(acked >= 31);

    let store = b.open().await;
    let r = store
        .load(&original.acpx_record_id)
        .await
        .expect("snapshot loads after SIGKILL");
    assert!(
        r.revision >= acked,
        "acknowledged revision {acked} lost: {}",
        r.revision
    );
    assert_eq!(
        r.extra["workerCounter"],
        json!(r.revision),
        "snapshot is not whole"
    );
    assert_eq!(r.thread, original.thread);
    let page = store.list(&ListQuery::default()).await.unwrap();
    assert_eq!(page.sessions.len(), 1);
    assert!(
        page.skipped.is_empty(),
        "leftovers listed as sessions: {:?}",
        page.skipped
    );
    let mut r = r;
    store.save(&mut r).await.expect("save after the crash");
}

/// While a worker rewrites a large snapshot over and over, a reader in this process always
/// loads a complete document (old or new), never an error.
pub async fn reader_during_rewrite_sees_whole_documents(b: &dyn Backend) {
    let store = b.open().await;
    let original = create(&*store, rich_session("rewrite", 500)).await;
    let op = [
        "save-loop",
        "--id",
        "rewrite",
        "--count",
        "60",
        "--tag",
        "r",
    ];
    let Some(mut w) = Worker::spawn(b, &op, &[]) else {
        return skip(
            b,
            "reader_during_rewrite_sees_whole_documents",
            "backend has no worker",
        );
    };
    let reader = {
        let s = b.open().await;
        let id = original.acpx_record_id.clone();
        let thread = original.thread.clone();
        tokio::spawn(async move {
            let mut last = 0;
            let mut loads = 0u64;
            loop {
                let r = s
                    .load(&id)
                    .await
                    .expect("a load during rewrites must succeed");
                assert!(
                    r.revision >= last,
                    "revision went back: {} < {last}",
                    r.revision
                );
                if r.revision > 1 {
                    assert_eq!(r.extra["workerCounter"], json!(r.revision));
                }
                assert_eq!(r.thread, thread);
                last = r.revision;
                loads += 1;
                if last == 61 {
                    return loads;
                }
                tokio::task::yield_now().await;
            }
        })
    };
    let lines = w.finish().await;
    assert_eq!(last_ack(&lines, "revision"), Some(61));
    let loads = tokio::time::timeout(Duration::from_secs(120), reader)
        .await
        .expect("reader finished")
        .unwrap();
    println!("reader made {loads} loads during 60 rewrites");
}

fn has_failpoint(b: &dyn Backend, check: &str, name: &str) -> bool {
    let ok = b.failpoints().contains(&name) && b.worker_args().is_some();
    if !ok {
        skip(b, check, &format!("backend has no failpoint {name}"));
    }
    ok
}

/// Crash after the temp file is written and fsynced, before the rename: the old snapshot is
/// intact and nothing else is listed.
pub async fn failpoint_save_after_temp_fsync(b: &dyn Backend) {
    if !has_failpoint(
        b,
        "failpoint_save_after_temp_fsync",
        "save.after_temp_fsync",
    ) {
        return;
    }
    let store = b.open().await;
    let mut r = create(&*store, rich_session("fp-temp", 50)).await;
    store.save(&mut r).await.unwrap();
    let op = [
        "save-loop",
        "--id",
        "fp-temp",
        "--count",
        "1",
        "--tag",
        "fp",
    ];
    let env = [("ACPX_FAILPOINT", "save.after_temp_fsync")];
    let lines = Worker::spawn(b, &op, &env).unwrap().finish_aborted().await;
    assert_eq!(last_ack(&lines, "revision"), None, "nothing acknowledged");
    let store = b.open().await;
    assert_eq!(
        store.load(&r.acpx_record_id).await.expect("old snapshot"),
        r
    );
    let page = store.list(&ListQuery::default()).await.unwrap();
    assert_eq!(page.sessions.len(), 1);
    assert!(
        page.skipped.is_empty(),
        "a temp file was listed: {:?}",
        page.skipped
    );
    store.save(&mut r).await.expect("save after the crash");
    assert_eq!(r.revision, 3);
}

/// Crash after the rename, before the directory fsync: the session is old or new, whole,
/// never missing.
pub async fn failpoint_save_after_rename(b: &dyn Backend) {
    if !has_failpoint(b, "failpoint_save_after_rename", "save.after_rename") {
        return;
    }
    let store = b.open().await;
    let r = create(&*store, rich_session("fp-rename", 50)).await;
    let op = [
        "save-loop",
        "--id",
        "fp-rename",
        "--count",
        "1",
        "--tag",
        "fp",
    ];
    let env = [("ACPX_FAILPOINT", "save.after_rename")];
    Worker::spawn(b, &op, &env).unwrap().finish_aborted().await;
    let store = b.open().await;
    let got = store.load(&r.acpx_record_id).await.expect("never missing");
    match got.revision {
        1 => assert_eq!(got, r),
        2 => assert_eq!(got.extra["workerCounter"], json!(2)),
        n => panic!("revision {n} after one interrupted save"),
    }
    assert_eq!(got.thread, r.thread);
    assert!(store
        .list(&ListQuery::default())
        .await
        .unwrap()
        .skipped
        .is_empty());
}

/// Crash in the middle of writing an event line: the partial line is withheld and reported,
/// and the next append (after reopening) continues cleanly.
pub async fn failpoint_append_after_partial_write(b: &dyn Backend) {
    if !has_failpoint(
        b,
        "failpoint_append_after_partial_write",
        "append.after_partial_write",
    ) {
        return;
    }
    let store = b.open().await;
    let id = create(&*store, session("fp-append", 0))
        .await
        .acpx_record_id;
    store
        .append(&id, &events(&id, 1, 10), Durability::Flush)
        .await
        .unwrap();
    let op = [
        "append",
        "--id",
        "fp-append",
        "--count",
        "1",
        "--batch",
        "1",
        "--tag",
        "fp",
    ];
    let env = [("ACPX_FAILPOINT", "append.after_partial_write")];
    let lines = Worker::spawn(b, &op, &env).unwrap().finish_aborted().await;
    assert_eq!(last_ack(&lines, "seq"), None);
    let store = b.open().await;
    let page = read_all(&*store, &id).await;
    assert_eq!(page.events, events(&id, 1, 10));
    assert!(
        page.torn_tail.is_some(),
        "the partial write must be reported as a torn tail"
    );
    store
        .append(&id, &events(&id, 11, 3), Durability::Flush)
        .await
        .expect("append after the crash");
    let page = read_all(&*b.open().await, &id).await;
    assert_eq!(page.events, events(&id, 1, 13));
    assert!(page.torn_tail.is_none() && page.damaged.is_empty());
}

/// Crash after the snapshot is unlinked, before the logs are: the session is gone, and a
/// new session with the same id does not inherit the old events.
pub async fn failpoint_delete_after_snapshot_unlink(b: &dyn Backend) {
    if !has_failpoint(
        b,
        "failpoint_delete_after_snapshot_unlink",
        "delete.after_snapshot_unlink",
    ) {
        return;
    }
    let store = b.open().await;
    let id = create(&*store, session("fp-delete", 0))
        .await
        .acpx_record_id;
    create(&*store, session("fp-keep", 0)).await;
    store
        .append(&id, &events(&id, 1, 5), Durability::Flush)
        .await
        .unwrap();
    let op = ["delete", "--id", "fp-delete"];
    let env = [("ACPX_FAILPOINT", "delete.after_snapshot_unlink")];
    Worker::spawn(b, &op, &env).unwrap().finish_aborted().await;
    let store = b.open().await;
    assert!(matches!(
        store.load(&id).await,
        Err(StoreError::NotFound(_))
    ));
    let page = store.list(&ListQuery::default()).await.unwrap();
    assert_eq!(
        list_ids(&*store, ListQuery::default()).await,
        ids(&["fp-keep"])
    );
    assert!(page.skipped.is_empty(), "{:?}", page.skipped);
    create(&*store, session("fp-delete", 0)).await;
    let page = read_all(&*store, &id).await;
    assert!(
        page.events.is_empty(),
        "the recreated session inherited {} events",
        page.events.len()
    );
    store
        .append(&id, &events(&id, 1, 1), Durability::Flush)
        .await
        .expect("fresh log starts at 1");
}

/// The size limit of every file the worker of [`append_failure_is_reported_and_undone`] may
/// write: room for a few thousand events, far less than the 100,000 it tries to append.
const FULL_DISK_BYTES: u64 = 1024 * 1024;

/// Append failure is not silent (store lessons 5.1 item 9; seed failure policy): a worker
/// appends batches until its files hit a size limit, the way they hit a full disk. The
/// failing append returns a typed error (any kind: `EFBIG`, `SQLITE_FULL`, …), and it is all
/// or nothing: afterwards, without the limit, the log holds exactly the acknowledged events
/// (seqs 1..=last ack, none of the failed batch, nothing torn), and the next append continues
/// at last ack + 1. `event_log_state` of the handle that saw the failure reports it in
/// `last_write_error`. Assumes one file of the backend grows past 1 MiB within 100,000 events
/// (true unless event segments are smaller than that).
pub async fn append_failure_is_reported_and_undone(b: &dyn Backend) {
    let check = "append_failure_is_reported_and_undone";
    if b.worker_args().is_none() {
        return skip(b, check, "backend has no worker");
    }
    // Created here, without the limit: only appends are to meet it.
    let store = b.open().await;
    let id = create(&*store, session("disk-full", 0))
        .await
        .acpx_record_id;
    store
        .append(&id, &events(&id, 1, 3), Durability::Flush)
        .await
        .unwrap();
    // Batches of 25 events: a write stopped part-way likely ends after whole events of it.
    let op = [
        "append-until-error",
        "--id",
        "disk-full",
        "--batch",
        "25",
        "--tag",
        "full",
    ];
    let mut w = Worker::spawn_with_file_limit(b, &op, FULL_DISK_BYTES).unwrap();
    let lines = w.finish().await;
    assert!(
        !lines.iter().any(|l| l == "no-error"),
        "100,000 events were appended under a 1 MiB file-size limit without any error: \
         a failed write went unreported"
    );
    let error = lines
        .iter()
        .find(|l| l.starts_with("error "))
        .unwrap_or_else(|| panic!("the worker reported no failed append: {lines:?}"));
    let acked = last_ack(&lines, "seq").unwrap_or_else(|| {
        panic!("no append succeeded under the limit (it is too low for this backend): {error}")
    });
    let state = lines
        .iter()
        .find(|l| l.starts_with("state "))
        .unwrap_or_else(|| panic!("no state line: {lines:?}"));
    assert_eq!(
        field(state, "last_seq"),
        Some(acked),
        "after `{error}`, event_log_state in the failing process disagrees with the last \
         acknowledged seq {acked}: {state}"
    );
    // Never silent (seed failure policy): the store handle that saw the append fail reports
    // it in `last_write_error` (until an append through it succeeds).
    let recorded = state
        .split_once("last_write_error=")
        .map_or("none", |(_, r)| r);
    assert_ne!(
        recorded, "none",
        "after `{error}`, event_log_state in the failing process does not report it in \
         last_write_error: {state}"
    );

    let store = b.open().await;
    let page = read_all(&*store, &id).await;
    assert_eq!(page.last_seq, acked, "after `{error}`");
    assert_contiguous(&page.events, 1, acked, "after a failed append");
    assert_eq!(
        page.events[..3],
        events(&id, 1, 3)[..],
        "stored events lost"
    );
    for e in &page.events[3..] {
        assert_eq!(e.payload["worker"], json!("full"));
        assert_eq!(e.payload["n"], json!(e.seq - 4));
    }
    assert!(
        page.torn_tail.is_none() && page.damaged.is_empty(),
        "the failed append left bytes behind: {:?} {:?}",
        page.torn_tail,
        page.damaged
    );
    assert_eq!(store.event_log_state(&id).await.unwrap().last_seq, acked);
    let state = store
        .append(&id, &events(&id, acked + 1, 2), Durability::Flush)
        .await
        .expect("append after the failure, without the limit");
    assert_eq!(state.last_seq, acked + 2);
    assert_eq!(state.last_write_error, None);
    let page = read_all(&*b.open().await, &id).await;
    assert_contiguous(&page.events, 1, acked + 2, "after the next append");
}

// ---------------------------------------------------------------------------------------
// 11. concurrency

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
        return skip(b, check, "backend has no worker");
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
        return skip(b, "two_processes_save_one_session", "backend has no worker");
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
        return skip(b, CHECK, "backend has no worker");
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

// ---------------------------------------------------------------------------------------
// 12. search

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

// ---------------------------------------------------------------------------------------
// 13. retention (run with a backend configured with tiny segments)

/// The segment budget of `id`'s log, or `None` (and a skip) when it is too large to test.
async fn small_budget(
    b: &dyn Backend,
    store: &dyn Store,
    id: &RecordId,
    check: &str,
) -> Option<(u64, u32)> {
    let st = store.event_log_state(id).await.unwrap();
    if st.max_segment_bytes * u64::from(st.max_segments) > 1 << 20 {
        skip(b, check, "backend is not configured with small segments");
        return None;
    }
    Some((st.max_segment_bytes, st.max_segments))
}

/// Appending far beyond the budget keeps a contiguous suffix that ends at the last seq and
/// fits the budget; at most `max_segments` segments; reads and paging cross segment
/// boundaries; the same after a reopen.
pub async fn retention_keeps_a_contiguous_suffix(b: &dyn Backend) {
    const CHECK: &str = "retention_keeps_a_contiguous_suffix";
    let store = b.open().await;
    let id = create(&*store, session("retained", 0)).await.acpx_record_id;
    let Some((max_bytes, max_segments)) = small_budget(b, &*store, &id, CHECK).await else {
        return;
    };
    let line = ndjson_line(&event(&id, 1)).len() as u64;
    let total = 4 * max_bytes * u64::from(max_segments) / line + 7;
    let mut next = 1;
    let mut saw_rotation = false;
    while next <= total {
        let size = [1, 5, 2][(next % 3) as usize].min(total - next + 1);
        let st = store
            .append(&id, &events(&id, next, size), Durability::Flush)
            .await
            .unwrap();
        next += size;
        assert!(st.segment_count <= max_segments, "{st:?}");
        saw_rotation |= st.segment_count > 1;
    }
    assert!(saw_rotation, "the log never rotated");
    for s in [store.clone(), b.open().await] {
        let st = s.event_log_state(&id).await.unwrap();
        assert_eq!(st.last_seq, total);
        assert!(
            st.segment_count >= 2 && st.segment_count <= max_segments,
            "{st:?}"
        );
        let page = read_all(&*s, &id).await;
        let oldest = page.events[0].seq;
        assert!(oldest > 1, "nothing was dropped beyond the budget");
        assert_eq!(page.oldest_seq, oldest);
        assert_contiguous(&page.events, oldest, total, "retained events");
        let bytes: u64 = page
            .events
            .iter()
            .map(|e| ndjson_line(e).len() as u64)
            .sum();
        let budget = max_bytes * u64::from(max_segments);
        assert!(
            bytes <= budget + max_bytes + 5 * line,
            "{bytes} bytes retained for a budget of {budget}"
        );
        assert!(
            bytes >= (u64::from(max_segments) - 1) * max_bytes / 2,
            "only {bytes} bytes retained for a budget of {budget}"
        );
        let from_one = s.read_events(&id, &EventQuery::from_seq(1)).await.unwrap();
        assert_eq!(
            from_one.events.first().map(|e| e.seq),
            Some(oldest),
            "from_seq before the oldest"
        );
        let mid = oldest + (total - oldest) / 3;
        let from_mid = s
            .read_events(&id, &EventQuery::from_seq(mid))
            .await
            .unwrap();
        assert_contiguous(&from_mid.events, mid, total, "from the middle");
        let walked = walk_events(&*s, &id, EventQuery::default(), 7).await;
        assert_eq!(walked, page.events, "paging across segments");
        assert_eq!(walked, events(&id, oldest, total - oldest + 1));
    }
    store
        .append(&id, &events(&id, total + 1, 1), Durability::Flush)
        .await
        .expect("append continues after rotations");
}

/// A worker is killed by a failpoint in the middle of a rotation (after shifting older
/// segments, before moving the active one): the log stays readable and contiguous, no
/// acknowledged event is lost, and appends continue.
pub async fn failpoint_rotate_after_shift(b: &dyn Backend) {
    const CHECK: &str = "failpoint_rotate_after_shift";
    if !has_failpoint(b, CHECK, "rotate.after_shift") {
        return;
    }
    let store = b.open().await;
    let id = create(&*store, session("fp-rotate", 0))
        .await
        .acpx_record_id;
    let Some((_, max_segments)) = small_budget(b, &*store, &id, CHECK).await else {
        return;
    };
    // Two or more segments first, so the rotation really shifts one.
    let mut next = 1;
    while store.event_log_state(&id).await.unwrap().segment_count < 2 {
        store
            .append(&id, &events(&id, next, 1), Durability::Flush)
            .await
            .unwrap();
        next += 1;
        assert!(next < 100_000, "the log never rotated");
    }
    let op = [
        "append",
        "--id",
        "fp-rotate",
        "--count",
        "100000",
        "--batch",
        "1",
        "--tag",
        "fp",
    ];
    let env = [("ACPX_FAILPOINT", "rotate.after_shift")];
    let lines = Worker::spawn(b, &op, &env).unwrap().finish_aborted().await;
    let acked = last_ack(&lines, "seq").unwrap_or(next - 1).max(next - 1);
    let store = b.open().await;
    let page = read_all(&*store, &id).await;
    assert!(
        page.last_seq >= acked,
        "acknowledged seq {acked} lost (last {})",
        page.last_seq
    );
    let oldest = page.events.first().map_or(0, |e| e.seq);
    assert_contiguous(
        &page.events,
        oldest,
        page.last_seq,
        "after a crash mid-rotation",
    );
    let last = page.last_seq;
    for i in 1..=20 {
        store
            .append(&id, &events(&id, last + i, 1), Durability::Flush)
            .await
            .expect("append after the crash");
    }
    let st = store.event_log_state(&id).await.unwrap();
    assert_eq!(st.last_seq, last + 20);
    assert!(st.segment_count <= max_segments, "{st:?}");
    let page = read_all(&*b.open().await, &id).await;
    let oldest = page.events[0].seq;
    assert_contiguous(
        &page.events,
        oldest,
        last + 20,
        "after appending past the crash",
    );
}
