//! Crash and concurrency scenarios: `acpx prompt "stream N"` killed with SIGKILL at random
//! points, and N prompts at once on one session.
//!
//! After each kill, every envelope the killed command printed (`--format json`) must be in the
//! store with the same seq and content, the stored seqs must be 1, 2, 3, … without a gap, and
//! the snapshot must be readable (`sessions show`); `fsck` must end clean, after `--repair`
//! when it found something repairable. Kills alternate between `--no-owner` (the process that
//! holds the writer lock dies) and the default queue owner (the client dies, the owner goes on).

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::harness::{drain, first_line, Env, Figures, Rng};
use super::Plan;

/// Compares what was printed with what is stored from seq `from` on; returns the printed
/// envelopes not stored as printed, and the gaps in the stored seqs.
fn compare(
    printed: &[(String, Value)],
    stored: &BTreeMap<u64, (String, Value)>,
    from: u64,
) -> (u64, u64) {
    let mut lost = 0;
    for (_, v) in printed {
        let Some(seq) = v["seq"].as_u64() else {
            continue;
        };
        match stored.get(&seq) {
            Some((_, s)) if s == v => {}
            _ => lost += 1,
        }
    }
    let mut gaps = 0;
    let mut expect = from;
    for &seq in stored.keys() {
        if seq != expect {
            gaps += 1;
        }
        expect = seq + 1;
    }
    (lost, gaps)
}

pub fn sigkill(plan: &Plan, store: &str, rng: &mut Rng) -> Figures {
    let mut f = Figures::new("SIGKILL during `prompt \"stream N\"`", store);
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
    let (mut printed_total, mut gaps_total, mut unreadable) = (0u64, 0u64, 0u64);
    let mut known_last = 0u64;
    for i in 0..plan.kills {
        let no_owner = i.is_multiple_of(2);
        let mut args = vec!["--format", "json", "--ttl", "3"];
        if no_owner {
            args.push("--no-owner");
        }
        args.extend(["demo", "prompt", &prompt]);
        let mut cmd = env.cmd(&args);
        cmd.stdout(Stdio::piped()).stderr(Stdio::null());
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                f.not_run = Some(format!("cannot start acpx: {e}"));
                return f;
            }
        };
        let out = drain(child.stdout.take());
        std::thread::sleep(Duration::from_millis(rng.range(0, plan.kill_window_ms)));
        let _ = child.kill();
        let _ = child.wait();
        f.tried += 1;
        let stdout = out
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_default();
        let run = super::harness::Run {
            stdout,
            ..Default::default()
        };
        let printed = run.json_lines();
        printed_total += printed.len() as u64;
        if !no_owner && !env.wait_idle(Duration::from_secs(120)) {
            f.failures += 1;
            f.note("the owner's turn did not end within 120 s of its client's kill");
        }
        // Only the part of the log this kill could touch is read (the whole log grows by up
        // to N events per kill); the first read and the fsck runs cover the rest.
        let from = printed
            .iter()
            .filter_map(|(_, v)| v["seq"].as_u64())
            .min()
            .unwrap_or(known_last + 1)
            .min(known_last + 1);
        match env.stored_from(&id, from) {
            Ok(stored) => {
                known_last = stored.keys().last().copied().unwrap_or(known_last);
                let (lost, gaps) = compare(&printed, &stored, from);
                if lost > 0 {
                    f.note(format!(
                        "kill {i} ({}): {lost} of {} printed events not stored",
                        if no_owner { "--no-owner" } else { "owner" },
                        printed.len()
                    ));
                }
                f.lost += lost;
                gaps_total += gaps;
            }
            Err(e) => {
                f.failures += 1;
                f.lost += printed.len() as u64;
                f.note(format!("kill {i}: the log cannot be read: {e}"));
            }
        }
        let show = env.run(
            &["--format", "json", "demo", "sessions", "show", &id],
            Duration::from_secs(60),
        );
        f.check_panic("sessions show", &show);
        if show.code != Some(0) {
            unreadable += 1;
            f.note(format!(
                "kill {i}: snapshot unreadable: {}",
                first_line(&show.stderr)
            ));
        }
        if (i + 1).is_multiple_of(plan.fsck_every) || i + 1 == plan.kills {
            if let Err(e) = env.fsck(&mut f) {
                f.failures += 1;
                f.note(e);
            }
        }
    }
    f.failures += gaps_total + unreadable;
    f.note(format!(
        "{printed_total} events printed before the kills; {gaps_total} seq gaps; \
         {unreadable} unreadable snapshots; chunks per prompt {}",
        plan.stream_chunks
    ));
    f
}

