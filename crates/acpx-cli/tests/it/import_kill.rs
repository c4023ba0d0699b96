//! `acpx sessions import` of a long archive killed with SIGKILL part-way, on both local
//! backends, with a real process: nothing of the session is visible afterwards (`sessions
//! list`, `show`), `fsck` finds no problem (it reports what the killed import left, apart),
//! and running the same import again completes it: the whole session, every event
//! (`docs/format.md` § Importing a session: staged, then committed).

use crate::common;

use std::io::Write;
use std::path::{Path, PathBuf};

use common::process::{kill, wait_for};
use common::{Env, Seed, BACKENDS};
use serde_json::Value;

const AGENT: &str = "npx -y @agentclientprotocol/codex-acp@^1.1.5";

/// Events in the archive: enough that an import takes a while in a debug build.
const EVENTS: u64 = 200_000;

/// Writes the archive of `seed` (with `EVENTS` events) to a file of `env`'s home, a line at a
/// time.
fn write_archive(env: &Env, seed: &Seed<'_>) -> PathBuf {
    let path = env.home().join(format!("{}.ndjson", seed.id));
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    let head = serde_json::json!({"schema": "acpx.export.v1", "session": seed.document()});
    writeln!(f, "{head}").unwrap();
    for seq in 1..=seed.events {
        writeln!(f, "{}", seed.event(seq)).unwrap();
    }
    f.flush().unwrap();
    path
}

/// Bytes the import of `id` has staged so far: the file store's log segments (written
/// behind the session's tombstone), SQLite's spill file.
fn staged_bytes(home: &Path, backend: &str, id: &str) -> u64 {
    let dir = match backend {
        "fs" => home.join("sessions"),
        _ => home.join("acpx.db.staging"),
    };
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    name.starts_with(&format!("{id}.events")) || name == format!("{id}.ndjson")
                })
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// Starts `sessions import <archive>` and SIGKILLs it once it has staged a few MB (a tenth
/// of the log or so); asserts it was still running then.
fn kill_import_midway(env: &Env, backend: &str, archive: &Path, id: &str) {
    let mut child = env
        .cmd()
        .args(["--format", "json", "sessions", "import"])
        .arg(archive)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = u64::from(child.id());
    wait_for("the import to stage part of the log", || {
        staged_bytes(env.home(), backend, id) >= 4 << 20 || child.try_wait().unwrap().is_some()
    });
    assert!(
        child.try_wait().unwrap().is_none(),
        "{backend}: the import finished before it could be killed"
    );
    kill(pid, libc::SIGKILL);
    child.wait().unwrap();
}

fn list(env: &Env) -> Value {
    env.run(&["--format", "json", "sessions", "list"])
        .ok()
        .json()
}

/// `fsck` succeeds with no problem; returns its report.
fn fsck_clean(env: &Env, args: &[&str], backend: &str) -> Value {
    let mut all = vec!["--format", "json", "fsck"];
    all.extend(args);
    let r = env.run(&all);
    assert_eq!(
        r.code, 0,
        "{backend}: fsck {args:?}\nstdout: {}\nstderr: {}",
        r.stdout, r.stderr
    );
    let report = r.json();
    assert_eq!(report["ok"], true, "{backend}: {report}");
    assert_eq!(
        report["problems"],
        serde_json::json!([]),
        "{backend}: {report}"
    );
    report
}

fn stale_ids(report: &Value, key: &str) -> Vec<String> {
    report[key]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|s| s["acpxRecordId"].as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The seqs `sessions events` prints for `args`.
fn seqs(env: &Env, args: &[&str]) -> Vec<u64> {
    let mut all = vec!["--format", "json", "sessions", "events"];
    all.extend(args);
    env.run(&all)
        .ok()
        .json_lines()
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect()
}

#[test]
fn a_killed_import_leaves_nothing_and_a_rerun_completes_it() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let cwd = env.cwd_str();
        let mut seed = Seed::new("rec-killed-import", &cwd, AGENT);
        seed.events = EVENTS;
        seed.audit_seq = EVENTS;
        let archive = write_archive(&env, &seed);

        kill_import_midway(&env, backend, &archive, seed.id);
        // Nothing is visible: not listed (nor reported damaged), not shown.
        let listed = list(&env);
        assert_eq!(
            listed["sessions"],
            serde_json::json!([]),
            "{backend}: {listed}"
        );
        assert!(
            listed["skipped"].as_array().is_none_or(Vec::is_empty),
            "{backend}: {listed}"
        );
        let show = env.run(&["sessions", "show", seed.id]);
        assert_ne!(show.code, 0, "{backend}: the killed import is shown");
        // fsck finds no problem; it names what the killed import left, apart.
        let report = fsck_clean(&env, &[], backend);
        assert_eq!(
            stale_ids(&report, "staleStages"),
            vec![seed.id.to_owned()],
            "{backend}: {report}"
        );

        // The same import again: it completes, whole, with nothing to delete first.
        let again = env.run(&[
            "--format",
            "json",
            "sessions",
            "import",
            archive.to_str().unwrap(),
        ]);
        assert_eq!(again.code, 0, "{backend}: {}", again.stderr);
        let again = again.json();
        assert_eq!(again["acpxRecordId"], seed.id, "{backend}: {again}");
        assert_eq!(again["events"], EVENTS, "{backend}: {again}");
        let listed = list(&env);
        let ids: Vec<&str> = listed["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["acpxRecordId"].as_str().unwrap())
            .collect();
        assert_eq!(ids, vec![seed.id], "{backend}: {listed}");
        assert_eq!(
            seqs(&env, &[seed.id, "--limit", "2"]),
            vec![1, 2],
            "{backend}"
        );
        // The archive's events, then the `session_imported` that records what the archive
        // named as information only (`ops::import_trust`).
        assert_eq!(
            seqs(&env, &[seed.id, "--from-seq", &(EVENTS - 2).to_string()]),
            vec![EVENTS - 2, EVENTS - 1, EVENTS, EVENTS + 1],
            "{backend}"
        );
        let show = env
            .run(&["--format", "json", "sessions", "show", seed.id])
            .ok()
            .json();
        assert_eq!(show["acpxRecordId"], seed.id, "{backend}: {show}");
        // Clean, with nothing left over.
        let report = fsck_clean(&env, &[], backend);
        assert!(report.get("staleStages").is_none(), "{backend}: {report}");

        // Killed again, on another session: `fsck --repair` removes what it left.
        let mut other = Seed::new("rec-killed-twice", &cwd, AGENT);
        other.events = EVENTS;
        other.audit_seq = EVENTS;
        let archive = write_archive(&env, &other);
        kill_import_midway(&env, backend, &archive, other.id);
        let report = fsck_clean(&env, &["--repair"], backend);
        assert_eq!(
            stale_ids(&report, "staleStagesRemoved"),
            vec![other.id.to_owned()],
            "{backend}: {report}"
        );
        let report = fsck_clean(&env, &[], backend);
        assert!(report.get("staleStages").is_none(), "{backend}: {report}");
        assert_eq!(
            staged_bytes(env.home(), backend, other.id),
            0,
            "{backend}: the stale stage's files are gone"
        );
        let listed = list(&env);
        assert_eq!(listed["sessions"].as_array().unwrap().len(), 1, "{backend}");
    }
}
