//! A session for a scope, found or created: what `acpx sessions new` (also with
//! `--resume-session`) and `acpx sessions ensure` do, below any user interface.
//!
//! Both run under the scope lock ([`crate::runs::lock_scope`]), so that two of them at once
//! create one session, not two.
//!
//! - [`ensure`]: the scope's session (the directory walk of [`acpx_runtime::ops::lookup::find_in_scope`]),
//!   created when there is none.
//! - [`new_session`]: always a new session (or, with a resume id, a new record attached to an
//!   ACP session the agent already has), then the other open sessions of the exact scope are
//!   closed, after cancelling a prompt that runs in them ([`crate::runs::request_cancel`]).
//!   Creating first means a failure leaves the old session usable.
//!
//! Starting the agent is bounded by an optional timeout and by `interrupt`, a future the
//! caller resolves to give up (the CLI resolves it on Ctrl-C). What the caller should tell
//! the user arrives as [`EnsureEvent`]s while the operation runs.

use std::future::Future;
use std::path::Path;
use std::time::Duration;

use acpx_model::{RecordId, SessionRecord};

use super::closing::{self, CloseError};
use crate::client;
use crate::protocol::{Request, TaskOptions};
use crate::runs::{self, RunsError};
use crate::submit::{self, OwnerTarget, SubmitError};
use acpx_runtime::error::RuntimeError;
use acpx_runtime::ops::{lookup, scope, OpsError};
use acpx_runtime::session::{Attachment, NewSessionSpec, Notice, Runtime, Session};

/// A scope: the agent command, the working directory and an optional name.
#[derive(Debug, Clone, Copy)]
pub struct Scope<'a> {
    /// The agent command line (the session's `agentCommand`).
    pub agent_command: &'a str,
    /// The working directory: absolute and existing.
    pub cwd: &'a Path,
    /// The session name; without one, only unnamed sessions belong to the scope.
    pub name: Option<&'a str>,
}

