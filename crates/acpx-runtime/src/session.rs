//! [`Runtime`] opens sessions; a [`Session`] is one agent process bound to one session record,
//! holding the record's writer lock for as long as it lives.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use acpx_model::event::{
    AcpErrorObject, ControlDonePayload, ControlErrorDetail, ControlErrorPayload,
    ControlStartedPayload, LifecycleEventPayload, PromptDonePayload, PromptErrorPayload,
    PromptStartedPayload,
};
use acpx_model::{
    AgentContent, Durability, EventLogState, EventPayload, EventQuery, EventSource, EventStream,
    MemoryStore, Message, NewSession, PermissionStats, ReadMode, RecordId, SessionLock,
    SessionRecord, Store, Timestamp, TokenUsage, TurnError, TurnState,
};
use serde_json::{json, Map, Value};
use tokio::sync::watch;

use crate::agent::{self, AgentExit, AgentProcess, CallError, Connection, WireObserver};
use crate::client_ops::{
    FsRoot, PermissionMode, PermissionPrompter, DEFAULT_TERMINAL_OUTPUT_CEILING,
    DEFAULT_TERMINAL_OUTPUT_LIMIT,
};
use crate::core::{client_builder, new_request_id, ClientPolicy, Phase, SessionCore};
use crate::error::{AcpError, RuntimeError, RuntimeResult};
use crate::mapping::{self, lifecycle, RollForward, DESIRED_CONFIG_KEY, DESIRED_MODE_KEY};
use crate::recorder::{EventDraft, Observer, Recorder, DEFAULT_SNAPSHOT_INTERVAL};

/// The protocol version acpx speaks.
pub const PROTOCOL_VERSION: u64 = 1;

/// How a [`Runtime`] drives agents and records sessions.
#[derive(Clone)]
pub struct RuntimeOptions {
    /// How permission requests, writes and terminals are decided.
    pub permission_mode: PermissionMode,
    /// Who to ask under [`PermissionMode::ApproveReads`]; without one, such requests are
    /// denied.
    pub prompter: Option<Arc<dyn PermissionPrompter>>,
    /// How far each event-log append is pushed to disk. [`Durability::Flush`] (the default)
    /// is what makes a `kill -9` lose nothing that was recorded.
    pub durability: Durability,
    /// At most how often `session.json` is rewritten while events stream.
    pub snapshot_interval: Duration,
    /// How long to wait for another process holding the session's writer lock.
    pub lock_timeout: Duration,
    /// How long setup and control requests (initialize, new/load/resume, set_mode, …) may take.
    pub request_timeout: Duration,
    /// A prompt turn still running after this long is cancelled and recorded as `timeout`.
    pub prompt_timeout: Option<Duration>,
    /// After `session/cancel`, how long to wait for the agent's answer before giving up.
    pub cancel_grace: Duration,
    /// Advertise and serve `fs/read_text_file` and `fs/write_text_file`.
    pub fs: bool,
    /// Advertise and serve `terminal/*`.
    pub terminal: bool,
    /// Output kept per terminal when the agent sets no `outputByteLimit`.
    pub terminal_output_limit: usize,
    /// The most output kept per terminal.
    pub terminal_output_ceiling: usize,
    /// Extra environment for agent processes.
    pub agent_env: Vec<(String, String)>,
    /// Sees every recorded event of every session.
    pub observer: Option<Observer>,
    /// Sees every raw JSON-RPC line (and the agent's stderr lines).
    pub wire_observer: Option<WireObserver>,
}

impl Default for RuntimeOptions {
    fn default() -> Self {
        RuntimeOptions {
            permission_mode: PermissionMode::default(),
            prompter: None,
            durability: Durability::Flush,
            snapshot_interval: DEFAULT_SNAPSHOT_INTERVAL,
            lock_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(120),
            prompt_timeout: None,
            cancel_grace: Duration::from_secs(10),
            fs: true,
            terminal: true,
            terminal_output_limit: DEFAULT_TERMINAL_OUTPUT_LIMIT,
            terminal_output_ceiling: DEFAULT_TERMINAL_OUTPUT_CEILING,
            agent_env: Vec::new(),
            observer: None,
            wire_observer: None,
        }
    }
}

impl std::fmt::Debug for RuntimeOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeOptions")
            .field("permission_mode", &self.permission_mode)
            .field("prompter", &self.prompter.is_some())
            .field("durability", &self.durability)
            .field("snapshot_interval", &self.snapshot_interval)
            .field("prompt_timeout", &self.prompt_timeout)
            .field("fs", &self.fs)
            .field("terminal", &self.terminal)
            .finish_non_exhaustive()
    }
}

/// What a new session is made from.
#[derive(Debug, Clone)]
pub struct NewSessionSpec {
    /// The agent command line (shell-like words; leading `NAME=value` words set environment).
    pub agent_command: String,
    /// The session's working directory: absolute and existing.
    pub cwd: PathBuf,
    /// An optional name.
    pub name: Option<String>,
}

/// How a session got its ACP session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attachment {
    /// `session/new` for a new record.
    Created,
    /// `session/resume` or `session/load` of the record's ACP session.
    Reattached {
        /// `session/resume` or `session/load`.
        method: String,
        /// History updates the agent replayed during the load (counted, not recorded).
        replayed_updates: u64,
    },
    /// Load/resume was impossible, so a fresh ACP session replaced the old one.
    Fallback {
        /// `not_found`, `unsupported` or `failed_without_history`.
        reason: String,
        /// The ACP session id that could not be restored.
        previous_acp_session_id: String,
    },
}

