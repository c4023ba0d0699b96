//! The event log of the file store: appends, durability, rotation, torn tails, damage, reads.

use crate::common;

use std::fs;
use std::io::Write;

use acpx_model::{Durability, EventQuery, ReadMode, RecordId, Store, StoreError};
use acpx_store_fs::FsStore;
use common::*;

pub(crate) fn log_files(store: &FsStore, id: &RecordId) -> Vec<String> {
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

pub(crate) fn lines(path: &std::path::Path) -> Vec<String> {
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

pub(crate) fn append_raw(store: &FsStore, id: &RecordId, bytes: &[u8]) {
    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(store.active_log_path(id))
        .unwrap();
    f.write_all(bytes).unwrap();
}

pub(crate) async fn read_all(
    store: &FsStore,
    id: &RecordId,
    mode: ReadMode,
) -> acpx_model::EventPage {
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
