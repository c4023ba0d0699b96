//! The torture suite's harness: a temporary home and project per scenario, `acpx` runs with a
//! time limit, the stored log read back through `acpx sessions events`, and the figures.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

pub type TortureResult<T> = Result<T, String>;

/// The figures of one scenario on one store.
#[derive(Debug, Default, Clone)]
pub struct Figures {
    pub scenario: String,
    pub store: String,
    pub tried: u64,
    /// Acknowledged things (printed events, finished turns) that the store does not hold.
    pub lost: u64,
    /// Runs that exited 101 or printed a Rust panic.
    pub panics: u64,
    /// Checks that failed without losing data (an unclear error, a hang, fsck not clean…).
    pub failures: u64,
    /// Why the scenario did not run (then the other figures are meaningless).
    pub not_run: Option<String>,
    /// What was seen, one short line each (shown under the table).
    pub notes: Vec<String>,
}

impl Figures {
    pub fn new(scenario: &str, store: &str) -> Figures {
        Figures {
            scenario: scenario.to_owned(),
            store: store.to_owned(),
            ..Figures::default()
        }
    }

    pub fn note(&mut self, s: impl Into<String>) {
        let s = s.into();
        if !self.notes.contains(&s) && self.notes.len() < 40 {
            self.notes.push(s);
        }
    }

    /// Counts a finished run's panic, if it is one (and a run that could not even start as
    /// a failure).
    pub fn check_panic(&mut self, what: &str, run: &Run) {
        if run.not_started {
            self.failures += 1;
            self.note(format!("{what}: {}", first_line(&run.stderr)));
        }
        if run.panicked() {
            self.panics += 1;
            self.note(format!(
                "PANIC in {what}: exit {:?}: {}",
                run.code,
                first_line(&run.stderr)
            ));
        }
    }

    pub fn bad(&self) -> bool {
        self.not_run.is_none() && (self.lost > 0 || self.panics > 0)
    }
}

pub fn first_line(s: &str) -> String {
    let line = s
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    line.chars().take(160).collect()
}

/// One finished (or killed) run.
#[derive(Debug, Default)]
pub struct Run {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub timed_out: bool,
    pub not_started: bool,
}

impl Run {
    pub fn panicked(&self) -> bool {
        self.code == Some(101) || self.stderr.contains("panicked at")
    }

    /// Whether a failed run said why: on stderr, as a JSON error object on stdout, or as the
    /// turn's recorded `prompt_error` event (`--format json`).
    pub fn explained(&self) -> bool {
        !self.stderr.trim().is_empty()
            || self.stdout.contains("\"error\"")
            || self.stdout.contains("\"prompt_error\"")
    }

    /// The complete JSON lines of stdout (a line cut by a kill is left out).
    pub fn json_lines(&self) -> Vec<(String, Value)> {
        let complete = match self.stdout.rfind('\n') {
            Some(i) => &self.stdout[..=i],
            None => "",
        };
        complete
            .lines()
            .filter_map(|l| Some((l.to_owned(), serde_json::from_str(l).ok()?)))
            .collect()
    }
}

/// Reads a child's pipe to its end on a thread; the text arrives on the returned channel.
pub fn drain(pipe: Option<impl Read + Send + 'static>) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    if let Some(mut p) = pipe {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = p.read_to_end(&mut buf);
            let _ = tx.send(String::from_utf8_lossy(&buf).into_owned());
        });
    }
    rx
}

/// Waits for `child` up to `limit`, killing it (SIGKILL) when it takes longer.
pub fn wait_for(child: &mut Child, limit: Duration) -> (Option<i32>, bool) {
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return (status.code(), false),
            Ok(None) if start.elapsed() < limit => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                let _ = child.kill();
                let code = child.wait().ok().and_then(|s| s.code());
                return (code, true);
            }
        }
    }
}

/// Runs `cmd` (its stdout and stderr piped) to its end, or kills it after `limit`.
pub fn run(mut cmd: Command, limit: Duration) -> Run {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            return Run {
                stderr: format!("cannot start {cmd:?}: {e}"),
                not_started: true,
                ..Run::default()
            }
        }
    };
    let out = drain(child.stdout.take());
    let err = drain(child.stderr.take());
    let (code, timed_out) = wait_for(&mut child, limit);
    // A grandchild (the agent, a detached owner) may hold the pipes open: do not wait forever.
    let grace = Duration::from_secs(5);
    Run {
        code,
        stdout: out.recv_timeout(grace).unwrap_or_default(),
        stderr: err.recv_timeout(grace).unwrap_or_default(),
        timed_out,
        not_started: false,
    }
}

/// A temporary home and project (a git root) on one store, and the binary under test.
pub struct Env {
    pub acpx: PathBuf,
    pub store: String,
    pub home: PathBuf,
    pub project: PathBuf,
    _dir: Option<tempfile::TempDir>,
}

impl Env {
    pub fn new(acpx: &Path, store: &str) -> TortureResult<Env> {
        let dir = tempfile::Builder::new()
            .prefix("acpx-torture-")
            .tempdir()
            .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
        let home = dir.path().join("home");
        let project = dir.path().join("project");
        Env::create(acpx, store, home, project, Some(dir))
    }

