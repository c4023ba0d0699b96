//! Compressed closed segments (`<id>.events.<n>.ndjson.zst`): rotation writes them, every
//! reader reads them (alone, next to plain segments of earlier versions, and next to the plain
//! copy a crash left), damage is reported, `keep_rotated_segments` keeps them, delete removes
//! them.

use crate::common;

use std::fs;
use std::path::{Path, PathBuf};

use acpx_model::{Durability, EventQuery, ReadMode, RecordId, Store, StoreError};
use acpx_store_fs::{FsStore, FsStoreOptions};
use common::*;

fn names(store: &FsStore, id: &RecordId) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(store.sessions_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with(&format!("{id}.events")))
        .collect();
    v.sort();
    v
}

fn zst_paths(store: &FsStore, id: &RecordId) -> Vec<(u32, PathBuf)> {
    (1..200)
        .map(|n| (n, store.compressed_segment_path(id, n)))
        .filter(|(_, p)| p.exists())
        .collect()
}

/// Decodes with the zstd library itself, not the store's reader.
fn decode(path: &Path) -> Vec<u8> {
    zstd::stream::decode_all(fs::File::open(path).unwrap()).unwrap()
}

fn read(store: &FsStore, id: &RecordId, q: &EventQuery) -> acpx_model::EventPage {
    store.blocking().read_events(id, q).unwrap()
}

fn all(store: &FsStore, id: &RecordId, mode: ReadMode) -> acpx_model::EventPage {
    read(
        store,
        id,
        &EventQuery {
            mode,
            ..EventQuery::default()
        },
    )
}

/// Appends events one by one until `rotations` rotations happened; returns the last seq.
fn fill(store: &FsStore, id: &RecordId, from: u64, rotations: usize, pad: usize) -> u64 {
    let mut seq = from;
    let mut seen = 0;
    while seen < rotations {
        let st =
            append_blocking(store, id, &[event(id, seq, "note", pad)], Durability::Flush).unwrap();
        assert!(st.last_write_error.is_none(), "{st:?}");
        if fs::metadata(store.active_log_path(id)).unwrap().len() == 0 {
            seen += 1;
        }
        seq += 1;
    }
    seq - 1
}

#[test]
fn rotation_leaves_only_compressed_older_segments_that_read_from_every_seq() {
    let tmp = tempfile::tempdir().unwrap();
    let s = store_with(tmp.path(), 1_500, 4);
    let a = id("a");
    s.blocking().create(&mut record(&a, "/r")).unwrap();
    let last = fill(&s, &a, 1, 6, 100);
    assert_eq!(
        names(&s, &a),
        [
            "a.events.1.ndjson.zst",
            "a.events.2.ndjson.zst",
            "a.events.3.ndjson.zst",
            "a.events.ndjson"
        ]
    );
    // The active segment is empty right after the rotation: a fresh store derives the last
    // seq from the compressed `.1`, reads it, and appends after it.
    let fresh = store_with(tmp.path(), 1_500, 4);
    let st = fresh.blocking().event_log_state(&a).unwrap();
    assert_eq!((st.last_seq, st.segment_count), (last, 4));
    let page = all(&fresh, &a, ReadMode::Strict);
    assert_eq!(page.last_seq, last);
    assert!(page.oldest_seq > 1);
    assert_eq!(
        seqs(&page.events),
        (page.oldest_seq..=last).collect::<Vec<_>>()
    );
    for from in 0..=last + 1 {
        let p = read(&fresh, &a, &EventQuery::from_seq(from));
        let want: Vec<u64> = (from.max(page.oldest_seq)..=last).collect();
        assert_eq!(seqs(&p.events), want, "from {from}");
        assert_eq!((p.oldest_seq, p.last_seq), (page.oldest_seq, last));
    }
    // Paging with a limit crosses segment (and frame) boundaries.
    let mut from = 0;
    let mut paged = Vec::new();
    loop {
        let p = read(
            &fresh,
            &a,
            &EventQuery {
                from_seq: from,
                limit: Some(3),
                ..EventQuery::default()
            },
        );
        paged.extend(seqs(&p.events));
        match p.next_seq {
            Some(n) => from = n,
            None => break,
        }
    }
    assert_eq!(paged, seqs(&page.events));
    // What is on disk is the original NDJSON, in standard zstd.
    let mut bytes = Vec::new();
    for (_, p) in zst_paths(&s, &a).iter().rev() {
        bytes.extend(decode(p));
    }
    let want: String = page.events.iter().map(|e| e.to_ndjson() + "\n").collect();
    assert_eq!(String::from_utf8(bytes).unwrap(), want);
    append_blocking(
        &fresh,
        &a,
        &[event(&a, last + 1, "note", 1)],
        Durability::Flush,
    )
    .unwrap();
}

