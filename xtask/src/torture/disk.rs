//! Output and storage that fail: a home on a full filesystem, and stdout closed early or
//! unwritable.
//!
//! - **Full disk.** The home lives on a 2 MiB tmpfs mounted under a temporary directory
//!   (`mount -t tmpfs -o size=2m`; when the mount is refused the scenario is reported as *not
//!   run*, never as passed). Streamed prompts run until the disk is full; every envelope they
//!   printed must be stored with the same seq and content. Then space is freed and one more
//!   prompt runs: no seq that was printed may now hold a different event.
//! - **Closed pipes.** `prompt "stream N" | head -c 10` and `prompt … > /dev/full`, with the
//!   queue owner and with `--no-owner`, in text and JSON: the turn must be recorded to its end
//!   (`prompt_done` or `prompt_error`), and `status` must not say the session is running.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use super::harness::{first_line, wait_for, Env, Figures};
use super::Plan;

fn mount_tmpfs(at: &Path) -> Result<(), String> {
    std::fs::create_dir_all(at).map_err(|e| format!("cannot create {}: {e}", at.display()))?;
    let out = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=2m", "tmpfs"])
        .arg(at)
        .output()
        .map_err(|e| format!("cannot run mount: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "mount -t tmpfs refused: {}",
            first_line(&String::from_utf8_lossy(&out.stderr))
        ))
    }
}

fn unmount(at: &Path) {
    // Lazy: an owner still idling on the home lets go of it when it exits.
    let _ = Command::new("umount").arg("-l").arg(at).output();
}

pub fn full_disk(plan: &Plan, store: &str) -> Figures {
    let mut f = Figures::new("full disk (2 MiB tmpfs home)", store);
    let dir = match tempfile::Builder::new()
        .prefix("acpx-torture-disk-")
        .tempdir()
    {
        Ok(d) => d,
        Err(e) => {
            f.not_run = Some(format!("no temporary directory: {e}"));
            return f;
        }
    };
    let mnt = dir.path().join("disk");
    if let Err(e) = mount_tmpfs(&mnt) {
        f.not_run = Some(e);
        return f;
    }
    let result = full_disk_on(plan, store, &mnt, dir.path(), &mut f);
    unmount(&mnt);
    if let Err(e) = result {
        f.failures += 1;
        f.note(e);
    }
    f
}

fn full_disk_on(
    plan: &Plan,
    store: &str,
    mnt: &Path,
    dir: &Path,
    f: &mut Figures,
) -> Result<(), String> {
    let env = Env::at(&plan.acpx, store, mnt.join("home"), dir.join("project"))?;
    let id = env.new_session()?;
    // Room to free later: a filler taking a quarter of the disk.
    let filler = mnt.join("filler");
    std::fs::write(&filler, vec![0u8; 512 * 1024]).map_err(|e| format!("filler: {e}"))?;
    let mut printed: BTreeMap<u64, Value> = BTreeMap::new();
    let mut errors = 0;
    let prompt = format!("stream {}", plan.stream_chunks.max(20_000));
    for round in 0..plan.disk_rounds {
        for no_owner in [true, false] {
            let mut args = vec!["--format", "json", "--ttl", "2"];
            if no_owner {
                args.push("--no-owner");
            }
            args.extend(["demo", "prompt", &prompt]);
            let run = env.run(&args, Duration::from_secs(300));
            f.tried += 1;
            f.check_panic("prompt on a full disk", &run);
            if run.code != Some(0) {
                errors += 1;
                if !run.explained() {
                    f.failures += 1;
                    f.note(format!(
                        "prompt failed (exit {:?}) without a message",
                        run.code
                    ));
                } else {
                    f.note(format!(
                        "prompt exit {:?}: {}",
                        run.code,
                        first_line(&run.stderr)
                    ));
                }
            }
            for (_, v) in run.json_lines() {
                if let Some(seq) = v["seq"].as_u64() {
                    if v["acpxRecordId"] == id.as_str() {
                        printed.insert(seq, v);
                    }
                }
            }
            if !no_owner {
                env.wait_idle(Duration::from_secs(60));
            }
        }
        if round + 1 == plan.disk_rounds {
            let _ = std::fs::remove_file(&filler);
            let run = env.run(
                &[
                    "--format",
                    "json",
                    "--no-owner",
                    "demo",
                    "prompt",
                    "echo after",
                ],
                Duration::from_secs(120),
            );
            f.tried += 1;
            f.check_panic("prompt after space was freed", &run);
            for (_, v) in run.json_lines() {
                if let Some(seq) = v["seq"].as_u64() {
                    if let Some(before) = printed.get(&seq) {
                        if *before != v {
                            f.lost += 1;
                            f.note(format!("seq {seq} was printed twice with different events"));
                        }
                    }
                }
            }
        }
    }
    let stored = env.stored(&id)?;
    let mut lost = 0;
    for (seq, v) in &printed {
        match stored.get(seq) {
            Some((_, s)) if s == v => {}
            _ => lost += 1,
        }
    }
    f.lost += lost;
    f.note(format!(
        "{} events printed, {lost} of them not stored as printed; {errors} prompts failed",
        printed.len()
    ));
    if let Err(e) = env.fsck(f) {
        f.failures += 1;
        f.note(e);
    }
    Ok(())
}

