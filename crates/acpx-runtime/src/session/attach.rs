//! Opening a session: start the agent, `initialize`, then `session/new` for a new record, or
//! reattach an existing one (`session/resume`, else `session/load`, else a fallback to
//! `session/new` under the same record id that re-applies the saved mode and config values).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use acpx_model::{MemoryStore, Message, NewSession, RecordId, SessionRecord, Timestamp};
use serde_json::{json, Map, Value};

use crate::agent::{self, AgentProcess, Connection};
use crate::client_ops::FsRoot;
use crate::core::{client_builder, Phase, SessionCore};
use crate::error::{AcpError, RuntimeError, RuntimeResult};
use crate::mapping::{lifecycle, DESIRED_CONFIG_KEY, DESIRED_MODE_KEY};

use super::controls::{call_with_deadline, Controls};
use super::lifecycle::record_exit;
use super::{
    lifecycle_draft, lifecycle_payload, lifecycle_payload_with, Attachment, NewSessionSpec,
    Recovery, Runtime, RuntimeOptions, Session, TurnOutcome, PROTOCOL_VERSION,
};

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
        let lock = Arc::new(self.store.lock(&id, self.options.lock_timeout).await?);
        *core.recorder.lock().await = Some(self.new_recorder(&lock, record));
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
        let lock = Arc::new(self.store.lock(id, self.options.lock_timeout).await?);
        let (recorder, recovery) = self.recover_locked(&lock).await?;
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
