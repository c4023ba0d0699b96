//! The owner process's work: take the lease, listen, keep one [`Session`] warm and run the
//! queued tasks one at a time, in order; exit when idle for the TTL, on `close` / `release`,
//! or on SIGTERM / SIGINT / SIGHUP.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use acpx_model::{EventEnvelope, RecordId, Timestamp};
use serde_json::{json, Map, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, Notify};

use crate::client_ops::{signal_group, PermissionMode, PermissionPrompter};
use crate::error::{RuntimeError, RuntimeResult};
use crate::mapping::MCP_SERVERS_KEY;
use crate::mcp_servers::{parse_mcp_servers, McpServers};
use crate::session::{
    CancelHandle, Notice, QueueLog, Runtime, RuntimeOptions, Session, TurnOptions,
};

use super::lease::{self, Lease, LeasePaths};
use super::permissions::ForwardingPrompter;
use super::protocol::{
    line, OwnerStatus, Request, Response, TaskOptions, WireError, WireNotice, WireOutcome,
};

/// The idle time-to-live when none is configured.
pub const DEFAULT_TTL: Duration = Duration::from_secs(300);
/// The most tasks queued behind the running one when none is configured.
pub const DEFAULT_QUEUE_MAX_DEPTH: usize = 16;

/// What an owner serves.
#[derive(Debug, Clone)]
pub struct OwnerConfig {
    /// The acpx home (the lease lives under `<home>/owners/`).
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
    /// Its lease file disappeared (the home was removed).
    LeaseGone,
    /// The agent could not be started; the tasks were answered with the error.
    OpenFailed(String),
}

enum JobKind {
    Prompt {
        prompt: Vec<Value>,
        options: TaskOptions,
        /// Asks the client's user (an interactive client only).
        prompter: Option<Arc<ForwardingPrompter>>,
    },
    SetMode(String, TaskOptions),
    SetConfigOption(String, Value, TaskOptions),
    SetModel(String, TaskOptions),
    Close,
    Release,
}

impl JobKind {
    /// The command's own options (`None` for close and release).
    fn options(&self) -> Option<&TaskOptions> {
        match self {
            JobKind::Prompt { options, .. }
            | JobKind::SetMode(_, options)
            | JobKind::SetConfigOption(_, _, options)
            | JobKind::SetModel(_, options) => Some(options),
            JobKind::Close | JobKind::Release => None,
        }
    }

    fn name(&self) -> &'static str {
        match self {
            JobKind::Prompt { .. } => "prompt",
            JobKind::SetMode(..) => "set_mode",
            JobKind::SetConfigOption(..) => "set_config_option",
            JobKind::SetModel(..) => "set_model",
            JobKind::Close => "close",
            JobKind::Release => "release",
        }
    }
}

struct Job {
    request_id: String,
    kind: JobKind,
    /// Response lines for the client; a client that went away leaves sends failing, and the
    /// task still runs and is recorded.
    reply: mpsc::UnboundedSender<String>,
    /// Whether `accepted` reached the log already (the session may not be open yet).
    accepted_logged: bool,
}

struct Shared {
    paths: LeasePaths,
    config: OwnerConfig,
    started: Instant,
    started_at: Timestamp,
    generation: u64,
    /// Tasks waiting behind the running one.
    depth: AtomicUsize,
    accepting: AtomicBool,
    stopping: Notify,
    stop_reason: Mutex<Option<OwnerExit>>,
    current: Mutex<Option<(String, CancelHandle)>>,
    agent_pid: Mutex<Option<u32>>,
    queue_log: Mutex<Option<QueueLog>>,
    jobs: mpsc::UnboundedSender<Job>,
    /// Connections still being served (their last lines may not be written yet).
    connections: AtomicUsize,
}

/// Counts a connection as served until dropped.
struct Serving(Arc<Shared>);

