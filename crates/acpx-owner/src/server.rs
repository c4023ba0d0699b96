//! The owner process's work: take the lease, listen, keep one [`Session`] warm and run the
//! queued tasks one at a time, in order; exit when idle for the TTL, on `close` / `release`,
//! or on SIGTERM / SIGINT / SIGHUP.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use acpx_model::{EventEnvelope, RecordId, ThreadText, Timestamp};
use serde_json::Value;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, Notify};

use acpx_runtime::error::{RuntimeError, RuntimeResult};
use acpx_runtime::output_backlog::OutputBacklog;
use acpx_runtime::session::{CancelHandle, NewSessionSpec, QueueLog, Runtime};
use acpx_runtime::signal_group;

use super::connections::{answered_in_reserve, max_connections, refuse, tell, Band, Serving};
use super::dispatch::dispatch;
use super::lease::{self, Lease, LeasePaths};
use super::permissions::ForwardingPrompter;
use super::protocol::{line, OwnerStatus, Request, Response, TaskOptions, WireError, WireOutcome};
use super::reply_parts::{write_reply, write_within};
use super::worker::Worker;
use super::{remote_inbox, store_lease};

/// The first and the longest pause after a failed `accept`.
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// How long a connection may take to send its request line (a client sends it as soon as it
/// is connected); then it is told so and closed. Only the request is bounded so: a client
/// that sent it waits its turn as long as the queue takes.
const FIRST_LINE_DEADLINE: Duration = Duration::from_secs(10);

/// The idle time-to-live when none is configured.
pub const DEFAULT_TTL: Duration = Duration::from_secs(300);
/// The most tasks queued behind the running one when none is configured.
pub const DEFAULT_QUEUE_MAX_DEPTH: usize = 16;

/// What an owner serves.
#[derive(Debug, Clone)]
pub struct OwnerConfig {
    /// The store's authority directory ([`crate::authority`]): the lease and the socket
    /// live under `<authority>/owners/`.
    pub authority: PathBuf,
    /// A path whose disappearance ends the owner (the data home): removing a home does not
    /// leave its owners running until their TTL.
    pub home: PathBuf,
    /// The session.
    pub record_id: RecordId,
    /// Exit after this long without a task; `None` keeps the owner until the session is
    /// closed.
    pub ttl: Option<Duration>,
    /// The most tasks waiting behind the running one; more are refused (overloaded).
    pub queue_max_depth: usize,
}

/// Why an owner stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OwnerExit {
    /// Another owner holds the lease; this one did nothing.
    AlreadyRunning,
    /// Idle for the TTL.
    Idle,
    /// The session was closed.
    Closed,
    /// A client asked it to stop (`release`).
    Released,
    /// SIGTERM, SIGINT or SIGHUP.
    Signalled,
    /// Its lease file or its data home disappeared (removed under it).
    LeaseGone,
    /// The agent could not be started; the tasks were answered with the error.
    OpenFailed(String),
    /// Another owner's lease of the session (in the store, maybe on another host) is live;
    /// this one did nothing.
    HeldElsewhere(Box<acpx_model::OwnerLease>),
    /// Its lease in the store was taken over by another owner, or could not be renewed for
    /// its whole TTL: it stopped at once (none of its later appends could land anyway).
    TakenOver,
}

impl OwnerExit {
    /// Why the owner stopped, for people (its log line).
    pub fn describe(&self) -> String {
        match self {
            OwnerExit::AlreadyRunning => "another owner already serves the session".into(),
            OwnerExit::Idle => "idle for its ttl".into(),
            OwnerExit::Closed => "the session was closed".into(),
            OwnerExit::Released => "released by a client".into(),
            OwnerExit::Signalled => "stopped by a signal".into(),
            OwnerExit::LeaseGone => "its lease file or data home was removed".into(),
            OwnerExit::OpenFailed(why) => format!("the agent could not be started: {why}"),
            OwnerExit::HeldElsewhere(l) => format!(
                "the owner on host {} (pid {}) holds the session",
                l.holder.host, l.holder.pid
            ),
            OwnerExit::TakenOver => "its lease was taken over by another owner".into(),
        }
    }
}

