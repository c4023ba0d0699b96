//! Shared test harness: a store per backend, the scripted agent, event helpers.
//!
//! The scripted ACP agent is the `acpx-test-agent` binary of the `acpx-test-agent` package, so
//! cargo does not build it for this package's tests: [`agent_bin`] runs `cargo build -p
//! acpx-test-agent --bin acpx-test-agent` for the same target directory and profile once per
//! test process (a no-op when it is up to date) and uses the binary it finds there.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use acpx_model::{
    AgentContent, EventEnvelope, EventQuery, MemoryStore, Message, RecordId, SessionRecord, Store,
    ThreadText,
};
use acpx_runtime::{Observer, Runtime, RuntimeOptions};
use acpx_store_fs::FsStore;
use acpx_store_sqlite::SqliteStore;
use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Memory,
    Fs,
    Sqlite,
}

pub struct Env {
    pub backend: Backend,
    pub dir: tempfile::TempDir,
    pub store: Arc<dyn Store>,
    pub cwd: PathBuf,
    pub state_dir: PathBuf,
}

impl Env {
    pub fn new(backend: Backend) -> Env {
        let dir = tempfile::tempdir().unwrap();
        let cwd = dir.path().join("work");
        std::fs::create_dir_all(&cwd).unwrap();
        std::fs::write(cwd.join("README.md"), "# README\nline two\nline three\n").unwrap();
        let state_dir = dir.path().join("agent-state");
        let store = open_store(backend, dir.path());
        Env {
            backend,
            dir,
            store,
            cwd,
            state_dir,
        }
    }

    /// A fresh store instance over the same data (what another process would see). For the
    /// memory backend, the same store.
    pub fn reopen_store(&self) -> Arc<dyn Store> {
        match self.backend {
            Backend::Memory => self.store.clone(),
            b => open_store(b, self.dir.path()),
        }
    }

    pub fn runtime(&self, options: RuntimeOptions) -> Runtime {
        Runtime::new(self.store.clone(), options)
    }

    pub fn spec(&self, agent: String) -> acpx_runtime::NewSessionSpec {
        acpx_runtime::NewSessionSpec {
            agent_command: agent,
            cwd: self.cwd.clone(),
            name: None,
        }
    }

    /// The test agent, keeping its history in this env's state dir.
    pub fn loading_agent(&self, extra: &str) -> String {
        agent(&format!(
            "--load --state-dir {} {extra}",
            self.state_dir.display()
        ))
    }

    pub async fn events(&self, id: &RecordId) -> Vec<EventEnvelope> {
        events(&*self.reopen_store(), id).await
    }

    pub async fn stored(&self, id: &RecordId) -> SessionRecord {
        self.reopen_store().load(id).await.unwrap()
    }
}

pub fn open_store(backend: Backend, root: &Path) -> Arc<dyn Store> {
    match backend {
        Backend::Memory => Arc::new(MemoryStore::new()),
        Backend::Fs => Arc::new(FsStore::open(root.join("acpx-home")).unwrap()),
        Backend::Sqlite => Arc::new(SqliteStore::open(root.join("acpx.sqlite")).unwrap()),
    }
}

/// The scripted agent's binary, built on first use.
pub fn agent_bin() -> &'static str {
    static AGENT: OnceLock<String> = OnceLock::new();
    AGENT.get_or_init(|| {
        // `<target>/<profile>/deps/<this test>`: the agent lands in `<target>/<profile>/`.
        let exe = std::env::current_exe().expect("the test binary's path");
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("the test binary lives in <target>/<profile>/deps");
        let target_dir = profile_dir.parent().expect("the profile dir has a parent");
        let profile = profile_dir
            .file_name()
            .and_then(|p| p.to_str())
            .unwrap_or("debug");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args([
            "build",
            "-q",
            "-p",
            "acpx-test-agent",
            "--bin",
            "acpx-test-agent",
        ])
        .env("CARGO_TARGET_DIR", target_dir)
        .current_dir(env!("CARGO_MANIFEST_DIR"));
        if profile == "release" {
            cmd.arg("--release");
        }
        let status = cmd.status().expect("run cargo build for acpx-test-agent");
        assert!(status.success(), "building acpx-test-agent failed");
        let agent = profile_dir.join("acpx-test-agent");
        assert!(agent.is_file(), "{} was not built", agent.display());
        agent.display().to_string()
    })
}

pub fn agent(flags: &str) -> String {
    format!("'{}' {flags}", agent_bin())
}

pub async fn events(store: &dyn Store, id: &RecordId) -> Vec<EventEnvelope> {
    store
        .read_events(id, &EventQuery::from_seq(1))
        .await
        .unwrap()
        .events
}

pub fn types(events: &[EventEnvelope]) -> Vec<String> {
    events.iter().map(|e| e.event_type.to_string()).collect()
}

pub fn updates<'a>(events: &'a [EventEnvelope], kind: &str) -> Vec<&'a EventEnvelope> {
    events
        .iter()
        .filter(|e| {
            e.event_type == "session_update" && e.payload["update"]["sessionUpdate"] == kind
        })
        .collect()
}

pub fn lifecycle<'a>(events: &'a [EventEnvelope], phase: &str) -> Vec<&'a EventEnvelope> {
    events
        .iter()
        .filter(|e| e.event_type == "lifecycle_event" && e.payload["phase"] == phase)
        .collect()
}

