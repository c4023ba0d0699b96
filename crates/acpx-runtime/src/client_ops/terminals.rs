//! The terminals of a session (`terminal/*`): commands in their own process groups, their
//! output kept up to a limit, at most [`MAX_TERMINALS`] kept at once.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::AsyncReadExt;
use tokio::sync::watch;

/// Output kept per terminal when the agent gives no `outputByteLimit`.
pub const DEFAULT_TERMINAL_OUTPUT_LIMIT: usize = 64 * 1024;
/// The most output kept per terminal, whatever the agent asks for.
pub const DEFAULT_TERMINAL_OUTPUT_CEILING: usize = 1024 * 1024;
/// Time between `SIGTERM` and `SIGKILL` when a terminal command is killed.
pub const TERMINAL_KILL_GRACE: Duration = Duration::from_millis(1500);
/// The most terminals a session keeps at once. An agent that never sends `terminal/release`
/// would otherwise make a long-lived session (a queue owner's) hold every command's output,
/// up to the ceiling each, until it ends. Past it, `terminal/create` first forgets the oldest
/// terminal whose command has exited, and is refused when every kept command still runs.
pub const MAX_TERMINALS: usize = 64;

/// How a terminal command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExitStatus {
    /// The exit code, when the command exited normally.
    pub exit_code: Option<i32>,
    /// The signal that ended it (`SIGTERM`, …), when it was killed.
    pub signal: Option<String>,
}

impl ExitStatus {
    /// From a process status, naming the signal (`SIGKILL`, …).
    pub fn from_std(status: std::process::ExitStatus) -> Self {
        use std::os::unix::process::ExitStatusExt;
        ExitStatus {
            exit_code: status.code(),
            signal: status.signal().map(signal_name),
        }
    }

    /// How it ended, for people: `exited with code 0`, `killed by SIGTERM`.
    pub fn describe(&self) -> String {
        match (self.exit_code, &self.signal) {
            (Some(c), _) => format!("exited with code {c}"),
            (None, Some(s)) => format!("killed by {s}"),
            (None, None) => "ended".into(),
        }
    }

    /// `{exitCode, signal}` as ACP writes it.
    pub fn to_json(&self) -> Value {
        json!({"exitCode": self.exit_code, "signal": self.signal})
    }
}

/// The conventional name of a signal number.
pub fn signal_name(n: i32) -> String {
    match n {
        libc::SIGHUP => "SIGHUP".into(),
        libc::SIGINT => "SIGINT".into(),
        libc::SIGQUIT => "SIGQUIT".into(),
        libc::SIGILL => "SIGILL".into(),
        libc::SIGABRT => "SIGABRT".into(),
        libc::SIGBUS => "SIGBUS".into(),
        libc::SIGFPE => "SIGFPE".into(),
        libc::SIGKILL => "SIGKILL".into(),
        libc::SIGSEGV => "SIGSEGV".into(),
        libc::SIGPIPE => "SIGPIPE".into(),
        libc::SIGALRM => "SIGALRM".into(),
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGUSR1 => "SIGUSR1".into(),
        libc::SIGUSR2 => "SIGUSR2".into(),
        other => format!("SIG{other}"),
    }
}

/// Sends `signal` to the process group led by `pgid`. An error means the group is gone.
pub fn signal_group(pgid: u32, signal: i32) {
    let Ok(pgid) = libc::pid_t::try_from(pgid) else {
        return;
    };
    if pgid <= 1 {
        return;
    }
    // SAFETY: killpg has no memory-safety preconditions; a stale group id only yields ESRCH.
    unsafe {
        libc::killpg(pgid, signal);
    }
}

#[derive(Debug)]
struct OutputBuf {
    bytes: VecDeque<u8>,
    limit: usize,
    truncated: bool,
    /// Every byte the command wrote, counted (kept or not).
    received: u64,
    /// `received` when the output was last logged; `None` before.
    logged: Option<u64>,
}

