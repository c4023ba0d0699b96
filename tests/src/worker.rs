//! The parent side of cross-process checks: spawning `acpx-store-worker`, reading what it
//! acknowledged, and killing it.
//!
//! The worker prints one line per acknowledged operation and flushes after each, so after a
//! SIGKILL the parent still reads (from the pipe) exactly what was acknowledged before death.

use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::backend::Backend;

static BINARY: OnceLock<PathBuf> = OnceLock::new();

/// Upper bound on any single wait for the worker. Reaching it means the worker hung: the
/// check fails instead of hanging the suite. It is never a speed requirement.
pub const WORKER_WAIT: Duration = Duration::from_secs(120);

/// Tells the harness where `acpx-store-worker` is. The [`crate::suite!`] macro
/// passes it `option_env!("CARGO_BIN_EXE_acpx-store-worker")`, which only integration tests
/// of this package see.
pub fn set_binary(path: &str) {
    let _ = BINARY.set(PathBuf::from(path));
}

fn binary() -> PathBuf {
    BINARY
        .get()
        .cloned()
        .expect("worker binary unknown: call acpx_tests::worker::set_binary first")
}

/// A running worker process.
pub struct Worker {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Lines<BufReader<ChildStdout>>,
    stderr: Arc<Mutex<String>>,
    stderr_task: Option<tokio::task::JoinHandle<()>>,
    what: String,
}

impl Worker {
    /// Starts the worker on `backend`'s data running `op` (e.g. `["append", "--id", "x"]`),
    /// with extra environment variables. `None` when the backend has no worker support.
    pub fn spawn(backend: &dyn Backend, op: &[&str], env: &[(&str, &str)]) -> Option<Worker> {
        Self::start(backend, op, env, None)
    }

    /// Like [`Worker::spawn`], but every file the worker writes is limited to `bytes`
    /// (rounded down to 512-byte blocks), the way a full disk limits it. The worker runs under
    /// `sh -c 'trap "" XFSZ; ulimit -f <blocks>; exec "$0" "$@"'`: an ignored `SIGXFSZ` stays
    /// ignored across `exec`, so a write past the limit fails with `EFBIG` (after writing what
    /// fits) instead of killing the process. `ulimit -f` counts 512-byte blocks in a POSIX
    /// `sh` (bash invoked as `sh` included). Pipes are not files: stdout and stderr still work.
    pub fn spawn_with_file_limit(backend: &dyn Backend, op: &[&str], bytes: u64) -> Option<Worker> {
        Self::start(backend, op, &[], Some(bytes / 512))
    }

    fn start(
        backend: &dyn Backend,
        op: &[&str],
        env: &[(&str, &str)],
        file_blocks: Option<u64>,
    ) -> Option<Worker> {
        let mut args = backend.worker_args()?;
        args.extend(op.iter().map(|s| s.to_string()));
        let mut cmd = match file_blocks {
            None => Command::new(binary()),
            Some(blocks) => {
                let mut sh = Command::new("sh");
                sh.arg("-c")
                    .arg(format!(
                        "trap '' XFSZ; ulimit -f {blocks} || exit 97; exec \"$0\" \"$@\""
                    ))
                    .arg(binary());
                sh
            }
        };
        cmd.args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        // A failpoint meant for this child must not leak in from the test's own environment.
        cmd.env_remove("ACPX_FAILPOINT");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {:?}: {e}", binary()));
        let stdout = child.stdout.take().expect("piped stdout");
        let mut stderr_pipe = child.stderr.take().expect("piped stderr");
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = stderr.clone();
        let stderr_task = tokio::spawn(async move {
            let mut buf = Vec::new();
            let _ = stderr_pipe.read_to_end(&mut buf).await;
            sink.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buf));
        });
        Some(Worker {
            stdin: child.stdin.take(),
            child,
            lines: BufReader::new(stdout).lines(),
            stderr,
            stderr_task: Some(stderr_task),
            what: format!("worker {}", args.join(" ")),
        })
    }

    /// What the worker wrote on stderr so far (for failure messages).
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// The next stdout line, or `None` at end of output.
    pub async fn next_line(&mut self) -> Option<String> {
        match tokio::time::timeout(WORKER_WAIT, self.lines.next_line()).await {
            Ok(Ok(line)) => line,
            Ok(Err(e)) => panic!("{}: reading stdout: {e}", self.what),
            Err(_) => panic!(
                "{}: no output for {WORKER_WAIT:?}; stderr: {}",
                self.what,
                self.stderr()
            ),
        }
    }

    /// Reads lines until one starts with `prefix` and returns it; fails at end of output.
    pub async fn expect_line(&mut self, prefix: &str) -> String {
        loop {
            match self.next_line().await {
                Some(l) if l.starts_with(prefix) => return l,
                Some(_) => continue,
                None => {
                    let status = self.wait().await;
                    panic!(
                        "{}: ended ({status}) before printing {prefix:?}; stderr: {}",
                        self.what,
                        self.stderr()
                    )
                }
            }
        }
    }

    /// Sends one command line on the worker's stdin.
    pub async fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin still open");
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap_or_else(|e| panic!("{}: writing {line:?}: {e}", self.what));
        stdin.flush().await.expect("flush worker stdin");
    }

    /// SIGKILLs the worker and reaps it.
    pub async fn kill(&mut self) {
        // tokio's Child::kill sends SIGKILL on Unix and waits for the process.
        self.child.kill().await.expect("kill worker");
    }

    /// Every remaining stdout line until end of output (the pipe keeps what a killed worker
    /// wrote before it died).
    pub async fn rest(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(l) = self.next_line().await {
            out.push(l);
        }
        out
    }

    /// Waits for the worker to exit.
    pub async fn wait(&mut self) -> ExitStatus {
        self.stdin.take();
        match tokio::time::timeout(WORKER_WAIT, self.child.wait()).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => panic!("{}: wait: {e}", self.what),
            Err(_) => panic!("{}: did not exit within {WORKER_WAIT:?}", self.what),
        }
    }

    /// Waits (briefly) until everything the exited worker wrote on stderr has been collected.
    async fn drain_stderr(&mut self) {
        if let Some(task) = self.stderr_task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
        }
    }

    /// Reads all output and waits for a successful exit; returns the output lines.
    pub async fn finish(&mut self) -> Vec<String> {
        let lines = self.rest().await;
        let status = self.wait().await;
        self.drain_stderr().await;
        assert!(
            status.success(),
            "{}: exited with {status}; stderr: {}",
            self.what,
            self.stderr()
        );
        lines
    }

    /// Reads all output and waits for the worker to die of SIGABRT (a failpoint firing).
    pub async fn finish_aborted(&mut self) -> Vec<String> {
        let lines = self.rest().await;
        let status = self.wait().await;
        self.drain_stderr().await;
        assert_eq!(
            status.signal(),
            Some(6),
            "{}: expected the failpoint to abort the process, but it exited with {status}; \
             is the backend built with its failpoints feature? stderr: {}",
            self.what,
            self.stderr()
        );
        lines
    }
}

/// The numeric value of `key=` in an ack line such as `ack seq=17`.
pub fn field(line: &str, key: &str) -> Option<u64> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('=')?.parse().ok())
}

/// The largest `key=` value over the `ack` lines.
pub fn last_ack(lines: &[String], key: &str) -> Option<u64> {
    lines
        .iter()
        .filter(|l| l.starts_with("ack "))
        .filter_map(|l| field(l, key))
        .max()
}
