//! `cargo xtask bench hosts --url URL`: one session driven from two hosts on PostgreSQL
//! (issue 43's figures in `docs/BENCHMARKS.md`).
//!
//! Method: whole `acpx` invocations of the release binary against the scripted test agent,
//! in two "hosts" (two homes, each with its own `XDG_RUNTIME_DIR`, so each has its own
//! owners), one schema of their own on the server of `--url` (dropped at the end). Host A
//! makes the session with `sessions new`, so its queue owner holds it, warm.
//!
//! - **prompt from B vs from A** (`--runs N`, default 30): `echo hi` (quiet) from host A and
//!   from host B, alternating, both run by A's warm owner (B's through the database's task
//!   queue); medians and p90 of the wall times, and the difference of the medians; target:
//!   B's median at most 50 ms more than A's.
//! - **cancel across hosts** (`--cancel-runs N`, default 5): A runs `slow 400` (20 s); once B's
//!   `status` says it runs, B's `cancel` is timed from its start to the exit of A's prompt;
//!   median and max; target ≤ 1 s.
//! - **takeover** (`--takeover-runs N`, default 3): A's owner is killed (SIGKILL), then frozen
//!   (SIGSTOP: a host that stops answering, its connections left open); B's `echo hi` is timed
//!   from the signal to its exit. Target: kill ≤ a few seconds (the server releases a dead
//!   connection's locks at once), freeze ≤ the lease TTL (15 s) + 5 s.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::bench_proc::{build_release, loadavg};

type BenchResult<T> = Result<T, String>;

/// Parsed options of `bench hosts`.
pub struct Options {
    url: String,
    runs: usize,
    cancel_runs: usize,
    takeover_runs: usize,
}

impl Options {
    pub fn parse(args: &[String]) -> BenchResult<Options> {
        let mut o = Options {
            url: std::env::var("ACPX_TEST_POSTGRES_URL").unwrap_or_default(),
            runs: 30,
            cancel_runs: 5,
            takeover_runs: 3,
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
                "--cancel-runs" => o.cancel_runs = num("--cancel-runs")?,
                "--takeover-runs" => o.takeover_runs = num("--takeover-runs")?,
                "--url" => o.url = it.next().ok_or("--url needs a PostgreSQL URL")?.to_owned(),
                other => return Err(format!("unknown option {other:?}")),
            }
        }
        if o.url.is_empty() {
            return Err("--url (or ACPX_TEST_POSTGRES_URL) is needed".into());
        }
        Ok(o)
    }
}

/// One host: a home with its own runtime directory.
struct Host {
    home: tempfile::TempDir,
    run_dir: PathBuf,
}

impl Host {
    fn new() -> BenchResult<Host> {
        let home = tempfile::tempdir().map_err(|e| e.to_string())?;
        let run_dir = home.path().join("run");
        std::fs::create_dir(&run_dir).map_err(|e| e.to_string())?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&run_dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| e.to_string())?;
        Ok(Host { home, run_dir })
    }
}

struct Bench {
    acpx: PathBuf,
    url: String,
    schema: String,
    project: tempfile::TempDir,
    agent: String,
    a: Host,
    b: Host,
}

