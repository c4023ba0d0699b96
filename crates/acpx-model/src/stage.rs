//! Staged new sessions: a whole session (its snapshot and its event log) written a batch at a
//! time and made visible in one step, what `sessions import` writes with
//! ([`Store::stage_session`](crate::store::Store::stage_session), `docs/format.md` § Importing a session: staged, then committed).
//!
//! A stage begins with the session's snapshot ([`Store::stage_session`](crate::store::Store::stage_session)), takes its log in
//! batches of any number ([`StagedSession::append`]: memory holds a batch, not the log) and ends
//! with one of:
//!
//! - [`StagedSession::commit`]: the session appears whole, at once, and durable (it survives a
//!   crash of the machine once `commit` returns), stored as `create`, appends of every event and
//!   a `save` with the log's `acpx.event_log` would leave it (revision 2);
//! - [`StagedSession::abort`]: everything staged is removed; nothing was ever visible.
//!
//! Until the commit no reader sees anything of the session: not `list`, `load`, `summary`,
//! `read_events`, `search`, nor `fsck`'s check of sessions. A process killed at any point leaves
//! nothing visible either; what it left (files, a spill) is a *stale stage*, invisible too,
//! which [`Store::stale_stages`](crate::store::Store::stale_stages) reports and [`Store::remove_stale_stages`](crate::store::Store::remove_stale_stages) removes, and which
//! the next stage of the same id (a rerun of the same import) reclaims before it starts, so
//! that a rerun completes the import. A stage holds the session's writer lock
//! ([`Store::lock`](crate::store::Store::lock)) from its beginning to its end: that is how a stale stage is told from one
//! in progress (its lock is free), and why two stages of one id never run at once.
//!
//! How each backend makes it one step:
//!
//! | store | staged where | commit point | left by a kill |
//! |---|---|---|---|
//! | file | the snapshot's place is the tombstone `<id>.deleted`, so the log segments, written in place, belong to a session every reader takes as deleted | fsync of the segments and of the snapshot, which replaces the tombstone; then the rename of `<id>.deleted` to `<id>.json` | an interrupted delete, finished by the next stage of the id (the rerun), the first stage of any process, `fsck --repair`, or an open of the store (its periodic sweep) |
//! | SQLite | an NDJSON spill file `<db>.staging/<id>.ndjson`, outside the database | one transaction inserting the session's row and all its events, committed with `synchronous=FULL` | the spill file, removed by the next stage of any session or `fsck --repair` |
//! | PostgreSQL | one transaction on a connection of its own, open from the first append | its `COMMIT` | nothing: the server rolls the transaction back when the connection ends |
//! | memory | the batches, in memory | inserting the session | nothing (the process is gone) |
//!
//! A backend that does not implement [`Store::stage_session`](crate::store::Store::stage_session) gets
//! [`DirectStage`](crate::store::DirectStage), which
//! writes through `create`, `append` and `save` as `sessions import` always did: not one step
//! (a kill leaves a session whose log ends early, and a rerun is refused as already existing),
//! but correct on every store.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use serde::Serialize;

use crate::append_batch::check_append_batch;
use crate::error::StoreResult;
use crate::event::EventEnvelope;
use crate::id::RecordId;
use crate::session::SessionRecord;

/// How long a stage waits for the new session's writer lock: a fresh id's is free at once,
/// and a rerun's as soon as the killed process is gone; a stage of the same id still running
/// makes the new one fail with [`StoreError::Locked`](crate::StoreError::Locked).
pub const STAGE_LOCK_TIMEOUT: Duration = Duration::from_secs(10);

/// A new session being written, invisible until [`StagedSession::commit`]
/// ([`Store::stage_session`](crate::store::Store::stage_session); see the module docs).
///
/// Dropped without `commit` or `abort` (a panic, a cancelled future), a stage leaves what a
/// killed process leaves: nothing visible, and a stale stage that the next stage of its id, or
/// [`Store::remove_stale_stages`](crate::store::Store::remove_stale_stages), removes. Backends remove what they can at once.
#[async_trait]
pub trait StagedSession: Send + fmt::Debug {
    /// The session being staged.
    fn id(&self) -> &RecordId;

