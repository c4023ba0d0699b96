//! The owner's worker: the one task that holds the [`Session`], (re)attaches it with the
//! options of the task that needs it, and runs the queued jobs one at a time, in order,
//! recording each job's `queue_event`s and answering its client.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use acpx_model::{EventEnvelope, QueuePhase, Timestamp};
use serde_json::{json, Map, Value};
use tokio::sync::mpsc;

use acpx_runtime::error::{RuntimeError, RuntimeResult};
use acpx_runtime::mapping::ADDITIONAL_DIRECTORIES_KEY;
use acpx_runtime::session::{
    NewSessionSpec, Notice, Runtime, RuntimeOptions, Session, TurnOptions,
};
use acpx_runtime::PermissionPrompter;

use super::arrival::{Earlier, ORDER_GRACE, QUEUEING_GRACE};
use super::exit::OwnerExit;
use super::job::{Job, JobKind};
use super::mutex::locked;
use super::outgoing::{event_line, Outgoing, ReplyTx, Replying};
use super::protocol::{line, Response, TaskOptions, WireError, WireNotice, WireOutcome};
use super::shared::Shared;
use crate::drive::Control;

/// The session a task makes rather than opens: a new one, or a fork of a stored one (its
/// parent and the fork's name).
#[derive(Clone, Copy)]
enum Making<'a> {
    New(&'a NewSessionSpec),
    Fork(&'a acpx_model::RecordId, &'a Option<String>),
}

/// Where events recorded while the owner (re)attaches go: the client whose prompt caused it,
/// so its live output shows them as the one-process path does.
type AttachSink = Arc<Mutex<Option<ReplyTx>>>;

pub(super) struct Worker {
    store: Arc<dyn acpx_model::Store>,
    /// The owner's lease generation, which fences every writer lock it takes.
    fence: Option<u64>,
    /// The owner's own options; each attach takes the resume policy, MCP servers and model
    /// of the task that causes it.
    base: RuntimeOptions,
    shared: Arc<Shared>,
    session: Option<Session>,
    /// The MCP servers (ACP array form) and additional directories the agent of `session` was
    /// given (`{"mcpServers", "additionalDirectories"}`), and whether it was
    /// offered fs and terminal (`--no-fs`, `--no-terminal`): a task that wants otherwise
    /// reattaches, since capabilities are fixed at `initialize`.
    session_mcp: (Value, bool, bool),
    attach_sink: AttachSink,
    /// Where the agent connection's raw frames go (`--format acp`; `frames`).
    frames: super::frames::FrameSink,
    /// Tasks taken off the channel and not run yet: the lowest arrival number runs first
    /// (`arrival`).
    pending: Vec<Job>,
}

/// What a task wants of the agent process: its MCP servers (the task's own, else the
/// record's, else the configuration's: [`acpx_runtime::Invocation::mcp_servers_for`], the choice a reattach
/// makes) and additional directories (its own `--add-dir`, else the record's), and whether
/// fs and terminal are offered. A stored MCP server list that is not valid is an error, as it
/// is when the session reattaches.
fn wanted_agent(
    options: &TaskOptions,
    record: &acpx_model::SessionRecord,
) -> RuntimeResult<(Value, bool, bool)> {
    let task = &options.invocation;
    let dirs = if task.additional_directories.is_empty() {
        record
            .acpx
            .extra
            .get(ADDITIONAL_DIRECTORIES_KEY)
            .cloned()
            .unwrap_or_else(|| Value::Array(Vec::new()))
    } else {
        serde_json::json!(task.additional_directories)
    };
    let mcp = task
        .mcp_servers_for(record)?
        .map_or_else(|| Value::Array(Vec::new()), |m| m.to_json());
    Ok((
        serde_json::json!({"mcpServers": mcp, "additionalDirectories": dirs}),
        !task.no_fs,
        !task.no_terminal,
    ))
}

/// A control run on the owner's session, answered with its value.
async fn run_control(
    session: &mut Session,
    control: Control,
    resumed: bool,
) -> RuntimeResult<Response> {
    control
        .run(session)
        .await
        .map(|value| Response::ControlResult { resumed, value })
}

impl Worker {
    /// `runtime` fenced by the owner's lease, as every runtime of the owner is.
    fn fenced(&self, runtime: Runtime) -> Runtime {
        match self.fence {
            Some(g) => runtime.with_fence(g),
            None => runtime,
        }
    }

