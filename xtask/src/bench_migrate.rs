//! `cargo xtask bench migrate [--sessions N] [--dir DIR] [--acpx PATH]`: the speed of `acpx migrate` both
//! ways (issue 15 item 5: at least 2,000 sessions/s) and the lock files it leaves (none),
//! behind `docs/BENCHMARKS.md` § Migrating in batches.
//!
//! Method: the release `acpx` is built (or `--acpx PATH` is measured); one real session is made by it against the scripted
//! test agent (`sessions new`, then a `--no-owner` prompt `echo hi`: 11 events) in a fresh
//! file-store home; its snapshot and log are copied N − 1 times with new record ids (the id
//! replaced in both files; written without fsync, not timed). Then, each timed spawn to
//! exit (wall time, and the child's CPU time, user + system, from `getrusage`, which the load
//! of a shared machine disturbs less): `acpx --store fs migrate --to sqlite` in that home, and, from a copy of the
//! resulting `acpx.db` in a second, empty home, `acpx --store sqlite migrate --to fs`. After
//! each, the session lock files left are counted: `<home>/sessions/<id>.lock` (the file
//! store's; not its store-wide `.index.lock` and `.search.lock`) and the entries of
//! `<home>/acpx.db.locks/` (SQLite's).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use acpx_model::RecordId;

use crate::bench_proc::build_release;

type BenchResult<T> = Result<T, String>;

/// Parsed command-line options.
pub struct Options {
    sessions: usize,
    dir: Option<PathBuf>,
    acpx: Option<PathBuf>,
}

impl Options {
    pub fn parse(args: &[String]) -> Result<Options, String> {
        let mut opts = Options {
            sessions: 10_000,
            dir: None,
            acpx: None,
        };
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            match arg.as_str() {
                "--sessions" => {
                    opts.sessions = it
                        .next()
                        .and_then(|v| v.parse().ok())
                        .filter(|&n: &usize| n >= 1)
                        .ok_or("--sessions needs a number of at least 1")?;
                }
                "--dir" => opts.dir = Some(PathBuf::from(it.next().ok_or("--dir needs a value")?)),
                "--acpx" => {
                    opts.acpx = Some(PathBuf::from(it.next().ok_or("--acpx needs a path")?))
                }
                other => return Err(format!("unknown option {other:?}")),
            }
        }
        Ok(opts)
    }
}

/// User + system CPU time of this process's waited-for children so far.
fn children_cpu() -> Duration {
    crate::bench::rusage_cpu(libc::RUSAGE_CHILDREN)
}

/// Runs `acpx <args>` to its end: its wall time, CPU time (user + system) and stdout.
fn acpx_cpu(
    exe: &Path,
    home: &Path,
    cwd: &Path,
    args: &[&str],
) -> BenchResult<(Duration, Duration, String)> {
    let cpu = children_cpu();
    let (wall, out) = acpx(exe, home, cwd, args)?;
    Ok((wall, children_cpu().saturating_sub(cpu), out))
}

fn acpx(exe: &Path, home: &Path, cwd: &Path, args: &[&str]) -> BenchResult<(Duration, String)> {
    let mut cmd = Command::new(exe);
    cmd.arg("--home")
        .arg(home)
        .args(args)
        .current_dir(cwd)
        .env_remove("ACPX_HOME")
        .stdin(Stdio::null());
    crate::bench_proc::run_timed(cmd, args)
}

/// Session lock files in a home: the file store's `sessions/<id>.lock` (not its store-wide
/// `.index.lock` and `.search.lock`) and SQLite's `acpx.db.locks/*`.
fn lock_files(home: &Path) -> (usize, usize) {
    let count = |dir: PathBuf, suffix: &str| {
        std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .filter(|e| {
                        let name = e.file_name().to_string_lossy().into_owned();
                        name.ends_with(suffix) && !name.starts_with('.')
                    })
                    .count()
            })
            .unwrap_or(0)
    };
    (
        count(home.join("sessions"), ".lock"),
        count(home.join("acpx.db.locks"), ""),
    )
}

fn io(what: &str, path: &Path) -> impl Fn(std::io::Error) -> String {
    let place = format!("{what} {}", path.display());
    move |e| format!("cannot {place}: {e}")
}

