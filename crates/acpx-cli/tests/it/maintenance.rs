//! End-to-end tests of fsck, migrate, Node acpx import and damaged data, on both backends.

use crate::common;

use std::io::Write;
use std::path::{Path, PathBuf};

use common::{exported, Env, Seed, BACKENDS};
use serde_json::Value;

const AGENT: &str = "npx -y @agentclientprotocol/codex-acp@^1.1.5";

fn fsck(env: &Env, repair: bool) -> (i32, Value) {
    let mut args = vec!["--format", "json", "fsck"];
    if repair {
        args.push("--repair");
    }
    let r = env.run(&args);
    (r.code, r.json())
}

fn kinds(report: &Value) -> Vec<String> {
    report["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["kind"].as_str().unwrap().to_owned())
        .collect()
}

fn corrupt_snapshot(env: &Env, id: &str) {
    if env.backend == "fs" {
        std::fs::write(
            env.home().join(format!("sessions/{id}.json")),
            "{\"schema\": \"acpx.session.v1\", trunc",
        )
        .unwrap();
    } else {
        let db = rusqlite::Connection::open(env.home().join("acpx.db")).unwrap();
        db.execute(
            "UPDATE sessions SET document = '{\"schema\": \"acpx.session.v2\"}' WHERE acpx_record_id = ?1",
            [id],
        )
        .unwrap();
    }
}

#[test]
fn fsck_is_clean_on_healthy_sessions() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let cwd = env.cwd_str();
        env.import_archive(&Seed::new("rec-ok", &cwd, AGENT).archive());
        let (code, report) = fsck(&env, false);
        assert_eq!(code, 0, "{report}");
        assert_eq!(report["ok"], true);
        assert_eq!(report["sessions"], 1);
        let text = env.run(&["fsck"]).ok();
        assert!(
            text.stderr.contains("checked 1 session(s): 0 problem(s)"),
            "{}",
            text.stderr
        );
    }
}

#[test]
fn fsck_rolls_a_snapshot_behind_its_log_forward() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let cwd = env.cwd_str();
        let mut seed = Seed::new("rec-behind", &cwd, AGENT);
        seed.events = 5;
        seed.audit_seq = 2;
        env.import_archive(&seed.archive());
        let (code, report) = fsck(&env, false);
        assert_eq!(code, 1, "{report}");
        assert_eq!(kinds(&report), ["snapshot_behind"]);
        assert_eq!(report["problems"][0]["repairable"], true);
        let r = env.run(&["fsck"]);
        assert!(r.stderr.contains("acpx fsck --repair"), "{}", r.stderr);

        let (code, report) = fsck(&env, true);
        assert_eq!(code, 0, "{report}");
        assert_eq!(report["repaired"], 1);
        assert!(
            report["problems"][0]["action"]
                .as_str()
                .unwrap()
                .contains("3 event(s)"),
            "{report}"
        );
        let show = env
            .run(&["--format", "json", "sessions", "show", "rec-behind"])
            .ok()
            .json();
        assert_eq!(show["acpx"]["audit_seq"], 5);
        let (code, report) = fsck(&env, false);
        assert_eq!(code, 0, "{report}");
    }
}

#[test]
fn fsck_records_events_a_snapshot_claims_but_the_log_lacks() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let cwd = env.cwd_str();
        let mut seed = Seed::new("rec-ahead", &cwd, AGENT);
        seed.events = 3;
        seed.audit_seq = 5;
        env.import_archive(&seed.archive());
        let (code, report) = fsck(&env, false);
        assert_eq!(code, 1, "{report}");
        assert_eq!(kinds(&report), ["snapshot_ahead"]);
        let (code, report) = fsck(&env, true);
        assert_eq!(code, 0, "{report}");
        assert!(
            report["problems"][0]["action"]
                .as_str()
                .unwrap()
                .contains("4..5"),
            "{report}"
        );
        let ev = env
            .run(&[
                "--format",
                "json",
                "sessions",
                "events",
                "rec-ahead",
                "--type",
                "lifecycle_event",
            ])
            .ok()
            .json_lines();
        assert_eq!(ev[0]["payload"]["phase"], "log_gap");
        assert_eq!(fsck(&env, false).0, 0);
    }
}

