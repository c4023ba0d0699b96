//! The client side: find the session's owner (starting one when none runs), send one
//! request and read the answer as it streams.
//!
//! Starting is race-safe: every starter may spawn an owner, the spawned owners race for the
//! lease lock, the losers exit quietly ([`super::OwnerExit::AlreadyRunning`]), and every
//! client keeps trying to connect until the winner listens.

use std::path::Path;
use std::time::Duration;

use acpx_model::RecordId;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;

use super::lease::{self, LeasePaths};
use super::protocol::{line, ClientLine, Request, Response, WireError, WireQuestion};
use acpx_runtime::{PermissionAnswer, PermissionPrompter};

/// How long a client keeps trying to reach an owner it started.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a client waits for an owner's first answer to a request, which a live owner
/// sends at once.
pub const FIRST_ANSWER_TIMEOUT: Duration = Duration::from_secs(10);
/// Between two connection attempts.
const RETRY_WAIT: Duration = Duration::from_millis(25);
/// A starter spawns again after this long without a listening owner (its first one may
/// have lost a race to an owner that then went idle).
const RESPAWN_AFTER: Duration = Duration::from_secs(2);

/// The answer to one request, line by line.
#[derive(Debug)]
pub struct Answer {
    reader: BufReader<OwnedReadHalf>,
    /// Open while a prompt's client waits; written to with the answers to forwarded
    /// permission questions (interactive prompts only).
    writer: Option<OwnedWriteHalf>,
    interactive: bool,
    /// Lines read and not yet taken: the first answer, and those read while a forwarded
    /// elicitation was asked ([`Answer::put_back`]).
    pending: std::collections::VecDeque<Response>,
    /// A line read in part: [`Answer::next`] may be dropped mid-line (it is raced against
    /// the user's questions and interrupts) and goes on where it stopped.
    partial: String,
    finished: bool,
}

impl Answer {
    /// The next response; `Ok(None)` after the final one. An owner that goes away before
    /// the final response is [`WireError::disconnected`].
    pub async fn next(&mut self) -> Result<Option<Response>, WireError> {
        if let Some(r) = self.pending.pop_front() {
            self.finished = r.is_final();
            return Ok(Some(r));
        }
        if self.finished {
            return Ok(None);
        }
        let read = self.reader.read_line(&mut self.partial).await;
        let buf = std::mem::take(&mut self.partial);
        match read {
            // A line cut by the end of the stream is the owner going away mid-line (killed,
            // or it dropped a client that read nothing for too long), not a bad line.
            Ok(0) | Err(_) => {
                self.finished = true;
                Err(WireError::disconnected())
            }
            Ok(_) if !buf.ends_with('\n') => {
                self.finished = true;
                Err(WireError::disconnected())
            }
            Ok(_) => {
                let r: Response = serde_json::from_str(buf.trim_end()).map_err(|e| {
                    WireError::runtime(
                        "QUEUE_PROTOCOL_INVALID",
                        format!("the queue owner sent an unreadable line: {e}"),
                        false,
                    )
                })?;
                self.finished = r.is_final();
                Ok(Some(r))
            }
        }
    }

    /// Puts `lines` back, in order, to be taken by [`Answer::next`] before anything else.
    pub fn put_back(&mut self, lines: Vec<Response>) {
        for r in lines.into_iter().rev() {
            self.pending.push_front(r);
        }
    }

    /// Sends the user's answer to the owner's `elicitation_request` `id` (the ACP response;
    /// `None`: nobody could be asked).
    pub async fn answer_elicitation(
        &mut self,
        id: u64,
        answer: Option<serde_json::Value>,
    ) -> std::io::Result<()> {
        let Some(w) = self.writer.as_mut().filter(|_| self.interactive) else {
            return Err(std::io::Error::other(
                "this request was not interactive; the owner reads no answers",
            ));
        };
        w.write_all(line(&ClientLine::ElicitationAnswer { id, answer }).as_bytes())
            .await
    }

    /// Sends the user's answer to the owner's `permission_request` `id`.
    pub async fn answer_permission(&mut self, id: u64, approved: bool) -> std::io::Result<()> {
        self.send_answer(id, PermissionAnswer::once(approved)).await
    }

