//! What the benchmarks measure processes with: the release build they run, a process's CPU
//! time and resident memory from `/proc`, a command timed, the machine's load average.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

type BenchResult<T> = Result<T, String>;

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

pub(crate) fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// Builds the release `acpx` and returns its path.
pub(crate) fn build_release() -> BenchResult<PathBuf> {
    let root = workspace_root();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "--release", "-q", "-p", "acpx-cli"])
        .current_dir(&root)
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !status.success() {
        return Err("cargo build --release -p acpx-cli failed".into());
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let acpx = target.join("release").join("acpx");
    if !acpx.is_file() {
        return Err(format!("{} was not built", acpx.display()));
    }
    Ok(acpx)
}

/// `VmRSS`, `VmHWM` and `RssAnon` of `pid` in kB, from `/proc/<pid>/status`.
pub(crate) fn rss_kb(pid: u64) -> BenchResult<(u64, u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("cannot read /proc/{pid}/status: {e}"))?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .ok_or_else(|| format!("no {name} in /proc/{pid}/status"))
    };
    Ok((field("VmRSS:")?, field("VmHWM:")?, field("RssAnon:")?))
}

/// Runs `cmd` (`acpx <args>`) to its end: its wall time and stdout; its stderr in the error
/// when it fails.
pub(crate) fn run_timed(mut cmd: Command, args: &[&str]) -> BenchResult<(Duration, String)> {
    let start = Instant::now();
    let out = cmd.output().map_err(|e| format!("cannot run acpx: {e}"))?;
    let wall = start.elapsed();
    if !out.status.success() {
        return Err(format!(
            "acpx {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok((wall, String::from_utf8_lossy(&out.stdout).into_owned()))
}

/// `utime + stime` of `/proc/<pid>/stat` (all of the process's threads; not its children).
pub(crate) fn own_cpu(pid: u32) -> BenchResult<Duration> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    // The fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .ok_or_else(|| format!("{path}: no command name"))?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line; `rest` starts at field 3.
    let ticks = |i: usize| -> BenchResult<u64> {
        fields
            .get(i - 3)
            .and_then(|f| f.parse().ok())
            .ok_or_else(|| format!("{path}: field {i} is not a number"))
    };
    // SAFETY: sysconf has no preconditions.
    let hz = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) })
        .ok()
        .filter(|h| *h > 0)
        .unwrap_or(100);
    let t = ticks(14)? + ticks(15)?;
    Ok(Duration::from_nanos(t.saturating_mul(1_000_000_000) / hz))
}
