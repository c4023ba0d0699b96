//! `sessions fork`'s flow: the parent attached in an agent process, the fork made there
//! (`session/fork`, else a fresh session and a copy of the conversation), and that process
//! kept for the child ([`fork_keeping_agent`], what the child's queue owner runs) or
//! stopped ([`fork`], `--no-owner`). Some agents keep a fork only in the process that made
//! it until its first turn: a child whose first prompt reattached in another process would
//! find nothing (issue 52).

use std::path::{Path, PathBuf};
use std::time::Duration;

use acpx_model::{RecordId, SessionRecord};
use serde_json::{json, Value};
use tokio::sync::watch;

use super::{
    open_existing, stop_now, take_run, Forked, LocalError, LocalEvent, LocalResult, Presses,
    FORK_REQUEST_ID,
};
use acpx_runtime::error::RuntimeError;
use acpx_runtime::mapping::MCP_SERVERS_KEY;
use acpx_runtime::mcp_servers::McpServers;
use acpx_runtime::ops::fork::{self as fork_ops, ForkMethod};
use acpx_runtime::session::{NewSessionSpec, Runtime, Session};

/// `sessions fork --no-owner`: a new session that starts from the conversation of the stored
/// session `id`, made in an agent process that stops when it is done ([`fork_keeping_agent`]
/// with a fresh record id, then the child's shutdown).
pub async fn fork(
    runtime: &Runtime,
    authority: &Path,
    id: &RecordId,
    name: Option<String>,
    timeout: Option<Duration>,
    interrupts: watch::Receiver<u32>,
    events: impl FnMut(LocalEvent<'_>),
) -> LocalResult<Forked> {
    let (parent, child) = fork_keeping_agent(
        runtime,
        authority,
        id,
        RecordId::generate(),
        name,
        timeout,
        interrupts,
        events,
    )
    .await?;
    let child = child.shutdown().await?;
    Ok(Forked { parent, child })
}

/// A new session `child_id` that starts from the conversation of the stored session `id`,
/// holding the parent's run (request id [`FORK_REQUEST_ID`]) while it forks. With an agent
/// that advertises `session/fork`, the agent forks its own session (it keeps the context),
/// and the process that made the fork becomes the child's ([`Session::hand_agent_to`]);
/// otherwise, or when it answers the fork with -32601 Method not found
/// ([`LocalEvent::ForkByCopy`]), the parent's agent is stopped and the child is a fresh ACP
/// session, in a process of its own, with a copy of the stored conversation. Either way the
/// child's log starts with `session_forked` ([`fork_ops::session_forked_draft`]) and its
/// snapshot is saved before this returns. The parent's record is returned as it is now (the
/// fork does not change its conversation), with the child's live session, whose writer lock
/// `runtime` took (fenced when `runtime` is).
#[allow(clippy::too_many_arguments)]
pub async fn fork_keeping_agent(
    runtime: &Runtime,
    authority: &Path,
    id: &RecordId,
    child_id: RecordId,
    name: Option<String>,
    timeout: Option<Duration>,
    interrupts: watch::Receiver<u32>,
    mut events: impl FnMut(LocalEvent<'_>),
) -> LocalResult<(SessionRecord, Session)> {
    let mut presses = Presses::new(interrupts);
    let (_run, _cancels) =
        take_run(authority, id, FORK_REQUEST_ID, &mut presses, &mut events).await?;
    // `runtime` may be fenced by the lease of the child's queue owner; the parent is not
    // under that lease.
    let parent_runtime = runtime.clone().without_fence();
    let mut session = open_existing(&parent_runtime, id, timeout, &mut presses).await?;
    events(LocalEvent::Opened(&session));
    let parent = session.record().await;
    if fork_ops::agent_can_fork(session.initialize_response()) {
        let params = fork_params(&session, &parent);
        let asked = presses
            .unless_pressed(session.agent_request("session/fork", params))
            .await;
        let Some(answer) = asked else {
            stop_now(session).await;
            return Err(LocalError::Interrupted);
        };
        match answer {
            // Advertised but not served (pydantic-acp lists `fork` while its SDK refuses the
            // unstable method): the agent cannot fork, so fork by copy as if it had not
            // advertised it, rather than failing a fork the copy can do.
            Err(RuntimeError::Agent { error, .. }) if error.code == -32601 => {}
            Err(e) => {
                let _ = session.shutdown().await;
                return Err(e.into());
            }
            Ok(answer) => {
                let forked =
                    agent_fork(runtime, &mut session, &parent, &answer, child_id, name).await;
                return match forked {
                    Ok(parent_now) => Ok((parent_now, session)),
                    Err(e) => {
                        let _ = session.shutdown().await;
                        Err(e)
                    }
                };
            }
        }
    }
    // The child works in the parent's additional directories, as a fork by the agent does.
    let dirs = session.additional_directories().to_vec();
    let parent = session.shutdown().await?;
    events(LocalEvent::ForkByCopy);
    let open = runtime.open_new_with_dirs(
        NewSessionSpec {
            agent_command: parent.agent_command.clone(),
            cwd: PathBuf::from(&parent.cwd),
            name,
        },
        child_id,
        &dirs,
    );
    let fresh = presses
        .unless_pressed(open)
        .await
        .ok_or(LocalError::Interrupted)??;
    events(LocalEvent::Opened(&fresh));
    let mut fresh = fresh;
    let child = fresh.record().await;
    let draft = fork_ops::session_forked_draft(&parent, &child, ForkMethod::Copy)?;
    let forked = async {
        fresh.record_and_save(draft).await?;
        // The fresh session starts in the agent's defaults: the parent's choices, which
        // `session_forked` gave the child, as after an attach.
        fresh.restore_choices().await?;
        fresh.save_now().await
    }
    .await;
    if let Err(e) = forked {
        let _ = fresh.shutdown().await;
        return Err(e.into());
    }
    Ok((parent, fresh))
}

/// `session/fork`'s params: the parent's ACP session, directory and MCP servers (as stored by
/// the attach, in the form this agent takes).
fn fork_params(session: &Session, parent: &SessionRecord) -> Value {
    let servers = parent
        .acpx
        .extra
        .get(MCP_SERVERS_KEY)
        .and_then(|v| McpServers::from_stored(v).ok())
        .unwrap_or_else(McpServers::none);
    let (wire, _) = servers.for_agent(
        session
            .initialize_response()
            .get("agentCapabilities")
            .unwrap_or(&Value::Null),
    );
    let mut params =
        json!({"sessionId": parent.acp_session_id, "cwd": parent.cwd, "mcpServers": wire});
    // The parent's additional directories, checked against the agent when it attached.
    let dirs = session.additional_directories();
    if let (false, Some(obj)) = (dirs.is_empty(), params.as_object_mut()) {
        obj.insert(
            "additionalDirectories".into(),
            json!(dirs
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()),
        );
    }
    params
}

/// The agent forked `parent` (`answer`): the child's record is created under `child_id`,
/// `session` becomes the child's (keeping the agent process), and the child's log gets
/// `session_forked` first. Returns the parent's record as saved.
async fn agent_fork(
    runtime: &Runtime,
    session: &mut Session,
    parent: &SessionRecord,
    answer: &Value,
    child_id: RecordId,
    name: Option<String>,
) -> LocalResult<SessionRecord> {
    let store = runtime.store().clone();
    let record =
        fork_ops::create_agent_fork_record(&*store, parent, answer, name, child_id).await?;
    // The child's log starts with what makes it a fork, then the agent it got.
    let draft = fork_ops::session_forked_draft(parent, &record, ForkMethod::AgentFork)?;
    let parent_now = session
        .hand_agent_to(runtime, &record.acpx_record_id, answer, Some(draft))
        .await?;
    // The agent starts its fork in its defaults: the user's choices, as after an attach.
    session.restore_choices().await?;
    session.save_now().await?;
    Ok(parent_now)
}