impl Bench {
    fn cmd(&self, host: &Host, args: &[&str]) -> Command {
        let mut c = Command::new(&self.acpx);
        c.arg("--home")
            .arg(host.home.path())
            .args(["--store", "postgres", "--agent", &self.agent])
            .args(args)
            .current_dir(self.project.path())
            .env("ACPX_STORE_URL", &self.url)
            .env("ACPX_STORE_SCHEMA", &self.schema)
            .env("XDG_RUNTIME_DIR", &host.run_dir)
            .env_remove("ACPX_HOME")
            .env_remove("ACPX_LEASE_TTL_MS")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    fn run(&self, host: &Host, args: &[&str]) -> BenchResult<(Duration, String)> {
        let t0 = Instant::now();
        let o = self
            .cmd(host, args)
            .output()
            .map_err(|e| format!("acpx {args:?}: {e}"))?;
        let took = t0.elapsed();
        if !o.status.success() {
            return Err(format!(
                "acpx {args:?} failed: {}",
                String::from_utf8_lossy(&o.stderr)
            ));
        }
        Ok((took, String::from_utf8_lossy(&o.stdout).into_owned()))
    }

    fn spawn(&self, host: &Host, args: &[&str]) -> BenchResult<Child> {
        self.cmd(host, args)
            .spawn()
            .map_err(|e| format!("acpx {args:?}: {e}"))
    }

    fn status(&self, host: &Host) -> BenchResult<Value> {
        let (_, out) = self.run(host, &["--format", "json", "status"])?;
        serde_json::from_str(&out).map_err(|e| format!("status: {e}: {out}"))
    }

    /// A new session made on host A (its owner warm), with one turn.
    fn fresh_session(&self) -> BenchResult<u64> {
        self.run(&self.a, &["sessions", "new"])?;
        self.run(&self.a, &["--format", "quiet", "echo", "warm"])?;
        self.status(&self.a)?["pid"]
            .as_u64()
            .ok_or_else(|| "host A's owner does not run".to_owned())
    }

    fn wait_until(&self, what: &str, mut f: impl FnMut() -> BenchResult<bool>) -> BenchResult<()> {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !f()? {
            if Instant::now() > deadline {
                return Err(format!("timed out waiting for {what}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }
}

fn signal(pid: u64, sig: i32) {
    // SAFETY: kill(2) on the pid of an owner this benchmark started.
    unsafe {
        libc::kill(pid as i32, sig);
    }
}

fn alive(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
    })
}

fn quantile(v: &mut [Duration], q: f64) -> Duration {
    v.sort();
    let i = ((v.len() as f64 - 1.0) * q).round() as usize;
    v[i.min(v.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn drop_schema(url: &str, schema: &str) {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return;
    };
    rt.block_on(async {
        if let Ok((c, conn)) = tokio_postgres::connect(url, tokio_postgres::NoTls).await {
            tokio::spawn(conn);
            let _ = c
                .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
                .await;
        }
    });
}

pub fn run(opts: &Options) -> BenchResult<()> {
    let acpx = build_release()?;
    let bench = Bench {
        agent: format!("{} __test-agent", acpx.display()),
        acpx,
        url: opts.url.clone(),
        schema: format!("acpx_bench_hosts_{}", std::process::id()),
        project: tempfile::tempdir().map_err(|e| e.to_string())?,
        a: Host::new()?,
        b: Host::new()?,
    };
    let result = measure(&bench, opts);
    // The owners go before the schema does.
    for host in [&bench.a, &bench.b] {
        let _ = bench.run(host, &["sessions", "close"]);
    }
    drop_schema(&bench.url, &bench.schema);
    result
}

fn measure(bench: &Bench, opts: &Options) -> BenchResult<()> {
    println!(
        "bench hosts: two homes, one PostgreSQL schema; load average {}",
        loadavg()
    );
    bench.fresh_session()?;
    let (mut from_a, mut from_b) = (Vec::new(), Vec::new());
    for _ in 0..opts.runs {
        from_a.push(bench.run(&bench.a, &["--format", "quiet", "echo", "hi"])?.0);
        from_b.push(bench.run(&bench.b, &["--format", "quiet", "echo", "hi"])?.0);
    }
    let (a50, b50) = (quantile(&mut from_a, 0.5), quantile(&mut from_b, 0.5));
    let (a90, b90) = (quantile(&mut from_a, 0.9), quantile(&mut from_b, 0.9));
    println!(
        "warm prompt from host A: median {:.1} ms, p90 {:.1} ms ({} runs)",
        ms(a50),
        ms(a90),
        opts.runs
    );
    println!(
        "warm prompt from host B: median {:.1} ms, p90 {:.1} ms; B − A medians {:+.1} ms (target ≤ +50 ms)",
        ms(b50),
        ms(b90),
        ms(b50) - ms(a50)
    );

    let mut cancels = Vec::new();
    for _ in 0..opts.cancel_runs {
        let long = bench.spawn(&bench.a, &["--format", "quiet", "slow", "400"])?;
        bench.wait_until("the turn running, seen from B", || {
            Ok(bench.status(&bench.b)?["status"] == "running")
        })?;
        let t0 = Instant::now();
        bench.run(&bench.b, &["cancel"])?;
        long.wait_with_output().map_err(|e| e.to_string())?;
        cancels.push(t0.elapsed());
    }
    let c50 = quantile(&mut cancels, 0.5);
    let cmax = quantile(&mut cancels, 1.0);
    println!(
        "cancel from host B to the end of A's turn: median {:.0} ms, max {:.0} ms ({} runs; target ≤ 1000 ms)",
        ms(c50),
        ms(cmax),
        opts.cancel_runs
    );

    for (name, sig) in [
        ("killed (SIGKILL)", libc::SIGKILL),
        ("frozen (SIGSTOP)", libc::SIGSTOP),
    ] {
        let mut takeovers = Vec::new();
        for _ in 0..opts.takeover_runs {
            let owner = bench.fresh_session()?;
            let t0 = Instant::now();
            signal(owner, sig);
            bench.run(&bench.b, &["--format", "quiet", "echo", "hi"])?;
            takeovers.push(t0.elapsed());
            if sig == libc::SIGSTOP {
                signal(owner, libc::SIGCONT);
            }
            bench.wait_until("the old owner gone", || Ok(!alive(owner)))?;
            // B's owner holds the session now; the next round starts on A again.
            bench.run(&bench.b, &["sessions", "close"])?;
        }
        let t50 = quantile(&mut takeovers, 0.5);
        let tmax = quantile(&mut takeovers, 1.0);
        println!(
            "takeover by host B, A's owner {name}: median {:.0} ms, max {:.0} ms ({} runs; target ≤ TTL 15 s + 5 s)",
            ms(t50),
            ms(tmax),
            opts.takeover_runs
        );
    }
    Ok(())
}
