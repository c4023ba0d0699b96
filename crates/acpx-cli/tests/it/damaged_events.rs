//! An event row of the SQLite store whose payload is garbage: `fsck` names it once (no second
//! report of the same row, no seq gap for it), and `fsck --repair` replaces it by an
//! `event_damaged` placeholder that keeps what was stored, after which `fsck` is clean, the
//! events read strictly again and the session goes on (`docs/format.md` § Damaged events).
//!
//! A database file that is damaged as a whole (garbage header, truncated pages) cannot be
//! opened at all: every command says the file is damaged and what to do with it.

use crate::common;

use common::Env;

#[test]
fn a_garbage_event_payload_is_replaced_by_a_placeholder_and_fsck_is_clean() {
    let env = Env::new("sqlite");
    let agent = env.agent_cmd("");
    let id = env.new_session(&agent);
    env.run(&["--no-owner", "--agent", &agent, "echo", "one"])
        .ok();
    env.run(&["--no-owner", "--agent", &agent, "echo", "two"])
        .ok();
    let db = rusqlite::Connection::open(env.home().join("acpx.db")).unwrap();
    let changed = db
        .execute(
            "UPDATE event_rows SET payload = '{' WHERE seq = 3 AND session_key = \
             (SELECT session_key FROM sessions WHERE acpx_record_id = ?1)",
            [id.as_str()],
        )
        .unwrap();
    assert_eq!(changed, 1);
    drop(db);

    let r = env.run(&["--format", "json", "fsck"]);
    assert_eq!(r.code, 1, "{r:?}");
    let report = r.json();
    let problems = report["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 1, "one damaged row, one problem: {report}");
    assert_eq!(problems[0]["kind"], "log_damaged", "{report}");

    let r = env.run(&["--format", "json", "fsck", "--repair"]);
    assert_eq!(r.code, 0, "{r:?}");
    let report = r.json();
    let action = report["problems"][0]["action"].as_str().unwrap_or_default();
    assert!(
        action.contains("seq 3") && action.contains("event_damaged"),
        "{report}"
    );
    let r = env.run(&["--format", "json", "fsck"]);
    assert_eq!(r.code, 0, "clean after the repair: {r:?}");

    // The log reads strictly again, seqs 1, 2, 3, … with the placeholder at 3 keeping the
    // stored garbage.
    let r = env
        .run(&[
            "--format", "json", "--agent", &agent, "sessions", "events", &id,
        ])
        .ok();
    let events = r.json_lines();
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    let placeholder = &events[2];
    assert_eq!(placeholder["type"], "event_damaged", "{placeholder}");
    assert_eq!(
        placeholder["payload"]["stored"]["payload"], "{",
        "{placeholder}"
    );
    assert!(placeholder["payload"]["reason"]
        .as_str()
        .unwrap()
        .contains("payload"));

    let r = env
        .run(&[
            "--format",
            "quiet",
            "--no-owner",
            "--agent",
            &agent,
            "echo",
            "three",
        ])
        .ok();
    assert_eq!(r.stdout, "three\n");
    let r = env.run(&["--format", "json", "fsck"]);
    assert_eq!(r.code, 0, "{r:?}");
}

/// A garbage header and a truncated file are named as damaged data with what to do (restore
/// or move the file away), not as a directory permission problem nor with an option acpx
/// does not have; moving the file away gives a working, empty store.
#[test]
fn a_damaged_database_file_is_named_with_what_to_do() {
    let env = Env::new("sqlite");
    let agent = env.agent_cmd("");
    env.run(&["--agent", &agent, "sessions", "new"]).ok();
    env.run(&["--no-owner", "--agent", &agent, "echo", "one"])
        .ok();
    let db = env.home().join("acpx.db");
    let pristine = std::fs::read(&db).unwrap();
    let garbage_header = {
        let mut b = pristine.clone();
        b[..16].copy_from_slice(b"garbagegarbage!!");
        b
    };
    let truncated = pristine[..pristine.len().min(20_000)].to_vec();
    assert!(
        truncated.len() < pristine.len(),
        "the database is longer than its cut"
    );
    for (what, bytes) in [("garbage header", garbage_header), ("truncated", truncated)] {
        for f in ["acpx.db-wal", "acpx.db-shm"] {
            let _ = std::fs::remove_file(env.home().join(f));
        }
        std::fs::write(&db, &bytes).unwrap();
        std::fs::File::open(&db).unwrap().sync_all().unwrap();
        for args in [&["sessions", "list"][..], &["fsck"][..]] {
            let r = env.run(&[&["--format", "json"][..], args].concat());
            assert_eq!(r.code, 1, "{what}: {r:?}");
            let err = &r.json()["error"];
            let message = err["message"].as_str().unwrap_or_default();
            let hint = err["data"]["hint"].as_str().unwrap_or_default();
            assert!(message.contains("acpx.db"), "{what}: {err}");
            assert_eq!(err["data"]["detailCode"], "STORE_CORRUPT", "{what}: {err}");
            assert!(!message.contains("--db"), "{what}: no such option: {err}");
            assert!(
                hint.contains("backup") && hint.contains("move it away"),
                "{what}: {err}"
            );
        }
    }
    std::fs::rename(&db, env.home().join("acpx.db.damaged")).unwrap();
    let r = env.run(&["--format", "json", "sessions", "list"]).ok();
    assert_eq!(r.json()["sessions"], serde_json::json!([]));
}
