//! Bounded event retention (run with a backend configured with a small event budget).

use super::*;
use crate::ops::AppendLocked;

/// The segment budget of `id`'s log (segment size, segments); fails the check when it is
/// larger than [`SMALL_EVENT_BUDGET`](crate::backend::SMALL_EVENT_BUDGET), which the
/// backend's [`Capabilities::small_event_budget`] promised it is not.
async fn small_budget(
    b: &dyn Backend,
    store: &dyn Store,
    id: &RecordId,
    check: &str,
) -> (u64, u32) {
    let st = store.event_log_state(id).await.unwrap();
    if st.max_segment_bytes * u64::from(st.max_segments) > crate::backend::SMALL_EVENT_BUDGET {
        undeclared(b, check, "a small event budget");
    }
    (st.max_segment_bytes, st.max_segments)
}

/// Appending far beyond the budget keeps a contiguous suffix that ends at the last seq and
/// fits the budget; at most `max_segments` segments; reads and paging cross segment
/// boundaries; the same after a reopen.
pub async fn retention_keeps_a_contiguous_suffix(b: &dyn Backend) {
    const CHECK: &str = "retention_keeps_a_contiguous_suffix";
    let store = b.open().await;
    let id = create(&*store, session("retained", 0)).await.acpx_record_id;
    let (max_bytes, max_segments) = small_budget(b, &*store, &id, CHECK).await;
    let line = ndjson_line(&event(&id, 1)).len() as u64;
    let total = 4 * max_bytes * u64::from(max_segments) / line + 7;
    let mut next = 1;
    let mut saw_rotation = false;
    while next <= total {
        let size = [1, 5, 2][(next % 3) as usize].min(total - next + 1);
        let st = store
            .append_locked(&id, &events(&id, next, size), Durability::Flush)
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
        // A request's rows were appended over several batches (`req_N` spans seqs 10N to
        // 10N + 9); reading by its id finds exactly those retention kept, and none of a
        // request it removed.
        let first = oldest / 10;
        for r in [0, first, first + 1, (first + total / 10) / 2, total / 10] {
            let req = format!("req_{r}");
            let want: Vec<u64> = page
                .events
                .iter()
                .filter(|e| e.request_id.as_deref() == Some(req.as_str()))
                .map(|e| e.seq)
                .collect();
            assert!(r == 0 || !want.is_empty(), "{req} has retained events");
            let q = EventQuery {
                request_id: Some(req.clone()),
                ..EventQuery::default()
            };
            let got = s.read_events(&id, &q).await.unwrap();
            assert_eq!(seqs(&got.events), want, "{req}");
        }
    }
    store
        .append_locked(&id, &events(&id, total + 1, 1), Durability::Flush)
        .await
        .expect("append continues after rotations");
}

/// A worker is killed by a failpoint in the middle of a rotation (after shifting older
/// segments, before moving the active one): the log stays readable and contiguous, no
/// acknowledged event is lost, and appends continue.
pub async fn failpoint_rotate_after_shift(b: &dyn Backend) {
    const CHECK: &str = "failpoint_rotate_after_shift";
    require_failpoint(b, CHECK, "rotate.after_shift");
    let store = b.open().await;
    let id = create(&*store, session("fp-rotate", 0))
        .await
        .acpx_record_id;
    let (_, max_segments) = small_budget(b, &*store, &id, CHECK).await;
    // Two or more segments first, so the rotation really shifts one.
    let mut next = 1;
    while store.event_log_state(&id).await.unwrap().segment_count < 2 {
        store
            .append_locked(&id, &events(&id, next, 1), Durability::Flush)
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
            .append_locked(&id, &events(&id, last + i, 1), Durability::Flush)
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

/// A staged log far beyond the budget is stored as appends would leave it: a contiguous
/// suffix that ends at the last seq and fits the budget, in at most `max_segments` segments,
/// its state in the committed snapshot; appends continue it.
pub async fn staged_log_over_the_budget_is_retained_as_appended(b: &dyn Backend) {
    const CHECK: &str = "staged_log_over_the_budget_is_retained_as_appended";
    let store = b.open().await;
    // The budget, as the store reports it for a session of its own.
    let probe = create(&*store, session("retained-probe", 0))
        .await
        .acpx_record_id;
    let (max_bytes, max_segments) = small_budget(b, &*store, &probe, CHECK).await;
    let id = rid("retained-staged");
    let line = ndjson_line(&event(&id, 1)).len() as u64;
    let total = 4 * max_bytes * u64::from(max_segments) / line + 7;
    let mut stage = store
        .stage_session(session("retained-staged", 0))
        .await
        .unwrap();
    let all = events(&id, 1, total);
    // Batches smaller than a segment, as in the check above (the file store writes a batch
    // whole into its active segment, so a batch is the grain of its retention).
    for chunk in all.chunks(5) {
        stage.append(chunk).await.unwrap();
    }
    let stored = stage.commit().await.unwrap();
    let budget = max_bytes * u64::from(max_segments);
    for s in [store.clone(), b.open().await] {
        let st = s.event_log_state(&id).await.unwrap();
        assert_eq!(st.last_seq, total);
        assert_eq!(stored.acpx.event_log.last_seq, total);
        assert!(st.segment_count <= max_segments, "{st:?}");
        assert_eq!(stored.acpx.event_log.segment_count, st.segment_count);
        let page = read_all(&*s, &id).await;
        let oldest = page.events[0].seq;
        assert!(oldest > 1, "nothing was dropped beyond the budget");
        assert_eq!(page.oldest_seq, oldest);
        assert_contiguous(&page.events, oldest, total, "retained staged events");
        let bytes: u64 = page
            .events
            .iter()
            .map(|e| ndjson_line(e).len() as u64)
            .sum();
        assert!(
            bytes <= budget + max_bytes + 5 * line,
            "{bytes} bytes retained for a budget of {budget}"
        );
        assert!(
            bytes >= (u64::from(max_segments) - 1) * max_bytes / 2,
            "only {bytes} bytes retained for a budget of {budget}"
        );
    }
    store
        .append_locked(&id, &events(&id, total + 1, 3), Durability::Flush)
        .await
        .unwrap();
    assert_eq!(read_all(&*store, &id).await.last_seq, total + 3);
}
