//! The event log of the file store when its bytes are damaged: strict reads name the file and
//! line, lenient ones skip and report; then large logs read from the end, buffered appends and
//! the log state.

use crate::common;

use std::fs;
use std::time::Duration;

use crate::events::{lines, read_all};
use acpx_model::{Durability, EventQuery, EventStream, ReadMode, RecordId, Store, StoreError};
use acpx_store_fs::{FsStore, PENDING_LIMIT};
use common::*;

/// Writes `lines` as the whole active log of `id`.
fn write_log(store: &FsStore, id: &RecordId, lines: &[String]) {
    let mut text = lines.join("\n");
    text.push('\n');
    fs::write(store.active_log_path(id), text).unwrap();
}

#[tokio::test]
async fn damage_in_the_middle_strict_names_file_and_line_lenient_skips_and_reports() {
    let tmp = tempfile::tempdir().unwrap();
    let store = store(tmp.path());
    let a = id("a");
    let b = id("b");
    store.create(&mut record(&a, "/r")).await.unwrap();
    let ev = |seq| event(&a, seq, "note", 5).to_ndjson();
    let path = store.active_log_path(&a).display().to_string();
    // (lines, damaged line number, events lenient returns, reason word)
    let cases: Vec<(Vec<String>, u64, Vec<u64>, &str)> = vec![
        (
            vec![ev(1), ev(2), "{not json".into(), ev(3), ev(4)],
            3,
            vec![1, 2, 3, 4],
            "not a valid event",
        ),
        (
            vec![ev(1), ev(2), event(&b, 3, "note", 1).to_ndjson(), ev(3)],
            3,
            vec![1, 2, 3],
            "belongs to session b",
        ),
        (
            vec![ev(1), ev(2), ev(2), ev(3)],
            3,
            vec![1, 2, 3],
            "repeats",
        ),
        (
            vec![ev(1), ev(2), ev(4), ev(5)],
            3,
            vec![1, 2, 4, 5],
            "jumps",
        ),
        (
            vec![ev(1), String::new(), ev(2)],
            2,
            vec![1, 2],
            "not a valid event",
        ),
    ];
    for (lines, bad_line, lenient, word) in cases {
        write_log(&store, &a, &lines);
        match store.read_events(&a, &EventQuery::default()).await {
            Err(StoreError::Corrupt {
                location,
                line,
                reason,
            }) => {
                assert_eq!(location, path);
                assert_eq!(line, Some(bad_line), "{reason}");
                assert!(reason.contains(word), "{reason} lacks {word}");
            }
            other => panic!("{word}: expected Corrupt, got {other:?}"),
        }
        let page = read_all(&store, &a, ReadMode::Lenient).await;
        assert_eq!(seqs(&page.events), lenient, "{word}");
        assert_eq!(page.damaged.len(), 1, "{word}: {:?}", page.damaged);
        assert_eq!(page.damaged[0].line, bad_line);
        assert_eq!(page.damaged[0].location, path);
        assert!(page.torn_tail.is_none());
    }
}

/// A log full of damage costs a lenient page a bounded list: the first 100 damaged lines,
/// then one entry counting the rest, naming the last of them.
#[tokio::test]
async fn a_page_lists_a_bounded_number_of_damaged_lines() {
    let tmp = tempfile::tempdir().unwrap();
    let store = store(tmp.path());
    let a = id("a");
    store.create(&mut record(&a, "/r")).await.unwrap();
    let mut lines = vec![event(&a, 1, "n", 1).to_ndjson()];
    lines.extend((0..1_000).map(|i| format!("garbage {i}")));
    lines.push(event(&a, 2, "n", 1).to_ndjson());
    write_log(&store, &a, &lines);
    let page = read_all(&store, &a, ReadMode::Lenient).await;
    assert_eq!(seqs(&page.events), vec![1, 2]);
    assert_eq!(page.damaged.len(), 101, "{:?}", page.damaged.last());
    assert_eq!(page.damaged[99].line, 101);
    let rest = &page.damaged[100];
    assert_eq!(rest.line, 1_001, "the last damaged line");
    assert!(
        rest.reason.contains("900 more damaged lines"),
        "{}",
        rest.reason
    );
    assert_eq!(rest.lines, 900);
    let counted: u64 = page.damaged.iter().map(|d| d.lines).sum();
    assert_eq!(counted, 1_000, "every damaged line is counted");
}

