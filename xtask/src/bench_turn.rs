//! `cargo xtask bench turn` and `cargo xtask bench session`: end-to-end figures of one streamed
//! turn, measured on whole `acpx` invocations (`docs/BENCHMARKS.md`, § Turn size and session
//! size).
//!
//! Method: the release `acpx` (built first) runs `--no-owner --format quiet stream N` against
//! the scripted test agent, so the measured process is the one that records every event
//! (`--owner`: through the session's warm queue owner instead, warmed by one `echo` first; the
//! RSS is then the client's, not the recording owner's). `--backend postgres` uses the server of
//! `ACPX_STORE_URL` (or `ACPX_TEST_POSTGRES_URL`) in a scratch schema dropped at the end. Its
//! wall time is spawn to exit; its peak resident set is `VmHWM` of `/proc/<pid>/status`, read
//! every 5 ms while it runs (the high-water mark only grows, so the last reading is the peak
//! up to a few ms before exit). Its CPU time is acpx's own (user + system of all its threads,
//! not the agent's): `utime + stime` of `/proc/<pid>/stat`, read once it has exited and before
//! it is reaped (`waitid` with `WNOWAIT`; with `--owner` that is the client's, the owner doing
//! the recording in a process of its own). The scripted agent takes more than half of the CPU of
//! a streamed turn and wall times move with the machine's load, so CPU time is the steadier
//! measure of what acpx itself costs. Backends alternate run by run, so a burst of load from
//! other jobs on the machine hits both alike; ratios are taken within one run of this command.
//!
//! `--thoughts`: the agent streams its reasoning (`think N`, `agent_thought_chunk`s) instead of
//! its reply. `--tools B`: each of the N is a round of two tool calls instead of a chunk
//! (`tools B N`: a read with B more bytes in its input, result text and raw output, and a
//! failed search, each round after a step of text): a coding agent's long turn; pass small
//! `--chunks` (2,000 rounds of `--tools 4000` hold 32 MB of tool data).
//!
//! - **turn**: prompts of 10k, 100k and 1M chunks (`--chunks`), each on a new session; wall
//!   time, per-chunk cost (wall minus the fixed cost of a one-process `echo hi`, divided by N),
//!   peak RSS, and bytes the store grew by per chunk.
//! - **session**: a session first given one 1M-chunk prompt (`--prefill`); then 10k-chunk
//!   prompts alternately on it and on a new session; ratio of the medians (wall and RSS) and
//!   of the mean CPU; `--instructions N`: N more pairs under callgrind, compared by the
//!   instructions acpx executed (user space), which the machine's load does not move.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::bench_proc::{build_release, own_cpu};

type BenchResult<T> = Result<T, String>;

/// Parsed options of `bench turn` / `bench session`.
pub struct Options {
    session_sweep: bool,
    backends: Vec<String>,
    chunks: Vec<u64>,
    prefill: u64,
    runs: usize,
    dir: PathBuf,
    /// A prebuilt `acpx` to measure instead of building the release one (to compare builds).
    acpx: Option<PathBuf>,
    /// Through the session's warm queue owner instead of `--no-owner`.
    owner: bool,
    /// The agent streams reasoning (`think N`: `agent_thought_chunk`s) instead of a reply.
    thoughts: bool,
    /// `--tools B`: rounds of tool calls with B more bytes each (`tools B N`) instead of chunks.
    tools: Option<usize>,
    /// Runs of each prompt of 1M chunks and more (tens of seconds each).
    large_runs: usize,
    /// `bench session`: pairs of prompts (large, new session) run again under callgrind, whose
    /// instruction counts do not move with the machine's load.
    instructions: usize,
}

