//! Record-level fork: a new record that starts from a parent's conversation and state.
//!
//! Two ways to make the child record, one way to fill it:
//!
//! - the agent forked its own ACP session (`session/fork`): [`create_agent_fork_record`]
//!   creates the child record for the ACP session id it answered;
//! - otherwise the caller opens a fresh session ([`crate::Runtime::open_new`]) and shuts it
//!   down; that record is the child.
//!
//! Then [`record_fork`] records a `session_forked` lifecycle event in the child's log that
//! carries what the child starts from: the parent's conversation and session state (thread,
//! current and desired mode, desired config values, config options, commands) and the origin
//! ([`crate::mapping::fork`] documents the payload). The [`Recorder`] takes the seq, appends,
//! notes the log's state and folds the event in with the reducer, like every live event, so
//! the child's log alone rebuilds its snapshot. The parent is never changed.

use std::sync::Arc;
use std::time::Duration;

use acpx_model::event::LifecycleEventPayload;
use acpx_model::{
    Durability, EventPayload, EventSource, EventStream, LifecyclePhase, NewSession, RecordId,
    SessionRecord, Store, Timestamp,
};
use serde_json::{json, Value};

use super::{OpsError, OpsResult};
use crate::error::RuntimeError;
use crate::mapping::session_forked_payload;
use crate::recorder::{EventDraft, Recorder, DEFAULT_SNAPSHOT_INTERVAL};
use crate::session::load_rolled_forward;

pub use crate::mapping::FORKED_FROM_KEY;

/// How long [`record_fork`] waits for the child's writer lock.
const LOCK_WAIT: Duration = Duration::from_secs(10);

/// How the child got its ACP session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForkMethod {
    /// The agent forked its ACP session (`session/fork`): it keeps the context.
    AgentFork,
    /// A fresh ACP session with a copy of the stored conversation: the agent starts without
    /// the context.
    Copy,
}

impl ForkMethod {
    /// The `method` recorded in `forked_from`: `session/fork` or `copy`.
    pub fn as_str(self) -> &'static str {
        match self {
            ForkMethod::AgentFork => "session/fork",
            ForkMethod::Copy => "copy",
        }
    }
}

/// Whether an agent's `initialize` answer advertises `session/fork`
/// (`agentCapabilities.sessionCapabilities.fork`).
pub fn agent_can_fork(initialize_response: &Value) -> bool {
    initialize_response
        .get("agentCapabilities")
        .and_then(|c| c.get("sessionCapabilities"))
        .and_then(|s| s.get("fork"))
        .is_some_and(Value::is_object)
}

/// The `forked_from` document of a fork of `parent` (as it is now) made with `method` at `at`.
pub fn forked_from(parent: &SessionRecord, method: ForkMethod, at: Timestamp) -> Value {
    json!({
        "acpxRecordId": parent.acpx_record_id,
        "acpSessionId": parent.acp_session_id,
        "seq": parent.acpx.audit_seq,
        "messageCount": parent.thread.message_count(),
        "method": method.as_str(),
        "forkedAt": at,
    })
}

/// Creates the child record of an agent-side fork: record `id` (new) for the ACP session the
/// agent's `session/fork` `answer` names (`sessionId`, `_meta.agentSessionId`,
/// `configOptions`), with the parent's agent, directory, protocol version and capabilities.
/// An answer without a `sessionId` is [`RuntimeError::Protocol`].
pub async fn create_agent_fork_record(
    store: &dyn Store,
    parent: &SessionRecord,
    answer: &Value,
    name: Option<String>,
    id: RecordId,
) -> OpsResult<SessionRecord> {
    let Some(acp_session_id) = answer
        .get("sessionId")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    else {
        return Err(RuntimeError::Protocol {
            method: "session/fork".into(),
            detail: format!("the answer has no sessionId: {answer}"),
        }
        .into());
    };
    let agent_session_id = answer
        .get("_meta")
        .and_then(|m| m.get("agentSessionId"))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned);
    let mut record = SessionRecord::new(
        NewSession {
            acpx_record_id: id,
            acp_session_id: acp_session_id.to_owned(),
            agent_session_id,
            agent_command: parent.agent_command.clone(),
            cwd: parent.cwd.clone(),
            name,
        },
        Timestamp::now(),
    );
    record.protocol_version = parent.protocol_version;
    record.agent_capabilities = parent.agent_capabilities.clone();
    if let Some(opts) = answer.get("configOptions").and_then(Value::as_array) {
        record.acpx.config_options = opts.clone();
    }
    store.create(&mut record).await?;
    Ok(record)
}

/// Makes the stored record `child` a fork of `parent`: records the `session_forked`
/// lifecycle event (payload: [`session_forked_payload`], the origin [`forked_from`], the
/// parent's thread and the session state the child starts from) through a [`Recorder`] with
/// [`Durability::Fsync`], under the child's writer lock. The reducer folds that event into
/// the child like every live event, so the child's snapshot is what rolling its log forward
/// gives. Config options the child already has (from the agent) are kept. Returns the
/// child's snapshot as saved. An append that fails is an error
/// ([`RuntimeError::LogUnwritable`]), as is any store failure.
pub async fn record_fork(
    store: Arc<dyn Store>,
    child: &RecordId,
    parent: &SessionRecord,
    method: ForkMethod,
) -> OpsResult<SessionRecord> {
    let writer = Arc::new(store.lock(child, LOCK_WAIT).await?);
    let (r, _, _, _) = load_rolled_forward(&*store, child).await?;
    let draft = session_forked_draft(parent, &r, method)?;
    let mut recorder = Recorder::new(
        store.clone(),
        &writer,
        r,
        Durability::Fsync,
        DEFAULT_SNAPSHOT_INTERVAL,
    );
    recorder.record(draft).await?;
    if recorder.unwritten() > 0 {
        return Err(RuntimeError::LogUnwritable {
            id: child.clone(),
            detail: recorder
                .snapshot()
                .acpx
                .event_log
                .last_write_error
                .clone()
                .unwrap_or_default(),
        }
        .into());
    }
    // A lifecycle event does not save the snapshot by itself (docs/format.md § Snapshot
    // debounce); this recorder ends here, so it saves now.
    recorder.save_if_dirty().await?;
    Ok(recorder.snapshot().clone())
}

/// The `session_forked` lifecycle event that makes `child` (as stored now) a fork of `parent`
/// made with `method`: payload [`session_forked_payload`] with the origin [`forked_from`],
/// and the child's identity, so its log alone can rebuild a lost snapshot (`docs/format.md`
/// § Damaged snapshots). What [`record_fork`] records, and what a fork served by a live
/// session records through it.
pub fn session_forked_draft(
    parent: &SessionRecord,
    child: &SessionRecord,
    method: ForkMethod,
) -> OpsResult<EventDraft> {
    let origin = forked_from(parent, method, Timestamp::now());
    let mut extra = session_forked_payload(parent, child, origin).map_err(|e| {
        OpsError::Invalid(format!(
            "session {}: its conversation cannot be copied to the fork: {e}",
            parent.acpx_record_id
        ))
    })?;
    crate::ops::repair::add_identity(&mut extra, child);
    Ok(EventDraft::new(
        None,
        EventStream::Lifecycle,
        EventSource::Runtime,
        EventPayload::LifecycleEvent(LifecycleEventPayload {
            phase: LifecyclePhase::SessionForked,
            exit_code: None,
            signal: None,
            reason: None,
            extra,
        }),
    ))
}