/// What opening an existing record found and repaired.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Logged events folded into a snapshot that was saved before them.
    pub rolled_forward: RollForward,
    /// The request id of a turn that never ended, now recorded as interrupted.
    pub interrupted_turn: Option<String>,
    /// The pid of an agent an earlier acpx process left behind.
    pub stale_agent_pid: Option<u32>,
    /// Seqs the snapshot had folded in that the log does not have (`from..=to`).
    pub log_gap: Option<(u64, u64)>,
    /// Damaged log lines skipped while rolling forward.
    pub damaged_lines: usize,
}

/// The result of one prompt turn.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnOutcome {
    /// The turn's `requestId` in the event log.
    pub request_id: String,
    /// The id of the `User` message this turn added.
    pub user_message_id: String,
    /// `completed`, `cancelled`, `failed` or `timeout`.
    pub outcome: TurnState,
    /// The agent's `stopReason`, when it answered.
    pub stop_reason: Option<String>,
    /// Why the turn did not complete (`code`, `detailCode`, `message`, `retryable`).
    pub error: Option<TurnError>,
    /// The JSON-RPC error the agent answered with, if any.
    pub acp_error: Option<AcpError>,
    /// Permission requests of the turn and how they were decided.
    pub permission_stats: PermissionStats,
    /// Token usage from the prompt response, when the agent reported it.
    pub usage: Option<TokenUsage>,
    /// The agent's text of this turn (all Agent messages after the user message).
    pub agent_text: String,
    /// Set when the event log could not be written during the turn.
    pub log_write_error: Option<String>,
}

/// Cancels the turn in progress, from any task.
#[derive(Clone, Debug)]
pub struct CancelHandle {
    running: Arc<AtomicBool>,
    tx: Arc<watch::Sender<bool>>,
}

impl CancelHandle {
    fn new() -> Self {
        let (tx, _) = watch::channel(false);
        CancelHandle {
            running: Arc::new(AtomicBool::new(false)),
            tx: Arc::new(tx),
        }
    }

    /// Asks the agent to stop the turn in progress (`session/cancel`). Returns `false` when no
    /// turn is running (a no-op).
    pub fn cancel(&self) -> bool {
        if self.running.load(Ordering::SeqCst) {
            self.tx.send_replace(true);
            true
        } else {
            false
        }
    }

    /// Whether a turn is running.
    pub fn is_running(&self) -> bool {
        self.running.load(Ordering::SeqCst)
    }
}

/// Opens sessions against a [`Store`].
#[derive(Clone)]
pub struct Runtime {
    store: Arc<dyn Store>,
    options: Arc<RuntimeOptions>,
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

/// Reads `_meta.agentSessionId` of a response: a non-empty string, or nothing (seed 004).
fn agent_session_id(response: &Value) -> Option<String> {
    response
        .get("_meta")
        .and_then(|m| m.get("agentSessionId"))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

/// The parts of a new/load/resume response the record keeps.
fn session_facts(response: &Value) -> Map<String, Value> {
    let mut m = Map::new();
    if let Some(id) = agent_session_id(response) {
        m.insert("agentSessionId".into(), json!(id));
    }
    if let Some(modes) = response.get("modes").filter(|v| v.is_object()) {
        m.insert("modes".into(), modes.clone());
    }
    if let Some(opts) = response.get("configOptions").filter(|v| v.is_array()) {
        m.insert("configOptions".into(), opts.clone());
    }
    m
}

impl Runtime {
    /// A runtime recording into `store`.
    pub fn new(store: Arc<dyn Store>, options: RuntimeOptions) -> Self {
        Runtime {
            store,
            options: Arc::new(options),
        }
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
            terminal_output_limit: self.options.terminal_output_limit,
            terminal_output_ceiling: self.options.terminal_output_ceiling,
        }
    }

    fn new_recorder(&self, record: SessionRecord) -> Recorder {
        let mut r = Recorder::new(
            self.store.clone(),
            record,
            self.options.durability,
            self.options.snapshot_interval,
        );
        if let Some(o) = &self.options.observer {
            r.add_observer(o.clone());
        }
        r
    }

    /// Starts the agent, creates an ACP session in `spec.cwd` and a new session record.
    pub async fn open_new(&self, spec: NewSessionSpec) -> RuntimeResult<Session> {
        let cwd = check_cwd(&spec.cwd)?;
        let core = Arc::new(SessionCore::new(cwd.clone(), fs_root(&cwd)?, self.policy()));
        let (agent, conn) = self.start_agent(&spec.agent_command, &cwd, &core).await?;
        let mut setup = Setup {
            runtime: self,
            core: &core,
            agent: &agent,
            conn: &conn,
        };
        let init = setup.initialize().await?;
        let response = setup.new_session(&cwd).await?;
        let acp_session_id = response
            .get("sessionId")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| RuntimeError::Protocol {
                method: "session/new".into(),
                detail: format!("no sessionId in {response}"),
            })?
            .to_owned();
        let mut record = SessionRecord::new(
            NewSession {
                acpx_record_id: RecordId::generate(),
                acp_session_id: acp_session_id.clone(),
                agent_session_id: None,
                agent_command: spec.agent_command.clone(),
                cwd: cwd.display().to_string(),
                name: spec.name.clone(),
            },
            Timestamp::now(),
        );
        self.store.create(&mut record).await?;
        let id = record.acpx_record_id.clone();
        let lock = self.store.lock(&id, self.options.lock_timeout).await?;
        *core.recorder.lock().await = Some(self.new_recorder(record));
        setup.record_started(&init).await?;
        let mut facts = session_facts(&response);
        facts.insert("acpSessionId".into(), json!(acp_session_id));
        core.try_record(lifecycle_draft(lifecycle_payload(
            lifecycle::SESSION_CREATED,
            Value::Object(facts),
        )))
        .await?;
        core.go_live().await?;
        Ok(Session::assemble(
            self,
            core,
            id,
            lock,
            agent,
            conn,
            init,
            Attachment::Created,
            Recovery::default(),
        ))
    }

