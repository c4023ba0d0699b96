//! Opening a session: start the agent, `initialize`, then `session/new` for a new record, or
//! reattach an existing one: `session/resume` (if advertised), then `session/load` (if
//! advertised), then — when every step failed as unsupported or not found — a fallback to
//! `session/new` under the same record id, said in a [`Notice`] and a `session_fallback`
//! event. After every attach the user's choices are set again ([`super::choices`]).
//! `docs/format.md`, "Reattach and the user's choices".

use std::path::{Path, PathBuf};
use std::sync::Arc;

use acpx_model::{MemoryStore, Message, NewSession, RecordId, SessionRecord, Timestamp};
use serde_json::{json, Map, Value};

use super::additional_dirs;
use crate::agent::{self, AgentProcess, Connection};
use crate::client_ops::FsRoot;
use crate::core::{client_builder, Phase, SessionCore};
use crate::error::{AcpError, RuntimeError, RuntimeResult};
use crate::mapping::lifecycle;
use crate::mcp_servers::McpServers;

use super::auth::{self, AuthDecision};
use super::choices::{self, Desired};
use super::controls::{call_with_deadline, Controls};
use super::lifecycle::record_exit;
use super::{
    lifecycle_draft, lifecycle_payload, lifecycle_payload_with, Attachment, FailedAttempt,
    NewSessionSpec, Notice, Recovery, ResumePolicy, Runtime, RuntimeOptions, Session, TurnOutcome,
    PROTOCOL_VERSION,
};

/// The key a Node acpx import leaves on the record (`ops::node_import`): such a record must
/// continue in its own ACP session or not at all.
const IMPORTED_FROM_KEY: &str = "importedFrom";