pub(super) enum JobKind {
    Prompt {
        prompt: Vec<Value>,
        options: TaskOptions,
        /// Asks the client's user (an interactive client only).
        prompter: Option<Arc<ForwardingPrompter>>,
        /// The event lines handed to the client's connection and not written yet.
        backlog: Arc<OutputBacklog>,
    },
    SetMode(String, TaskOptions),
    SetConfigOption(String, Value, TaskOptions),
    SetModel(String, TaskOptions),
    /// Create the session (see [`Request::CreateSession`]).
    Create(NewSessionSpec, TaskOptions),
    /// Make the session a fork of another one, keeping the agent that forked (see
    /// [`Request::ForkSession`]): the parent's id and the new session's name.
    Fork(RecordId, Option<String>, TaskOptions),
    Close,
    Release,
}

impl JobKind {
    /// The command's own options (`None` for close and release).
    pub(super) fn options(&self) -> Option<&TaskOptions> {
        match self {
            JobKind::Prompt { options, .. }
            | JobKind::SetMode(_, options)
            | JobKind::SetConfigOption(_, _, options)
            | JobKind::SetModel(_, options)
            | JobKind::Create(_, options)
            | JobKind::Fork(_, _, options) => Some(options),
            JobKind::Close | JobKind::Release => None,
        }
    }

    pub(super) fn name(&self) -> &'static str {
        match self {
            JobKind::Prompt { .. } => "prompt",
            JobKind::SetMode(..) => "set_mode",
            JobKind::SetConfigOption(..) => "set_config_option",
            JobKind::SetModel(..) => "set_model",
            JobKind::Create(..) => "create",
            JobKind::Fork(..) => "fork",
            JobKind::Close => "close",
            JobKind::Release => "release",
        }
    }
}

/// What the owner has for one client, in order: written to its connection by that
/// connection's task, so the worker never waits for a client.
pub(super) enum Outgoing {
    /// One response line (with its newline).
    Line(String),
    /// One event line of a turn (with its newline), counted in the connection's
    /// [`OutputBacklog`] until written.
    Event(String),
    /// The answer to a task that set [`TaskOptions::reply_in_parts`]: the reply's texts, sent
    /// as `reply_part` lines, then the `result`. The connection's task reads the texts (a
    /// long one from its spill file, 64 KiB at a time) only as fast as the socket takes the
    /// lines, so the owner holds one part, not the reply, however slowly the client reads;
    /// and the worker has gone on to the next task meanwhile.
    Reply {
        /// See [`acpx_runtime::reply_texts_after`].
        texts: Vec<ThreadText>,
        /// The result, `agentText` empty.
        outcome: Box<WireOutcome>,
        /// Held until the reply is written or dropped.
        sending: Replying,
    },
}

impl From<String> for Outgoing {
    fn from(line: String) -> Self {
        Outgoing::Line(line)
    }
}

/// Where a task's answer goes (see [`Job::reply`]).
pub(super) type ReplyTx = mpsc::UnboundedSender<Outgoing>;

pub(super) struct Job {
    /// Its arrival number (`arrival`): the worker runs tasks in this order.
    pub(super) arrival: u64,
    pub(super) request_id: String,
    pub(super) kind: JobKind,
    /// Response lines for the client; a client that went away leaves sends failing, and the
    /// task still runs and is recorded. Unbounded, so the worker never waits for a client:
    /// what travels on it is small (events, one at a time as recorded) except a reply, which
    /// travels as [`Outgoing::Reply`], by reference to the thread's texts.
    pub(super) reply: ReplyTx,
    /// Whether `accepted` reached the log already (the session may not be open yet).
    pub(super) accepted_logged: bool,
}

