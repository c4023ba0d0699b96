//! `cargo xtask torture [--quick] [--store fs|sqlite|all] [--kills N] [--seed N] [--acpx PATH]`: the
//! reliability torture suite of docs/RELIABILITY.md, run with real `acpx` processes against
//! the scripted agent (`acpx __test-agent`, the built-in `demo` agent).
//!
//! | module | scenarios |
//! |---|---|
//! | [`kill`] | SIGKILL at random points of `prompt "stream N"`; concurrent prompts on one session |
//! | [`disk`] | a home on a full 2 MiB tmpfs; stdout closed early (`head -c 10`) or `/dev/full` |
//! | [`damage`] | a corpus of damaged homes (snapshot, log, segment, index, database, config) |
//! | [`agents`] | agents that crash, hang, exit, or write garbage |
//!
//! Each scenario prints tried / lost / panics / failures per store. The run exits 1 when
//! anything acknowledged was lost or anything panicked (failures are reported, and fail the
//! run only with `--strict`). A scenario that cannot run (e.g. `mount` refused) is reported as
//! `not run`, never as passed.

mod agents;
mod damage;
mod disk;
mod harness;
mod kill;

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use harness::{Figures, Rng, TortureResult};

/// What one run does (counts differ between `--quick` and a full run).
pub struct Plan {
    pub acpx: PathBuf,
    pub stores: Vec<String>,
    pub seed: u64,
    pub strict: bool,
    pub quick: bool,
    /// SIGKILLs per store.
    pub kills: u64,
    /// Chunks of each streamed prompt.
    pub stream_chunks: u64,
    /// Kills land uniformly in `0..kill_window_ms` after the spawn.
    pub kill_window_ms: u64,
    /// fsck after every this many kills.
    pub fsck_every: u64,
    /// Parallel prompts per round, and rounds.
    pub writers: u64,
    pub concurrent_rounds: u64,
    /// Rounds of streamed prompts on the full disk.
    pub disk_rounds: u64,
}

impl Plan {
    pub fn parse(args: &[String]) -> TortureResult<Plan> {
        let mut quick = false;
        let mut strict = false;
        let mut store = "all".to_owned();
        let mut seed = None;
        let mut acpx = None;
        let mut kills = None;
        let mut it = args.iter();
        while let Some(a) = it.next() {
            match a.as_str() {
                "--quick" => quick = true,
                "--strict" => strict = true,
                "--store" => store = it.next().ok_or("--store needs fs, sqlite or all")?.clone(),
                "--seed" => {
                    seed = Some(
                        it.next()
                            .and_then(|v| v.parse().ok())
                            .ok_or("--seed needs a number")?,
                    )
                }
                "--kills" => {
                    kills = Some(
                        it.next()
                            .and_then(|v| v.parse().ok())
                            .filter(|n| *n > 0)
                            .ok_or("--kills needs a positive number")?,
                    )
                }
                "--acpx" => acpx = Some(PathBuf::from(it.next().ok_or("--acpx needs a path")?)),
                other => return Err(format!("unknown option {other:?}")),
            }
        }
        let stores = match store.as_str() {
            "all" => vec!["fs".to_owned(), "sqlite".to_owned()],
            "fs" | "sqlite" => vec![store],
            other => return Err(format!("--store {other:?}: expected fs, sqlite or all")),
        };
        let seed = seed.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
        let acpx = match acpx {
            Some(p) => p,
            None => build_acpx()?,
        };
        // Absolute: every run starts in its own project directory.
        let acpx = acpx
            .canonicalize()
            .map_err(|e| format!("{}: {e}", acpx.display()))?;
        Ok(Plan {
            acpx,
            stores,
            seed,
            strict,
            quick,
            kills: kills.unwrap_or(if quick { 4 } else { 100 }),
            stream_chunks: if quick { 2_000 } else { 20_000 },
            kill_window_ms: if quick { 1_000 } else { 4_000 },
            fsck_every: if quick { 3 } else { 10 },
            writers: if quick { 4 } else { 8 },
            concurrent_rounds: if quick { 2 } else { 6 },
            disk_rounds: if quick { 1 } else { 3 },
        })
    }
}

/// Builds `acpx` (debug profile, so that CI reuses the test build) and returns its path.
fn build_acpx() -> TortureResult<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(PathBuf::from)
        .ok_or("xtask lives in the workspace root")?;
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["build", "--quiet", "-p", "acpx-cli", "--bin", "acpx"])
        .current_dir(&root)
        .status()
        .map_err(|e| format!("cannot run cargo build: {e}"))?;
    if !status.success() {
        return Err("cargo build -p acpx-cli failed".into());
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    Ok(target.join("debug").join("acpx"))
}

fn print_table(all: &[Figures]) {
    println!(
        "\n{:<44} {:<7} {:>6} {:>5} {:>7} {:>8}",
        "scenario", "store", "tried", "lost", "panics", "failures"
    );
    for f in all {
        match &f.not_run {
            Some(why) => println!("{:<44} {:<7} not run: {why}", f.scenario, f.store),
            None => println!(
                "{:<44} {:<7} {:>6} {:>5} {:>7} {:>8}",
                f.scenario, f.store, f.tried, f.lost, f.panics, f.failures
            ),
        }
    }
    for f in all {
        if f.notes.is_empty() {
            continue;
        }
        println!("\n{} [{}]:", f.scenario, f.store);
        for n in &f.notes {
            println!("  - {n}");
        }
    }
}

/// Runs every scenario on every store; `Ok(true)` when nothing was lost and nothing panicked.
pub fn run(plan: &Plan) -> TortureResult<bool> {
    let started = Instant::now();
    println!(
        "acpx torture ({}), binary {}, seed {} (repeat with --seed {})",
        if plan.quick { "quick" } else { "full" },
        plan.acpx.display(),
        plan.seed,
        plan.seed
    );
    let mut rng = Rng::new(plan.seed);
    let mut all = Vec::new();
    for store in &plan.stores {
        let scenarios: [&dyn Fn(&mut Rng) -> Figures; 6] = [
            &|rng| kill::sigkill(plan, store, rng),
            &|_| kill::concurrent(plan, store),
            &|_| disk::full_disk(plan, store),
            &|_| disk::closed_pipes(plan, store),
            &|_| damage::corpus(plan, store),
            &|_| agents::misbehaving(plan, store),
        ];
        for scenario in scenarios {
            let t = Instant::now();
            let f = scenario(&mut rng);
            // Each scenario's figures as soon as it ends, so that a run cut short still tells.
            eprintln!(
                "  {} [{store}]: {:.0} s: tried {}, lost {}, panics {}, failures {}{}",
                f.scenario,
                t.elapsed().as_secs_f64(),
                f.tried,
                f.lost,
                f.panics,
                f.failures,
                f.not_run
                    .as_deref()
                    .map(|w| format!(" (not run: {w})"))
                    .unwrap_or_default()
            );
            all.push(f);
        }
    }
    print_table(&all);
    let bad = all.iter().any(Figures::bad);
    let failed = all.iter().any(|f| f.failures > 0);
    println!(
        "\ntorture: {} in {:.0} s",
        if bad {
            "LOST DATA OR PANICKED"
        } else if failed {
            "nothing lost, no panic; some checks failed (see the notes)"
        } else {
            "nothing lost, no panic, no failure"
        },
        started.elapsed().as_secs_f64()
    );
    Ok(!(bad || (plan.strict && failed)))
}
