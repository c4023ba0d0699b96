//! Rotation at a turn's end (`FsStoreOptions::turn_end_rotate_bytes`): a batch holding
//! `prompt_done` or `prompt_error` rotates (and so compresses) an active segment that holds at
//! least that many bytes, and retention then keeps more of the smaller closed segments, so that
//! they hold the same window as a few full ones.

use crate::common;

use std::fs;

use acpx_model::{Durability, EventQuery, ReadMode, RecordId};
use acpx_store_fs::{FsStore, FsStoreOptions, TURN_END_ROTATE_MAX_OLDER};
use common::*;

fn store_opts(dir: &std::path::Path, max: u64, segments: u32, turn_end: u64) -> FsStore {
    FsStore::open_with(
        dir,
        FsStoreOptions {
            max_segment_bytes: max,
            max_segments: segments,
            turn_end_rotate_bytes: turn_end,
            ..FsStoreOptions::default()
        },
    )
    .unwrap()
}

/// Older segment files of `id` (index, compressed?), ascending.
fn older(store: &FsStore, id: &RecordId) -> Vec<(u32, bool)> {
    let mut v: Vec<(u32, bool)> = fs::read_dir(store.sessions_dir())
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            let rest = name.strip_prefix(&format!("{id}.events."))?;
            let (n, ext) = rest.split_once('.')?;
            Some((n.parse().ok()?, ext == "ndjson.zst"))
        })
        .collect();
    v.sort();
    v
}

/// One turn: `notes` events of about `pad` bytes, then `prompt_done`, appended as the runtime
/// does (the turn's events buffered, the end flushed). Returns the next seq.
fn turn(store: &FsStore, id: &RecordId, from: u64, notes: u64, pad: usize) -> u64 {
    let body = events(id, from..=from + notes - 1, pad);
    append_blocking(store, id, &body, Durability::None).unwrap();
    let end = [event(id, from + notes, "prompt_done", 10)];
    let st = append_blocking(store, id, &end, Durability::Flush).unwrap();
    assert!(st.last_write_error.is_none(), "{st:?}");
    from + notes + 1
}

fn all_seqs(store: &FsStore, id: &RecordId) -> Vec<u64> {
    let page = store
        .blocking()
        .read_events(
            id,
            &EventQuery {
                mode: ReadMode::Strict,
                ..EventQuery::default()
            },
        )
        .unwrap();
    seqs(&page.events)
}

#[test]
fn a_turn_end_past_the_threshold_rotates_and_compresses_the_active_segment() {
    let tmp = tempfile::tempdir().unwrap();
    let s = store_opts(tmp.path(), 1_000_000, 5, 10_000);
    let a = id("a");
    s.blocking().create(&mut record(&a, "/r")).unwrap();
    // A small turn stays in the active segment.
    let next = turn(&s, &a, 1, 5, 100);
    assert!(older(&s, &a).is_empty());
    // A turn that brings the segment past the threshold closes it at its end, compressed.
    let next = turn(&s, &a, next, 60, 300);
    assert_eq!(older(&s, &a), [(1, true)]);
    assert_eq!(fs::metadata(s.active_log_path(&a)).unwrap().len(), 0);
    let st = s.blocking().event_log_state(&a).unwrap();
    assert_eq!((st.last_seq, st.segment_count), (next - 1, 2));
    // Events within a turn never rotate early, however large the segment.
    let body = events(&a, next..=next + 99, 300);
    append_blocking(&s, &a, &body, Durability::Flush).unwrap();
    assert_eq!(older(&s, &a), [(1, true)]);
    let next = next + 100;
    let err = [event(&a, next, "prompt_error", 10)];
    append_blocking(&s, &a, &err, Durability::Flush).unwrap();
    assert_eq!(older(&s, &a), [(1, true), (2, true)]);
    assert_eq!(all_seqs(&s, &a), (1..=next).collect::<Vec<_>>());
    // A fresh store derives the last seq from the compressed `.1` and appends after it.
    let fresh = store_opts(tmp.path(), 1_000_000, 5, 10_000);
    let next = turn(&fresh, &a, next + 1, 2, 10);
    assert_eq!(all_seqs(&fresh, &a), (1..next).collect::<Vec<_>>());
}

#[test]
fn a_buffered_turn_end_rotates_when_it_is_written_out() {
    let tmp = tempfile::tempdir().unwrap();
    let s = store_opts(tmp.path(), 1_000_000, 5, 10_000);
    let a = id("a");
    s.blocking().create(&mut record(&a, "/r")).unwrap();
    let mut body = events(&a, 1..=40, 300);
    body.push(event(&a, 41, "prompt_done", 10));
    let core = s.blocking();
    let writer = core.lock(&a, s.options().lock_timeout).unwrap();
    core.append(&writer, &body, Durability::None).unwrap();
    assert!(older(&s, &a).is_empty());
    core.flush(&a).unwrap();
    assert_eq!(older(&s, &a), [(1, true)]);
    drop(writer);
    assert_eq!(all_seqs(&s, &a), (1..=41).collect::<Vec<_>>());
}