pub(super) struct Shared {
    pub(super) paths: LeasePaths,
    pub(super) config: OwnerConfig,
    pub(super) started: Instant,
    pub(super) started_at: Timestamp,
    pub(super) generation: u64,
    /// Tasks waiting behind the running one.
    pub(super) depth: AtomicUsize,
    pub(super) accepting: AtomicBool,
    pub(super) stopping: Notify,
    pub(super) stop_reason: Mutex<Option<OwnerExit>>,
    pub(super) current: Mutex<Option<(String, CancelHandle)>>,
    /// The task the worker is on, from the moment it takes it (before its agent is started
    /// or attached) to its end: its request id and when it was taken. What makes the owner
    /// busy for [`Request::ReleaseIdle`].
    pub(super) task: Mutex<Option<(String, Timestamp)>>,
    /// The idle time-to-live: the owner's config's, until a task brings another
    /// ([`TaskOptions::ttl_seconds`]).
    pub(super) ttl: Mutex<Option<Duration>>,
    /// The agent's pid and start time (`/proc` ticks) while the owner has one attached.
    pub(super) agent_pid: Mutex<Option<(u32, Option<u64>)>>,
    pub(super) queue_log: Mutex<Option<QueueLog>>,
    pub(super) jobs: mpsc::UnboundedSender<Job>,
    /// Connections still being served (their last lines may not be written yet), in the
    /// limit and in the reserve.
    pub(super) connections: AtomicUsize,
    /// The most connections served at once for any request ([`max_connections`]).
    pub(super) max_connections: usize,
    /// Connections served within that limit, and beyond it in the [`CONTROL_RESERVE`].
    pub(super) in_limit: AtomicUsize,
    pub(super) in_reserve: AtomicUsize,
    /// Refused connections still open while their request is drained ([`REFUSING_MAX`]).
    pub(super) refusing: AtomicUsize,
    /// Connections refused for the limit, and when the log last said so.
    pub(super) refused: AtomicU64,
    pub(super) refusal_logged: Mutex<Option<Instant>>,
    /// Connections sending a reply in parts right now ([`write_reply`]): the idle exit waits
    /// for them (each bounded by [`reply_stall`]), and for no other connection, so a client
    /// that stopped reading its events cannot keep the owner past its TTL.
    pub(super) replying: AtomicUsize,
    /// Woken when the task the worker is on changes, so the store lease says so at once.
    pub(super) activity_changed: Notify,
    /// The "client gone" flags of the prompts not started yet (queued, or taken while their
    /// agent starts or attaches), by request id, for `withdraw` and `cancel`.
    pub(super) queued: Mutex<std::collections::HashMap<String, Arc<AtomicBool>>>,
    /// The prompt the worker took and whose agent is starting or attaching (no turn yet):
    /// its request id and its client's reply channel, so `cancel` can withdraw it and tell
    /// its client at once rather than after the agent is up.
    pub(super) starting: Mutex<Option<(String, ReplyTx)>>,
    /// The arrival numbers of connections and tasks (`arrival`).
    pub(super) arrivals: Arc<super::arrival::Arrivals>,
    /// Connections that could not be accepted, and the last error.
    pub(super) accept_errors: AtomicU64,
    pub(super) accept_error: Mutex<Option<String>>,
}

/// Counts a reply in parts as being sent from when the worker hands it over until it is
/// written or dropped (a client gone before it was taken drops it unsent), so the idle exit
/// never sees it between the two tasks.
pub(super) struct Replying(Arc<Shared>);

impl Replying {
    pub(super) fn new(shared: &Arc<Shared>) -> Replying {
        shared.replying.fetch_add(1, Ordering::SeqCst);
        Replying(shared.clone())
    }
}

impl Drop for Replying {
    fn drop(&mut self) {
        self.0.replying.fetch_sub(1, Ordering::SeqCst);
    }
}