    /// Reopens a stored session: rolls its snapshot forward, records an unfinished turn as
    /// interrupted, starts its agent and reattaches (`session/resume`, else `session/load`,
    /// else — when the agent lost the session or cannot restore it — a fresh `session/new`
    /// under the same record id).
    pub async fn open_existing(&self, id: &RecordId) -> RuntimeResult<Session> {
        let lock = self.store.lock(id, self.options.lock_timeout).await?;
        let (recorder, recovery) = self.recover_locked(id).await?;
        let record = recorder.snapshot().clone();
        if record.closed {
            return Err(RuntimeError::InvalidInput(format!(
                "session {id} is closed; start a new session instead"
            )));
        }
        let cwd = check_cwd(Path::new(&record.cwd))?;
        let core = Arc::new(SessionCore::new(cwd.clone(), fs_root(&cwd)?, self.policy()));
        *core.recorder.lock().await = Some(recorder);
        let (agent, conn) = self.start_agent(&record.agent_command, &cwd, &core).await?;
        let mut setup = Setup {
            runtime: self,
            core: &core,
            agent: &agent,
            conn: &conn,
        };
        let reattached = async {
            let init = setup.initialize().await?;
            setup.record_started(&init).await?;
            let attachment = setup.reattach(&record, &init).await?;
            Ok::<_, RuntimeError>((init, attachment))
        }
        .await;
        let (init, attachment) = match reattached {
            Ok(v) => v,
            Err(e) => {
                // Leave the record consistent: the agent is stopped and its exit recorded.
                let mut conn = conn;
                conn.shutdown().await;
                let (exit, _) = agent.stop().await;
                record_exit(&core, exit, "acpx_shutdown", None).await;
                if let Some(r) = core.recorder.lock().await.as_mut() {
                    let _ = r.save_if_dirty().await;
                }
                drop(lock);
                return Err(e);
            }
        };
        core.go_live().await?;
        Ok(Session::assemble(
            self,
            core,
            id.clone(),
            lock,
            agent,
            conn,
            init,
            attachment,
            recovery,
        ))
    }

    /// Brings a stored session up to date without starting its agent: rolls the snapshot
    /// forward from the log, records an unfinished turn as interrupted, and saves. Takes the
    /// writer lock for the duration (fails with `Locked` while another process uses it).
    pub async fn recover(&self, id: &RecordId) -> RuntimeResult<(SessionRecord, Recovery)> {
        let _lock = self.store.lock(id, self.options.lock_timeout).await?;
        let (mut recorder, recovery) = self.recover_locked(id).await?;
        recorder.save_if_dirty().await?;
        Ok((recorder.snapshot().clone(), recovery))
    }

    async fn recover_locked(&self, id: &RecordId) -> RuntimeResult<(Recorder, Recovery)> {
        let (mut record, rolled, damaged, state) = load_rolled_forward(&*self.store, id).await?;
        let mut recovery = Recovery {
            rolled_forward: rolled,
            damaged_lines: damaged,
            ..Recovery::default()
        };
        if state.last_seq < record.acpx.audit_seq {
            recovery.log_gap = Some((state.last_seq + 1, record.acpx.audit_seq));
            record.acpx.audit_seq = state.last_seq;
        }
        let rolled_any = recovery.rolled_forward.applied > 0;
        record.acpx.event_log = state;
        let mut recorder = self.new_recorder(record);
        if let Some((from, to)) = recovery.log_gap {
            recorder
                .record(lifecycle_draft(lifecycle_payload(
                    lifecycle::LOG_GAP,
                    json!({"fromSeq": from, "toSeq": to,
                           "reason": "the snapshot folded in events that never reached the log (an append failed or was lost in a crash); seq numbering continues from the log"}),
                )))
                .await?;
        }
        if let Some(pid) = recorder.snapshot().pid {
            recovery.stale_agent_pid = Some(pid);
            recorder
                .record(lifecycle_draft(lifecycle_payload_with(
                    lifecycle::STALE_AGENT,
                    None,
                    None,
                    Some("acpx_exited".into()),
                    json!({"pid": pid}),
                )))
                .await?;
        }
        if mapping::turn_is_running(recorder.snapshot()) {
            let request_id = recorder
                .snapshot()
                .acpx
                .last_turn
                .as_ref()
                .map(|t| t.request_id.clone())
                .unwrap_or_default();
            let mut extra = Map::new();
            extra.insert("outcome".into(), json!("interrupted"));
            recorder
                .record(EventDraft::new(
                    Some(&request_id),
                    EventStream::Prompt,
                    EventSource::Runtime,
                    EventPayload::PromptError(PromptErrorPayload {
                        code: "RUNTIME".into(),
                        detail_code: Some("TURN_INTERRUPTED".into()),
                        message: "acpx stopped before this turn finished (the process was killed or crashed); everything that reached the event log was kept".into(),
                        retryable: true,
                        acp: None,
                        extra,
                    }),
                ))
                .await?;
            recovery.interrupted_turn = Some(request_id);
        }
        if rolled_any {
            // A fresh recorder is not dirty: the rolled-forward snapshot must be saved
            // explicitly, or `recover` alone would leave the stale snapshot on disk.
            recorder.save().await?;
        }
        Ok((recorder, recovery))
    }