#[test]
fn zero_turns_turn_end_rotation_off() {
    let tmp = tempfile::tempdir().unwrap();
    let s = store_opts(tmp.path(), 1_000_000, 5, 0);
    let a = id("a");
    s.blocking().create(&mut record(&a, "/r")).unwrap();
    let mut next = 1;
    for _ in 0..5 {
        next = turn(&s, &a, next, 60, 300);
    }
    assert!(older(&s, &a).is_empty());
}

#[test]
fn retention_counts_bytes_so_small_closed_segments_keep_the_whole_window() {
    let tmp = tempfile::tempdir().unwrap();
    // Window: (3 − 1) × 20,000 bytes of closed segments; every turn (about 3.7 kB) rotates.
    let (max, segments) = (20_000u64, 3u32);
    let s = store_opts(tmp.path(), max, segments, 3_000);
    let a = id("a");
    s.blocking().create(&mut record(&a, "/r")).unwrap();
    let mut next = 1;
    for _ in 0..40 {
        next = turn(&s, &a, next, 10, 300);
        let kept = older(&s, &a);
        assert!(kept.iter().all(|&(_, z)| z), "{kept:?}");
        let n: Vec<u32> = kept.iter().map(|&(n, _)| n).collect();
        assert_eq!(n, (1..=kept.len() as u32).collect::<Vec<_>>());
    }
    let kept = older(&s, &a).len() as u64;
    let seqs = all_seqs(&s, &a);
    let oldest = seqs[0];
    assert_eq!(seqs, (oldest..next).collect::<Vec<_>>());
    // The closed segments hold at least the window, and without their oldest less than it.
    let window = u64::from(segments - 1) * max;
    let per_turn = (next - 1) / 40;
    let turn_bytes = {
        let page = s
            .blocking()
            .read_events(&a, &EventQuery::from_seq(next - per_turn))
            .unwrap();
        page.events
            .iter()
            .map(|e| {
                let mut line = Vec::new();
                e.write_ndjson_line(&mut line);
                line.len() as u64
            })
            .sum::<u64>()
    };
    assert!(kept * turn_bytes >= window, "{kept} × {turn_bytes}");
    assert!((kept - 1) * turn_bytes < window, "{kept} × {turn_bytes}");
    assert!(kept > u64::from(segments), "{kept}");
    let st = s.blocking().event_log_state(&a).unwrap();
    assert_eq!(u64::from(st.segment_count), kept + 1);
    // A rotation at the size limit still keeps the window by bytes: one full segment and
    // the small ones that fit beside it.
    let body = events(&a, next..=next + 70, 300);
    append_blocking(&s, &a, &body, Durability::Flush).unwrap();
    let after = older(&s, &a);
    assert!(
        !after.is_empty() && (after.len() as u64) < kept,
        "{after:?}"
    );
    let seqs = all_seqs(&s, &a);
    assert_eq!(*seqs.last().unwrap(), next + 70);
}

#[test]
fn turn_ends_stop_rotating_once_many_small_segments_exist() {
    let tmp = tempfile::tempdir().unwrap();
    // A large window: retention deletes nothing here, so only the cap limits the files.
    let s = store_opts(tmp.path(), 10_000_000, 5, 1_000);
    let a = id("a");
    s.blocking().create(&mut record(&a, "/r")).unwrap();
    let mut next = 1;
    for _ in 0..TURN_END_ROTATE_MAX_OLDER + 5 {
        next = turn(&s, &a, next, 4, 300);
    }
    assert_eq!(older(&s, &a).len() as u32, TURN_END_ROTATE_MAX_OLDER);
    // The later turns stayed in the active segment, and every event reads back.
    assert!(fs::metadata(s.active_log_path(&a)).unwrap().len() > 4 * 1_000);
    assert_eq!(all_seqs(&s, &a), (1..next).collect::<Vec<_>>());
}

#[test]
fn a_gap_a_crash_left_beyond_max_segments_hides_no_segment() {
    let tmp = tempfile::tempdir().unwrap();
    let s = store_opts(tmp.path(), 1_000_000, 3, 1_000);
    let a = id("a");
    s.blocking().create(&mut record(&a, "/r")).unwrap();
    let mut next = 1;
    for _ in 0..9 {
        next = turn(&s, &a, next, 4, 300);
    }
    let n = older(&s, &a).len() as u32;
    assert_eq!(n, 9);
    drop(s);
    // A rotation's shift moves the oldest segments up first; a crash after moving those
    // above 5 leaves index 5 empty.
    for k in (5..=n).rev() {
        fs::rename(
            tmp.path()
                .join("sessions")
                .join(format!("{a}.events.{k}.ndjson.zst")),
            tmp.path()
                .join("sessions")
                .join(format!("{a}.events.{}.ndjson.zst", k + 1)),
        )
        .unwrap();
    }
    let fresh = store_opts(tmp.path(), 1_000_000, 3, 1_000);
    assert_eq!(all_seqs(&fresh, &a), (1..next).collect::<Vec<_>>());
    let st = fresh.blocking().event_log_state(&a).unwrap();
    assert_eq!(st.segment_count, n + 1);
    // The next rotation closes the gap.
    let next = turn(&fresh, &a, next, 4, 300);
    let idx: Vec<u32> = older(&fresh, &a).iter().map(|&(k, _)| k).collect();
    assert_eq!(idx, (1..=n + 1).collect::<Vec<_>>());
    assert_eq!(all_seqs(&fresh, &a), (1..next).collect::<Vec<_>>());
}
