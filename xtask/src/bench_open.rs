//! `cargo xtask bench open`: what a queue owner costs when it opens a long session
//! (docs/BENCHMARKS.md § Opening a long session; issue 15: a live session ≤ 10 MB above the
//! process baseline, however long).
//!
//! Method: two sessions of the scripted test agent (`acpx __test-agent`) written with
//! `--no-owner`, each in a home of its own: a long one, `--turns` turns (default 30) of
//! `tools B K` (K tool calls a turn, each with B more bytes of input, result text and raw
//! output; default 4000 and 20: an 11 MB `session.json`), and a one-turn one, the baseline.
//! Then `--runs` rounds (default 3); in each, for each build (`--acpx PATH`, repeatable; the
//! release build of the tree by default) and each session, one after the other: a copy of the
//! session's home, so that every owner opens the same snapshot; a `--format quiet` prompt
//! `echo hi`, which starts the owner, timed from spawn to exit; then the owner's `VmHWM`,
//! `VmRSS` and `RssAnon` (`/proc/<pid>/status`, the pid from `status`), a second prompt, and
//! the same again; `sessions close` ends the owner. The figure that matters is each build's
//! peak on the long session above its own peak on the one-turn session.
//!
//! `--commands` measures the other commands instead (docs/BENCHMARKS.md § Reading commands
//! take a long session in pieces): in each round, for each build and session, a copy of the
//! session's home is listed once (so that no command pays the list cache's first read), then
//! each command of [`COMMANDS`] runs on it, stdout to `/dev/null`: its peak RSS is the
//! `ru_maxrss` that `wait4` reports for it, and its time spawn to exit.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::bench_proc::{build_release, loadavg, rss_kb, run_timed};

type BenchResult<T> = Result<T, String>;

/// Parsed options of `bench open`.
pub struct Options {
    backend: String,
    turns: usize,
    tools: usize,
    calls: usize,
    runs: usize,
    acpx: Vec<PathBuf>,
    commands: bool,
}

/// What `--commands` runs on each session (the prompt is the last: it changes the session).
const COMMANDS: &[&[&str]] = &[
    &["status"],
    &["sessions", "show"],
    &["--format", "json", "sessions", "show"],
    &["sessions", "history"],
    &["--format", "json", "sessions", "history"],
    &["sessions", "export", "--as", "json"],
    &["sessions", "export", "--as", "markdown"],
    &["sessions", "export"],
    &["fsck"],
    &["--no-owner", "--format", "quiet", "prompt", "echo hi"],
];

impl Options {
    pub fn parse(args: &[String]) -> BenchResult<Options> {
        let mut o = Options {
            backend: "fs".to_owned(),
            turns: 30,
            tools: 4000,
            calls: 20,
            runs: 3,
            acpx: Vec::new(),
            commands: false,
        };
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let mut num = |what: &str| -> BenchResult<usize> {
                it.next()
                    .and_then(|v| v.parse().ok())
                    .filter(|n| *n > 0)
                    .ok_or_else(|| format!("{what} needs a positive number"))
            };
            match a.as_str() {
                "--turns" => o.turns = num("--turns")?,
                "--tools" => o.tools = num("--tools")?,
                "--calls" => o.calls = num("--calls")?,
                "--runs" => o.runs = num("--runs")?,
                "--commands" => o.commands = true,
                "--backend" => match it.next().map(String::as_str) {
                    Some(b @ ("fs" | "sqlite")) => o.backend = b.to_owned(),
                    other => return Err(format!("--backend needs fs or sqlite, not {other:?}")),
                },
                "--acpx" => {
                    let path = it.next().ok_or("--acpx needs the path of an acpx binary")?;
                    let path = PathBuf::from(path);
                    if !path.is_file() {
                        return Err(format!("--acpx {}: no such file", path.display()));
                    }
                    o.acpx.push(path);
                }
                other => return Err(format!("unknown option {other:?}")),
            }
        }
        Ok(o)
    }
}

/// `VmRSS`, `VmHWM` and `RssAnon` in kB.
type Rss = (u64, u64, u64);

/// The homes and the project the sessions live in, and how to run acpx on them.
struct Setup {
    backend: String,
    /// The scripted agent's command line, the same for every build: a session belongs to its
    /// agent command.
    agent: String,
    project: tempfile::TempDir,
    scratch: tempfile::TempDir,
}

