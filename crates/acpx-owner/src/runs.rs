//! The run registry of the one-process path (a turn run without a queue owner; the owner has
//! its own lease, see [`crate::lease`]): how a `cancel` or a `status` in one process
//! finds the prompt running in another.
//!
//! While a turn runs, the prompting process holds an exclusive `flock` on
//! `<authority>/runs/<record id>.lock` (`<authority>`: the authority directory of the store
//! that holds the session, [`crate::authority`]) and listens on a Unix socket named in
//! `<authority>/runs/<record id>.json` (`{pid, requestId, startedAt, socket}`).
//!
//! - A prompt is **running** exactly when that lock is held. The kernel releases it when the
//!   process dies, however it dies, so a stale run file is recognised as such.
//! - `cancel` connects to the socket and writes `cancel`. It never signals a pid: a run file
//!   left by a killed process has a free lock and nobody listening on its socket, so it can
//!   never reach an unrelated process that happens to reuse the pid.
//! - A run file whose lock is free was left by a process that died mid-turn: `status` reports
//!   the session as **dead** until a later turn ran ([`probe_record`]); the next one-process
//!   prompt replaces the file (a queue owner leaves it: it has its own lease).
//! - A second prompt in the same session waits for the lock, so turns of one session run one
//!   at a time, in the order they asked.
//!
//! Socket paths are limited to about 100 bytes; when `<authority>/runs/<id>.sock` is longer, the
//! socket lives in `/tmp/acpx-<uid>/` (a private directory) under a hash of the authority directory and id
//! ([`crate::private_socket`]).
//!
//! The same directory holds the scope locks ([`lock_scope`]) that make "find the scope's
//! session or create one" atomic across processes (see [`crate::ensure`]).
//!
//! ```no_run
//! # async fn demo(authority: &std::path::Path, id: &acpx_model::RecordId) -> Result<(), acpx_owner::runs::RunsError> {
//! use acpx_owner::runs;
//! // The prompting process: hold the run for the whole turn, cancel when asked to.
//! let (guard, mut cancels) = runs::acquire(authority, id, "req-1", |_running| {}).await?;
//! # let _ = cancels.try_recv();
//! // Another process:
//! if let Some(info) = runs::request_cancel(authority, id)? {
//!     println!("asked pid {} to cancel", info.pid);
//! }
//! drop(guard); // the turn ended: the run file and the socket are removed
//! # Ok(()) }
//! ```

use std::fs::OpenOptions;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use acpx_lock::FileLock;
use acpx_model::{RecordId, Timestamp};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::private_socket::{ensure_private_dir, fnv_hash, PrivateDirError};

/// Why a run-registry operation failed. The messages name the file and the cause.
#[derive(Debug, thiserror::Error)]
pub enum RunsError {
    /// A file or socket operation failed; `what` says which (`cannot lock <path>`, …).
    #[error("{what}: {source}")]
    Io {
        /// What was being done, with the path.
        what: String,
        /// Why it failed.
        source: std::io::Error,
    },
    /// The private directory for a long socket path is not usable.
    #[error(transparent)]
    PrivateDir(#[from] PrivateDirError),
    /// A process holds the run but refused or garbled the cancel request.
    #[error("the running prompt (pid {0}) did not accept the cancel request")]
    CancelRefused(u32),
}

/// The result of the run registry.
pub type RunsResult<T> = Result<T, RunsError>;

fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> RunsError {
    let what = what.into();
    move |source| RunsError::Io { what, source }
}

fn join_err(what: &str) -> impl FnOnce(tokio::task::JoinError) -> RunsError + '_ {
    move |e| RunsError::Io {
        what: what.to_owned(),
        source: std::io::Error::other(e),
    }
}

/// What the run file says about the running prompt.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RunInfo {
    /// The prompting process (informative: liveness is the lock, and cancels go through the
    /// socket, never to a pid).
    pub pid: u32,
    /// The request id of the running turn (what the holder passed to [`acquire`]).
    pub request_id: String,
    /// When the run was acquired.
    pub started_at: Timestamp,
    /// The control socket that takes `cancel`.
    pub socket: PathBuf,
}

/// The state of a session's run file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// No prompt is running and none died mid-turn.
    Idle,
    /// A live process holds the run lock.
    Running(Option<RunInfo>),
    /// A run file is present but nobody holds the lock: its process died mid-turn.
    Dead(Option<RunInfo>),
}

