//! `cargo xtask bench owner`: the queue owner figures of `docs/BENCHMARKS.md`.
//!
//! Method: whole `acpx` invocations of the release binary (`target/release/acpx`, built first
//! with `cargo build --release -p acpx-cli`), timed from spawn to exit, against the scripted
//! test agent (`acpx __test-agent`), file store, in a temporary home:
//!
//! - **warm second prompt**: one prompt starts the session's owner, then N prompts (`echo hi`,
//!   quiet) run against it, one after the other. Each run's overhead is its wall time minus the
//!   agent's own answer time, the turn's `prompt_started` → `prompt_done` span in the log.
//!   Median and p90 of the overheads; target ≤ 15 ms.
//! - **streamed prompt**: `stream 10000` (10,000 chunks) through the owner and with
//!   `--no-owner`, alternating, the owner warm; ratio of the medians; target ≤ 1.05. The
//!   one-process runs use a second home, since `--no-owner` stops a session's owner. The
//!   one-process figure includes its agent start and stop (the owner's were paid before), so
//!   the ratio is also reported without them, measured as the wall time of a one-process
//!   `echo hi` minus its turn.
//! - **owner memory** (`--memory-turns N`, default 100; `--memory-chunks C`, default 1000): N
//!   more warm prompts of `stream C` through the same owner; its `VmRSS` / `VmHWM` / `RssAnon`
//!   (`/proc/<pid>/status`, the pid from `status`) after turns 1, 10, 50, 100, … and at the
//!   end, and the growth of `RssAnon` per turn after the tenth: what a live session costs in
//!   memory as it gets longer; and the owner's CPU time a turn between those rows
//!   (`/proc/<pid>/stat`): what a turn costs it as the session grows. `--memory-pause-ms N`
//!   waits N ms after each of those turns, as a person or an orchestrator leaves between
//!   prompts (a save the owner makes once events pause then counts).
//! - `--backend fs|sqlite` picks the store (fs by default); `--acpx PATH` runs that binary
//!   instead of a release build of the tree, to compare builds in alternating runs. `--memory-tools B` makes each turn a coding agent's instead:
//!   `tools B` of the scripted agent, a read tool call with B more bytes in its input, result
//!   text and raw output (and a failed search).
//! - **against Node acpx** (`--node <path to Node acpx's bin/acpx>`): warm `prompt "echo hi"`
//!   of Node acpx 0.19.1 and of this acpx, alternating, same scripted agent, each in its own
//!   empty home (Node keeps its files under `$HOME/.acpx`); ratio of the median wall times;
//!   target ≤ 0.1. Install Node acpx with `npm install acpx@0.19.1` in a scratch directory.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::bench_proc::{build_release, loadavg, rss_kb, run_timed};

type BenchResult<T> = Result<T, String>;

/// Parsed options of `bench owner`.
pub struct Options {
    runs: usize,
    stream_runs: usize,
    node: Option<PathBuf>,
    node_runs: usize,
    memory_turns: usize,
    memory_chunks: usize,
    /// `--memory-tools B`: turns of `tools B` instead of `stream C`.
    memory_tools: Option<usize>,
    /// `--backend fs|sqlite`: the store the sessions live in (fs by default).
    backend: String,
    /// `--acpx PATH`: this binary instead of a release build of the tree (another build, to
    /// compare with).
    acpx: Option<PathBuf>,
    /// `--memory-pause-ms N`: a pause between the memory table's turns, as a person or an
    /// orchestrator leaves between prompts (the owner's saves once events pause then count).
    memory_pause: Duration,
}

impl Options {
    pub fn parse(args: &[String]) -> BenchResult<Options> {
        let mut o = Options {
            runs: 30,
            stream_runs: 5,
            node: None,
            node_runs: 10,
            memory_turns: 100,
            memory_chunks: 1000,
            memory_tools: None,
            backend: "fs".to_owned(),
            acpx: None,
            memory_pause: Duration::ZERO,
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
                "--runs" => o.runs = num("--runs")?,
                "--stream-runs" => o.stream_runs = num("--stream-runs")?,
                "--node-runs" => o.node_runs = num("--node-runs")?,
                "--memory-turns" => o.memory_turns = num("--memory-turns")?,
                "--memory-chunks" => o.memory_chunks = num("--memory-chunks")?,
                "--memory-tools" => o.memory_tools = Some(num("--memory-tools")?),
                "--backend" => match it.next().map(String::as_str) {
                    Some(b @ ("fs" | "sqlite")) => o.backend = b.to_owned(),
                    other => return Err(format!("--backend needs fs or sqlite, not {other:?}")),
                },
                "--acpx" => {
                    let path = it.next().ok_or("--acpx needs the path of an acpx binary")?;
                    o.acpx = Some(PathBuf::from(path));
                }
                "--memory-pause-ms" => {
                    o.memory_pause = Duration::from_millis(num("--memory-pause-ms")? as u64)
                }
                "--node" => {
                    let path = it
                        .next()
                        .ok_or("--node needs the path of Node acpx's bin")?;
                    o.node = Some(PathBuf::from(path));
                }
                other => return Err(format!("unknown option {other:?}")),
            }
        }
        Ok(o)
    }
}

