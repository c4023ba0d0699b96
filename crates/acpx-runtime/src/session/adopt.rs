//! `acpx sessions adopt`: a new record for a session the agent made elsewhere (in an editor,
//! another client, another acpx home), attached through `session/load` — or `session/resume`
//! when load is not advertised — with the history the agent replays recorded, so the thread
//! holds the conversation (`crate::mapping::adopt` maps it; docs/format.md § Adopting a
//! session the agent made elsewhere).
//!
//! Nothing is stored until the agent attached the session: the replayed updates wait in the
//! session's buffer while `session/load` runs, and an agent that refuses (it does not know
//! the id, it advertises neither method) leaves no record behind. Once stored, the record is
//! an ordinary session: its next attach loads it as any other, and that load's replay is
//! counted and dropped as usual, the thread already holding it.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use acpx_model::{NewSession, RecordId, SessionRecord, Timestamp};
use serde_json::{json, Value};

use super::attach::{
    abandon, check_cwd, fs_root, left_out_notice, mcp_for_agent, session_facts, with_dirs, Setup,
};
use super::choices::{self, Desired};
use super::{additional_dirs, auth, lifecycle_draft, lifecycle_payload, Attachment, Recovery};
use super::{Runtime, Session};
use crate::core::{Phase, SessionCore};
use crate::error::{RuntimeError, RuntimeResult};
use crate::mapping::lifecycle;

/// What to adopt, and where the new record goes.
#[derive(Debug, Clone)]
pub struct AdoptSpec {
    /// The agent command line.
    pub agent_command: String,
    /// The session's working directory (sent with the load; absolute and existing).
    pub cwd: PathBuf,
    /// The new record's name.
    pub name: Option<String>,
    /// The agent's ACP session id.
    pub acp_session_id: String,
}

/// How an adoption went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Adopted {
    /// `session/load` or `session/resume`.
    pub method: String,
    /// How many `session/update`s the agent replayed (all recorded; none after a resume,
    /// which does not replay).
    pub replayed_updates: u64,
}

impl Runtime {
    /// Adopts the agent's session `spec.acp_session_id` into a new record (see the module
    /// docs). The caller checks that no record holds that ACP session already.
    pub async fn adopt(&self, spec: AdoptSpec) -> RuntimeResult<(Session, Adopted)> {
        if spec.acp_session_id.trim().is_empty() {
            return Err(RuntimeError::InvalidInput(
                "the ACP session id to adopt is empty".into(),
            ));
        }
        let cwd = check_cwd(&spec.cwd)?;
        let dirs = additional_dirs::resolve(&self.options.additional_directories)?;
        let root = with_dirs(fs_root(&cwd)?, &dirs)?;
        let core = Arc::new(SessionCore::new(cwd.clone(), root, self.policy()));
        let (agent, conn) = self.start_agent(&spec.agent_command, &cwd, &core).await?;
        let mut setup = Setup {
            runtime: self,
            core: &core,
            agent: &agent,
            conn: &conn,
        };
        let replay: Arc<Mutex<Vec<Value>>> = Arc::default();
        let attached = async {
            let init = setup.initialize().await?;
            additional_dirs::check_advertised(&dirs, &init, &spec.agent_command)?;
            let method = attach_method(&init, &spec.agent_command)?;
            let auth = setup.authenticate(&init).await?;
            let mcp = self
                .options
                .mcp_servers
                .clone()
                .or_else(|| self.options.default_mcp_servers.clone());
            let (wire, left_out) = mcp_for_agent(mcp.as_ref(), &init);
            let mut params =
                json!({"sessionId": spec.acp_session_id, "cwd": cwd, "mcpServers": wire});
            additional_dirs::add_to_params(&mut params, &dirs);
            // The phase is `Buffering` from the start: the replay waits there. On the dispatch
            // loop, atomically with the answer, it is taken out; what follows the answer is
            // the session's own (recorded after the history).
            let taken = replay.clone();
            let switch_core = core.clone();
            let switch = move |_: &Result<Value, agent_client_protocol::Error>| {
                if let Phase::Buffering(updates) =
                    switch_core.set_phase(Phase::Buffering(Vec::new()))
                {
                    *taken.lock().unwrap_or_else(|p| p.into_inner()) = updates;
                }
            };
            let response = setup
                .call(method, params, switch)
                .await
                .map_err(|e| auth::explain_auth_required(e, &auth))?;
            Ok::<_, RuntimeError>((init, auth, method, response, mcp, left_out))
        }
        .await;
        let (init, auth, method, response, mcp, left_out) = match attached {
            Ok(v) => v,
            Err(e) => {
                let mut conn = conn;
                conn.shutdown().await;
                let _ = agent.stop().await;
                return Err(e);
            }
        };
        let stored = self
            .store_adoption(
                &spec,
                &cwd,
                &dirs,
                (&core, &agent, &conn),
                (&init, &auth, method, &response, mcp.as_ref()),
                &replay,
            )
            .await;
        let (id, lock, replayed_updates, restored) = match stored {
            Ok(v) => v,
            Err(e) => {
                abandon(&core, conn, agent).await;
                return Err(e);
            }
        };
        let mut notices = left_out_notice(left_out);
        notices.extend(restored);
        core.go_live().await?;
        let mut session = Session::assemble(
            self,
            core,
            id,
            lock,
            agent,
            conn,
            init,
            Attachment::Reattached {
                method: method.to_owned(),
                replayed_updates,
            },
            Recovery::default(),
        );
        session.notices = notices;
        session.models = response.get("models").cloned();
        session.modes = response.get("modes").cloned();
        Ok((
            session,
            Adopted {
                method: method.to_owned(),
                replayed_updates,
            },
        ))
    }