impl Setup {
    /// `acpx ARGS` on `home`, in the project, with the store and the agent of the bench.
    fn command(&self, acpx: &Path, home: &Path, args: &[&str]) -> Command {
        let mut c = Command::new(acpx);
        c.arg("--home")
            .arg(home)
            .args(["--store", &self.backend, "--agent", &self.agent])
            .args(args)
            .current_dir(self.project.path())
            .env_remove("ACPX_HOME")
            .stdin(Stdio::null());
        c
    }

    fn run(&self, acpx: &Path, home: &Path, args: &[&str]) -> BenchResult<(Duration, String)> {
        let mut c = self.command(acpx, home, args);
        c.stdout(Stdio::piped()).stderr(Stdio::piped());
        run_timed(c, args)
    }

    /// A home holding one session of `turns` turns of `tools B K`, written with `--no-owner`.
    fn session(&self, acpx: &Path, name: &str, turns: usize, prompt: &str) -> BenchResult<PathBuf> {
        let home = self.scratch.path().join(name);
        self.run(acpx, &home, &["--no-owner", "sessions", "new"])?;
        for _ in 0..turns {
            self.run(
                acpx,
                &home,
                &["--no-owner", "--format", "quiet", "prompt", prompt],
            )?;
        }
        Ok(home)
    }

    /// A fresh copy of `home`, for one round.
    fn copy(&self, home: &Path) -> BenchResult<PathBuf> {
        let copy = self.scratch.path().join("open");
        let _ = std::fs::remove_dir_all(&copy);
        let status = Command::new("cp")
            .arg("-a")
            .arg(home)
            .arg(&copy)
            .status()
            .map_err(|e| format!("cannot run cp: {e}"))?;
        if !status.success() {
            return Err(format!("cp -a {} failed", home.display()));
        }
        Ok(copy)
    }

    /// The peak RSS in kB of `acpx ARGS` on `home` (`ru_maxrss` of `wait4`) and its wall
    /// time, stdout dropped.
    fn peak_kb(&self, acpx: &Path, home: &Path, args: &[&str]) -> BenchResult<(u64, Duration)> {
        let start = std::time::Instant::now();
        let child = self
            .command(acpx, home, args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot run acpx: {e}"))?;
        let mut status = 0;
        // SAFETY: an all-zero rusage is a valid value, which wait4 fills in.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        let pid = child.id() as libc::pid_t;
        // SAFETY: `pid` is this process's child, not waited for yet; both pointers are valid.
        if unsafe { libc::wait4(pid, &mut status, 0, &mut usage) } != pid {
            return Err(format!("wait4: {}", std::io::Error::last_os_error()));
        }
        if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
            return Err(format!("acpx {args:?} failed (wait status {status})"));
        }
        Ok((usage.ru_maxrss as u64, start.elapsed()))
    }

    /// One owner opening a copy of `home`: the first prompt's wall time, then `VmHWM`, `VmRSS`
    /// and `RssAnon` in kB after it and after a second one.
    fn open(&self, acpx: &Path, home: &Path) -> BenchResult<(Duration, [Rss; 2])> {
        let copy = self.copy(home)?;
        let (first, _) = self.run(acpx, &copy, &["--format", "quiet", "prompt", "echo hi"])?;
        let (_, out) = self.run(acpx, &copy, &["--format", "json", "status"])?;
        let status: Value = serde_json::from_str(out.trim()).map_err(|e| e.to_string())?;
        let pid = status["pid"]
            .as_u64()
            .ok_or_else(|| format!("no running queue owner in the status: {out}"))?;
        let after_one = rss_kb(pid)?;
        self.run(acpx, &copy, &["--format", "quiet", "prompt", "echo again"])?;
        let after_two = rss_kb(pid)?;
        self.run(acpx, &copy, &["sessions", "close"])?;
        Ok((first, [after_one, after_two]))
    }
}