    pub(super) fn new(runtime: Runtime, shared: Arc<Shared>) -> Worker {
        let attach_sink: AttachSink = Arc::new(Mutex::new(None));
        let mut base = runtime.options().clone();
        let frames = super::frames::install(&mut base);
        let sink = attach_sink.clone();
        let inner = base.observer.take();
        base.observer = Some(Arc::new(move |e: &EventEnvelope| {
            if let Some(o) = &inner {
                o(e);
            }
            if let Some(tx) = locked(&sink).as_ref() {
                let _ = tx.send(event_line(e).into());
            }
        }));
        Worker {
            fence: runtime.fence(),
            store: runtime.store().clone(),
            base,
            shared,
            session: None,
            session_mcp: (Value::Null, true, true),
            attach_sink,
            frames,
            pending: Vec::new(),
        }
    }

    /// The next task in arrival order: every task on the channel is taken, and the one that
    /// arrived first runs, after a wait for connections accepted before it: at most
    /// [`QUEUEING_GRACE`] for one whose request is being queued, [`ORDER_GRACE`] for one whose
    /// request is not read yet. `Err` when the owner should stop.
    async fn next_in_order(
        &mut self,
        rx: &mut mpsc::UnboundedReceiver<Job>,
        broken: bool,
    ) -> Result<Job, OwnerExit> {
        let mut waited = Duration::ZERO;
        loop {
            while let Ok(job) = rx.try_recv() {
                self.pending.push(job);
            }
            let Some(first) = self.pending.iter().map(|j| j.arrival).min() else {
                let job = self.next_job(rx, broken).await?;
                self.pending.push(job);
                continue;
            };
            let grace = match self.shared.arrivals.earlier(first) {
                Earlier::None => Duration::ZERO,
                Earlier::Reading => ORDER_GRACE,
                Earlier::Queueing => QUEUEING_GRACE,
            };
            if waited < grace {
                let step = Duration::from_millis(10);
                self.shared.arrivals.wait_decided(step).await;
                waited += step;
                continue;
            }
            let at = self
                .pending
                .iter()
                .position(|j| j.arrival == first)
                .unwrap_or(0);
            return Ok(self.pending.remove(at));
        }
    }