pub fn client_ops<'a>(events: &'a [EventEnvelope], method: &str) -> Vec<&'a EventEnvelope> {
    events
        .iter()
        .filter(|e| e.event_type == "client_operation" && e.payload["method"] == method)
        .collect()
}

/// The `session/request_permission` operations recorded when the agent asked (status
/// `running`, carrying the request's `toolCall`) and when it was answered (the decision), in
/// that order: `(asked, answered)`.
pub fn permission_ops(events: &[EventEnvelope]) -> (Vec<&EventEnvelope>, Vec<&EventEnvelope>) {
    client_ops(events, "session/request_permission")
        .into_iter()
        .partition(|e| e.payload["status"] == "running")
}

/// The seqs are 1..=n without gaps.
pub fn assert_gap_free(events: &[EventEnvelope]) {
    for (i, e) in events.iter().enumerate() {
        assert_eq!(
            e.seq,
            i as u64 + 1,
            "seq gap at index {i}: {:?}",
            types(events)
        );
    }
}

/// An observer that collects events, and a way to read them.
pub fn collector() -> (Observer, Arc<Mutex<Vec<EventEnvelope>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    (
        Arc::new(move |e: &EventEnvelope| s.lock().unwrap().push(e.clone())),
        seen,
    )
}

/// An observer that forwards events into a channel.
pub fn channel() -> (
    Observer,
    tokio::sync::mpsc::UnboundedReceiver<EventEnvelope>,
) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    (
        Arc::new(move |e: &EventEnvelope| {
            let _ = tx.send(e.clone());
        }),
        rx,
    )
}

pub fn approve_all() -> RuntimeOptions {
    RuntimeOptions {
        permission_mode: acpx_runtime::PermissionMode::ApproveAll,
        ..RuntimeOptions::default()
    }
}

pub fn with_agent_flags(mut o: RuntimeOptions, flags: &str) -> RuntimeOptions {
    o.agent_env
        .push(("ACPX_TEST_AGENT_FLAGS".into(), flags.into()));
    o
}

/// The thread as JSON (easier to assert shapes on).
pub fn thread_json(r: &SessionRecord) -> Value {
    serde_json::to_value(&r.thread).unwrap()
}

/// The texts of the agent's messages, in order, that `pick` takes from their content: a
/// reply's ([`reply_text`]), a reasoning's ([`reasoning_text`]) or both ([`any_text`]).
/// Settled messages (a session that lives on) included, read back.
pub fn agent_texts(
    record: &SessionRecord,
    pick: impl Fn(&AgentContent) -> Option<&ThreadText>,
) -> Vec<ThreadText> {
    let messages = record.thread.messages_from(0).unwrap();
    let agent = messages.iter().filter_map(|m| match m {
        Message::Agent(a) => Some(a.content.iter()),
        _ => None,
    });
    agent.flatten().filter_map(|c| pick(c).cloned()).collect()
}

/// A reply's text, for [`agent_texts`].
pub fn reply_text(c: &AgentContent) -> Option<&ThreadText> {
    match c {
        AgentContent::Text(t) => Some(t),
        _ => None,
    }
}

/// A reasoning's text, for [`agent_texts`].
pub fn reasoning_text(c: &AgentContent) -> Option<&ThreadText> {
    match c {
        AgentContent::Thinking(t) => Some(&t.text),
        _ => None,
    }
}

/// A reply's or a reasoning's text, for [`agent_texts`].
pub fn any_text(c: &AgentContent) -> Option<&ThreadText> {
    reply_text(c).or_else(|| reasoning_text(c))
}

pub const TEST_TIMEOUT: Duration = Duration::from_secs(60);

/// One test per backend, each under a timeout so that a hang fails instead of blocking.
/// (Exported at the test crate's root and re-exported here, so `use common::*` brings it.)
#[macro_export]
macro_rules! backend_tests {
    ($($name:ident => $body:path;)+) => {
        $(
            mod $name {
                use super::*;
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn memory() { run(common::Backend::Memory).await }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn fs() { run(common::Backend::Fs).await }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() { run(common::Backend::Sqlite).await }
                async fn run(b: common::Backend) {
                    // Build (or find) the scripted agent before the clock starts: the first
                    // build can take minutes on a loaded machine and is not the test's time.
                    common::agent_bin();
                    tokio::time::timeout(common::TEST_TIMEOUT, $body(common::Env::new(b)))
                        .await
                        .expect("the test timed out (a hang)");
                }
            }
        )+
    };
}

/// Starts a queue owner for session `id` in this process, on `<env dir>/home`, and waits until
/// it listens; returns the home. Its future is not `Send` (it holds the session across awaits),
/// so it gets its own thread and multi-threaded runtime, as it has its own process in
/// production.
pub async fn start_owner(env: &Env, rt: Runtime, id: &RecordId) -> PathBuf {
    use acpx_owner::protocol::Request;
    use acpx_owner::{client, run_owner, OwnerConfig};
    let home = env.dir.path().join("home");
    let config = OwnerConfig {
        authority: home.clone(),
        home: home.clone(),
        record_id: id.clone(),
        ttl: Some(Duration::from_secs(60)),
        queue_max_depth: 4,
    };
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime for the owner")
            .block_on(run_owner(rt, config))
    });
    for _ in 0..400 {
        if let Ok(Some(_)) = client::send_if_running(&home, id, &Request::Status).await {
            return home;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the owner did not listen");
}

pub use crate::backend_tests;