    /// Sends the user's whole answer (with "always") to `permission_request` `id`.
    async fn send_answer(&mut self, id: u64, a: PermissionAnswer) -> std::io::Result<()> {
        let Some(w) = self.writer.as_mut().filter(|_| self.interactive) else {
            return Err(std::io::Error::other(
                "this request was not interactive; the owner reads no answers",
            ));
        };
        let answer = ClientLine::PermissionAnswer {
            id,
            approved: a.approved,
            always: a.always,
        };
        w.write_all(line(&answer).as_bytes()).await
    }

    /// Asks `prompter` the owner's forwarded `question` (as the one-process path would ask
    /// it) and sends the answer back. Returns the answer.
    pub async fn answer_with(
        &mut self,
        id: u64,
        question: WireQuestion,
        prompter: &dyn PermissionPrompter,
    ) -> std::io::Result<bool> {
        let answer = prompter.answer(&question.into()).await;
        self.send_answer(id, answer).await?;
        Ok(answer.approved)
    }

    /// Reads up to the final response and returns it.
    pub async fn last(mut self) -> Result<Response, WireError> {
        let mut last = None;
        while let Some(r) = self.next().await? {
            last = Some(r);
        }
        last.ok_or_else(WireError::disconnected)
    }
}

/// Connects to the owner's socket: where the paths put it, else where its lease says it
/// listens (an owner that had to put its socket elsewhere, or an older acpx's).
async fn connect(paths: &LeasePaths) -> Option<UnixStream> {
    if let Ok(s) = UnixStream::connect(&paths.socket).await {
        return Some(s);
    }
    let leased = super::lease::read(paths)?.socket;
    if leased == paths.socket {
        return None;
    }
    UnixStream::connect(&leased).await.ok()
}

/// Sends `request` to a listening owner. `Ok(None)` when none listens, or when the one
/// listening goes away without answering (reset, or a broken pipe on our write).
pub async fn send(paths: &LeasePaths, request: &Request) -> std::io::Result<Option<Answer>> {
    let stream = match connect(paths).await {
        Some(s) => s,
        None => return Ok(None),
    };
    let (read, mut write) = stream.into_split();
    match write.write_all(line(request).as_bytes()).await {
        Err(e) if went_away(&e) => return Ok(None),
        r => r?,
    }
    // The owner reads one request line per connection; only an interactive prompt's client
    // writes more (its answers to permission questions). A client that waits for its prompt
    // keeps its side open until the answer: the owner drops a prompt whose client closed it
    // before the prompt started.
    let interactive = matches!(
        request,
        Request::SubmitPrompt { options, wait: true, .. } if options.interactive
    );
    let waits = matches!(request, Request::SubmitPrompt { wait: true, .. });
    let writer = if waits {
        Some(write)
    } else {
        drop(write);
        None
    };
    let mut reader = BufReader::new(read);
    let mut buf = String::new();
    // A live owner answers every request at once (`accepted`, `status`, …); one that does
    // not is stopped (`kill -STOP`) or stuck, and the kernel accepted the connection for it.
    let first = tokio::time::timeout(FIRST_ANSWER_TIMEOUT, reader.read_line(&mut buf)).await;
    let Ok(first) = first else {
        let pid = super::lease::read(paths).map_or_else(|| "?".to_owned(), |l| l.pid.to_string());
        return Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!(
                "the queue owner (pid {pid}) accepted the connection but did not answer within \
                 {} s: it is stopped or stuck; `kill -CONT {pid}` resumes a stopped one, \
                 `kill {pid}` ends it (the next command starts another)",
                FIRST_ANSWER_TIMEOUT.as_secs()
            ),
        ));
    };
    let n = match first {
        Err(e) if went_away(&e) => 0,
        r => r?,
    };
    if n == 0 {
        // It accepted the connection and went away without a word (closed, or reset with
        // our request unread): an owner shutting down, which took nothing.
        return Ok(None);
    }
    let first: Response = serde_json::from_str(buf.trim_end()).map_err(std::io::Error::other)?;
    Ok(Some(Answer {
        reader,
        writer,
        interactive,
        pending: [first].into(),
        partial: String::new(),
        finished: false,
    }))
}