    async fn start_agent(
        &self,
        command: &str,
        cwd: &Path,
        core: &Arc<SessionCore>,
    ) -> RuntimeResult<(AgentProcess, Connection)> {
        let (agent, transport) = agent::spawn(
            command,
            cwd,
            &self.options.agent_env,
            self.options.wire_observer.clone(),
        )?;
        let conn = Connection::start(client_builder(core.clone()), transport).await?;
        Ok((agent, conn))
    }

    /// Runs one prompt against a fresh agent without storing anything on disk (the session
    /// lives in a [`MemoryStore`] and is returned for inspection).
    pub async fn exec(
        spec: NewSessionSpec,
        prompt: Vec<Value>,
        options: RuntimeOptions,
    ) -> RuntimeResult<(TurnOutcome, SessionRecord)> {
        let runtime = Runtime::new(Arc::new(MemoryStore::new()), options);
        let mut session = runtime.open_new(spec).await?;
        let outcome = session.prompt(prompt).await;
        let record = session.shutdown().await?;
        Ok((outcome?, record))
    }
}

fn check_cwd(cwd: &Path) -> RuntimeResult<PathBuf> {
    if !cwd.is_absolute() {
        return Err(RuntimeError::InvalidInput(format!(
            "the session directory {} is not an absolute path",
            cwd.display()
        )));
    }
    if !cwd.is_dir() {
        return Err(RuntimeError::InvalidInput(format!(
            "the session directory {} does not exist (or is not a directory)",
            cwd.display()
        )));
    }
    Ok(cwd.to_path_buf())
}

fn fs_root(cwd: &Path) -> RuntimeResult<FsRoot> {
    FsRoot::new(cwd)
        .map_err(|e| RuntimeError::InvalidInput(format!("cannot resolve {}: {e}", cwd.display())))
}

/// Loads a snapshot and folds in the logged events it has not seen. Returns the record, the
/// roll-forward report, how many damaged lines were skipped, and the log's state.
pub async fn load_rolled_forward(
    store: &dyn Store,
    id: &RecordId,
) -> RuntimeResult<(SessionRecord, RollForward, usize, EventLogState)> {
    let mut record = store.load(id).await?;
    let mut report = RollForward::default();
    let mut damaged = 0;
    let mut from = record.acpx.audit_seq + 1;
    loop {
        let page = store
            .read_events(
                id,
                &EventQuery {
                    from_seq: from,
                    limit: Some(5000),
                    mode: ReadMode::Lenient,
                    ..EventQuery::default()
                },
            )
            .await?;
        damaged += page.damaged.len();
        let r = mapping::roll_forward(&mut record, &page.events);
        report.applied += r.applied;
        report.already_applied += r.already_applied;
        if r.last_seq.is_some() {
            report.last_seq = r.last_seq;
        }
        match page.next_seq {
            Some(n) if n > from => from = n,
            _ => break,
        }
    }
    let state = store.event_log_state(id).await?;
    Ok((record, report, damaged, state))
}

/// The requests that set a session up, raced against the agent's exit and a timeout.
struct Setup<'a> {
    runtime: &'a Runtime,
    core: &'a Arc<SessionCore>,
    agent: &'a AgentProcess,
    conn: &'a Connection,
}

