//! A full disk, for real: the home on a 2 MiB tmpfs, a 20,000-chunk reply that cannot fit.
//! Every envelope `prompt --format json` printed must be stored with the same content, no seq
//! may hold two different events, and after space is freed the session goes on where its log
//! ends (`docs/format.md` § Write ordering).
//!
//! Mounting needs root (or CAP_SYS_ADMIN). Without it the test says so on stderr and passes,
//! except under `CI=true`, where a test that cannot run is a failure.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{Env, BACKENDS};
use serde_json::Value;

/// A tmpfs mounted over a directory for the life of the value.
struct SmallDisk {
    dir: PathBuf,
}

impl SmallDisk {
    fn mount(dir: &Path, size: &str) -> Result<SmallDisk, String> {
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if out.status.success() {
            Ok(SmallDisk {
                dir: dir.to_owned(),
            })
        } else {
            Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
        }
    }

    /// Gives the disk more room, as a user who frees space does.
    fn grow(&self, size: &str) {
        let ok = Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(&self.dir)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "cannot grow the tmpfs at {}", self.dir.display());
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(&self.dir)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            // A process of the test still has a file open there: detach it anyway.
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        }
    }
}

/// The envelopes among `prompt --format json` output lines, by seq.
fn printed_envelopes(stdout: &str, into: &mut BTreeMap<u64, Value>) {
    for line in stdout.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
        if let (Some(seq), Some(_)) = (v["seq"].as_u64(), v.get("eventVersion")) {
            let earlier = into.insert(seq, v.clone());
            assert!(
                earlier.is_none_or(|e| e == v),
                "seq {seq} was printed twice with different events"
            );
        }
    }
}

/// Every printed envelope is stored under its seq with the same content; the log is 1..=n.
fn assert_printed_are_stored(env: &Env, id: &str, printed: &BTreeMap<u64, Value>) {
    let r = env.run(&["--format", "json", "sessions", "events", id]);
    assert_eq!(r.code, 0, "{r:?}");
    let stored = r.json_lines();
    for (i, e) in stored.iter().enumerate() {
        assert_eq!(e["seq"].as_u64(), Some(i as u64 + 1), "the log is gap-free");
    }
    for (seq, e) in printed {
        let s = stored
            .get(usize::try_from(*seq).unwrap() - 1)
            .unwrap_or_else(|| panic!("printed seq {seq} is not stored ({} stored)", stored.len()));
        assert_eq!(s, e, "seq {seq}: printed and stored differ");
    }
}

#[test]
fn a_full_disk_loses_nothing_that_was_printed() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let disk = match SmallDisk::mount(env.home(), "2m") {
            Ok(d) => d,
            Err(why) => {
                assert!(
                    std::env::var("CI").as_deref() != Ok("true"),
                    "CI=true: the full-disk test must run, but mounting a tmpfs failed: {why}"
                );
                eprintln!("SKIPPED a_full_disk_loses_nothing_that_was_printed: cannot mount a tmpfs ({why})");
                return;
            }
        };
        let agent = env.agent_cmd("");
        let id = env.new_session(&agent);
        // Room to free once the disk has filled up.
        let ballast = env.home().join("ballast");
        std::fs::write(&ballast, vec![0u8; 512 * 1024]).unwrap();

        let mut printed = BTreeMap::new();
        let r = env.run(&[
            "--format",
            "json",
            "--no-owner",
            "--agent",
            &agent,
            "prompt",
            "stream 20000",
        ]);
        assert_ne!(
            r.code, 0,
            "{backend}: a reply that cannot be stored fails the turn"
        );
        assert!(
            ["No space left", "disk is full"]
                .iter()
                .any(|w| r.stderr.contains(w) || r.stdout.contains(w)),
            "{backend}: the error says why: {}",
            r.stderr
        );
        printed_envelopes(&r.stdout, &mut printed);
        assert!(!printed.is_empty(), "{backend}: {r:?}");
        // Space again: the ballast goes, and the disk grows. Freeing the ballast alone was not
        // always enough on SQLite: now and then the next prompt found the disk full again when
        // it wrote its run file, most likely because the write-ahead log the failed turn left
        // is checkpointed into the database file by the next process that opens it.
        std::fs::remove_file(&ballast).unwrap();
        disk.grow("8m");
        assert_printed_are_stored(&env, &id, &printed);

        // With space again, the session goes on from where its log ends.
        let r = env.run(&[
            "--format",
            "json",
            "--no-owner",
            "--agent",
            &agent,
            "prompt",
            "echo after the outage",
        ]);
        assert_eq!(r.code, 0, "{backend}: {r:?}");
        printed_envelopes(&r.stdout, &mut printed);
        assert_printed_are_stored(&env, &id, &printed);
        drop(disk);
    }
}