    /// An env whose home is `home` (on a small filesystem, or a damaged copy).
    pub fn at(acpx: &Path, store: &str, home: PathBuf, project: PathBuf) -> TortureResult<Env> {
        Env::create(acpx, store, home, project, None)
    }

    fn create(
        acpx: &Path,
        store: &str,
        home: PathBuf,
        project: PathBuf,
        dir: Option<tempfile::TempDir>,
    ) -> TortureResult<Env> {
        std::fs::create_dir_all(project.join(".git"))
            .map_err(|e| format!("cannot create {}: {e}", project.display()))?;
        Ok(Env {
            acpx: acpx.to_owned(),
            store: store.to_owned(),
            home,
            project,
            _dir: dir,
        })
    }

    /// `acpx --home H --store S <args>` in the project, stdin closed, nothing inherited from
    /// the caller's acpx settings. The owner's idle time is short so that none outlives its
    /// scenario for long.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.acpx);
        c.arg("--home")
            .arg(&self.home)
            .args(["--store", &self.store])
            .args(args)
            .current_dir(&self.project)
            .env_remove("ACPX_HOME")
            .env_remove("ACPX_STORE")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null());
        c
    }

    pub fn run(&self, args: &[&str], limit: Duration) -> Run {
        run(self.cmd(args), limit)
    }

    /// Creates the `demo` session of the project; its record id.
    pub fn new_session(&self) -> TortureResult<String> {
        let r = self.run(
            &["--format", "json", "demo", "sessions", "new"],
            Duration::from_secs(60),
        );
        let v: Value = serde_json::from_str(r.stdout.trim()).map_err(|_| {
            format!(
                "sessions new failed (exit {:?}): {}",
                r.code,
                first_line(&r.stderr)
            )
        })?;
        v["acpxRecordId"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| format!("sessions new printed no acpxRecordId: {}", r.stdout))
    }

    /// The stored log of session `id` (seq → envelope), read through the CLI; `Err` with the
    /// reason when it cannot be read.
    pub fn stored(&self, id: &str) -> Result<BTreeMap<u64, (String, Value)>, String> {
        self.stored_from(id, 1)
    }

    /// [`Env::stored`] from seq `from` on.
    pub fn stored_from(
        &self,
        id: &str,
        from: u64,
    ) -> Result<BTreeMap<u64, (String, Value)>, String> {
        let from = from.max(1).to_string();
        let r = self.run(
            &[
                "--format",
                "json",
                "demo",
                "sessions",
                "events",
                id,
                "--from-seq",
                &from,
            ],
            Duration::from_secs(300),
        );
        if r.code != Some(0) {
            return Err(format!(
                "sessions events exit {:?}: {}",
                r.code,
                first_line(&r.stderr)
            ));
        }
        let mut out = BTreeMap::new();
        for (line, v) in r.json_lines() {
            if let Some(seq) = v["seq"].as_u64() {
                out.insert(seq, (line, v));
            }
        }
        Ok(out)
    }

    /// Waits until no turn is running in the project's unnamed `demo` session (its owner
    /// finished the turn), up to `limit`; `false` when it still runs.
    pub fn wait_idle(&self, limit: Duration) -> bool {
        let start = Instant::now();
        while start.elapsed() < limit {
            let r = self.run(
                &["--format", "json", "demo", "status"],
                Duration::from_secs(30),
            );
            let status = serde_json::from_str::<Value>(r.stdout.trim())
                .ok()
                .and_then(|v| v["status"].as_str().map(str::to_owned));
            if status.as_deref() != Some("running") {
                return true;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        false
    }

    /// `fsck`, then `fsck --repair` if needed: `Ok` when the home ends clean.
    pub fn fsck(&self, figures: &mut Figures) -> Result<(), String> {
        let limit = Duration::from_secs(120);
        let first = self.run(&["--format", "json", "fsck"], limit);
        figures.check_panic("fsck", &first);
        if first.code == Some(0) {
            return Ok(());
        }
        let repair = self.run(&["--format", "json", "fsck", "--repair"], limit);
        figures.check_panic("fsck --repair", &repair);
        let again = self.run(&["--format", "json", "fsck"], limit);
        figures.check_panic("fsck", &again);
        if again.code == Some(0) {
            figures.note(format!(
                "fsck found (repaired): {}",
                problem_kinds(&first.stdout)
            ));
            Ok(())
        } else {
            Err(format!(
                "fsck still not clean after --repair (exit {:?}): {}",
                again.code,
                problem_kinds(&again.stdout)
            ))
        }
    }
}

/// The `kind`s of an fsck JSON report, for a note.
fn problem_kinds(stdout: &str) -> String {
    let Ok(v) = serde_json::from_str::<Value>(stdout.trim()) else {
        return first_line(stdout);
    };
    let mut kinds: Vec<String> = v["problems"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|p| p["kind"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    kinds.sort();
    kinds.dedup();
    kinds.join(", ")
}

/// A small deterministic random source (xorshift64*), seeded per run and printed, so that a
/// run can be repeated with `--seed`.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `lo..hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo).max(1)
    }
}