impl Options {
    pub fn parse(which: &str, args: &[String]) -> BenchResult<Options> {
        let mut o = Options {
            session_sweep: which == "session",
            backends: vec!["fs".into(), "sqlite".into()],
            chunks: vec![10_000, 100_000, 1_000_000],
            prefill: 1_000_000,
            runs: 3,
            dir: std::env::temp_dir(),
            acpx: None,
            owner: false,
            thoughts: false,
            tools: None,
            large_runs: 1,
            instructions: 0,
        };
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let mut value = |what: &str| -> BenchResult<String> {
                it.next()
                    .cloned()
                    .ok_or_else(|| format!("{what} needs a value"))
            };
            match a.as_str() {
                "--backend" => {
                    let v = value("--backend")?;
                    o.backends = if v == "all" {
                        vec!["fs".into(), "sqlite".into()]
                    } else {
                        v.split(',').map(|b| b.trim().to_owned()).collect()
                    };
                    if let Some(bad) = o
                        .backends
                        .iter()
                        .find(|b| !["fs", "sqlite", "postgres"].contains(&b.as_str()))
                    {
                        return Err(format!(
                            "unknown backend {bad:?}; known: fs, sqlite, postgres (comma-separated), all"
                        ));
                    }
                }
                "--owner" => o.owner = true,
                "--thoughts" => o.thoughts = true,
                "--tools" => {
                    o.tools = Some(
                        value("--tools")?
                            .parse()
                            .map_err(|_| "--tools needs a number of bytes")?,
                    )
                }
                "--chunks" => {
                    o.chunks = value("--chunks")?
                        .split(',')
                        .map(|n| n.trim().parse::<u64>().ok().filter(|n| *n > 0))
                        .collect::<Option<Vec<_>>>()
                        .ok_or("--chunks needs positive numbers separated by commas")?
                }
                "--prefill" => {
                    o.prefill = value("--prefill")?
                        .parse()
                        .map_err(|_| "--prefill needs a number")?
                }
                "--runs" => {
                    o.runs = value("--runs")?
                        .parse()
                        .ok()
                        .filter(|n| *n > 0)
                        .ok_or("--runs needs a positive number")?
                }
                "--large-runs" => {
                    o.large_runs = value("--large-runs")?
                        .parse()
                        .ok()
                        .filter(|n| *n > 0)
                        .ok_or("--large-runs needs a positive number")?
                }
                "--instructions" => {
                    o.instructions = value("--instructions")?
                        .parse()
                        .map_err(|_| "--instructions needs a number")?
                }
                "--dir" => o.dir = PathBuf::from(value("--dir")?),
                "--acpx" => o.acpx = Some(PathBuf::from(value("--acpx")?)),
                other => return Err(format!("unknown option {other:?}")),
            }
        }
        if o.instructions > 0 && (o.owner || !o.session_sweep) {
            return Err(
                "--instructions is an option of `bench session` without --owner: it \
                        counts the instructions of the process that records the turn"
                    .into(),
            );
        }
        Ok(o)
    }
}

/// One measured invocation.
struct Run {
    wall: Duration,
    peak_kb: u64,
    /// acpx's own CPU time (user + system), its children's excluded.
    cpu: Duration,
}

/// A home and project per backend.
struct Home {
    backend: String,
    home: tempfile::TempDir,
    project: tempfile::TempDir,
}

struct Bench {
    acpx: PathBuf,
    agent: String,
    /// `--no-owner`, or nothing (through the warm owner).
    mode: &'static [&'static str],
    /// The test agent's script, before N: `stream` (reply chunks), `think` (reasoning
    /// chunks) or `tools B` (rounds of tool calls).
    script: Vec<String>,
    /// The scratch schema of the postgres homes (one per run of this command).
    pg_schema: String,
}

impl Bench {
    fn cmd(&self, home: &Home, args: &[&str]) -> Command {
        self.cmd_under(&[], home, args)
    }

