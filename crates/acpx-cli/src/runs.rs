//! Run files of the one-process path (`--no-owner`; the queue owner has its own lease, see
//! `acpx_runtime::owner`): how `cancel` and `status` in one terminal find the prompt running
//! in another.
//!
//! While a turn runs, the prompting process holds an exclusive `flock` on
//! `<home>/runs/<record id>.lock` and listens on a Unix socket named in
//! `<home>/runs/<record id>.json` (`{pid, requestId, startedAt, socket}`).
//!
//! - A prompt is **running** exactly when that lock is held. The kernel releases it when the
//!   process dies, however it dies, so a stale run file is recognised as such.
//! - `cancel` connects to the socket and writes `cancel`. It never signals a pid: a run file
//!   left by a killed process has a free lock and nobody listening on its socket, so it can
//!   never reach an unrelated process that happens to reuse the pid.
//! - A run file whose lock is free was left by a process that died mid-turn: `status` reports
//!   the session as **dead**; the next prompt replaces the file.
//! - A second prompt in the same session waits for the lock, so turns of one session run one
//!   at a time, in the order they asked.
//!
//! Socket paths are limited to about 100 bytes; when `<home>/runs/<id>.sock` is longer, the
//! socket lives in `/tmp/acpx-<uid>/` (a private directory) under a hash of home and id.

use std::fs::OpenOptions;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use acpx_lock::FileLock;
use acpx_model::{RecordId, Timestamp};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::error::{CliError, CliResult};

/// What the run file says about the running prompt.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RunInfo {
    pub pid: u32,
    pub request_id: String,
    pub started_at: Timestamp,
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

fn runs_dir(home: &Path) -> PathBuf {
    home.join("runs")
}

fn lock_path(home: &Path, id: &RecordId) -> PathBuf {
    runs_dir(home).join(format!("{id}.lock"))
}

fn info_path(home: &Path, id: &RecordId) -> PathBuf {
    runs_dir(home).join(format!("{id}.json"))
}

fn fnv(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for p in parts {
        for b in p.iter().chain(std::iter::once(&0xffu8)) {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x100000001b3);
        }
    }
    h
}

/// Longest socket path used (`sun_path` is 104 bytes on macOS, 108 on Linux).
const MAX_SOCKET_PATH: usize = 100;

fn socket_path(home: &Path, id: &RecordId) -> CliResult<PathBuf> {
    let direct = runs_dir(home).join(format!("{id}.sock"));
    if direct.as_os_str().len() <= MAX_SOCKET_PATH {
        return Ok(direct);
    }
    let uid = acpx_lock::current_uid();
    let dir = PathBuf::from(format!("/tmp/acpx-{uid}"));
    ensure_private_dir(&dir)?;
    let h = fnv(&[home.as_os_str().as_encoded_bytes(), id.as_str().as_bytes()]);
    Ok(dir.join(format!("{h:016x}.sock")))
}

fn ensure_private_dir(dir: &Path) -> CliResult<()> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => {
            return Err(CliError::runtime(format!(
                "cannot create {}: {e}",
                dir.display()
            )))
        }
    }
    let meta = std::fs::symlink_metadata(dir)
        .map_err(|e| CliError::runtime(format!("cannot inspect {}: {e}", dir.display())))?;
    let uid = acpx_lock::current_uid();
    if !meta.is_dir() || meta.uid() != uid || meta.permissions().mode() & 0o077 != 0 {
        return Err(CliError::runtime(format!(
            "{} is not a private directory owned by you; refusing to put a control socket there",
            dir.display()
        ))
        .with_hint("remove it, or use a shorter --home so the socket fits under <home>/runs/"));
    }
    Ok(())
}

/// Creates `<home>/runs` (mode 0700) if missing.
fn ensure_runs_dir(home: &Path) -> CliResult<PathBuf> {
    let dir = runs_dir(home);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(|e| CliError::runtime(format!("cannot create {}: {e}", dir.display())))?;
    Ok(dir)
}