#[test]
fn large_segments_are_read_from_the_frame_that_holds_the_seq() {
    let tmp = tempfile::tempdir().unwrap();
    let s = store_with(tmp.path(), 3 << 20, 3);
    let a = id("a");
    s.blocking().create(&mut record(&a, "/r")).unwrap();
    let mut seq = 1;
    while !s.compressed_segment_path(&a, 1).exists() {
        append_blocking(
            &s,
            &a,
            &events(&a, seq..=seq + 199, 1_000),
            Durability::None,
        )
        .unwrap();
        seq += 200;
    }
    let last = seq - 1;
    let z = s.compressed_segment_path(&a, 1);
    let plain_len = decode(&z).len() as u64;
    assert!(plain_len > 3 << 20);
    assert!(
        fs::metadata(&z).unwrap().len() < plain_len / 4,
        "compressed"
    );
    for from in (1..=last).step_by(997).chain([last, last - 1, 2]) {
        let p = read(
            &s,
            &a,
            &EventQuery {
                from_seq: from,
                limit: Some(5),
                ..EventQuery::default()
            },
        );
        let want: Vec<u64> = (from..=last).take(5).collect();
        assert_eq!(seqs(&p.events), want, "from {from}");
    }
}

/// Rewrites every compressed segment of `id` as the plain file an earlier version kept
/// (`keep_zst`: also leave the compressed one, as a crash between compressing and removing
/// the plain file does).
fn unpack(s: &FsStore, id: &RecordId, keep_zst: bool) {
    for (n, z) in zst_paths(s, id) {
        fs::write(s.segment_path(id, n), decode(&z)).unwrap();
        if !keep_zst {
            fs::remove_file(&z).unwrap();
        }
    }
}

#[test]
fn plain_older_segments_of_earlier_versions_and_crash_leftovers_read_once_and_get_compressed() {
    for keep_zst in [false, true] {
        let tmp = tempfile::tempdir().unwrap();
        let s = store_with(tmp.path(), 1_500, 5);
        let a = id("a");
        s.blocking().create(&mut record(&a, "/r")).unwrap();
        let last = fill(&s, &a, 1, 3, 100);
        let before = all(&s, &a, ReadMode::Strict);
        unpack(&s, &a, keep_zst);
        // Mixed: `.1` stays plain only, the others both (or plain only).
        if keep_zst {
            fs::remove_file(s.compressed_segment_path(&a, 1)).unwrap();
        }
        let fresh = store_with(tmp.path(), 1_500, 5);
        let page = all(&fresh, &a, ReadMode::Strict);
        assert_eq!(
            seqs(&page.events),
            seqs(&before.events),
            "keep_zst {keep_zst}"
        );
        assert!(page.damaged.is_empty());
        for from in [1, 3, last / 2, last] {
            let p = read(&fresh, &a, &EventQuery::from_seq(from));
            assert_eq!(seqs(&p.events), (from..=last).collect::<Vec<_>>());
        }
        let st = fresh.blocking().event_log_state(&a).unwrap();
        assert_eq!((st.last_seq, st.segment_count), (last, 4));
        // The next rotation compresses every plain older segment and removes the copies.
        let last = fill(&fresh, &a, last + 1, 1, 100);
        let files = names(&fresh, &a);
        assert!(
            files
                .iter()
                .all(|n| n == "a.events.ndjson" || n.ends_with(".ndjson.zst")),
            "{files:?}"
        );
        let page = all(&fresh, &a, ReadMode::Strict);
        assert_eq!(
            seqs(&page.events),
            (page.oldest_seq..=last).collect::<Vec<_>>()
        );
    }
}