/// The wire error of a failed exchange with an owner: `QUEUE_OWNER_UNRESPONSIVE` for one that
/// accepted the connection and never answered, else `QUEUE_PROTOCOL_INVALID`.
pub fn io_wire(e: &std::io::Error) -> WireError {
    if e.kind() == std::io::ErrorKind::TimedOut {
        WireError::runtime("QUEUE_OWNER_UNRESPONSIVE", e.to_string(), true)
    } else {
        WireError::runtime(
            "QUEUE_PROTOCOL_INVALID",
            format!("cannot talk to the queue owner: {e}"),
            true,
        )
    }
}

/// Whether a socket error says the owner closed the connection under us: an owner that exits
/// with a request unread resets it (`ECONNRESET`, or `EPIPE` on our write).
fn went_away(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::BrokenPipe
            | std::io::ErrorKind::ConnectionAborted
    )
}

/// Sends `request` to the owner of session `id` if one runs; `Ok(None)` otherwise (nothing
/// is started).
pub async fn send_if_running(
    authority: &Path,
    id: &RecordId,
    request: &Request,
) -> std::io::Result<Option<Answer>> {
    let paths = LeasePaths::new(authority, id);
    if !lease::is_alive(&paths) {
        return Ok(None);
    }
    send(&paths, request).await
}

/// Sends `request` to the owner of session `id` if one listens, and goes without waiting
/// for the answer (the owner still serves a request whose client left). Best effort, bounded
/// by a second: what a client that gives up leaves behind (a close for a session still being
/// created).
pub async fn send_and_leave(authority: &Path, id: &RecordId, request: &Request) {
    let paths = LeasePaths::new(authority, id);
    let sent = async {
        if let Some(mut stream) = connect(&paths).await {
            let _ = stream.write_all(line(request).as_bytes()).await;
            let _ = stream.shutdown().await;
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), sent).await;
}

/// Where [`send_or_spawn_or`] reached an owner.
#[derive(Debug)]
pub enum Reached<T> {
    /// The local owner's answer.
    Local(Box<Answer>),
    /// What `elsewhere` found.
    Elsewhere(T),
}

/// How often [`send_or_spawn_or`] asks `elsewhere`.
const ELSEWHERE_EVERY: Duration = Duration::from_millis(500);

/// Sends `request` to the owner of session `id`, calling `spawn` to start one when none
/// runs (and again now and then while none listens), until [`CONNECT_TIMEOUT`].
pub async fn send_or_spawn(
    authority: &Path,
    id: &RecordId,
    request: &Request,
    spawn: &(dyn Fn() -> std::io::Result<()> + Send + Sync),
) -> Result<Answer, WireError> {
    match send_or_spawn_or(authority, id, request, spawn, async || Ok(None::<()>)).await? {
        Reached::Local(a) => Ok(*a),
        Reached::Elsewhere(()) => Err(WireError::disconnected()),
    }
}

/// [`send_or_spawn`], asking `elsewhere` first and then twice a second whether the session
/// is served elsewhere (an owner on another host): what it finds ends the wait.
pub async fn send_or_spawn_or<T>(
    authority: &Path,
    id: &RecordId,
    request: &Request,
    spawn: &(dyn Fn() -> std::io::Result<()> + Send + Sync),
    mut elsewhere: impl AsyncFnMut() -> Result<Option<T>, WireError>,
) -> Result<Reached<T>, WireError> {
    let paths = LeasePaths::new(authority, id);
    let start = tokio::time::Instant::now();
    let mut last_spawn: Option<tokio::time::Instant> = None;
    let mut last_elsewhere: Option<tokio::time::Instant> = None;
    loop {
        if last_elsewhere.is_none_or(|t| t.elapsed() >= ELSEWHERE_EVERY) {
            last_elsewhere = Some(tokio::time::Instant::now());
            if let Some(found) = elsewhere().await? {
                return Ok(Reached::Elsewhere(found));
            }
        }
        match send(&paths, request).await {
            Ok(Some(mut answer)) => {
                // An owner on its way out refuses; the next one will take the task.
                let shutting = matches!(
                    answer.pending.front(),
                    Some(Response::Error { error })
                        if error.detail_code.as_deref() == Some("QUEUE_OWNER_SHUTTING_DOWN")
                );
                if !shutting {
                    return Ok(Reached::Local(Box::new(answer)));
                }
                answer.pending.clear();
            }
            Ok(None) => {}
            Err(e) => return Err(io_wire(&e)),
        }
        if !lease::is_alive(&paths) && last_spawn.is_none_or(|t| t.elapsed() >= RESPAWN_AFTER) {
            spawn().map_err(|e| {
                WireError::runtime(
                    "QUEUE_OWNER_START_FAILED",
                    format!("cannot start the queue owner: {e}"),
                    true,
                )
            })?;
            last_spawn = Some(tokio::time::Instant::now());
        }
        if start.elapsed() >= CONNECT_TIMEOUT {
            return Err(WireError::runtime(
                "QUEUE_OWNER_START_FAILED",
                format!(
                    "no queue owner answered on {} within {} s",
                    paths.socket.display(),
                    CONNECT_TIMEOUT.as_secs()
                ),
                true,
            ));
        }
        tokio::time::sleep(RETRY_WAIT).await;
    }
}