    /// `acpx <args>`, or `<wrapper…> acpx <args>` (valgrind).
    fn cmd_under(&self, wrapper: &[&str], home: &Home, args: &[&str]) -> Command {
        let mut c = match wrapper.split_first() {
            Some((program, wrapper_args)) => {
                let mut c = Command::new(program);
                c.args(wrapper_args).arg(&self.acpx);
                c
            }
            None => Command::new(&self.acpx),
        };
        if home.backend == "postgres" {
            if let Ok(url) = postgres_url() {
                c.env("ACPX_STORE_URL", url);
            }
            c.env("ACPX_STORE_SCHEMA", &self.pg_schema);
        }
        c.arg("--home")
            .arg(home.home.path())
            .args(["--store", &home.backend, "--agent", &self.agent])
            .args(args)
            .current_dir(home.project.path())
            .env_remove("ACPX_HOME")
            .env("ACPX_TTL", "60")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        c
    }

    /// Runs `acpx <args>` to its end, sampling its peak RSS.
    fn run(&self, home: &Home, args: &[&str]) -> BenchResult<Run> {
        let start = Instant::now();
        let mut child = self
            .cmd(home, args)
            .spawn()
            .map_err(|e| format!("cannot run acpx: {e}"))?;
        // Read while it runs: a child writing more than a pipe holds to a stderr nobody reads
        // would block forever.
        let stderr = child.stderr.take().map(|mut e| {
            std::thread::spawn(move || {
                use std::io::Read;
                let mut text = String::new();
                let _ = e.read_to_string(&mut text);
                text
            })
        });
        let measured = measure_child(child.id(), start);
        if measured.is_err() {
            let _ = child.kill();
        }
        let status = child.wait().map_err(|e| e.to_string());
        let stderr = stderr.and_then(|t| t.join().ok()).unwrap_or_default();
        let (wall, peak_kb, cpu) = measured?;
        let status = status?;
        if !status.success() {
            return Err(format!("acpx {args:?} failed ({status}): {stderr}"));
        }
        Ok(Run { wall, peak_kb, cpu })
    }

    fn new_session(&self, home: &Home, name: &str) -> BenchResult<()> {
        self.run(home, &["sessions", "new", "--name", name])
            .map(|_| ())
    }

    fn stream(&self, home: &Home, session: &str, chunks: u64) -> BenchResult<Run> {
        let n = chunks.to_string();
        let mut words: Vec<&str> = self.script.iter().map(String::as_str).collect();
        words.push(&n);
        self.prompt(home, session, &words)
    }

    /// `acpx [--no-owner] --format quiet prompt -s <session> <words>`.
    fn prompt(&self, home: &Home, session: &str, words: &[&str]) -> BenchResult<Run> {
        let mut args: Vec<&str> = self.mode.to_vec();
        args.extend(["--format", "quiet", "prompt", "-s", session]);
        args.extend(words);
        self.run(home, &args)
    }

    /// The instructions acpx executes for a `stream <chunks>` prompt: its run under
    /// `valgrind --tool=callgrind` (user space only, its children not followed), which counts
    /// them the same on a busy machine as on an idle one.
    fn instructions(&self, home: &Home, session: &str, chunks: u64) -> BenchResult<u64> {
        let n = chunks.to_string();
        let mut args: Vec<&str> = self.mode.to_vec();
        args.extend(["--format", "quiet", "prompt", "-s", session]);
        args.extend(self.script.iter().map(String::as_str));
        args.push(&n);
        let out = self
            .cmd_under(
                &[
                    "valgrind",
                    "--tool=callgrind",
                    "--callgrind-out-file=/dev/null",
                ],
                home,
                &args,
            )
            .output()
            .map_err(|e| format!("cannot run valgrind (needed by --instructions): {e}"))?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            return Err(format!(
                "acpx under valgrind failed ({}): {stderr}",
                out.status
            ));
        }
        stderr
            .lines()
            .find_map(|l| {
                l.split_once("Collected : ")
                    .map(|(_, n)| n.trim().to_owned())
            })
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| format!("no instruction count in valgrind's output: {stderr}"))
    }

    /// Through the owner, a new session's owner is started (and its agent attached) by one
    /// untimed `echo`, so the timed prompt meets a warm owner.
    fn warm(&self, home: &Home, session: &str) -> BenchResult<()> {
        if self.mode.is_empty() {
            self.prompt(home, session, &["echo", "warm"])?;
        }
        Ok(())
    }

    /// Ends the owner of `session` (through the owner; a no-op otherwise).
    fn release(&self, home: &Home, session: &str) {
        if self.mode.is_empty() {
            let _ = self.run(home, &["sessions", "close", session]);
        }
    }
}

