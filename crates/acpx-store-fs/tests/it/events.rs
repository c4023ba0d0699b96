//! The event log of the file store: appends, durability, rotation, torn tails, damage, reads.

mod common;

use std::fs;
use std::io::Write;
use std::time::Duration;

use acpx_model::{Durability, EventQuery, EventStream, ReadMode, RecordId, Store, StoreError};
use acpx_store_fs::{FsStore, PENDING_LIMIT};
use common::*;

fn log_files(store: &FsStore, id: &RecordId) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(store.sessions_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| {
            n.starts_with(&format!("{id}.events"))
                && (n.ends_with(".ndjson") || n.ends_with(".ndjson.zst"))
        })
        .collect();
    v.sort();
    v
}

fn lines(path: &std::path::Path) -> Vec<String> {
    fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The lines of a compressed segment, decoded by the zstd library itself (not the store).
fn zst_lines(path: &std::path::Path) -> Vec<String> {
    let bytes = zstd::stream::decode_all(fs::File::open(path).unwrap()).unwrap();
    String::from_utf8(bytes)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn append_raw(store: &FsStore, id: &RecordId, bytes: &[u8]) {
    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(store.active_log_path(id))
        .unwrap();
    f.write_all(bytes).unwrap();
}

async fn read_all(store: &FsStore, id: &RecordId, mode: ReadMode) -> acpx_model::EventPage {
    store
        .read_events(
            id,
            &EventQuery {
                mode,
                ..EventQuery::default()
            },
        )
        .await
        .unwrap()
}

#[tokio::test]
async fn seq_must_continue_exactly_and_refused_batches_write_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let store = store(tmp.path());
    let a = id("a");
    store.create(&mut record(&a, "/r")).await.unwrap();
    let state = append_locked(&store, &a, &[], Durability::Flush)
        .await
        .unwrap();
    assert_eq!(state.last_seq, 0);
    append_locked(&store, &a, &events(&a, 1..=3, 5), Durability::Flush)
        .await
        .unwrap();
    for (batch, want_last, want_got) in [
        (events(&a, 5..=6, 5), 3, 5),                             // gap
        (events(&a, 3..=4, 5), 3, 3),                             // repeat
        (vec![event(&a, 4, "n", 1), event(&a, 6, "n", 1)], 4, 6), // gap inside the batch
        (events(&a, 0..=0, 5), 3, 0),
    ] {
        match append_locked(&store, &a, &batch, Durability::Flush).await {
            Err(StoreError::SeqMismatch { last, got, .. }) => {
                assert_eq!((last, got), (want_last, want_got))
            }
            other => panic!("expected SeqMismatch, got {other:?}"),
        }
    }
    let b = id("b");
    let foreign = vec![event(&a, 4, "n", 1), event(&b, 5, "n", 1)];
    assert!(matches!(
        append_locked(&store, &a, &foreign, Durability::Flush).await,
        Err(StoreError::InvalidArgument(_))
    ));
    assert_eq!(lines(&store.active_log_path(&a)).len(), 3);
    let state = append_locked(&store, &a, &events(&a, 4..=5, 5), Durability::Fsync)
        .await
        .unwrap();
    assert_eq!(state.last_seq, 5);
    assert_eq!(state.segment_count, 1);
    assert_eq!(state.format_version, 1);
    assert_eq!(
        state.active_path,
        store.active_log_path(&a).display().to_string()
    );
    assert!(state.last_write_at.is_some() && state.last_write_error.is_none());
    // Every line on disk is one envelope, in seq order.
    let on_disk: Vec<u64> = lines(&store.active_log_path(&a))
        .iter()
        .map(|l| {
            acpx_model::EventEnvelope::from_ndjson_line(l.as_bytes())
                .unwrap()
                .seq
        })
        .collect();
    assert_eq!(on_disk, [1, 2, 3, 4, 5]);
}

#[tokio::test]
async fn appends_from_two_instances_stay_in_sequence() {
    // Two store instances lock through flock like two processes; each must notice the
    // other's appends and rotations through its cached writer.
    let tmp = tempfile::tempdir().unwrap();
    let s1 = store_with(tmp.path(), 1_000, 4);
    let s2 = store_with(tmp.path(), 1_000, 4);
    let a = id("a");
    s1.create(&mut record(&a, "/r")).await.unwrap();
    let mut next = 1;
    for round in 0..30 {
        let (writer, other) = if round % 3 == 0 {
            (&s2, &s1)
        } else {
            (&s1, &s2)
        };
        let n = 1 + round % 3;
        let state = append_locked(
            writer,
            &a,
            &events(&a, next..=next + n - 1, 120),
            Durability::Flush,
        )
        .await
        .unwrap();
        next += n;
        assert_eq!(state.last_seq, next - 1);
        // The other instance's stale view is refused with the true last seq.
        match append_locked(
            other,
            &a,
            &events(&a, next - 1..=next - 1, 1),
            Durability::Flush,
        )
        .await
        {
            Err(StoreError::SeqMismatch { last, .. }) => assert_eq!(last, next - 1),
            other => panic!("expected SeqMismatch, got {other:?}"),
        }
    }
    let page = read_all(&s1, &a, ReadMode::Strict).await;
    assert_eq!(page.last_seq, next - 1);
    let got = seqs(&page.events);
    assert_eq!(got, (page.oldest_seq..next).collect::<Vec<_>>());
    assert!(log_files(&s1, &a).len() <= 4);
}

#[tokio::test]
async fn rotation_boundaries_retention_and_reading_from_the_middle() {
    let tmp = tempfile::tempdir().unwrap();
    let max_bytes = 1_000;
    let store = store_with(tmp.path(), max_bytes, 3);
    let a = id("a");
    store.create(&mut record(&a, "/r")).await.unwrap();
    let mut rotations = 0;
    let mut prev_count = 0;
    for seq in 1..=40 {
        let state = append_locked(
            &store,
            &a,
            &[event(&a, seq, "note", 100)],
            Durability::Flush,
        )
        .await
        .unwrap();
        let files = log_files(&store, &a);
        assert_eq!(
            state.segment_count as usize,
            files.len(),
            "seq {seq}: segment_count must count real files: {files:?}"
        );
        assert!(files.len() <= 3, "retention: {files:?}");
        let active_len = fs::metadata(store.active_log_path(&a)).unwrap().len();
        assert!(
            active_len <= max_bytes,
            "a full segment rotates right after the write"
        );
        if active_len == 0 {
            rotations += 1;
        }
        assert!(state.segment_count >= prev_count.min(3));
        prev_count = state.segment_count;
    }
    assert!(rotations >= 5, "only {rotations} rotations");
    assert_eq!(
        log_files(&store, &a),
        [
            "a.events.1.ndjson.zst",
            "a.events.2.ndjson.zst",
            "a.events.ndjson"
        ]
    );
    // The oldest segments were deleted; what is left is one contiguous run up to 40.
    let page = read_all(&store, &a, ReadMode::Strict).await;
    assert_eq!(page.last_seq, 40);
    assert!(page.oldest_seq > 1);
    assert_eq!(
        seqs(&page.events),
        (page.oldest_seq..=40).collect::<Vec<_>>()
    );
    // Reading from the middle, from each possible start.
    for from in page.oldest_seq..=41 {
        let p = store
            .read_events(&a, &EventQuery::from_seq(from))
            .await
            .unwrap();
        assert_eq!(
            seqs(&p.events),
            (from..=40).collect::<Vec<_>>(),
            "from {from}"
        );
        assert_eq!((p.oldest_seq, p.last_seq), (page.oldest_seq, 40));
    }
    // A batch larger than a segment is never split.
    let state = append_locked(&store, &a, &events(&a, 41..=50, 100), Durability::Flush)
        .await
        .unwrap();
    assert_eq!(state.last_seq, 50);
    let newest = zst_lines(&store.compressed_segment_path(&a, 1));
    let last_ten: Vec<u64> = newest
        .iter()
        .rev()
        .take(10)
        .map(|l| {
            acpx_model::EventEnvelope::from_ndjson_line(l.as_bytes())
                .unwrap()
                .seq
        })
        .collect();
    assert_eq!(last_ten, (41..=50).rev().collect::<Vec<_>>());
    assert_eq!(fs::metadata(store.active_log_path(&a)).unwrap().len(), 0);
    // A fresh instance derives the last seq from `.1` when the active segment is empty.
    let reopened = store_with(tmp.path(), max_bytes, 3);
    let st = reopened.event_log_state(&a).await.unwrap();
    assert_eq!((st.last_seq, st.segment_count), (50, 3));
    append_locked(
        &reopened,
        &a,
        &[event(&a, 51, "note", 1)],
        Durability::Flush,
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn two_segment_retention_and_the_one_segment_limit() {
    // With one segment, a rotation would leave nothing to read the last seq from, and the
    // next writer would reuse seqs: refused up front.
    let tmp = tempfile::tempdir().unwrap();
    let opts = acpx_store_fs::FsStoreOptions {
        max_segments: 1,
        ..Default::default()
    };
    assert!(matches!(
        FsStore::open_with(tmp.path(), opts),
        Err(StoreError::InvalidArgument(_))
    ));
    let store = store_with(tmp.path(), 500, 2);
    let a = id("a");
    store.create(&mut record(&a, "/r")).await.unwrap();
    for seq in 1..=12 {
        let st = append_locked(
            &store,
            &a,
            &[event(&a, seq, "note", 100)],
            Durability::Flush,
        )
        .await
        .unwrap();
        assert_eq!(st.segment_count as usize, log_files(&store, &a).len());
        assert!(st.segment_count <= 2);
    }
    let page = read_all(&store, &a, ReadMode::Strict).await;
    assert_eq!(page.last_seq, 12);
    assert!(page.oldest_seq > 1);
    // Whatever the rotation left in the active file, a fresh writer continues at 13.
    let reopened = store_with(tmp.path(), 500, 2);
    assert!(matches!(
        append_locked(
            &reopened,
            &a,
            &[event(&a, 12, "note", 1)],
            Durability::Flush
        )
        .await,
        Err(StoreError::SeqMismatch { last: 12, .. })
    ));
    append_locked(
        &reopened,
        &a,
        &[event(&a, 13, "note", 1)],
        Durability::Flush,
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn gaps_left_by_a_crash_mid_rotation_are_tolerated_and_closed() {
    let tmp = tempfile::tempdir().unwrap();
    let store = store_with(tmp.path(), 600, 4);
    let a = id("a");
    store.create(&mut record(&a, "/r")).await.unwrap();
    for seq in 1..=8 {
        append_locked(
            &store,
            &a,
            &[event(&a, seq, "note", 100)],
            Durability::Flush,
        )
        .await
        .unwrap();
    }
    let files = log_files(&store, &a);
    assert!(
        files.contains(&"a.events.1.ndjson.zst".to_owned()),
        "{files:?}"
    );
    // Simulate `rotate.after_shift`: `.1` moved to `.2` (and so on), active not yet moved.
    drop(store);
    for n in (1..=3).rev() {
        let from = tmp.path().join(format!("sessions/a.events.{n}.ndjson.zst"));
        if from.exists() {
            fs::rename(
                &from,
                tmp.path()
                    .join(format!("sessions/a.events.{}.ndjson.zst", n + 1)),
            )
            .unwrap();
        }
    }
    let store = store_with(tmp.path(), 600, 4);
    let page = read_all(&store, &a, ReadMode::Strict).await;
    assert_eq!(
        seqs(&page.events),
        (page.oldest_seq..=8).collect::<Vec<_>>()
    );
    let st = store.event_log_state(&a).await.unwrap();
    assert_eq!(st.last_seq, 8);
    for seq in 9..=20 {
        let st = append_locked(
            &store,
            &a,
            &[event(&a, seq, "note", 100)],
            Durability::Flush,
        )
        .await
        .unwrap();
        assert_eq!(st.segment_count as usize, log_files(&store, &a).len());
    }
    let page = read_all(&store, &a, ReadMode::Strict).await;
    assert_eq!(
        seqs(&page.events),
        (page.oldest_seq..=20).collect::<Vec<_>>()
    );
    let files = log_files(&store, &a);
    assert_eq!(files.len(), 4, "{files:?}");
    assert!(
        files.iter().all(|f| !f.contains(".5.")),
        "numbering compacted: {files:?}"
    );
}

#[tokio::test]
async fn torn_tail_is_withheld_reported_and_set_aside_before_the_next_append() {
    let tmp = tempfile::tempdir().unwrap();
    let store = store(tmp.path());
    let a = id("a");
    store.create(&mut record(&a, "/r")).await.unwrap();
    append_locked(&store, &a, &events(&a, 1..=5, 10), Durability::Flush)
        .await
        .unwrap();
    // A crash in the middle of writing event 6.
    let six = event(&a, 6, "note", 10).to_ndjson();
    let partial = &six.as_bytes()[..six.len() / 2];
    append_raw(&store, &a, partial);

    for mode in [ReadMode::Strict, ReadMode::Lenient] {
        let page = read_all(&store, &a, mode).await;
        assert_eq!(seqs(&page.events), [1, 2, 3, 4, 5]);
        assert_eq!(page.last_seq, 5);
        let torn = page.torn_tail.expect("torn tail reported");
        assert_eq!(torn.bytes, partial.len() as u64);
        assert_eq!(
            torn.location,
            store.active_log_path(&a).display().to_string()
        );
        assert!(page.damaged.is_empty());
    }
    assert_eq!(store.event_log_state(&a).await.unwrap().last_seq, 5);

    // The same instance appends next: its cached writer must notice the foreign bytes.
    let state = append_locked(&store, &a, &events(&a, 6..=7, 10), Durability::Flush)
        .await
        .unwrap();
    assert_eq!(state.last_seq, 7);
    for l in lines(&store.active_log_path(&a)) {
        acpx_model::EventEnvelope::from_ndjson_line(l.as_bytes()).expect("no glued line");
    }
    let page = read_all(&store, &a, ReadMode::Strict).await;
    assert_eq!(seqs(&page.events), [1, 2, 3, 4, 5, 6, 7]);
    assert!(page.torn_tail.is_none());
    let torn_files: Vec<_> = fs::read_dir(store.sessions_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("a.events.torn-")
        })
        .collect();
    assert_eq!(torn_files.len(), 1);
    assert_eq!(fs::read(&torn_files[0]).unwrap(), partial);
    assert_eq!(mode(&torn_files[0]), 0o600);
}

#[tokio::test]
async fn set_aside_torn_tail_on_demand() {
    let tmp = tempfile::tempdir().unwrap();
    let store = store(tmp.path());
    let a = id("a");
    store.create(&mut record(&a, "/r")).await.unwrap();
    assert_eq!(store.set_aside_torn_tail(&a).unwrap(), None, "no log yet");
    append_locked(&store, &a, &events(&a, 1..=2, 10), Durability::Flush)
        .await
        .unwrap();
    assert_eq!(store.set_aside_torn_tail(&a).unwrap(), None, "clean log");
    let before = fs::read(store.active_log_path(&a)).unwrap();
    append_raw(&store, &a, b"{\"eventVersion\":1,\"se");
    let t = store.set_aside_torn_tail(&a).unwrap().expect("moved");
    assert_eq!(t.bytes, 21);
    assert!(t.location.contains("a.events.torn-"), "{}", t.location);
    assert_eq!(fs::read(&t.location).unwrap(), b"{\"eventVersion\":1,\"se");
    assert_eq!(fs::read(store.active_log_path(&a)).unwrap(), before);
    assert_eq!(store.set_aside_torn_tail(&a).unwrap(), None);
}

#[tokio::test]
async fn torn_tail_with_no_complete_line_after_a_rotation() {
    let tmp = tempfile::tempdir().unwrap();
    let store = store_with(tmp.path(), 500, 3);
    let a = id("a");
    store.create(&mut record(&a, "/r")).await.unwrap();
    append_locked(&store, &a, &events(&a, 1..=3, 200), Durability::Flush)
        .await
        .unwrap();
    assert_eq!(fs::metadata(store.active_log_path(&a)).unwrap().len(), 0);
    append_raw(&store, &a, b"{\"eventVersion\"");
    let page = read_all(&store, &a, ReadMode::Strict).await;
    assert_eq!(seqs(&page.events), [1, 2, 3]);
    assert_eq!(page.torn_tail.map(|t| t.bytes), Some(15));
    let fresh = store_with(tmp.path(), 500, 3);
    let st = append_locked(&fresh, &a, &events(&a, 4..=4, 1), Durability::Flush)
        .await
        .unwrap();
    assert_eq!(st.last_seq, 4);
    let page = read_all(&fresh, &a, ReadMode::Strict).await;
    assert_eq!(seqs(&page.events), [1, 2, 3, 4]);
}

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
