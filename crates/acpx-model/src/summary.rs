//! The listing view of a session ([`SessionSummary`]): what `list` and the stores' indexes
//! keep of each record, without the conversation.

use serde::{Deserialize, Serialize};

use crate::id::RecordId;
use crate::session::SessionRecord;
use crate::session_usage::SessionUsage;
use crate::time::Timestamp;

/// The listing view of a session: identity and lifecycle, without the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionSummary {
    /// acpx's stable local id.
    pub acpx_record_id: RecordId,
    /// The id used in ACP calls.
    pub acp_session_id: String,
    /// The agent's own session id, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_session_id: Option<String>,
    /// The command line that starts the agent.
    pub agent_command: String,
    /// The working directory of the session.
    pub cwd: String,
    /// The user's name for the session.
    #[serde(default)]
    pub name: Option<String>,
    /// The thread's title, when it has one.
    #[serde(default)]
    pub title: Option<String>,
    /// When the session was created.
    pub created_at: Timestamp,
    /// When the session was last used.
    pub last_used_at: Timestamp,
    /// Whether the session was closed.
    pub closed: bool,
    /// When it was closed.
    #[serde(default)]
    pub closed_at: Option<Timestamp>,
    /// When the latest prompt was sent.
    #[serde(default)]
    pub last_prompt_at: Option<Timestamp>,
    /// Messages in the thread.
    #[serde(default)]
    pub message_count: u64,
    /// The snapshot's revision.
    #[serde(default)]
    pub revision: u64,
    /// What the agent reported about tokens and cost ([`SessionUsage`]); zero with
    /// `reported: false` when it reported nothing.
    #[serde(default)]
    pub usage: SessionUsage,
}

impl SessionRecord {
    /// The listing view of this record.
    pub fn summary(&self) -> SessionSummary {
        SessionSummary {
            acpx_record_id: self.acpx_record_id.clone(),
            acp_session_id: self.acp_session_id.clone(),
            agent_session_id: self.agent_session_id.clone(),
            agent_command: self.agent_command.clone(),
            cwd: self.cwd.clone(),
            name: self.name.clone(),
            title: (!self.thread.title.is_empty()).then(|| self.thread.title.clone()),
            created_at: self.created_at,
            last_used_at: self.last_used_at,
            closed: self.closed,
            closed_at: self.closed_at,
            last_prompt_at: self.last_prompt_at,
            message_count: self.thread.message_count() as u64,
            revision: self.revision,
            usage: SessionUsage::of(self),
        }
    }
}
