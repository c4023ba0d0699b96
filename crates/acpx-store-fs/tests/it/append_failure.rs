//! A failed append is all or nothing, and reported: a child process (this test binary, re-run)
//! appends under a file-size limit (`RLIMIT_FSIZE`, with `SIGXFSZ` ignored so that a write past
//! the limit fails with `EFBIG`), the way a full disk stops a write part-way.

use crate::common;

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use acpx_model::{Durability, EventEnvelope, EventQuery, RecordId, StoreError};
use acpx_store_fs::FsStore;
use common::*;

const CHILD_DIR: &str = "ACPX_FS_APPEND_FAILURE_CHILD_DIR";

fn line_len(e: &EventEnvelope) -> u64 {
    let mut buf = Vec::new();
    e.write_ndjson_line(&mut buf);
    buf.len() as u64
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().len()
}

/// Limits the size of every file this process writes to `bytes`, and makes writes past it
/// fail with `EFBIG` instead of killing the process.
fn limit_file_size(bytes: u64) {
    // SAFETY: plain libc calls with valid arguments; the test's other threads do not touch
    // signal dispositions or resource limits.
    unsafe {
        assert_ne!(
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN),
            libc::SIG_ERR,
            "ignore SIGXFSZ"
        );
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        assert_eq!(libc::getrlimit(libc::RLIMIT_FSIZE, &mut lim), 0);
        lim.rlim_cur = bytes as libc::rlim_t;
        assert_eq!(
            libc::setrlimit(libc::RLIMIT_FSIZE, &lim),
            0,
            "setrlimit: {}",
            io::Error::last_os_error()
        );
    }
}

/// The append must fail with the `EFBIG` of the limit, say that it was undone, and leave the
/// log exactly `len` bytes long; `last_write_error` must report it.
fn assert_undone(s: &FsStore, a: &RecordId, result: Result<u64, StoreError>, len: u64, what: &str) {
    match result {
        Err(StoreError::Io { source, .. }) => {
            assert_eq!(
                source.kind(),
                io::ErrorKind::FileTooLarge,
                "{what}: {source}"
            );
            assert!(source.to_string().contains("undone"), "{what}: {source}");
        }
        other => panic!("{what}: expected an I/O error, got {other:?}"),
    }
    assert_eq!(
        file_len(&s.active_log_path(a)),
        len,
        "{what}: the log still holds part of the failed append"
    );
    let state = s.blocking().event_log_state(a).unwrap();
    let err = state.last_write_error.unwrap_or_default();
    assert!(
        err.contains("undone"),
        "{what}: last_write_error is {err:?}"
    );
}

/// The child's part: runs under the file-size limit.
fn child(dir: &Path) {
    let a = id("a");
    let s = store(dir);
    let active = s.active_log_path(&a);
    let before = file_len(&active);
    let batch = events(&a, 4..=8, 50);
    // The limit falls exactly after events 4 and 5: the partial write is two whole lines.
    let limit = before + line_len(&batch[0]) + line_len(&batch[1]);
    limit_file_size(limit);
    let append = |evs: &[EventEnvelope], d: Durability| {
        append_blocking(&s, &a, evs, d).map(|st| st.last_seq)
    };

    let r = append(&batch, Durability::Flush);
    assert_undone(&s, &a, r, before, "a batch cut on a line boundary");
    let page = s
        .blocking()
        .read_events(&a, &EventQuery::default())
        .unwrap();
    assert_eq!(seqs(&page.events), [1, 2, 3]);
    assert!(page.torn_tail.is_none());

    // The seq chain continues where the log really ends.
    assert_eq!(append(&batch[..1], Durability::Flush).unwrap(), 4);
    assert_eq!(
        s.blocking().event_log_state(&a).unwrap().last_write_error,
        None,
        "a successful append clears the error"
    );
    assert_eq!(append(&batch[1..2], Durability::Flush).unwrap(), 5);
    assert_eq!(file_len(&active), limit, "the limit is reached exactly");

    // Nothing fits now: the write fails before writing anything, with a sync requested.
    let r = append(&batch[2..4], Durability::Fsync);
    assert_undone(&s, &a, r, limit, "a batch with no room at all");

    // Raise the limit to the middle of event 7: the write stops inside a line.
    limit_file_size(limit + line_len(&batch[2]) + line_len(&batch[3]) / 2);
    let r = append(&batch[2..], Durability::Flush);
    assert_undone(&s, &a, r, limit, "a batch cut inside a line");

    // Events buffered under a held lock (Durability::None) fail at flush: all of them.
    let guard = s.blocking().lock(&a, Duration::from_secs(5)).unwrap();
    let held_append = |evs: &[EventEnvelope]| {
        s.blocking()
            .append(&guard, evs, Durability::None)
            .map(|st| st.last_seq)
    };
    assert_eq!(held_append(&batch[2..3]).unwrap(), 6);
    assert_eq!(held_append(&batch[3..]).unwrap(), 8);
    let r = s.blocking().flush(&a).map(|()| 0);
    assert_undone(&s, &a, r, limit, "buffered events written at flush");
    drop(guard);
    assert_eq!(s.blocking().event_log_state(&a).unwrap().last_seq, 5);
}

#[test]
fn append_past_a_file_size_limit_is_all_or_nothing() {
    if let Some(dir) = std::env::var_os(CHILD_DIR) {
        child(&PathBuf::from(dir));
        return;
    }
    let a = id("a");
    let tmp = tempfile::tempdir().unwrap();
    let s = store(tmp.path());
    s.blocking().create(&mut record(&a, "/r")).unwrap();
    append_blocking(&s, &a, &events(&a, 1..=3, 50), Durability::Flush).unwrap();
    // Piped output: under the limit, writing to an inherited stdout that is a large file
    // (`cargo test > log`) would fail too.
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "append_failure::append_past_a_file_size_limit_is_all_or_nothing",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DIR, tmp.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "child failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // Without the limit, in a fresh store: exactly the acknowledged events, no torn tail, and
    // nothing set aside (the failed writes were undone, not left for the next open to clean).
    let fresh = store(tmp.path());
    let page = fresh
        .blocking()
        .read_events(&a, &EventQuery::default())
        .unwrap();
    assert_eq!(seqs(&page.events), [1, 2, 3, 4, 5]);
    assert!(page.torn_tail.is_none() && page.damaged.is_empty());
    let set_aside: Vec<_> = std::fs::read_dir(fresh.sessions_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.contains(".events.torn-"))
        .collect();
    assert!(set_aside.is_empty(), "{set_aside:?}");
    let st = append_blocking(&fresh, &a, &events(&a, 6..=7, 50), Durability::Flush).unwrap();
    assert_eq!(st.last_seq, 7);
}