impl Setup<'_> {
    async fn call(
        &self,
        method: &str,
        params: Value,
        on_result: impl FnOnce(&Result<Value, agent_client_protocol::Error>) + Send + 'static,
    ) -> RuntimeResult<Value> {
        let pending = self.conn.call(method, params, on_result);
        call_with_deadline(
            self.agent,
            pending,
            method,
            self.runtime.options.request_timeout,
        )
        .await
    }

    async fn initialize(&mut self) -> RuntimeResult<Value> {
        let opts = &self.runtime.options;
        self.call(
            "initialize",
            json!({
                "protocolVersion": PROTOCOL_VERSION,
                "clientCapabilities": {
                    "fs": {"readTextFile": opts.fs, "writeTextFile": opts.fs},
                    "terminal": opts.terminal,
                },
                "clientInfo": {"name": "acpx", "version": env!("CARGO_PKG_VERSION")},
            }),
            |_| {},
        )
        .await
    }

    async fn record_started(&self, init: &Value) -> RuntimeResult<()> {
        self.core
            .try_record(lifecycle_draft(lifecycle_payload(
                lifecycle::AGENT_STARTED,
                json!({"pid": self.agent.pid, "command": self.agent.command,
                       "startedAt": self.agent.started_at}),
            )))
            .await?;
        self.core
            .try_record(lifecycle_draft(lifecycle_payload(
                lifecycle::INITIALIZED,
                json!({
                    "protocolVersion": init.get("protocolVersion").cloned().unwrap_or(Value::Null),
                    "agentCapabilities": init.get("agentCapabilities").cloned().unwrap_or(json!({})),
                    "agentInfo": init.get("agentInfo").cloned().unwrap_or(Value::Null),
                }),
            )))
            .await?;
        Ok(())
    }

    async fn new_session(&self, cwd: &Path) -> RuntimeResult<Value> {
        self.call("session/new", json!({"cwd": cwd, "mcpServers": []}), |_| {})
            .await
    }

    async fn reattach(&self, record: &SessionRecord, init: &Value) -> RuntimeResult<Attachment> {
        let caps = init.get("agentCapabilities").cloned().unwrap_or(json!({}));
        let can_resume = caps
            .get("sessionCapabilities")
            .and_then(|s| s.get("resume"))
            .is_some_and(Value::is_object);
        let can_load = caps.get("loadSession").and_then(Value::as_bool) == Some(true);
        let old = record.acp_session_id.clone();
        let params = json!({"sessionId": old, "cwd": record.cwd, "mcpServers": []});
        let (method, failure) = if can_resume {
            match self.call("session/resume", params, |_| {}).await {
                Ok(resp) => return self.attached("session/resume", &old, &resp, 0).await,
                Err(e) => ("session/resume", e),
            }
        } else if can_load {
            self.core.set_phase(Phase::Replaying(0));
            let core = self.core.clone();
            let replayed = Arc::new(std::sync::Mutex::new(0u64));
            let replayed_out = replayed.clone();
            // On the dispatch loop, atomically with the answer: what follows is live again.
            let switch = move |_: &Result<Value, agent_client_protocol::Error>| {
                if let Phase::Replaying(n) = core.set_phase(Phase::Buffering(Vec::new())) {
                    *replayed_out.lock().unwrap_or_else(|p| p.into_inner()) = n;
                }
            };
            let result = self.call("session/load", params, switch).await;
            // If the answer never came, the switch did not run.
            if let Phase::Replaying(n) = self.core.set_phase(Phase::Buffering(Vec::new())) {
                *replayed.lock().unwrap_or_else(|p| p.into_inner()) = n;
            }
            let n = *replayed.lock().unwrap_or_else(|p| p.into_inner());
            match result {
                Ok(resp) => return self.attached("session/load", &old, &resp, n).await,
                Err(e) => ("session/load", e),
            }
        } else {
            (
                "",
                RuntimeError::InvalidInput(
                    "the agent supports neither session/resume nor session/load".into(),
                ),
            )
        };
        let (reason, error) = match &failure {
            RuntimeError::InvalidInput(_) => ("unsupported", None),
            RuntimeError::Agent { error, .. } if error.is_not_found() => {
                ("not_found", Some(error.as_ref().clone()))
            }
            RuntimeError::Agent { error, .. } if error.is_unsupported() => {
                ("unsupported", Some(error.as_ref().clone()))
            }
            RuntimeError::Agent { error, .. }
                if error.code == -32603 && !has_agent_messages(record) =>
            {
                ("failed_without_history", Some(error.as_ref().clone()))
            }
            _ => return Err(failure),
        };
        self.fallback(record, method, reason, error).await
    }

    async fn attached(
        &self,
        method: &str,
        acp_session_id: &str,
        response: &Value,
        replayed: u64,
    ) -> RuntimeResult<Attachment> {
        let mut facts = session_facts(response);
        facts.insert("method".into(), json!(method));
        facts.insert("acpSessionId".into(), json!(acp_session_id));
        facts.insert("replayedUpdates".into(), json!(replayed));
        self.core
            .try_record(lifecycle_draft(lifecycle_payload(
                lifecycle::SESSION_ATTACHED,
                Value::Object(facts),
            )))
            .await?;
        Ok(Attachment::Reattached {
            method: method.to_owned(),
            replayed_updates: replayed,
        })
    }

    async fn fallback(
        &self,
        record: &SessionRecord,
        method: &str,
        reason: &str,
        error: Option<AcpError>,
    ) -> RuntimeResult<Attachment> {
        let saved_mode = record
            .acpx
            .extra
            .get(DESIRED_MODE_KEY)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| record.acpx.current_mode_id.clone());
        let saved_config: Vec<(String, Value)> = record
            .acpx
            .extra
            .get(DESIRED_CONFIG_KEY)
            .and_then(Value::as_object)
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default();
        let response = self.new_session(Path::new(&record.cwd)).await?;
        let new_id = response
            .get("sessionId")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| RuntimeError::Protocol {
                method: "session/new".into(),
                detail: format!("no sessionId in {response}"),
            })?
            .to_owned();
        let mut facts = session_facts(&response);
        facts.insert("acpSessionId".into(), json!(new_id));
        facts.insert("previousAcpSessionId".into(), json!(record.acp_session_id));
        if !method.is_empty() {
            facts.insert("failedMethod".into(), json!(method));
        }
        if let Some(e) = &error {
            facts.insert("error".into(), e.to_json());
        }
        self.core
            .try_record(lifecycle_draft(lifecycle_payload_with(
                lifecycle::SESSION_FALLBACK,
                None,
                None,
                Some(reason.to_owned()),
                Value::Object(facts),
            )))
            .await?;
        let current_mode = response
            .get("modes")
            .and_then(|m| m.get("currentModeId"))
            .and_then(Value::as_str);
        let controls = Controls {
            core: self.core,
            conn: self.conn,
            agent: self.agent,
            timeout: self.runtime.options.request_timeout,
            acp_session_id: &new_id,
        };
        if let Some(mode) = saved_mode.filter(|m| Some(m.as_str()) != current_mode) {
            if let Err(e) = controls.set_mode(&mode).await {
                tracing::warn!("could not re-apply mode {mode} after the fallback: {e}");
            }
        }
        for (id, value) in saved_config {
            if let Err(e) = controls.set_config_option(&id, value).await {
                tracing::warn!("could not re-apply config option {id} after the fallback: {e}");
            }
        }
        Ok(Attachment::Fallback {
            reason: reason.to_owned(),
            previous_acp_session_id: record.acp_session_id.clone(),
        })
    }
}

