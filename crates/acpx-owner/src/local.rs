//! A turn or a control run in this process, registered in the run registry so that other
//! processes can cancel it and see its status: what `acpx prompt`, `set-mode`, `set` and
//! `sessions fork` do without a queue owner (`--no-owner`), and what `acpx exec` does, below
//! any user interface.
//!
//! [`prompt`], [`control`] and [`fork`] take the session's run ([`crate::runs::acquire`],
//! waiting for a prompt that runs in it), open the stored session (the runtime resumes or
//! loads it, or falls back to a fresh ACP session under the same record id), do their work
//! and shut the agent down. [`exec`] runs one turn in a session the caller describes (a new
//! one, usually in a [`acpx_model::MemoryStore`]), outside the registry.
//!
//! # Interrupts
//!
//! `interrupts` counts the user's requests to stop (the CLI counts Ctrl-Cs); only presses
//! after the call started count.
//!
//! - While waiting for the run, starting the agent, or during a control or a fork, the first
//!   press gives up: the agent is stopped and the result is [`LocalError::Interrupted`].
//! - During a turn, the first press cancels the turn through ACP (`session/cancel`; it ends
//!   with stopReason `cancelled`), and [`LocalEvent::CancellingTurn`] says so; the second
//!   stops the agent at once ([`LocalError::Interrupted`]; the next open records the
//!   unfinished turn as interrupted).
//! - A cancel request through the run socket ([`crate::runs::request_cancel`]) cancels the
//!   turn like the first press. One that arrives before the turn has started is applied as
//!   soon as it starts.
//!
//! Starting the agent of a stored session is bounded by an optional timeout
//! ([`LocalError::StartTimeout`]); a turn's own timeout is
//! [`acpx_runtime::RuntimeOptions::prompt_timeout`]. What the caller should tell the user arrives as
//! [`LocalEvent`]s while the operation runs.

use std::path::Path;
use std::time::Duration;

use acpx_model::{RecordId, SessionRecord};
use serde_json::Value;
use tokio::sync::{mpsc, watch};

use crate::runs::{self, RunGuard, RunInfo, RunsError};
use acpx_runtime::error::{RuntimeError, RuntimeResult};
use acpx_runtime::ops::OpsError;
use acpx_runtime::session::{NewSessionSpec, Runtime, Session};
use acpx_runtime::session::{TurnOptions, TurnOutcome};

mod fork_flow;
pub use fork_flow::{fork, fork_keeping_agent};

/// The request id a [`control`] registers its run under.
pub const CONTROL_REQUEST_ID: &str = "control";
/// The request id a [`fork`] registers its run under.
pub const FORK_REQUEST_ID: &str = "fork";

/// How long stopping the agent after an interrupt may take; past it the session is dropped,
/// which kills the agent's process group at once, so a second Ctrl-C never hangs.
const STOP_BOUND: Duration = Duration::from_secs(4);
/// How often a cancel that arrived before the turn started is tried again.
const CANCEL_RETRY: Duration = Duration::from_millis(20);

