//! WAL checkpoints on a thread of their own.
//!
//! In WAL mode every commit appends pages to the `-wal` file, and a checkpoint copies them
//! back into the database file, then fsyncs both. SQLite's automatic checkpoint runs inside
//! the commit that crosses its threshold, so one append in every few dozen paid for copying
//! the pages of all of them, and for two fsyncs: measured, about 12% of the CPU time of a
//! stream of appends of 64 events and more of its wall time (the fsyncs).
//! Here a thread with its own connection runs a `PASSIVE` checkpoint (one that never waits
//! for, nor blocks, readers and writers) after every [`COMMITS_PER_CHECKPOINT`] write
//! transactions of the store, off the path of the call.
//!
//! The store's own connection keeps an automatic checkpoint at [`FALLBACK_PAGES`]: under a
//! steady stream of commits the WAL is never fully copied at the instant a write starts, and
//! SQLite only rewinds the file from the start then. The fallback bounds the file, and it
//! finds most pages already copied by this thread.
//!
//! Opening the store truncates a WAL larger than [`RECLAIM_WAL_BYTES`] (see
//! [`reclaim_large_wal`]): after a full disk, that is what gives the space back.

use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

/// Write transactions between two background checkpoints (an append of 64 events adds
/// about 25 pages to the WAL, so this is close to SQLite's default of a checkpoint per 1000
/// pages; 16 and 64 measured no better).
pub(crate) const COMMITS_PER_CHECKPOINT: u64 = 32;

/// `wal_autocheckpoint` of the store's connection: the size (in pages) at which the
/// committing call checkpoints itself. At SQLite's 1000, appends in a steady stream still
/// paid for it every 40 batches; at 10,000 (40 MiB of WAL) every 400.
pub(crate) const FALLBACK_PAGES: u32 = 10_000;

/// Size of the `-wal` file above which opening the store checkpoints it to its end and
/// truncates it.
pub(crate) const RECLAIM_WAL_BYTES: u64 = 1 << 20;

/// Checkpoints a WAL larger than [`RECLAIM_WAL_BYTES`] to its end and truncates it
/// (`wal_checkpoint(TRUNCATE)`), unless another connection is using the database right now
/// (it never waits: `busy_timeout` is restored afterwards).
///
/// Why at open: when the disk is full, a checkpoint cannot grow the database file, so it
/// fails, the WAL is never rewound, and every later commit appends to it. Once space is
/// freed, the next commit takes it for the WAL again, and the store stays full: nothing can
/// be saved, `fsck --repair` included. A complete checkpoint while there is room copies the
/// WAL into the database and gives its space back; the first open after space was freed is
/// that moment.
///
/// Only when the filesystem has room for it: a checkpoint grows the database file by up to the
/// WAL's size, and one that fails half-way (the disk still nearly full) would only have taken
/// the little space that was freed, so that the next small write (a run file, one append)
/// fails where it would have worked.
pub(crate) fn reclaim_large_wal(conn: &Connection, path: &Path, busy_timeout: Duration) {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    let wal_len = match std::fs::metadata(&wal) {
        Ok(m) if m.len() > RECLAIM_WAL_BYTES => m.len(),
        _ => return,
    };
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    match rustix::fs::statvfs(dir) {
        Ok(st) if st.f_bavail.saturating_mul(st.f_frsize) > wal_len.saturating_mul(2) => {}
        Ok(_) => {
            tracing::debug!(db = %path.display(), "too little free space to checkpoint the write-ahead log now");
            return;
        }
        Err(e) => {
            tracing::debug!(db = %path.display(), error = %e, "cannot read the free space; the write-ahead log stays as it is");
            return;
        }
    }
    if conn.busy_timeout(Duration::ZERO).is_err() {
        return;
    }
    let result = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
        r.get::<_, i64>(0)
    });
    match result {
        Ok(0) => tracing::debug!(db = %path.display(), "truncated a large write-ahead log"),
        Ok(_) => {
            tracing::debug!(db = %path.display(), "the database is busy; the write-ahead log stays as it is")
        }
        Err(e) => {
            tracing::warn!(db = %path.display(), error = %e, "could not checkpoint the write-ahead log")
        }
    }
    if let Err(e) = conn.busy_timeout(busy_timeout) {
        tracing::warn!(db = %path.display(), error = %e, "could not restore busy_timeout");
    }
}

#[derive(Default)]
struct State {
    commits: u64,
    stop: bool,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        // A counter and a flag stay meaningful even if a holder panicked.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The checkpoint thread of one store (shared by its clones). Dropping it stops and joins the
/// thread, so that nothing touches the database files once the store is gone.
pub(crate) struct Checkpointer {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Checkpointer {
    /// Starts the thread. Without it (the thread or its connection could not be made) the
    /// store still works: its own connection checkpoints at the fallback size.
    pub(crate) fn start(path: &Path) -> Checkpointer {
        let shared = Arc::new(Shared::default());
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .and_then(|c| {
            // A checkpoint that meets another one gives up rather than wait: the next one
            // catches up.
            c.busy_timeout(Duration::ZERO)?;
            Ok(c)
        });
        let thread = match conn {
            Ok(conn) => {
                let worker = Arc::clone(&shared);
                let path = path.to_owned();
                std::thread::Builder::new()
                    .name("acpx-sqlite-checkpoint".into())
                    .spawn(move || run(&worker, &conn, &path))
                    .map_err(|e| e.to_string())
            }
            Err(e) => Err(e.to_string()),
        };
        let thread = thread
            .inspect_err(|e| {
                tracing::warn!(db = %path.display(), error = %e, "no checkpoint thread; the store checkpoints in its own calls");
            })
            .ok();
        Checkpointer { shared, thread }
    }

    /// Counts a committed write transaction; every [`COMMITS_PER_CHECKPOINT`]th wakes the
    /// thread.
    pub(crate) fn committed(&self) {
        let mut state = self.shared.state();
        state.commits += 1;
        if state.commits >= COMMITS_PER_CHECKPOINT {
            self.shared.wake.notify_one();
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.shared.state().stop = true;
        self.shared.wake.notify_one();
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                tracing::warn!("the checkpoint thread panicked");
            }
        }
    }
}

fn run(shared: &Shared, conn: &Connection, path: &Path) {
    loop {
        {
            let mut state = shared.state();
            while state.commits < COMMITS_PER_CHECKPOINT && !state.stop {
                state = shared.wake.wait(state).unwrap_or_else(|p| p.into_inner());
            }
            if state.stop {
                return;
            }
            state.commits = 0;
        }
        if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
            // Busy or failed: the WAL stays as it is, the next checkpoint (or the store's
            // fallback) copies it.
            tracing::debug!(db = %path.display(), error = %e, "background checkpoint did not run");
        }
    }
}
