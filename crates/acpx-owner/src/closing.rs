//! Closing and deleting a stored session while other processes may be using it (`acpx
//! sessions close` / `delete`, and the sessions `sessions new` replaces): a session's queue
//! owner closes it itself (ACP `session/close` when the agent offers it; a turn in progress
//! is cancelled); a one-process prompt running in it is cancelled through its run file and
//! waited for; without either, the session is closed here ([`Runtime::close_stored`]). Every
//! path records `session_closed`. A delete stops an idle owner at once and refuses, at once,
//! a session with a task running or waiting, or an open one unless forced; it sends
//! `session/delete` when the agent advertises it.

use std::path::Path;
use std::time::Duration;

use acpx_model::{RecordId, SessionRecord, StoreError};

use acpx_runtime::session::{AgentSessionDelete, Runtime};

use crate::runs::{self, CancelOutcome, Probe, RunInfo, RunsError};
use crate::submit::{self, SubmitError};
use acpx_runtime::ops::scope::close_with_retry;
use acpx_runtime::ops::OpsError;

/// How long [`close_session`] waits for a cancelled prompt to end.
pub const CANCEL_WAIT: Duration = Duration::from_secs(30);

/// Why [`close_session`] did not close the session.
#[derive(Debug, thiserror::Error)]
pub enum CloseError {
    /// The session's queue owner could not be asked.
    #[error(transparent)]
    Owner(#[from] SubmitError),
    /// The run registry failed.
    #[error(transparent)]
    Runs(#[from] RunsError),
    /// The running prompt accepted the cancel but had not ended after [`CANCEL_WAIT`].
    #[error("the prompt running in session {0} did not end within 30 s of the cancel")]
    StillRunning(RecordId),
    /// Closing the record failed.
    #[error(transparent)]
    Ops(#[from] OpsError),
    /// Reading the record failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Closes `record` of `runtime`'s store (`authority` is that store's authority directory):
/// through its queue owner when one runs, else after cancelling a prompt that runs in it
/// (`on_cancelled` is told, then the prompt is waited for up to [`CANCEL_WAIT`]), retrying
/// while another process holds the record. Returns the record as closed.
pub async fn close_session(
    authority: &Path,
    runtime: &Runtime,
    record: &SessionRecord,
    on_cancelled: impl FnOnce(&RunInfo),
) -> Result<SessionRecord, CloseError> {
    let id = &record.acpx_record_id;
    if submit::close_anywhere(Some(runtime.store()), authority, id).await? {
        let closed = runtime.store().load(id).await?;
        if closed.closed {
            return Ok(closed);
        }
    }
    if let CancelOutcome::StillRunning(_) =
        runs::cancel_and_wait(authority, id, CANCEL_WAIT, on_cancelled).await?
    {
        return Err(CloseError::StillRunning(id.clone()));
    }
    Ok(close_with_retry(runtime, id).await?)
}

/// Why [`delete_session`] did not delete the session.
#[derive(Debug, thiserror::Error)]
pub enum DeleteError {
    /// The session's queue owner could not be stopped.
    #[error(transparent)]
    Owner(#[from] SubmitError),
    /// The run registry failed.
    #[error(transparent)]
    Runs(#[from] RunsError),
    /// A prompt runs in the session.
    #[error("session {0} has a prompt running; refusing to delete it")]
    Running(RecordId),
    /// The session is open and the delete was not forced.
    #[error("session {0} is open; refusing to delete an open session")]
    Open(RecordId),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What [`delete_session`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deleted {
    /// Whether the store had anything to delete.
    pub existed: bool,
    /// What became of the agent's own copy of the session (`session/delete`).
    pub agent: AgentSessionDelete,
}

/// Deletes `record` and its whole log from `runtime`'s store: stops its queue owner first,
/// refuses while a prompt runs in it, and refuses an open session unless `force`. Before the
/// store's delete, the agent is asked to delete its own copy when it advertises
/// `session/delete` ([`Runtime::delete_agent_session`], best effort).
pub async fn delete_session(
    authority: &Path,
    runtime: &Runtime,
    record: &SessionRecord,
    force: bool,
) -> Result<Deleted, DeleteError> {
    let id = &record.acpx_record_id;
    let store = runtime.store();
    submit::release_idle_anywhere(Some(store), authority, id).await?;
    if let Probe::Running(_) = runs::probe(authority, id)? {
        return Err(DeleteError::Running(id.clone()));
    }
    if !record.closed && !force {
        return Err(DeleteError::Open(id.clone()));
    }
    let agent = runtime.delete_agent_session(record).await;
    let existed = store.delete(id).await?;
    Ok(Deleted { existed, agent })
}