#[test]
fn fsck_sets_a_torn_tail_aside_and_reports_damage() {
    let env = Env::new("fs");
    let cwd = env.cwd_str();
    env.import_archive(&Seed::new("rec-torn", &cwd, AGENT).archive());
    let log = env.home().join("sessions/rec-torn.events.ndjson");
    std::fs::OpenOptions::new()
        .append(true)
        .open(&log)
        .unwrap()
        .write_all(b"{\"eventVersion\":1,\"seq\":4,\"timest")
        .unwrap();
    // Readers withhold the torn line and warn.
    let ev = env
        .run(&["--format", "json", "sessions", "events", "rec-torn"])
        .ok();
    assert_eq!(ev.json_lines().len(), 3);
    assert!(ev.stderr.contains("incomplete last line"), "{}", ev.stderr);

    let (code, report) = fsck(&env, false);
    assert_eq!(code, 1, "{report}");
    assert_eq!(kinds(&report), ["torn_tail"]);
    let (code, report) = fsck(&env, true);
    assert_eq!(code, 0, "{report}");
    assert!(
        report["problems"][0]["action"]
            .as_str()
            .unwrap()
            .contains("set"),
        "{report}"
    );
    let aside: Vec<PathBuf> = std::fs::read_dir(env.home().join("sessions"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().contains("rec-torn.events.torn-"))
        .collect();
    assert_eq!(aside.len(), 1, "the torn bytes are kept aside");
    // The action names the file the bytes came from, then the one they went to (issue 51).
    let action = report["problems"][0]["action"].as_str().unwrap();
    let from = action.find(&log.display().to_string());
    let to = action.find(&aside[0].display().to_string());
    assert!(from.is_some() && to.is_some() && from < to, "{action}");
    assert_eq!(
        std::fs::read(&aside[0]).unwrap(),
        b"{\"eventVersion\":1,\"seq\":4,\"timest"
    );
    assert_eq!(fsck(&env, false).0, 0);

    // A damaged complete line in the middle is reported, not guessed at.
    let text = std::fs::read_to_string(&log).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines[1] = "this is not json";
    std::fs::write(&log, lines.join("\n") + "\n").unwrap();
    let (code, report) = fsck(&env, true);
    assert_eq!(code, 1, "{report}");
    assert!(
        kinds(&report).contains(&"log_damaged".to_owned()),
        "{report}"
    );
    let msg = report["problems"][0]["message"].as_str().unwrap();
    assert!(
        msg.contains("rec-torn.events.ndjson") && msg.contains("line 2"),
        "{msg}"
    );
    // The strict reader fails naming the place; --lenient skips and reports.
    let r = env.run(&["sessions", "events", "rec-torn"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("line 2"), "{}", r.stderr);
    // fsck --repair just failed to fix it: the hint names what reads past it instead.
    assert!(r.stderr.contains("hint: --lenient"), "{}", r.stderr);
    let r = env
        .run(&[
            "--format",
            "json",
            "sessions",
            "events",
            "rec-torn",
            "--lenient",
        ])
        .ok();
    assert_eq!(r.json_lines().len(), 2);
    assert!(r.stderr.contains("skipped"), "{}", r.stderr);
}

#[test]
fn corrupt_snapshots_are_reported_not_fatal() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let cwd = env.cwd_str();
        env.import_archive(&Seed::new("rec-good", &cwd, AGENT).archive());
        env.import_archive(&Seed::new("rec-bad", &cwd, AGENT).archive());
        corrupt_snapshot(&env, "rec-bad");

        let list = env.run(&["--format", "json", "sessions", "list"]).ok();
        let v = list.json();
        let ids: Vec<&str> = v["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["acpxRecordId"].as_str().unwrap())
            .collect();
        assert_eq!(
            ids,
            ["rec-good"],
            "the damaged one is skipped, the others listed"
        );
        assert!(!v["skipped"].as_array().unwrap().is_empty(), "{v}");
        let text = env.run(&["sessions", "list"]).ok();
        assert!(
            text.stderr.contains("skipped") && text.stderr.contains("acpx fsck"),
            "{}",
            text.stderr
        );

        let r = env.run(&["sessions", "show", "rec-bad"]);
        assert!(r.code == 1 || r.code == 4, "{r:?}");
        assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
        let r = env.run(&["--format", "json", "sessions", "history", "rec-bad"]);
        assert_ne!(r.code, 0);
        assert!(r.json()["error"]["message"].is_string());

        let (code, report) = fsck(&env, true);
        assert_eq!(code, 1, "{report}");
        assert!(
            kinds(&report).contains(&"snapshot_invalid".to_owned()),
            "{report}"
        );
        assert_eq!(report["problems"][0]["repaired"], false);
    }
}

fn list_ids(env: &Env, store: &str) -> Vec<String> {
    let v = env
        .run(&["--format", "json", "--store", store, "sessions", "list"])
        .ok()
        .json();
    v["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["acpxRecordId"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn migrate_fs_to_sqlite_and_back() {
    let env = Env::new("fs");
    let agent = env.agent_cmd("");
    // One-process prompts (--no-owner) leave no queue owner behind, so the snapshots taken
    // before the migration are final (a migration stops running owners, which records
    // their agents' exits).
    env.run(&["--agent", &agent, "sessions", "new"]).ok();
    env.run(&["--no-owner", "--agent", &agent, "tools"]).ok();
    env.run(&["--agent", &agent, "sessions", "new", "--name", "b"])
        .ok();
    env.run(&["--no-owner", "--agent", &agent, "-s", "b", "think"])
        .ok();
    let cwd = env.cwd_str();
    let mut closed = Seed::new("rec-closed", &cwd, AGENT);
    closed.closed_at = Some("2026-01-02T00:00:00.000Z");
    env.import_archive(&closed.archive());

    let ids = list_ids(&env, "fs");
    assert_eq!(ids.len(), 3);
    let before: Vec<(Value, String)> = ids.iter().map(|id| exported(&env, "fs", id)).collect();

    let m = env
        .run(&["--format", "json", "migrate", "--to", "sqlite"])
        .ok()
        .json();
    assert_eq!(m["action"], "migrated");
    assert_eq!(m["verified"], true);
    assert_eq!(m["sessionCount"], 3);
    assert_eq!(list_ids(&env, "sqlite"), ids);
    for (id, b) in ids.iter().zip(&before) {
        assert_eq!(&exported(&env, "sqlite", id), b, "{id} on sqlite");
    }
    // Migrating again copies nothing: every session is already there, identical.
    let again = env
        .run(&["--format", "json", "migrate", "--to", "sqlite"])
        .ok()
        .json();
    assert_eq!(again["sessionCount"], 0);
    assert_eq!(again["alreadyCopiedCount"], 3);
    // The target must be the other backend.
    assert_eq!(env.run(&["migrate", "--to", "fs"]).code, 2);

    // Empty the fs store, then migrate back from SQLite.
    for id in &ids {
        env.run(&["--store", "fs", "sessions", "delete", "--force", id])
            .ok();
    }
    assert!(list_ids(&env, "fs").is_empty());
    let m = env
        .run(&[
            "--format", "json", "--store", "sqlite", "migrate", "--to", "fs",
        ])
        .ok()
        .json();
    assert_eq!(m["sessionCount"], 3);
    assert_eq!(list_ids(&env, "fs"), ids);
    for (id, b) in ids.iter().zip(&before) {
        assert_eq!(&exported(&env, "fs", id), b, "{id} back on fs");
    }
    // The sessions still work after the round trip.
    let r = env
        .run(&[
            "--format", "quiet", "--agent", &agent, "echo", "still", "here",
        ])
        .ok();
    assert_eq!(r.stdout, "still here\n");
}

/// `migrate` run again copies only the sessions that appeared since, says how many were
/// already there, and refuses (changing nothing) once a copy differs from its source. (The
/// names are not hex: a one-letter name could also be a unique suffix of a random record id.)
#[test]
fn migrate_again_copies_only_new_sessions_and_refuses_a_changed_copy() {
    let env = Env::new("fs");
    let agent = env.agent_cmd("");
    env.run(&["--agent", &agent, "sessions", "new", "--name", "first"])
        .ok();
    env.run(&["--no-owner", "--agent", &agent, "-s", "first", "tools"])
        .ok();
    env.run(&["--format", "quiet", "migrate", "--to", "sqlite"])
        .ok();
    env.run(&["--agent", &agent, "sessions", "new", "--name", "second"])
        .ok();
    env.run(&["--no-owner", "--agent", &agent, "-s", "second", "think"])
        .ok();

    let text = env.run(&["migrate", "--to", "sqlite"]).ok();
    assert!(
        text.stdout.contains("migrated 1 session(s)") && text.stdout.contains("1 already copied"),
        "{}",
        text.stdout
    );
    let ids = list_ids(&env, "fs");
    assert_eq!(list_ids(&env, "sqlite"), ids);
    for id in &ids {
        assert_eq!(
            exported(&env, "sqlite", id),
            exported(&env, "fs", id),
            "{id}"
        );
    }

    // The copy of `a` changes in the target; a new source session appears.
    env.run(&[
        "--store",
        "sqlite",
        "--no-owner",
        "--agent",
        &agent,
        "-s",
        "first",
        "think",
    ])
    .ok();
    env.run(&["--agent", &agent, "sessions", "new", "--name", "third"])
        .ok();
    let a = env
        .run(&[
            "--format", "json", "--agent", &agent, "sessions", "show", "first",
        ])
        .ok()
        .json()["acpxRecordId"]
        .as_str()
        .unwrap()
        .to_owned();
    let refused = env.run(&["--format", "json", "migrate", "--to", "sqlite"]);
    assert_eq!(refused.code, 1, "{refused:?}");
    let err = refused.json();
    let message = err["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&a) && message.contains("event count"),
        "{message}"
    );
    assert_eq!(
        err["error"]["data"]["detailCode"], "STORE_ALREADY_EXISTS",
        "{err}"
    );
    let (mut now, mut was) = (list_ids(&env, "sqlite"), ids);
    now.sort();
    was.sort();
    assert_eq!(now, was, "nothing was written");
}

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/node-acpx")
}

#[test]
fn node_acpx_import_rebuilds_trimmed_threads_from_the_journal() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let dir = fixture();
        let r = env
            .run(&[
                "--format",
                "json",
                "sessions",
                "import",
                "--from-node-acpx",
                dir.to_str().unwrap(),
            ])
            .ok();
        let v = r.json();
        assert_eq!(v["action"], "node_import");
        let imported = v["imported"].as_array().unwrap();
        assert_eq!(imported.len(), 3, "{v}");
        let skipped = v["skipped"].as_array().unwrap();
        assert_eq!(skipped.len(), 1);
        assert_eq!(skipped[0]["ignored"], true);
        let by_node = |nid: &str| {
            imported
                .iter()
                .find(|i| i["nodeRecordId"] == nid)
                .unwrap()
                .clone()
        };

        // 1: trimmed record, full journal over two segments.
        let one = by_node("sess-node-1");
        assert_eq!(one["acpxRecordId"], "sess-node-1");
        assert_eq!(one["agentSessionId"], "native-node-1");
        assert_eq!(one["threadSource"], "journal");
        assert_eq!(one["messages"], 4);
        let hist = env
            .run(&["sessions", "history", "sess-node-1", "--full"])
            .ok()
            .stdout;
        assert!(
            hist.contains("the lexer, the grammar and the error reporter."),
            "{hist}"
        );
        assert!(hist.contains("all 42 pass."), "{hist}");
        assert!(hist.contains("[thinking] Splitting by concern."), "{hist}");
        assert!(!hist.contains("three pa..."), "{hist}");
        let show = env
            .run(&["--format", "json", "sessions", "show", "sess-node-1"])
            .ok()
            .json();
        assert_eq!(show["name"], "api");
        assert_eq!(show["cwd"], "/tmp/node-project");
        assert!(show.get("pid").is_none_or(Value::is_null), "{show}");
        assert_eq!(show["acpx"]["current_mode_id"], "code");
        assert_eq!(show["acpx"]["available_commands"][0], "plan");
        assert_eq!(show["acpx"]["desired_config_options"]["model"], "large");
        assert_eq!(show["importedFrom"]["source"], "node-acpx");
        assert_eq!(show["thread"]["title"], "Parser work");
        let ev = env
            .run(&["--format", "json", "sessions", "events", "sess-node-1"])
            .ok()
            .json_lines();
        let count = |t: &str| ev.iter().filter(|e| e["type"] == t).count();
        assert_eq!(count("prompt_started"), 2);
        assert_eq!(count("prompt_done"), 2);
        assert_eq!(count("client_operation"), 1);
        assert!(
            count("node_journal") >= 4,
            "initialize, session/new and responses are kept"
        );
        let seqs: Vec<u64> = ev.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
        assert_eq!(seqs, (1..=ev.len() as u64).collect::<Vec<_>>());

        // 2: closed, record only, with Audio kept aside.
        let two = by_node("sess-node-2");
        assert_eq!(two["threadSource"], "record");
        let show = env
            .run(&["--format", "json", "sessions", "show", "sess-node-2"])
            .ok()
            .json();
        assert_eq!(show["closed"], true);
        let h = env
            .run(&["--format", "json", "sessions", "history", "sess-node-2"])
            .ok()
            .json();
        assert_eq!(
            h["messages"][0]["User"]["acpx_node_content"][0]["Audio"]["mime_type"],
            "audio/wav"
        );
        assert_eq!(
            h["messages"][1]["Agent"]["content"][0]["Text"],
            "It says hello."
        );

        // 3: an id that cannot be a file name gets a fresh one; partial journal: record kept.
        let three = by_node("sess:node-3");
        assert!(
            three["acpxRecordId"]
                .as_str()
                .unwrap()
                .starts_with("sess_node-3-"),
            "{three}"
        );
        assert_eq!(three["threadSource"], "record");
        assert_eq!(three["messages"], 6);
        assert_eq!(three["acpxSessionId"], "sess:node-3");

        // The imported sessions are consistent.
        let (code, report) = fsck(&env, false);
        assert_eq!(code, 0, "{report}");
        // Importing again is safe: nothing is duplicated.
        let again = env
            .run(&[
                "--format",
                "json",
                "sessions",
                "import",
                "--from-node-acpx",
                dir.to_str().unwrap(),
            ])
            .ok()
            .json();
        assert!(again["imported"].as_array().unwrap().is_empty(), "{again}");
        assert_eq!(
            again["skipped"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|s| s["alreadyPresent"] == true)
                .count(),
            3
        );
        assert_eq!(list_ids(&env, backend).len(), 3);
        // A directory without sessions is a usage error.
        let empty = tempfile::tempdir().unwrap();
        let r = env.run(&[
            "sessions",
            "import",
            "--from-node-acpx",
            empty.path().to_str().unwrap(),
        ]);
        assert_eq!(r.code, 2, "{r:?}");
        // The error alone: no report of "0 sessions imported" before it.
        assert!(!r.stderr.contains("imported 0"), "{}", r.stderr);
        let r = env.run(&[
            "--format",
            "json",
            "sessions",
            "import",
            "--from-node-acpx",
            empty.path().to_str().unwrap(),
        ]);
        assert_eq!(r.code, 2, "{r:?}");
        assert_eq!(r.stdout.lines().count(), 1, "one JSON object: {}", r.stdout);
        assert!(r.json()["error"].is_object(), "{}", r.stdout);
    }
}