    pub(super) async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Job>) -> OwnerExit {
        // The agent starts with the first task, which brings the options to attach with.
        let mut open_failed: Option<String> = None;
        let exit = loop {
            if let Some(why) = locked(&self.shared.stop_reason).clone() {
                if matches!(
                    why,
                    OwnerExit::Signalled | OwnerExit::LeaseGone | OwnerExit::TakenOver
                ) {
                    break why;
                }
            }
            let next = self.next_in_order(&mut rx, open_failed.is_some()).await;
            let job = match next {
                Ok(job) => job,
                Err(why) => break why,
            };
            if !matches!(job.kind, JobKind::Close | JobKind::Release) {
                // Busy from here (the agent may have to start first) until the task ends:
                // taken before it leaves the queue's count, so the owner never looks idle
                // in between (`Shared::busy`).
                *locked(&self.shared.task) = Some((job.request_id.clone(), Timestamp::now()));
                self.shared.activity_changed.notify_one();
                if let Some(options) = job.kind.options() {
                    self.shared.take_ttl(options);
                }
                self.shared.depth.fetch_sub(1, Ordering::SeqCst);
            }
            match job.kind {
                JobKind::Close | JobKind::Release => {
                    let close = matches!(job.kind, JobKind::Close);
                    self.shared.accepting.store(false, Ordering::SeqCst);
                    self.refuse_queued(&mut rx);
                    let result = self.finish(close).await;
                    let _ = job.reply.send(
                        line(&match result {
                            Ok(sent) => Response::Closed { closed: sent },
                            Err(e) => Response::Error {
                                error: WireError::from_runtime(&e),
                            },
                        })
                        .into(),
                    );
                    break if close {
                        OwnerExit::Closed
                    } else {
                        OwnerExit::Released
                    };
                }
                _ => {
                    if !self.shared.accepting.load(Ordering::SeqCst) {
                        let _ = job.reply.send(
                            line(&Response::Error {
                                error: WireError::runtime(
                                    "QUEUE_OWNER_CLOSED",
                                    "the session is being closed",
                                    false,
                                ),
                            })
                            .into(),
                        );
                        *locked(&self.shared.task) = None;
                        continue;
                    }
                    // Withdrawable until its turn starts (`run_job`); dropped here when
                    // withdrawn already.
                    if self.shared.withdrawn(&job.request_id) {
                        self.shared.take_withdrawn(&job.request_id);
                        self.drop_withdrawn(&job).await;
                        *locked(&self.shared.task) = None;
                        continue;
                    }
                    match self.run_job(job).await {
                        Ok(()) => open_failed = None,
                        Err(e) => open_failed = Some(e),
                    }
                }
            }
            *locked(&self.shared.task) = None;
            self.shared.activity_changed.notify_one();
        };
        if let Some(why) = &open_failed {
            if exit == OwnerExit::Idle {
                return OwnerExit::OpenFailed(why.clone());
            }
        }
        if !matches!(exit, OwnerExit::Closed | OwnerExit::Released) {
            let _ = self.finish(false).await;
        }
        exit
    }

    /// Waits for the next job; `Err` when the owner should stop. An owner whose agent
    /// could not start stops as soon as nothing waits for it.
    async fn next_job(
        &self,
        rx: &mut mpsc::UnboundedReceiver<Job>,
        broken: bool,
    ) -> Result<Job, OwnerExit> {
        let ttl = if broken {
            Some(Duration::ZERO)
        } else {
            self.shared.ttl()
        };
        // The first idle check waits at least a second, so a just-started owner is found.
        let deadline = ttl.map(|t| tokio::time::Instant::now() + t.max(Duration::from_secs(1)));
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                job = rx.recv() => return job.ok_or(OwnerExit::Released),
                _ = self.shared.stopping.notified() => {
                    if let Some(why) = locked(&self.shared.stop_reason).clone() {
                        return Err(why);
                    }
                }
                _ = tick.tick() => {
                    if !self.shared.paths.lease.exists() || !self.shared.config.home.exists() {
                        return Err(OwnerExit::LeaseGone);
                    }
                    // Not while a reply is still being sent in parts: it goes at its
                    // client's pace, after the worker is done with the task (each bounded
                    // by the stall limit, so a stopped reader cannot keep the owner).
                    if deadline.is_some_and(|d| tokio::time::Instant::now() >= d)
                        && self.shared.depth.load(Ordering::SeqCst) == 0
                        && self.shared.replying.load(Ordering::SeqCst) == 0
                    {
                        // Refuse newcomers first, then take what slipped in meanwhile.
                        self.shared.accepting.store(false, Ordering::SeqCst);
                        return match rx.try_recv() {
                            Ok(job) => {
                                self.shared.accepting.store(true, Ordering::SeqCst);
                                Ok(job)
                            }
                            Err(_) => Err(OwnerExit::Idle),
                        };
                    }
                }
            }
        }
    }

    /// A prompt withdrawn before it started (its client went away, or `acpx cancel` while
    /// its agent started): recorded in the queue stream as an error, never run; its client,
    /// if still there, is told so.
    async fn drop_withdrawn(&self, job: &Job) {
        let _ = job.reply.send(
            line(&Response::Error {
                error: super::dispatch::withdrawn_error(),
            })
            .into(),
        );
        let log = locked(&self.shared.queue_log).clone();
        if let Some(log) = log {
            let mut extra = serde_json::Map::new();
            extra.insert("task".into(), serde_json::json!("prompt"));
            extra.insert(
                "detailCode".into(),
                serde_json::json!("QUEUE_TASK_WITHDRAWN"),
            );
            extra.insert(
                "message".into(),
                serde_json::json!(
                    "withdrawn before it started (its client went away, or `acpx cancel` while \
                     its agent started); it was not run"
                ),
            );
            let _ = log
                .record(QueuePhase::Error, Some(&job.request_id), extra)
                .await;
        }
    }

    fn refuse_queued(&mut self, rx: &mut mpsc::UnboundedReceiver<Job>) {
        while let Ok(job) = rx.try_recv() {
            self.pending.push(job);
        }
        for job in std::mem::take(&mut self.pending) {
            self.shared.depth.fetch_sub(1, Ordering::SeqCst);
            let _ = job.reply.send(
                line(&Response::Error {
                    error: WireError::runtime(
                        "QUEUE_OWNER_CLOSED",
                        "the session was closed before this task started",
                        false,
                    ),
                })
                .into(),
            );
        }
    }

    /// Opens the session with the task's options, or reopens it when the agent went away
    /// (its exit is already recorded by then) or the task names other MCP servers than the
    /// agent was given; the reattach chain restores the ACP session and the user's choices.
    /// Returns what the user must be told when it (re)attached, `None` when the warm session
    /// served as it was.
    async fn ensure_session(
        &mut self,
        options: &TaskOptions,
        sink: Option<&ReplyTx>,
        create: Option<Making<'_>>,
    ) -> RuntimeResult<Option<Vec<Notice>>> {
        if create.is_some() && self.session.is_some() {
            return Err(RuntimeError::InvalidInput(format!(
                "session {} exists already; its queue owner cannot create it",
                self.shared.config.record_id
            )));
        }
        if let Some(s) = &self.session {
            // The process probe `status` uses too: an agent killed while the owner was idle
            // is a zombie at once, but the task that reaps it (and marks the session
            // disconnected) may not have run yet; the turn must not go to the dead process.
            let agent = *locked(&self.shared.agent_pid);
            let alive = agent.is_none_or(|(pid, ticks)| super::lease::process_running(pid, ticks));
            if s.is_connected() && alive {
                if s.with_record(|r| wanted_agent(options, r)).await? == self.session_mcp {
                    return Ok(None);
                }
                tracing::info!("the task names other MCP servers or capabilities; reattaching");
            } else {
                match s.unresponsive() {
                    Some(why) => tracing::warn!(
                        "{why}: it is stuck; stopping it and attaching a new agent for the next task"
                    ),
                    None => tracing::warn!("the agent went away; restarting it for the next task"),
                }
            }
            if let Some(s) = self.session.take() {
                let _ = s.shutdown().await;
            }
        }
        // The task's own options, applied as the one-process path applies them; its
        // `--timeout` also bounds the agent's start and reattach (`Invocation::apply`).
        let mut attach = self.base.clone();
        options.invocation.apply(&mut attach);
        // The session lives on in this process: its conversation settles while it loads.
        attach.lives_on = true;
        let runtime = self.fenced(Runtime::new(self.store.clone(), attach));
        *locked(&self.attach_sink) = sink.cloned();
        let id = &self.shared.config.record_id;
        let opened = match create {
            Some(Making::New(spec)) => runtime.open_new_as(spec.clone(), id.clone()).await,
            Some(Making::Fork(parent, name)) => {
                // The fork's agent stays here for its turns (acpx_owner::local::fork_flow).
                let (_never, interrupts) = tokio::sync::watch::channel(0);
                crate::local::fork_keeping_agent(
                    &runtime,
                    &self.shared.config.authority,
                    parent,
                    id.clone(),
                    name.clone(),
                    None,
                    interrupts,
                    |_| {},
                )
                .await
                .map(|(_, child)| child)
                .map_err(|e| match e {
                    crate::local::LocalError::Runtime(e) => e,
                    crate::local::LocalError::Ops(acpx_runtime::ops::OpsError::Runtime(e)) => e,
                    crate::local::LocalError::Ops(acpx_runtime::ops::OpsError::Store(e)) => {
                        RuntimeError::Store(e)
                    }
                    other => RuntimeError::InvalidInput(format!(
                        "forking session {parent} failed: {other}"
                    )),
                })
            }
            None => runtime.open_existing(id).await,
        };
        *locked(&self.attach_sink) = None;
        match opened {
            Ok(s) => {
                *locked(&self.shared.agent_pid) =
                    Some((s.pid(), super::lease::process_start_ticks(s.pid())));
                *locked(&self.shared.queue_log) = Some(s.queue_log());
                // Every task `run_job` runs on this session ends with a `done` or `error` queue
                // event, recorded before the client hears the outcome: that event saves the
                // task's end (an event that cannot be appended forces a save of its own).
                s.set_task_ends_saved_by_queue_event(true).await;
                self.shared.write_lease(Some(s.pid()));
                self.session_mcp = s.with_record(|r| wanted_agent(options, r)).await?;
                let notices = s.notices().to_vec();
                self.session = Some(s);
                Ok(Some(notices))
            }
            Err(e) => {
                *locked(&self.shared.agent_pid) = None;
                *locked(&self.shared.queue_log) = None;
                Err(e)
            }
        }
    }

    async fn run_job(&mut self, job: Job) -> Result<(), String> {
        let send = |r: Response| {
            let _ = job.reply.send(line(&r).into());
        };
        let options = job.kind.options().cloned().unwrap_or_default();
        // `--format acp`: the task's frames, from the attach it may cause to its turn's end.
        // `--verbose`: the agent's stderr lines over the same span.
        let frames = self.frames.serve(match &job.kind {
            JobKind::Prompt {
                options, backlog, ..
            } if options.acp_frames || options.verbose => Some((
                job.reply.clone(),
                backlog.clone(),
                super::frames::FrameKinds {
                    acp: options.acp_frames,
                    stderr: options.verbose,
                },
            )),
            _ => None,
        });
        let sink = matches!(job.kind, JobKind::Prompt { .. }).then_some(&job.reply);
        let create = match &job.kind {
            JobKind::Create(spec, _) => Some(Making::New(spec)),
            JobKind::Fork(parent, name, _) => Some(Making::Fork(parent, name)),
            _ => None,
        };
        // While its agent starts or attaches, a prompt can still be withdrawn (`cancel`).
        let prompt = matches!(job.kind, JobKind::Prompt { .. });
        if prompt {
            *locked(&self.shared.starting) = Some((job.request_id.clone(), job.reply.clone()));
            self.shared.activity_changed.notify_one();
        }
        let ensured = self.ensure_session(&options, sink, create).await;
        if prompt {
            locked(&self.shared.starting).take();
            // From here its turn starts, or it is dropped: no longer withdrawable.
            if self.shared.take_withdrawn(&job.request_id) {
                self.drop_withdrawn(&job).await;
                return ensured.map(|_| ()).map_err(|e| e.to_string());
            }
        }
        let attached = match ensured {
            Ok(a) => a,
            Err(e) => {
                send(Response::Error {
                    error: WireError::from_runtime(&e),
                });
                return Err(e.to_string());
            }
        };
        let Some(session) = self.session.as_mut() else {
            return Ok(());
        };
        let log = session.queue_log();
        let rid = job.request_id.clone();
        let mut extra = Map::new();
        extra.insert("task".into(), json!(job.kind.name()));
        // `--model` on a warm session: selected before the task, as an attach would.
        if let (None, Some(model)) = (&attached, &options.invocation.model) {
            if let Err(e) = session.set_model(model).await {
                let error = WireError::from_runtime(&e);
                // The task ends here: its queue events say so (an accepted task always ends
                // with `done` or `error` in the log), and the `error` one saves the snapshot.
                if !job.accepted_logged {
                    let _ = log
                        .record(QueuePhase::Accepted, Some(&rid), extra.clone())
                        .await;
                }
                let mut failed = failed_task(extra, &error);
                failed.insert("ownerPid".into(), json!(std::process::id()));
                let _ = log.record(QueuePhase::Error, Some(&rid), failed).await;
                send(Response::Error { error });
                return Ok(());
            }
        }
        let notices = attached
            .unwrap_or_default()
            .iter()
            .map(WireNotice::from)
            .collect();
        if !job.accepted_logged {
            let _ = log
                .record(QueuePhase::Accepted, Some(&rid), extra.clone())
                .await;
        }
        if let Err(e) = log
            .record(QueuePhase::Started, Some(&rid), extra.clone())
            .await
        {
            send(Response::Error {
                error: WireError::from_runtime(&e),
            });
            return Ok(());
        }
        *locked(&self.shared.current) = Some((rid.clone(), session.cancel_handle()));
        send(Response::Started {
            request_id: rid.clone(),
            notices,
        });
        let resumed = session.resumed();
        // The reply of a task that takes it in parts (`TaskOptions::reply_in_parts`).
        let mut reply_texts = None;
        let result: Result<Response, RuntimeError> = match job.kind {
            JobKind::Prompt {
                prompt,
                options,
                prompter,
                backlog,
                ..
            } => {
                let reply = job.reply.clone();
                let counted = backlog.clone();
                let observer = (!options.no_events).then(|| -> acpx_runtime::Observer {
                    Arc::new(move |e: &EventEnvelope| {
                        let line = event_line(e);
                        let bytes = line.len();
                        // Counted before it is handed over: the connection may write it at
                        // once. A client gone takes nothing: nothing waits for it.
                        counted.handed(bytes);
                        if reply.send(Outgoing::Event(line)).is_err() {
                            counted.close();
                        }
                    })
                });
                let turn = TurnOptions {
                    observer,
                    prompter: prompter.map(|p| p as Arc<dyn PermissionPrompter>),
                    request_id: Some(rid.clone()),
                    // A reply sent in parts is read from the thread afterwards, never joined.
                    without_agent_text: options.no_agent_text || options.reply_in_parts,
                    // The owner's session lives on: each turn's end is saved at once.
                    session_ends_after: false,
                    output_backlog: (!options.no_events || options.acp_frames).then_some(backlog),
                    ..options.invocation.turn_options()
                };
                let outcome = session.prompt_with_options(prompt, turn).await;
                if let (true, Ok(o)) = (options.reply_in_parts, &outcome) {
                    // Handles on the reply's texts, taken under the recorder's lock without
                    // copying the record; the client's connection reads them at its pace.
                    let user = o.user_message_id.as_str();
                    reply_texts = Some(
                        session
                            .with_record(|r| acpx_runtime::reply_texts_after(r, user))
                            .await,
                    );
                }
                outcome.map(|o| Response::Result {
                    outcome: WireOutcome::from(o),
                })
            }
            // A control answers as it does in one process (`Control::run`).
            JobKind::SetMode(mode, _) => {
                run_control(session, Control::SetMode(mode), resumed).await
            }
            JobKind::SetConfigOption(id, value, _) => {
                run_control(session, Control::SetConfigOption(id, value), resumed).await
            }
            JobKind::SetModel(model, _) => {
                run_control(session, Control::SetModel(model), resumed).await
            }
            // The session was made by `ensure_session`; the agent stays warm for its turns.
            JobKind::Create(..) => Ok(Response::ControlResult {
                resumed: false,
                value: json!({"created": true}),
            }),
            // The fork was made by `ensure_session`; the agent that made it stays for its turns.
            JobKind::Fork(..) => Ok(Response::ControlResult {
                resumed: false,
                value: json!({"forked": true}),
            }),
            JobKind::Close | JobKind::Release => return Ok(()),
        };
        *locked(&self.shared.current) = None;
        drop(frames);
        let (phase, mut extra) = match &result {
            Ok(Response::Result { outcome }) => {
                let mut m = extra;
                m.insert("outcome".into(), json!(outcome.outcome));
                (QueuePhase::Done, m)
            }
            Ok(_) => (QueuePhase::Done, extra),
            Err(e) => (
                QueuePhase::Error,
                failed_task(extra, &WireError::from_runtime(e)),
            ),
        };
        extra.insert("ownerPid".into(), json!(std::process::id()));
        // The outcome goes out only after its queue event is appended (or failed to be).
        let logged = log.record(phase, Some(&rid), extra).await;
        match (result, logged) {
            (Ok(Response::Result { outcome }), Ok(())) => match reply_texts {
                Some(texts) => {
                    let _ = job.reply.send(Outgoing::Reply {
                        texts,
                        outcome: Box::new(outcome),
                        sending: Replying::new(&self.shared.replying),
                    });
                }
                None => send(Response::Result { outcome }),
            },
            (Ok(r), Ok(())) => send(r),
            (Ok(_), Err(e)) | (Err(e), _) => send(Response::Error {
                error: WireError::from_runtime(&e),
            }),
        }
        Ok(())
    }

    /// Ends the session: `close` sends ACP `session/close` (when advertised) and marks the
    /// record closed; otherwise the agent is stopped and the record stays open. Returns
    /// whether the record was closed by an open session.
    async fn finish(&mut self, close: bool) -> RuntimeResult<bool> {
        *locked(&self.shared.queue_log) = None;
        *locked(&self.shared.agent_pid) = None;
        let Some(session) = self.session.take() else {
            if close {
                // No agent to tell: close the record ourselves.
                let runtime = self.fenced(Runtime::new(self.store.clone(), self.base.clone()));
                acpx_runtime::ops::scope::close_with_retry(&runtime, &self.shared.config.record_id)
                    .await
                    .map_err(|e| RuntimeError::InvalidInput(e.to_string()))?;
            }
            return Ok(false);
        };
        if close {
            session.close().await.map(|_| true)
        } else {
            session.shutdown().await.map(|_| false)
        }
    }
}

/// The payload keys of a task's `error` queue event: its own keys, and the error's code and
/// message.
fn failed_task(mut extra: Map<String, Value>, error: &WireError) -> Map<String, Value> {
    extra.insert("code".into(), json!(error.code));
    extra.insert("message".into(), json!(error.message));
    extra
}
