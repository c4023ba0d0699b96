//! The agent process and the ACP connection to it.
//!
//! acpx spawns the agent itself (rather than through the SDK's `AcpAgent`) because the
//! session record needs what `AcpAgent` keeps private: the pid, the exit code or signal, and
//! the moment the process ended. The command line is parsed exactly as `AcpAgent::from_str`
//! parses it (shell-like words, leading `NAME=value` pairs become environment), the process
//! becomes the leader of its own process group (so stopping it reaches wrapper launchers'
//! children), and its stdio is handed to the SDK as a [`Lines`] transport, which also lets
//! acpx show every raw JSON-RPC line to a wire observer.

use std::collections::VecDeque;
use std::path::Path;
use std::process::Stdio;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use acpx_model::Timestamp;

use crate::capped_lines::{max_message_bytes, read_line_capped, Capped};
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::{AcpAgent, Agent, Error as SdkError, Lines, UntypedMessage};
use futures::{Sink, Stream};
use serde_json::Value;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::sync::{oneshot, watch};

use crate::client_ops::{signal_group, signal_name};
use crate::error::{AcpError, RuntimeError, RuntimeResult};
use crate::flow::UpdateGate;

/// Which way a raw JSON-RPC line went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireDirection {
    /// From acpx to the agent's stdin.
    ToAgent,
    /// From the agent's stdout.
    FromAgent,
    /// A line the agent wrote on stderr (not protocol).
    Stderr,
}

/// A callback that sees every raw line exchanged with the agent.
pub type WireObserver = Arc<dyn Fn(WireDirection, &str) + Send + Sync>;

/// How the agent process ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentExit {
    /// The exit code, when it exited normally.
    pub code: Option<i32>,
    /// The signal that ended it, when it was killed.
    pub signal: Option<String>,
    /// When acpx saw it end.
    pub at: Timestamp,
}

impl std::fmt::Display for AgentExit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.code, &self.signal) {
            (Some(c), _) => write!(f, "exited with code {c}"),
            (None, Some(s)) => write!(f, "was killed by {s}"),
            (None, None) => write!(f, "ended"),
        }
    }
}

const STDERR_TAIL_BYTES: usize = 8 * 1024;
const EXIT_GRACE: Duration = Duration::from_secs(1);
const TERM_GRACE: Duration = Duration::from_secs(2);
/// How long the agent's leftover children have between `SIGTERM` and `SIGKILL` once the
/// agent exited.
const CHILDREN_GRACE: Duration = Duration::from_secs(2);

/// A running agent process.
#[derive(Debug)]
pub(crate) struct AgentProcess {
    pub pid: u32,
    pub started_at: Timestamp,
    pub command: String,
    exit: watch::Receiver<Option<AgentExit>>,
    stderr_tail: Arc<Mutex<VecDeque<u8>>>,
    stderr_closed: watch::Receiver<bool>,
    /// Why acpx stopped reading the agent and killed it (a message past the cap), if it did.
    cut_off: Arc<Mutex<Option<String>>>,
}