struct Bench {
    acpx: PathBuf,
    home: tempfile::TempDir,
    project: tempfile::TempDir,
    agent: String,
    backend: String,
}

impl Bench {
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.acpx);
        c.arg("--home")
            .arg(self.home.path())
            .arg("--store")
            .arg(&self.backend)
            .args(["--agent", &self.agent])
            .args(args)
            .current_dir(self.project.path())
            .env_remove("ACPX_HOME")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    /// Runs `acpx <args>` to its end; its wall time and stdout.
    fn timed(&self, args: &[&str]) -> BenchResult<(Duration, String)> {
        run_timed(self.cmd(args), args)
    }

    /// The spans `prompt_started` → `prompt_done` of the session's turns, in order.
    fn turn_spans(&self) -> BenchResult<Vec<Duration>> {
        let (_, out) = self.timed(&["--format", "json", "sessions", "events"])?;
        let mut started: Option<i64> = None;
        let mut spans = Vec::new();
        for line in out.lines().filter(|l| !l.trim().is_empty()) {
            let e: Value = serde_json::from_str(line).map_err(|e| e.to_string())?;
            let at = e["timestamp"].as_str().and_then(millis);
            match e["type"].as_str() {
                Some("prompt_started") => started = at,
                Some("prompt_done") => {
                    if let (Some(s), Some(d)) = (started.take(), at) {
                        spans.push(Duration::from_millis(u64::try_from(d - s).unwrap_or(0)));
                    }
                }
                _ => {}
            }
        }
        Ok(spans)
    }
}

/// Milliseconds of an RFC 3339 UTC timestamp `YYYY-MM-DDTHH:MM:SS.mmmZ` within its day
/// (turns of one benchmark never straddle midnight by more than they last).
fn millis(ts: &str) -> Option<i64> {
    let t = ts.split('T').nth(1)?.trim_end_matches('Z');
    let mut parts = t.split(':');
    let h: i64 = parts.next()?.parse().ok()?;
    let m: i64 = parts.next()?.parse().ok()?;
    let s: f64 = parts.next()?.parse().ok()?;
    Some((h * 3600 + m * 60) * 1000 + (s * 1000.0).round() as i64)
}