/// Reads `_meta.agentSessionId` of a response: a non-empty string, or nothing
/// (`docs/format.md`, § Identity and Decisions 6).
fn agent_session_id(response: &Value) -> Option<String> {
    response
        .get("_meta")
        .and_then(|m| m.get("agentSessionId"))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

/// The parts of a new/load/resume response the record keeps.
pub(super) fn session_facts(response: &Value) -> Map<String, Value> {
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
    /// Starts the agent, creates an ACP session in `spec.cwd` and a new session record, with
    /// the MCP servers of the options (stored in the record) and the `--model` of the
    /// options applied.
    pub async fn open_new(&self, spec: NewSessionSpec) -> RuntimeResult<Session> {
        self.open_new_as(spec, RecordId::generate()).await
    }

    /// [`Runtime::open_new`] with the record id chosen by the caller (a queue owner started
    /// for that id creates the session it will serve). An id the store already holds fails
    /// with `AlreadyExists` once the agent's session is made.
    pub async fn open_new_as(&self, spec: NewSessionSpec, id: RecordId) -> RuntimeResult<Session> {
        self.open_new_with_dirs(spec, id, &self.options.additional_directories)
            .await
    }

    /// [`Runtime::open_new_as`] with these additional directories instead of the options'
    /// (a fork by copy gives the child its parent's).
    pub async fn open_new_with_dirs(
        &self,
        spec: NewSessionSpec,
        id: RecordId,
        dirs: &[std::path::PathBuf],
    ) -> RuntimeResult<Session> {
        let cwd = check_cwd(&spec.cwd)?;
        let dirs = additional_dirs::resolve(dirs)?;
        let root = with_dirs(fs_root(&cwd)?, &dirs)?;
        let core = Arc::new(SessionCore::new(cwd.clone(), root, self.policy()));
        let (agent, conn) = self.start_agent(&spec.agent_command, &cwd, &core).await?;
        let mut setup = Setup {
            runtime: self,
            core: &core,
            agent: &agent,
            conn: &conn,
        };
        let init = setup.initialize().await?;
        // An agent that cannot take `--add-dir` is refused before anything is created.
        let checked = match additional_dirs::check_advertised(&dirs, &init, &spec.agent_command) {
            Ok(()) => setup.authenticate(&init).await,
            Err(e) => Err(e),
        };
        let auth = match checked {
            Ok(a) => a,
            Err(e) => {
                let mut conn = conn;
                conn.shutdown().await;
                let _ = agent.stop().await;
                return Err(e);
            }
        };
        let mcp = self
            .options
            .mcp_servers
            .clone()
            .or_else(|| self.options.default_mcp_servers.clone());
        let (wire, left_out) = mcp_for_agent(mcp.as_ref(), &init);
        let response = setup
            .new_session(&cwd, wire)
            .await
            .map_err(|e| auth::explain_auth_required(e, &auth))?;
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
                acpx_record_id: id,
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
        let lock = self.lock_session(&id).await?;
        *core.recorder.lock().await = Some(self.new_recorder(&lock, record));
        let mut notices = left_out_notice(left_out);
        let setup_done = async {
            setup.record_started(&init).await?;
            setup.record_auth(&auth).await?;
            let mut facts = session_facts(&response);
            facts.insert("acpSessionId".into(), json!(acp_session_id));
            // The record's identity, so the log alone can rebuild a lost snapshot
            // (`docs/format.md` § Damaged snapshots).
            facts.insert("agentCommand".into(), json!(spec.agent_command));
            facts.insert("cwd".into(), json!(cwd.display().to_string()));
            if let Some(name) = &spec.name {
                facts.insert("name".into(), json!(name));
            }
            if let Some(m) = &mcp {
                facts.insert("mcpServers".into(), m.to_json());
            }
            additional_dirs::add_to_facts(&mut facts, &dirs);
            core.try_record(lifecycle_draft(lifecycle_payload(
                lifecycle::SESSION_CREATED,
                Value::Object(facts),
            )))
            .await?;
            let controls = setup.controls(&acp_session_id);
            choices::restore(
                &controls,
                &Desired::default(),
                &response,
                self.options.model.as_deref(),
            )
            .await
        }
        .await;
        match setup_done {
            Ok(n) => notices.extend(n),
            Err(e) => {
                abandon(&core, conn, agent).await;
                drop(lock);
                return Err(e);
            }
        }
        core.go_live().await?;
        let mut session = Session::assemble(
            self,
            core,
            id,
            lock,
            agent,
            conn,
            init,
            Attachment::Created,
            Recovery::default(),
        );
        session.notices = notices;
        session.models = response.get("models").cloned();
        session.modes = response.get("modes").cloned();
        Ok(session)
    }

    /// Reopens a stored session: rolls its snapshot forward, records an unfinished turn as
    /// interrupted, starts its agent and reattaches (`session/resume`, else `session/load`,
    /// else — when the agent lost the session or cannot restore it — a fresh `session/new`
    /// under the same record id).
    pub async fn open_existing(&self, id: &RecordId) -> RuntimeResult<Session> {
        let lock = self.lock_session(id).await?;
        let (mut recorder, recovery) = self.recover_locked(&lock).await?;
        // The settings the reattach reads, without a second copy of the conversation; whether
        // the agent ever answered is all it needs to know of that.
        let has_history = has_agent_messages(recorder.snapshot());
        let fork_untouched = untouched_fork(recorder.snapshot());
        let record = recorder.settings_copy();
        if record.closed {
            return Err(RuntimeError::InvalidInput(format!(
                "session {id} is closed; start a new session instead"
            )));
        }
        // An archive's agent command runs only once the user accepted it (`sessions trust`).
        if let Some(why) = crate::mapping::imports::refusal(&record) {
            return Err(RuntimeError::InvalidInput(why));
        }
        let cwd = check_cwd(Path::new(&record.cwd))?;
        let dirs = additional_dirs::for_record(&self.options.additional_directories, &record)?;
        let root = with_dirs(fs_root(&cwd)?, &dirs)?;
        let core = Arc::new(SessionCore::new(cwd.clone(), root, self.policy()));
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
            let auth = setup.authenticate(&init).await?;
            setup.record_auth(&auth).await?;
            let attached = setup
                .reattach(&record, has_history, fork_untouched, &init)
                .await
                .map_err(|e| auth::explain_auth_required(e, &auth))?;
            // Every attach: the user's choices again, before anything else is sent.
            let acp_now = core
                .recorder
                .lock()
                .await
                .as_ref()
                .map(|r| r.snapshot().acp_session_id.clone())
                .unwrap_or_default();
            let fell_back = matches!(attached.attachment, Attachment::Fallback { .. });
            let controls = setup.controls(&acp_now);
            let restored = choices::restore(
                &controls,
                &Desired::of(&record, fell_back),
                &attached.response,
                self.options.model.as_deref(),
            )
            .await?;
            Ok::<_, RuntimeError>((init, attached, restored))
        }
        .await;
        let (init, attached, restored) = match reattached {
            Ok(v) => v,
            Err(e) => {
                // Leave the record consistent: the agent is stopped and its exit recorded.
                abandon(&core, conn, agent).await;
                drop(lock);
                return Err(e);
            }
        };
        core.go_live().await?;
        let mut session = Session::assemble(
            self,
            core,
            id.clone(),
            lock,
            agent,
            conn,
            init,
            attached.attachment,
            recovery,
        );
        session.notices = attached.notices;
        session.notices.extend(restored);
        session.models = attached.response.get("models").cloned();
        session.modes = attached.response.get("modes").cloned();
        Ok(session)
    }

    pub(super) async fn start_agent(
        &self,
        command: &str,
        cwd: &Path,
        core: &Arc<SessionCore>,
    ) -> RuntimeResult<(AgentProcess, Connection)> {
        // The configured credentials reach the agent through its environment (§ Authentication).
        let mut env = auth::credential_env(&self.options.auth_credentials, |k| {
            std::env::var_os(k).map(|v| v.to_string_lossy().into_owned())
        });
        env.extend(self.options.agent_env.iter().cloned());
        let (agent, transport) = agent::spawn(
            command,
            cwd,
            &env,
            self.options.wire_observer.clone(),
            super::agent_output::recording_sink(core),
            crate::core::update_queue::new_update_gate(core),
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
        // `shutdown` saves the turn's end; the turn saving it too would rewrite the snapshot
        // (and move its finished texts to the spill file) for nothing.
        let options = super::TurnOptions {
            session_ends_after: true,
            ..super::TurnOptions::default()
        };
        let outcome = session.prompt_with_options(prompt, options).await;
        let record = session.shutdown().await?;
        Ok((outcome?, record))
    }
}

/// Stops the agent of a session that failed to open and records how it ended.
pub(super) async fn abandon(core: &Arc<SessionCore>, conn: Connection, agent: AgentProcess) {
    let mut conn = conn;
    conn.shutdown().await;
    let (exit, _) = agent.stop().await;
    record_exit(core, exit, "acpx_shutdown", None).await;
    if let Some(r) = core.recorder.lock().await.as_mut() {
        let _ = r.save_if_dirty().await;
    }
}

/// The MCP servers to send to the agent whose `initialize` answer is `init`, and the notice
/// for those it cannot take.
pub(super) fn mcp_for_agent(mcp: Option<&McpServers>, init: &Value) -> (Value, Vec<String>) {
    match mcp {
        Some(m) => m.for_agent(init.get("agentCapabilities").unwrap_or(&Value::Null)),
        None => (json!([]), Vec::new()),
    }
}

pub(super) fn left_out_notice(left_out: Vec<String>) -> Vec<Notice> {
    if left_out.is_empty() {
        Vec::new()
    } else {
        vec![Notice::McpServersLeftOut(left_out)]
    }
}

/// How a reattach went: the attachment, the agent's answer, and the notices.
struct Attached {
    attachment: Attachment,
    response: Value,
    notices: Vec<Notice>,
}

/// Notes a failed reattach step in `failed` when the chain may move on to the next step;
/// otherwise the step's error is the command's.
fn note_failed_step(
    failed: &mut Vec<FailedAttempt>,
    method: &str,
    e: RuntimeError,
    has_history: bool,
) -> RuntimeResult<()> {
    match fallback_reason(&e, has_history) {
        Some((reason, error)) => {
            failed.push(FailedAttempt {
                method: method.into(),
                reason: reason.into(),
                error,
            });
            Ok(())
        }
        None => Err(e),
    }
}

/// Why a failed step may move on to the next one (`None`: it may not).
fn fallback_reason(
    failure: &RuntimeError,
    has_history: bool,
) -> Option<(&'static str, Option<AcpError>)> {
    match failure {
        RuntimeError::Agent { error, .. } if error.is_not_found() => {
            Some(("not_found", Some(error.as_ref().clone())))
        }
        RuntimeError::Agent { error, .. } if error.is_unsupported() => {
            Some(("unsupported", Some(error.as_ref().clone())))
        }
        RuntimeError::Agent { error, .. } if error.code == -32603 && !has_history => {
            Some(("failed_without_history", Some(error.as_ref().clone())))
        }
        _ => None,
    }
}

/// `session/load: not found; session/resume: unsupported`, for messages.
pub(crate) fn describe_attempts(attempts: &[FailedAttempt]) -> String {
    if attempts.is_empty() {
        return "the agent supports neither session/resume nor session/load".into();
    }
    attempts
        .iter()
        .map(|a| {
            let reason = a.reason.replace('_', " ");
            format!("{}: {reason}", a.method)
        })
        .collect::<Vec<_>>()
        .join("; ")
}

pub(super) fn check_cwd(cwd: &Path) -> RuntimeResult<PathBuf> {
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

/// `root` also admitting the session's additional directories.
pub(super) fn with_dirs(root: FsRoot, dirs: &[std::path::PathBuf]) -> RuntimeResult<FsRoot> {
    root.with_additional(dirs).map_err(|e| {
        RuntimeError::InvalidInput(format!("cannot resolve an additional directory: {e}"))
    })
}

pub(super) fn fs_root(cwd: &Path) -> RuntimeResult<FsRoot> {
    FsRoot::new(cwd)
        .map_err(|e| RuntimeError::InvalidInput(format!("cannot resolve {}: {e}", cwd.display())))
}

/// The requests that set a session up, raced against the agent's exit and a timeout.
pub(super) struct Setup<'a> {
    pub(super) runtime: &'a Runtime,
    pub(super) core: &'a Arc<SessionCore>,
    pub(super) agent: &'a AgentProcess,
    pub(super) conn: &'a Connection,
}

impl Setup<'_> {
    pub(super) async fn call(
        &self,
        method: &str,
        params: Value,
        on_result: impl FnOnce(&Result<Value, agent_client_protocol::Error>) + Send + 'static,
    ) -> RuntimeResult<Value> {
        let pending = self.conn.call(method, params, on_result);
        call_with_deadline(
            self.core,
            self.agent,
            pending,
            method,
            self.runtime.options.request_timeout,
        )
        .await
    }

    pub(super) async fn initialize(&mut self) -> RuntimeResult<Value> {
        let opts = &self.runtime.options;
        self.call(
            "initialize",
            json!({
                "protocolVersion": PROTOCOL_VERSION,
                "clientCapabilities": {
                    "fs": {"readTextFile": opts.fs, "writeTextFile": opts.fs},
                    "terminal": opts.terminal,
                    // Agents (pydantic-acp) send their config options, the model among them,
                    // only to a client that says it takes them; booleans are set with `set`.
                    "session": {"configOptions": {"boolean": {}}},
                    // Forms and URLs are asked at the terminal (forms answered from
                    // `--elicitation-answers` when given); with nobody to ask, declined (a
                    // valid answer: the user said no).
                    "elicitation": {"form": {}, "url": {}},
                },
                "clientInfo": {"name": "acpx", "version": env!("CARGO_PKG_VERSION")},
            }),
            |_| {},
        )
        .await
    }

    /// Decides on the methods of `init` and, when a credential matched, sends `authenticate`
    /// (before any session request, as the agent may refuse those until then).
    pub(super) async fn authenticate(&self, init: &Value) -> RuntimeResult<AuthDecision> {
        let opts = &self.runtime.options;
        let decision = auth::decide(init, opts.auth_policy, &opts.auth_credentials, |k| {
            std::env::var(k).ok()
        });
        match &decision {
            AuthDecision::Fail { methods } => {
                return Err(RuntimeError::AuthRequired {
                    env_vars: methods.iter().filter_map(|m| auth::env_key(m)).collect(),
                    methods: methods.clone(),
                    agent_said: None,
                })
            }
            AuthDecision::Authenticate { method_id, .. } => {
                self.call("authenticate", json!({"methodId": method_id}), |_| {})
                    .await?;
            }
            AuthDecision::NotNeeded | AuthDecision::Skip { .. } => {}
        }
        Ok(decision)
    }

    pub(super) async fn record_auth(&self, decision: &AuthDecision) -> RuntimeResult<()> {
        if let Some((phase, facts)) = auth::lifecycle_facts(decision) {
            self.core
                .try_record(lifecycle_draft(lifecycle_payload(phase, facts)))
                .await?;
        }
        Ok(())
    }

    pub(super) async fn record_started(&self, init: &Value) -> RuntimeResult<()> {
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

    /// `session/new`, with the session's additional directories (its [`FsRoot`]'s).
    async fn new_session(&self, cwd: &Path, mcp_servers: Value) -> RuntimeResult<Value> {
        let mut params = json!({"cwd": cwd, "mcpServers": mcp_servers});
        additional_dirs::add_to_params(&mut params, self.core.fs_root.additional());
        self.call("session/new", params, |_| {}).await
    }

    pub(super) fn controls<'b>(&'b self, acp_session_id: &'b str) -> Controls<'b> {
        Controls {
            core: self.core,
            conn: self.conn,
            agent: self.agent,
            timeout: self.runtime.options.request_timeout,
            acp_session_id,
        }
    }

    /// The MCP servers of a reattach: this invocation's, else the record's, else the
    /// configuration's ([`super::invocation::effective_mcp_servers`]).
    fn effective_mcp(&self, record: &SessionRecord) -> RuntimeResult<Option<McpServers>> {
        let o = &self.runtime.options;
        super::invocation::effective_mcp_servers(
            o.mcp_servers.as_ref(),
            record,
            o.default_mcp_servers.as_ref(),
        )
    }

    /// Resume (if advertised), then load (if advertised), then a fallback to `session/new`.
    /// A step that fails as unsupported or not found moves on; any other failure (a timeout,
    /// a crash, an interrupt) is the error.
    /// `has_history`: the conversation holds an answer of the agent (see [`fallback_reason`]).
    async fn reattach(
        &self,
        record: &SessionRecord,
        has_history: bool,
        fork_untouched: bool,
        init: &Value,
    ) -> RuntimeResult<Attached> {
        let caps = init.get("agentCapabilities").cloned().unwrap_or(json!({}));
        let can_resume = caps
            .get("sessionCapabilities")
            .and_then(|s| s.get("resume"))
            .is_some_and(Value::is_object);
        let can_load = caps.get("loadSession").and_then(Value::as_bool) == Some(true);
        let mcp = self.effective_mcp(record)?;
        let (wire, left_out) = mcp_for_agent(mcp.as_ref(), init);
        let mut notices = left_out_notice(left_out);
        let old = record.acp_session_id.clone();
        let dirs = self.core.fs_root.additional();
        additional_dirs::check_advertised(dirs, init, &record.agent_command)?;
        let mut params = json!({"sessionId": old, "cwd": record.cwd, "mcpServers": wire});
        additional_dirs::add_to_params(&mut params, dirs);
        let mut failed: Vec<FailedAttempt> = Vec::new();
        if can_resume {
            match self.call("session/resume", params.clone(), |_| {}).await {
                Ok(resp) => {
                    return self
                        .step_worked("session/resume", &old, resp, 0, &failed, &mcp, notices)
                        .await
                }
                Err(e) => note_failed_step(&mut failed, "session/resume", e, has_history)?,
            }
        }
        if can_load {
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
                Ok(resp) => {
                    return self
                        .step_worked("session/load", &old, resp, n, &failed, &mcp, notices)
                        .await
                }
                Err(e) => note_failed_step(&mut failed, "session/load", e, has_history)?,
            }
        }
        let why = if record.extra.contains_key(IMPORTED_FROM_KEY) {
            Some("the session was imported from Node acpx, whose sessions must continue in their own ACP session".to_owned())
        } else if self.runtime.options.resume_policy == ResumePolicy::SameSessionOnly {
            Some(format!(
                "the resume policy is {}",
                ResumePolicy::SameSessionOnly.as_str()
            ))
        } else {
            None
        };
        if let Some(why) = why {
            return Err(RuntimeError::ResumeRequired {
                acp_session_id: old,
                detail: describe_attempts(&failed),
                why,
            });
        }
        // A fork with no turn yet whose ACP session the agent does not know: the agent never
        // stored it (some store a fork only after its first turn, in the process that made it).
        let unstored_fork =
            fork_untouched && failed.last().is_some_and(|a| a.reason == "not_found");
        let (wire, _) = mcp_for_agent(mcp.as_ref(), init);
        let (attachment, response, notice) =
            self.fallback(record, failed, mcp.as_ref(), wire).await?;
        notices.insert(0, notice);
        if unstored_fork {
            notices.insert(
                1,
                Notice::ForkNotStored {
                    acp_session_id: record.acp_session_id.clone(),
                },
            );
        }
        Ok(Attached {
            attachment,
            response,
            notices,
        })
    }

    /// The answer of the reattach step that worked, recorded as `session_attached`.
    #[allow(clippy::too_many_arguments)]
    async fn step_worked(
        &self,
        method: &str,
        acp_session_id: &str,
        response: Value,
        replayed: u64,
        failed: &[FailedAttempt],
        mcp: &Option<McpServers>,
        notices: Vec<Notice>,
    ) -> RuntimeResult<Attached> {
        let attachment = self
            .attached(
                method,
                acp_session_id,
                &response,
                replayed,
                failed,
                mcp.as_ref(),
            )
            .await?;
        Ok(Attached {
            attachment,
            response,
            notices,
        })
    }

    async fn attached(
        &self,
        method: &str,
        acp_session_id: &str,
        response: &Value,
        replayed: u64,
        failed: &[FailedAttempt],
        mcp: Option<&McpServers>,
    ) -> RuntimeResult<Attachment> {
        let mut facts = session_facts(response);
        facts.insert("method".into(), json!(method));
        facts.insert("acpSessionId".into(), json!(acp_session_id));
        facts.insert("replayedUpdates".into(), json!(replayed));
        if !failed.is_empty() {
            facts.insert(
                "failedAttempts".into(),
                Value::Array(failed.iter().map(FailedAttempt::to_json).collect()),
            );
        }
        if let Some(m) = mcp {
            facts.insert("mcpServers".into(), m.to_json());
        }
        additional_dirs::add_to_facts(&mut facts, self.core.fs_root.additional());
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

    /// A fresh ACP session under the same record id, after every reattach step failed.
    async fn fallback(
        &self,
        record: &SessionRecord,
        failed: Vec<FailedAttempt>,
        mcp: Option<&McpServers>,
        wire: Value,
    ) -> RuntimeResult<(Attachment, Value, Notice)> {
        let response = self.new_session(Path::new(&record.cwd), wire).await?;
        let new_id = response
            .get("sessionId")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| RuntimeError::Protocol {
                method: "session/new".into(),
                detail: format!("no sessionId in {response}"),
            })?
            .to_owned();
        let reason = failed
            .last()
            .map_or("unsupported".to_owned(), |a| a.reason.clone());
        let mut facts = session_facts(&response);
        facts.insert("acpSessionId".into(), json!(new_id));
        facts.insert("previousAcpSessionId".into(), json!(record.acp_session_id));
        facts.insert(
            "failedAttempts".into(),
            Value::Array(failed.iter().map(FailedAttempt::to_json).collect()),
        );
        if let Some(last) = failed.last() {
            facts.insert("failedMethod".into(), json!(last.method));
            if let Some(e) = &last.error {
                facts.insert("error".into(), e.to_json());
            }
        }
        if let Some(m) = mcp {
            facts.insert("mcpServers".into(), m.to_json());
        }
        additional_dirs::add_to_facts(&mut facts, self.core.fs_root.additional());
        self.core
            .try_record(lifecycle_draft(lifecycle_payload_with(
                lifecycle::SESSION_FALLBACK,
                None,
                None,
                Some(reason.clone()),
                Value::Object(facts),
            )))
            .await?;
        let notice = Notice::Fallback {
            previous_acp_session_id: record.acp_session_id.clone(),
            acp_session_id: new_id,
            failed_attempts: failed,
        };
        Ok((
            Attachment::Fallback {
                reason,
                previous_acp_session_id: record.acp_session_id.clone(),
            },
            response,
            notice,
        ))
    }
}

/// Whether `record` (whole, not a settings copy) is a fork that had no turn since it was made:
/// its conversation is still the parent's (`forked_from.messageCount` messages).
fn untouched_fork(record: &SessionRecord) -> bool {
    record
        .acpx
        .extra
        .get(crate::mapping::FORKED_FROM_KEY)
        .and_then(|origin| origin.get("messageCount"))
        .and_then(Value::as_u64)
        == Some(record.thread.message_count() as u64)
}

fn has_agent_messages(record: &SessionRecord) -> bool {
    if record
        .thread
        .messages
        .iter()
        .any(|m| matches!(m, Message::Agent(_)))
    {
        return true;
    }
    // Settled messages (a live record's, or one loaded settling) are read back; a settled
    // message that cannot be is taken for an answer: the conversation had one.
    let agent = record.thread.settled.try_for_each(|_, m| match m {
        Message::Agent(_) => Err(()),
        _ => Ok(()),
    });
    !matches!(agent, Ok(Ok(())))
}
