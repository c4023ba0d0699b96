//! A session whose snapshot is truncated, garbage or (file store) missing while its log is
//! intact: `prompt`
//! and `sessions show` report it as damaged (not as absent), `sessions list` and `fsck` count
//! and name it, and `fsck --repair` rebuilds it from the log with the reducer, on both stores
//! (`docs/format.md` § Damaged snapshots).

use crate::common;

use common::{Env, BACKENDS};

/// Damages the stored snapshot of `id` in one of the ways a disk or a person can.
fn damage(env: &Env, id: &str, how: &str) {
    if env.backend == "fs" {
        let path = env.home().join(format!("sessions/{id}.json"));
        match how {
            "truncated" => {
                let bytes = std::fs::read(&path).unwrap();
                std::fs::write(&path, &bytes[..bytes.len() / 3]).unwrap();
            }
            "missing" => std::fs::remove_file(&path).unwrap(),
            _ => std::fs::write(&path, "\u{0}garbage{").unwrap(),
        }
    } else {
        let db = rusqlite::Connection::open(env.home().join("acpx.db")).unwrap();
        let doc: String = db
            .query_row(
                // A turn's save stores the JSON text as a BLOB (docs/format.md, schema v4).
                "SELECT CAST(document AS TEXT) FROM sessions WHERE acpx_record_id = ?1",
                [id],
                |r| r.get(0),
            )
            .unwrap();
        let bad = match how {
            "truncated" => doc[..doc.len() / 3].to_owned(),
            _ => "garbage{".to_owned(),
        };
        db.execute(
            "UPDATE sessions SET document = ?2, document_checked = 0 WHERE acpx_record_id = ?1",
            [id, bad.as_str()],
        )
        .unwrap();
    }
}

#[test]
fn a_damaged_snapshot_is_found_reported_and_rebuilt_from_the_log() {
    for backend in BACKENDS {
        // A missing snapshot is a file-store case: a SQLite row has no snapshot apart from it.
        let hows: &[&str] = if backend == "fs" {
            &["truncated", "garbage", "missing"]
        } else {
            &["truncated", "garbage"]
        };
        for &how in hows {
            let env = Env::new(backend);
            let agent = env.agent_cmd("");
            let id = env.new_session(&agent);
            // A second, healthy session in another scope: fsck must count both.
            env.run(&[
                "--format",
                "json",
                "--no-owner",
                "--agent",
                &agent,
                "sessions",
                "new",
                "--name",
                "other",
            ])
            .ok();
            env.run(&["--no-owner", "--agent", &agent, "echo", "before", "damage"])
                .ok();
            let before = env
                .run(&["--format", "json", "--agent", &agent, "sessions", "show"])
                .ok()
                .json();
            damage(&env, &id, how);
            let what = format!("{backend} {how}");

            // prompt and show: reported as damaged, naming the session, not "no session".
            for args in [
                vec!["--no-owner", "--agent", &agent, "echo", "after"],
                vec!["--agent", &agent, "sessions", "show"],
            ] {
                let r = env.run(&args);
                assert_eq!(r.code, 1, "{what} {args:?}: {r:?}");
                assert!(
                    r.stderr.contains(&id)
                        && r.stderr.contains("damaged snapshot")
                        && r.stderr.contains("fsck --repair"),
                    "{what} {args:?}: {}",
                    r.stderr
                );
            }
            // list: the damaged one is reported.
            let r = env.run(&["--agent", &agent, "sessions", "list"]);
            assert!(r.stderr.contains(&id), "{what}: {}", r.stderr);
            // The end of its id, typed as a session: the damaged session named, not "no
            // session" (a missing snapshot leaves nothing to list, so nothing to match).
            if how != "missing" {
                let suffix = &id[id.len() - 8..];
                let r = env.run(&["--agent", &agent, "sessions", "show", suffix]);
                assert_eq!(r.code, 1, "{what}: {r:?}");
                assert!(
                    r.stderr.contains(&id)
                        && r.stderr.contains("cannot be read")
                        && r.stderr.contains("fsck --repair"),
                    "{what}: {}",
                    r.stderr
                );
            }

            // fsck counts and names it.
            let r = env.run(&["--format", "json", "fsck"]);
            assert_eq!(r.code, 1, "{what}: {r:?}");
            let report = r.json();
            assert_eq!(report["sessions"], 2, "{what}: {report}");
            let problems = report["problems"].as_array().unwrap();
            assert!(
                problems.iter().any(|p| p["acpxRecordId"] == id.as_str()
                    && p["kind"] == "snapshot_invalid"
                    && p["repairable"] == true),
                "{what}: {report}"
            );

            // fsck --repair rebuilds it from the log.
            let r = env.run(&["--format", "json", "fsck", "--repair"]);
            assert_eq!(r.code, 0, "{what}: {r:?}");
            let after = env
                .run(&["--format", "json", "--agent", &agent, "sessions", "show"])
                .ok()
                .json();
            for key in ["acpxRecordId", "agentCommand", "cwd", "thread"] {
                assert_eq!(after[key], before[key], "{what}: {key}");
            }
            assert_eq!(
                after["acpx"]["audit_seq"], before["acpx"]["audit_seq"],
                "{what}: every logged event folded in"
            );
            let r = env.run(&["--format", "json", "fsck"]);
            assert_eq!(r.code, 0, "{what}: clean after the repair: {r:?}");
            // And the session goes on.
            assert_the_session_goes_on(&env, &agent, &what);
        }
    }
}