fn postgres_url() -> BenchResult<String> {
    ["ACPX_STORE_URL", "ACPX_TEST_POSTGRES_URL"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|u| !u.trim().is_empty()))
        .ok_or_else(|| "--backend postgres needs ACPX_STORE_URL (a PostgreSQL URL)".into())
}

/// Drops the scratch schema of the postgres homes.
fn drop_pg_schema(schema: &str) -> BenchResult<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async {
        let store = acpx_store_postgres::PostgresStore::connect(
            &postgres_url()?,
            acpx_store_postgres::PostgresStoreOptions {
                schema: schema.to_owned(),
                ..Default::default()
            },
        )
        .await
        .map_err(|e| e.to_string())?;
        store.drop_schema().await.map_err(|e| e.to_string())
    })
}

/// `VmHWM` of a `/proc/<pid>/status` file, in kB.
fn vm_hwm_kb(path: &str) -> Option<u64> {
    let s = std::fs::read_to_string(path).ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.trim_start_matches("VmHWM:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// Polls child `pid` until it exits (without reaping it): its wall time from `start`, its peak
/// RSS, and its CPU time, read while it is a zombie (its threads' times summed; its reaped
/// children's, the agent's, are in other fields).
fn measure_child(pid: u32, start: Instant) -> BenchResult<(Duration, u64, Duration)> {
    let status_path = format!("/proc/{pid}/status");
    let mut peak_kb = 0;
    loop {
        if let Some(kb) = vm_hwm_kb(&status_path) {
            peak_kb = peak_kb.max(kb);
        }
        if exited_unreaped(pid)? {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let wall = start.elapsed();
    Ok((wall, peak_kb, own_cpu(pid)?))
}

/// Whether child `pid` has exited, without reaping it (`waitid` with `WNOWAIT`), so that its
/// `/proc` entry can still be read.
fn exited_unreaped(pid: u32) -> BenchResult<bool> {
    let id = libc::id_t::from(pid);
    // SAFETY: waitid only writes the siginfo it is given, which lives on this stack.
    let (rc, info) = unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let rc = libc::waitid(
            libc::P_PID,
            id,
            &mut info,
            libc::WEXITED | libc::WNOWAIT | libc::WNOHANG,
        );
        (rc, info)
    };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        if e.kind() == std::io::ErrorKind::Interrupted {
            return Ok(false);
        }
        return Err(format!("waitid({pid}): {e}"));
    }
    // SAFETY: si_pid is set by waitid when a child changed state, and zero otherwise.
    Ok(unsafe { info.si_pid() } != 0)
}

/// Bytes of every file under `dir`.
fn disk_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => disk_bytes(&e.path()),
            Ok(t) if t.is_file() => e.metadata().map_or(0, |m| m.len()),
            _ => 0,
        })
        .sum()
}

fn median_wall(runs: &[Run]) -> Duration {
    let mut v: Vec<Duration> = runs.iter().map(|r| r.wall).collect();
    v.sort();
    v[v.len() / 2]
}

fn median_cpu(runs: &[Run]) -> Duration {
    let mut v: Vec<Duration> = runs.iter().map(|r| r.cpu).collect();
    v.sort();
    v[v.len() / 2]
}

/// The mean, beside the median: a cost paid every few prompts (SQLite's retention trims once
/// per 8 MiB of events, every second 10k-chunk prompt of a session at its budget) makes the
/// runs two groups, and a median of 15 then falls in either; the mean is the cost per
/// prompt over the run.
fn mean_cpu(runs: &[Run]) -> Duration {
    let total: Duration = runs.iter().map(|r| r.cpu).sum();
    total / u32::try_from(runs.len().max(1)).unwrap_or(u32::MAX)
}