pub(super) fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    pub(super) fn stop(&self, why: OwnerExit) {
        self.accepting.store(false, Ordering::SeqCst);
        locked(&self.stop_reason).get_or_insert(why);
        if let Some((_, c)) = locked(&self.current).as_ref() {
            c.cancel();
        }
        self.stopping.notify_one();
    }

    pub(super) fn status(&self) -> OwnerStatus {
        // An agent killed while the owner is idle is noticed by the next task, which attaches
        // a new one; until then say so rather than show the dead process as the agent.
        let agent = *locked(&self.agent_pid);
        let agent_exited = agent.is_some_and(|(pid, ticks)| !lease::process_running(pid, ticks));
        OwnerStatus {
            pid: std::process::id(),
            started_at: self.started_at,
            uptime_seconds: self.started.elapsed().as_secs(),
            agent_pid: agent.filter(|_| !agent_exited).map(|(pid, _)| pid),
            agent_exited,
            queue_depth: self.depth.load(Ordering::SeqCst),
            running: locked(&self.current).as_ref().map(|(r, _)| r.clone()),
            starting: locked(&self.starting).as_ref().map(|(r, _)| r.clone()),
            running_since: locked(&self.task).as_ref().map(|(_, since)| *since),
            generation: self.generation,
            ttl_seconds: self.ttl().map_or(0, |t| t.as_secs()),
            accept_errors: self.accept_errors.load(Ordering::SeqCst),
            last_accept_error: locked(&self.accept_error).clone(),
            connections: self.connections.load(Ordering::SeqCst),
            max_connections: self.max_connections,
            refused_connections: self.refused.load(Ordering::SeqCst),
        }
    }

    pub(super) fn band_count(&self, band: Band) -> &AtomicUsize {
        match band {
            Band::Limit => &self.in_limit,
            Band::Reserve => &self.in_reserve,
        }
    }

    /// Ends the prompt `request_id`'s time as withdrawable (it starts now, or is dropped):
    /// whether it was withdrawn. Under the same lock as [`Shared::withdraw`], so a withdrawal
    /// either lands before this (and the prompt is dropped) or finds nothing to withdraw.
    pub(super) fn take_withdrawn(&self, request_id: &str) -> bool {
        locked(&self.queued)
            .remove(request_id)
            .is_some_and(|gone| gone.load(Ordering::SeqCst))
    }

    /// Whether the prompt `request_id` was withdrawn (it stays withdrawable).
    pub(super) fn withdrawn(&self, request_id: &str) -> bool {
        locked(&self.queued)
            .get(request_id)
            .is_some_and(|gone| gone.load(Ordering::SeqCst))
    }

    /// Withdraws the prompt `request_id` if it has not started: whether it was still
    /// withdrawable.
    pub(super) fn withdraw(&self, request_id: &str) -> bool {
        locked(&self.queued).get(request_id).is_some_and(|gone| {
            gone.store(true, Ordering::SeqCst);
            true
        })
    }

    /// The idle time-to-live now (`None`: until the session is closed).
    pub(super) fn ttl(&self) -> Option<Duration> {
        *locked(&self.ttl)
    }

    /// Takes the time-to-live a task brought, if any.
    pub(super) fn take_ttl(&self, options: &TaskOptions) {
        if let Some(secs) = options.ttl_seconds {
            *locked(&self.ttl) = (secs > 0).then(|| Duration::from_secs(secs));
        }
    }

    /// Why the owner cannot let go of its session at once: the task it is on (with how long
    /// it has run) and how many wait; `None` when idle.
    pub(super) fn busy(&self) -> Option<WireError> {
        let task = locked(&self.task).clone();
        let waiting = self.depth.load(Ordering::SeqCst);
        if task.is_none() && waiting == 0 {
            return None;
        }
        let id = &self.config.record_id;
        let mut message = match task {
            Some((rid, since)) => format!(
                "session {id} is busy: its queue owner (pid {} on host {}) is running task {rid}, started {} ({} s ago)",
                std::process::id(),
                store_lease::host_name(),
                since.to_rfc3339(),
                Timestamp::now().millis().saturating_sub(since.millis()) / 1000
            ),
            None => format!(
                "session {id} is busy: its queue owner (pid {} on host {}) is about to run a task",
                std::process::id(),
                store_lease::host_name()
            ),
        };
        if waiting > 0 {
            message.push_str(&format!(", and {waiting} more wait"));
        }
        Some(WireError::runtime("SESSION_BUSY", message, true))
    }

    pub(super) fn write_lease(&self, agent_pid: Option<u32>) {
        let lease = Lease {
            pid: std::process::id(),
            socket: self.paths.socket.clone(),
            started_at: self.started_at,
            generation: self.generation,
            agent_pid,
            agent_start_ticks: agent_pid.and_then(lease::process_start_ticks),
        };
        if let Err(e) = lease::write(&self.paths, &lease) {
            tracing::warn!("cannot write the owner lease: {e}");
        }
    }
}