#[test]
fn node_acpx_dry_run_stores_nothing_and_history_shows_tool_calls() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../acpx-runtime/tests/fixtures/node-0.19.1/lifecycle");
    for backend in BACKENDS {
        let env = Env::new(backend);
        let import = |extra: &[&str]| {
            let mut args = vec![
                "--format",
                "json",
                "sessions",
                "import",
                "--from-node-acpx",
                dir.to_str().unwrap(),
            ];
            args.extend_from_slice(extra);
            env.run(&args).ok().json()
        };
        let dry = import(&["--dry-run"]);
        assert_eq!(dry["dryRun"], true);
        assert_eq!(dry["imported"].as_array().unwrap().len(), 1, "{dry}");
        let listed = env
            .run(&["--format", "json", "sessions", "list"])
            .ok()
            .json();
        assert_eq!(listed["sessions"], serde_json::json!([]), "{listed}");

        let real = import(&[]);
        let id = real["imported"][0]["acpxRecordId"].as_str().unwrap();
        let hist = env.run(&["sessions", "history", id]).ok().stdout;
        assert!(
            hist.contains("[tool] Read README.md (read, completed)"),
            "{hist}"
        );
        assert!(
            hist.contains("[tool] Search TODO (search, failed)"),
            "{hist}"
        );
    }
}

