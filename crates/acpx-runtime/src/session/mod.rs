//! [`Runtime`] opens sessions; a [`Session`] is one agent process bound to one session record,
//! holding the record's writer lock for as long as it lives.
//!
//! The module is split by concern: `options` (what a runtime and a new session are made of),
//! `attach` (open new / existing: initialize, `session/new`, reattach by resume or load, the
//! fallback), `recover` (roll a snapshot forward, record an unfinished turn as interrupted),
//! `controls` (set mode, set config option, raw agent requests), `prompt` (one turn, run by
//! the `turn` module) and `lifecycle` (the background tasks, shutdown and close).

pub mod additional_dirs;
mod adopt;
mod agent_delete;
mod agent_output;
mod agent_sessions;
mod attach;
pub mod auth;
mod choices;
mod controls;
pub(crate) mod given_up;
mod handover;
pub mod invocation;
mod lifecycle;
mod offered;
pub(crate) mod options;
mod prompt;
mod queue_log;
mod recover;
mod replay_link;
mod retry;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use acpx_model::event::LifecycleEventPayload;
use acpx_model::{
    EventPayload, EventSource, EventStream, RecordId, SessionLock, SessionRecord, Store,
};
use serde_json::{json, Map, Value};

use crate::agent::{AgentProcess, Connection};
use crate::core::{ClientPolicy, SessionCore};
use crate::error::{RuntimeError, RuntimeResult};
use crate::recorder::{EventDraft, Recorder};

pub use crate::turn::{agent_text_after, agent_text_parts_after, CancelHandle, TurnOutcome};
pub use adopt::{AdoptSpec, Adopted};
pub use agent_delete::{advertises_delete, AgentSessionDelete};
pub use agent_sessions::{advertises_list, AgentListQuery, AgentSession, AgentSessionList};
pub use auth::AuthPolicy;
pub use invocation::{effective_mcp_servers, Invocation};
pub use options::{
    Attachment, FailedAttempt, NewSessionSpec, NonInteractivePermissions, Notice, Recovery,
    ResumePolicy, RuntimeOptions, PROTOCOL_VERSION,
};
pub use prompt::TurnOptions;
pub use queue_log::QueueLog;
pub use recover::load_rolled_forward;
pub use retry::TRANSIENT_PROMPT_ERRORS;

/// Opens sessions against a [`Store`].
#[derive(Clone)]
pub struct Runtime {
    store: Arc<dyn Store>,
    options: Arc<RuntimeOptions>,
    /// The owner lease generation every writer lock this runtime takes is fenced by
    /// ([`acpx_model::SessionLock::with_fence`]); a queue owner's runtime has one.
    fence: Option<u64>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("store", &self.store.backend_name())
            .field("options", &self.options)
            .finish()
    }
}

fn lifecycle_payload(phase: &str, extra: Value) -> EventPayload {
    lifecycle_payload_with(phase, None, None, None, extra)
}

fn lifecycle_payload_with(
    phase: &str,
    exit_code: Option<i32>,
    signal: Option<String>,
    reason: Option<String>,
    extra: Value,
) -> EventPayload {
    EventPayload::LifecycleEvent(LifecycleEventPayload {
        phase: phase.into(),
        exit_code,
        signal,
        reason,
        extra: match extra {
            Value::Object(m) => m,
            _ => Map::new(),
        },
    })
}

fn lifecycle_draft(payload: EventPayload) -> EventDraft {
    EventDraft::new(None, EventStream::Lifecycle, EventSource::Runtime, payload)
}

impl Runtime {
    /// A runtime recording into `store`.
    pub fn new(store: Arc<dyn Store>, options: RuntimeOptions) -> Self {
        Runtime {
            store,
            options: Arc::new(options),
            fence: None,
        }
    }

    /// The same runtime, whose writer locks are fenced by the owner lease of `generation`:
    /// once another holder takes the lease over, every append of a session it opened is
    /// refused ([`acpx_model::StoreError::Fenced`]).
    pub fn with_fence(mut self, generation: u64) -> Self {
        self.fence = Some(generation);
        self
    }

    /// The same runtime without a fence (for a session of another lease than this runtime's:
    /// the parent a queue owner forks its session from).
    pub fn without_fence(mut self) -> Self {
        self.fence = None;
        self
    }

    /// The lease generation this runtime's writer locks are fenced by, if any.
    pub fn fence(&self) -> Option<u64> {
        self.fence
    }

    /// Takes the writer lock of `id` (waiting up to the options' lock timeout), fenced by
    /// this runtime's lease generation, if any.
    pub(crate) async fn lock_session(&self, id: &RecordId) -> RuntimeResult<Arc<SessionLock>> {
        let lock = self.store.lock(id, self.options.lock_timeout).await?;
        Ok(Arc::new(match self.fence {
            Some(g) => lock.with_fence(g),
            None => lock,
        }))
    }

    /// The store sessions are recorded in.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The options.
    pub fn options(&self) -> &RuntimeOptions {
        &self.options
    }

    fn policy(&self) -> ClientPolicy {
        ClientPolicy {
            fs: self.options.fs,
            terminal: self.options.terminal,
            permission_mode: self.options.permission_mode,
            prompter: self.options.prompter.clone(),
            non_interactive: self.options.non_interactive,
            elicitation_answers: self.options.elicitation_answers.clone(),
            permission_rules: self.options.permission_rules.clone(),
            recorded_permissions: self.options.recorded_permissions.clone(),
            terminal_output_limit: self.options.terminal_output_limit,
            terminal_output_ceiling: self.options.terminal_output_ceiling,
        }
    }