fn has_agent_messages(record: &SessionRecord) -> bool {
    record
        .thread
        .messages
        .iter()
        .any(|m| matches!(m, Message::Agent(_)))
}

/// Waits for a request's answer, the agent's exit, or the deadline.
async fn call_with_deadline(
    agent: &AgentProcess,
    pending: agent::Pending,
    method: &str,
    timeout: Duration,
) -> RuntimeResult<Value> {
    let mut pending = pending;
    tokio::select! {
        r = &mut pending => match r.unwrap_or_else(|_| Err(CallError::Disconnected("the connection ended".into()))) {
            Ok(v) => Ok(v),
            Err(CallError::Disconnected(_)) => {
                // The exit status usually follows the closed output by a moment.
                let exit = tokio::time::timeout(Duration::from_secs(1), agent.wait()).await.ok().flatten();
                Err(RuntimeError::Disconnected {
                    method: method.to_owned(),
                    detail: exit_detail(exit.as_ref(), agent).await,
                })
            }
            Err(e) => Err(e.into_runtime(method)),
        },
        exit = agent.wait() => {
            // The answer may still be in flight: give it a moment.
            match tokio::time::timeout(Duration::from_millis(500), &mut pending).await {
                Ok(Ok(Ok(v))) => return Ok(v),
                Ok(Ok(Err(e @ CallError::Rpc(_)))) => return Err(e.into_runtime(method)),
                _ => {}
            }
            Err(RuntimeError::Disconnected {
                method: method.to_owned(),
                detail: exit_detail(exit.as_ref(), agent).await,
            })
        }
        _ = tokio::time::sleep(timeout) => Err(RuntimeError::Timeout {
            method: method.to_owned(),
            seconds: timeout.as_secs(),
        }),
    }
}

async fn exit_detail(exit: Option<&AgentExit>, agent: &AgentProcess) -> String {
    let mut s = match exit {
        Some(e) => format!("the agent process {e}"),
        None => "the agent closed its output".to_owned(),
    };
    let tail = agent.final_stderr_tail(Duration::from_millis(500)).await;
    if !tail.is_empty() {
        let last: Vec<&str> = tail.lines().rev().take(5).collect();
        let last: Vec<&str> = last.into_iter().rev().collect();
        s.push_str(&format!("; its stderr ends with: {}", last.join(" | ")));
    }
    s
}

async fn record_exit(
    core: &SessionCore,
    exit: Option<AgentExit>,
    reason: &str,
    stderr: Option<String>,
) {
    let mut extra = Map::new();
    if let Some(e) = &exit {
        extra.insert("exitedAt".into(), json!(e.at));
    }
    if let Some(s) = stderr.filter(|s| !s.is_empty()) {
        extra.insert("stderrTail".into(), json!(s));
    }
    core.record(lifecycle_draft(lifecycle_payload_with(
        lifecycle::AGENT_EXIT,
        exit.as_ref().and_then(|e| e.code),
        exit.as_ref().and_then(|e| e.signal.clone()),
        Some(reason.to_owned()),
        Value::Object(extra),
    )))
    .await;
}

/// set_mode / set_config_option, with their control events.
struct Controls<'a> {
    core: &'a Arc<SessionCore>,
    conn: &'a Connection,
    agent: &'a AgentProcess,
    timeout: Duration,
    acp_session_id: &'a str,
}

