//! # acpx-store-fs
//!
//! The file-system backend of the acpx session store: one pretty-printed `session.json`
//! snapshot and one NDJSON event log per session, implementing [`acpx_model::Store`].
//!
//! ```
//! use acpx_model::{
//!     Durability, EventContext, EventEnvelope, EventPayload, EventQuery, EventSource,
//!     EventStream, ListQuery, NewSession, RecordId, SessionRecord, Store, Timestamp,
//! };
//! use acpx_store_fs::FsStore;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let store = FsStore::open(dir.path())?;
//! let id = RecordId::generate();
//! let mut record = SessionRecord::new(
//!     NewSession {
//!         acpx_record_id: id.clone(),
//!         acp_session_id: "acp-1".into(),
//!         agent_session_id: None,
//!         agent_command: "my-agent --acp".into(),
//!         cwd: "/repo".into(),
//!         name: None,
//!     },
//!     Timestamp::now(),
//! );
//! store.create(&mut record).await?;
//!
//! let ctx = EventContext {
//!     acpx_record_id: &id,
//!     acp_session_id: "acp-1",
//!     request_id: None,
//!     stream: EventStream::Lifecycle,
//!     source: EventSource::Runtime,
//! };
//! let payload = EventPayload::Unknown { event_type: "note".into(), payload: "hello".into() };
//! let event = EventEnvelope::new(&ctx, 1, Timestamp::now(), payload);
//! // Appending requires the session's writer lock, taken through the same store.
//! let writer = store.lock(&id, std::time::Duration::from_secs(5)).await?;
//! let state = store.append(&writer, &[event], Durability::Fsync).await?;
//! record.note_append_result(&Ok::<_, acpx_model::StoreError>(state));
//! store.save(&mut record).await?;
//!
//! assert_eq!(store.list(&ListQuery::default()).await?.sessions.len(), 1);
//! assert_eq!(store.read_events(&id, &EventQuery::from_seq(1)).await?.events.len(), 1);
//! # Ok(())
//! # }
//! ```
//!
//! ## Layout
//!
//! ```text
//! <root>/sessions/<id>.json               snapshot (authoritative)
//! <root>/sessions/<id>.events.ndjson      active event segment
//! <root>/sessions/<id>.events.1.ndjson    older segments, 1 = newest (plain only until compressed)
//! <root>/sessions/<id>.events.1.ndjson.zst older segments once compressed (zstd)
//! <root>/sessions/<id>.events.torn-<ms>   incomplete last lines set aside (see below)
//! <root>/sessions/<id>.lock               the session's writer lock (flock)
//! <root>/sessions/<id>.deleted            tombstone of a delete under way (see Delete), or of
//!                                         a session being staged (see Staged sessions)
//! <root>/sessions/.index.json             listing cache (see below)
//! <root>/sessions/.index.journal          snapshot writes not yet folded into the cache
//! <root>/sessions/.index.lock             serializes writers of the listing cache
//! <root>/sessions/.search.ndjson          search index (see Search)
//! <root>/sessions/.search.lock            serializes rewrites of the search index
//! ```
//!
//! Directories the store creates get mode 0700 and files 0600, set with `chmod` after creation
//! so that the umask cannot change them (an existing root directory is left as it is). Record
//! ids are validated [`RecordId`]s, so every name stays inside the directory; every name the
//! store uses for itself starts with a dot or has a suffix a snapshot cannot have. Files whose
//! names do not have these shapes are ignored by `list` and never deleted.
//!
//! ## Writes and locking
//!
//! Every mutation (create, save, close, delete, append, and the write-out of buffered events)
//! of a session runs under its writer lock: an exclusive `flock` on `<id>.lock`, held across
//! processes and released by the kernel when the holder dies. [`Store::lock`] takes it for as
//! long as the returned guard lives. While a guard of this store (or of a clone) is alive,
//! this store's mutations of that session proceed without taking it again; otherwise each
//! mutation takes it for the duration of the call, waiting up to
//! [`FsStoreOptions::lock_timeout`] and then failing with [`acpx_model::StoreError::Locked`].
//! Separately opened stores (even in one process) are independent lockers. A lock file is
//! unlinked by its holder when the session no longer exists, and when that holder's lock
//! created it (locking leaves the directory as it found it: a migration that locks 10,000
//! sessions leaves no 10,000 lock files); every locker checks, after acquiring, that it locked
//! the file that is still at the path, so an unlink can never let two writers in.
//!
//! Other processes may change a session's files whenever this store does not hold the lock,
//! so after each acquisition the first operation compares the active segment's identity
//! (device, inode, length, times) and its last line's seq with what this store last wrote,
//! and reopens the log and re-reads its last seq from the tail if anything changed. (An
//! identity alone can repeat: a freed inode may be reused within one timestamp tick.) While
//! a guard is held, nothing is re-checked.
//!
//! **Snapshot saves** serialize the record with its new revision, then under the lock: read
//! the stored revision ([`StoreError::Conflict`] on mismatch; from memory while this store
//! has held the lock without a break since it wrote the file, else from the first bytes of
//! the file, where this store always writes `"revision"`, else by parsing the document),
//! write `.<id>.json.tmp.<pid>.<random>`, fsync it, rename it over `<id>.json`, fsync the
//! directory. A crash at any point leaves the old or the new snapshot. A failure is returned
//! to the caller (docs/format.md § Write ordering: a `session.json` write failure is fatal for the operation).
//!
//! **Appends** keep the session's active segment open between calls (up to 256 sessions
//! without a held lock; beyond that the least useful are closed). Each batch is checked with
//! [`acpx_model::check_append_batch`] against the true last seq, serialized into one buffer
//! and written with one `write` call, so a batch is never split across segments and never
//! interleaved with another writer's. Appending to a session without a snapshot is
//! [`StoreError::NotFound`]: an operation still running cannot recreate a deleted session.
//! A failed write is returned as an error, and also kept as `last_write_error` in
//! [`Store::event_log_state`] (docs/format.md § Write ordering: never silent).
//!
//! ## Durability
//!
//! | level | what `append` has done when it returns | survives a crash of the process | survives a crash of the machine |
//! |---|---|---|---|
//! | `None` | if this store holds the session's lock guard: the batch is in an in-process buffer, written out when the buffer exceeds 64 KiB, on [`Store::flush`], before any `read_events` of that session through this store, when the guard is dropped (the lock is released), and when the store is dropped. Without a held guard it is written before the call returns (the lock is released at the end of the call), exactly like `Flush`. | no (buffered events are lost; a write error at guard drop is only logged: call `flush` first to see it) | no |
//! | `Flush` | one `write(2)` of the buffer and the batch | yes | no |
//! | `Fsync` | `write(2)`, then `fdatasync` | yes | yes |
//!
//! An append is all or nothing: when the write (or the `fdatasync`) of a batch fails partway
//! (disk full, file-size limit, I/O error), the active segment is truncated back to its length
//! before the write, the error is returned, and it is kept as `last_write_error` in the state
//! [`Store::event_log_state`] reports. No event of a failed append is ever left in the log.
//!
//! The first append to a session creates the active segment and fsyncs the directory;
//! rotations fsync the directory too. Every call runs on tokio's blocking pool (a lock wait
//! or an fsync never blocks an async worker), except appends by the holder of the session's
//! lock: a `None` append that only copies the batch into the buffer needs no I/O and runs
//! inline, and on a multi-threaded runtime any other append by the holder runs in place with
//! `tokio::task::block_in_place` (no thread hand-off; other futures of the calling task wait
//! for it).
//!
//! The blocking implementation is internal; tests reach it with the cargo feature `testing`
//! (`FsStore::blocking`).
//!
//! ## Rotation and retention
//!
//! After a write, if the active segment is larger than
//! [`FsStoreOptions::max_segment_bytes`], it rotates: segments beyond retention are deleted
//! (oldest first), the older segments move up one index (`.1` → `.2`, …), the active file
//! becomes `.1`, a new empty active file is created, and the directory is fsynced. It also
//! rotates at the end of a turn (a batch holding `prompt_done` or `prompt_error`) when it
//! holds at least [`FsStoreOptions::turn_end_rotate_bytes`] (1 MiB), so that a session's log
//! is compressed up to its last turn (while at most [`TURN_END_ROTATE_MAX_OLDER`] older
//! segments exist). Retention keeps [`FsStoreOptions::max_segments`] files,
//! the active one included (at least 2: after a rotation the last seq is read from `.1`),
//! and more older ones while the closed segments hold less than `max_segments − 1`
//! segments' worth of `max_segment_bytes` (uncompressed), so many small segments keep the
//! same window as a few full ones. `segment_count` in [`EventLogState`] counts the
//! files that really exist. At every step the files, ordered by index, are ordered by age, so a crash
//! mid-rotation leaves a readable log; it may leave a gap in the numbering, which readers
//! step over (they probe on until three indices in a row are missing; seq continuity is what
//! matters) and the next rotation closes. A rotation failure
//! after a successful write does not fail the append: the events are stored, and the failure
//! is reported in `last_write_error` of the returned state.
//!
//! With [`FsStoreOptions::keep_rotated_segments`] nothing is deleted: every rotated segment
//! stays (compressed), shifted up one index per rotation, and `segment_count` exceeds
//! `max_segments`.
//!
//! ## Compressed segments
//!
//! Right after a rotation, every older segment that is still plain (the one just closed, or
//! one a crash or a failure left plain, or one written by a version that did not compress) is
//! compressed with zstd into `<id>.events.<n>.ndjson.zst`: written to
//! `<id>.events.<n>.ndjson.zst.tmp`, fsynced, renamed into place, the directory fsynced, and
//! only then the plain file removed. A crash anywhere leaves the plain file, or both (each
//! complete); readers open the plain one when both exist, and the next rotation removes the
//! plain one. The file is a sequence of zstd frames of about 256 KiB of whole lines each (with
//! content checksums), then a skippable frame with an index of the frames (offset, sizes,
//! lines before, first and last seq): a read from a seq decodes from the frame that holds it,
//! the last seq costs two small reads, and a damaged frame loses only its own lines, reported
//! like damaged lines (with the line numbers of the original segment). `zstd -dc` prints the
//! original NDJSON. The active segment is never compressed: it is appended to, followed with
//! `tail -f`, and its torn tail cut back. A compression failure leaves the segment plain and
//! is logged; the append that rotated still succeeds.
//!
//! ## Torn tails and damaged lines
//!
//! A crash during a write can leave an incomplete last line (no trailing `\n`) in the active
//! segment. Readers withhold it and report it in [`EventPage::torn_tail`](acpx_model::EventPage),
//! in both read modes. The next append never glues onto it: before writing, the writer copies
//! the partial bytes to `<id>.events.torn-<unix-ms>` (0600, fsynced), truncates the segment
//! and fsyncs it ([`FsStore::set_aside_torn_tail`] does the same on demand, for
//! `fsck --repair`). A torn line was never acknowledged, so nothing acknowledged is lost.
//!
//! A complete line that is not a valid event of the session (bad JSON, another session's id)
//! or whose seq does not continue the previous one is damage. [`ReadMode::Strict`](acpx_model::ReadMode::Strict) fails with
//! [`StoreError::Corrupt`] naming the segment file and the line number; [`ReadMode::Lenient`](acpx_model::ReadMode::Lenient)
//! skips it and reports it in `EventPage::damaged`. For seq breaks, lenient mode skips a line
//! whose seq repeats or goes back, and keeps (but reports) the first line after a jump, so one
//! hole does not hide the rest of the log; a jump right after skipped damaged lines is not
//! reported again (the damaged lines are the likely missing events). The writer refuses to append after a damaged last
//! line (the next seq could not be derived) with a `Corrupt` error.
//!
//! ## Reading events
//!
//! `read_events` opens every segment first (the active one, then `.1`, `.2`, … so that a
//! concurrent rotation can only show a file twice, which is dropped by inode, never hide
//! one) and reads up to the length each had then. It peeks at the first line of each segment
//! and starts in the last segment whose first seq is at most `from_seq`; inside it, it bisects
//! on byte offsets (jump to an offset, skip to the next line start, parse only that line's
//! seq) until the window is under 64 KiB, then scans and parses. Reading the last events of a
//! large log therefore costs a few small reads, not a parse of the whole segment. Line
//! numbers in errors are counted only when an error is reported. `last_seq` comes from the
//! tail of the newest segment, `oldest_seq` from the first line of the oldest. A compressed
//! segment answers both from its index, and is read from the frame that holds `from_seq`
//! (see § Compressed segments).
//!
//! `event_log_state` without a writer open opens only the segments that hold the last seq
//! (the active one, unless it is empty) and counts the others by `stat`, as the same probe
//! finds them and dropping the same duplicates by inode: every prompt reads it, and a log
//! may have hundreds of segments.
//!
//! ## Listing
//!
//! `list` does one `readdir` and one `stat` per `<id>.json`. The cache `.index.json` maps each
//! snapshot file name to the file's identity (device, inode, length, modification and change
//! times in nanoseconds), when that identity was verified, and its
//! [`SessionSummary`] (or why it is malformed). Every snapshot
//! write appends one line to `.index.journal` (the new file's identity and summary; no fsync,
//! skipped once the journal passes 16 MiB), and the next list folds the journal into the cache
//! and empties it, so sessions saved by any process are listed without parsing them. An entry
//! whose identity matches is used alone when the file's change time lies more than 2 s before
//! the entry's verification (a file written since would carry a later change time); otherwise
//! it is also checked against the leading `"revision"` (the first 96 bytes, which every save
//! increments), since identities can repeat after inode reuse. Files no entry describes are
//! parsed. Since every entry is checked against the file itself, the cache and the journal can
//! be stale, missing, corrupt or shared with other processes without ever changing an answer.
//! The cache is kept in memory after the first list and rewritten (temp file and rename, no
//! fsync, best effort: a read-only directory just means no cache) only when something changed.
//! The stats are `statx` calls relative to the open directory (no walk of its path per file),
//! and a filtered `list` copies out of the cache only the summaries its filters match; every
//! file is verified either way. `lists_by_scanning` is true: a scope lookup lists once for the
//! whole directory walk (docs/format.md § Finding a session among many).
//!
//! Malformed snapshots (bad JSON, empty, not UTF-8, an array, a wrong schema, wrong types,
//! negative token counts, timestamps without a zone, or a file name that differs from the
//! `acpxRecordId` inside) are skipped with a `tracing` warning and reported in
//! [`ListPage::skipped`](acpx_model::ListPage) with the file and the reason, never failing the
//! list. `load` of such a file returns [`StoreError::Corrupt`] naming the file and the field.
//!
//! ## Search
//!
//! Search reads the texts of the listed sessions (filtered by `cwd` through the cache) from the
//! search index `.search.ndjson`: one line per snapshot file identity and revision with the
//! session's searchable message texts, appended at every save of a session whose texts are at
//! most 256 KiB. An entry is used only while the listing finds that identity and revision;
//! sessions without one are loaded and matched with [`acpx_model::search_record`], and their
//! entries appended. The hits are the scan's in every case (docs/format.md § Search index).
//!
//! ## Delete and close
//!
//! `delete` runs under the lock, and its commit point is the tombstone `<id>.deleted`: the
//! snapshot is renamed to it (an empty one is written when only a log is left), and the
//! directory fsynced; from then on `load`, `read_events`, `append` and `list` treat the
//! session as gone whatever log files remain. Then every segment, set-aside torn tail and temp
//! file of the session is removed, the directory fsynced, the tombstone removed, and the lock
//! file unlinked before the lock is released (unless a lock guard of this store is holding
//! it: the guard's owner may recreate the session; the file goes when the guard is dropped).
//! A crash before the commit point leaves the whole session, after it nothing findable. A
//! tombstone whose session lock is free is a delete a crash interrupted: [`FsStore::open`]
//! finishes it (see § Stale temp files), and so do `create` of that id and another `delete`,
//! so the old log never becomes the history of a new session with the same id.
//!
//! A snapshot missing *without* a tombstone while a segment of the log exists is damage, not a
//! delete (docs/format.md § Damaged snapshots): `load` answers [`StoreError::Corrupt`] naming
//! the missing file, `list` reports the session in `skipped`, `read_events` reads its log, the
//! id stays taken (`create` answers `AlreadyExists`), and [`Store::replace_snapshot`] writes
//! the rebuilt snapshot.
//! `close` is idempotent and goes through the normal save path (revision + 1).
//!
//! ## Many new sessions at once
//!
//! [`Store::create_sessions`] (what `acpx migrate` writes with) stores a batch of new
//! sessions with one durable point: under the writer locks of all of them, each snapshot
//! (revision 2) is written into the session's tombstone `<id>.deleted` and its log into
//! `<id>.events.ndjson` without fsync; then the data of every file is made durable, on Linux
//! 5.17 and later on ext2/3/4, XFS, btrfs or tmpfs by one `syncfs(2)` of the store's file
//! system (called on a directory descriptor opened before the batch's first file, so that it
//! reports every writeback error since then), elsewhere (overlayfs and FUSE among them) by an
//! fsync of each file (from 4 threads); then the directory is
//! fsynced once; then each tombstone is renamed to `<id>.json` (the session's commit point)
//! and the directory fsynced once more. `syncfs` also writes back what other processes left
//! dirty on the same file system, which the batch then waits for; on ext4 it replaces two
//! flushes of the disk's write cache per session by one per batch. Until its rename a session
//! is an interrupted delete to every reader (absent), and one a crash leaves so is finished
//! (removed) by the next open, like any interrupted delete; after it, the session is whole.
//! A failed batch removes what it wrote. A log of more than one event larger than
//! `max_segment_bytes` (it would rotate) makes the whole call take the one-by-one path
//! (create, append, save; a log retention trimmed: a batch of what fits, then appends). The batch's
//! writer locks, and those of [`Store::lock_many`] (the source side of a migration), are taken
//! through one lock file, `.batch.<random>.lock`, with each `<id>.lock` a hard link to it,
//! removed before the lock is released: no inode is created and freed per session.
//!
//! ## Staged sessions
//!
//! [`Store::stage_session`] (what `sessions import` writes with) writes a new session a batch
//! at a time behind its tombstone: the tombstone `<id>.deleted` is created (holding a line
//! `{"acpxStaged":…}`) and fsynced with the directory, the log is appended in place through the
//! ordinary append path (rotation, compression, retention), and the commit fsyncs every segment,
//! renames the fsynced snapshot over the tombstone, fsyncs the directory and renames
//! `<id>.deleted` to `<id>.json`: one atomic rename, the commit point. Until then the session is
//! an interrupted delete to every reader; a kill leaves one, which the next stage of the same id
//! (the rerun of the import), any stage's sweep, [`Store::remove_stale_stages`] (`fsck
//! --repair`) or the periodic sweep of [`FsStore::open`] finishes. The stage holds the
//! session's writer lock throughout, which is what keeps those sweeps off a stage in progress.
//! [`Store::stale_stages`] lists the tombstones whose lock is free.
//!
//! ## Stale temp files
//!
//! Saves happen under the session lock, so a temp file `.<id>.json.tmp.*` whose session lock
//! can be taken (without waiting) belongs to a writer that died, and is removed; if the lock
//! is busy the file is left alone, whatever its age. Index temp files
//! (`.index.json.tmp.*`) are written under `.index.lock` and cleaned by the same rule, and so
//! are search index temp files (`.search.ndjson.tmp.*`, under `.search.lock`).
//! [`FsStore::open`] runs this cleanup when the last one is more than 10 minutes old (the
//! modification time of `sessions/.cleanup` says when it ran: the sweep reads every entry of
//! the directory, which cost each command milliseconds on a store of 10k sessions, and what
//! it removes is garbage nothing reads); [`FsStore::cleanup_stale_temp_files`] runs it on
//! demand. The same cleanup finishes interrupted deletes (a tombstone whose session lock is
//! free; see Delete and close); `create` of the same id finishes one at once.
//!
//! ## Failpoints
//!
//! With the cargo feature `failpoints`, the store aborts the process (`std::process::abort`)
//! at a named step when the environment variable `ACPX_FAILPOINT` equals its name, to test
//! crash recovery with real processes. Without the feature the checks compile to nothing.
//! The feature turns on `testing`, which makes the step names public as `FAILPOINTS` (and the
//! variable's name as `FAILPOINT_ENV`).
//!
//! | step | where |
//! |---|---|
//! | `save.after_temp_fsync` | the temp snapshot is written and fsynced, not yet renamed |
//! | `save.after_rename` | the snapshot is renamed into place, the directory not yet fsynced |
//! | `append.after_partial_write` | only the first half of the batch's bytes is written (a torn tail) |
//! | `rotate.after_shift` | older segments are shifted, the active one not yet moved to `.1` |
//! | `compress.before_plain_removed` | a closed segment's `.ndjson.zst` is synced and renamed into place, its plain `.ndjson` not yet removed |
//! | `delete.after_snapshot_unlink` | the snapshot is renamed to the tombstone `<id>.deleted` (the commit point), the log segments not yet removed |
//! | `delete.after_logs_removed` | the log segments are removed, the tombstone not yet |
//! | `create_sessions.after_sync` | a batch of new sessions is written and fsynced (each snapshot still in its tombstone), nothing committed |
//! | `create_sessions.after_first_commit` | the first session of a batch is committed (renamed to `<id>.json`), the others not yet |
//! | `stage.before_commit` | a staged session's snapshot has replaced its tombstone `<id>.deleted` and everything is fsynced; the rename to `<id>.json` (its commit point) not yet |