/// What a caller may want to tell the user while [`new_session`] or [`ensure`] runs.
#[derive(Debug)]
pub enum EnsureEvent<'a> {
    /// The agent started and the session is open (new, or attached for a resume); it is shut
    /// down right after. Its [`Session::notices`] and [`Session::attachment`] are final.
    Opened(&'a Session),
    /// The session was created in a queue owner, which keeps its agent warm for the first
    /// turn ([`Creator::Owner`]): what opening it changed.
    OpenedInOwner(&'a [Notice]),
    /// A prompt was running in a session about to be replaced; it was asked to cancel.
    CancelledRunningPrompt(&'a RecordId),
}

/// Where a new session is made.
pub enum Creator<'a> {
    /// In this process: the agent is started, the session created, and the agent stopped
    /// (the first prompt starts it again and reattaches).
    InProcess,
    /// In a queue owner started for the new record id, which keeps the agent that created the
    /// session for its first turn: nothing is reattached, and agents that cannot load a
    /// session that has no message yet are not asked to.
    Owner(Box<OwnerLaunch<'a>>),
}

/// How to start the queue owner of a session to be created.
pub struct OwnerLaunch<'a> {
    /// Starts a detached owner for the record id given (the `acpx` binary's hidden
    /// `__owner` command); called again now and then while none listens.
    pub spawn: &'a (dyn Fn(&RecordId) -> std::io::Result<()> + Send + Sync),
    /// The command's own options (MCP servers, model, auth policy, timeout, TTL).
    pub options: TaskOptions,
}

/// Creates a session in `scope` in a new queue owner (see [`Creator::Owner`]) and returns
/// its record. Bounded by `timeout` and `interrupt`: when either ends the wait, the owner is
/// asked to close the session once it exists (and then to exit), so nothing is left open.
async fn create_in_owner(
    runtime: &Runtime,
    authority: &Path,
    launch: &OwnerLaunch<'_>,
    scope: Scope<'_>,
    timeout: Option<Duration>,
    interrupt: impl Future<Output = ()>,
    on_opened: impl FnMut(&[Notice]),
) -> EnsureResult<SessionRecord> {
    let id = RecordId::generate();
    let spawn = || (launch.spawn)(&id);
    // A new id: no owner holds it anywhere.
    let target = OwnerTarget {
        authority,
        id: &id,
        spawn: &spawn,
        store: None,
    };
    let request = Request::CreateSession {
        agent_command: scope.agent_command.to_owned(),
        cwd: scope.cwd.to_string_lossy().into_owned(),
        name: scope.name.map(str::to_owned),
        options: launch.options.clone(),
    };
    let created = async {
        submit::control(&target, request, on_opened)
            .await
            .map_err(EnsureError::Owner)
    };
    let bounded = async {
        match timeout {
            Some(t) => tokio::time::timeout(t, created)
                .await
                .unwrap_or(Err(EnsureError::StartTimeout(t))),
            None => created.await,
        }
    };
    let outcome = tokio::select! {
        r = bounded => r,
        () = interrupt => Err(EnsureError::Interrupted),
    };
    if let Err(e @ (EnsureError::StartTimeout(_) | EnsureError::Interrupted)) = outcome {
        // The owner finishes what it started; its close comes right after, so the session
        // it makes is closed (and its agent stopped) rather than left open in the scope.
        client::send_and_leave(authority, &id, &Request::Close).await;
        return Err(e);
    }
    outcome?;
    Ok(runtime.store().load(&id).await.map_err(OpsError::from)?)
}

/// The session [`new_session`] or [`ensure`] settled on.
#[derive(Debug, Clone)]
pub struct Ensured {
    /// The session, as stored after the agent was shut down (or as found).
    pub record: SessionRecord,
    /// Whether it was created now (false: [`ensure`] found it).
    pub created: bool,
    /// The last session of the scope that [`new_session`] closed, if any.
    pub replaced: Option<SessionRecord>,
}

/// Why a session could not be found or created.
#[derive(Debug, thiserror::Error)]
pub enum EnsureError {
    /// `interrupt` resolved while the agent was starting; the agent was stopped.
    #[error("interrupted while the agent was starting")]
    Interrupted,
    /// The agent did not start within the timeout.
    #[error("the agent did not start within {} s", .0.as_secs_f64())]
    StartTimeout(Duration),
    /// Starting, attaching or shutting down the agent failed.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// A store operation failed.
    #[error(transparent)]
    Ops(#[from] OpsError),
    /// The scope lock or the run registry failed.
    #[error(transparent)]
    Runs(#[from] RunsError),
    /// The queue owner creating the session failed or could not be reached.
    #[error(transparent)]
    Owner(SubmitError),
    /// A session the new one replaces could not be closed (the new one was created and
    /// stays).
    #[error(transparent)]
    Close(#[from] CloseError),
    /// The agent could not resume or load the ACP session (it would have started a fresh one).
    #[error("the agent could not resume ACP session {acp_session_id:?} ({reason}); no session was created")]
    ResumeFellBack {
        /// The ACP session id asked for.
        acp_session_id: String,
        /// Why resume and load failed.
        reason: String,
    },
    /// The agent created a new ACP session instead of attaching the one asked for.
    #[error("the agent did not attach ACP session {acp_session_id:?}; no session was created")]
    ResumeNotAttached {
        /// The ACP session id asked for.
        acp_session_id: String,
    },
    /// Attaching the existing ACP session failed (the inner error says how); the record made
    /// for it was deleted again.
    #[error(transparent)]
    Resume(Box<EnsureError>),
}

/// The result of this module.
pub type EnsureResult<T> = Result<T, EnsureError>;

/// Runs `open` bounded by `timeout` and `interrupt`.
async fn bounded<T>(
    open: impl Future<Output = Result<T, RuntimeError>>,
    timeout: Option<Duration>,
    interrupt: impl Future<Output = ()>,
) -> EnsureResult<T> {
    let open = async {
        match timeout {
            Some(t) => tokio::time::timeout(t, open)
                .await
                .map_err(|_| EnsureError::StartTimeout(t))?
                .map_err(EnsureError::from),
            None => open.await.map_err(EnsureError::from),
        }
    };
    tokio::select! {
        r = open => r,
        () = interrupt => Err(EnsureError::Interrupted),
    }
}

/// Starts the agent and creates a new session record in `scope`, then shuts the agent down
/// (the record stays open). `on_opened` sees the session before it is shut down.
pub async fn create_session(
    runtime: &Runtime,
    scope: Scope<'_>,
    timeout: Option<Duration>,
    interrupt: impl Future<Output = ()>,
    on_opened: impl FnOnce(&Session),
) -> EnsureResult<SessionRecord> {
    let open = runtime.open_new(NewSessionSpec {
        agent_command: scope.agent_command.to_owned(),
        cwd: scope.cwd.to_owned(),
        name: scope.name.map(str::to_owned),
    });
    let session = bounded(open, timeout, interrupt).await?;
    on_opened(&session);
    Ok(session.shutdown().await?)
}

/// A new record in `scope` for the ACP session `acp_session_id` that the agent already has
/// ([`scope::create_resume_record`]). The agent must resume or load it; when it cannot (it
/// would start a fresh session instead), or anything else fails, the record is deleted again
/// and the error is [`EnsureError::Resume`].
pub async fn resume_session(
    runtime: &Runtime,
    scope: Scope<'_>,
    acp_session_id: &str,
    timeout: Option<Duration>,
    interrupt: impl Future<Output = ()>,
    on_opened: impl FnOnce(&Session),
) -> EnsureResult<SessionRecord> {
    let store = runtime.store().clone();
    let record = scope::create_resume_record(
        &*store,
        acp_session_id,
        scope.agent_command,
        &scope.cwd.to_string_lossy(),
        scope.name,
    )
    .await?;
    let id = record.acpx_record_id.clone();
    let attached = async {
        let session = bounded(runtime.open_existing(&id), timeout, interrupt).await?;
        on_opened(&session);
        let attachment = session.attachment().clone();
        let shut = session.shutdown().await.map_err(EnsureError::from);
        match attachment {
            Attachment::Reattached { .. } => shut,
            Attachment::Fallback { reason, .. } => Err(EnsureError::ResumeFellBack {
                acp_session_id: acp_session_id.to_owned(),
                reason,
            }),
            Attachment::Created => Err(EnsureError::ResumeNotAttached {
                acp_session_id: acp_session_id.to_owned(),
            }),
        }
    }
    .await;
    match attached {
        Ok(record) => Ok(record),
        Err(e) => {
            // Best effort: the error that made us give up is the one to report.
            let _ = store.delete(&id).await;
            Err(EnsureError::Resume(Box::new(e)))
        }
    }
}

/// `sessions new`: under the scope lock, creates a session in `scope` (or, with
/// `resume`, attaches a new record to that ACP session, see [`resume_session`]), then cancels
/// the prompts running in the scope's other open sessions and closes those sessions.
/// `authority` is the store's authority directory ([`crate::authority`]): the run
/// registry, the owners and the scope locks.
pub async fn new_session(
    runtime: &Runtime,
    authority: &Path,
    scope: Scope<'_>,
    resume: Option<&str>,
    timeout: Option<Duration>,
    interrupt: impl Future<Output = ()>,
    events: impl FnMut(EnsureEvent<'_>),
) -> EnsureResult<Ensured> {
    new_session_with(
        runtime,
        authority,
        scope,
        resume,
        Creator::InProcess,
        timeout,
        interrupt,
        events,
    )
    .await
}

/// [`new_session`], the session made by `creator` (a resume is always attached in this
/// process).
#[allow(clippy::too_many_arguments)]
pub async fn new_session_with(
    runtime: &Runtime,
    authority: &Path,
    scope: Scope<'_>,
    resume: Option<&str>,
    creator: Creator<'_>,
    timeout: Option<Duration>,
    interrupt: impl Future<Output = ()>,
    mut events: impl FnMut(EnsureEvent<'_>),
) -> EnsureResult<Ensured> {
    let cwd = scope.cwd.to_string_lossy();
    let _scope_lock = runs::lock_scope(authority, scope.agent_command, &cwd, scope.name).await?;
    let store = runtime.store().clone();
    let previous =
        scope::open_in_exact_scope(&*store, scope.agent_command, &cwd, scope.name).await?;
    let record = match (resume, creator) {
        (Some(acp_id), _) => {
            let opened = |s: &Session| events(EnsureEvent::Opened(s));
            resume_session(runtime, scope, acp_id, timeout, interrupt, opened).await?
        }
        (None, Creator::InProcess) => {
            let opened = |s: &Session| events(EnsureEvent::Opened(s));
            create_session(runtime, scope, timeout, interrupt, opened).await?
        }
        (None, Creator::Owner(launch)) => {
            let opened = |n: &[Notice]| events(EnsureEvent::OpenedInOwner(n));
            create_in_owner(
                runtime, authority, &launch, scope, timeout, interrupt, opened,
            )
            .await?
        }
    };
    let mut replaced = None;
    for old in previous {
        // As `sessions close` does: through the session's queue owner when one runs (an idle
        // one closes it at once; a turn in progress is cancelled), else after cancelling a
        // one-process prompt running in it.
        let closed = closing::close_session(authority, runtime, &old, |_| {
            events(EnsureEvent::CancelledRunningPrompt(&old.acpx_record_id))
        })
        .await?;
        replaced = Some(closed);
    }
    Ok(Ensured {
        record,
        created: true,
        replaced,
    })
}

/// `sessions ensure`: under the scope lock, the scope's session (directory walk, see
/// [`lookup::find_in_scope`]), or a new one ([`create_session`]) when there is none.
/// Idempotent, also when several run at once.
pub async fn ensure(
    runtime: &Runtime,
    authority: &Path,
    scope: Scope<'_>,
    timeout: Option<Duration>,
    interrupt: impl Future<Output = ()>,
    events: impl FnMut(EnsureEvent<'_>),
) -> EnsureResult<Ensured> {
    ensure_with(
        runtime,
        authority,
        scope,
        Creator::InProcess,
        timeout,
        interrupt,
        events,
    )
    .await
}

/// [`ensure`], a session it creates made by `creator`.
pub async fn ensure_with(
    runtime: &Runtime,
    authority: &Path,
    scope: Scope<'_>,
    creator: Creator<'_>,
    timeout: Option<Duration>,
    interrupt: impl Future<Output = ()>,
    mut events: impl FnMut(EnsureEvent<'_>),
) -> EnsureResult<Ensured> {
    let cwd = scope.cwd.to_string_lossy();
    let _scope_lock = runs::lock_scope(authority, scope.agent_command, &cwd, scope.name).await?;
    let store = runtime.store().clone();
    if let Some(found) =
        lookup::find_in_scope(&*store, scope.agent_command, scope.cwd, scope.name).await?
    {
        let record = store
            .load(&found.acpx_record_id)
            .await
            .map_err(OpsError::from)?;
        return Ok(Ensured {
            record,
            created: false,
            replaced: None,
        });
    }
    let record = match creator {
        Creator::InProcess => {
            create_session(runtime, scope, timeout, interrupt, |s| {
                events(EnsureEvent::Opened(s))
            })
            .await?
        }
        Creator::Owner(launch) => {
            let opened = |n: &[Notice]| events(EnsureEvent::OpenedInOwner(n));
            create_in_owner(
                runtime, authority, &launch, scope, timeout, interrupt, opened,
            )
            .await?
        }
    };
    Ok(Ensured {
        record,
        created: true,
        replaced: None,
    })
}