pub fn run(opts: &Options) -> BenchResult<()> {
    let builds = match opts.acpx.is_empty() {
        true => vec![build_release()?],
        false => opts.acpx.clone(),
    };
    let setup = Setup {
        backend: opts.backend.clone(),
        agent: format!("{} __test-agent", builds[0].display()),
        project: tempfile::tempdir().map_err(|e| e.to_string())?,
        scratch: tempfile::tempdir().map_err(|e| e.to_string())?,
    };
    std::fs::create_dir(setup.project.path().join(".git")).map_err(|e| e.to_string())?;
    let prompt = format!("tools {} {}", opts.tools, opts.calls);
    println!("# a queue owner opening a long session\n");
    println!(
        "{} store, scripted test agent; {} cores; load average at start {}",
        opts.backend,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        loadavg()
    );
    let long = setup.session(&builds[0], "long", opts.turns, &prompt)?;
    let short = setup.session(&builds[0], "short", 1, &prompt)?;
    println!(
        "sessions: {} turns of `{prompt}` ({} of snapshot and log) and one turn ({})\n",
        opts.turns,
        disk_use(&long),
        disk_use(&short)
    );
    if opts.commands {
        return commands(opts, &setup, &builds, [&long, &short]);
    }
    println!("| run | build | session | first prompt ms | VmHWM kB | VmRSS kB after 1 → 2 prompts | RssAnon kB after 1 → 2 |");
    println!("|---:|---|---|---:|---:|---|---|");
    let mut peaks = vec![(Vec::new(), Vec::new()); builds.len()];
    for run in 1..=opts.runs {
        for (b, acpx) in builds.iter().enumerate() {
            for (name, home) in [("long", &long), ("one turn", &short)] {
                let (first, [one, two]) = setup.open(acpx, home)?;
                println!(
                    "| {run} | {} | {name} | {:.0} | {} | {} → {} | {} → {} |",
                    acpx.display(),
                    first.as_secs_f64() * 1e3,
                    two.1,
                    one.0,
                    two.0,
                    one.2,
                    two.2
                );
                let (longs, shorts) = &mut peaks[b];
                match name {
                    "long" => longs.push(two.1),
                    _ => shorts.push(two.1),
                }
            }
        }
    }
    println!();
    for (acpx, (longs, shorts)) in builds.iter().zip(&peaks) {
        let median = |v: &[u64]| {
            let mut v = v.to_vec();
            v.sort_unstable();
            v[v.len() / 2]
        };
        let (l, s) = (median(longs), median(shorts));
        println!(
            "{}: peak on the long session {l} kB, on the one-turn session {s} kB: {:.1} MB above (medians)",
            acpx.display(),
            (l as f64 - s as f64) / 1024.0
        );
    }
    println!("\nload average at end {}", loadavg());
    Ok(())
}

/// `--commands`: each command's peak on the long session and on the one-turn one, per build.
fn commands(
    opts: &Options,
    setup: &Setup,
    builds: &[PathBuf],
    [long, short]: [&PathBuf; 2],
) -> BenchResult<()> {
    // (build, command) → the peaks on the long session and on the one-turn one.
    let mut peaks = vec![vec![(Vec::new(), Vec::new()); COMMANDS.len()]; builds.len()];
    for _ in 0..opts.runs {
        for (b, acpx) in builds.iter().enumerate() {
            for (is_long, home) in [(true, long), (false, short)] {
                let copy = setup.copy(home)?;
                setup.run(acpx, &copy, &["sessions", "list"])?;
                for (c, args) in COMMANDS.iter().enumerate() {
                    let (kb, wall) = setup.peak_kb(acpx, &copy, args)?;
                    let (longs, shorts) = &mut peaks[b][c];
                    if is_long { longs } else { shorts }.push((kb, wall.as_millis() as u64));
                }
            }
        }
    }
    let median = |v: &[(u64, u64)], pick: fn(&(u64, u64)) -> u64| {
        let mut v: Vec<u64> = v.iter().map(pick).collect();
        v.sort_unstable();
        v[v.len() / 2]
    };
    println!(
        "medians of {} runs: peak RSS on the long session / on the one-turn session, kB (MB \
         above); wall time on each, ms\n",
        opts.runs
    );
    print!("| command |");
    for acpx in builds {
        print!(" {} |", acpx.display());
    }
    println!("\n|---|{}", "---:|".repeat(builds.len()));
    for (c, args) in COMMANDS.iter().enumerate() {
        print!("| `{}` |", args.join(" "));
        for per_build in &peaks {
            let (longs, shorts) = &per_build[c];
            let (l, s) = (median(longs, |p| p.0), median(shorts, |p| p.0));
            let (lt, st) = (median(longs, |p| p.1), median(shorts, |p| p.1));
            print!(
                " {l} / {s} ({:.1}); {lt} / {st} ms |",
                (l as f64 - s as f64) / 1024.0
            );
        }
        println!();
    }
    println!("\nload average at end {}", loadavg());
    Ok(())
}

/// `du -sh` of a directory, for the report.
fn disk_use(dir: &Path) -> String {
    Command::new("du")
        .arg("-sh")
        .arg(dir)
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".into())
}