#![warn(missing_docs)]

mod core;
mod failpoint;
mod fsutil;
mod index;
mod layout;
mod log;
mod search_index;
mod stage;
mod summary;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use acpx_model::{
    check_append_batch, Durability, EventEnvelope, EventLogState, EventPage, EventQuery,
    LeaseActivity, LeaseGrant, LeaseHolder, ListPage, ListQuery, ManyLocks, NewSessionData,
    OwnerLease, RecordId, SearchHit, SearchQuery, SessionLeases, SessionLock, SessionRecord,
    SessionSummary, SettleOnLoad, StagedSession, StaleStage, Store, StoreError, StoreResult,
    Timestamp, TornTail,
};
use async_trait::async_trait;

use crate::core::FsCore;
pub use crate::core::{FsStoreOptions, DEFAULT_TURN_END_ROTATE_BYTES, TURN_END_ROTATE_MAX_OLDER};
// Internals for tests (cargo feature `testing`, off by default): the blocking core, the
// buffer limit of `Durability::None`, and the failpoint names.
#[cfg(feature = "testing")]
pub use crate::core::PENDING_LIMIT;
#[cfg(feature = "testing")]
pub use crate::failpoint::{FAILPOINTS, FAILPOINT_ENV};

/// The file-system [`Store`]. Cloning is cheap and gives another handle to the same store
/// (same locks, caches and buffers).
#[derive(Debug, Clone)]
pub struct FsStore {
    core: Arc<FsCore>,
}