/// Asks a running owner of session `id` to stop (leaving the session open) and waits until
/// its lease is free, so a one-process writer can take the session. Returns whether an
/// owner was running. `request` is [`Request::Release`] (the owner finishes its queue first)
/// or [`Request::ReleaseIdle`] (a busy owner refuses at once: its `SESSION_BUSY` error is
/// returned, and the owner goes on).
pub async fn release(
    authority: &Path,
    id: &RecordId,
    request: &Request,
    max: Duration,
) -> Result<bool, WireError> {
    let paths = LeasePaths::new(authority, id);
    let Some(answer) = send_if_running(authority, id, request)
        .await
        .map_err(|e| io_wire(&e))?
    else {
        return Ok(false);
    };
    // Whatever else it answers, what counts is that the lock is free afterwards.
    if let Ok(Response::Error { error }) = answer.last().await {
        if error.detail_code.as_deref() == Some("SESSION_BUSY") {
            return Err(error);
        }
    }
    let start = tokio::time::Instant::now();
    while lease::is_alive(&paths) {
        if start.elapsed() >= max {
            return Err(WireError::runtime(
                "QUEUE_OWNER_SHUTTING_DOWN",
                format!(
                    "the queue owner of session {id} did not stop within {} s",
                    max.as_secs()
                ),
                true,
            ));
        }
        tokio::time::sleep(RETRY_WAIT).await;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    /// An owner that exits with a request unread resets the connection: to the client that is
    /// "no owner listens" (the next one will take the request), not an error.
    #[tokio::test]
    async fn an_owner_that_resets_the_connection_is_gone_not_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let paths = LeasePaths {
            lock: dir.path().join("o.lock"),
            lease: dir.path().join("o.lease"),
            socket: dir.path().join("o.sock"),
        };
        let listener = tokio::net::UnixListener::bind(&paths.socket).unwrap();
        let owner = tokio::spawn(async move {
            let (mut conn, _) = listener.accept().await.unwrap();
            // Wait for the request, read a byte of it, and close with the rest unread: the
            // kernel answers with a reset.
            conn.readable().await.unwrap();
            let mut one = [0u8; 1];
            let _ = conn.read(&mut one).await;
            drop(conn);
        });
        let answer = send(&paths, &Request::Status).await;
        owner.await.unwrap();
        assert!(
            matches!(answer, Ok(None)),
            "{:?}",
            answer.map(|a| a.is_some())
        );
    }

    /// An owner that listens where its lease says, not where the paths put its socket, is
    /// found through the lease.
    #[tokio::test]
    async fn an_owner_is_reached_through_its_lease_when_its_socket_is_elsewhere() {
        let dir = tempfile::tempdir().unwrap();
        let paths = LeasePaths {
            lock: dir.path().join("o.lock"),
            lease: dir.path().join("o.lease"),
            socket: dir.path().join("o.sock"),
        };
        assert!(connect(&paths).await.is_none(), "no lease, no socket");
        let elsewhere = dir.path().join("other.sock");
        let _listener = tokio::net::UnixListener::bind(&elsewhere).unwrap();
        let lease = crate::lease::Lease {
            pid: std::process::id(),
            socket: elsewhere,
            started_at: acpx_model::Timestamp::now(),
            generation: 1,
            agent_pid: None,
            agent_start_ticks: None,
        };
        crate::lease::write(&paths, &lease).unwrap();
        assert!(connect(&paths).await.is_some());
    }
}
