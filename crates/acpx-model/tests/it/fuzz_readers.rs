//! Fuzz targets (property tests) of the model's readers of outside bytes: the snapshot
//! (`session.json`, parse + validation), the event log line (envelope + typed payload), the
//! list cursor. See docs/RELIABILITY.md § Fuzzing; `ACPX_FUZZ_CASES=1000000` for a long run.
//!
//! Besides "never panics", each target checks what a reader promises: an accepted document
//! writes back to bytes that are accepted again, and a refusal names its origin.

use acpx_test_support::fuzz as fuzz_support;

use acpx_model::{EventEnvelope, ListQuery, SessionRecord};
use base64::Engine as _;
use fuzz_support::fuzz;

const SESSION_SMALL: &[u8] = include_bytes!("../fixtures/fuzz/session_small.json");
const SESSION_FULL: &[u8] = include_bytes!("../fixtures/fuzz/session_full.json");
const EVENTS: &[u8] = include_bytes!("../fixtures/fuzz/events.ndjson");

fn event_lines() -> Vec<Vec<u8>> {
    EVENTS
        .split_inclusive(|c| *c == b'\n')
        .map(<[u8]>::to_vec)
        .collect()
}

/// The snapshot reader of both stores and of `import`.
fn check_snapshot(bytes: &[u8]) {
    match SessionRecord::from_json_slice(bytes, "fuzz.json") {
        Ok(record) => {
            let again = record.to_json_vec().unwrap();
            if let Err(e) = SessionRecord::from_json_slice(&again, "again.json") {
                panic!("an accepted snapshot does not read back: {e}");
            }
        }
        Err(e) => assert!(e.to_string().contains("fuzz.json"), "{e}"),
    }
}

/// The log line reader of the file store, `fsck`, `import` and the follow command.
fn check_log_line(bytes: &[u8]) {
    if let Ok(event) = EventEnvelope::from_ndjson_line(bytes) {
        let _ = event.payload_typed();
        let line = event.to_ndjson();
        let again = EventEnvelope::from_ndjson_line(line.as_bytes())
            .unwrap_or_else(|e| panic!("an accepted event does not read back: {e}"));
        assert_eq!(again.seq, event.seq);
    }
}

#[test]
fn fuzz_snapshot() {
    fuzz(
        "snapshot",
        &[SESSION_SMALL.to_vec(), SESSION_FULL.to_vec()],
        check_snapshot,
    );
}

#[test]
fn fuzz_log_line() {
    fuzz("log line", &event_lines(), check_log_line);
}

#[test]
fn fuzz_list_cursor() {
    let query = ListQuery {
        cwd: Some("/tmp/p".into()),
        limit: Some(10),
        ..ListQuery::default()
    };
    let good = br#"{"v":1,"t":1795456965197,"id":"5d766703-30f5-43b9-9fe2-6e05f4840dfb","f":""}"#;
    fuzz("list cursor", &[good.to_vec()], |bytes| {
        let encoded = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
        for cursor in [encoded, String::from_utf8_lossy(bytes).into_owned()] {
            let q = ListQuery {
                cursor: Some(cursor),
                ..query.clone()
            };
            let _ = q.decode_cursor();
        }
    });
}

/// Edge inputs every reader must survive. An input that ever makes a target fail is added
/// here (or next to the target of its crate) as a regression test; none has so far.
#[test]
fn edge_inputs_read_without_panic() {
    let snapshots: &[&[u8]] = &[
        b"",
        b"{}",
        b"[",
        b"{\"schema\":\"acpx.session.v1\"}",
        b"\xff",
    ];
    for s in snapshots {
        check_snapshot(s);
    }
    let lines: &[&[u8]] = &[
        b"",
        b"\n",
        b"{}",
        b"{\"seq\":18446744073709551616}",
        b"null",
    ];
    for l in lines {
        check_log_line(l);
    }
}