    /// Stores the adopted session: the record, its lock and recorder, then its log
    /// (`agent_started`, `initialized`, authentication, `session_adopted`, the replay,
    /// `adoption_replayed`) and the `--model` of the options. Returns the record id, its lock,
    /// how many updates were replayed and the notices of the choices set.
    #[allow(clippy::type_complexity)]
    async fn store_adoption(
        &self,
        spec: &AdoptSpec,
        cwd: &std::path::Path,
        dirs: &[PathBuf],
        (core, agent, conn): (
            &Arc<SessionCore>,
            &crate::agent::AgentProcess,
            &crate::agent::Connection,
        ),
        (init, auth, method, response, mcp): (
            &Value,
            &auth::AuthDecision,
            &str,
            &Value,
            Option<&crate::mcp_servers::McpServers>,
        ),
        replay: &Mutex<Vec<Value>>,
    ) -> RuntimeResult<(
        RecordId,
        Arc<acpx_model::SessionLock>,
        u64,
        Vec<super::Notice>,
    )> {
        let setup = Setup {
            runtime: self,
            core,
            agent,
            conn,
        };
        let mut record = SessionRecord::new(
            NewSession {
                acpx_record_id: RecordId::generate(),
                acp_session_id: spec.acp_session_id.clone(),
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
        let replayed = std::mem::take(&mut *replay.lock().unwrap_or_else(|p| p.into_inner()));
        let replayed_updates = replayed.len() as u64;
        setup.record_started(init).await?;
        setup.record_auth(auth).await?;
        let mut facts = session_facts(response);
        facts.insert("acpSessionId".into(), json!(spec.acp_session_id));
        facts.insert("method".into(), json!(method));
        facts.insert("agentCommand".into(), json!(spec.agent_command));
        facts.insert("cwd".into(), json!(cwd.display().to_string()));
        if let Some(name) = &spec.name {
            facts.insert("name".into(), json!(name));
        }
        if let Some(m) = mcp {
            facts.insert("mcpServers".into(), m.to_json());
        }
        additional_dirs::add_to_facts(&mut facts, dirs);
        core.try_record(lifecycle_draft(lifecycle_payload(
            lifecycle::SESSION_ADOPTED,
            Value::Object(facts),
        )))
        .await?;
        for params in replayed {
            core.try_record(crate::core::update_draft(None, params))
                .await?;
        }
        core.try_record(lifecycle_draft(lifecycle_payload(
            lifecycle::ADOPTION_REPLAYED,
            json!({"replayedUpdates": replayed_updates}),
        )))
        .await?;
        let controls = setup.controls(&spec.acp_session_id);
        let restored = choices::restore(
            &controls,
            &Desired::default(),
            response,
            self.options.model.as_deref(),
        )
        .await?;
        Ok((id, lock, replayed_updates, restored))
    }
}

/// `session/load` when the agent advertises it (it replays the history), else
/// `session/resume` (it does not); refused when it advertises neither.
fn attach_method(init: &Value, agent: &str) -> RuntimeResult<&'static str> {
    let caps = init.get("agentCapabilities").unwrap_or(&Value::Null);
    if caps.get("loadSession").and_then(Value::as_bool) == Some(true) {
        return Ok("session/load");
    }
    if caps
        .pointer("/sessionCapabilities/resume")
        .is_some_and(Value::is_object)
    {
        return Ok("session/resume");
    }
    Err(RuntimeError::InvalidInput(format!(
        "the agent `{agent}` advertises neither session/load (loadSession) nor \
         sessionCapabilities.resume, so it cannot attach a session made elsewhere"
    )))
}