fn runs_dir(authority: &Path) -> PathBuf {
    authority.join("runs")
}

fn lock_path(authority: &Path, id: &RecordId) -> PathBuf {
    runs_dir(authority).join(format!("{id}.lock"))
}

fn info_path(authority: &Path, id: &RecordId) -> PathBuf {
    runs_dir(authority).join(format!("{id}.json"))
}

fn socket_path(authority: &Path, id: &RecordId) -> RunsResult<PathBuf> {
    let path = crate::private_socket::socket_path_or_tmp(
        runs_dir(authority).join(format!("{id}.sock")),
        "",
        &[
            authority.as_os_str().as_encoded_bytes(),
            id.as_str().as_bytes(),
        ],
    );
    if !path.starts_with(runs_dir(authority)) {
        if let Some(dir) = path.parent() {
            ensure_private_dir(dir)?;
        }
    }
    Ok(path)
}

/// Creates `<authority>/runs` (mode 0700) if missing.
fn ensure_runs_dir(authority: &Path) -> RunsResult<PathBuf> {
    let dir = runs_dir(authority);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(io_err(format!("cannot create {}", dir.display())))?;
    Ok(dir)
}

fn read_info(authority: &Path, id: &RecordId) -> Option<RunInfo> {
    let bytes = std::fs::read(info_path(authority, id)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Whether a prompt is running in session `id`, and what its run file says.
pub fn probe(authority: &Path, id: &RecordId) -> RunsResult<Probe> {
    let path = lock_path(authority, id);
    if !path.exists() {
        return Ok(Probe::Idle);
    }
    // A shared lock succeeds exactly when no prompt holds the exclusive one.
    let shared =
        FileLock::try_shared(&path).map_err(io_err(format!("cannot lock {}", path.display())))?;
    let info = read_info(authority, id);
    let free = shared.is_some();
    drop(shared);
    Ok(match (free, info) {
        (false, info) => Probe::Running(info),
        (true, None) => Probe::Idle,
        (true, Some(info)) => Probe::Dead(Some(info)),
    })
}

/// [`probe`] for `record`, where a run file left by a process that died is reported only
/// until a later turn ran: a queue owner does not take the one-process run (it has its own
/// lease), so after a `--no-owner` prompt was killed the file stays, and without this rule
/// `status` and `show` said "died mid-turn" after any number of turns through an owner.
pub fn probe_record(authority: &Path, record: &acpx_model::SessionRecord) -> RunsResult<Probe> {
    Ok(match probe(authority, &record.acpx_record_id)? {
        Probe::Dead(Some(info)) if superseded(&info, record) => Probe::Idle,
        p => p,
    })
}

/// Whether `record`'s last turn ended and started after the run of `info` was taken. The dead
/// run's own turn, saved as running right after the run was taken, has not ended; once a
/// recovery records it as interrupted, or a later turn ran, the death has been dealt with.
/// (The run's request id is not the turn's: `local::prompt` takes the run before the turn
/// has its id.)
fn superseded(info: &RunInfo, record: &acpx_model::SessionRecord) -> bool {
    record
        .acpx
        .last_turn
        .as_ref()
        .is_some_and(|t| t.ended_at.is_some() && t.started_at > info.started_at)
}

/// Held by the prompting process for the duration of a turn; dropping it removes the run
/// file and the socket, then releases the lock.
#[derive(Debug)]
pub struct RunGuard {
    _lock: FileLock,
    info: PathBuf,
    socket: PathBuf,
    listener: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for RunGuard {
    fn drop(&mut self) {
        if let Some(l) = self.listener.take() {
            l.abort();
        }
        // Remove the files while the lock is still held, so no one sees a half-gone run.
        let _ = std::fs::remove_file(&self.info);
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// Takes the run lock of session `id` (waiting for a running prompt of the same session to
/// finish, with `on_wait` called once if it has to wait), opens the control socket and writes
/// the run file. Cancel requests arrive on the returned receiver.
pub async fn acquire(
    authority: &Path,
    id: &RecordId,
    request_id: &str,
    on_wait: impl FnOnce(Option<RunInfo>),
) -> RunsResult<(RunGuard, mpsc::UnboundedReceiver<()>)> {
    ensure_runs_dir(authority)?;
    let path = lock_path(authority, id);
    let mut got = None;
    for _ in 0..5 {
        got = FileLock::try_exclusive(&path).map_err(io_err("cannot lock the run file"))?;
        if got.is_some() {
            break;
        }
        // `probe` holds a shared lock for an instant; do not report that as a running prompt.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let file = match got {
        Some(lock) => lock,
        None => {
            on_wait(read_info(authority, id));
            tokio::task::spawn_blocking(move || FileLock::exclusive_blocking(&path))
                .await
                .map_err(join_err("waiting for the run lock failed"))?
                .map_err(io_err("cannot lock the run file"))?
        }
    };

    let socket = socket_path(authority, id)?;
    // We hold the lock, so whatever socket file is there belongs to a dead run.
    let _ = std::fs::remove_file(&socket);
    let listener = tokio::net::UnixListener::bind(&socket)
        .map_err(io_err(format!("cannot listen on {}", socket.display())))?;
    let _ = std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600));
    let (tx, rx) = mpsc::unbounded_channel();
    let task = tokio::spawn(serve(listener, tx));

    let info = RunInfo {
        pid: std::process::id(),
        request_id: request_id.to_owned(),
        started_at: Timestamp::now(),
        socket: socket.clone(),
    };
    let info_file = info_path(authority, id);
    let tmp = info_file.with_extension(format!("json.tmp-{}", std::process::id()));
    let write = || -> std::io::Result<()> {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(&serde_json::to_vec(&info).unwrap_or_default())?;
        std::fs::rename(&tmp, &info_file)
    };
    write().map_err(io_err(format!("cannot write {}", info_file.display())))?;
    Ok((
        RunGuard {
            _lock: file,
            info: info_file,
            socket,
            listener: Some(task),
        },
        rx,
    ))
}

async fn serve(listener: tokio::net::UnixListener, tx: mpsc::UnboundedSender<()>) {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    while let Ok((stream, _)) = listener.accept().await {
        let tx = tx.clone();
        tokio::spawn(async move {
            let (read, mut write) = stream.into_split();
            let mut line = String::new();
            let mut reader = tokio::io::BufReader::new(read);
            let read =
                tokio::time::timeout(Duration::from_secs(5), reader.read_line(&mut line)).await;
            let reply: &[u8] = match read {
                // A holder that does not listen for cancels (a control command) says so.
                Ok(Ok(_)) if line.trim() == "cancel" => match tx.send(()) {
                    Ok(()) => b"ok\n",
                    Err(_) => b"idle\n",
                },
                _ => b"error unknown request\n",
            };
            let _ = write.write_all(reply).await;
        });
    }
}

/// Asks the prompt running in session `id` to cancel its turn. `Ok(None)` when nothing was
/// running; `Ok(Some(info))` when the running process accepted the request.
pub fn request_cancel(authority: &Path, id: &RecordId) -> RunsResult<Option<RunInfo>> {
    let info = match probe(authority, id)? {
        Probe::Running(Some(info)) => info,
        // Running but the run file is not written yet: the turn has not started sending.
        Probe::Running(None) => return Ok(None),
        Probe::Idle | Probe::Dead(_) => return Ok(None),
    };
    let mut stream = match UnixStream::connect(&info.socket) {
        Ok(s) => s,
        // The prompt finished between the probe and the connect.
        Err(_) => return Ok(None),
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    stream
        .write_all(b"cancel\n")
        .map_err(io_err("cannot send the cancel request"))?;
    let mut reply = String::new();
    let _ = BufReader::new(&stream).read_line(&mut reply);
    match reply.trim() {
        "ok" => Ok(Some(info)),
        "idle" => Ok(None),
        _ => Err(RunsError::CancelRefused(info.pid)),
    }
}

/// What [`cancel_and_wait`] found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelOutcome {
    /// No prompt was running (or it ended before it could be asked).
    NothingRunning,
    /// The running prompt accepted the cancel and ended within the wait.
    Ended(RunInfo),
    /// The running prompt accepted the cancel but was still running when the wait ran out.
    StillRunning(RunInfo),
}

/// Asks the prompt running in session `id` to cancel ([`request_cancel`]), calls
/// `on_cancelled` when it accepted, then waits up to `max` for it to end ([`wait_idle`]).
/// What `sessions close` and [`crate::ensure::new_session`] do before closing a session.
pub async fn cancel_and_wait(
    authority: &Path,
    id: &RecordId,
    max: Duration,
    on_cancelled: impl FnOnce(&RunInfo),
) -> RunsResult<CancelOutcome> {
    // The socket exchange blocks (up to its 5 s read timeout): keep it off the async workers,
    // which may be serving the very run being cancelled.
    let (h, i) = (authority.to_owned(), id.clone());
    let asked = tokio::task::spawn_blocking(move || request_cancel(&h, &i))
        .await
        .map_err(join_err("the cancel request failed"))?;
    let Some(info) = asked? else {
        return Ok(CancelOutcome::NothingRunning);
    };
    on_cancelled(&info);
    Ok(if wait_idle(authority, id, max).await? {
        CancelOutcome::Ended(info)
    } else {
        CancelOutcome::StillRunning(info)
    })
}

/// A session's last turn as the run registry and the record tell it, without a queue owner
/// (`status` asks a running owner first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LocalTurn {
    /// A live process holds the run lock.
    Running(Option<RunInfo>),
    /// A run file is left with a free lock: its process died mid-turn.
    Died(Option<RunInfo>),
    /// No run file, but the record's last turn never finished (acpx was stopped before it
    /// could record the end); the next open records it as interrupted.
    Unfinished,
    /// No prompt is running and the last turn ended.
    Idle,
}

/// Whether session `id` of the store of `authority` is in use by a process of this machine:
/// a queue owner holds its lease
/// ([`crate::lease::is_alive`]) or a one-process prompt holds its run lock
/// ([`probe`]). What must not be repaired or rewritten under that process.
pub fn in_use(authority: &Path, id: &RecordId) -> RunsResult<bool> {
    let owned = crate::lease::is_alive(&crate::lease::LeasePaths::new(authority, id));
    Ok(owned || matches!(probe(authority, id)?, Probe::Running(_)))
}

/// The state of `record`'s last turn under `authority` (see [`LocalTurn`]).
pub fn local_turn(authority: &Path, record: &acpx_model::SessionRecord) -> RunsResult<LocalTurn> {
    Ok(match probe_record(authority, record)? {
        Probe::Running(info) => LocalTurn::Running(info),
        Probe::Dead(info) => LocalTurn::Died(info),
        Probe::Idle if acpx_runtime::mapping::turn_is_running(record) => LocalTurn::Unfinished,
        Probe::Idle => LocalTurn::Idle,
    })
}

/// An exclusive lock on the scope `(agent command, cwd, name)`, held while `sessions new` or
/// `sessions ensure` looks for the scope's session and creates one, so that two of them
/// running at once create one session, not two. Released when dropped.
#[derive(Debug)]
pub struct ScopeLock {
    _lock: FileLock,
}

/// Takes the scope lock (waiting for another holder).
pub async fn lock_scope(
    authority: &Path,
    agent_command: &str,
    cwd: &str,
    name: Option<&str>,
) -> RunsResult<ScopeLock> {
    let dir = ensure_runs_dir(authority)?;
    let h = fnv_hash(&[
        agent_command.as_bytes(),
        cwd.as_bytes(),
        name.unwrap_or("\u{0}").as_bytes(),
    ]);
    let path = dir.join(format!("scope-{h:016x}.lock"));
    let shown = path.display().to_string();
    let lock = tokio::task::spawn_blocking(move || FileLock::exclusive_blocking(&path))
        .await
        .map_err(join_err("waiting for the scope lock failed"))?
        .map_err(io_err(format!("cannot lock {shown}")))?;
    Ok(ScopeLock { _lock: lock })
}

/// Waits up to `max` for the prompt running in session `id` to end; returns whether it did.
pub async fn wait_idle(authority: &Path, id: &RecordId, max: Duration) -> RunsResult<bool> {
    let deadline = tokio::time::Instant::now() + max;
    loop {
        if !matches!(probe(authority, id)?, Probe::Running(_)) {
            return Ok(true);
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn probe_cancel_and_stale_files() {
        let authority = tempfile::tempdir().unwrap();
        let id = RecordId::parse("rec-1").unwrap();
        assert_eq!(probe(authority.path(), &id).unwrap(), Probe::Idle);
        let (guard, mut rx) = acquire(authority.path(), &id, "req", |_| {}).await.unwrap();
        assert!(matches!(
            probe(authority.path(), &id).unwrap(),
            Probe::Running(Some(_))
        ));
        let h = authority.path().to_owned();
        let id2 = id.clone();
        let got = tokio::task::spawn_blocking(move || request_cancel(&h, &id2))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got.unwrap().request_id, "req");
        assert!(rx.recv().await.is_some());
        drop(guard);
        assert_eq!(probe(authority.path(), &id).unwrap(), Probe::Idle);
        assert_eq!(request_cancel(authority.path(), &id).unwrap(), None);

        // A run file left behind by a dead process: the lock is free, so it is "dead" and a
        // cancel reaches no one.
        let info = RunInfo {
            pid: 1,
            request_id: "old".into(),
            started_at: Timestamp::now(),
            socket: authority.path().join("runs/rec-1.sock"),
        };
        std::fs::write(
            info_path(authority.path(), &id),
            serde_json::to_vec(&info).unwrap(),
        )
        .unwrap();
        assert!(matches!(
            probe(authority.path(), &id).unwrap(),
            Probe::Dead(Some(_))
        ));
        assert_eq!(request_cancel(authority.path(), &id).unwrap(), None);

        // A holder that does not take cancels (a control command) answers "idle".
        let (guard, rx) = acquire(authority.path(), &id, "control", |_| {})
            .await
            .unwrap();
        drop(rx);
        let h = authority.path().to_owned();
        let id2 = id.clone();
        let got = tokio::task::spawn_blocking(move || request_cancel(&h, &id2))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got, None);
        drop(guard);
    }

    #[tokio::test]
    async fn cancel_and_wait_reports_what_it_did() {
        let authority = tempfile::tempdir().unwrap();
        let id = RecordId::parse("rec-2").unwrap();
        let got = cancel_and_wait(authority.path(), &id, Duration::from_millis(10), |_| {
            panic!("nothing runs")
        })
        .await
        .unwrap();
        assert_eq!(got, CancelOutcome::NothingRunning);

        // A holder that ends its turn when asked to cancel.
        let (guard, mut rx) = acquire(authority.path(), &id, "req", |_| {}).await.unwrap();
        let ends = tokio::spawn(async move {
            rx.recv().await;
            drop(guard);
        });
        let mut told = None;
        let got = cancel_and_wait(authority.path(), &id, Duration::from_secs(5), |i| {
            told = Some(i.request_id.clone())
        })
        .await
        .unwrap();
        assert!(matches!(got, CancelOutcome::Ended(ref i) if i.request_id == "req"));
        assert_eq!(told.as_deref(), Some("req"));
        ends.await.unwrap();

        // A holder that keeps running after the cancel.
        let (guard, _rx) = acquire(authority.path(), &id, "stubborn", |_| {})
            .await
            .unwrap();
        let got = cancel_and_wait(authority.path(), &id, Duration::from_millis(100), |_| {})
            .await
            .unwrap();
        assert!(matches!(got, CancelOutcome::StillRunning(_)));
        drop(guard);
    }

    #[tokio::test]
    async fn long_homes_put_the_socket_in_a_private_tmp_dir() {
        let base = tempfile::tempdir().unwrap();
        let authority = base.path().join("h".repeat(120));
        let id = RecordId::parse("rec-long").unwrap();
        let (guard, mut rx) = acquire(&authority, &id, "req", |_| {}).await.unwrap();
        let info = read_info(&authority, &id).unwrap();
        assert!(
            info.socket.to_string_lossy().starts_with("/tmp/acpx-"),
            "{}",
            info.socket.display()
        );
        assert!(info.socket.as_os_str().len() <= crate::private_socket::MAX_SOCKET_PATH);
        let h = authority.clone();
        let id2 = id.clone();
        let got = tokio::task::spawn_blocking(move || request_cancel(&h, &id2))
            .await
            .unwrap()
            .unwrap();
        assert!(got.is_some());
        assert!(rx.recv().await.is_some());
        let socket = info.socket.clone();
        drop(guard);
        assert!(!socket.exists(), "the socket is removed with the run");
    }
}