impl OutputBuf {
    fn push(&mut self, data: &[u8]) {
        self.received += data.len() as u64;
        self.bytes.extend(data);
        if self.bytes.len() > self.limit {
            let excess = self.bytes.len() - self.limit;
            self.bytes.drain(..excess);
            self.truncated = true;
        }
    }

    fn text(&mut self) -> String {
        let bytes = self.bytes.make_contiguous();
        // Dropping the oldest bytes can split a character: skip leading continuation bytes.
        let start = if self.truncated {
            bytes
                .iter()
                .position(|b| (b & 0xC0) != 0x80)
                .unwrap_or(bytes.len())
        } else {
            0
        };
        String::from_utf8_lossy(&bytes[start..]).into_owned()
    }
}

/// A command started by `terminal/create`.
#[derive(Debug)]
pub struct Terminal {
    pgid: u32,
    output: Arc<Mutex<OutputBuf>>,
    exit: watch::Receiver<Option<ExitStatus>>,
}

impl Terminal {
    /// `terminal/output`: `{output, truncated, exitStatus?}`.
    pub fn output(&self) -> Value {
        let (text, truncated) = {
            let mut o = self.output.lock().unwrap_or_else(|p| p.into_inner());
            (o.text(), o.truncated)
        };
        let mut v = json!({"output": text, "truncated": truncated});
        if let Some(exit) = self.exit.borrow().clone() {
            v["exitStatus"] = exit.to_json();
        }
        v
    }

    /// [`output`](Self::output) for the log: always with `always` (`terminal/output`, whose
    /// answer the log records), else only when the command wrote something since the output
    /// was last logged, or it never was (`terminal/release`: the output acpx captured stays
    /// in the log, and in the thread, though the agent never asked for it).
    pub fn output_to_log(&self, always: bool) -> Option<Value> {
        {
            let mut o = self.output.lock().unwrap_or_else(|p| p.into_inner());
            if !always && o.logged == Some(o.received) {
                return None;
            }
            o.logged = Some(o.received);
        }
        Some(self.output())
    }

    /// Waits until the command has exited.
    pub async fn wait(&self) -> ExitStatus {
        let mut rx = self.exit.clone();
        loop {
            if let Some(s) = rx.borrow().clone() {
                return s;
            }
            if rx.changed().await.is_err() {
                return rx.borrow().clone().unwrap_or(ExitStatus {
                    exit_code: None,
                    signal: None,
                });
            }
        }
    }

    /// Whether the command is still running.
    pub fn is_running(&self) -> bool {
        self.exit.borrow().is_none()
    }

    /// Stops the command and everything it started: `SIGTERM` to its process group, then
    /// `SIGKILL` if it is still running after [`TERMINAL_KILL_GRACE`].
    pub async fn kill(&self) {
        if !self.is_running() {
            return;
        }
        signal_group(self.pgid, libc::SIGTERM);
        if tokio::time::timeout(TERMINAL_KILL_GRACE, self.wait())
            .await
            .is_err()
        {
            signal_group(self.pgid, libc::SIGKILL);
            self.wait().await;
        }
    }
}

/// The terminals of one session.
#[derive(Debug, Default)]
pub struct Terminals {
    map: Mutex<Kept>,
}

/// The kept terminals by id, each with its creation number (the oldest is forgotten first).
#[derive(Debug, Default)]
struct Kept {
    by_id: HashMap<String, (u64, Arc<Terminal>)>,
    created: u64,
}

impl Kept {
    /// The terminal to forget to make room for one more: the oldest exited one when
    /// [`MAX_TERMINALS`] are kept, or why there is no room. It is forgotten only once the new
    /// command has started, so a command that cannot start loses nothing.
    fn room(&self) -> std::io::Result<Option<String>> {
        if self.by_id.len() < MAX_TERMINALS {
            return Ok(None);
        }
        let oldest_exited = self
            .by_id
            .iter()
            .filter(|(_, (_, t))| !t.is_running())
            .min_by_key(|(_, (n, _))| *n)
            .map(|(id, _)| id.clone());
        match oldest_exited {
            Some(id) => Ok(Some(id)),
            None => Err(std::io::Error::other(format!(
                "this session already runs {MAX_TERMINALS} terminal commands, the most it keeps; \
                 release one (terminal/release) or wait for one to exit"
            ))),
        }
    }
}