impl AgentProcess {
    /// Why acpx stopped reading the agent and killed it, if it did.
    pub fn cut_off(&self) -> Option<String> {
        self.cut_off
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The exit, once the process has ended.
    pub fn exit(&self) -> Option<AgentExit> {
        self.exit.borrow().clone()
    }

    /// Waits until the process has ended.
    pub async fn wait(&self) -> Option<AgentExit> {
        let mut rx = self.exit.clone();
        loop {
            if let Some(e) = rx.borrow().clone() {
                return Some(e);
            }
            if rx.changed().await.is_err() {
                return rx.borrow().clone();
            }
        }
    }

    /// A receiver that changes when the process ends.
    pub fn exit_watch(&self) -> watch::Receiver<Option<AgentExit>> {
        self.exit.clone()
    }

    /// The stderr tail once the agent's stderr is closed (waiting at most `max` for that:
    /// a descendant may keep it open).
    pub async fn final_stderr_tail(&self, max: Duration) -> String {
        final_tail(&self.stderr_tail, self.stderr_closed.clone(), max).await
    }

    /// [`AgentProcess::final_stderr_tail`] for another task.
    pub fn stderr_tail_handle(
        &self,
    ) -> impl Fn(Duration) -> futures::future::BoxFuture<'static, String> + Send + Sync + 'static
    {
        let tail = self.stderr_tail.clone();
        let closed = self.stderr_closed.clone();
        move |max| {
            let tail = tail.clone();
            let closed = closed.clone();
            Box::pin(async move { final_tail(&tail, closed, max).await })
        }
    }

    /// Stops the agent: waits for it to exit after its stdin was closed, then `SIGTERM`s its
    /// process group, then `SIGKILL`s it. Returns how it ended and whether acpx had to kill it.
    pub async fn stop(&self) -> (Option<AgentExit>, bool) {
        if let Ok(e) = tokio::time::timeout(EXIT_GRACE, self.wait()).await {
            return (e, false);
        }
        signal_group(self.pid, libc::SIGTERM);
        if let Ok(e) = tokio::time::timeout(TERM_GRACE, self.wait()).await {
            return (e, true);
        }
        signal_group(self.pid, libc::SIGKILL);
        (self.wait().await, true)
    }

    /// Kills the process group at once (drop path), the agent's children with it even when
    /// the agent itself has exited.
    pub fn kill_now(&self) {
        signal_group(self.pid, libc::SIGKILL);
    }
}

async fn final_tail(
    tail: &Mutex<VecDeque<u8>>,
    mut closed: watch::Receiver<bool>,
    max: Duration,
) -> String {
    let _ = tokio::time::timeout(max, closed.wait_for(|c| *c)).await;
    tail_text(tail)
}

fn tail_text(tail: &Mutex<VecDeque<u8>>) -> String {
    let mut t = tail.lock().unwrap_or_else(|p| p.into_inner());
    String::from_utf8_lossy(t.make_contiguous())
        .trim()
        .to_owned()
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        // An agent whose session failed half-way must not outlive it.
        self.kill_now();
    }
}

type OutgoingLines = std::pin::Pin<Box<dyn Sink<String, Error = std::io::Error> + Send>>;
type IncomingLines = std::pin::Pin<Box<dyn Stream<Item = std::io::Result<String>> + Send>>;

/// Sees every line of the agent's stdout that is not JSON-RPC (`docs/format.md` § Agent output
/// that is not JSON-RPC); such lines never reach the ACP connection.
pub(crate) type NonProtocolSink = Arc<dyn Fn(&str) + Send + Sync>;

/// Whether a stdout line goes to the ACP connection: a JSON object (whose errors the
/// connection reports), or a blank line (which it skips). Anything else is not JSON-RPC.
fn is_protocol_line(line: &str) -> bool {
    let t = line.trim_start();
    t.is_empty() || t.starts_with('{')
}

/// The transport to a spawned agent.
pub(crate) type AgentTransport = Lines<OutgoingLines, IncomingLines>;