/// A SQLite document edited by hand so that it still validates but no longer says what its
/// row's columns say (here the thread's title): the list skips it and `fsck` reports it, as
/// above, but the repair keeps the edit and writes the columns from it again, instead of
/// rebuilding the snapshot from the log (which would undo the edit).
#[test]
fn a_valid_hand_edit_of_a_sqlite_document_is_kept_by_the_repair() {
    let env = Env::new("sqlite");
    let agent = env.agent_cmd("");
    env.run(&["--no-owner", "--agent", &agent, "sessions", "new"])
        .ok();
    env.run(&["--no-owner", "--agent", &agent, "echo", "hello"])
        .ok();
    let db = rusqlite::Connection::open(env.home().join("acpx.db")).unwrap();
    db.execute(
        "UPDATE sessions SET document = json_set(document, '$.thread.title', 'Edited by hand')",
        [],
    )
    .unwrap();
    drop(db);
    let r = env.run(&["--agent", &agent, "sessions", "list"]);
    assert!(
        r.stderr.contains("thread.title") && r.stderr.contains("acpx fsck"),
        "{}",
        r.stderr
    );
    assert_eq!(
        r.stderr.matches("thread.title").count(),
        1,
        "reported once, not also as a log line: {}",
        r.stderr
    );
    let r = env.run(&["--format", "json", "fsck", "--repair"]);
    assert_eq!(r.code, 0, "{r:?}");
    let action = r.json()["problems"][0]["action"].to_string();
    assert!(action.contains("kept it"), "{action}");
    let shown = env
        .run(&["--format", "json", "--agent", &agent, "sessions", "show"])
        .ok()
        .json();
    assert_eq!(shown["thread"]["title"], "Edited by hand", "{shown}");
    let r = env.run(&["--format", "json", "fsck"]);
    assert_eq!(r.code, 0, "clean after the repair: {r:?}");
    assert_the_session_goes_on(&env, &agent, "after the kept edit");
}

/// A one-process prompt after the repair answers as always.
fn assert_the_session_goes_on(env: &Env, agent: &str, what: &str) {
    let r = env
        .run(&[
            "--format",
            "quiet",
            "--no-owner",
            "--agent",
            agent,
            "echo",
            "after",
        ])
        .ok();
    assert_eq!(r.stdout, "after\n", "{what}");
}