/// Copies the one session in `sessions` until there are `n`.
fn replicate(sessions: &Path, n: usize) -> BenchResult<String> {
    let mut snapshot = None;
    for entry in std::fs::read_dir(sessions).map_err(io("read", sessions))? {
        let name = entry
            .map_err(io("read", sessions))?
            .file_name()
            .to_string_lossy()
            .into_owned();
        if let Some(id) = name.strip_suffix(".json").filter(|s| !s.starts_with('.')) {
            snapshot = Some(id.to_owned());
        }
    }
    let id = snapshot.ok_or("the first session has no snapshot")?;
    let json_path = sessions.join(format!("{id}.json"));
    let log_path = sessions.join(format!("{id}.events.ndjson"));
    let json = std::fs::read_to_string(&json_path).map_err(io("read", &json_path))?;
    let log = std::fs::read_to_string(&log_path).map_err(io("read", &log_path))?;
    // Only the session's files: the listing cache and search index rebuild themselves.
    for name in [".index.json", ".index.journal", ".search.ndjson"] {
        let _ = std::fs::remove_file(sessions.join(name));
    }
    for _ in 1..n {
        let new = RecordId::generate();
        let new = new.as_str();
        let json_out = sessions.join(format!("{new}.json"));
        std::fs::write(&json_out, json.replace(&id, new)).map_err(io("write", &json_out))?;
        let log_out = sessions.join(format!("{new}.events.ndjson"));
        std::fs::write(&log_out, log.replace(&id, new)).map_err(io("write", &log_out))?;
    }
    Ok(format!(
        "{} lines of log, {} bytes",
        log.lines().count(),
        log.len()
    ))
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

pub fn run(opts: &Options) -> BenchResult<()> {
    let exe = match &opts.acpx {
        Some(path) => path.clone(),
        None => build_release()?,
    };
    let scratch = match &opts.dir {
        Some(d) => tempfile::tempdir_in(d),
        None => tempfile::tempdir(),
    }
    .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
    let (fs_home, sqlite_home, cwd) = (
        scratch.path().join("fs-home"),
        scratch.path().join("sqlite-home"),
        scratch.path().join("project"),
    );
    for d in [&fs_home, &sqlite_home, &cwd] {
        std::fs::create_dir_all(d).map_err(io("create", d))?;
    }
    let agent = format!("{} __test-agent", exe.display());
    let base = ["--store", "fs", "--agent", agent.as_str()];
    acpx(
        &exe,
        &fs_home,
        &cwd,
        &[&base[..], &["sessions", "new"]].concat(),
    )?;
    acpx(
        &exe,
        &fs_home,
        &cwd,
        &[
            &base[..],
            &["--no-owner", "--format", "quiet", "echo", "hi"],
        ]
        .concat(),
    )?;
    let shape = replicate(&fs_home.join("sessions"), opts.sessions)?;
    let n = opts.sessions;
    println!("# acpx migrate, {n} sessions (one real session copied; {shape})\n");
    println!("load average before: {}\n", loadavg());
    println!(
        "| direction | wall | sessions/s | CPU (user + sys) | sessions per CPU-s | lock files left (fs store, acpx.db.locks) |"
    );
    println!("|---|---:|---:|---:|---:|---|");

    let (wall, cpu, out) = acpx_cpu(
        &exe,
        &fs_home,
        &cwd,
        &[
            "--store", "fs", "--format", "quiet", "migrate", "--to", "sqlite",
        ],
    )?;
    check_count(&out, n)?;
    let (fs_locks, db_locks) = lock_files(&fs_home);
    row("fs → sqlite", (wall, cpu), n, fs_locks, db_locks);

    for suffix in ["", "-wal", "-shm"] {
        let from = fs_home.join(format!("acpx.db{suffix}"));
        if from.exists() {
            let to = sqlite_home.join(format!("acpx.db{suffix}"));
            std::fs::copy(&from, &to).map_err(io("copy", &from))?;
        }
    }
    let (wall, cpu, out) = acpx_cpu(
        &exe,
        &sqlite_home,
        &cwd,
        &[
            "--store", "sqlite", "--format", "quiet", "migrate", "--to", "fs",
        ],
    )?;
    check_count(&out, n)?;
    let (fs_locks, db_locks) = lock_files(&sqlite_home);
    row("sqlite → fs", (wall, cpu), n, fs_locks, db_locks);
    println!("\nload average after: {}", loadavg());
    Ok(())
}

fn check_count(out: &str, n: usize) -> BenchResult<()> {
    match out.trim().parse::<usize>() {
        Ok(copied) if copied == n => Ok(()),
        _ => Err(format!(
            "migrate reported {:?}, expected {n} sessions",
            out.trim()
        )),
    }
}

fn row(direction: &str, (wall, cpu): (Duration, Duration), n: usize, fs: usize, db: usize) {
    println!(
        "| {direction} | {:.2} s | {:.0} | {:.2} s | {:.0} | {fs}, {db} |",
        wall.as_secs_f64(),
        n as f64 / wall.as_secs_f64(),
        cpu.as_secs_f64(),
        n as f64 / cpu.as_secs_f64().max(1e-9)
    );
}