/// How one closed-pipe run's stdout is wired.
#[derive(Clone, Copy)]
enum Sink {
    /// Read 10 bytes, then close the pipe (`| head -c 10`).
    Head,
    /// `> /dev/full`.
    DevFull,
}

pub fn closed_pipes(plan: &Plan, store: &str) -> Figures {
    let mut f = Figures::new("closed stdout (head -c 10, /dev/full)", store);
    let env = match Env::new(&plan.acpx, store) {
        Ok(e) => e,
        Err(e) => {
            f.not_run = Some(e);
            return f;
        }
    };
    let id = match env.new_session() {
        Ok(id) => id,
        Err(e) => {
            f.failures += 1;
            f.note(e);
            return f;
        }
    };
    let prompt = format!("stream {}", plan.stream_chunks);
    let mut codes = BTreeMap::<String, u32>::new();
    let mut known_last = 0u64;
    for sink in [Sink::Head, Sink::DevFull] {
        for format in ["text", "json"] {
            for no_owner in [false, true] {
                let mut args = vec!["--format", format, "--ttl", "2"];
                if no_owner {
                    args.push("--no-owner");
                }
                args.extend(["demo", "prompt", &prompt]);
                let mut cmd = env.cmd(&args);
                cmd.stderr(Stdio::null());
                match sink {
                    Sink::Head => cmd.stdout(Stdio::piped()),
                    Sink::DevFull => {
                        match std::fs::OpenOptions::new().write(true).open("/dev/full") {
                            Ok(file) => cmd.stdout(file),
                            Err(e) => {
                                f.note(format!("/dev/full not available: {e}"));
                                continue;
                            }
                        }
                    }
                };
                let Ok(mut child) = cmd.spawn() else {
                    f.failures += 1;
                    continue;
                };
                if let Some(mut out) = child.stdout.take() {
                    let mut ten = [0u8; 10];
                    let _ = out.read_exact(&mut ten);
                    drop(out);
                }
                let (code, timed_out) = wait_for(&mut child, Duration::from_secs(180));
                f.tried += 1;
                let label = format!(
                    "{} {format} {}",
                    match sink {
                        Sink::Head => "head -c 10",
                        Sink::DevFull => "/dev/full",
                    },
                    if no_owner { "--no-owner" } else { "owner" }
                );
                *codes.entry(format!("{label}: exit {code:?}")).or_default() += 1;
                if code == Some(101) {
                    f.panics += 1;
                    f.note(format!("PANIC: {label}"));
                }
                if timed_out {
                    f.failures += 1;
                    f.note(format!("{label}: hung for 180 s"));
                }
                if !env.wait_idle(Duration::from_secs(120)) {
                    f.failures += 1;
                    f.note(format!("{label}: status still says running after 120 s"));
                }
                known_last = check_new_turn(&env, &id, known_last, &label, &mut f);
            }
        }
    }
    for (k, n) in codes {
        f.note(if n > 1 { format!("{k} ×{n}") } else { k });
    }
    f
}

/// The turn this run started (the events after seq `known_last`) must be recorded to its end.
/// Returns the log's new last seq.
fn check_new_turn(env: &Env, id: &str, known_last: u64, label: &str, f: &mut Figures) -> u64 {
    let stored = match env.stored_from(id, known_last + 1) {
        Ok(s) => s,
        Err(e) => {
            f.lost += 1;
            f.note(format!("{label}: the log cannot be read: {e}"));
            return known_last;
        }
    };
    let last = stored.keys().last().copied().unwrap_or(known_last);
    let events: Vec<&Value> = stored.values().map(|(_, v)| v).collect();
    let Some(start) = events.iter().position(|v| v["type"] == "prompt_started") else {
        f.note(format!(
            "{label}: the prompt was never sent (no turn recorded)"
        ));
        return last;
    };
    let req = events[start]["requestId"].clone();
    let ended = events[start..].iter().any(|v| {
        v["requestId"] == req && matches!(v["type"].as_str(), Some("prompt_done" | "prompt_error"))
    });
    let chunks = events[start..]
        .iter()
        .filter(|v| v["type"] == "session_update")
        .count();
    if !ended {
        f.lost += 1;
        f.note(format!(
            "{label}: turn not recorded to its end ({chunks} updates stored)"
        ));
    }
    last
}