/// A hostile Node home: a rotated segment that is a FIFO (it hung the import) or a link to
/// `/dev/zero` (it read until memory ran out). The import ends at once, naming the file.
#[test]
fn node_acpx_import_reads_only_regular_files() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../acpx-runtime/tests/fixtures/node-0.19.1/lifecycle");
    let base = "sess-da95d5a925dc40f4963af06d06c6507f";
    for hostile in ["fifo", "dev-zero"] {
        let env = Env::new("fs");
        let dir = env.home().join("node-home");
        std::fs::create_dir(&dir).unwrap();
        for f in std::fs::read_dir(&fixture).unwrap().flatten() {
            std::fs::copy(f.path(), dir.join(f.file_name())).unwrap();
        }
        let rotated = dir.join(format!("{base}.stream.1.ndjson"));
        match hostile {
            "fifo" => {
                let c = std::ffi::CString::new(rotated.to_str().unwrap()).unwrap();
                // SAFETY: mkfifo(3) on a NUL-terminated path the test owns.
                assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
            }
            _ => std::os::unix::fs::symlink("/dev/zero", &rotated).unwrap(),
        }
        let t0 = std::time::Instant::now();
        let r = env.run(&[
            "sessions",
            "import",
            "--from-node-acpx",
            dir.to_str().unwrap(),
        ]);
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(20),
            "{hostile}: {:?}",
            t0.elapsed()
        );
        let all = format!("{}{}", r.stdout, r.stderr);
        assert!(
            all.contains(".stream.1.ndjson")
                && (all.contains("not a regular file") || all.contains("symbolic link")),
            "{hostile}: {r:?}"
        );
    }
}