/// The request ids of a run's `prompt_started` and whether it printed `prompt_done`.
fn request_of(printed: &[(String, Value)]) -> Option<String> {
    printed
        .iter()
        .find(|(_, v)| v["type"] == "prompt_started")
        .and_then(|(_, v)| v["requestId"].as_str().map(str::to_owned))
}

pub fn concurrent(plan: &Plan, store: &str) -> Figures {
    let mut f = Figures::new("concurrent prompts on one session", store);
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
    let mut acknowledged = Vec::new();
    for round in 0..plan.concurrent_rounds {
        let no_owner = !round.is_multiple_of(2);
        let started = Instant::now();
        let children: Vec<_> = (0..plan.writers)
            .map(|k| {
                let text = format!("echo w{round}-{k}");
                let mut args = vec!["--format", "json", "--ttl", "3"];
                if no_owner {
                    args.push("--no-owner");
                }
                args.extend(["demo", "prompt", text.as_str()]);
                let env_cmd = env.cmd(&args);
                std::thread::spawn(move || super::harness::run(env_cmd, Duration::from_secs(180)))
            })
            .collect();
        for child in children {
            let Ok(run) = child.join() else {
                f.failures += 1;
                continue;
            };
            f.tried += 1;
            f.check_panic("prompt", &run);
            if run.timed_out {
                f.failures += 1;
                f.note("a concurrent prompt hung for 180 s");
            }
            if run.code == Some(0) {
                match request_of(&run.json_lines()) {
                    Some(req) => acknowledged.push(req),
                    None => {
                        f.failures += 1;
                        f.note("a prompt exited 0 without printing its prompt_started");
                    }
                }
            } else if !run.explained() {
                f.failures += 1;
                f.note(format!(
                    "a prompt failed (exit {:?}) without a message",
                    run.code
                ));
            } else {
                f.note(format!(
                    "{} refused: exit {:?}: {}",
                    if no_owner { "--no-owner" } else { "owner" },
                    run.code,
                    first_line(&run.stderr)
                ));
            }
        }
        f.note(format!(
            "round {round} ({}): {} writers in {:.1} s",
            if no_owner { "--no-owner" } else { "owner" },
            plan.writers,
            started.elapsed().as_secs_f64()
        ));
    }
    let stored = match env.stored(&id) {
        Ok(s) => s,
        Err(e) => {
            f.lost += acknowledged.len() as u64;
            f.note(format!("the log cannot be read: {e}"));
            return f;
        }
    };
    // Each acknowledged turn: started and ended in the log, and no other request's prompt
    // events between its start and its end.
    let events: Vec<&Value> = stored.values().map(|(_, v)| v).collect();
    for req in &acknowledged {
        let mine = |v: &&Value| v["requestId"].as_str() == Some(req.as_str());
        let start = events
            .iter()
            .position(|v| mine(v) && v["type"] == "prompt_started");
        let end = events
            .iter()
            .position(|v| mine(v) && v["type"] == "prompt_done");
        match (start, end) {
            (Some(s), Some(e)) if s < e => {
                let foreign = events[s..=e]
                    .iter()
                    .filter(|v| v["stream"] == "prompt" && !mine(v))
                    .count();
                if foreign > 0 {
                    f.failures += 1;
                    f.note(format!(
                        "turn {req} interleaved with {foreign} foreign events"
                    ));
                }
            }
            _ => {
                f.lost += 1;
                f.note(format!("acknowledged turn {req} is not stored whole"));
            }
        }
    }
    f.note(format!(
        "{} turns acknowledged, {} events stored",
        acknowledged.len(),
        stored.len()
    ));
    f
}