/// Paged lenient reads, as fsck and `sessions events` make them (each page from the last one's
/// `next_seq`), count every damaged line once, however the damage falls around the pages'
/// ends and however much of it a page only counts.
#[tokio::test]
async fn paged_reads_count_each_damaged_line_once() {
    let tmp = tempfile::tempdir().unwrap();
    let store = store(tmp.path());
    let a = id("a");
    store.create(&mut record(&a, "/r")).await.unwrap();
    let mut lines = Vec::new();
    let mut garbage = 0u64;
    let mut junk = |lines: &mut Vec<String>, n: u64| {
        for i in 0..n {
            lines.push(format!("garbage {garbage} {i}"));
        }
        garbage += n;
    };
    junk(&mut lines, 30);
    for seq in 1..=3_000 {
        lines.push(event(&a, seq, "n", 1).to_ndjson());
        match seq {
            // Around the first page's end (limit 1,000): before the event it stops at, and
            // more than a page lists.
            999 | 1_000 => junk(&mut lines, 150),
            1_500 => junk(&mut lines, 20),
            2_000 => junk(&mut lines, 250),
            _ => {}
        }
    }
    junk(&mut lines, 5);
    write_log(&store, &a, &lines);
    let mut seen = std::collections::HashSet::new();
    let mut counted = 0;
    let mut events = 0;
    let mut from_seq = 0;
    loop {
        let page = store
            .read_events(
                &a,
                &EventQuery {
                    from_seq,
                    limit: Some(1_000),
                    mode: ReadMode::Lenient,
                    ..EventQuery::default()
                },
            )
            .await
            .unwrap();
        events += page.events.len();
        for d in &page.damaged {
            assert!(d.lines >= 1);
            if seen.insert((d.location.clone(), d.line)) {
                counted += d.lines;
            }
        }
        match page.next_seq {
            Some(n) => from_seq = n,
            None => break,
        }
    }
    assert_eq!(events, 3_000);
    assert_eq!(counted, garbage, "each damaged line counted once");
}

