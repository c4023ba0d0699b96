//! `session/delete`: asking the agent to delete its own copy of a session that `acpx sessions
//! delete` removes from the store.
//!
//! Decision (issue 48, item 7): when the record says the agent advertises
//! `sessionCapabilities.delete` (its last `initialize` answer, kept in `agentCapabilities`),
//! the delete starts the agent just for this (a delete is normally of a closed session, which
//! has no running agent): `initialize` (and `authenticate` when a credential matches), then
//! `session/delete` with the record's ACP session id, then the agent is stopped. No session is
//! loaded and nothing is recorded (the record and its log are deleted next). It is best
//! effort: an agent that cannot be started, no longer advertises it, or answers with an error
//! does not stop the store's delete; the caller reports what happened.

use std::path::Path;
use std::sync::Arc;

use acpx_model::SessionRecord;
use serde_json::{json, Value};

use super::attach::{check_cwd, fs_root, Setup};
use super::Runtime;
use crate::core::SessionCore;

/// What became of the agent's own copy of a deleted session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentSessionDelete {
    /// The agent does not advertise `session/delete` (by the record, or by its answer to
    /// `initialize` now): nothing was sent.
    NotAdvertised,
    /// The agent answered `session/delete` with success.
    Deleted,
    /// The agent could not be asked, or refused: why.
    Failed(String),
}

impl AgentSessionDelete {
    /// The value of the `agentSessionDelete` key of `session_deleted`'s JSON.
    pub fn as_str(&self) -> &'static str {
        match self {
            AgentSessionDelete::NotAdvertised => "not_advertised",
            AgentSessionDelete::Deleted => "deleted",
            AgentSessionDelete::Failed(_) => "failed",
        }
    }
}

/// Whether `agent_capabilities` (an `initialize` answer's) advertise `session/delete`.
pub fn advertises_delete(agent_capabilities: &Value) -> bool {
    agent_capabilities
        .get("sessionCapabilities")
        .and_then(|s| s.get("delete"))
        .is_some_and(Value::is_object)
}

impl Runtime {
    /// Asks `record`'s agent to delete its own copy of the session (see the module docs).
    pub async fn delete_agent_session(&self, record: &SessionRecord) -> AgentSessionDelete {
        if !advertises_delete(&record.agent_capabilities) || record.acp_session_id.is_empty() {
            return AgentSessionDelete::NotAdvertised;
        }
        match self.send_delete(record).await {
            Ok(outcome) => outcome,
            Err(e) => AgentSessionDelete::Failed(e.to_string()),
        }
    }

    async fn send_delete(
        &self,
        record: &SessionRecord,
    ) -> crate::RuntimeResult<AgentSessionDelete> {
        let cwd = check_cwd(Path::new(&record.cwd))?;
        let core = Arc::new(SessionCore::new(cwd.clone(), fs_root(&cwd)?, self.policy()));
        let (agent, mut conn) = self.start_agent(&record.agent_command, &cwd, &core).await?;
        let setup = Setup {
            runtime: self,
            core: &core,
            agent: &agent,
            conn: &conn,
        };
        let asked = async {
            let mut setup = setup;
            let init = setup.initialize().await?;
            if !advertises_delete(init.get("agentCapabilities").unwrap_or(&Value::Null)) {
                return Ok(AgentSessionDelete::NotAdvertised);
            }
            setup.authenticate(&init).await?;
            setup
                .call(
                    "session/delete",
                    json!({"sessionId": record.acp_session_id}),
                    |_| {},
                )
                .await?;
            Ok(AgentSessionDelete::Deleted)
        }
        .await;
        conn.shutdown().await;
        agent.stop().await;
        asked
    }
}
