//! `session/list`: the sessions the agent itself keeps (`acpx sessions list --from-agent`),
//! whichever client made them.
//!
//! The agent is started just for this: `initialize` (and `authenticate` when a credential
//! matches), then `session/list` — with `cwd` when the caller filters by directory, and
//! `cursor` from the previous page's `nextCursor` — until the agent has no more pages or the
//! caller's limit is reached; then it is stopped. Nothing is recorded. An agent that does not
//! advertise `sessionCapabilities.list` is refused before anything is sent to it.

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::attach::{check_cwd, fs_root, Setup};
use super::Runtime;
use crate::core::SessionCore;
use crate::error::{RuntimeError, RuntimeResult};

/// Most pages followed in one listing: an agent whose cursors never end cannot hold acpx.
const MAX_PAGES: usize = 10_000;

/// What to list.
#[derive(Debug, Clone)]
pub struct AgentListQuery {
    /// The agent command line.
    pub agent_command: String,
    /// Where the agent runs.
    pub cwd: PathBuf,
    /// Only the sessions of this directory (the `cwd` of `session/list`); `None`: every one.
    pub filter_cwd: Option<PathBuf>,
    /// Start at this cursor (a `nextCursor` the agent gave before).
    pub cursor: Option<String>,
    /// At most this many sessions.
    pub limit: Option<usize>,
}

/// One session as the agent lists it (ACP `SessionInfo`).
#[derive(Debug, Clone, PartialEq)]
pub struct AgentSession {
    /// The ACP session id.
    pub session_id: String,
    /// Its working directory.
    pub cwd: String,
    /// Its title, when the agent gives one.
    pub title: Option<String>,
    /// Its last activity (ISO 8601, as the agent wrote it).
    pub updated_at: Option<String>,
    /// Its additional workspace roots.
    pub additional_directories: Vec<String>,
    /// The `SessionInfo` exactly as the agent sent it (unknown keys and `_meta` included).
    pub raw: Value,
}

/// The listing.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AgentSessionList {
    /// The sessions, in the agent's order.
    pub sessions: Vec<AgentSession>,
    /// The cursor that continues the listing after the last session listed, when the agent
    /// has more and the listing stopped at the end of one of its pages.
    pub next_cursor: Option<String>,
    /// Whether the limit cut a page of the agent's: more sessions follow, but no cursor
    /// resumes exactly after the last one listed (a larger limit lists them).
    pub truncated: bool,
    /// Pages the agent answered.
    pub pages: usize,
}

/// Whether `agent_capabilities` (an `initialize` answer's) advertise `session/list`.
pub fn advertises_list(agent_capabilities: &Value) -> bool {
    agent_capabilities
        .pointer("/sessionCapabilities/list")
        .is_some_and(Value::is_object)
}

impl Runtime {
    /// Lists the agent's own sessions (see the module docs).
    pub async fn list_agent_sessions(&self, q: &AgentListQuery) -> RuntimeResult<AgentSessionList> {
        let cwd = check_cwd(&q.cwd)?;
        if let Some(f) = &q.filter_cwd {
            if !f.is_absolute() {
                return Err(RuntimeError::InvalidInput(format!(
                    "the directory to list sessions of, {}, is not an absolute path",
                    f.display()
                )));
            }
        }
        let core = Arc::new(SessionCore::new(cwd.clone(), fs_root(&cwd)?, self.policy()));
        let (agent, mut conn) = self.start_agent(&q.agent_command, &cwd, &core).await?;
        let setup = Setup {
            runtime: self,
            core: &core,
            agent: &agent,
            conn: &conn,
        };
        let listed = async {
            let mut setup = setup;
            let init = setup.initialize().await?;
            if !advertises_list(init.get("agentCapabilities").unwrap_or(&Value::Null)) {
                return Err(RuntimeError::InvalidInput(format!(
                    "the agent `{}` does not advertise sessionCapabilities.list, so it cannot \
                     list its sessions (session/list)",
                    q.agent_command
                )));
            }
            setup.authenticate(&init).await?;
            follow_pages(&setup, q).await
        }
        .await;
        conn.shutdown().await;
        agent.stop().await;
        listed
    }
}

/// `session/list` page after page.
async fn follow_pages(setup: &Setup<'_>, q: &AgentListQuery) -> RuntimeResult<AgentSessionList> {
    let mut out = AgentSessionList::default();
    let mut cursor = q.cursor.clone();
    loop {
        let mut params = Map::new();
        if let Some(dir) = &q.filter_cwd {
            params.insert("cwd".into(), json!(dir));
        }
        if let Some(c) = &cursor {
            params.insert("cursor".into(), json!(c));
        }
        let page = setup
            .call("session/list", Value::Object(params), |_| {})
            .await?;
        out.pages += 1;
        let sessions = page
            .get("sessions")
            .and_then(Value::as_array)
            .ok_or_else(|| RuntimeError::Protocol {
                method: "session/list".into(),
                detail: format!("no sessions array in {page}"),
            })?;
        let next = page
            .get("nextCursor")
            .and_then(Value::as_str)
            .filter(|c| !c.is_empty())
            .map(str::to_owned);
        let room = q.limit.map_or(usize::MAX, |l| l - out.sessions.len());
        let parsed: Vec<AgentSession> = sessions.iter().filter_map(session_info).collect();
        if parsed.len() > room {
            out.sessions.extend(parsed.into_iter().take(room));
            out.truncated = true;
            return Ok(out);
        }
        out.sessions.extend(parsed);
        let full = q.limit.is_some_and(|l| out.sessions.len() >= l);
        match next {
            Some(c) if full || out.pages >= MAX_PAGES => {
                out.next_cursor = Some(c);
                return Ok(out);
            }
            Some(c) if cursor.as_deref() == Some(c.as_str()) => {
                return Err(RuntimeError::Protocol {
                    method: "session/list".into(),
                    detail: format!("the agent answered cursor {c:?} with the same cursor"),
                })
            }
            Some(c) => cursor = Some(c),
            None => return Ok(out),
        }
    }
}

/// A `SessionInfo`; one without a `sessionId` or `cwd` is skipped, as the schema's reader
/// skips invalid items.
fn session_info(v: &Value) -> Option<AgentSession> {
    let text = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    let session_id = text("sessionId").filter(|s| !s.is_empty())?;
    let cwd = text("cwd")?;
    Some(AgentSession {
        session_id,
        cwd,
        title: text("title"),
        updated_at: text("updatedAt"),
        additional_directories: v
            .get("additionalDirectories")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default(),
        raw: v.clone(),
    })
}
