//! Fuzz target (property test) of the file store's readers of its own files, as a crash, a
//! full disk or a user's editor may leave them: damaged log segments (active and older), a
//! damaged snapshot, a damaged `.index.json` and a damaged search index `.search.ndjson`. See docs/RELIABILITY.md § Fuzzing;
//! `ACPX_FUZZ_CASES=1000000` for a long run.
//!
//! Each input is a real log (mutated) split at a line into an older segment and the active
//! one, plus a snapshot and an index that are intact, truncated or garbage. Then every read
//! path runs on a fresh store: strict and lenient reads from a random seq, the log state,
//! load, list, search, and the writer's path (lock, then one append that must continue the log or be
//! refused). None may panic; an append that succeeds must get the next seq.

use acpx_test_support::fuzz as fuzz_support;

use std::fs;
use std::path::Path;
use std::time::Duration;

use acpx_model::{
    Durability, EventEnvelope, EventQuery, ListQuery, ReadMode, RecordId, SearchQuery, Store,
};
use acpx_store_fs::FsStore;
use fuzz_support::{bytes_of, fuzz_with, inputs, Input};
use proptest::prelude::*;

const EVENTS: &[u8] = include_bytes!("../../../acpx-model/tests/fixtures/fuzz/events.ndjson");
const SNAPSHOT: &[u8] = include_bytes!("../../../acpx-model/tests/fixtures/fuzz/session_full.json");
const INDEX: &[u8] = include_bytes!("../../../acpx-model/tests/fixtures/fuzz/index.json");
const ID: &str = "5d766703-30f5-43b9-9fe2-6e05f4840dfb";

/// A search index in the format the store writes (docs/format.md § Search index): the
/// 64-byte header, then one entry for the fixture's id (for another file identity).
fn search_index_sample() -> Vec<u8> {
    let mut out = format!("{:<63}\n", "{\"acpxSearchIndex\":1,\"live\":0}").into_bytes();
    out.extend_from_slice(
        format!(
            "{{\"id\":\"{ID}\",\"ident\":{{\"dev\":1,\"ino\":2,\"len\":3,\"mtime_ns\":4,\
             \"ctime_ns\":5}},\"revision\":1,\"len\":23,\"hash\":\"0000000000000000\"}}\t\
             [[0,\"user\",\"u\",\"hi\"]]\n"
        )
        .as_bytes(),
    );
    out
}

/// Which side files an input writes, and how damaged they are.
#[derive(Debug, Clone)]
struct Sides {
    /// Line at which the log splits into `.1` and the active segment (0: one segment).
    split: u32,
    /// Bits: 0-1 snapshot (absent, intact, truncated, garbage), 2-3 index (same), 4 lenient,
    /// 5-6 search index (same).
    flags: u8,
    from_seq: u64,
}

fn sides() -> impl Strategy<Value = Sides> {
    (any::<u32>(), any::<u8>(), 0u64..140).prop_map(|(split, flags, from_seq)| Sides {
        split,
        flags,
        from_seq,
    })
}

fn damaged(sample: &[u8], how: u8) -> Option<Vec<u8>> {
    match how % 4 {
        0 => None,
        1 => Some(sample.to_vec()),
        2 => Some(sample[..sample.len() / 3].to_vec()),
        _ => Some(b"\x00\xffnot json at all\n{".to_vec()),
    }
}

fn write_files(dir: &Path, log: &[u8], s: &Sides) {
    let sessions = dir.join("sessions");
    let _ = fs::remove_dir_all(&sessions);
    fs::create_dir_all(&sessions).expect("sessions dir");
    let lines: Vec<&[u8]> = log.split_inclusive(|c| *c == b'\n').collect();
    let split = if lines.is_empty() {
        0
    } else {
        s.split as usize % (lines.len() + 1)
    };
    let (older, active) = lines.split_at(split);
    if !older.is_empty() {
        fs::write(
            sessions.join(format!("{ID}.events.1.ndjson")),
            older.concat(),
        )
        .expect("write");
    }
    fs::write(
        sessions.join(format!("{ID}.events.ndjson")),
        active.concat(),
    )
    .expect("write");
    if let Some(b) = damaged(SNAPSHOT, s.flags) {
        fs::write(sessions.join(format!("{ID}.json")), b).expect("write");
    }
    if let Some(b) = damaged(INDEX, s.flags >> 2) {
        fs::write(sessions.join(".index.json"), b).expect("write");
    }
    if let Some(b) = damaged(&search_index_sample(), s.flags >> 5) {
        fs::write(sessions.join(".search.ndjson"), b).expect("write");
    }
}

async fn read_everything(dir: &Path, s: &Sides) {
    let Ok(store) = FsStore::open(dir.join("sessions")) else {
        return;
    };
    let id = RecordId::parse(ID).expect("the fixture's id is valid");
    let mode = if s.flags & 16 == 0 {
        ReadMode::Strict
    } else {
        ReadMode::Lenient
    };
    let query = EventQuery {
        from_seq: s.from_seq,
        mode,
        ..EventQuery::default()
    };
    let _ = store.read_events(&id, &query).await;
    let state = store.event_log_state(&id).await;
    let _ = store.load(&id).await;
    let _ = store.list(&ListQuery::default()).await;
    let _ = store
        .search(&SearchQuery {
            text: "the".into(),
            ..SearchQuery::default()
        })
        .await;
    let Ok(state) = state else {
        return;
    };
    let Ok(lock) = store.lock(&id, Duration::from_millis(100)).await else {
        return;
    };
    let Some(mut event) = EVENTS
        .split(|c| *c == b'\n')
        .find_map(|l| EventEnvelope::from_ndjson_line(l).ok())
    else {
        return;
    };
    let Some(next) = state.last_seq.checked_add(1) else {
        return;
    };
    event.seq = next;
    if let Ok(after) = store.append(&lock, &[event], Durability::Flush).await {
        assert!(after.last_seq >= next, "append returned {after:?}");
    }
    let mut lenient = EventQuery::from_seq(0);
    lenient.mode = ReadMode::Lenient;
    let _ = store.read_events(&id, &lenient).await;
}

#[test]
fn fuzz_fs_segments() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let dir = tempfile::tempdir_in(fuzz_support::scratch_root()).expect("a temp dir");
    let samples = [
        EVENTS.to_vec(),
        EVENTS
            .split_inclusive(|c| *c == b'\n')
            .take(12)
            .collect::<Vec<_>>()
            .concat(),
    ];
    fuzz_with(
        "fs segments",
        (inputs(samples.len()), sides()),
        |(input, s): (Input, Sides)| {
            let log = bytes_of(&input, &samples);
            write_files(dir.path(), &log, &s);
            rt.block_on(read_everything(dir.path(), &s));
        },
    );
}