impl Controls<'_> {
    async fn run(
        &self,
        action: &str,
        method: &str,
        input: Value,
        params: Value,
    ) -> RuntimeResult<Value> {
        let ctl = new_request_id("ctl");
        let draft = |payload| {
            EventDraft::new(
                Some(&ctl),
                EventStream::Control,
                EventSource::Runtime,
                payload,
            )
        };
        self.core
            .try_record(draft(EventPayload::ControlStarted(ControlStartedPayload {
                action: action.to_owned(),
                input: input.clone(),
                extra: Map::new(),
            })))
            .await?;
        let pending = self.conn.call(method, params, |_| {});
        match call_with_deadline(self.agent, pending, method, self.timeout).await {
            Ok(result) => {
                let mut extra = Map::new();
                extra.insert("input".into(), input);
                self.core
                    .try_record(draft(EventPayload::ControlDone(ControlDonePayload {
                        action: action.to_owned(),
                        ok: true,
                        result: result.clone(),
                        extra,
                    })))
                    .await?;
                Ok(result)
            }
            Err(e) => {
                let (detail_code, acp) = match &e {
                    RuntimeError::Agent { error, .. } => ("ACP_ERROR", Some(error.to_json())),
                    RuntimeError::Timeout { .. } => ("TIMEOUT", None),
                    _ => ("AGENT_DISCONNECTED", None),
                };
                let mut detail_extra = Map::new();
                if let Some(a) = acp {
                    detail_extra.insert("acp".into(), a);
                }
                let mut extra = Map::new();
                extra.insert("input".into(), input);
                self.core
                    .try_record(draft(EventPayload::ControlError(ControlErrorPayload {
                        action: action.to_owned(),
                        ok: false,
                        error: ControlErrorDetail {
                            code: "RUNTIME".into(),
                            detail_code: Some(detail_code.into()),
                            message: e.to_string(),
                            extra: detail_extra,
                        },
                        extra,
                    })))
                    .await?;
                Err(e)
            }
        }
    }

    async fn set_mode(&self, mode_id: &str) -> RuntimeResult<()> {
        self.run(
            "set_mode",
            "session/set_mode",
            json!({"modeId": mode_id}),
            json!({"sessionId": self.acp_session_id, "modeId": mode_id}),
        )
        .await
        .map(|_| ())
    }

    async fn set_config_option(&self, config_id: &str, value: Value) -> RuntimeResult<Vec<Value>> {
        let mut params =
            json!({"sessionId": self.acp_session_id, "configId": config_id, "value": value});
        if value.is_boolean() {
            params["type"] = json!("boolean");
        }
        let result = self
            .run(
                "set_config_option",
                "session/set_config_option",
                json!({"configId": config_id, "value": value}),
                params,
            )
            .await?;
        Ok(result
            .get("configOptions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default())
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
    lock: Option<SessionLock>,
    agent: AgentProcess,
    conn: Connection,
    init: Value,
    attachment: Attachment,
    recovery: Recovery,
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
    #[allow(clippy::too_many_arguments)]
    fn assemble(
        runtime: &Runtime,
        core: Arc<SessionCore>,
        id: RecordId,
        lock: SessionLock,
        agent: AgentProcess,
        conn: Connection,
        init: Value,
        attachment: Attachment,
        recovery: Recovery,
    ) -> Session {
        let interval = runtime.options.snapshot_interval;
        let flusher = {
            let notify = core.dirty_notify.clone();
            let weak = Arc::downgrade(&core);
            tokio::spawn(async move {
                loop {
                    notify.notified().await;
                    tokio::time::sleep(interval).await;
                    let Some(core) = weak.upgrade() else { break };
                    let mut guard = core.recorder.lock().await;
                    if let Some(r) = guard.as_mut() {
                        if let Err(e) = r.save_if_dirty().await {
                            tracing::error!("saving the session snapshot failed: {e}");
                        }
                    }
                }
            })
        };
        let shutting_down = Arc::new(AtomicBool::new(false));
        let exit_logger = {
            let core = core.clone();
            let mut exit = agent.exit_watch();
            let shutting = shutting_down.clone();
            let tail = agent.stderr_tail_handle();
            tokio::spawn(async move {
                let e = loop {
                    if let Some(e) = exit.borrow().clone() {
                        break Some(e);
                    }
                    if exit.changed().await.is_err() {
                        break exit.borrow().clone();
                    }
                };
                let (reason, stderr) = if shutting.load(Ordering::SeqCst) {
                    ("acpx_shutdown", None)
                } else {
                    ("process_exit", Some(tail(Duration::from_millis(500)).await))
                };
                record_exit(&core, e, reason, stderr).await;
            })
        };
        Session {
            core,
            store: runtime.store.clone(),
            options: runtime.options.clone(),
            id,
            lock: Some(lock),
            agent,
            conn,
            init,
            attachment,
            recovery,
            cancel: CancelHandle::new(),
            shutting_down,
            flusher,
            exit_logger: Some(exit_logger),
            finished: false,
        }
    }

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

    /// The ACP session id in use.
    pub async fn acp_session_id(&self) -> String {
        self.record().await.acp_session_id
    }

    /// The agent's `initialize` answer.
    pub fn initialize_response(&self) -> &Value {
        &self.init
    }

    /// How the ACP session was obtained.
    pub fn attachment(&self) -> &Attachment {
        &self.attachment
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
        Ok(())
    }

    fn controls<'a>(&'a self, acp_session_id: &'a str) -> Controls<'a> {
        Controls {
            core: &self.core,
            conn: &self.conn,
            agent: &self.agent,
            timeout: self.options.request_timeout,
            acp_session_id,
        }
    }

    /// Sets the session mode (`session/set_mode`), recording control events.
    pub async fn set_mode(&mut self, mode_id: &str) -> RuntimeResult<()> {
        self.ensure_connected()?;
        let acp = self.acp_session_id().await;
        self.controls(&acp).set_mode(mode_id).await
    }

    /// Sets a config option (`session/set_config_option`; a JSON boolean is sent as a boolean
    /// option), recording control events. Returns the agent's updated option list.
    pub async fn set_config_option(
        &mut self,
        config_id: &str,
        value: Value,
    ) -> RuntimeResult<Vec<Value>> {
        self.ensure_connected()?;
        let acp = self.acp_session_id().await;
        self.controls(&acp)
            .set_config_option(config_id, value)
            .await
    }

    /// Sends one ACP request this crate does not wrap (for example `session/fork`) to the
    /// agent and returns its result, with the request timeout. Nothing is recorded: the caller
    /// records what the answer means.
    pub async fn agent_request(&self, method: &str, params: Value) -> RuntimeResult<Value> {
        self.ensure_connected()?;
        let pending = self.conn.call(method, params, |_| {});
        call_with_deadline(&self.agent, pending, method, self.options.request_timeout).await
    }

    /// Runs one prompt turn (ACP ContentBlocks, e.g. from [`text_prompt`]).
    pub async fn prompt(&mut self, prompt: Vec<Value>) -> RuntimeResult<TurnOutcome> {
        self.prompt_with(prompt, None).await
    }

    /// Runs one prompt turn; `observer` sees each event of the turn as it is recorded.
    pub async fn prompt_with(
        &mut self,
        prompt: Vec<Value>,
        observer: Option<Observer>,
    ) -> RuntimeResult<TurnOutcome> {
        self.ensure_connected()?;
        crate::turn::run(self, prompt, observer).await
    }

    pub(crate) fn parts(&self) -> TurnParts<'_> {
        TurnParts {
            core: &self.core,
            conn: &self.conn,
            agent: &self.agent,
            options: &self.options,
            cancel: &self.cancel,
            resumed: self.resumed(),
        }
    }

    /// Stops the agent (`session/close` first when the agent supports it and `close` is
    /// set), records how it ended, saves the snapshot and releases the lock.
    async fn finish(&mut self, close: bool) -> RuntimeResult<SessionRecord> {
        if self.finished {
            return Ok(self.record().await);
        }
        self.finished = true;
        let acp = self.acp_session_id().await;
        let can_close = self
            .init
            .get("agentCapabilities")
            .and_then(|c| c.get("sessionCapabilities"))
            .and_then(|s| s.get("close"))
            .is_some_and(Value::is_object);
        if close && can_close && self.agent.exit().is_none() {
            let pending = self
                .conn
                .call("session/close", json!({"sessionId": acp}), |_| {});
            if let Err(e) = call_with_deadline(
                &self.agent,
                pending,
                "session/close",
                Duration::from_secs(5),
            )
            .await
            {
                tracing::warn!("session/close failed: {e}");
            }
        }
        self.core.terminals.release_all().await;
        // An agent that already ended on its own keeps `process_exit` as its reason, however
        // late the exit logger gets to run.
        if self.agent.exit().is_none() {
            self.shutting_down.store(true, Ordering::SeqCst);
        }
        self.conn.shutdown().await;
        self.agent.stop().await;
        if let Some(logger) = self.exit_logger.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), logger).await;
        }
        if close {
            self.core
                .try_record(lifecycle_draft(lifecycle_payload(
                    lifecycle::SESSION_CLOSED,
                    json!({}),
                )))
                .await?;
        }
        self.flusher.abort();
        let record = {
            let mut guard = self.core.recorder.lock().await;
            let Some(r) = guard.as_mut() else {
                unreachable!("a Session always has its recorder")
            };
            r.retry_unwritten().await?;
            r.flush_log().await?;
            r.save_if_dirty().await?;
            r.snapshot().clone()
        };
        let record = if close {
            self.store.close(&self.id, Timestamp::now()).await?
        } else {
            record
        };
        self.lock.take();
        Ok(record)
    }

    /// Disconnects: stops the agent, saves the snapshot, releases the lock. The record stays
    /// open and can be reopened with [`Runtime::open_existing`].
    pub async fn shutdown(mut self) -> RuntimeResult<SessionRecord> {
        self.finish(false).await
    }

    /// Closes the session: as [`Session::shutdown`], after `session/close` (when the agent
    /// supports it), and marks the record closed (it stays listable and loadable).
    pub async fn close(mut self) -> RuntimeResult<SessionRecord> {
        self.finish(true).await
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if !self.finished {
            // No async here: kill the agent's group at once; the log already has every event.
            if let Some(logger) = self.exit_logger.take() {
                logger.abort();
            }
            self.flusher.abort();
            self.agent.kill_now();
        }
    }
}

