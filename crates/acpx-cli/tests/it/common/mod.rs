//! Shared helpers of the end-to-end tests: they run the real `acpx` binary against a temporary
//! `--home`, on the backend under test.
//!
//! The scripted ACP agent runs as `acpx __test-agent` (see [`test_agent`]): the binary under
//! test serves it, so these tests need nothing else built.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::{json, Value};

pub mod peers;
pub mod postgres;
pub mod process;
pub mod terminal;

pub const BACKENDS: [&str; 2] = ["fs", "sqlite"];

/// The `acpx` binary under test.
pub fn acpx_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_acpx"))
}

/// The scripted test agent's command line: the `acpx` binary under test serving it through
/// the hidden `__test-agent` command (the same agent as `acpx-test-agent` and the built-in
/// `demo` agent), so no other binary has to be built.
pub fn test_agent() -> String {
    format!("{} __test-agent", acpx_bin().display())
}

/// A temporary home and project directory (a git root) for one backend.
pub struct Env {
    pub home: tempfile::TempDir,
    pub project: tempfile::TempDir,
    pub backend: &'static str,
    pub extra_env: Vec<(String, String)>,
}

/// The result of one run.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    fn from(o: Output) -> Run {
        Run {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }

    /// The stdout lines parsed as JSON.
    pub fn json_lines(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l:?}: {e}")))
            .collect()
    }

    /// The single JSON object on stdout.
    pub fn json(&self) -> Value {
        let lines = self.json_lines();
        assert_eq!(
            lines.len(),
            1,
            "expected one JSON line, got {}",
            self.stdout
        );
        lines.into_iter().next().unwrap()
    }

    pub fn ok(self) -> Run {
        assert_eq!(
            self.code, 0,
            "expected success\nstdout: {}\nstderr: {}",
            self.stdout, self.stderr
        );
        self
    }
}

impl Env {
    pub fn new(backend: &'static str) -> Env {
        let project = tempfile::tempdir().unwrap();
        std::fs::create_dir(project.path().join(".git")).unwrap();
        Env {
            home: tempfile::tempdir().unwrap(),
            project,
            backend,
            extra_env: Vec::new(),
        }
    }

    pub fn home(&self) -> &Path {
        self.home.path()
    }

    /// The authority directory of this home's store (`acpx_owner::authority`): where its
    /// owners' leases and sockets live, found by the identity it names in its `store` file.
    pub fn authority(&self) -> PathBuf {
        let home = std::fs::canonicalize(self.home()).unwrap();
        let identity = match self.backend {
            "fs" => format!("fs:{}", home.join("sessions").display()),
            "sqlite" => format!("sqlite:{}", home.join("acpx.db").display()),
            other => panic!("no local authority for --store {other}"),
        };
        let root = acpx_owner::authority::runtime_root();
        std::fs::read_dir(&root)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|d| {
                std::fs::read_to_string(d.join("store")).is_ok_and(|s| s.trim_end() == identity)
            })
            .unwrap_or_else(|| {
                panic!(
                    "no authority directory for {identity} in {}",
                    root.display()
                )
            })
    }

    /// The project directory, canonical (as acpx stores it).
    pub fn cwd(&self) -> PathBuf {
        std::fs::canonicalize(self.project.path()).unwrap()
    }

    pub fn cwd_str(&self) -> String {
        self.cwd().to_string_lossy().into_owned()
    }

    /// `acpx --home <home> --store <backend>`, run in the project directory.
    pub fn cmd(&self) -> Command {
        self.cmd_on(self.backend)
    }

    /// [`Env::cmd`] with another `--store`.
    pub fn cmd_on(&self, backend: &str) -> Command {
        let mut c = Command::new(acpx_bin());
        c.arg("--home")
            .arg(self.home())
            .arg("--store")
            .arg(backend)
            .current_dir(self.project.path())
            .env_remove("ACPX_HOME")
            .env_remove("ACPX_STORE")
            .env_remove("ACPX_MAX_SEGMENT_BYTES")
            .env_remove("ACPX_MAX_SEGMENTS")
            .env_remove("ACPX_KEEP_ROTATED_SEGMENTS")
            .env_remove("ACPX_TURN_END_ROTATE_BYTES")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null());
        for (k, v) in &self.extra_env {
            c.env(k, v);
        }
        c
    }

    pub fn run(&self, args: &[&str]) -> Run {
        Run::from(self.cmd().args(args).output().unwrap())
    }

    /// [`Env::run`] with another `--store`.
    pub fn run_on(&self, backend: &str, args: &[&str]) -> Run {
        Run::from(self.cmd_on(backend).args(args).output().unwrap())
    }

    pub fn run_stdin(&self, args: &[&str], stdin: &str) -> Run {
        use std::io::Write;
        let mut child = self
            .cmd()
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        Run::from(child.wait_with_output().unwrap())
    }

    /// `--agent <test agent> [flags…]`: the agent command line used by runtime tests.
    pub fn agent_cmd(&self, flags: &str) -> String {
        let a = test_agent();
        if flags.is_empty() {
            a
        } else {
            format!("{a} {flags}")
        }
    }

    /// `sessions new --no-owner` with `agent` in the project directory: a stored session with
    /// no process holding it (as after an owner's TTL), which tests then damage, migrate or
    /// prompt. Returns the new record id. (Without `--no-owner`, `sessions new` leaves a warm
    /// owner: tests/authority.rs.)
    pub fn new_session(&self, agent: &str) -> String {
        let created = self
            .run(&[
                "--format",
                "json",
                "--no-owner",
                "--agent",
                agent,
                "sessions",
                "new",
            ])
            .ok()
            .json();
        created["acpxRecordId"]
            .as_str()
            .unwrap_or_else(|| panic!("sessions new gave no acpxRecordId: {created}"))
            .to_owned()
    }

    /// Imports an archive written to a temp file, as it is (`--trust`: a test's own fixture,
    /// stored exactly as written); returns the import's JSON output.
    pub fn import_archive(&self, archive: &str) -> Value {
        let f = self.home().join(format!("import-{}.ndjson", uuid()));
        std::fs::write(&f, archive).unwrap();
        self.run(&[
            "--format",
            "json",
            "sessions",
            "import",
            "--trust",
            f.to_str().unwrap(),
        ])
        .ok()
        .json()
    }
}