/// A started terminal command.
#[derive(Debug)]
pub struct Created {
    /// Its terminal id.
    pub id: String,
    /// The exited, unreleased terminal forgotten to make room for it ([`MAX_TERMINALS`]).
    pub forgotten: Option<String>,
}

/// What `terminal/create` asks for.
#[derive(Debug, Clone)]
pub struct TerminalSpec {
    /// The program (run directly, not through a shell).
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
    /// Its working directory (already confined to the session's cwd).
    pub cwd: PathBuf,
    /// How many bytes of output are kept (the newest).
    pub output_limit: usize,
}

impl Terminals {
    /// Starts a command; returns its terminal id.
    ///
    /// Past [`MAX_TERMINALS`] kept terminals, the oldest exited one is forgotten first (its
    /// output is gone, its id unknown from then on); with every kept command still running,
    /// the command is not started and the error says so.
    pub fn create(&self, spec: TerminalSpec) -> std::io::Result<Created> {
        // Held while the command starts (nothing in here awaits), so that two creates at once
        // cannot both take the last place.
        let mut kept = self.map.lock().unwrap_or_else(|p| p.into_inner());
        let forgotten = kept.room()?;
        let mut cmd = tokio::process::Command::new(&spec.command);
        cmd.args(&spec.args)
            .envs(spec.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .current_dir(&spec.cwd)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let mut child = cmd.spawn()?;
        let pgid = child.id().unwrap_or(0);
        let output = Arc::new(Mutex::new(OutputBuf {
            bytes: VecDeque::new(),
            limit: spec.output_limit,
            truncated: false,
            received: 0,
            logged: None,
        }));
        let mut readers = Vec::new();
        if let Some(out) = child.stdout.take() {
            readers.push(tokio::spawn(pump(out, output.clone())));
        }
        if let Some(err) = child.stderr.take() {
            readers.push(tokio::spawn(pump(err, output.clone())));
        }
        let (tx, rx) = watch::channel(None);
        tokio::spawn(async move {
            let status = match child.wait().await {
                Ok(s) => ExitStatus::from_std(s),
                Err(_) => ExitStatus {
                    exit_code: None,
                    signal: None,
                },
            };
            // Output written just before exit is still in the pipes; a descendant that keeps
            // them open must not hold the exit status back for long.
            let _ = tokio::time::timeout(Duration::from_secs(1), async {
                for r in readers {
                    let _ = r.await;
                }
            })
            .await;
            let _ = tx.send(Some(status));
        });
        let id = format!("term_{}", uuid::Uuid::new_v4().simple());
        let terminal = Arc::new(Terminal {
            pgid,
            output,
            exit: rx,
        });
        if let Some(id) = &forgotten {
            kept.by_id.remove(id);
        }
        kept.created += 1;
        let n = kept.created;
        kept.by_id.insert(id.clone(), (n, terminal));
        Ok(Created { id, forgotten })
    }

    /// The terminal with this id.
    pub fn get(&self, id: &str) -> Option<Arc<Terminal>> {
        self.map
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .by_id
            .get(id)
            .map(|(_, t)| t.clone())
    }

    /// Removes a terminal (the caller kills it).
    pub fn remove(&self, id: &str) -> Option<Arc<Terminal>> {
        self.map
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .by_id
            .remove(id)
            .map(|(_, t)| t)
    }

    /// Kills and forgets every terminal (session shutdown).
    pub async fn release_all(&self) {
        let all: Vec<_> = self
            .map
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .by_id
            .drain()
            .map(|(_, (_, t))| t)
            .collect();
        for t in all {
            t.kill().await;
        }
    }
}

async fn pump(mut r: impl tokio::io::AsyncRead + Unpin, out: Arc<Mutex<OutputBuf>>) {
    let mut buf = [0u8; 8192];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => out
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(&buf[..n]),
        }
    }
}