/// Runs an owner for `config.record_id` until it stops (see [`OwnerExit`]). Returns
/// [`OwnerExit::AlreadyRunning`] at once when another owner holds the lease, so several
/// racing starters leave exactly one owner.
pub async fn run_owner(runtime: Runtime, config: OwnerConfig) -> RuntimeResult<OwnerExit> {
    let paths = LeasePaths::new(&config.authority, &config.record_id);
    let io = |what: &str, e: std::io::Error| RuntimeError::InvalidInput(format!("{what}: {e}"));
    lease::prepare_dirs(&paths).map_err(|e| io("cannot create the owner directory", e))?;
    let Some(lock) = lease::try_take(&paths).map_err(|e| io("cannot lock the owner lease", e))?
    else {
        return Ok(OwnerExit::AlreadyRunning);
    };
    // We hold the lock: a lease file here was left by a dead owner; its agent, if provably
    // still the same process, goes with it.
    if let Some(pid) = lease::read(&paths).as_ref().and_then(lease::stale_agent) {
        tracing::warn!("stopping agent process group {pid} left by a dead owner");
        signal_group(pid, libc::SIGKILL);
    }
    let _ = std::fs::remove_file(&paths.socket);
    let listener = UnixListener::bind(&paths.socket)
        .map_err(|e| io(&format!("cannot listen on {}", paths.socket.display()), e))?;
    std::fs::set_permissions(
        &paths.socket,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .map_err(|e| io("cannot restrict the owner socket", e))?;

    // The session's lease in its store: another owner's, live (on another host, or under
    // another authority directory of this one), leaves this one nothing to do.
    let started_at = Timestamp::now();
    let held = match store_lease::acquire(
        runtime.store(),
        &config.record_id,
        &config.authority,
        started_at,
    )
    .await?
    {
        Ok(held) => Arc::new(held),
        Err(other) => return Ok(OwnerExit::HeldElsewhere(Box::new(other))),
    };
    let runtime = runtime.with_fence(held.generation);
    let (tx, rx) = mpsc::unbounded_channel();
    let initial_ttl = config.ttl;
    let max_connections = max_connections(config.queue_max_depth);
    let shared = Arc::new(Shared {
        paths: paths.clone(),
        config,
        started: Instant::now(),
        started_at,
        generation: u64::from(uuid::Uuid::new_v4().as_u128() as u32) << 16
            | u64::from(std::process::id() & 0xffff),
        depth: AtomicUsize::new(0),
        accepting: AtomicBool::new(true),
        stopping: Notify::new(),
        stop_reason: Mutex::new(None),
        current: Mutex::new(None),
        task: Mutex::new(None),
        ttl: Mutex::new(initial_ttl),
        agent_pid: Mutex::new(None),
        queue_log: Mutex::new(None),
        jobs: tx,
        connections: AtomicUsize::new(0),
        max_connections,
        in_limit: AtomicUsize::new(0),
        in_reserve: AtomicUsize::new(0),
        refusing: AtomicUsize::new(0),
        refused: AtomicU64::new(0),
        refusal_logged: Mutex::new(None),
        replying: AtomicUsize::new(0),
        activity_changed: Notify::new(),
        queued: Mutex::new(std::collections::HashMap::new()),
        starting: Mutex::new(None),
        arrivals: Arc::default(),
        accept_errors: AtomicU64::new(0),
        accept_error: Mutex::new(None),
    });
    shared.write_lease(None);
    let acceptor = tokio::spawn(accept_loop(listener, shared.clone()));
    let signals = tokio::spawn(watch_signals(shared.clone()));
    let keeper = tokio::spawn(store_lease::keep(shared.clone(), held.clone()));
    let inbox = tokio::spawn(remote_inbox::serve(
        shared.clone(),
        runtime.store().clone(),
        held.generation,
    ));

    let exit = Worker::new(runtime, shared.clone()).run(rx).await;

    acceptor.abort();
    signals.abort();
    inbox.abort();
    keeper.abort();
    // The answer to `close` / `release` (and the refusals of what was queued) are written by
    // their connections' tasks: let them finish before the runtime goes, bounded (1 s; up to
    // SHUTDOWN_REPLY_WAIT while a reply is still being sent in parts to a slow reader; a
    // reply cut after that ends its client with a "disconnected" error, exit 1).
    let start = Instant::now();
    while shared.connections.load(Ordering::SeqCst) > 0 {
        let limit = if shared.replying.load(Ordering::SeqCst) > 0 {
            SHUTDOWN_REPLY_WAIT
        } else {
            Duration::from_secs(1)
        };
        if start.elapsed() >= limit {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The session was closed by the worker (its writer lock released): the lease goes next,
    // so the next owner, on any host, finds the session free.
    held.release().await;
    // Remove the files while the lock is still held, so no one sees a half-gone owner.
    let _ = std::fs::remove_file(&paths.socket);
    let _ = std::fs::remove_file(&paths.lease);
    drop(lock);
    Ok(exit)
}

async fn watch_signals(shared: Arc<Shared>) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int), Ok(mut hup)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::hangup()),
    ) else {
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
        _ = hup.recv() => {}
    }
    shared.stop(OwnerExit::Signalled);
}