fn median_kb(runs: &[Run]) -> u64 {
    let mut v: Vec<u64> = runs.iter().map(|r| r.peak_kb).collect();
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

pub fn run(opts: &Options) -> BenchResult<()> {
    let acpx = match &opts.acpx {
        Some(p) => p.clone(),
        None => build_release()?,
    };
    let bench = Bench {
        agent: format!("{} __test-agent", acpx.display()),
        acpx,
        mode: if opts.owner { &[] } else { &["--no-owner"] },
        script: match (opts.tools, opts.thoughts) {
            (Some(bytes), _) => vec!["tools".into(), bytes.to_string()],
            (None, true) => vec!["think".into()],
            (None, false) => vec!["stream".into()],
        },
        pg_schema: format!("acpx_bench_turn_{}", std::process::id()),
    };
    if opts.backends.iter().any(|b| b == "postgres") {
        postgres_url()?;
    }
    let result = measure(&bench, opts);
    if opts.backends.iter().any(|b| b == "postgres") {
        drop_pg_schema(&bench.pg_schema)?;
    }
    result
}

fn measure(bench: &Bench, opts: &Options) -> BenchResult<()> {
    std::fs::create_dir_all(&opts.dir).map_err(|e| e.to_string())?;
    let mut homes = Vec::new();
    for backend in &opts.backends {
        let project = tempfile::tempdir_in(&opts.dir).map_err(|e| e.to_string())?;
        std::fs::create_dir(project.path().join(".git")).map_err(|e| e.to_string())?;
        homes.push(Home {
            backend: backend.clone(),
            home: tempfile::tempdir_in(&opts.dir).map_err(|e| e.to_string())?,
            project,
        });
    }
    println!(
        "# acpx {} benchmark\n\nrelease build, {}, scripted test agent; {} cores; load average at start {}\n",
        if opts.session_sweep { "session-size" } else { "turn-size" },
        if opts.owner { "through the warm queue owner" } else { "`--no-owner`" },
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        loadavg()
    );
    // The fixed cost of a run: `echo hi`, alternating backends.
    let mut fixed: Vec<Vec<Run>> = homes.iter().map(|_| Vec::new()).collect();
    for h in &homes {
        bench.new_session(h, "fixed")?;
        bench.warm(h, "fixed")?;
    }
    for _ in 0..opts.runs {
        for (i, h) in homes.iter().enumerate() {
            fixed[i].push(bench.prompt(h, "fixed", &["echo", "hi"])?);
        }
    }
    for h in &homes {
        bench.release(h, "fixed");
    }
    for (h, f) in homes.iter().zip(&fixed) {
        println!(
            "{}: `echo hi` median {:.0} ms, acpx CPU {:.0} ms, peak RSS {} kB",
            h.backend,
            ms(median_wall(f)),
            ms(median_cpu(f)),
            median_kb(f)
        );
    }
    println!();
    if opts.session_sweep {
        session_sweep(bench, &homes, &fixed, opts)?;
    } else {
        turn_sweep(bench, &homes, &fixed, opts)?;
    }
    println!("\nload average at end {}", loadavg());
    Ok(())
}

fn turn_sweep(
    bench: &Bench,
    homes: &[Home],
    fixed: &[Vec<Run>],
    opts: &Options,
) -> BenchResult<()> {
    println!("| backend | chunks | runs | wall median ms | µs per chunk (net of the fixed cost) | acpx CPU ms (median) | acpx CPU µs per chunk (net) | peak RSS kB (median) | store bytes per chunk |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut per_chunk: Vec<Vec<PerChunk>> = homes.iter().map(|_| Vec::new()).collect();
    for &n in &opts.chunks {
        // One run of 1M chunks takes tens of seconds: `--large-runs` of them (1 by default).
        let runs = if n >= 1_000_000 {
            opts.large_runs
        } else {
            opts.runs
        };
        let mut results: Vec<Vec<Run>> = homes.iter().map(|_| Vec::new()).collect();
        let mut bytes: Vec<u64> = vec![0; homes.len()];
        for r in 0..runs {
            for (i, h) in homes.iter().enumerate() {
                let name = format!("turn-{n}-{r}");
                bench.new_session(h, &name)?;
                bench.warm(h, &name)?;
                let before = disk_bytes(h.home.path());
                results[i].push(bench.stream(h, &name, n)?);
                bytes[i] = disk_bytes(h.home.path()).saturating_sub(before);
                bench.release(h, &name);
            }
        }
        for (i, h) in homes.iter().enumerate() {
            let wall = median_wall(&results[i]);
            let net = wall.saturating_sub(median_wall(&fixed[i]));
            let us = net.as_secs_f64() * 1e6 / n as f64;
            let kb = median_kb(&results[i]);
            let cpu = median_cpu(&results[i]);
            let cpu_us = cpu.saturating_sub(median_cpu(&fixed[i])).as_secs_f64() * 1e6 / n as f64;
            per_chunk[i].push(PerChunk {
                chunks: n,
                us,
                kb,
                wall_ms: ms(wall),
                cpu_us,
                cpu_ms: ms(cpu),
            });
            println!(
                "| {} | {n} | {runs} | {:.0} | {us:.2} | {:.0} | {cpu_us:.2} | {kb} | {:.0} |",
                h.backend,
                ms(wall),
                ms(cpu),
                bytes[i] as f64 / n as f64
            );
        }
    }
    println!(
        "\nRatios, largest prompt ÷ smallest (per-chunk wall; per-chunk acpx CPU; peak RSS):\n"
    );
    for (i, h) in homes.iter().enumerate() {
        if let (Some(small), Some(large)) = (per_chunk[i].first(), per_chunk[i].last()) {
            println!(
                "- {}: {} vs {} chunks: per chunk {:.2}, CPU per chunk {:.2}, RSS {:.2}",
                h.backend,
                large.chunks,
                small.chunks,
                large.us / small.us,
                large.cpu_us / small.cpu_us.max(1e-9),
                large.kb as f64 / small.kb as f64
            );
        }
    }
    let Some(fs) = homes.iter().position(|h| h.backend == "fs") else {
        return Ok(());
    };
    for (i, h) in homes.iter().enumerate().filter(|(i, _)| *i != fs) {
        for (a, b) in per_chunk[fs].iter().zip(&per_chunk[i]) {
            println!(
                "- {} ÷ fs at {} chunks: per chunk {:.2}, wall {:.2}, acpx CPU {:.2}",
                h.backend,
                a.chunks,
                b.us / a.us,
                b.wall_ms / a.wall_ms,
                b.cpu_ms / a.cpu_ms.max(1e-9)
            );
        }
    }
    Ok(())
}

/// One backend's figures for one prompt size.
struct PerChunk {
    chunks: u64,
    /// Wall µs per chunk, net of the fixed cost.
    us: f64,
    kb: u64,
    wall_ms: f64,
    /// acpx CPU µs per chunk, net of the fixed cost's.
    cpu_us: f64,
    cpu_ms: f64,
}

fn session_sweep(
    bench: &Bench,
    homes: &[Home],
    fixed: &[Vec<Run>],
    opts: &Options,
) -> BenchResult<()> {
    let n = opts.chunks.first().copied().unwrap_or(10_000);
    for h in homes {
        bench.new_session(h, "large")?;
        bench.warm(h, "large")?;
        let t = bench.stream(h, "large", opts.prefill)?;
        println!(
            "{}: prefill of {} chunks: {:.1} s, peak RSS {} kB",
            h.backend,
            opts.prefill,
            t.wall.as_secs_f64(),
            t.peak_kb
        );
    }
    let mut on_large: Vec<Vec<Run>> = homes.iter().map(|_| Vec::new()).collect();
    let mut on_fresh: Vec<Vec<Run>> = homes.iter().map(|_| Vec::new()).collect();
    for r in 0..opts.runs {
        for (i, h) in homes.iter().enumerate() {
            on_large[i].push(bench.stream(h, "large", n)?);
            let name = format!("fresh-{r}");
            bench.new_session(h, &name)?;
            bench.warm(h, &name)?;
            on_fresh[i].push(bench.stream(h, &name, n)?);
            bench.release(h, &name);
        }
    }
    let mut counted: Vec<(Vec<u64>, Vec<u64>)> = homes.iter().map(|_| Default::default()).collect();
    for r in 0..opts.instructions {
        for (i, h) in homes.iter().enumerate() {
            counted[i].0.push(bench.instructions(h, "large", n)?);
            let name = format!("counted-{r}");
            bench.new_session(h, &name)?;
            bench.warm(h, &name)?;
            counted[i].1.push(bench.instructions(h, &name, n)?);
        }
    }
    for h in homes {
        bench.release(h, "large");
    }
    println!("\n| backend | {n}-chunk prompt on | runs | wall median ms | acpx CPU ms (median) | acpx CPU ms (mean) | peak RSS kB (median) |");
    println!("|---|---|---:|---:|---:|---:|---:|");
    for (i, h) in homes.iter().enumerate() {
        for (label, runs) in [
            ("a new session", &on_fresh[i]),
            ("the large session", &on_large[i]),
        ] {
            println!(
                "| {} | {label} | {} | {:.0} | {:.0} | {:.0} | {} |",
                h.backend,
                runs.len(),
                ms(median_wall(runs)),
                ms(median_cpu(runs)),
                ms(mean_cpu(runs)),
                median_kb(runs)
            );
        }
    }
    println!(
        "\nRatios, large session ÷ new session (wall; wall net of the fixed cost; acpx CPU; acpx \
         CPU by means; RSS):\n"
    );
    for (i, h) in homes.iter().enumerate() {
        let f = median_wall(&fixed[i]);
        let (l, s) = (median_wall(&on_large[i]), median_wall(&on_fresh[i]));
        println!(
            "- {}: {:.2}; {:.2}; {:.2}; {:.2}; {:.2}",
            h.backend,
            l.as_secs_f64() / s.as_secs_f64(),
            l.saturating_sub(f).as_secs_f64() / s.saturating_sub(f).as_secs_f64().max(1e-9),
            median_cpu(&on_large[i]).as_secs_f64()
                / median_cpu(&on_fresh[i]).as_secs_f64().max(1e-9),
            mean_cpu(&on_large[i]).as_secs_f64() / mean_cpu(&on_fresh[i]).as_secs_f64().max(1e-9),
            median_kb(&on_large[i]) as f64 / median_kb(&on_fresh[i]) as f64
        );
    }
    if opts.instructions > 0 {
        println!(
            "\nInstructions (callgrind, acpx's user space; {} pairs). A session at its budget \
             trims 8 MiB of events about every second 10k-chunk prompt, so the large session's \
             prompts fall in two groups; each is listed, and a mean over few prompts leans to \
             the group that happened to come up more often:\n",
            opts.instructions
        );
        println!("| backend | large session, each prompt (M) | large mean | new session mean | ratio of means |");
        println!("|---|---|---:|---:|---:|");
        for (h, (large, fresh)) in homes.iter().zip(&counted) {
            let mean = |v: &[u64]| v.iter().sum::<u64>() as f64 / v.len().max(1) as f64;
            let each: Vec<String> = large
                .iter()
                .map(|n| format!("{:.0}", *n as f64 / 1e6))
                .collect();
            println!(
                "| {} | {} | {:.0} | {:.0} | {:.3} |",
                h.backend,
                each.join(", "),
                mean(large),
                mean(fresh),
                mean(large) / mean(fresh).max(1.0)
            );
        }
    }
    Ok(())
}