    /// Adds the next events of the log. The first event of the first non-empty batch starts
    /// the log: at seq 1, or above for a log whose oldest events retention removed (it is then
    /// stored as retained from that seq); every later event continues it exactly. Every event
    /// must belong to the session. A batch that does not is refused with
    /// [`StoreError::SeqMismatch`](crate::StoreError::SeqMismatch) or `InvalidArgument`, and nothing of it is staged (the
    /// stage can go on, or be aborted). The events are not durable, nor visible, before the
    /// commit.
    async fn append(&mut self, events: &[EventEnvelope]) -> StoreResult<()>;

    /// Makes the session visible, whole and durable, in one step; returns the snapshot as
    /// stored (revision 2, its `acpx.event_log` the store's own state of the log). A session
    /// with this id that appeared meanwhile (through a store without the writer lock) fails
    /// it with [`StoreError::AlreadyExists`](crate::StoreError::AlreadyExists). On an error nothing is visible, and what was
    /// staged is removed (or left as a stale stage when even that fails).
    async fn commit(self: Box<Self>) -> StoreResult<SessionRecord>;

    /// Removes everything staged; nothing was ever visible.
    async fn abort(self: Box<Self>) -> StoreResult<()>;
}

/// What an interrupted stage left (its process was killed before the commit or abort):
/// nothing a reader sees, only space. Reported by [`Store::stale_stages`](crate::store::Store::stale_stages) (and `fsck`),
/// removed by [`Store::remove_stale_stages`](crate::store::Store::remove_stale_stages) (`fsck --repair`) and by the next stage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StaleStage {
    /// The session that was being staged, when the leftover says.
    #[serde(rename = "acpxRecordId", skip_serializing_if = "Option::is_none")]
    pub acpx_record_id: Option<RecordId>,
    /// The file (or row) it left.
    pub location: String,
    /// What it is, for people.
    pub detail: String,
}

/// The seq bookkeeping every stage shares: the first event starts the log wherever it says
/// (at least seq 1), later ones continue it, with [`check_append_batch`]'s answers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StagedSeqs {
    /// The last seq staged; `None` before the first event.
    pub last: Option<u64>,
    /// The seq of the first event staged (0 before it).
    pub first: u64,
    /// Events staged.
    pub count: u64,
}

impl StagedSeqs {
    /// Checks that `events` may be appended to session `id` next (see
    /// [`StagedSession::append`]); changes nothing.
    pub fn check(&self, id: &RecordId, events: &[EventEnvelope]) -> StoreResult<()> {
        let Some(first) = events.first() else {
            return Ok(());
        };
        let before = match self.last {
            Some(last) => last,
            // A log starts at seq 1 or later: seq 0 is refused as `append` refuses it.
            None => first.seq.saturating_sub(1),
        };
        check_append_batch(id, before, events)
    }

    /// The seq the log continues from before `events` (the value `append`'s check used).
    pub fn before(&self, events: &[EventEnvelope]) -> u64 {
        self.last
            .unwrap_or_else(|| events.first().map_or(0, |e| e.seq.saturating_sub(1)))
    }

    /// Records `events` (already checked) as staged.
    pub fn advance(&mut self, events: &[EventEnvelope]) {
        if let (Some(first), Some(last)) = (events.first(), events.last()) {
            if self.last.is_none() {
                self.first = first.seq;
            }
            self.last = Some(last.seq);
            self.count += events.len() as u64;
        }
    }

    /// The last seq staged (0 for an empty log).
    pub fn last_seq(&self) -> u64 {
        self.last.unwrap_or(0)
    }
}