async fn accept_loop(listener: UnixListener, shared: Arc<Shared>) {
    let mut backoff = ACCEPT_BACKOFF_MIN;
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => {
                backoff = ACCEPT_BACKOFF_MIN;
                stream
            }
            Err(e) => {
                // Out of file descriptors and the like: the owner goes on serving the
                // connections it has, and accepts again once some are closed.
                tracing::warn!("cannot accept a connection: {e}; retrying in {backoff:?}");
                *locked(&shared.accept_error) = Some(e.to_string());
                shared.accept_errors.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
                continue;
            }
        };
        // Every connection costs a task and a file descriptor: past the limit and the
        // reserve, one is answered and closed at once, never left waiting.
        let Some(band) = shared.band_for_new() else {
            refuse(stream, &shared);
            continue;
        };
        let serving = Serving::new(&shared, band);
        // Numbered here, in the order the kernel queued the connections.
        let ticket = shared.arrivals.ticket();
        let shared = shared.clone();
        tokio::spawn(async move {
            serve_connection(stream, shared, band, ticket).await;
            drop(serving);
        });
    }
}

async fn serve_connection(
    stream: UnixStream,
    shared: Arc<Shared>,
    band: Band,
    ticket: super::arrival::Ticket,
) {
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    // One request line, bounded like an agent's message: a client cannot grow the owner's
    // memory with an endless line, nor hold a connection by sending nothing.
    let mut first = Vec::new();
    let max = acpx_runtime::capped_lines::max_message_bytes();
    let got = tokio::time::timeout(
        FIRST_LINE_DEADLINE,
        acpx_runtime::capped_lines::read_line_capped(&mut reader, &mut first, max, false),
    )
    .await;
    let request = match got {
        Ok(Ok(acpx_runtime::capped_lines::Capped::Line)) => {
            serde_json::from_slice::<Request>(first.trim_ascii_end())
        }
        Ok(Ok(acpx_runtime::capped_lines::Capped::TooLong)) => {
            let err = WireError::runtime(
                "QUEUE_REQUEST_INVALID",
                format!("bad request: a line of more than {} MiB", max >> 20),
                false,
            );
            let _ = write
                .write_all(line(&Response::Error { error: err }).as_bytes())
                .await;
            return;
        }
        Err(_) => {
            let err = WireError::runtime(
                "QUEUE_REQUEST_INVALID",
                format!(
                    "no request within {} s; the connection is closed",
                    FIRST_LINE_DEADLINE.as_secs()
                ),
                false,
            );
            tell(&mut write, &line(&Response::Error { error: err })).await;
            return;
        }
        Ok(_) => return,
    };
    let request = match request {
        Ok(r) => r,
        Err(e) => {
            let err =
                WireError::runtime("QUEUE_REQUEST_INVALID", format!("bad request: {e}"), false);
            let _ = write
                .write_all(line(&Response::Error { error: err }).as_bytes())
                .await;
            return;
        }
    };
    // Read: later arrivals wait for it to be queued.
    ticket.read();
    if band == Band::Reserve && !answered_in_reserve(&request) {
        tell(&mut write, &shared.refusal(false)).await;
        return;
    }
    let (reply, mut replies) = mpsc::unbounded_channel::<Outgoing>();
    // A turn's events wait for this client while it is behind (`acpx_runtime::output_backlog`);
    // closed when this connection ends, however it ends.
    let backlog = OutputBacklog::new(CLIENT_BACKLOG_MAX);
    let _closing = ClosesBacklog(backlog.clone());
    let stall = reply_stall(shared.ttl());
    let (wait, reading_answers) = dispatch(
        &shared,
        request,
        reply,
        &backlog,
        Some(reader),
        ticket.number,
    )
    .await;
    // Queued (or answered): later arrivals need not wait for it any more.
    drop(ticket);
    // Lines are written as they come, those waiting gathered into one write (up to
    // [`BATCH_MAX`]), so a fast stream of events costs few writes. A write the client leaves
    // untaken for `stall` ends the connection (a client stopped for good must not hold the
    // session's queue, whose turn waits for it).
    let mut done = false;
    while !done {
        let Some(first) = replies.recv().await else {
            break;
        };
        let mut batch = String::new();
        let mut event_bytes = 0;
        let mut next = Some(first);
        while let Some(out) = next.take() {
            match out {
                Outgoing::Line(l) => {
                    done = match response_type(&l) {
                        Some("accepted") => !wait,
                        Some(t) => !NOT_FINAL.contains(&t),
                        None => false,
                    };
                    add_to_batch(&mut batch, l);
                }
                Outgoing::Event(l) => {
                    event_bytes += l.len();
                    add_to_batch(&mut batch, l);
                }
                Outgoing::Reply {
                    texts,
                    outcome,
                    sending,
                } => {
                    let sent = async {
                        write_within(&mut write, batch.as_bytes(), stall).await?;
                        batch = String::new();
                        backlog.taken(std::mem::take(&mut event_bytes));
                        let written = write_reply(&mut write, &texts, *outcome, stall).await;
                        drop(sending);
                        written
                    };
                    if sent.await.is_err() {
                        // The client went away mid-reply: the turn is recorded; stop here.
                        return;
                    }
                    done = true;
                }
            }
            if done || batch.len() >= BATCH_MAX {
                break;
            }
            next = replies.try_recv().ok();
        }
        if !batch.is_empty() {
            if write_within(&mut write, batch.as_bytes(), stall)
                .await
                .is_err()
            {
                // The client went away or stopped reading; the task still runs to its end
                // and is recorded.
                return;
            }
            backlog.taken(event_bytes);
        }
    }
    drop(reading_answers);
    let _ = write.shutdown().await;
}

