//! The owner process's work: take the lease, listen, keep one [`Session`](acpx_runtime::Session) warm and run the
//! queued tasks one at a time, in order; exit when idle for the TTL, on `close` / `release`,
//! or on SIGTERM / SIGINT / SIGHUP.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use acpx_model::Timestamp;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, Notify};

use acpx_runtime::error::{RuntimeError, RuntimeResult};
use acpx_runtime::output_backlog::OutputBacklog;
use acpx_runtime::session::Runtime;
use acpx_runtime::signal_group;

use super::config::OwnerConfig;
use super::connections::{answered_in_reserve, max_connections, refuse, tell, Band, Serving};
use super::dispatch::dispatch;
use super::exit::OwnerExit;
use super::lease::{self, LeasePaths};
use super::mutex::locked;
use super::outgoing::{Outgoing, CLIENT_BACKLOG_MAX};
use super::protocol::{line, Request, Response, WireError};
use super::reply_parts::{write_reply, write_within};
use super::shared::Shared;
use super::worker::Worker;
use super::{remote_inbox, store_lease};

/// The first and the longest pause after a failed `accept`.
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// How long a connection may take to send its request line (a client sends it as soon as it
/// is connected); then it is told so and closed. Only the request is bounded so: a client
/// that sent it waits its turn as long as the queue takes.
const FIRST_LINE_DEADLINE: Duration = Duration::from_secs(10);

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
        replying: Arc::default(),
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