/// Spawns the agent command in `cwd`.
pub(crate) fn spawn(
    command_line: &str,
    cwd: &Path,
    extra_env: &[(String, String)],
    wire: Option<WireObserver>,
    non_protocol: NonProtocolSink,
    gate: Arc<UpdateGate>,
) -> RuntimeResult<(AgentProcess, AgentTransport)> {
    let spawn_err = |reason: String| RuntimeError::Spawn {
        command: command_line.to_owned(),
        reason,
    };
    if command_line.trim().is_empty() {
        return Err(spawn_err("the agent command is empty".into()));
    }
    let config = AcpAgent::from_str(command_line)
        .map_err(|e| spawn_err(format!("cannot parse the command line: {}", e.message)))?
        .into_config();
    let mut cmd = tokio::process::Command::new(config.command());
    cmd.args(config.arguments())
        .envs(config.environment())
        .envs(extra_env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .current_dir(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = cmd.spawn().map_err(|e| spawn_err(e.to_string()))?;
    let started_at = Timestamp::now();
    let pid = child
        .id()
        .ok_or_else(|| spawn_err("the process ended before it could be tracked".into()))?;
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(spawn_err("its stdio could not be opened".into()));
    };

    let (exit_tx, exit_rx) = watch::channel(None);
    let group = pid;
    tokio::spawn(async move {
        let waited = child.wait().await;
        // The agent's children do not outlive it: what is left of its process group is
        // asked to stop, then killed (docs/format.md § Processes). The group id cannot name
        // another group while any of its members lives.
        signal_group(group, libc::SIGTERM);
        tokio::spawn(async move {
            tokio::time::sleep(CHILDREN_GRACE).await;
            signal_group(group, libc::SIGKILL);
        });
        let exit = match waited {
            Ok(status) => {
                use std::os::unix::process::ExitStatusExt;
                AgentExit {
                    code: status.code(),
                    signal: status.signal().map(signal_name),
                    at: Timestamp::now(),
                }
            }
            Err(_) => AgentExit {
                code: None,
                signal: None,
                at: Timestamp::now(),
            },
        };
        let _ = exit_tx.send(Some(exit));
    });

    let stderr_tail = Arc::new(Mutex::new(VecDeque::new()));
    let (closed_tx, closed_rx) = watch::channel(false);
    tokio::spawn({
        let tail = stderr_tail.clone();
        let wire = wire.clone();
        async move {
            let mut reader = BufReader::new(stderr);
            let mut line = Vec::new();
            loop {
                // A line past the tail's size would not be kept anyway: its start is.
                match read_line_capped(&mut reader, &mut line, STDERR_TAIL_BYTES, true).await {
                    Ok(Capped::End) | Err(_) => break,
                    Ok(_) => {
                        let text = String::from_utf8_lossy(&line);
                        let text = text.trim_end_matches(['\n', '\r']);
                        tracing::debug!(target: "acpx::agent_stderr", "{text}");
                        if let Some(w) = &wire {
                            w(WireDirection::Stderr, text);
                        }
                        let mut t = tail.lock().unwrap_or_else(|p| p.into_inner());
                        t.extend(line.iter());
                        let excess = t.len().saturating_sub(STDERR_TAIL_BYTES);
                        t.drain(..excess);
                    }
                }
            }
            let _ = closed_tx.send(true);
        }
    });

    let cut_off: Arc<Mutex<Option<String>>> = Arc::default();
    let incoming: IncomingLines = {
        let wire = wire.clone();
        let max = max_message_bytes();
        let cut_off = cut_off.clone();
        Box::pin(futures::stream::unfold(
            (BufReader::new(stdout), Vec::new()),
            move |(mut reader, mut buf)| {
                let wire = wire.clone();
                let non_protocol = non_protocol.clone();
                let gate = gate.clone();
                let cut_off = cut_off.clone();
                async move {
                    loop {
                        let read = match read_line_capped(&mut reader, &mut buf, max, false).await {
                            Ok(Capped::End) => Ok(None),
                            Ok(Capped::Line) => {
                                while buf.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
                                    buf.pop();
                                }
                                Ok(Some(String::from_utf8_lossy(&buf).into_owned()))
                            }
                            // The connection ends with a clear error; the agent is killed
                            // now (it may go on writing) and the next task starts a new one.
                            Ok(Capped::TooLong) => {
                                let why = format!(
                                    "the agent wrote a message of more than {} MiB without a \
                                     newline, and acpx stopped it \
                                     (ACPX_MAX_AGENT_MESSAGE_BYTES sets the cap)",
                                    max >> 20
                                );
                                *cut_off.lock().unwrap_or_else(|p| p.into_inner()) =
                                    Some(why.clone());
                                signal_group(pid, libc::SIGKILL);
                                Err(std::io::Error::new(std::io::ErrorKind::InvalidData, why))
                            }
                            Err(e) => Err(e),
                        };
                        match read {
                            Ok(Some(line)) => {
                                if let Some(w) = &wire {
                                    w(WireDirection::FromAgent, &line);
                                }
                                if !is_protocol_line(&line) {
                                    non_protocol(&line);
                                    continue;
                                }
                                // Backpressure: the rest of a fast agent's turn waits in its
                                // stdout pipe, not in this process (see `crate::flow`).
                                gate.admit(&line).await;
                                return Some((Ok(line), (reader, buf)));
                            }
                            Ok(None) => return None,
                            Err(e) => return Some((Err(e), (reader, buf))),
                        }
                    }
                }
            },
        ))
    };
    let outgoing: OutgoingLines = Box::pin(futures::sink::unfold(
        (stdin, wire),
        |(mut stdin, wire), line: String| async move {
            if let Some(w) = &wire {
                w(WireDirection::ToAgent, &line);
            }
            let mut buf = line.into_bytes();
            buf.push(b'\n');
            stdin.write_all(&buf).await?;
            stdin.flush().await?;
            Ok::<_, std::io::Error>((stdin, wire))
        },
    ));
    Ok((
        AgentProcess {
            pid,
            started_at,
            command: command_line.to_owned(),
            exit: exit_rx,
            stderr_tail,
            stderr_closed: closed_rx,
            cut_off,
        },
        Lines::new(outgoing, incoming),
    ))
}