pub fn uuid() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// What a hand-made session looks like.
pub struct Seed<'a> {
    pub id: &'a str,
    pub cwd: &'a str,
    pub agent: &'a str,
    pub name: Option<&'a str>,
    pub closed_at: Option<&'a str>,
    pub last_used_at: &'a str,
    /// (user text, agent text) pairs.
    pub turns: Vec<(&'a str, &'a str)>,
    /// Events in the log (session_update chunks).
    pub events: u64,
    /// `acpx.audit_seq` of the snapshot (normally `events`).
    pub audit_seq: u64,
}

impl<'a> Seed<'a> {
    pub fn new(id: &'a str, cwd: &'a str, agent: &'a str) -> Self {
        Seed {
            id,
            cwd,
            agent,
            name: None,
            closed_at: None,
            last_used_at: "2026-01-01T00:00:00.000Z",
            turns: vec![("hello there", "general kenobi")],
            events: 3,
            audit_seq: 3,
        }
    }

    /// The session.json document.
    pub fn document(&self) -> Value {
        let mut messages = Vec::new();
        for (i, (u, a)) in self.turns.iter().enumerate() {
            messages.push(json!({"User": {"id": format!("u{i}"), "content": [{"Text": u}]}}));
            messages.push(json!({"Agent": {"content": [{"Text": a}], "tool_results": {}}}));
        }
        json!({
            "schema": "acpx.session.v1",
            "acpxRecordId": self.id,
            "acpSessionId": format!("acp-{}", self.id),
            "agentCommand": self.agent,
            "cwd": self.cwd,
            "name": self.name,
            "createdAt": "2025-12-31T00:00:00.000Z",
            "lastUsedAt": self.last_used_at,
            "closed": self.closed_at.is_some(),
            "closedAt": self.closed_at,
            "agentCapabilities": {},
            "thread": {"version": "0.3.0", "title": format!("title of {}", self.id), "messages": messages, "updated_at": self.last_used_at},
            "acpx": {"audit_seq": self.audit_seq}
        })
    }

    /// Event `seq` of the log.
    pub fn event(&self, seq: u64) -> Value {
        json!({
            "eventVersion": 1,
            "seq": seq,
            "timestamp": "2026-01-01T00:00:00.000Z",
            "acpxRecordId": self.id,
            "acpSessionId": format!("acp-{}", self.id),
            "requestId": "req-1",
            "stream": "prompt",
            "source": "acp",
            "type": "session_update",
            "payload": {"sessionId": format!("acp-{}", self.id), "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": format!("chunk {seq}")}}}
        })
    }

    /// The importable archive.
    pub fn archive(&self) -> String {
        let mut s = json!({"schema": "acpx.export.v1", "session": self.document()}).to_string();
        s.push('\n');
        for seq in 1..=self.events {
            s.push_str(&self.event(seq).to_string());
            s.push('\n');
        }
        s
    }
}

/// A session as `sessions export` gives it from `store`: the snapshot without the store's own
/// fields (`revision`, `acpx.event_log`), and the log.
pub fn exported(env: &Env, store: &str, id: &str) -> (Value, String) {
    let json = env
        .run(&["--store", store, "sessions", "export", id, "--as", "json"])
        .ok()
        .stdout;
    let mut doc: Value = serde_json::from_str(&json).unwrap();
    doc.as_object_mut().unwrap().remove("revision");
    doc["acpx"].as_object_mut().unwrap().remove("event_log");
    let log = env
        .run(&["--store", store, "sessions", "export", id, "--as", "ndjson"])
        .ok()
        .stdout;
    (doc, log)
}