impl FsStore {
    /// Opens the store rooted at `root` (for example `~/.acpx`; sessions live in
    /// `<root>/sessions`), creating the directories with mode 0700 if needed and removing
    /// stale temp files. Blocking.
    pub fn open(root: impl Into<PathBuf>) -> StoreResult<Self> {
        Self::open_with(root, FsStoreOptions::default())
    }

    /// [`FsStore::open`] with explicit options.
    pub fn open_with(root: impl Into<PathBuf>, opts: FsStoreOptions) -> StoreResult<Self> {
        Ok(FsStore {
            core: Arc::new(FsCore::open(root, opts)?),
        })
    }

    /// `$HOME/.acpx`, or `None` when `HOME` is not set.
    pub fn default_root() -> Option<PathBuf> {
        std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(|h| PathBuf::from(h).join(".acpx"))
    }

    /// The blocking implementation, for tests outside an async runtime (cargo feature
    /// `testing`). Its methods may sleep and fsync: do not call them on an async worker.
    #[cfg(feature = "testing")]
    pub fn blocking(&self) -> &Arc<FsCore> {
        &self.core
    }

    /// The root directory (made absolute).
    pub fn root(&self) -> &Path {
        self.core.root()
    }

    /// The options the store was opened with.
    pub fn options(&self) -> &FsStoreOptions {
        self.core.options()
    }