fn read_info(home: &Path, id: &RecordId) -> Option<RunInfo> {
    let bytes = std::fs::read(info_path(home, id)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Whether a prompt is running in session `id`, and what its run file says.
pub fn probe(home: &Path, id: &RecordId) -> CliResult<Probe> {
    let path = lock_path(home, id);
    if !path.exists() {
        return Ok(Probe::Idle);
    }
    // A shared lock succeeds exactly when no prompt holds the exclusive one.
    let shared = FileLock::try_shared(&path)
        .map_err(|e| CliError::runtime(format!("cannot lock {}: {e}", path.display())))?;
    let info = read_info(home, id);
    let free = shared.is_some();
    drop(shared);
    Ok(match (free, info) {
        (false, info) => Probe::Running(info),
        (true, None) => Probe::Idle,
        (true, Some(info)) => Probe::Dead(Some(info)),
    })
}

/// Held by the prompting process for the duration of a turn.
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
    home: &Path,
    id: &RecordId,
    request_id: &str,
    on_wait: impl FnOnce(Option<RunInfo>),
) -> CliResult<(RunGuard, mpsc::UnboundedReceiver<()>)> {
    ensure_runs_dir(home)?;
    let path = lock_path(home, id);
    let mut got = None;
    for _ in 0..5 {
        got = FileLock::try_exclusive(&path)
            .map_err(|e| CliError::runtime(format!("cannot lock the run file: {e}")))?;
        if got.is_some() {
            break;
        }
        // `probe` holds a shared lock for an instant; do not report that as a running prompt.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let file = match got {
        Some(lock) => lock,
        None => {
            on_wait(read_info(home, id));
            tokio::task::spawn_blocking(move || FileLock::exclusive_blocking(&path))
                .await
                .map_err(|e| CliError::runtime(format!("waiting for the run lock failed: {e}")))?
                .map_err(|e| CliError::runtime(format!("cannot lock the run file: {e}")))?
        }
    };

    let socket = socket_path(home, id)?;
    // We hold the lock, so whatever socket file is there belongs to a dead run.
    let _ = std::fs::remove_file(&socket);
    let listener = tokio::net::UnixListener::bind(&socket)
        .map_err(|e| CliError::runtime(format!("cannot listen on {}: {e}", socket.display())))?;
    let _ = std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600));
    let (tx, rx) = mpsc::unbounded_channel();
    let task = tokio::spawn(serve(listener, tx));

    let info = RunInfo {
        pid: std::process::id(),
        request_id: request_id.to_owned(),
        started_at: Timestamp::now(),
        socket: socket.clone(),
    };
    let info_file = info_path(home, id);
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
    write().map_err(|e| CliError::runtime(format!("cannot write {}: {e}", info_file.display())))?;
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
pub fn request_cancel(home: &Path, id: &RecordId) -> CliResult<Option<RunInfo>> {
    let info = match probe(home, id)? {
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
        .map_err(|e| CliError::runtime(format!("cannot send the cancel request: {e}")))?;
    let mut reply = String::new();
    let _ = BufReader::new(&stream).read_line(&mut reply);
    match reply.trim() {
        "ok" => Ok(Some(info)),
        "idle" => Ok(None),
        _ => Err(CliError::runtime(format!(
            "the running prompt (pid {}) did not accept the cancel request",
            info.pid
        ))),
    }
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
    home: &Path,
    agent_command: &str,
    cwd: &str,
    name: Option<&str>,
) -> CliResult<ScopeLock> {
    let dir = ensure_runs_dir(home)?;
    let h = fnv(&[
        agent_command.as_bytes(),
        cwd.as_bytes(),
        name.unwrap_or("\u{0}").as_bytes(),
    ]);
    let path = dir.join(format!("scope-{h:016x}.lock"));
    let shown = path.display().to_string();
    let lock = tokio::task::spawn_blocking(move || FileLock::exclusive_blocking(&path))
        .await
        .map_err(|e| CliError::runtime(format!("waiting for the scope lock failed: {e}")))?
        .map_err(|e| CliError::runtime(format!("cannot lock {shown}: {e}")))?;
    Ok(ScopeLock { _lock: lock })
}

/// Waits up to `max` for the prompt running in session `id` to end; returns whether it did.
pub async fn wait_idle(home: &Path, id: &RecordId, max: Duration) -> CliResult<bool> {
    let deadline = tokio::time::Instant::now() + max;
    loop {
        if !matches!(probe(home, id)?, Probe::Running(_)) {
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
        let home = tempfile::tempdir().unwrap();
        let id = RecordId::parse("rec-1").unwrap();
        assert_eq!(probe(home.path(), &id).unwrap(), Probe::Idle);
        let (guard, mut rx) = acquire(home.path(), &id, "req", |_| {}).await.unwrap();
        assert!(matches!(
            probe(home.path(), &id).unwrap(),
            Probe::Running(Some(_))
        ));
        let h = home.path().to_owned();
        let id2 = id.clone();
        let got = tokio::task::spawn_blocking(move || request_cancel(&h, &id2))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got.unwrap().request_id, "req");
        assert!(rx.recv().await.is_some());
        drop(guard);
        assert_eq!(probe(home.path(), &id).unwrap(), Probe::Idle);
        assert_eq!(request_cancel(home.path(), &id).unwrap(), None);

        // A run file left behind by a dead process: the lock is free, so it is "dead" and a
        // cancel reaches no one.
        let info = RunInfo {
            pid: 1,
            request_id: "old".into(),
            started_at: Timestamp::now(),
            socket: home.path().join("runs/rec-1.sock"),
        };
        std::fs::write(
            info_path(home.path(), &id),
            serde_json::to_vec(&info).unwrap(),
        )
        .unwrap();
        assert!(matches!(
            probe(home.path(), &id).unwrap(),
            Probe::Dead(Some(_))
        ));
        assert_eq!(request_cancel(home.path(), &id).unwrap(), None);

        // A holder that does not take cancels (a control command) answers "idle".
        let (guard, rx) = acquire(home.path(), &id, "control", |_| {}).await.unwrap();
        drop(rx);
        let h = home.path().to_owned();
        let id2 = id.clone();
        let got = tokio::task::spawn_blocking(move || request_cancel(&h, &id2))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got, None);
        drop(guard);
    }

    #[tokio::test]
    async fn long_homes_put_the_socket_in_a_private_tmp_dir() {
        let base = tempfile::tempdir().unwrap();
        let home = base.path().join("h".repeat(120));
        let id = RecordId::parse("rec-long").unwrap();
        let (guard, mut rx) = acquire(&home, &id, "req", |_| {}).await.unwrap();
        let info = read_info(&home, &id).unwrap();
        assert!(
            info.socket.to_string_lossy().starts_with("/tmp/acpx-"),
            "{}",
            info.socket.display()
        );
        assert!(info.socket.as_os_str().len() <= MAX_SOCKET_PATH);
        let h = home.clone();
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
