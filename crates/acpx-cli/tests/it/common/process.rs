//! Running `acpx` as a child process the test watches, signals and waits for: what the tests of
//! the queue owner, of turns and of signals share.

use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{Env, Run};

/// The JSON line of the event that shows a turn has started (for [`spawn_until`]).
pub const STARTED: &str = "\"type\":\"prompt_started\"";

/// The two ways a turn runs: through the session's queue owner, and in this one process.
pub const MODES: [&[&str]; 2] = [&[], &["--no-owner"]];

/// `--agent <agent> <mode…> <rest…>`.
pub fn args<'a>(agent: &'a str, mode: &[&'a str], rest: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec!["--agent", agent];
    v.extend(mode);
    v.extend(rest);
    v
}

/// The exit code as a shell reports it: 128 + the signal for a process a signal ended.
pub fn exit_code(status: ExitStatus) -> i32 {
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

/// Polls `f` until it returns true (the deadline only guards against a hang).
pub fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether the process `pid` runs (a zombie still answers kill(0), so `/proc/<pid>/stat` is
/// read instead: it says Z for one).
pub fn alive(pid: u64) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// Sends `sig` to `pid`.
pub fn kill(pid: u64, sig: i32) {
    // SAFETY: plain kill(2) on a pid the test spawned or read from the owner's status.
    unsafe {
        libc::kill(pid as i32, sig);
    }
}

/// Sends `sig` to a child that has not been reaped.
pub fn kill_child(child: &Child, sig: i32) {
    kill(u64::from(child.id()), sig);
}

/// Spawns `acpx args…` with stdout and stderr piped.
pub fn spawn(env: &Env, args: &[&str]) -> Child {
    env.cmd()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for a child of [`spawn`] and collects what it printed.
pub fn finish(child: Child) -> Run {
    let o = child.wait_with_output().unwrap();
    Run {
        code: exit_code(o.status),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

/// A running child whose stdout is read on a thread.
pub struct Running {
    pub child: Child,
    lines: std::thread::JoinHandle<Vec<String>>,
}

/// Spawns `acpx args…` and returns once a stdout line contains `needle` (in JSON mode, the
/// event that shows the turn has started: [`STARTED`]).
pub fn spawn_until(env: &Env, args: &[&str], needle: &str) -> Running {
    let mut child = spawn(env, args);
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let needle = needle.to_owned();
    let lines = std::thread::spawn(move || {
        let mut all = Vec::new();
        let mut sent = false;
        for l in BufReader::new(stdout).lines() {
            let l = l.unwrap();
            if !sent && l.contains(&needle) {
                let _ = tx.send(());
                sent = true;
            }
            all.push(l);
        }
        all
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("the child printed the expected line");
    Running { child, lines }
}

impl Running {
    /// Waits for the child: its exit code, the JSON lines of its stdout, its stderr.
    pub fn finish(self) -> (i32, Vec<Value>, String) {
        let o = self.child.wait_with_output().unwrap();
        let lines = self.lines.join().unwrap();
        let json = lines
            .iter()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        (
            exit_code(o.status),
            json,
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    }
}

/// `status` of the agent's session in the project, as JSON.
pub fn status(env: &Env, agent: &str) -> Value {
    env.run(&["--format", "json", "--agent", agent, "status"])
        .ok()
        .json()
}

/// The events of the session's last turn (from its `prompt_started`; queue bookkeeping left
/// out, so the last one is the turn's end).
pub fn last_turn(env: &Env, agent: &str) -> Vec<Value> {
    let all = env
        .run(&["--format", "json", "--agent", agent, "sessions", "events"])
        .ok()
        .json_lines();
    let start = all
        .iter()
        .rposition(|e| e["type"] == "prompt_started")
        .expect("a prompt_started");
    let rid = all[start]["requestId"].clone();
    all[start..]
        .iter()
        .filter(|e| e["requestId"] == rid && e["stream"] == "prompt")
        .cloned()
        .collect()
}

/// Whether the tests run as root (who can make files of other users).
pub fn is_root() -> bool {
    // SAFETY: getuid(2) has no preconditions.
    unsafe { libc::getuid() == 0 }
}
