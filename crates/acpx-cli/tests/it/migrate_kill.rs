//! `acpx migrate` killed with SIGKILL half-way, both ways, with a real process: every
//! session the target holds afterwards is whole (its snapshot and log equal the source's),
//! none is half-written or damaged, and a rerun completes the migration (keeping what was
//! copied, identical, and copying the rest); a migration that completes adds no lock file to either store.

use crate::common;

use std::path::Path;

use common::process::{kill, wait_for};
use common::{exported, uuid, Env};

/// Sessions in the source: enough that a migration takes a while in a debug build.
const SESSIONS: usize = 1_500;

/// Copies the one session of the fs store of `env` until there are `n` (the id replaced in
/// its snapshot and log, as `cargo xtask bench migrate` does).
fn replicate(env: &Env, n: usize) -> Vec<String> {
    let dir = env.home().join("sessions");
    let id = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(".json")
                .filter(|s| !s.starts_with('.'))
                .map(str::to_owned)
        })
        .next()
        .unwrap();
    let json = std::fs::read_to_string(dir.join(format!("{id}.json"))).unwrap();
    let log = std::fs::read_to_string(dir.join(format!("{id}.events.ndjson"))).unwrap();
    let mut ids = vec![id.clone()];
    for _ in 1..n {
        let new = format!("kill-{}", uuid());
        std::fs::write(dir.join(format!("{new}.json")), json.replace(&id, &new)).unwrap();
        std::fs::write(
            dir.join(format!("{new}.events.ndjson")),
            log.replace(&id, &new),
        )
        .unwrap();
        ids.push(new);
    }
    ids
}