fn add_to_batch(batch: &mut String, line: String) {
    if batch.is_empty() {
        *batch = line;
    } else {
        batch.push_str(&line);
    }
}

/// The most bytes of waiting lines gathered into one write (a line longer than this is one
/// write of its own).
const BATCH_MAX: usize = 64 << 10;

/// How far a client may fall behind a turn's events, in bytes of event lines, before the
/// turn waits for it (`acpx_runtime::output_backlog`): a few thousand events, far more than a client
/// that reads as they come ever has outstanding.
pub(super) const CLIENT_BACKLOG_MAX: usize = 1 << 20;

/// Closes a connection's backlog when the connection ends.
struct ClosesBacklog(Arc<OutputBacklog>);

impl Drop for ClosesBacklog {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// The `type` of the lines that do not end an answer (see [`Response::is_final`]).
const NOT_FINAL: [&str; 7] = [
    "accepted",
    "started",
    "event",
    "permission_request",
    "elicitation_request",
    "elicitation_ended",
    "reply_part",
];

/// The least time a client may take no part of its reply before the owner drops it (see
/// [`write_reply`]); the owner's TTL when longer.
const REPLY_STALL_MIN: Duration = Duration::from_secs(60);

/// How long a client may take none of its reply: the owner's TTL, at least
/// [`REPLY_STALL_MIN`] (also without a TTL: every wait is bounded).
fn reply_stall(ttl: Option<Duration>) -> Duration {
    ttl.map_or(REPLY_STALL_MIN, |t| t.max(REPLY_STALL_MIN))
}

/// How long a stopping owner (`close`, `release`, a signal) waits for replies still being
/// sent in parts: a reader that keeps up gets its reply whole; a stalled one is cut.
const SHUTDOWN_REPLY_WAIT: Duration = Duration::from_secs(10);

/// The `type` of a response line, read from its start (serde writes the tag first) rather
/// than by parsing the line again: a streamed turn sends one line per event.
fn response_type(line: &str) -> Option<&str> {
    line.strip_prefix("{\"type\":\"")?.split('"').next()
}

/// An `event` line for `envelope`, serialized from the borrowed envelope (no copy).
pub(super) fn event_line(envelope: &EventEnvelope) -> String {
    #[derive(serde::Serialize)]
    struct EventLine<'a> {
        #[serde(rename = "type")]
        kind: &'static str,
        envelope: &'a EventEnvelope,
    }
    line(&EventLine {
        kind: "event",
        envelope,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_type_is_read_from_its_start_and_agrees_with_is_final() {
        let lines = [
            Response::Started {
                request_id: "r".into(),
                notices: Vec::new(),
            },
            Response::CancelResult {
                cancelled: false,
                withdrawn: false,
                request_id: None,
            },
            Response::Closed { closed: true },
            Response::ReplyPart { text: "x".into() },
        ];
        for r in lines {
            let l = line(&r);
            let t = response_type(&l).expect("a type");
            assert_eq!(!NOT_FINAL.contains(&t), r.is_final(), "{l}");
        }
    }
}
