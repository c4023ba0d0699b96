//! Work for a session's queue owner, below any user interface: submit a prompt and follow
//! its answer (events, notices, forwarded permission questions, cancel on interrupt,
//! `--no-wait`), run a control, and ask a running owner for its status, a cancel, a close
//! or to step aside. What the CLI's `prompt`, `set-mode`, `set`, `cancel` and `status` do
//! when the session has a queue owner (`docs/format.md`, § Queue owner).
//!
//! # Interrupts
//!
//! `interrupts` counts the user's requests to stop, as for [`crate::local`]; only
//! presses after the call started count. The first press while a turn is followed asks the
//! owner to cancel it ([`SubmitEvent::CancellingTurn`]); the second stops following
//! ([`SubmitError::Interrupted`]): the turn goes on in the owner, which records it.

use std::path::Path;
use std::time::Duration;

use acpx_model::{EventEnvelope, RecordId};
use serde_json::Value;
use tokio::sync::watch;

use std::sync::Arc;

use acpx_model::Store;

use super::client::{self, Reached};
use super::forwarded_questions::{Asking, ForPrompt};
use super::lease::{self, LeasePaths};
use super::protocol::{OwnerStatus, Request, Response, TaskOptions, WireError, WireNotice};
use super::remote_client::{self, Following};
use crate::local::Presses;
use crate::runs::{self, Probe, RunInfo, RunsError};
use acpx_runtime::session::{Notice, TurnOutcome};
use acpx_runtime::PermissionPrompter;

/// Where the owner of one session is found, and how to start one when none runs.
pub struct OwnerTarget<'a> {
    /// The store's authority directory ([`crate::authority`]): where the owner's lease and
    /// socket live.
    pub authority: &'a Path,
    /// The session.
    pub id: &'a RecordId,
    /// Starts a detached owner for the session (the `acpx` binary runs
    /// [`super::run_owner`] in a hidden subcommand); called again now and then while none
    /// listens ([`client::send_or_spawn`]).
    pub spawn: &'a (dyn Fn() -> std::io::Result<()> + Send + Sync),
    /// The session's store: when it has a task queue across hosts and another host's owner
    /// holds the session, the request is queued there for it ([`remote_client`]).
    pub store: Option<&'a Arc<dyn Store>>,
}

