//! The owner's lease: where a session's owner is found and how its liveness is known.
//!
//! Under `<authority>/owners/` (mode 0700), where `<authority>` is the authority directory
//! of the store that holds the session ([`crate::authority`]), per session record `<id>`:
//!
//! - `<id>.lock`: held exclusively (`acpx-lock`) by the owner for its whole life. **The lock
//!   is the liveness truth**: the kernel releases it however the owner dies, so a lease left
//!   by a killed owner is recognised by its free lock, never by a pid.
//! - `<id>.json`: the [`Lease`] (pid, socket path, start time, agent pid, generation),
//!   written atomically after the socket listens.
//! - `<id>.sock`: the owner's Unix socket (mode 0600). When that path is longer than a
//!   socket address allows, the socket lives in `/tmp/acpx-<uid>/` (a private 0700
//!   directory) under a hash of the authority directory and the id.
//!
//! The owner's stderr goes to `<home>/owners/<id>.log` in the data home ([`open_log`]): a
//! log is data to keep, the lease and the socket are not.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use acpx_lock::FileLock;

use crate::private_socket;
use acpx_model::{RecordId, Timestamp};
use serde::{Deserialize, Serialize};

/// What the lease file says about the owner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Lease {
    /// The owner's process id (informative: liveness is the lock).
    pub pid: u32,
    /// The owner's socket.
    pub socket: PathBuf,
    /// When the owner started.
    pub started_at: Timestamp,
    /// A random number per owner, so a client can tell owners apart.
    pub generation: u64,
    /// The agent's process id (its process group id too), while an agent runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_pid: Option<u32>,
    /// The agent's start time in clock ticks after boot (`/proc/<pid>/stat`), so a later
    /// owner can tell the agent from a process that reused its pid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_start_ticks: Option<u64>,
}

/// The files of one session's owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeasePaths {
    /// The lock file.
    pub lock: PathBuf,
    /// The lease file.
    pub lease: PathBuf,
    /// The socket.
    pub socket: PathBuf,
}

/// `<authority>/owners`.
pub fn owners_dir(authority: &Path) -> PathBuf {
    authority.join("owners")
}

impl LeasePaths {
    /// The paths for session `id` under the authority directory `authority` (nothing is
    /// created). A long socket path is named by a hash of `authority` as given.
    pub fn new(authority: &Path, id: &RecordId) -> Self {
        let dir = owners_dir(authority);
        let direct = dir.join(format!("{id}.sock"));
        let socket = private_socket::socket_path_or_tmp(
            direct,
            "o-",
            &[
                b"owner",
                authority.as_os_str().as_encoded_bytes(),
                id.as_str().as_bytes(),
            ],
        );
        LeasePaths {
            lock: dir.join(format!("{id}.lock")),
            lease: dir.join(format!("{id}.json")),
            socket,
        }
    }
}

/// Creates `dir` with mode 0700 if missing, and refuses one that is not private to us
/// ([`private_socket::ensure_private_dir`], as an I/O error).
fn ensure_private_dir(dir: &Path) -> std::io::Result<()> {
    private_socket::ensure_private_dir(dir).map_err(|e| {
        let kind = match &e {
            private_socket::PrivateDirError::NotPrivate(_) => std::io::ErrorKind::PermissionDenied,
            private_socket::PrivateDirError::Create { source, .. }
            | private_socket::PrivateDirError::Inspect { source, .. } => source.kind(),
        };
        std::io::Error::new(kind, e.to_string())
    })
}

/// Creates the directories the paths live in (mode 0700).
pub fn prepare_dirs(paths: &LeasePaths) -> std::io::Result<()> {
    if let Some(d) = paths.lock.parent() {
        ensure_private_dir(d)?;
    }
    if let Some(d) = paths.socket.parent() {
        ensure_private_dir(d)?;
    }
    Ok(())
}

/// Opens `<home>/owners/<id>.log` in the data home `home` for appending (created with mode
/// 0600, the directory 0700): where a detached owner's stderr goes.
pub fn open_log(home: &Path, id: &RecordId) -> std::io::Result<std::fs::File> {
    let dir = home.join("owners");
    ensure_private_dir(&dir)?;
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(dir.join(format!("{id}.log")))
}

/// Starts `command` (the owner of session `id`) detached: in its own process group, stdin
/// and stdout closed, stderr appended to its log ([`open_log`]). Not waited for: the owner
/// outlives the command that started it (init reaps it).
pub fn spawn_detached(
    mut command: std::process::Command,
    home: &Path,
    id: &RecordId,
) -> std::io::Result<()> {
    use std::os::unix::process::CommandExt;
    use std::process::Stdio;
    let log = open_log(home, id)?;
    command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .process_group(0);
    command.spawn().map(drop)
}

/// Takes the owner lock, or `None` when a live owner holds it. Retries briefly, since a
/// [`is_alive`] probe holds a shared lock for an instant.
pub fn try_take(paths: &LeasePaths) -> std::io::Result<Option<FileLock>> {
    for _ in 0..10 {
        if let Some(l) = FileLock::try_exclusive(&paths.lock)? {
            return Ok(Some(l));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(None)
}

/// Whether a live owner holds the lock.
pub fn is_alive(paths: &LeasePaths) -> bool {
    if !paths.lock.exists() {
        return false;
    }
    // A shared lock succeeds exactly when no owner holds the exclusive one.
    !matches!(FileLock::try_shared(&paths.lock), Ok(Some(_)))
}

/// The lease file, if readable.
pub fn read(paths: &LeasePaths) -> Option<Lease> {
    let bytes = std::fs::read(&paths.lease).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Writes the lease file atomically (mode 0600). Only the lock holder calls this.
pub fn write(paths: &LeasePaths, lease: &Lease) -> std::io::Result<()> {
    let tmp = paths
        .lease
        .with_extension(format!("json.tmp-{}", std::process::id()));
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(&serde_json::to_vec(lease).map_err(std::io::Error::other)?)?;
    std::fs::rename(&tmp, &paths.lease)
}

/// Whether process `pid`, started at `start_ticks`, still runs: `false` once it exited (also
/// while it is a zombie not yet reaped) or when the pid now names another process; `true`
/// when `/proc` cannot tell (another system).
pub fn process_running(pid: u32, start_ticks: Option<u64>) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return !std::path::Path::new("/proc/self/stat").exists();
    };
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
        return true;
    };
    let mut fields = rest.split_whitespace();
    let state = fields.next().unwrap_or("");
    if state == "Z" || state == "X" {
        return false;
    }
    match (
        start_ticks,
        fields.nth(18).and_then(|t| t.parse::<u64>().ok()),
    ) {
        (Some(want), Some(got)) => want == got,
        _ => true,
    }
}

/// The start time of process `pid` in clock ticks after boot (Linux `/proc`), if known.
pub fn process_start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// The agent a dead owner left behind, when it is provably still the same process (same
/// pid and same start time): a new owner stops its process group, so no agent outlives its
/// owner for longer than the next start.
pub fn stale_agent(lease: &Lease) -> Option<u32> {
    let pid = lease.agent_pid?;
    let ticks = lease.agent_start_ticks?;
    (process_start_ticks(pid)? == ticks).then_some(pid)
}