    /// `<root>/sessions`.
    pub fn sessions_dir(&self) -> PathBuf {
        self.core.sessions_dir().to_owned()
    }

    /// `<root>/sessions/<id>.json`.
    pub fn snapshot_path(&self, id: &RecordId) -> PathBuf {
        self.core.snapshot_path(id)
    }

    /// `<root>/sessions/<id>.events.ndjson`.
    pub fn active_log_path(&self, id: &RecordId) -> PathBuf {
        self.core.segment_path(id, 0)
    }

    /// `<root>/sessions/<id>.events.<n>.ndjson` (`n = 0` is the active segment).
    pub fn segment_path(&self, id: &RecordId, n: u32) -> PathBuf {
        self.core.segment_path(id, n)
    }

    /// `<root>/sessions/<id>.events.<n>.ndjson.zst`: older segment `n >= 1` as it is kept once
    /// compressed (docs/format.md § Compressed segments).
    pub fn compressed_segment_path(&self, id: &RecordId, n: u32) -> PathBuf {
        self.core.compressed_segment_path(id, n)
    }

    /// `<root>/sessions/<id>.lock`.
    pub fn lock_path(&self, id: &RecordId) -> PathBuf {
        self.core.lock_path(id)
    }

    /// Removes temp files of interrupted saves whose session lock is free and finishes
    /// deletes a crash interrupted (see the crate docs); returns how many. Blocking.
    pub fn cleanup_stale_temp_files(&self) -> StoreResult<usize> {
        self.core.cleanup_stale_temp_files()
    }