fn listed(env: &Env, store: &str) -> (Vec<String>, usize) {
    let v = env
        .run(&["--format", "json", "--store", store, "sessions", "list"])
        .ok()
        .json();
    let ids = v["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["acpxRecordId"].as_str().unwrap().to_owned())
        .collect();
    let skipped = v["skipped"].as_array().map_or(0, Vec::len);
    (ids, skipped)
}

fn lock_files(home: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for (dir, suffix) in [("sessions", ".lock"), ("acpx.db.locks", "")] {
        if let Ok(entries) = std::fs::read_dir(home.join(dir)) {
            for e in entries {
                let name = e.unwrap().file_name().into_string().unwrap();
                if name.ends_with(suffix)
                    && !name.starts_with(".index")
                    && !name.starts_with(".search")
                {
                    found.push(format!("{dir}/{name}"));
                }
            }
        }
    }
    found
}

/// Spawns `acpx --store <from> migrate --to <to>` in `env`, SIGKILLs it once `started` says
/// the target is being written, and returns whether it was still running then.
fn kill_midway(env: &Env, from: &str, to: &str, started: impl Fn() -> bool) -> bool {
    let mut child = env
        .cmd()
        .args(["--store", from, "--format", "quiet", "migrate", "--to", to])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = u64::from(child.id());
    wait_for("the migration to write its first sessions", || {
        started() || child.try_wait().unwrap().is_some()
    });
    let running = child.try_wait().unwrap().is_none();
    kill(pid, libc::SIGKILL);
    child.wait().unwrap();
    running
}

/// Every session in `to` is whole, none is reported damaged, and a rerun completes: it keeps
/// the sessions the killed run copied (reported as already copied) and copies the rest.
/// `from` is the backend the rerun copies from (in `target`'s home), `source` and
/// `source_store` where the originals are read.
fn check_after_kill(
    target: &Env,
    from: &str,
    to: &str,
    (source, source_store): (&Env, &str),
    all: &[String],
) -> usize {
    let (ids, skipped) = listed(target, to);
    assert_eq!(
        skipped, 0,
        "no half-written session is left in the {to} store"
    );
    assert!(ids.len() <= all.len());
    // Compare a spread of the copies (every one would take thousands of processes).
    let step = (ids.len() / 8).max(1);
    for id in ids.iter().step_by(step).chain(ids.last()) {
        assert_eq!(
            exported(target, to, id),
            exported(source, source_store, id),
            "{id} in the {to} store"
        );
    }
    // Run again, it copies the rest and keeps what the killed run copied.
    let again = target
        .run(&["--store", from, "--format", "json", "migrate", "--to", to])
        .ok()
        .json();
    assert_eq!(again["verified"], true);
    assert_eq!(again["alreadyCopiedCount"], ids.len());
    assert_eq!(again["sessionCount"], all.len() - ids.len());
    let (mut now, skipped) = listed(target, to);
    assert_eq!(skipped, 0);
    let mut expected = all.to_vec();
    now.sort();
    expected.sort();
    assert_eq!(
        now, expected,
        "every session is in the {to} store after the rerun"
    );
    let step = (all.len() / 8).max(1);
    for id in all.iter().step_by(step) {
        assert_eq!(
            exported(target, to, id),
            exported(source, source_store, id),
            "{id} in the {to} store after the rerun"
        );
    }
    ids.len()
}

#[test]
fn a_killed_migrate_leaves_whole_sessions_both_ways_and_a_finished_one_adds_no_lock_file() {
    let env = Env::new("fs");
    let agent = env.agent_cmd("");
    env.run(&["--agent", &agent, "sessions", "new"]).ok();
    env.run(&["--no-owner", "--agent", &agent, "tools"]).ok();
    let ids = replicate(&env, SESSIONS);

    // fs -> sqlite, killed once the database has taken about a batch (256 sessions of ~10 kB).
    let wal = env.home().join("acpx.db-wal");
    let killed = kill_midway(&env, "fs", "sqlite", || {
        std::fs::metadata(&wal).is_ok_and(|m| m.len() > 3 << 20)
    });
    let copied = check_after_kill(&env, "fs", "sqlite", (&env, "fs"), &ids);
    eprintln!("fs -> sqlite: killed while running: {killed}; {copied} session(s) copied");

    // A complete migration into a fresh database adds no lock file anywhere. The killed one
    // left the links of the batch it held and the batch's lock file (the kernel released the
    // lock, nobody removed the files); the complete one removes every session's (free) lock
    // file it meets, and only the dead batch's file stays.
    for f in ["acpx.db", "acpx.db-wal", "acpx.db-shm"] {
        let _ = std::fs::remove_file(env.home().join(f));
    }
    let mut before = lock_files(env.home());
    env.run(&["--format", "quiet", "migrate", "--to", "sqlite"])
        .ok();
    let after = lock_files(env.home());
    before.sort();
    assert!(after.iter().all(|f| before.contains(f)), "{after:?}");
    assert!(
        after.iter().all(|f| f.starts_with("sessions/.batch.")),
        "{after:?}"
    );

    // sqlite -> fs into an empty home, killed once the first snapshots are there.
    let target = Env::new("sqlite");
    std::fs::copy(env.home().join("acpx.db"), target.home().join("acpx.db")).unwrap();
    for f in ["acpx.db-wal", "acpx.db-shm"] {
        if env.home().join(f).exists() {
            std::fs::copy(env.home().join(f), target.home().join(f)).unwrap();
        }
    }
    let sessions = target.home().join("sessions");
    let killed = kill_midway(&target, "sqlite", "fs", || {
        std::fs::read_dir(&sessions).is_ok_and(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
                .count()
                > 0
        })
    });
    // The killed process opened the store moments ago; the next commands open it as they would
    // once its sweep for a crash's leftovers is due again (at most every 10 minutes).
    let mark = sessions.join(".cleanup");
    if let Ok(f) = std::fs::File::options().write(true).open(&mark) {
        let long_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3_600);
        f.set_modified(long_ago).unwrap();
    }
    let copied = check_after_kill(&target, "sqlite", "fs", (&env, "fs"), &ids);
    eprintln!("sqlite -> fs: killed while running: {killed}; {copied} session(s) copied");
    // The store's open finished the interrupted deletes of the sessions not yet committed.
    let tombstones: Vec<_> = std::fs::read_dir(&sessions)
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().ends_with(".deleted"))
        .collect();
    assert!(tombstones.is_empty(), "{tombstones:?}");
}