/// What a caller may want to tell the user while an operation of this module runs.
#[derive(Debug)]
pub enum LocalEvent<'a> {
    /// Another process holds the session's run (a prompt runs in it); this one waits for it
    /// to finish. What that process's run file says, if it could be read.
    Waiting(Option<&'a RunInfo>),
    /// The agent started and a session is open: the stored one, or the fresh session of a
    /// [`fork`] by copy. Its [`Session::notices`] and [`Session::attachment`] are final.
    Opened(&'a Session),
    /// The first interrupt during a turn: the turn was asked to cancel; another interrupt
    /// stops the agent.
    CancellingTurn,
    /// The turn ended, or was abandoned after a second interrupt; the agent is shut down
    /// next. Output streamed during the turn can be closed now.
    TurnOver,
    /// [`fork`]: the agent does not support `session/fork`, so the new session gets a copy of
    /// the conversation and a fresh ACP session, whose first prompt carries the copy to the
    /// agent (`fork_context`).
    ForkByCopy,
}

/// A finished turn.
#[derive(Debug, Clone)]
pub struct Turn {
    /// How the turn ended (completed, cancelled, timed out, failed), as the runtime tells it.
    /// Its `agent_text` is left empty: the reply is in `record`, read by [`Turn::agent_text`]
    /// without a second copy of it.
    pub outcome: TurnOutcome,
    /// The session as stored after the agent was shut down.
    pub record: SessionRecord,
}

impl Turn {
    /// The agent's reply in this turn, in pieces (join them for one string, or write them out
    /// one by one); a long reply is read from its spill file, which can fail.
    pub fn agent_text(
        &self,
    ) -> impl Iterator<Item = std::io::Result<std::borrow::Cow<'_, str>>> + '_ {
        acpx_runtime::agent_text_parts_after(&self.record, &self.outcome.user_message_id)
    }
}

/// A finished [`control`].
#[derive(Debug, Clone)]
pub struct Controlled<T> {
    /// What the work returned.
    pub value: T,
    /// Whether the agent resumed or loaded the ACP session ([`Session::resumed`]).
    pub resumed: bool,
    /// The session as stored after the agent was shut down.
    pub record: SessionRecord,
}

/// A finished [`fork`].
#[derive(Debug, Clone)]
pub struct Forked {
    /// The parent as it was when forked (after attaching; the fork does not change it).
    pub parent: SessionRecord,
    /// The new session; its `forkedFrom` extra ([`acpx_runtime::ops::fork::FORKED_FROM_KEY`]) says how.
    pub child: SessionRecord,
}

/// Why an operation of this module failed.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    /// The user interrupted (see the module docs); the agent, if it ran, was stopped.
    #[error("interrupted: the agent was stopped")]
    Interrupted,
    /// `acpx cancel` arrived while the agent was starting: the prompt was never sent, and the
    /// agent was stopped.
    #[error(
        "the prompt was withdrawn before its turn started (cancelled while its agent was \
         starting); nothing of it was sent to the agent"
    )]
    Withdrawn,
    /// The agent did not start within the timeout.
    #[error("the agent did not start within {} s", .0.as_secs_f64())]
    StartTimeout(Duration),
    /// Starting the agent, the work, or shutting the agent down failed.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// The run registry failed.
    #[error(transparent)]
    Runs(#[from] RunsError),
    /// A store operation of [`fork`] failed.
    #[error(transparent)]
    Ops(#[from] OpsError),
}

/// The result of this module.
pub type LocalResult<T> = Result<T, LocalError>;

/// The interrupt presses seen since an operation started (also what
/// [`crate::submit`] counts).
pub(crate) struct Presses {
    rx: watch::Receiver<u32>,
    seen: u32,
}

impl Presses {
    pub(crate) fn new(mut rx: watch::Receiver<u32>) -> Presses {
        let seen = *rx.borrow_and_update();
        Presses { rx, seen }
    }

    /// Resolves with the number of new presses (never, once the counter is gone).
    pub(crate) async fn next(&mut self) -> u32 {
        loop {
            if self.rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
            let now = *self.rx.borrow_and_update();
            if now > self.seen {
                let new = now - self.seen;
                self.seen = now;
                return new;
            }
        }
    }

    /// Presses counted but not yet taken by [`Presses::next`].
    fn pending(&self) -> u32 {
        self.rx.borrow().saturating_sub(self.seen)
    }

    /// Runs `fut` unless a press comes first (`None`).
    async fn unless_pressed<T>(&mut self, fut: impl std::future::Future<Output = T>) -> Option<T> {
        tokio::select! {
            r = fut => Some(r),
            _ = self.next() => None,
        }
    }
}

/// Takes the run of session `id`, giving up on a press while waiting for it.
async fn take_run(
    authority: &Path,
    id: &RecordId,
    request_id: &str,
    presses: &mut Presses,
    events: &mut impl FnMut(LocalEvent<'_>),
) -> LocalResult<(RunGuard, mpsc::UnboundedReceiver<()>)> {
    let acquire = runs::acquire(authority, id, request_id, |info| {
        events(LocalEvent::Waiting(info.as_ref()))
    });
    match presses.unless_pressed(acquire).await {
        Some(taken) => Ok(taken?),
        None => Err(LocalError::Interrupted),
    }
}

/// Opens the stored session `id`, bounded by `timeout` and by a press.
async fn open_existing(
    runtime: &Runtime,
    id: &RecordId,
    timeout: Option<Duration>,
    presses: &mut Presses,
) -> LocalResult<Session> {
    let open = async {
        match timeout {
            Some(t) => tokio::time::timeout(t, runtime.open_existing(id))
                .await
                .map_err(|_| LocalError::StartTimeout(t))?
                .map_err(LocalError::from),
            None => runtime.open_existing(id).await.map_err(LocalError::from),
        }
    };
    presses
        .unless_pressed(open)
        .await
        .unwrap_or(Err(LocalError::Interrupted))
}

/// Stops the agent after an interrupt: the terminals it started are killed, the agent gets
/// its short stop sequence and its exit is recorded, within [`STOP_BOUND`].
async fn stop_now(session: Session) {
    let _ = tokio::time::timeout(STOP_BOUND, session.shutdown()).await;
}

/// The next cancel request from the run socket (never, without one).
async fn next_cancel(remote: &mut Option<mpsc::UnboundedReceiver<()>>) -> Option<()> {
    match remote.as_mut() {
        Some(r) => r.recv().await,
        None => std::future::pending().await,
    }
}

/// Runs one turn in `session` with the interrupt rules of the module docs, then shuts the
/// session down (or stops it at once after a second press).
async fn run_turn(
    mut session: Session,
    prompt: Vec<Value>,
    presses: &mut Presses,
    mut remote: Option<mpsc::UnboundedReceiver<()>>,
    events: &mut impl FnMut(LocalEvent<'_>),
) -> LocalResult<Turn> {
    let cancel = session.cancel_handle();
    let mut pressed = 0;
    let result = {
        // The reply is read from the record `shutdown` hands back (`Turn::agent_text`), so
        // the outcome does not hold a second copy of it.
        let options = TurnOptions {
            without_agent_text: true,
            // `shutdown` below saves the turn's end.
            session_ends_after: true,
            ..TurnOptions::default()
        };
        let turn = session.prompt_with_options(prompt, options);
        tokio::pin!(turn);
        let mut pending_cancel = false;
        loop {
            tokio::select! {
                r = &mut turn => break Some(r),
                new = presses.next() => {
                    if pressed == 0 {
                        // The turn may be just starting: then it is cancelled as soon as it runs.
                        pending_cancel = !cancel.cancel();
                        events(LocalEvent::CancellingTurn);
                    }
                    pressed += new;
                    if pressed >= 2 {
                        break None;
                    }
                }
                m = next_cancel(&mut remote) => match m {
                    Some(()) => {
                        if !cancel.cancel() {
                            pending_cancel = true;
                        }
                    }
                    None => remote = None,
                },
                () = tokio::time::sleep(CANCEL_RETRY), if pending_cancel => {
                    if cancel.cancel() {
                        pending_cancel = false;
                    }
                }
            }
        }
    };
    events(LocalEvent::TurnOver);
    let Some(result) = result else {
        stop_now(session).await;
        return Err(LocalError::Interrupted);
    };
    let outcome = match result {
        Ok(mut o) => {
            // A Ctrl-C can end the turn before this loop reads it: typed at a permission
            // question, it answers the question "cancelled", and the agent may end the turn
            // at once. The turn was still cancelled on the user's request (exit 130, not a
            // permission refusal).
            if o.outcome.as_str() == "cancelled" && pressed + presses.pending() > 0 {
                o.cancel_requested = true;
            }
            o
        }
        Err(e) => {
            // The turn's error is the one to report.
            let _ = session.shutdown().await;
            return Err(e.into());
        }
    };
    let record = session.shutdown().await?;
    Ok(Turn { outcome, record })
}

/// `prompt --no-owner`: one turn in the stored session `id`, holding its run under a new
/// request id for the whole turn. `authority` is the store's authority directory
/// ([`crate::authority`]); `timeout`
/// bounds starting the agent.
pub async fn prompt(
    runtime: &Runtime,
    authority: &Path,
    id: &RecordId,
    prompt: Vec<Value>,
    timeout: Option<Duration>,
    interrupts: watch::Receiver<u32>,
    mut events: impl FnMut(LocalEvent<'_>),
) -> LocalResult<Turn> {
    let mut presses = Presses::new(interrupts);
    let request_id = uuid::Uuid::new_v4().to_string();
    let (_run, mut remote) =
        take_run(authority, id, &request_id, &mut presses, &mut events).await?;
    // A cancel while the agent starts withdraws the prompt: the start goes on (stopping an
    // agent half-way through `initialize` or `session/load` would leave less to record),
    // then the agent is stopped without the prompt ever being sent.
    let mut withdrawn = false;
    let session = {
        let open = open_existing(runtime, id, timeout, &mut presses);
        tokio::pin!(open);
        loop {
            tokio::select! {
                opened = &mut open => break opened?,
                Some(()) = remote.recv(), if !withdrawn => withdrawn = true,
            }
        }
    };
    if withdrawn {
        stop_now(session).await;
        return Err(LocalError::Withdrawn);
    }
    events(LocalEvent::Opened(&session));
    run_turn(session, prompt, &mut presses, Some(remote), &mut events).await
}

/// `exec`: starts the agent for a new session `spec` in `runtime`'s store (nothing is
/// registered: the session is the caller's alone) and runs one turn in it.
pub async fn exec(
    runtime: &Runtime,
    spec: NewSessionSpec,
    prompt: Vec<Value>,
    interrupts: watch::Receiver<u32>,
    events: impl FnMut(LocalEvent<'_>),
) -> LocalResult<Turn> {
    exec_with_config(runtime, spec, &[], prompt, interrupts, events).await
}

/// [`exec`], setting the session's ACP config options (`exec --config-option k=v`) in order
/// before the turn. An option the agent refuses fails the command before the prompt is sent.
pub async fn exec_with_config(
    runtime: &Runtime,
    spec: NewSessionSpec,
    config_options: &[(String, String)],
    prompt: Vec<Value>,
    interrupts: watch::Receiver<u32>,
    mut events: impl FnMut(LocalEvent<'_>),
) -> LocalResult<Turn> {
    let mut presses = Presses::new(interrupts);
    let mut session = presses
        .unless_pressed(runtime.open_new(spec))
        .await
        .ok_or(LocalError::Interrupted)??;
    events(LocalEvent::Opened(&session));
    for (key, value) in config_options {
        let set = session.set_config_option(key, Value::String(value.clone()));
        match presses.unless_pressed(set).await {
            Some(Ok(_)) => {}
            Some(Err(e)) => {
                stop_now(session).await;
                return Err(e.into());
            }
            None => {
                stop_now(session).await;
                return Err(LocalError::Interrupted);
            }
        }
    }
    run_turn(session, prompt, &mut presses, None, &mut events).await
}

/// `set-mode`, `set` and the like with `--no-owner`: runs `work` on the stored session `id`
/// while holding its run (request id [`CONTROL_REQUEST_ID`]), then shuts the agent down.
/// An error of `work` is reported before one of the shutdown.
pub async fn control<T>(
    runtime: &Runtime,
    authority: &Path,
    id: &RecordId,
    timeout: Option<Duration>,
    interrupts: watch::Receiver<u32>,
    mut events: impl FnMut(LocalEvent<'_>),
    work: impl AsyncFnOnce(&mut Session) -> RuntimeResult<T>,
) -> LocalResult<Controlled<T>> {
    let mut presses = Presses::new(interrupts);
    // The cancel receiver is held for the run: a cancel sent meanwhile is accepted and finds
    // no turn to cancel.
    let (_run, _cancels) =
        take_run(authority, id, CONTROL_REQUEST_ID, &mut presses, &mut events).await?;
    let mut session = open_existing(runtime, id, timeout, &mut presses).await?;
    events(LocalEvent::Opened(&session));
    let resumed = session.resumed();
    let Some(result) = presses.unless_pressed(work(&mut session)).await else {
        stop_now(session).await;
        return Err(LocalError::Interrupted);
    };
    let record = session.shutdown().await;
    let value = result?;
    Ok(Controlled {
        value,
        resumed,
        record: record?,
    })
}