#[tokio::test]
async fn damaged_last_line_blocks_appends_with_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let store = store(tmp.path());
    let a = id("a");
    store.create(&mut record(&a, "/r")).await.unwrap();
    write_log(
        &store,
        &a,
        &[event(&a, 1, "n", 1).to_ndjson(), "garbage".into()],
    );
    match append_locked(&store, &a, &[event(&a, 2, "n", 1)], Durability::Flush).await {
        Err(StoreError::Corrupt { location, line, .. }) => {
            assert_eq!(location, store.active_log_path(&a).display().to_string());
            assert_eq!(line, Some(2));
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    assert_eq!(
        lines(&store.active_log_path(&a)).len(),
        2,
        "nothing appended"
    );
}

#[tokio::test]
async fn large_log_reads_from_the_end_filters_and_pages() {
    let tmp = tempfile::tempdir().unwrap();
    let store = store(tmp.path());
    let a = id("a");
    store.create(&mut record(&a, "/r")).await.unwrap();
    let total = 20_000u64;
    let mut next = 1;
    while next <= total {
        let batch: Vec<_> = (next..next + 500)
            .map(|s| {
                event(
                    &a,
                    s,
                    if s % 10 == 0 {
                        "lifecycle_event"
                    } else {
                        "note"
                    },
                    40,
                )
            })
            .collect();
        append_locked(&store, &a, &batch, Durability::None)
            .await
            .unwrap();
        next += 500;
    }
    let p = store
        .read_events(&a, &EventQuery::from_seq(total - 9))
        .await
        .unwrap();
    assert_eq!(seqs(&p.events), (total - 9..=total).collect::<Vec<_>>());
    assert_eq!((p.oldest_seq, p.last_seq), (1, total));

    // Damage far before the start is not read; damage after it is reported with its real line
    // number although the scan started in the middle of the file.
    let path = store.active_log_path(&a);
    let mut all = lines(&path);
    all[15_000 - 1] = "{damaged".into();
    write_log(&store, &a, &all);
    let p = store
        .read_events(&a, &EventQuery::from_seq(19_000))
        .await
        .unwrap();
    assert_eq!(p.events.len(), 1_001);
    let p = store
        .read_events(
            &a,
            &EventQuery {
                from_seq: 14_990,
                mode: ReadMode::Lenient,
                ..EventQuery::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(p.damaged.len(), 1);
    assert_eq!(p.damaged[0].line, 15_000);
    match store.read_events(&a, &EventQuery::from_seq(14_990)).await {
        Err(StoreError::Corrupt { line, .. }) => assert_eq!(line, Some(15_000)),
        other => panic!("expected Corrupt, got {other:?}"),
    }

    // Filters and pages: every 10th event is a lifecycle event.
    let mut q = EventQuery {
        from_seq: 18_001,
        streams: vec![EventStream::Lifecycle],
        limit: Some(30),
        ..EventQuery::default()
    };
    let mut got = Vec::new();
    loop {
        let p = store.read_events(&a, &q).await.unwrap();
        assert!(p.events.len() <= 30);
        got.extend(seqs(&p.events));
        match p.next_seq {
            Some(n) => q.from_seq = n,
            None => break,
        }
    }
    assert_eq!(got, (18_010..=total).step_by(10).collect::<Vec<_>>());
    let p = store
        .read_events(
            &a,
            &EventQuery {
                from_seq: 19_990,
                types: vec!["note".into()],
                request_id: Some("req_even".into()),
                ..EventQuery::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(seqs(&p.events), [19_992, 19_994, 19_996, 19_998]);
}

#[tokio::test]
async fn durability_none_buffers_while_locked_and_is_written_out() {
    let tmp = tempfile::tempdir().unwrap();
    let store = store(tmp.path());
    let observer = FsStore::open(tmp.path()).unwrap();
    let a = id("a");
    store.create(&mut record(&a, "/r")).await.unwrap();
    let on_disk = || async { observer.event_log_state(&a).await.unwrap().last_seq };

    // Without a held lock, None is written before the call returns (the lock is released).
    append_locked(&store, &a, &events(&a, 1..=2, 10), Durability::None)
        .await
        .unwrap();
    assert_eq!(on_disk().await, 2);

    let guard = store.lock(&a, Duration::from_secs(5)).await.unwrap();
    let st = store
        .append(&guard, &events(&a, 3..=4, 10), Durability::None)
        .await
        .unwrap();
    assert_eq!(st.last_seq, 4, "the returned state counts buffered events");
    // Buffered appends are checked like any other.
    assert!(matches!(
        store
            .append(&guard, &events(&a, 4..=4, 10), Durability::None)
            .await,
        Err(StoreError::SeqMismatch {
            last: 4,
            got: 4,
            ..
        })
    ));
    assert_eq!(on_disk().await, 2, "buffered, not yet written");
    assert_eq!(store.event_log_state(&a).await.unwrap().last_seq, 4);
    // A read through the buffering store writes the buffer out first.
    let page = store.read_events(&a, &EventQuery::default()).await.unwrap();
    assert_eq!(seqs(&page.events), [1, 2, 3, 4]);
    assert_eq!(on_disk().await, 4);

    store
        .append(&guard, &events(&a, 5..=6, 10), Durability::None)
        .await
        .unwrap();
    store.flush(&a).await.unwrap();
    assert_eq!(on_disk().await, 6);

    // A Flush append after buffered ones writes both, in order.
    store
        .append(&guard, &events(&a, 7..=7, 10), Durability::None)
        .await
        .unwrap();
    store
        .append(&guard, &events(&a, 8..=8, 10), Durability::Flush)
        .await
        .unwrap();
    assert_eq!(on_disk().await, 8);

    // The buffer is bounded.
    let big: Vec<_> = (9..=9 + (PENDING_LIMIT as u64 / 500))
        .map(|s| event(&a, s, "n", 600))
        .collect();
    let last = big.last().unwrap().seq;
    store.append(&guard, &big, Durability::None).await.unwrap();
    assert_eq!(
        on_disk().await,
        last,
        "more than the limit is written at once"
    );

    store
        .append(
            &guard,
            &events(&a, last + 1..=last + 3, 10),
            Durability::None,
        )
        .await
        .unwrap();
    assert_eq!(on_disk().await, last);
    drop(guard);
    assert_eq!(
        on_disk().await,
        last + 3,
        "released lock writes the buffer out"
    );
    let page = observer
        .read_events(&a, &EventQuery::default())
        .await
        .unwrap();
    assert_eq!(seqs(&page.events), (1..=last + 3).collect::<Vec<_>>());
    assert!(matches!(
        store.flush(&id("nope")).await,
        Err(StoreError::NotFound(_))
    ));
}

#[tokio::test]
async fn event_log_state_matches_the_files() {
    let tmp = tempfile::tempdir().unwrap();
    let store = store_with(tmp.path(), 800, 3);
    let a = id("a");
    store.create(&mut record(&a, "/r")).await.unwrap();
    let st = store.event_log_state(&a).await.unwrap();
    assert_eq!((st.last_seq, st.segment_count), (0, 0));
    let mut appended = None;
    for seq in 1..=9 {
        appended = Some(
            append_locked(
                &store,
                &a,
                &[event(&a, seq, "note", 100)],
                Durability::Fsync,
            )
            .await
            .unwrap(),
        );
    }
    let appended = appended.unwrap();
    let fresh = store_with(tmp.path(), 800, 3);
    let inspected = fresh.event_log_state(&a).await.unwrap();
    assert_eq!(inspected.last_seq, appended.last_seq);
    assert_eq!(inspected.segment_count, appended.segment_count);
    assert_eq!(inspected.active_path, appended.active_path);
    assert_eq!(
        (inspected.max_segment_bytes, inspected.max_segments),
        (800, 3)
    );
    assert!(inspected.last_write_at.is_some());
    assert!(matches!(
        store.event_log_state(&id("nope")).await,
        Err(StoreError::NotFound(_))
    ));
}

#[tokio::test]
async fn concurrent_tasks_append_gap_free() {
    let tmp = tempfile::tempdir().unwrap();
    let store = store(tmp.path());
    let other = FsStore::open(tmp.path()).unwrap();
    let a = id("a");
    store.create(&mut record(&a, "/r")).await.unwrap();
    let mut tasks = Vec::new();
    for t in 0..8 {
        let s = if t % 2 == 0 {
            store.clone()
        } else {
            other.clone()
        };
        let a = a.clone();
        tasks.push(tokio::spawn(async move {
            let mut mine = 0;
            while mine < 25 {
                let g = s.lock(&a, Duration::from_secs(30)).await.unwrap();
                let last = s.event_log_state(&a).await.unwrap().last_seq;
                s.append(&g, &[event(&a, last + 1, "note", 20)], Durability::Flush)
                    .await
                    .unwrap();
                mine += 1;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let page = read_all(&store, &a, ReadMode::Strict).await;
    assert_eq!(seqs(&page.events), (1..=200).collect::<Vec<_>>());
}