/// A compression a crash cut short (the plain segment and an empty temp file left): the next
/// writer of the session finishes it at once, without waiting for a rotation.
#[test]
fn the_next_writer_finishes_a_compression_a_crash_cut_short() {
    let tmp = tempfile::tempdir().unwrap();
    let s = store_with(tmp.path(), 1_500, 5);
    let a = id("a");
    s.blocking().create(&mut record(&a, "/r")).unwrap();
    let last = fill(&s, &a, 1, 2, 100);
    unpack(&s, &a, false);
    let tmp_file = s.sessions_dir().join("a.events.1.ndjson.zst.tmp");
    fs::write(&tmp_file, b"").unwrap();
    let fresh = store_with(tmp.path(), 1_500, 5);
    append_blocking(
        &fresh,
        &a,
        &[event(&a, last + 1, "note", 1)],
        Durability::Flush,
    )
    .unwrap();
    let files = names(&fresh, &a);
    assert!(
        files
            .iter()
            .all(|n| n == "a.events.ndjson" || n.ends_with(".ndjson.zst")),
        "{files:?}"
    );
    assert!(!tmp_file.exists());
    let page = all(&fresh, &a, ReadMode::Strict);
    assert_eq!(
        seqs(&page.events),
        (page.oldest_seq..=last + 1).collect::<Vec<_>>()
    );
}

#[test]
fn damaged_compressed_segments_are_reported_and_the_rest_still_reads() {
    let tmp = tempfile::tempdir().unwrap();
    let s = store_with(tmp.path(), 1_500, 5);
    let a = id("a");
    s.blocking().create(&mut record(&a, "/r")).unwrap();
    let last = fill(&s, &a, 1, 4, 100);
    append_blocking(
        &s,
        &a,
        &[event(&a, last + 1, "note", 10)],
        Durability::Flush,
    )
    .unwrap();
    let last = last + 1;
    let z2 = s.compressed_segment_path(&a, 2);
    let z2_lines = decode(&z2)
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .count();
    // A flipped byte inside the data frame of `.2`: its checksum no longer matches.
    let mut bytes = fs::read(&z2).unwrap();
    bytes[20] ^= 0x55;
    fs::write(&z2, &bytes).unwrap();
    let loc = z2.display().to_string();
    match s.blocking().read_events(&a, &EventQuery::default()) {
        Err(StoreError::Corrupt {
            location,
            line,
            reason,
        }) => {
            assert_eq!(location, loc);
            assert_eq!(line, Some(1));
            assert!(reason.contains("cannot be decompressed"), "{reason}");
        }
        other => panic!("strict read of a damaged .zst: {other:?}"),
    }
    let page = all(&s, &a, ReadMode::Lenient);
    assert_eq!(page.damaged.len(), 1, "{:?}", page.damaged);
    assert_eq!(page.damaged[0].location, loc);
    let got = seqs(&page.events);
    assert_eq!(
        got.len() as u64,
        last - page.oldest_seq + 1 - z2_lines as u64
    );
    assert_eq!(got.last(), Some(&last));

    // Cut in half: the index is gone, the stream ends mid-frame.
    let z3 = s.compressed_segment_path(&a, 3);
    let bytes = fs::read(&z3).unwrap();
    fs::write(&z3, &bytes[..bytes.len() / 2]).unwrap();
    let page = all(&s, &a, ReadMode::Lenient);
    let z3_loc = z3.display().to_string();
    let cut = page
        .damaged
        .iter()
        .find(|d| d.location == z3_loc)
        .unwrap_or_else(|| panic!("{:?}", page.damaged));
    assert!(
        cut.reason.contains("cannot be decompressed"),
        "{}",
        cut.reason
    );
    assert_eq!(page.events.last().map(|e| e.seq), Some(last));

    // Garbage where `.1` was, while the active segment is empty: appends are refused with an
    // error that names the file, instead of guessing the next seq.
    let fresh = store_with(tmp.path(), 1_500, 5);
    let before = fill(&fresh, &a, last + 1, 1, 100);
    let z1 = fresh.compressed_segment_path(&a, 1);
    fs::write(&z1, b"not zstd at all\n").unwrap();
    let fresh = store_with(tmp.path(), 1_500, 5);
    match append_blocking(
        &fresh,
        &a,
        &[event(&a, before + 1, "note", 1)],
        Durability::Flush,
    ) {
        Err(StoreError::Corrupt { location, .. }) => assert_eq!(location, z1.display().to_string()),
        other => panic!("append after a damaged last segment: {other:?}"),
    }
}