/// The live ACP connection: a handle to send requests, and the task driving it.
#[derive(Debug)]
pub(crate) struct Connection {
    pub cx: ConnectionTo<Agent>,
    stop: Option<oneshot::Sender<()>>,
    ended: watch::Receiver<bool>,
    task: Option<tokio::task::JoinHandle<()>>,
}

/// Why a request got no result.
#[derive(Debug, Clone)]
pub(crate) enum CallError {
    /// The agent answered with a JSON-RPC error.
    Rpc(AcpError),
    /// The connection ended before an answer came.
    Disconnected(String),
}

impl CallError {
    pub fn into_runtime(self, method: &str) -> RuntimeError {
        match self {
            CallError::Rpc(error) => RuntimeError::Agent {
                method: method.to_owned(),
                error: Box::new(error),
            },
            CallError::Disconnected(detail) => RuntimeError::Disconnected {
                method: method.to_owned(),
                detail,
            },
        }
    }
}

/// A request sent to the agent and not answered yet: a future of its answer, and what it takes
/// to give up on it.
///
/// Giving up ([`Pending::give_up`], and dropping it unanswered) sends the ACP
/// `$/cancel_request` notification with the request's JSON-RPC id, so an agent that can stop
/// the work stops it (docs/format.md § Requests acpx gives up on). The SDK sends at most one
/// per request, and none once the answer arrived.
#[derive(Debug)]
pub(crate) struct Pending {
    answer: oneshot::Receiver<Result<Value, CallError>>,
    /// The request's JSON-RPC id as sent (`null` when the request could not be sent).
    id: Value,
    cancel: Option<agent_client_protocol::RequestCancellationHandle>,
}

impl Pending {
    fn failed(error: CallError) -> Pending {
        let (tx, rx) = oneshot::channel();
        let _ = tx.send(Err(error));
        Pending {
            answer: rx,
            id: Value::Null,
            cancel: None,
        }
    }

    /// The request's JSON-RPC id, as it went to the agent.
    pub fn rpc_id(&self) -> &Value {
        &self.id
    }

    /// Sends `$/cancel_request` for this request unless it was answered (or already given up
    /// on). `Err`: the notification could not be queued (the connection is gone).
    pub fn give_up(&self) -> Result<(), String> {
        match &self.cancel {
            Some(handle) => handle.cancel().map_err(|e| e.message),
            None => Ok(()),
        }
    }
}