    /// Moves an incomplete last line of the active log aside (into
    /// `<id>.events.torn-<unix-ms>`) and truncates it; returns what was moved (`location` is
    /// the new file). Used by `fsck --repair`; appends do it by themselves. Takes the session
    /// lock like a mutation. Blocking.
    pub fn set_aside_torn_tail(&self, id: &RecordId) -> StoreResult<Option<TornTail>> {
        self.core.set_aside_torn_tail(id)
    }

    /// Runs `f` on the blocking pool: these calls sleep on locks and fsync.
    async fn run<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Arc<FsCore>) -> StoreResult<T> + Send + 'static,
    {
        let core = self.core.clone();
        match tokio::task::spawn_blocking(move || f(&core)).await {
            Ok(r) => r,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => Err(StoreError::Backend {
                backend: "fs",
                message: format!("the blocking task was cancelled: {e}"),
            }),
        }
    }
}

/// The owner lease of a session is `<id>.lease` beside its lock file
/// (`acpx_lock::lease_file`).
#[async_trait]
impl SessionLeases for FsStore {
    async fn acquire_lease(
        &self,
        id: &RecordId,
        holder: &LeaseHolder,
        ttl: Duration,
    ) -> StoreResult<LeaseGrant> {
        let (id, holder) = (id.clone(), holder.clone());
        self.run(move |c| c.leases.acquire(&c.lease_path(&id), &id, &holder, ttl))
            .await
    }