/// Small segments, every rotated one kept.
fn keep_everything() -> FsStoreOptions {
    FsStoreOptions {
        max_segment_bytes: 1_000,
        max_segments: 3,
        keep_rotated_segments: true,
        ..FsStoreOptions::default()
    }
}

#[test]
fn keep_rotated_segments_keeps_every_segment_compressed_and_delete_removes_them_all() {
    let tmp = tempfile::tempdir().unwrap();
    let opts = keep_everything();
    let s = FsStore::open_with(tmp.path(), opts.clone()).unwrap();
    let a = id("a");
    let b = id("b");
    for x in [&a, &b] {
        s.blocking().create(&mut record(x, "/r")).unwrap();
    }
    let last = fill(&s, &a, 1, 9, 100);
    fill(&s, &b, 1, 2, 100);
    let zst = zst_paths(&s, &a);
    assert_eq!(zst.len(), 9, "{:?}", names(&s, &a));
    assert!(names(&s, &a)
        .iter()
        .all(|n| n == "a.events.ndjson" || n.ends_with(".zst")));
    let st = s.blocking().event_log_state(&a).unwrap();
    assert_eq!((st.segment_count, st.last_seq), (10, last));
    let fresh = FsStore::open_with(tmp.path(), opts).unwrap();
    let page = all(&fresh, &a, ReadMode::Strict);
    assert_eq!(page.oldest_seq, 1);
    assert_eq!(seqs(&page.events), (1..=last).collect::<Vec<_>>());
    let p = read(&fresh, &a, &EventQuery::from_seq(2));
    assert_eq!(seqs(&p.events), (2..=last).collect::<Vec<_>>());
    // Debris of an interrupted compression goes with the session.
    fs::write(
        tmp.path().join("sessions/a.events.4.ndjson.zst.tmp"),
        b"partial",
    )
    .unwrap();
    assert!(fresh.blocking().delete(&a).unwrap());
    assert_eq!(names(&fresh, &a), Vec::<String>::new());
    assert!(
        !names(&fresh, &b).is_empty(),
        "the other session is untouched"
    );
    let page = all(&fresh, &b, ReadMode::Strict);
    assert!(!page.events.is_empty());
}

#[tokio::test]
async fn the_default_window_still_deletes_beyond_max_segments() {
    let tmp = tempfile::tempdir().unwrap();
    let s = store_with(tmp.path(), 1_000, 3);
    let a = id("a");
    s.create(&mut record(&a, "/r")).await.unwrap();
    fill(&s, &a, 1, 8, 100);
    assert_eq!(zst_paths(&s, &a).len(), 2);
    assert!(s.delete(&a).await.unwrap());
    assert_eq!(names(&s, &a), Vec::<String>::new());
}

