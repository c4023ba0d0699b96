//! What the interoperability tests with real third-party agents share: finding a peer the
//! install script (`scripts/install-interop-peer.sh`) put in the repository (failing under
//! `CI=true` when it is missing, skipping with a reason otherwise), the fake model servers of
//! `scripts/peers/` those agents talk to, and reading a session's record back.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use super::{Env, Run};

/// The repository root (where the install script puts `peers/` and `.venv-acp/`).
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Whether `program --version` runs.
pub fn runs(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The peer's command line: `$var` when set, else `installed`. When neither gives one, the
/// test fails under `CI=true` (naming the install script) and is skipped otherwise, with the
/// reason printed.
pub fn require(what: &str, var: &str, installed: Option<String>) -> Option<String> {
    let from_env = std::env::var(var).ok().filter(|c| !c.trim().is_empty());
    match from_env.or(installed) {
        Some(c) => Some(c),
        None if std::env::var("CI").as_deref() == Ok("true") => panic!(
            "the {what} interop peer is missing; run scripts/install-interop-peer.sh (or set \
             {var})"
        ),
        None => {
            eprintln!(
                "SKIPPED: {what} peer not installed; run scripts/install-interop-peer.sh or set \
                 {var} to run this test"
            );
            None
        }
    }
}

/// A fake model server of `scripts/peers/` (Python stdlib only) on 127.0.0.1, stopped when it
/// goes. It logs every request it gets, one JSON line each.
pub struct FakeModel {
    child: Child,
    /// Its base URL, `http://127.0.0.1:<port>/v1`.
    pub url: String,
    log: PathBuf,
}

impl FakeModel {
    /// Starts `scripts/peers/<script>` with its log in `dir`.
    pub fn start(script: &str, dir: &Path) -> FakeModel {
        let log = dir.join(format!("{script}-requests.ndjson"));
        let mut child = Command::new("python3")
            .arg(repo().join("scripts/peers").join(script))
            .args(["--port", "0", "--log"])
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3 runs the fake model");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("piped stdout"))
            .read_line(&mut line)
            .expect("the fake model's first line");
        let port: u16 = line
            .trim()
            .strip_prefix("PORT ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("the fake model did not say its port: {line:?}"));
        FakeModel {
            child,
            url: format!("http://127.0.0.1:{port}/v1"),
            log,
        }
    }

    /// The bodies of the requests the agent sent, in order.
    pub fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).expect("a logged request")["body"].clone())
            .collect()
    }
}

impl Drop for FakeModel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Variables that keep an agent's HTTP on this machine: no proxy, loopback direct.
pub const NO_PROXY: [(&str, &str); 5] = [
    ("HTTP_PROXY", ""),
    ("HTTPS_PROXY", ""),
    ("http_proxy", ""),
    ("https_proxy", ""),
    ("NO_PROXY", "127.0.0.1,localhost"),
];

/// A peer's test environment: acpx's home and project, and the peer's command line.
pub struct Peer {
    pub env: Env,
    pub agent: String,
}

impl Peer {
    /// `acpx --agent <peer> args…`.
    pub fn run(&self, args: &[&str]) -> Run {
        self.env
            .run(&[&["--agent", self.agent.as_str()][..], args].concat())
    }

    /// `sessions new` with a warm queue owner (ended by `sessions close` or its TTL).
    pub fn new_session(&self) -> Value {
        self.run(&["--format", "json", "--ttl", "30", "sessions", "new"])
            .ok()
            .json()
    }

    /// The events of the current session, or of record `id`.
    pub fn events(&self, id: Option<&str>) -> Vec<Value> {
        let mut args = vec!["--format", "json", "sessions", "events"];
        args.extend(id);
        self.run(&args).ok().json_lines()
    }

    /// The stored session document (`sessions export --as json`) of the current session.
    pub fn exported(&self) -> Value {
        let out = self.run(&["sessions", "export", "--as", "json"]).ok();
        serde_json::from_str(&out.stdout).expect("session JSON")
    }

    /// `sessions show` of the current session, or of `id`, as JSON.
    pub fn shown(&self, id: Option<&str>) -> Value {
        let mut args = vec!["--format", "json", "sessions", "show"];
        args.extend(id);
        self.run(&args).ok().json()
    }

    pub fn close(&self, name: Option<&str>) {
        let mut args = vec!["sessions", "close"];
        args.extend(name);
        self.run(&args).ok();
    }
}

/// The lifecycle events of `phase` in `events`.
pub fn lifecycle<'a>(events: &'a [Value], phase: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|e| e["type"] == "lifecycle_event" && e["payload"]["phase"] == phase)
        .collect()
}

/// The text of the agent's message chunks in `events`, from the last `prompt_started` on.
pub fn last_reply(events: &[Value]) -> String {
    let start = events
        .iter()
        .rposition(|e| e["type"] == "prompt_started")
        .expect("a prompt_started");
    events[start..]
        .iter()
        .filter(|e| e["payload"]["update"]["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|e| e["payload"]["update"]["content"]["text"].as_str())
        .collect()
}

/// The last `prompt_done` event's payload.
pub fn last_done(events: &[Value]) -> Value {
    events
        .iter()
        .rfind(|e| e["type"] == "prompt_done")
        .map(|e| e["payload"].clone())
        .expect("a prompt_done")
}

/// Asserts that a run's stdout contains `text`, showing both streams when it does not.
pub fn says(r: &Run, text: &str) {
    assert!(
        r.stdout.contains(text),
        "{text:?} not in stdout:\n{}\nstderr:\n{}",
        r.stdout,
        r.stderr
    );
}