    async fn renew_lease(
        &self,
        id: &RecordId,
        generation: u64,
        activity: &LeaseActivity,
        queue_depth: u32,
    ) -> StoreResult<OwnerLease> {
        let (id, activity) = (id.clone(), activity.clone());
        self.run(move |c| {
            c.leases
                .renew(&c.lease_path(&id), &id, generation, &activity, queue_depth)
        })
        .await
    }

    async fn release_lease(&self, id: &RecordId, generation: u64) -> StoreResult<bool> {
        let id = id.clone();
        self.run(move |c| c.leases.release(&c.lease_path(&id), generation))
            .await
    }

    async fn read_lease(&self, id: &RecordId) -> StoreResult<Option<OwnerLease>> {
        let id = id.clone();
        self.run(move |c| c.leases.read(&c.lease_path(&id))).await
    }
}

#[async_trait]
impl Store for FsStore {
    fn backend_name(&self) -> &'static str {
        "fs"
    }

    async fn create(&self, record: &mut SessionRecord) -> StoreResult<()> {
        let bytes = self.core.prepare_snapshot(record, 1)?;
        let id = record.acpx_record_id.clone();
        self.run(move |c| c.create_bytes(&id, bytes)).await?;
        record.revision = 1;
        Ok(())
    }

    async fn load(&self, id: &RecordId) -> StoreResult<SessionRecord> {
        let id = id.clone();
        self.run(move |c| c.load(&id)).await
    }

    async fn load_settling(
        &self,
        id: &RecordId,
        settle: Arc<SettleOnLoad>,
    ) -> StoreResult<SessionRecord> {
        let id = id.clone();
        self.run(move |c| c.load_settling(&id, &settle)).await
    }

    async fn summary(&self, id: &RecordId) -> StoreResult<SessionSummary> {
        let id = id.clone();
        self.run(move |c| c.summary(&id)).await
    }

    async fn create_sessions(
        &self,
        sessions: Vec<NewSessionData>,
    ) -> StoreResult<Vec<SessionRecord>> {
        // A log that would rotate while written goes the one-by-one way, which rotates (and
        // applies retention) exactly as appends do; one retention trimmed is started with the
        // events that fit on this path and continued by appends.
        let budget = usize::try_from(self.core.options().max_segment_bytes).unwrap_or(usize::MAX);
        let now = Timestamp::now();
        let mut prepared = Vec::with_capacity(sessions.len());
        let mut records = Vec::with_capacity(sessions.len());
        for s in &sessions {
            let id = &s.record.acpx_record_id;
            s.record
                .validate(&self.core.snapshot_path(id).display().to_string())?;
            // A log retention trimmed starts at a later seq: segment 0 then holds the lines
            // from that seq, which every reader takes as a log retained from there.
            check_append_batch(id, s.seq_before(), &s.events)?;
            let mut log = Vec::with_capacity(s.events.len() * 400);
            for e in &s.events {
                e.write_ndjson_line(&mut log);
            }
            // One event goes the batch way whatever its size (an append of it would too),
            // so that a log retention trimmed can always be started from its first event.
            if log.len() > budget && s.events.len() > 1 {
                let max = budget as u64;
                return acpx_model::store::create_sessions_in_parts(self, sessions, |s| {
                    Some(acpx_model::store::prefix_within(&s.events, max))
                })
                .await;
            }
            let mut record = s.record.clone();
            let last_seq = s.events.last().map_or(0, |e| e.seq);
            record.acpx.event_log = EventLogState {
                format_version: 1,
                active_path: self.core.segment_path(id, 0).display().to_string(),
                segment_count: u32::from(last_seq > 0),
                max_segment_bytes: self.core.options().max_segment_bytes,
                max_segments: self.core.options().max_segments,
                last_seq,
                last_write_at: (last_seq > 0).then_some(now),
                last_write_error: None,
            };
            record.revision = 2;
            prepared.push(core::PreparedNew::new(&record, log)?);
            records.push(record);
        }
        drop(sessions);
        self.run(move |c| c.create_sessions(prepared)).await?;
        Ok(records)
    }

    async fn stage_session<'s>(
        &'s self,
        mut record: SessionRecord,
    ) -> StoreResult<Box<dyn StagedSession + 's>> {
        let id = record.acpx_record_id.clone();
        record.validate(&self.core.snapshot_path(&id).display().to_string())?;
        record.revision = 0;
        let writer = self
            .run(move |c| c.begin_stage(&id, acpx_model::stage::STAGE_LOCK_TIMEOUT))
            .await?;
        Ok(Box::new(stage::FsStage::new(
            self.core.clone(),
            record,
            writer,
        )))
    }

    async fn stale_stages(&self) -> StoreResult<Vec<StaleStage>> {
        self.run(|c| c.stale_stages(false)).await
    }

    async fn remove_stale_stages(&self) -> StoreResult<Vec<StaleStage>> {
        self.run(|c| c.stale_stages(true)).await
    }

    async fn save(&self, record: &mut SessionRecord) -> StoreResult<()> {
        let expected = record.revision;
        let bytes = self.core.prepare_snapshot(record, expected + 1)?;
        let id = record.acpx_record_id.clone();
        self.run(move |c| c.save_bytes(&id, expected, bytes))
            .await?;
        record.revision = expected + 1;
        Ok(())
    }

    async fn close(&self, id: &RecordId, at: Timestamp) -> StoreResult<SessionRecord> {
        let id = id.clone();
        self.run(move |c| c.close(&id, at, None)).await
    }

    async fn close_settling(
        &self,
        id: &RecordId,
        at: Timestamp,
        settle: Arc<SettleOnLoad>,
    ) -> StoreResult<SessionRecord> {
        let id = id.clone();
        self.run(move |c| c.close(&id, at, Some(&settle))).await
    }

    async fn delete(&self, id: &RecordId) -> StoreResult<bool> {
        let id = id.clone();
        self.run(move |c| c.delete(&id)).await
    }

    fn lists_by_scanning(&self) -> bool {
        true
    }

    fn leases(&self) -> &dyn SessionLeases {
        self
    }

    async fn list(&self, query: &ListQuery) -> StoreResult<ListPage> {
        let query = query.clone();
        self.run(move |c| c.list(&query)).await
    }

    async fn append(
        &self,
        writer: &SessionLock,
        events: &[EventEnvelope],
        durability: Durability,
    ) -> StoreResult<EventLogState> {
        self.core.check_writer(writer)?;
        let id = writer.id();
        if let Some(generation) = writer.fence() {
            self.core.check_fence(id, generation)?;
        }
        // Serialized here, so that the events need not be cloned into the blocking task.
        let mut batch = core::PreparedBatch::new(id, events);
        if durability == Durability::None {
            if let Some(result) = self.core.try_append_buffered(id, &mut batch) {
                return result;
            }
        }
        // The holder of the session's lock (the runtime during a turn) waits for no one, so on
        // a multi-threaded runtime its append runs right here with `block_in_place` instead of
        // being handed to the blocking pool: the hand-off (two thread wake-ups) cost about as
        // much as writing a batch of 64 events. Other futures of the calling task wait for the
        // call; other tasks do not. A session busy in another thread of this process (a reader
        // writing out buffered events) is waited for on the blocking pool instead.
        let multi_thread = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        if multi_thread && self.core.holds_lock(id) {
            return tokio::task::block_in_place(|| {
                self.core.append_prepared(id, batch, durability)
            });
        }
        let id = id.clone();
        self.run(move |c| c.append_prepared(&id, batch, durability))
            .await
    }

    async fn read_events(&self, id: &RecordId, query: &EventQuery) -> StoreResult<EventPage> {
        let id = id.clone();
        let query = query.clone();
        self.run(move |c| c.read_events(&id, &query)).await
    }

    async fn load_many_with_events(
        &self,
        ids: &[RecordId],
        query: &EventQuery,
    ) -> StoreResult<Vec<(SessionRecord, EventPage)>> {
        let ids = ids.to_vec();
        let query = query.clone();
        self.run(move |c| {
            ids.iter()
                .map(|id| Ok((c.load(id)?, c.read_events(id, &query)?)))
                .collect()
        })
        .await
    }

    async fn event_log_state(&self, id: &RecordId) -> StoreResult<EventLogState> {
        let id = id.clone();
        self.run(move |c| c.event_log_state(&id)).await
    }

    async fn flush(&self, id: &RecordId) -> StoreResult<()> {
        let id = id.clone();
        self.run(move |c| c.flush(&id)).await
    }

    async fn search(&self, query: &SearchQuery) -> StoreResult<Vec<SearchHit>> {
        let query = query.clone();
        self.run(move |c| c.search(&query, None)).await
    }

    async fn search_settling(
        &self,
        query: &SearchQuery,
        settle: Arc<SettleOnLoad>,
    ) -> StoreResult<Vec<SearchHit>> {
        let query = query.clone();
        self.run(move |c| c.search(&query, Some(&settle))).await
    }

    async fn lock(&self, id: &RecordId, timeout: Duration) -> StoreResult<SessionLock> {
        let id = id.clone();
        self.run(move |c| c.lock(&id, timeout)).await
    }

    async fn lock_many(&self, ids: &[RecordId], timeout: Duration) -> StoreResult<ManyLocks> {
        // Through one lock file: no inode created and freed per session (`core::batch_lock`).
        let ids = ids.to_vec();
        let locks = self
            .run(move |c| c.lock_batch(&ids.iter().collect::<Vec<_>>(), timeout))
            .await?;
        Ok(ManyLocks::guard(Box::new(locks)))
    }

    async fn replace_snapshot(
        &self,
        writer: &SessionLock,
        record: &mut SessionRecord,
    ) -> StoreResult<()> {
        self.core.check_writer(writer)?;
        if writer.id() != &record.acpx_record_id {
            return Err(StoreError::InvalidArgument(format!(
                "the writer lock of {} cannot replace the snapshot of {}",
                writer.id(),
                record.acpx_record_id
            )));
        }
        let revision = record.revision + 1;
        let bytes = self.core.prepare_snapshot(record, revision)?;
        let id = record.acpx_record_id.clone();
        self.run(move |c| c.replace_snapshot_bytes(&id, bytes, revision))
            .await?;
        record.revision = revision;
        Ok(())
    }
}