/// Every flipped byte and every cut of a compressed segment is either harmless (a damaged
/// index is ignored and the frames decoded as a stream) or damage reported against the file:
/// never a panic, an I/O error, or an event read twice.
#[test]
fn any_flipped_byte_or_cut_of_a_compressed_segment_is_reported_not_fatal() {
    let tmp = tempfile::tempdir().unwrap();
    let s = store_with(tmp.path(), 1_500, 3);
    let a = id("a");
    s.blocking().create(&mut record(&a, "/r")).unwrap();
    let last = fill(&s, &a, 1, 3, 100);
    append_blocking(
        &s,
        &a,
        &[event(&a, last + 1, "note", 10)],
        Durability::Flush,
    )
    .unwrap();
    let z = s.compressed_segment_path(&a, 2);
    let good = fs::read(&z).unwrap();
    let len = good.len();
    let mut variants: Vec<Vec<u8>> = Vec::new();
    for at in (0..len).step_by(7).chain(len.saturating_sub(40)..len) {
        let mut b = good.clone();
        b[at] ^= 0xA5;
        variants.push(b);
    }
    for cut in (0..len).step_by(11) {
        variants.push(good[..cut].to_vec());
    }
    for bytes in variants {
        fs::write(&z, &bytes).unwrap();
        let lenient = all(&s, &a, ReadMode::Lenient);
        let got = seqs(&lenient.events);
        assert!(got.windows(2).all(|w| w[0] < w[1]), "{got:?}");
        assert_eq!(got.last(), Some(&(last + 1)));
        match s.blocking().read_events(&a, &EventQuery::default()) {
            Ok(_) => {}
            Err(StoreError::Corrupt { location, .. }) => {
                assert_eq!(location, z.display().to_string())
            }
            Err(e) => panic!("{e}"),
        }
    }
}

/// The log's state is read from the newest segments and the others are counted by `stat`:
/// a gap a crash left in the numbering is stepped over, a segment whose compression a crash
/// interrupted (plain and compressed both there) counts once, and a symbolic link is an error
/// naming it. (An empty active segment, which sends the read of the last seq to `.1`:
/// `events.rs`.)
#[test]
fn the_log_state_counts_segments_across_gaps_and_interrupted_compressions() {
    let tmp = tempfile::tempdir().unwrap();
    let opts = keep_everything();
    let s = FsStore::open_with(tmp.path(), opts.clone()).unwrap();
    let a = id("a");
    s.blocking().create(&mut record(&a, "/r")).unwrap();
    let last = fill(&s, &a, 1, 9, 100);
    let state = |opts: &FsStoreOptions| {
        let fresh = FsStore::open_with(tmp.path(), opts.clone()).unwrap();
        let st = fresh.blocking().event_log_state(&a).unwrap();
        (st.segment_count, st.last_seq)
    };
    assert_eq!(state(&opts), (10, last));
    // A gap: the oldest segment one index up, as a crash in the middle of a rotation leaves.
    let z9 = s.compressed_segment_path(&a, 9);
    fs::rename(&z9, s.compressed_segment_path(&a, 10)).unwrap();
    // An interrupted compression: segment 3 both plain and compressed.
    fs::write(
        s.segment_path(&a, 3),
        decode(&s.compressed_segment_path(&a, 3)),
    )
    .unwrap();
    assert_eq!(state(&opts), (10, last));
    let page = all(&s, &a, ReadMode::Strict);
    assert_eq!(seqs(&page.events), (1..=last).collect::<Vec<_>>());
    // A segment counted without being opened is still never a link followed: the error
    // names it, as a read's would.
    let link = s.segment_path(&a, 11);
    std::os::unix::fs::symlink(s.active_log_path(&a), &link).unwrap();
    let fresh = FsStore::open_with(tmp.path(), opts).unwrap();
    match fresh.blocking().event_log_state(&a) {
        Err(StoreError::Corrupt {
            location, reason, ..
        }) => {
            assert_eq!(location, link.display().to_string());
            assert!(reason.contains("symbolic link"), "{reason}");
        }
        other => panic!("a link among the segments: {other:?}"),
    }
}