/// What a turn needs from its session.
pub(crate) struct TurnParts<'a> {
    pub core: &'a Arc<SessionCore>,
    pub conn: &'a Connection,
    pub agent: &'a AgentProcess,
    pub options: &'a RuntimeOptions,
    pub cancel: &'a CancelHandle,
    pub resumed: bool,
}

impl CancelHandle {
    pub(crate) fn start(&self) -> watch::Receiver<bool> {
        self.tx.send_replace(false);
        self.running.store(true, Ordering::SeqCst);
        self.tx.subscribe()
    }

    pub(crate) fn stop(&self) {
        self.running.store(false, Ordering::SeqCst);
    }
}

/// A prompt of one text block.
pub fn text_prompt(text: &str) -> Vec<Value> {
    vec![json!({"type": "text", "text": text})]
}

/// The text of the Agent messages that follow the `User` message `user_message_id`.
pub fn agent_text_after(record: &SessionRecord, user_message_id: &str) -> String {
    let mut out = String::new();
    let mut seen = false;
    for m in &record.thread.messages {
        match m {
            Message::User(u) if u.id == user_message_id => seen = true,
            Message::User(_) if seen => break,
            Message::Agent(a) if seen => {
                for c in &a.content {
                    if let AgentContent::Text(t) = c {
                        out.push_str(t);
                    }
                }
            }
            _ => {}
        }
    }
    out
}

pub(crate) fn acp_error_object(e: &AcpError) -> AcpErrorObject {
    AcpErrorObject {
        code: e.code,
        message: e.message.clone(),
        data: e.data.clone(),
    }
}

pub(crate) fn prompt_started(
    preview: String,
    resumed: bool,
    user_id: &str,
    prompt: &[Value],
) -> EventPayload {
    let mut extra = Map::new();
    extra.insert("userMessageId".into(), json!(user_id));
    extra.insert("prompt".into(), Value::Array(prompt.to_vec()));
    EventPayload::PromptStarted(PromptStartedPayload {
        message_preview: preview,
        resumed,
        extra,
    })
}

pub(crate) fn prompt_done(
    stop_reason: &str,
    stats: PermissionStats,
    usage: Option<&Value>,
) -> EventPayload {
    let mut extra = Map::new();
    if let Some(u) = usage {
        extra.insert("usage".into(), u.clone());
    }
    EventPayload::PromptDone(PromptDonePayload {
        stop_reason: stop_reason.to_owned(),
        permission_stats: stats,
        extra,
    })
}