impl Drop for Serving {
    fn drop(&mut self) {
        self.0.connections.fetch_sub(1, Ordering::SeqCst);
    }
}

fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    fn stop(&self, why: OwnerExit) {
        self.accepting.store(false, Ordering::SeqCst);
        locked(&self.stop_reason).get_or_insert(why);
        if let Some((_, c)) = locked(&self.current).as_ref() {
            c.cancel();
        }
        self.stopping.notify_one();
    }

    fn status(&self) -> OwnerStatus {
        OwnerStatus {
            pid: std::process::id(),
            started_at: self.started_at,
            uptime_seconds: self.started.elapsed().as_secs(),
            agent_pid: *locked(&self.agent_pid),
            queue_depth: self.depth.load(Ordering::SeqCst),
            running: locked(&self.current).as_ref().map(|(r, _)| r.clone()),
            generation: self.generation,
            ttl_seconds: self.config.ttl.map_or(0, |t| t.as_secs()),
        }
    }

    fn write_lease(&self, agent_pid: Option<u32>) {
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
    let paths = LeasePaths::new(&config.home, &config.record_id);
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

    let (tx, rx) = mpsc::unbounded_channel();
    let shared = Arc::new(Shared {
        paths: paths.clone(),
        config,
        started: Instant::now(),
        started_at: Timestamp::now(),
        generation: u64::from(uuid::Uuid::new_v4().as_u128() as u32) << 16
            | u64::from(std::process::id() & 0xffff),
        depth: AtomicUsize::new(0),
        accepting: AtomicBool::new(true),
        stopping: Notify::new(),
        stop_reason: Mutex::new(None),
        current: Mutex::new(None),
        agent_pid: Mutex::new(None),
        queue_log: Mutex::new(None),
        jobs: tx,
        connections: AtomicUsize::new(0),
    });
    shared.write_lease(None);
    let acceptor = tokio::spawn(accept_loop(listener, shared.clone()));
    let signals = tokio::spawn(watch_signals(shared.clone()));

    let exit = Worker::new(runtime, shared.clone()).run(rx).await;

    acceptor.abort();
    signals.abort();
    // The answer to `close` / `release` (and the refusals of what was queued) are written by
    // their connections' tasks: let them finish before the runtime goes, bounded.
    for _ in 0..100 {
        if shared.connections.load(Ordering::SeqCst) == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
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
    while let Ok((stream, _)) = listener.accept().await {
        shared.connections.fetch_add(1, Ordering::SeqCst);
        let serving = Serving(shared.clone());
        let shared = shared.clone();
        tokio::spawn(async move {
            serve_connection(stream, shared).await;
            drop(serving);
        });
    }
}

async fn serve_connection(stream: UnixStream, shared: Arc<Shared>) {
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    let mut first = String::new();
    let got = tokio::time::timeout(Duration::from_secs(10), reader.read_line(&mut first)).await;
    let request = match got {
        Ok(Ok(n)) if n > 0 => serde_json::from_str::<Request>(first.trim_end()),
        _ => return,
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
    let (reply, mut replies) = mpsc::unbounded_channel::<String>();
    let mut reading_answers = None;
    let wait = match request {
        Request::Status => {
            let _ = reply.send(line(&Response::Status {
                status: shared.status(),
            }));
            true
        }
        Request::Cancel => {
            let _ = reply.send(line(&cancel(&shared).await));
            true
        }
        Request::SubmitPrompt {
            request_id,
            prompt,
            options,
            wait,
        } => {
            // An interactive client answers the turn's permission questions on this
            // connection (see `permissions`); the others get the non-interactive rule.
            let prompter = (options.interactive && wait).then(|| {
                let (p, task) = ForwardingPrompter::new(reply.clone(), reader);
                reading_answers = Some(task);
                p
            });
            let kind = JobKind::Prompt {
                prompt,
                options,
                prompter,
            };
            enqueue(&shared, request_id, kind, reply).await;
            wait
        }
        Request::SetMode { mode_id, options } => {
            let kind = JobKind::SetMode(mode_id, options);
            enqueue(&shared, control_id(), kind, reply).await;
            true
        }
        Request::SetConfigOption {
            config_id,
            value,
            options,
        } => {
            let kind = JobKind::SetConfigOption(config_id, value, options);
            enqueue(&shared, control_id(), kind, reply).await;
            true
        }
        Request::SetModel { model_id, options } => {
            let kind = JobKind::SetModel(model_id, options);
            enqueue(&shared, control_id(), kind, reply).await;
            true
        }
        Request::Close | Request::Release => {
            let (why, kind) = if request == Request::Close {
                (OwnerExit::Closed, JobKind::Close)
            } else {
                (OwnerExit::Released, JobKind::Release)
            };
            // A close refuses what comes next and cancels the turn in progress; a release
            // lets the queue ahead of it finish. Either bypasses the depth limit.
            if why == OwnerExit::Closed {
                shared.accepting.store(false, Ordering::SeqCst);
                if let Some((_, c)) = locked(&shared.current).as_ref() {
                    c.cancel();
                }
            }
            let job = Job {
                request_id: control_id(),
                kind,
                reply,
                accepted_logged: true,
            };
            if shared.jobs.send(job).is_err() {
                shared.stop(why);
            }
            true
        }
    };
    // Lines are written as they come and flushed when no more are waiting, so a fast stream
    // of events costs few writes.
    while let Some(first) = replies.recv().await {
        let mut batch = first;
        let mut last = batch.clone();
        while let Ok(more) = replies.try_recv() {
            batch.push_str(&more);
            last = more;
        }
        if write.write_all(batch.as_bytes()).await.is_err() {
            // The client went away; the task still runs to its end and is recorded.
            return;
        }
        let done = match response_type(&last) {
            Some("accepted") => !wait,
            Some(t) => !NOT_FINAL.contains(&t),
            None => false,
        };
        if done {
            break;
        }
    }
    if let Some(task) = reading_answers {
        task.abort();
    }
    let _ = write.shutdown().await;
}

/// The `type` of the lines that do not end an answer (see [`Response::is_final`]).
const NOT_FINAL: [&str; 4] = ["accepted", "started", "event", "permission_request"];

/// The `type` of a response line, read from its start (serde writes the tag first) rather
/// than by parsing the line again: a streamed turn sends one line per event.
fn response_type(line: &str) -> Option<&str> {
    line.strip_prefix("{\"type\":\"")?.split('"').next()
}

/// An `event` line for `envelope`, serialized from the borrowed envelope (no copy).
fn event_line(envelope: &EventEnvelope) -> String {
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

fn control_id() -> String {
    format!("ctl-{}", uuid::Uuid::new_v4())
}

async fn cancel(shared: &Shared) -> Response {
    // A task that just started may not be cancellable for a moment (its turn is opening).
    for _ in 0..50 {
        let current = locked(&shared.current).clone();
        match current {
            None => break,
            Some((request_id, handle)) => {
                if handle.cancel() {
                    return Response::CancelResult {
                        cancelled: true,
                        request_id: Some(request_id),
                    };
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Response::CancelResult {
        cancelled: false,
        request_id: None,
    }
}

async fn enqueue(
    shared: &Arc<Shared>,
    request_id: String,
    kind: JobKind,
    reply: mpsc::UnboundedSender<String>,
) {
    let refuse = |detail: &str, message: String| {
        let _ = reply.send(line(&Response::Error {
            error: WireError::runtime(detail, message, true),
        }));
    };
    if !shared.accepting.load(Ordering::SeqCst) {
        return refuse(
            "QUEUE_OWNER_SHUTTING_DOWN",
            "the queue owner is shutting down".into(),
        );
    }
    let max = shared.config.queue_max_depth;
    if shared
        .depth
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |d| {
            (d < max).then_some(d + 1)
        })
        .is_err()
    {
        return refuse(
            "QUEUE_OWNER_OVERLOADED",
            format!("the session's queue is full ({max} tasks wait already); try again later"),
        );
    }
    let depth = shared.depth.load(Ordering::SeqCst);
    let ahead = depth + usize::from(locked(&shared.current).is_some()) - 1;
    let _ = reply.send(line(&Response::Accepted {
        request_id: request_id.clone(),
        queue_depth: ahead,
    }));
    let log = locked(&shared.queue_log).clone();
    let mut accepted_logged = false;
    if let Some(log) = log {
        let mut extra = Map::new();
        extra.insert("task".into(), json!(kind.name()));
        extra.insert("queueDepth".into(), json!(ahead));
        accepted_logged = log
            .record("accepted", Some(&request_id), extra)
            .await
            .is_ok();
    }
    let job = Job {
        request_id,
        kind,
        reply,
        accepted_logged,
    };
    if let Err(mpsc::error::SendError(job)) = shared.jobs.send(job) {
        shared.depth.fetch_sub(1, Ordering::SeqCst);
        let _ = job.reply.send(line(&Response::Error {
            error: WireError::runtime(
                "QUEUE_OWNER_SHUTTING_DOWN",
                "the queue owner is shutting down",
                true,
            ),
        }));
    }
}

/// Where events recorded while the owner (re)attaches go: the client whose prompt caused it,
/// so its live output shows them as the one-process path does.
type AttachSink = Arc<Mutex<Option<mpsc::UnboundedSender<String>>>>;

struct Worker {
    store: Arc<dyn acpx_model::Store>,
    /// The owner's own options; each attach takes the resume policy, MCP servers and model
    /// of the task that causes it.
    base: RuntimeOptions,
    shared: Arc<Shared>,
    session: Option<Session>,
    /// The MCP servers (ACP array form) the agent of `session` was given.
    session_mcp: Value,
    attach_sink: AttachSink,
}

/// The MCP servers a task wants: its own (`--mcp-config`), else the record's, else the
/// configuration's (the order of `docs/format.md`, "Reattach and the user's choices").
fn wanted_mcp(options: &TaskOptions, record: &acpx_model::SessionRecord) -> Value {
    options
        .mcp_servers
        .clone()
        .or_else(|| record.acpx.extra.get(MCP_SERVERS_KEY).cloned())
        .or_else(|| options.default_mcp_servers.clone())
        .unwrap_or_else(|| Value::Array(Vec::new()))
}

fn parse_mcp(v: Option<&Value>) -> RuntimeResult<Option<McpServers>> {
    v.map(|v| {
        parse_mcp_servers(v)
            .map_err(|e| RuntimeError::InvalidInput(format!("bad MCP server list: {e}")))
    })
    .transpose()
}

impl Worker {
    fn new(runtime: Runtime, shared: Arc<Shared>) -> Worker {
        let attach_sink: AttachSink = Arc::new(Mutex::new(None));
        let mut base = runtime.options().clone();
        let sink = attach_sink.clone();
        let inner = base.observer.take();
        base.observer = Some(Arc::new(move |e: &EventEnvelope| {
            if let Some(o) = &inner {
                o(e);
            }
            if let Some(tx) = locked(&sink).as_ref() {
                let _ = tx.send(event_line(e));
            }
        }));
        Worker {
            store: runtime.store().clone(),
            base,
            shared,
            session: None,
            session_mcp: Value::Null,
            attach_sink,
        }
    }

    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Job>) -> OwnerExit {
        // The agent starts with the first task, which brings the options to attach with.
        let mut open_failed: Option<String> = None;
        let exit = loop {
            if let Some(why) = locked(&self.shared.stop_reason).clone() {
                if matches!(why, OwnerExit::Signalled | OwnerExit::LeaseGone) {
                    break why;
                }
            }
            let next = self.next_job(&mut rx, open_failed.is_some()).await;
            let job = match next {
                Ok(job) => job,
                Err(why) => break why,
            };
            if !matches!(job.kind, JobKind::Close | JobKind::Release) {
                self.shared.depth.fetch_sub(1, Ordering::SeqCst);
            }
            match job.kind {
                JobKind::Close | JobKind::Release => {
                    let close = matches!(job.kind, JobKind::Close);
                    self.shared.accepting.store(false, Ordering::SeqCst);
                    self.refuse_queued(&mut rx);
                    let result = self.finish(close).await;
                    let _ = job.reply.send(line(&match result {
                        Ok(sent) => Response::Closed { closed: sent },
                        Err(e) => Response::Error {
                            error: WireError::from_runtime(&e),
                        },
                    }));
                    break if close {
                        OwnerExit::Closed
                    } else {
                        OwnerExit::Released
                    };
                }
                _ => {
                    if !self.shared.accepting.load(Ordering::SeqCst) {
                        let _ = job.reply.send(line(&Response::Error {
                            error: WireError::runtime(
                                "QUEUE_OWNER_CLOSED",
                                "the session is being closed",
                                false,
                            ),
                        }));
                        continue;
                    }
                    match self.run_job(job).await {
                        Ok(()) => open_failed = None,
                        Err(e) => open_failed = Some(e),
                    }
                }
            }
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
            self.shared.config.ttl
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
                    if !self.shared.paths.lease.exists() {
                        return Err(OwnerExit::LeaseGone);
                    }
                    if deadline.is_some_and(|d| tokio::time::Instant::now() >= d)
                        && self.shared.depth.load(Ordering::SeqCst) == 0
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

    fn refuse_queued(&self, rx: &mut mpsc::UnboundedReceiver<Job>) {
        while let Ok(job) = rx.try_recv() {
            self.shared.depth.fetch_sub(1, Ordering::SeqCst);
            let _ = job.reply.send(line(&Response::Error {
                error: WireError::runtime(
                    "QUEUE_OWNER_CLOSED",
                    "the session was closed before this task started",
                    false,
                ),
            }));
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
        sink: Option<&mpsc::UnboundedSender<String>>,
    ) -> RuntimeResult<Option<Vec<Notice>>> {
        if let Some(s) = &self.session {
            if s.is_connected() {
                if wanted_mcp(options, &s.record().await) == self.session_mcp {
                    return Ok(None);
                }
                tracing::info!("the task names other MCP servers; reattaching with them");
            } else {
                tracing::warn!("the agent went away; restarting it for the next task");
            }
            if let Some(s) = self.session.take() {
                let _ = s.shutdown().await;
            }
        }
        let mut attach = self.base.clone();
        if let Some(p) = options.resume_policy {
            attach.resume_policy = p;
        }
        if let Some(n) = options.non_interactive {
            attach.non_interactive = n;
        }
        attach.mcp_servers = parse_mcp(options.mcp_servers.as_ref())?;
        if options.default_mcp_servers.is_some() {
            attach.default_mcp_servers = parse_mcp(options.default_mcp_servers.as_ref())?;
        }
        attach.model = options.model.clone();
        let runtime = Runtime::new(self.store.clone(), attach);
        *locked(&self.attach_sink) = sink.cloned();
        let opened = runtime.open_existing(&self.shared.config.record_id).await;
        *locked(&self.attach_sink) = None;
        match opened {
            Ok(s) => {
                *locked(&self.shared.agent_pid) = Some(s.pid());
                *locked(&self.shared.queue_log) = Some(s.queue_log());
                self.shared.write_lease(Some(s.pid()));
                self.session_mcp = wanted_mcp(options, &s.record().await);
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
            let _ = job.reply.send(line(&r));
        };
        let options = job.kind.options().cloned().unwrap_or_default();
        let sink = matches!(job.kind, JobKind::Prompt { .. }).then_some(&job.reply);
        let attached = match self.ensure_session(&options, sink).await {
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
        // `--model` on a warm session: selected before the task, as an attach would.
        if let (None, Some(model)) = (&attached, &options.model) {
            if let Err(e) = session.set_model(model).await {
                send(Response::Error {
                    error: WireError::from_runtime(&e),
                });
                return Ok(());
            }
        }
        let notices = attached
            .unwrap_or_default()
            .iter()
            .map(WireNotice::from)
            .collect();
        let log = session.queue_log();
        let rid = job.request_id.clone();
        let mut extra = Map::new();
        extra.insert("task".into(), json!(job.kind.name()));
        if !job.accepted_logged {
            let _ = log.record("accepted", Some(&rid), extra.clone()).await;
        }
        if let Err(e) = log.record("started", Some(&rid), extra.clone()).await {
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
        let result: Result<Response, RuntimeError> = match job.kind {
            JobKind::Prompt {
                prompt,
                options,
                prompter,
            } => {
                let reply = job.reply.clone();
                let observer: crate::Observer = Arc::new(move |e: &EventEnvelope| {
                    let _ = reply.send(event_line(e));
                });
                let turn = TurnOptions {
                    observer: Some(observer),
                    permission_mode: Some(
                        options
                            .permission_mode
                            .parse::<PermissionMode>()
                            .unwrap_or(PermissionMode::DenyAll),
                    ),
                    prompter: prompter.map(|p| p as Arc<dyn PermissionPrompter>),
                    non_interactive: options.non_interactive,
                    prompt_timeout: Some(options.timeout_ms.map(Duration::from_millis)),
                    request_id: Some(rid.clone()),
                };
                session
                    .prompt_with_options(prompt, turn)
                    .await
                    .map(|o| Response::Result {
                        outcome: WireOutcome::from(&o),
                    })
            }
            JobKind::SetMode(mode, _) => {
                session
                    .set_mode(&mode)
                    .await
                    .map(|()| Response::ControlResult {
                        resumed,
                        value: Value::Null,
                    })
            }
            JobKind::SetConfigOption(id, value, _) => session
                .set_config_option(&id, value)
                .await
                .map(|opts| Response::ControlResult {
                    resumed,
                    value: Value::Array(opts),
                }),
            JobKind::SetModel(model, _) => {
                session
                    .set_model(&model)
                    .await
                    .map(|(opts, via_config)| Response::ControlResult {
                        resumed,
                        value: json!({"configOptions": opts, "viaConfigOption": via_config}),
                    })
            }
            JobKind::Close | JobKind::Release => return Ok(()),
        };
        *locked(&self.shared.current) = None;
        let (phase, mut extra) = match &result {
            Ok(Response::Result { outcome }) => {
                let mut m = extra;
                m.insert("outcome".into(), json!(outcome.outcome));
                ("done", m)
            }
            Ok(_) => ("done", extra),
            Err(e) => {
                let w = WireError::from_runtime(e);
                let mut m = extra;
                m.insert("code".into(), json!(w.code));
                m.insert("message".into(), json!(w.message));
                ("error", m)
            }
        };
        extra.insert("ownerPid".into(), json!(std::process::id()));
        // The outcome goes out only after its queue event is appended (or failed to be).
        let logged = log.record(phase, Some(&rid), extra).await;
        match (result, logged) {
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
                // No agent to tell: mark the record closed ourselves.
                let store = self.store.clone();
                crate::ops::scope::close_with_retry(
                    &*store,
                    &store.load(&self.shared.config.record_id).await?,
                )
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
                request_id: None,
            },
            Response::Closed { closed: true },
        ];
        for r in lines {
            let l = line(&r);
            let t = response_type(&l).expect("a type");
            assert_eq!(!NOT_FINAL.contains(&t), r.is_final(), "{l}");
        }
    }
}