fn quantile(v: &mut [Duration], q: f64) -> Duration {
    v.sort();
    let i = ((v.len() as f64 - 1.0) * q).round() as usize;
    v[i.min(v.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

pub fn run(opts: &Options) -> BenchResult<()> {
    let acpx = match &opts.acpx {
        Some(path) if path.is_file() => path.clone(),
        Some(path) => return Err(format!("--acpx {}: no such file", path.display())),
        None => build_release()?,
    };
    let project = tempfile::tempdir().map_err(|e| e.to_string())?;
    std::fs::create_dir(project.path().join(".git")).map_err(|e| e.to_string())?;
    let bench = Bench {
        agent: format!("{} __test-agent", acpx.display()),
        backend: opts.backend.clone(),
        acpx,
        home: tempfile::tempdir().map_err(|e| e.to_string())?,
        project,
    };
    println!("# acpx queue owner benchmarks\n");
    let build = match &opts.acpx {
        Some(path) => format!("acpx at {}", path.display()),
        None => "release build".to_owned(),
    };
    println!(
        "{build}, {} store, scripted test agent; {} cores; load average at start {}\n",
        opts.backend,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        loadavg()
    );
    bench.timed(&["sessions", "new"])?;
    // One-process runs use a home of their own: `--no-owner` stops a session's owner before it
    // takes the session, so sharing one session would make every owner run a cold start.
    let single_project = tempfile::tempdir().map_err(|e| e.to_string())?;
    std::fs::create_dir(single_project.path().join(".git")).map_err(|e| e.to_string())?;
    let single_bench = Bench {
        agent: bench.agent.clone(),
        backend: bench.backend.clone(),
        acpx: bench.acpx.clone(),
        home: tempfile::tempdir().map_err(|e| e.to_string())?,
        project: single_project,
    };
    single_bench.timed(&["--no-owner", "sessions", "new"])?;

    // Warm second prompt.
    bench.timed(&["--format", "quiet", "echo", "warm-up"])?;
    let before = bench.turn_spans()?.len();
    let mut walls = Vec::with_capacity(opts.runs);
    for _ in 0..opts.runs {
        walls.push(bench.timed(&["--format", "quiet", "echo", "hi"])?.0);
    }
    let spans = bench.turn_spans()?;
    let spans = spans.get(before..).unwrap_or(&[]);
    if spans.len() != walls.len() {
        return Err(format!(
            "expected {} recorded turns, found {}",
            walls.len(),
            spans.len()
        ));
    }
    let mut overheads: Vec<Duration> = walls
        .iter()
        .zip(spans)
        .map(|(w, s)| w.saturating_sub(*s))
        .collect();
    let mut turn: Vec<Duration> = spans.to_vec();
    let mut wall = walls.clone();
    println!("## warm second prompt (N = {})\n", opts.runs);
    println!(
        "wall median {:.1} ms, p90 {:.1} ms; agent's turn median {:.1} ms",
        ms(quantile(&mut wall, 0.5)),
        ms(quantile(&mut wall, 0.9)),
        ms(quantile(&mut turn, 0.5))
    );
    let (m, p90) = (quantile(&mut overheads, 0.5), quantile(&mut overheads, 0.9));
    println!(
        "overhead (wall minus turn): median {:.1} ms, p90 {:.1} ms; target <= 15 ms: {}\n",
        ms(m),
        ms(p90),
        if ms(m) <= 15.0 { "met" } else { "NOT met" }
    );

    // Streamed prompt, owner vs one process, alternating.
    // Quiet (the answer only: the owner streams no events to the client) and JSON (every
    // event crosses the socket and is printed), each owner / one process, alternating.
    let mut owner = Vec::new();
    let mut single = Vec::new();
    let mut owner_json = Vec::new();
    let mut single_json = Vec::new();
    for _ in 0..opts.stream_runs {
        owner.push(bench.timed(&["--format", "quiet", "stream", "10000"])?.0);
        single.push(
            single_bench
                .timed(&["--no-owner", "--format", "quiet", "stream", "10000"])?
                .0,
        );
        owner_json.push(bench.timed(&["--format", "json", "stream", "10000"])?.0);
        single_json.push(
            single_bench
                .timed(&["--no-owner", "--format", "json", "stream", "10000"])?
                .0,
        );
    }
    // A one-process run's fixed cost: a one-process `echo hi` minus its turn.
    let mut start_costs = Vec::new();
    for _ in 0..opts.stream_runs {
        let n = single_bench.turn_spans()?.len();
        let (w, _) = single_bench.timed(&["--no-owner", "--format", "quiet", "echo", "hi"])?;
        let spans = single_bench.turn_spans()?;
        if let Some(s) = spans.get(n) {
            start_costs.push(w.saturating_sub(*s));
        }
    }
    let (mo, ms1) = (quantile(&mut owner, 0.5), quantile(&mut single, 0.5));
    let start = quantile(&mut start_costs, 0.5);
    let ratio = mo.as_secs_f64() / ms1.as_secs_f64();
    let ratio_net = mo.as_secs_f64() / ms1.saturating_sub(start).as_secs_f64().max(1e-9);
    println!(
        "## 10,000-chunk streamed prompt ({} runs each, alternating)\n",
        opts.stream_runs
    );
    println!(
        "owner median {:.0} ms; --no-owner median {:.0} ms (of which {:.0} ms start and stop of a one-process run)",
        ms(mo),
        ms(ms1),
        ms(start)
    );
    println!(
        "ratio owner / one process: {ratio:.3} (target <= 1.05: {}); against the one-process run without its start: {ratio_net:.3}\n",
        if ratio <= 1.05 { "met" } else { "NOT met" }
    );
    if let Some(node) = &opts.node {
        against_node(&bench, node, opts.node_runs)?;
    }
    let (oj, sj) = (
        quantile(&mut owner_json, 0.5),
        quantile(&mut single_json, 0.5),
    );
    let ratio_json = oj.as_secs_f64() / sj.as_secs_f64();
    let ratio_json_net = oj.as_secs_f64() / sj.saturating_sub(start).as_secs_f64().max(1e-9);
    println!(
        "--format json: owner median {:.0} ms; --no-owner median {:.0} ms; ratio {ratio_json:.3}; against the one-process run without its start: {ratio_json_net:.3}\n",
        ms(oj),
        ms(sj)
    );
    let prompt = match opts.memory_tools {
        Some(bytes) => ["tools".to_owned(), bytes.to_string()],
        None => ["stream".to_owned(), opts.memory_chunks.to_string()],
    };
    owner_memory(&bench, opts.memory_turns, &prompt, opts.memory_pause)?;
    println!("load average at end {}", loadavg());
    // Leave no owner behind.
    let _ = bench.timed(&["sessions", "close"]);
    Ok(())
}

/// The queue owner's memory over `turns` warm turns of `chunks` streamed chunks each: its
/// resident set after turns 1, 10, 50, … and at the end (the owner must stay flat, issue 15),
/// and how much its anonymous memory (heap and stacks, not code) grew a turn after the tenth:
/// what a live session costs as it gets longer.
fn owner_memory(
    bench: &Bench,
    turns: usize,
    prompt: &[String; 2],
    pause: Duration,
) -> BenchResult<()> {
    let (_, out) = bench.timed(&["--format", "json", "status"])?;
    let status: Value = serde_json::from_str(out.trim()).map_err(|e| e.to_string())?;
    let pid = status["pid"]
        .as_u64()
        .ok_or_else(|| format!("no running queue owner in the status: {out}"))?;
    let [script, arg] = prompt;
    println!(
        "## queue owner memory over {turns} turns of `{script} {arg}`, {} ms apart\n",
        pause.as_millis()
    );
    println!(
        "| after turn | owner VmRSS kB | owner VmHWM kB | owner RssAnon kB | owner CPU ms a turn since the row before |\n|---:|---:|---:|---:|---:|"
    );
    let marks = [1, 10, 50, 100, 200, 300, 500, 1000, 2000];
    let mut first = None;
    let mut tenth = None;
    let mut last = (0, 0, 0);
    // The owner's CPU time a turn: what a turn costs it as the session grows (issue 15: cost
    // flat in session size), steadier than the client's wall time.
    let owner_pid = u32::try_from(pid).map_err(|e| e.to_string())?;
    let mut cpu_mark = (0, crate::bench_proc::own_cpu(owner_pid)?);
    for turn in 1..=turns {
        bench.timed(&["--format", "quiet", script, arg])?;
        std::thread::sleep(pause);
        if marks.contains(&turn) || turn == turns {
            let (rss, hwm, anon) = rss_kb(pid)?;
            let cpu = crate::bench_proc::own_cpu(owner_pid)?;
            let per_turn = (cpu - cpu_mark.1).as_secs_f64() * 1e3 / (turn - cpu_mark.0) as f64;
            cpu_mark = (turn, cpu);
            println!("| {turn} | {rss} | {hwm} | {anon} | {per_turn:.2} |");
            first.get_or_insert(rss);
            if turn == 10 {
                tenth = Some(anon);
            }
            last = (rss, hwm, anon);
        }
    }
    let growth = last.0 as f64 / first.unwrap_or(last.0).max(1) as f64;
    println!(
        "\nVmRSS at the end / after turn 1: {growth:.2} (the same owner process, pid {pid}, throughout)"
    );
    if let (Some(tenth), true) = (tenth, turns > 10) {
        let per_turn = (last.2 as f64 - tenth as f64) / (turns - 10) as f64;
        println!("RssAnon growth after turn 10: {per_turn:.2} kB a turn");
    }
    println!();
    Ok(())
}

/// Warm prompts of Node acpx and of this acpx, alternating, against the same scripted agent.
fn against_node(bench: &Bench, node: &Path, runs: usize) -> BenchResult<()> {
    let node_home = tempfile::tempdir().map_err(|e| e.to_string())?;
    let node_project = tempfile::tempdir().map_err(|e| e.to_string())?;
    std::fs::create_dir(node_project.path().join(".git")).map_err(|e| e.to_string())?;
    let node_run = |args: &[&str]| -> BenchResult<Duration> {
        let start = Instant::now();
        let out = Command::new(node)
            .args(["--agent", &bench.agent])
            .args(args)
            .current_dir(node_project.path())
            .env("HOME", node_home.path())
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run Node acpx at {}: {e}", node.display()))?;
        let wall = start.elapsed();
        if !out.status.success() {
            return Err(format!(
                "Node acpx {args:?} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(wall)
    };
    node_run(&["sessions", "new"])?;
    // The first prompt starts Node's queue owner; the runs below find it warm.
    node_run(&["--format", "quiet", "prompt", "echo warm-up"])?;
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        theirs.push(node_run(&["--format", "quiet", "prompt", "echo hi"])?);
        ours.push(bench.timed(&["--format", "quiet", "prompt", "echo hi"])?.0);
    }
    let (o, n) = (quantile(&mut ours, 0.5), quantile(&mut theirs, 0.5));
    let ratio = o.as_secs_f64() / n.as_secs_f64();
    println!("## warm prompt against Node acpx ({runs} runs each, alternating)\n");
    println!(
        "acpx median {:.1} ms; Node acpx median {:.1} ms; ratio {ratio:.3} (target <= 0.1: {})\n",
        ms(o),
        ms(n),
        if ratio <= 0.1 { "met" } else { "NOT met" }
    );
    // Node's owner exits with its TTL; close the session so it does not wait for it.
    let _ = node_run(&["sessions", "close"]);
    Ok(())
}