    fn new_recorder(&self, writer: &Arc<SessionLock>, record: SessionRecord) -> Recorder {
        let mut r = Recorder::new(
            self.store.clone(),
            writer,
            record,
            self.options.durability,
            self.options.snapshot_interval,
        );
        if let Some(o) = &self.options.observer {
            r.add_observer(o.clone());
        }
        r
    }
}

/// One agent process bound to one session record. Holds the record's writer lock until
/// [`Session::shutdown`] or [`Session::close`] (or drop, which kills the agent at once; the
/// next open then rolls the snapshot forward from the log).
pub struct Session {
    core: Arc<SessionCore>,
    store: Arc<dyn Store>,
    options: Arc<RuntimeOptions>,
    id: RecordId,
    /// The writer lock: the only strong reference, so dropping the session releases it (the
    /// recorder appends through a weak one).
    lock: Option<Arc<SessionLock>>,
    agent: AgentProcess,
    conn: Connection,
    init: Value,
    attachment: Attachment,
    recovery: Recovery,
    /// What the user must be told about opening (fallback, choices not restored).
    notices: Vec<Notice>,
    /// The unstable `models` object of the latest session answer (for `session/set_model`).
    models: Option<Value>,
    /// The `modes` object of the latest session answer (which mode ids `set_mode` accepts).
    modes: Option<Value>,
    cancel: CancelHandle,
    shutting_down: Arc<AtomicBool>,
    flusher: tokio::task::JoinHandle<()>,
    exit_logger: Option<tokio::task::JoinHandle<()>>,
    finished: bool,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.id)
            .field("pid", &self.agent.pid)
            .field("attachment", &self.attachment)
            .finish_non_exhaustive()
    }
}

impl Session {
    /// The record id (stable for the life of the record).
    pub fn id(&self) -> &RecordId {
        &self.id
    }

    /// A copy of the current snapshot (it may be newer than what is on disk).
    pub async fn record(&self) -> SessionRecord {
        self.core
            .recorder
            .lock()
            .await
            .as_ref()
            .map(|r| r.snapshot().clone())
            .unwrap_or_else(|| unreachable!("a Session always has its recorder"))
    }

    /// Runs `f` on the current snapshot without copying it: [`Session::record`] copies the
    /// whole thread, megabytes on a long session, which a caller that needs one field should
    /// not pay for (docs/BENCHMARKS.md § Turn size and session size).
    pub async fn with_record<T>(&self, f: impl FnOnce(&SessionRecord) -> T) -> T {
        let guard = self.core.recorder.lock().await;
        let Some(recorder) = guard.as_ref() else {
            unreachable!("a Session always has its recorder")
        };
        f(recorder.snapshot())
    }

    /// The ACP session id in use.
    pub async fn acp_session_id(&self) -> String {
        self.with_record(|r| r.acp_session_id.clone()).await
    }

    /// The session's additional workspace roots (`--add-dir`), canonical, as sent on its
    /// last attach.
    pub fn additional_directories(&self) -> &[std::path::PathBuf] {
        self.core.fs_root.additional()
    }

    /// The agent's `initialize` answer.
    pub fn initialize_response(&self) -> &Value {
        &self.init
    }

    /// How the ACP session was obtained.
    pub fn attachment(&self) -> &Attachment {
        &self.attachment
    }

    /// What the user must be told about opening this session: a fallback to a fresh ACP
    /// session, choices that could not be restored, MCP servers left out.
    pub fn notices(&self) -> &[Notice] {
        &self.notices
    }

    /// What opening repaired (for new sessions: nothing).
    pub fn recovery(&self) -> &Recovery {
        &self.recovery
    }

    /// Whether the ACP session existed before this process (resumed or loaded).
    pub fn resumed(&self) -> bool {
        matches!(self.attachment, Attachment::Reattached { .. })
    }

    /// The agent's process id.
    pub fn pid(&self) -> u32 {
        self.agent.pid
    }

    /// A handle that cancels the turn in progress from another task.
    pub fn cancel_handle(&self) -> CancelHandle {
        self.cancel.clone()
    }

    /// Why the agent counts as stuck (it did not answer a turn within the grace after
    /// `session/cancel`), if it does: [`Session::is_connected`] is then false, so a queue
    /// owner replaces it before the next task.
    pub fn unresponsive(&self) -> Option<String> {
        self.core.unresponsive()
    }

    /// Whether the agent is still there to take requests (its process runs, the
    /// connection is open, recording has not failed and it is not stuck).
    pub fn is_connected(&self) -> bool {
        self.ensure_connected().is_ok()
    }

    fn ensure_connected(&self) -> RuntimeResult<()> {
        if let Some(exit) = self.agent.exit() {
            return Err(RuntimeError::NotConnected {
                id: self.id.clone(),
                detail: format!("the agent process {exit}"),
            });
        }
        if self.conn.has_ended() {
            return Err(RuntimeError::NotConnected {
                id: self.id.clone(),
                detail: "the connection to the agent ended".into(),
            });
        }
        if let Some(f) = self.core.fatal() {
            return Err(RuntimeError::NotConnected {
                id: self.id.clone(),
                detail: f,
            });
        }
        if let Some(why) = self.core.unresponsive() {
            return Err(RuntimeError::NotConnected {
                id: self.id.clone(),
                detail: why,
            });
        }
        Ok(())
    }
}

/// A prompt of one text block.
pub fn text_prompt(text: &str) -> Vec<Value> {
    vec![json!({"type": "text", "text": text})]
}