impl std::future::Future for Pending {
    type Output = Result<Result<Value, CallError>, oneshot::error::RecvError>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        std::pin::Pin::new(&mut self.answer).poll(cx)
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        // Dropped unanswered (an interrupt or a timeout above this request): acpx gave up on
        // it. After the answer this is a no-op.
        if let Err(e) = self.give_up() {
            tracing::debug!("cannot send $/cancel_request for request {}: {e}", self.id);
        }
    }
}

impl Connection {
    /// Runs `builder` over `transport` in a background task until [`Connection::shutdown`] or
    /// until the agent closes its stdout.
    pub async fn start<H>(
        builder: agent_client_protocol::v1::Builder<agent_client_protocol::Client, H>,
        transport: AgentTransport,
    ) -> RuntimeResult<Connection>
    where
        H: agent_client_protocol::HandleDispatchFrom<Agent> + 'static,
    {
        let (cx_tx, cx_rx) = oneshot::channel();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let (ended_tx, ended_rx) = watch::channel(false);
        let task = tokio::spawn(async move {
            let result = builder
                .connect_with(transport, async move |cx: ConnectionTo<Agent>| {
                    let _ = cx_tx.send(cx.clone());
                    tokio::select! {
                        _ = stop_rx => {}
                        _ = cx.incoming_closed() => {}
                    }
                    Ok(())
                })
                .await;
            if let Err(e) = result {
                tracing::debug!("ACP connection ended: {e}");
            }
            let _ = ended_tx.send(true);
        });
        let cx = cx_rx.await.map_err(|_| RuntimeError::Disconnected {
            method: "connect".into(),
            detail: "the connection ended before it started".into(),
        })?;
        Ok(Connection {
            cx,
            stop: Some(stop_tx),
            ended: ended_rx,
            task: Some(task),
        })
    }

    /// Sends a request. `on_result` runs on the dispatch loop, before any message the agent
    /// sent after its answer is handled (use it to switch state atomically with the answer).
    pub fn call(
        &self,
        method: &str,
        params: Value,
        on_result: impl FnOnce(&Result<Value, SdkError>) + Send + 'static,
    ) -> Pending {
        let (tx, rx) = oneshot::channel();
        let message = match UntypedMessage::new(method, params) {
            Ok(m) => m,
            Err(e) => return Pending::failed(CallError::Disconnected(e.message)),
        };
        let request = self.cx.send_request(message);
        let id = serde_json::to_value(request.raw_id()).unwrap_or(Value::Null);
        let cancel = Some(request.cancellation_handle());
        let sent = request.on_receiving_result(move |result: Result<Value, SdkError>| async move {
            on_result(&result);
            let mapped = result.map_err(|e| {
                if agent_client_protocol::is_incoming_transport_closed(&e)
                    || agent_client_protocol::is_connection_terminated(&e)
                {
                    CallError::Disconnected("the agent closed the connection".into())
                } else {
                    CallError::Rpc(AcpError::from_sdk(&e))
                }
            });
            let _ = tx.send(mapped);
            Ok(())
        });
        if let Err(e) = sent {
            tracing::debug!("cannot send {method}: {e}");
        }
        Pending {
            answer: rx,
            id,
            cancel,
        }
    }

    /// Sends a notification.
    pub fn notify(&self, method: &str, params: Value) -> Result<(), CallError> {
        let message =
            UntypedMessage::new(method, params).map_err(|e| CallError::Disconnected(e.message))?;
        self.cx
            .send_notification(message)
            .map_err(|e| CallError::Disconnected(e.message))
    }

    /// Whether the connection has ended.
    pub fn has_ended(&self) -> bool {
        *self.ended.borrow()
    }

    /// Ends the connection (closing the agent's stdin) and waits for its task.
    pub async fn shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            if tokio::time::timeout(Duration::from_secs(5), task)
                .await
                .is_err()
            {
                tracing::warn!("the ACP connection did not shut down within 5 s");
            }
        }
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}