/// What a caller may want to tell the user while a submitted task runs.
#[derive(Debug)]
pub enum SubmitEvent<'a> {
    /// The owner accepted the turn behind this many tasks of the same session (only said
    /// when there are some and the caller waits).
    Queued(usize),
    /// The owner started the task; what (re)attaching the session changed.
    Started(&'a [Notice]),
    /// One event of the turn, after its append returned.
    Event(&'a EventEnvelope),
    /// The first interrupt: the owner was asked to cancel the turn; another interrupt stops
    /// waiting.
    CancellingTurn,
    /// The answer to a forwarded permission question could not be sent to the owner.
    PermissionAnswerFailed(&'a std::io::Error),
    /// The turn ended (a result or an error follows, after the reply's parts when the task
    /// set [`TaskOptions::reply_in_parts`]); streamed output can be closed now.
    TurnOver,
    /// A piece of the reply, in order (only when the task set
    /// [`TaskOptions::reply_in_parts`]; then the outcome's `agent_text` is empty, unless the
    /// owner predates the flag and sent it whole). Print it and let it go: the reply is not
    /// kept.
    ReplyPart(&'a str),
    /// One raw JSON-RPC line of the agent connection, as the owner saw it cross (only when
    /// the task set [`TaskOptions::acp_frames`]): which way, and the line.
    Frame(acpx_runtime::WireDirection, &'a str),
}

/// How a [`prompt`] ended.
#[derive(Debug, Clone)]
pub enum Submitted {
    /// `wait` was false: the owner queued the turn under this request id.
    Queued {
        /// The turn's `requestId` in the log.
        request_id: String,
        /// Tasks of the session ahead of it when it was accepted (the one running included).
        queue_depth: usize,
    },
    /// The turn ended, however it went.
    Finished(Box<TurnOutcome>),
}

impl Submitted {
    fn queued(request_id: String, queue_depth: usize) -> Submitted {
        Submitted::Queued {
            request_id,
            queue_depth,
        }
    }
}

/// Why talking to the queue owner failed.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// The owner, or starting it, failed; as the owner's wire protocol reports it.
    #[error("{}", .0.message)]
    Wire(WireError),
    /// Two interrupts: this caller stopped waiting; the turn goes on in the owner.
    #[error("interrupted: the turn goes on in the session's queue owner")]
    Interrupted,
    /// A running owner's socket could not be used.
    #[error("cannot reach the queue owner: {0}")]
    Unreachable(std::io::Error),
    /// The owner answered with a response that does not fit the request.
    #[error("the queue owner answered {request} with {answer}")]
    Unexpected {
        /// What was asked (`a prompt`, `a control`, `cancel`, `close`).
        request: &'static str,
        /// The response, debug-printed.
        answer: String,
    },
    /// The run registry failed ([`probe_run`]).
    #[error(transparent)]
    Runs(#[from] RunsError),
}

/// The result of this module.
pub type SubmitResult<T> = Result<T, SubmitError>;

fn unexpected(request: &'static str, answer: &Response) -> SubmitError {
    SubmitError::Unexpected {
        request,
        answer: format!("{answer:?}"),
    }
}

fn into_notices(notices: Vec<WireNotice>) -> Vec<Notice> {
    notices.into_iter().map(Notice::from).collect()
}

/// Reaches the session's owner: a local one (started when none runs), or the live owner on
/// another host through the store. A local owner that never answers and whose store lease
/// expired is frozen: it is ended and a new one started ([`super::frozen`]).
async fn send_or_spawn(target: &OwnerTarget<'_>, request: &Request) -> SubmitResult<Following> {
    match reach(target, request).await {
        Err(SubmitError::Wire(e))
            if e.detail_code.as_deref() == Some("QUEUE_OWNER_UNRESPONSIVE") =>
        {
            match target.store {
                Some(store)
                    if super::frozen::end_frozen_owner(&**store, target.authority, target.id)
                        .await =>
                {
                    reach(target, request).await
                }
                _ => Err(SubmitError::Wire(e)),
            }
        }
        other => other,
    }
}

/// [`send_or_spawn`] without the frozen owner's replacement.
async fn reach(target: &OwnerTarget<'_>, request: &Request) -> SubmitResult<Following> {
    let elsewhere = async || {
        let Some(store) = target.store else {
            return Ok(None);
        };
        match remote_client::owner_elsewhere(&**store, target.authority, target.id).await? {
            Some(owner) if store.remote_tasks().is_some() => {
                remote_client::submit(store, target.id, request, owner)
                    .await
                    .map(Some)
            }
            Some(owner) => Err(remote_client::unreachable_owner(target.id, &owner)),
            None => Ok(None),
        }
    };
    match client::send_or_spawn_or(
        target.authority,
        target.id,
        request,
        target.spawn,
        elsewhere,
    )
    .await
    .map_err(SubmitError::Wire)?
    {
        Reached::Local(a) => Ok(Following::Local(a)),
        Reached::Elsewhere(r) => Ok(Following::Remote(Box::new(r))),
    }
}

/// How long a client following a turn lets its owner be silent before it checks that the
/// owner still renews its lease.
const SILENCE_CHECK: Duration = Duration::from_secs(5);

/// Resolves once the local owner being followed has been silent a while and is frozen
/// (`frozen::frozen_now`); never for an owner on another host (its task answers say when it
/// went) or without a store. A turn may run long without a line to its client, but its owner
/// renews its lease meanwhile, so the client never waits on an owner that froze mid-turn.
async fn frozen_while_silent(target: &OwnerTarget<'_>, local: bool) {
    let Some(store) = target.store.filter(|_| local) else {
        return std::future::pending().await;
    };
    loop {
        tokio::time::sleep(SILENCE_CHECK).await;
        if super::frozen::frozen_now(&**store, target.authority, target.id).await {
            return;
        }
    }
}

/// Withdraws the queued prompt `request_id` (best effort, bounded): its owner drops it
/// instead of running it later.
async fn withdraw(target: &OwnerTarget<'_>, answer: &mut Following, request_id: &str) {
    let request = Request::Withdraw {
        request_id: request_id.to_owned(),
    };
    let done = async {
        match answer {
            Following::Local(_) => {
                let _ = ask_running(target.authority, target.id, request).await;
            }
            Following::Remote(r) => r.withdraw(request).await,
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(5), done).await;
}

/// Whether `e` says a task was withdrawn, untaken, because its owner on another host went:
/// nothing ran, and the request can be sent again (to an owner started here).
fn untaken(e: &WireError) -> bool {
    e.detail_code.as_deref() == Some(remote_client::OWNER_GONE_UNTAKEN)
}

/// Submits a prompt to the session's owner (starting one when none runs) and follows it.
///
/// With `wait` false the result is [`Submitted::Queued`] as soon as the owner accepted the
/// turn. With a `prompter`, the owner forwards the turn's permission questions and they are
/// asked through it (`options.interactive` is set accordingly); without one they are refused.
pub async fn prompt(
    target: &OwnerTarget<'_>,
    prompt: Vec<Value>,
    mut options: TaskOptions,
    wait: bool,
    prompter: Option<&dyn PermissionPrompter>,
    interrupts: watch::Receiver<u32>,
    mut events: impl FnMut(SubmitEvent<'_>),
) -> SubmitResult<Submitted> {
    let request_id = uuid::Uuid::new_v4().to_string();
    options.interactive = prompter.is_some();
    options.elicitations = prompter.is_some();
    let request = Request::SubmitPrompt {
        request_id: request_id.clone(),
        prompt,
        options,
        wait,
    };
    let mut presses = Presses::new(interrupts);
    // Ctrl-C and SIGTERM count from the start: reaching an owner (starting one) may take a
    // while, and one that does not answer must not hold the user.
    let mut answer = tokio::select! {
        a = send_or_spawn(target, &request) => a?,
        _ = presses.next() => return Err(SubmitError::Interrupted),
    };
    let mut cancels = 0u32;
    let mut started = false;
    let turn_over = std::cell::Cell::new(false);
    let over = |events: &mut dyn FnMut(SubmitEvent<'_>)| {
        if !turn_over.replace(true) {
            events(SubmitEvent::TurnOver);
        }
    };
    loop {
        let local = matches!(answer, Following::Local(_));
        let next = tokio::select! {
            n = answer.next() => n,
            () = frozen_while_silent(target, local) => {
                return Err(SubmitError::Wire(WireError::runtime(
                    "QUEUE_OWNER_UNRESPONSIVE",
                    "the queue owner stopped renewing its lease and sends nothing: it is \
                     stopped or stuck, and the outcome of this prompt is unknown (the next \
                     command ends that owner and starts another)",
                    true,
                )));
            }
            new = presses.next() => {
                // The turn is over and recorded; its reply is arriving. The owner may be
                // running the next client's turn already: a cancel now would stop that one.
                // Stop reading instead.
                if turn_over.get() {
                    return Err(SubmitError::Interrupted);
                }
                // Still waiting its turn: the user withdraws this prompt, never another
                // client's running turn.
                if !started {
                    withdraw(target, &mut answer, &request_id).await;
                    return Err(SubmitError::Interrupted);
                }
                let before = cancels;
                cancels += new;
                if before == 0 {
                    events(SubmitEvent::CancellingTurn);
                    let _ = cancel_anywhere(target.store, target.authority, target.id).await;
                }
                if cancels > 1 {
                    return Err(SubmitError::Interrupted);
                }
                continue;
            }
        };
        let next = match next {
            Err(e) if untaken(&e) => {
                answer = send_or_spawn(target, &request).await?;
                continue;
            }
            other => other,
        };
        match next.map_err(SubmitError::Wire)? {
            None => return Err(SubmitError::Wire(WireError::disconnected())),
            Some(Response::Accepted { queue_depth, .. }) => {
                if !wait {
                    return Ok(Submitted::queued(request_id, queue_depth));
                }
                if queue_depth > 0 {
                    events(SubmitEvent::Queued(queue_depth));
                }
            }
            Some(Response::Started { notices, .. }) => {
                started = true;
                events(SubmitEvent::Started(&into_notices(notices)));
            }
            Some(Response::Event { envelope }) => events(SubmitEvent::Event(&envelope)),
            Some(Response::Frame { direction, line }) => {
                let direction = match direction.as_str() {
                    "outbound" => acpx_runtime::WireDirection::ToAgent,
                    // A line of the agent's stderr (`TaskOptions::verbose`): where the
                    // one-process path puts it, the `acpx::agent_stderr` debug target.
                    "stderr" => {
                        tracing::debug!(target: "acpx::agent_stderr", "{line}");
                        continue;
                    }
                    _ => acpx_runtime::WireDirection::FromAgent,
                };
                events(SubmitEvent::Frame(direction, &line));
            }
            Some(Response::PermissionRequest { id: qid, question }) => {
                let mut prompt = Prompting(target, &mut events);
                let asking = Asking::new(&mut answer, prompter, &mut presses, &mut prompt);
                cancels += asking.permission(qid, question).await;
            }
            Some(Response::ElicitationRequest { id: qid, request }) => {
                let mut prompt = Prompting(target, &mut events);
                let asking = Asking::new(&mut answer, prompter, &mut presses, &mut prompt);
                cancels += asking.elicitation(qid, &request).await;
            }
            Some(Response::ElicitationEnded { .. }) => {}
            Some(Response::ReplyPart { text }) => {
                over(&mut events);
                events(SubmitEvent::ReplyPart(&text));
            }
            Some(Response::Result { outcome }) => {
                over(&mut events);
                return Ok(Submitted::Finished(Box::new(outcome.into())));
            }
            Some(Response::Error { error }) => {
                over(&mut events);
                return Err(SubmitError::Wire(error));
            }
            Some(other) => return Err(unexpected("a prompt", &other)),
        }
    }
}

/// A prompt's side of a forwarded question: the caller told, the turn cancelled.
struct Prompting<'a, 'b, E>(&'a OwnerTarget<'b>, &'a mut E);

#[async_trait::async_trait(?Send)]
impl<E: FnMut(SubmitEvent<'_>)> ForPrompt for Prompting<'_, '_, E> {
    async fn cancel_turn(&mut self) {
        (self.1)(SubmitEvent::CancellingTurn);
        let _ = cancel_anywhere(self.0.store, self.0.authority, self.0.id).await;
    }

    fn answer_failed(&mut self, e: &std::io::Error) {
        (self.1)(SubmitEvent::PermissionAnswerFailed(e));
    }
}

/// Submits a control (`Request::SetMode` or `Request::SetConfigOption`) to the session's
/// owner (starting one when none runs): the agent's answer and whether the session was
/// reattached. `notices` hears what (re)attaching changed.
pub async fn control(
    target: &OwnerTarget<'_>,
    request: Request,
    mut notices: impl FnMut(&[Notice]),
) -> SubmitResult<(Value, bool)> {
    let mut answer = send_or_spawn(target, &request).await?;
    loop {
        let r = match answer.next().await {
            Err(e) if untaken(&e) => {
                answer = send_or_spawn(target, &request).await?;
                continue;
            }
            r => r.map_err(SubmitError::Wire)?,
        };
        let Some(r) = r else { break };
        match r {
            Response::Accepted { .. } | Response::Event { .. } => {}
            Response::Started { notices: n, .. } => notices(&into_notices(n)),
            Response::ControlResult { resumed, value } => return Ok((value, resumed)),
            Response::Error { error } => return Err(SubmitError::Wire(error)),
            other => return Err(unexpected("a control", &other)),
        }
    }
    Err(SubmitError::Wire(WireError::disconnected()))
}

/// Sends `request` to a running owner and returns its final response; `None` when none runs.
async fn ask_running(
    authority: &Path,
    id: &RecordId,
    request: Request,
) -> SubmitResult<Option<Response>> {
    ask_running_anywhere(None, authority, id, request).await
}

/// [`ask_running`], reaching an owner on another host through `store` when none runs here.
async fn ask_running_anywhere(
    store: Option<&Arc<dyn Store>>,
    authority: &Path,
    id: &RecordId,
    request: Request,
) -> SubmitResult<Option<Response>> {
    let Some(answer) = remote_client::send_if_running_anywhere(store, authority, id, &request)
        .await
        .map_err(SubmitError::Wire)?
    else {
        return Ok(None);
    };
    match answer.last().await {
        Err(e) if untaken(&e) => Ok(None),
        Err(e) => Err(SubmitError::Wire(e)),
        Ok(Response::Error { error }) => Err(SubmitError::Wire(error)),
        Ok(r) => Ok(Some(r)),
    }
}

/// What an owner did with a `cancel`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CancelAnswer {
    /// A turn was running and was asked to cancel, or a prompt was withdrawn.
    pub cancelled: bool,
    /// The prompt had not started (its agent was starting): withdrawn, never run.
    pub withdrawn: bool,
    /// The cancelled turn's (or withdrawn prompt's) request id.
    pub request_id: Option<String>,
}

fn cancel_answer(r: Response) -> SubmitResult<CancelAnswer> {
    match r {
        Response::CancelResult {
            cancelled,
            withdrawn,
            request_id,
        } => Ok(CancelAnswer {
            cancelled,
            withdrawn,
            request_id,
        }),
        other => Err(unexpected("cancel", &other)),
    }
}

/// Asks the owner of `id`, here or on another host (through `store`), to cancel its turn,
/// or to withdraw the prompt whose agent is starting: `None` when none runs.
pub async fn cancel_anywhere(
    store: Option<&Arc<dyn Store>>,
    authority: &Path,
    id: &RecordId,
) -> SubmitResult<Option<CancelAnswer>> {
    ask_running_anywhere(store, authority, id, Request::Cancel)
        .await?
        .map(cancel_answer)
        .transpose()
}

/// Asks the owner of `id` on another host (through `store`) to stop once idle, or at once
/// (`request`: [`Request::Release`] or [`Request::ReleaseIdle`]), and waits up to `max`
/// for its lease to be released. Returns whether such an owner ran.
async fn release_remote(
    store: Option<&Arc<dyn Store>>,
    authority: &Path,
    id: &RecordId,
    request: Request,
    max: Duration,
) -> SubmitResult<bool> {
    let Some(store) = store else {
        return Ok(false);
    };
    let Some(owner) = remote_client::remote_owner(&**store, authority, id)
        .await
        .map_err(SubmitError::Wire)?
    else {
        return Ok(false);
    };
    let answer = remote_client::submit(store, id, &request, owner)
        .await
        .map_err(SubmitError::Wire)?;
    match Following::Remote(Box::new(answer)).last().await {
        Ok(Response::Error { error }) if error.detail_code.as_deref() == Some("SESSION_BUSY") => {
            return Err(SubmitError::Wire(error))
        }
        _ => {}
    }
    let start = tokio::time::Instant::now();
    while remote_client::remote_owner(&**store, authority, id)
        .await
        .map_err(SubmitError::Wire)?
        .is_some()
    {
        if start.elapsed() >= max {
            return Err(SubmitError::Wire(WireError::runtime(
                "QUEUE_OWNER_SHUTTING_DOWN",
                format!(
                    "the queue owner of session {id} on another host did not stop within {} s",
                    max.as_secs()
                ),
                true,
            )));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(true)
}

/// Asks a running owner (of this host) to cancel its turn, or to withdraw the prompt whose
/// agent is starting: `None` when no owner runs.
pub async fn cancel(authority: &Path, id: &RecordId) -> SubmitResult<Option<CancelAnswer>> {
    ask_running(authority, id, Request::Cancel)
        .await?
        .map(cancel_answer)
        .transpose()
}

/// A running owner's state, `None` when none runs.
pub async fn status(authority: &Path, id: &RecordId) -> SubmitResult<Option<OwnerStatus>> {
    match ask_running(authority, id, Request::Status).await? {
        Some(Response::Status { status }) => Ok(Some(status)),
        _ => Ok(None),
    }
}

/// Whether a prompt runs in session `id`: in its queue owner, or in a one-process prompt
/// (its run file, [`runs::probe_record`]).
pub async fn probe_run(
    authority: &Path,
    record: &acpx_model::SessionRecord,
) -> SubmitResult<Probe> {
    let id = &record.acpx_record_id;
    if let Some(owner) = status(authority, id).await? {
        return Ok(match owner.running {
            Some(request_id) => Probe::Running(Some(RunInfo {
                pid: owner.pid,
                request_id,
                started_at: owner.started_at,
                socket: LeasePaths::new(authority, id).socket,
            })),
            None => Probe::Idle,
        });
    }
    Ok(runs::probe_record(authority, record)?)
}

/// Asks a running owner to close the session (ACP `session/close` when advertised, record
/// closed, owner and agent gone) and waits for its lease. Returns whether an owner did it.
pub async fn close(authority: &Path, id: &RecordId) -> SubmitResult<bool> {
    let paths = LeasePaths::new(authority, id);
    match ask_running(authority, id, Request::Close).await? {
        None => return Ok(false),
        Some(Response::Closed { .. }) => {}
        Some(other) => return Err(unexpected("close", &other)),
    }
    // The owner exits right after answering; wait for its lease so nothing of it is left.
    for _ in 0..200 {
        if !lease::is_alive(&paths) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    Ok(true)
}

/// [`close`], reaching an owner on another host through `store` when none runs here; waits
/// for that owner's lease to be released.
pub async fn close_anywhere(
    store: Option<&Arc<dyn Store>>,
    authority: &Path,
    id: &RecordId,
) -> SubmitResult<bool> {
    if close(authority, id).await? {
        return Ok(true);
    }
    match ask_running_anywhere(store, authority, id, Request::Close).await? {
        None => return Ok(false),
        Some(Response::Closed { .. }) => {}
        Some(other) => return Err(unexpected("close", &other)),
    }
    if let Some(store) = store {
        for _ in 0..200 {
            let gone = remote_client::remote_owner(&**store, authority, id)
                .await
                .map_err(SubmitError::Wire)?
                .is_none();
            if gone {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
    Ok(true)
}

/// [`release`], and the owner on another host through `store` (it finishes its queue
/// first), so this process can take the session's writer lock; waits up to `max` for it.
pub async fn release_anywhere(
    store: Option<&Arc<dyn Store>>,
    authority: &Path,
    id: &RecordId,
    max: Duration,
) -> SubmitResult<()> {
    release_here_and_there(store, authority, id, Request::Release, max).await
}

/// `request` ([`Request::Release`] or [`Request::ReleaseIdle`]) to the owner here, then to
/// the owner on another host; waits up to `max` for each to let go.
async fn release_here_and_there(
    store: Option<&Arc<dyn Store>>,
    authority: &Path,
    id: &RecordId,
    request: Request,
    max: Duration,
) -> SubmitResult<()> {
    client::release(authority, id, &request, max)
        .await
        .map_err(SubmitError::Wire)?;
    release_remote(store, authority, id, request, max)
        .await
        .map(drop)
}

/// [`release_idle`], and the owner on another host through `store`: a busy one refuses at
/// once with `SESSION_BUSY`.
pub async fn release_idle_anywhere(
    store: Option<&Arc<dyn Store>>,
    authority: &Path,
    id: &RecordId,
) -> SubmitResult<()> {
    release_here_and_there(store, authority, id, Request::ReleaseIdle, RELEASE_BOUND).await
}

/// How long [`release`] waits for an owner to stop.
const RELEASE_BOUND: Duration = Duration::from_secs(30);

/// Stops a running owner of session `id` (the session stays open), so this process can
/// take the session's writer lock.
pub async fn release(authority: &Path, id: &RecordId) -> SubmitResult<()> {
    client::release(authority, id, &Request::Release, RELEASE_BOUND)
        .await
        .map(drop)
        .map_err(SubmitError::Wire)
}

/// Stops the owner of session `id` if it is idle (the session stays open); an owner with a
/// task running or waiting refuses at once, and that is the `SESSION_BUSY` error returned
/// (it names the task and how long it has run). For commands that must not wait on a turn.
pub async fn release_idle(authority: &Path, id: &RecordId) -> SubmitResult<()> {
    client::release(authority, id, &Request::ReleaseIdle, RELEASE_BOUND)
        .await
        .map(drop)
        .map_err(SubmitError::Wire)
}

/// Stops every idle owner under `authority` (their sessions stay open), for work that writes
/// every session (migrate, repair); the first busy one is the error ([`release_idle`]),
/// given at once.
pub async fn release_all(authority: &Path) -> SubmitResult<()> {
    let Ok(entries) = std::fs::read_dir(lease::owners_dir(authority)) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(id) = name.to_str().and_then(|n| n.strip_suffix(".lock")) else {
            continue;
        };
        if let Ok(id) = RecordId::parse(id) {
            release_idle(authority, &id).await?;
        }
    }
    Ok(())
}

/// [`release_all`], and the idle owners of the store's sessions on other hosts (through
/// `store`'s task queue); the first busy one is the error, given at once.
pub async fn release_all_anywhere(
    store: Option<&Arc<dyn Store>>,
    authority: &Path,
) -> SubmitResult<()> {
    release_all(authority).await?;
    let Some(store) = store else {
        return Ok(());
    };
    let Some(tasks) = store.remote_tasks() else {
        return Ok(());
    };
    let held = tasks.held_leases().await.map_err(|e| {
        SubmitError::Wire(WireError::runtime(
            "QUEUE_STORE_FAILED",
            format!("cannot list the owners of the store's sessions: {e}"),
            true,
        ))
    })?;
    for lease in held.into_iter().filter(|l| !l.lapsed) {
        release_remote(
            Some(store),
            authority,
            &lease.record_id,
            Request::ReleaseIdle,
            RELEASE_BOUND,
        )
        .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    /// Plays an owner on the session's socket: reads the request, checks it asked for the
    /// reply in parts, and answers with `lines`.
    async fn owner_answering(
        paths: &LeasePaths,
        lines: Vec<String>,
    ) -> tokio::task::JoinHandle<()> {
        lease::prepare_dirs(paths).unwrap();
        let listener = tokio::net::UnixListener::bind(&paths.socket).unwrap();
        tokio::spawn(async move {
            let (conn, _) = listener.accept().await.unwrap();
            let (read, mut write) = conn.into_split();
            let mut request = String::new();
            BufReader::new(read).read_line(&mut request).await.unwrap();
            assert!(request.contains(r#""replyInParts":true"#), "{request}");
            for l in lines {
                write.write_all(l.as_bytes()).await.unwrap();
            }
        })
    }

    fn result(agent_text: &str) -> String {
        format!(
            "{}\n",
            serde_json::json!({"type": "result", "outcome": {"requestId": "r",
                "userMessageId": "u", "outcome": "completed",
                "permissionStats": {"requested": 0, "approved": 0, "denied": 0, "cancelled": 0},
                "agentText": agent_text}})
        )
    }

    /// Submits a prompt asking for the reply in parts; returns what the caller heard (parts
    /// as `part:<text>`) and the outcome.
    async fn submit_in_parts(authority: &Path, id: &RecordId) -> (Vec<String>, TurnOutcome) {
        let spawn = || -> std::io::Result<()> { panic!("the owner runs") };
        let target = OwnerTarget {
            authority,
            id,
            spawn: &spawn,
            store: None,
        };
        let (_presses, interrupts) = watch::channel(0u32);
        let mut heard = Vec::new();
        let options = TaskOptions {
            reply_in_parts: true,
            ..TaskOptions::default()
        };
        let submitted = prompt(&target, Vec::new(), options, true, None, interrupts, |e| {
            heard.push(match e {
                SubmitEvent::ReplyPart(p) => format!("part:{p}"),
                SubmitEvent::TurnOver => "over".into(),
                other => format!("{other:?}"),
            })
        })
        .await
        .unwrap();
        let Submitted::Finished(outcome) = submitted else {
            panic!("{submitted:?}")
        };
        (heard, *outcome)
    }

    fn accepted_started() -> Vec<String> {
        vec![
            "{\"type\":\"accepted\",\"requestId\":\"r\",\"queueDepth\":0}\n".into(),
            "{\"type\":\"started\",\"requestId\":\"r\"}\n".into(),
        ]
    }

    /// An owner that predates `replyInParts` ignores it and sends the reply whole: the client
    /// hands it over in the outcome, as before.
    #[tokio::test]
    async fn an_older_owner_sends_the_reply_whole() {
        let dir = tempfile::tempdir().unwrap();
        let id = RecordId::parse("00000000-0000-4000-8000-000000000001").unwrap();
        let mut lines = accepted_started();
        lines.push(result("whole reply"));
        let owner = owner_answering(&LeasePaths::new(dir.path(), &id), lines).await;
        let (heard, outcome) = submit_in_parts(dir.path(), &id).await;
        owner.await.unwrap();
        assert_eq!(heard, ["Started([])", "over"]);
        assert_eq!(outcome.agent_text, "whole reply");
    }

    /// This version's owner: the parts, in order, after the turn is over and before the
    /// result, whose `agentText` is empty.
    #[tokio::test]
    async fn the_parts_come_before_the_result() {
        let dir = tempfile::tempdir().unwrap();
        let id = RecordId::parse("00000000-0000-4000-8000-000000000002").unwrap();
        let mut lines = accepted_started();
        lines.push("{\"type\":\"reply_part\",\"text\":\"one \"}\n".into());
        lines.push("{\"type\":\"reply_part\",\"text\":\"two\\n\"}\n".into());
        lines.push(result(""));
        let owner = owner_answering(&LeasePaths::new(dir.path(), &id), lines).await;
        let (heard, outcome) = submit_in_parts(dir.path(), &id).await;
        owner.await.unwrap();
        assert_eq!(heard, ["Started([])", "over", "part:one ", "part:two\n"]);
        assert_eq!(outcome.agent_text, "");
    }

    /// An owner that goes away in the middle of a line (killed, or dropping a client that
    /// read nothing for too long) is the disconnected error, not "an unreadable line".
    #[tokio::test]
    async fn a_line_cut_by_the_owner_going_away_is_a_disconnect() {
        let dir = tempfile::tempdir().unwrap();
        let id = RecordId::parse("00000000-0000-4000-8000-000000000003").unwrap();
        let mut lines = accepted_started();
        lines.push("{\"type\":\"reply_part\",\"text\":\"one \"}\n".into());
        lines.push("{\"type\":\"reply_part\",\"text\":\"tw".into());
        let paths = LeasePaths::new(dir.path(), &id);
        let owner = owner_answering(&paths, lines).await;
        let spawn = || -> std::io::Result<()> { panic!("the owner runs") };
        let target = OwnerTarget {
            authority: dir.path(),
            id: &id,
            spawn: &spawn,
            store: None,
        };
        let (_presses, interrupts) = watch::channel(0u32);
        let options = TaskOptions {
            reply_in_parts: true,
            ..TaskOptions::default()
        };
        let submitted = prompt(&target, Vec::new(), options, true, None, interrupts, |_| {}).await;
        owner.await.unwrap();
        match submitted {
            Err(SubmitError::Wire(e)) => assert_eq!(e, WireError::disconnected()),
            other => panic!("{:?}", other.map(|_| ())),
        }
    }
}
