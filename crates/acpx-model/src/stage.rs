//! Staged new sessions: a whole session (its snapshot and its event log) written a batch at a
//! time and made visible in one step, what `sessions import` writes with
//! ([`Store::stage_session`], `docs/format.md` § Importing a session: staged, then committed).
//!
//! A stage begins with the session's snapshot ([`Store::stage_session`]), takes its log in
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
//! which [`Store::stale_stages`] reports and [`Store::remove_stale_stages`] removes, and which
//! the next stage of the same id (a rerun of the same import) reclaims before it starts, so
//! that a rerun completes the import. A stage holds the session's writer lock
//! ([`Store::lock`]) from its beginning to its end: that is how a stale stage is told from one
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
//! A backend that does not implement [`Store::stage_session`] gets [`DirectStage`], which
//! writes through `create`, `append` and `save` as `sessions import` always did: not one step
//! (a kill leaves a session whose log ends early, and a rerun is refused as already existing),
//! but correct on every store.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use serde::Serialize;

use crate::error::{StoreError, StoreResult};
use crate::event::EventEnvelope;
use crate::id::RecordId;
use crate::session::SessionRecord;
use crate::store::{check_append_batch, Durability, NewSessionData, SessionLock, Store};

/// How long a stage waits for the new session's writer lock: a fresh id's is free at once,
/// and a rerun's as soon as the killed process is gone; a stage of the same id still running
/// makes the new one fail with [`StoreError::Locked`].
pub const STAGE_LOCK_TIMEOUT: Duration = Duration::from_secs(10);

/// A new session being written, invisible until [`StagedSession::commit`]
/// ([`Store::stage_session`]; see the module docs).
///
/// Dropped without `commit` or `abort` (a panic, a cancelled future), a stage leaves what a
/// killed process leaves: nothing visible, and a stale stage that the next stage of its id, or
/// [`Store::remove_stale_stages`], removes. Backends remove what they can at once.
#[async_trait]
pub trait StagedSession: Send + fmt::Debug {
    /// The session being staged.
    fn id(&self) -> &RecordId;

    /// Adds the next events of the log. The first event of the first non-empty batch starts
    /// the log: at seq 1, or above for a log whose oldest events retention removed (it is then
    /// stored as retained from that seq); every later event continues it exactly. Every event
    /// must belong to the session. A batch that does not is refused with
    /// [`StoreError::SeqMismatch`] or `InvalidArgument`, and nothing of it is staged (the
    /// stage can go on, or be aborted). The events are not durable, nor visible, before the
    /// commit.
    async fn append(&mut self, events: &[EventEnvelope]) -> StoreResult<()>;

    /// Makes the session visible, whole and durable, in one step; returns the snapshot as
    /// stored (revision 2, its `acpx.event_log` the store's own state of the log). A session
    /// with this id that appeared meanwhile (through a store without the writer lock) fails
    /// it with [`StoreError::AlreadyExists`]. On an error nothing is visible, and what was
    /// staged is removed (or left as a stale stage when even that fails).
    async fn commit(self: Box<Self>) -> StoreResult<SessionRecord>;

    /// Removes everything staged; nothing was ever visible.
    async fn abort(self: Box<Self>) -> StoreResult<()>;
}

/// What an interrupted stage left (its process was killed before the commit or abort):
/// nothing a reader sees, only space. Reported by [`Store::stale_stages`] (and `fsck`),
/// removed by [`Store::remove_stale_stages`] (`fsck --repair`) and by the next stage.
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

/// Refuses to stage a session whose id `store` already holds (a snapshot, or what a list
/// reports as a damaged entry): [`StoreError::AlreadyExists`]. A stage checks it before it
/// writes anything; its commit checks it again.
pub async fn refuse_taken<S: Store + ?Sized>(store: &S, id: &RecordId) -> StoreResult<()> {
    match store.summary(id).await {
        Err(StoreError::NotFound(_)) => Ok(()),
        Ok(_) | Err(StoreError::Corrupt { .. }) | Err(StoreError::Invalid(_)) => {
            Err(StoreError::AlreadyExists(id.clone()))
        }
        Err(e) => Err(e),
    }
}

/// [`Store::stage_session`]'s default, for a store that has no staging of its own: the session
/// is written as `sessions import` always wrote it, through the store's `create` (at the first
/// append or at the commit; for a log starting above seq 1, `create_sessions` with the first
/// batch, the one way to start a log there), `append` ([`Durability::Flush`]) and, at the
/// commit, `flush` and a `save` with the log's state.
///
/// Not one step: the session is visible from its creation on, with the part of its log written
/// so far. A kill leaves it so (`fsck` reports its snapshot ahead of its log), and a rerun is
/// refused with [`StoreError::AlreadyExists`] until it is deleted; an abort, or a failed
/// commit, deletes what it created. Nothing is left anywhere else, so there are no stale
/// stages to report.
#[derive(Debug)]
pub struct DirectStage<'s, S: Store + ?Sized> {
    store: &'s S,
    id: RecordId,
    /// The snapshot, until the session is created.
    pending: Option<SessionRecord>,
    /// The snapshot as stored, and the writer lock, once created.
    created: Option<(SessionRecord, SessionLock)>,
    seqs: StagedSeqs,
}

impl<'s, S: Store + ?Sized> DirectStage<'s, S> {
    /// Begins staging `record` in `store`: refuses a taken id ([`refuse_taken`]); writes
    /// nothing yet.
    pub async fn begin(store: &'s S, mut record: SessionRecord) -> StoreResult<Self> {
        let id = record.acpx_record_id.clone();
        refuse_taken(store, &id).await?;
        record.revision = 0;
        Ok(DirectStage {
            store,
            id,
            pending: Some(record),
            created: None,
            seqs: StagedSeqs::default(),
        })
    }

    /// Creates the session: with `first` (a log starting above seq 1) through
    /// `create_sessions`, else through `create`.
    async fn create(&mut self, first: Option<&[EventEnvelope]>) -> StoreResult<()> {
        let Some(mut record) = self.pending.take() else {
            return Ok(());
        };
        let store = self.store;
        if let Some(first) = first {
            let mut stored = store
                .create_sessions(vec![NewSessionData {
                    record,
                    events: first.to_vec(),
                }])
                .await?;
            let record = stored.pop().ok_or_else(|| StoreError::Backend {
                backend: store.backend_name(),
                message: format!("creating session {} returned no snapshot", self.id),
            })?;
            match store.lock(&self.id, STAGE_LOCK_TIMEOUT).await {
                Ok(writer) => self.created = Some((record, writer)),
                Err(e) => {
                    let _ = store.delete(&self.id).await;
                    return Err(e);
                }
            }
            return Ok(());
        }
        let writer = store.lock(&self.id, STAGE_LOCK_TIMEOUT).await?;
        store.create(&mut record).await?;
        self.created = Some((record, writer));
        Ok(())
    }

    async fn remove_created(&mut self) -> StoreResult<()> {
        if let Some((_, writer)) = self.created.take() {
            let deleted = self.store.delete(&self.id).await;
            drop(writer);
            deleted?;
        }
        Ok(())
    }
}

#[async_trait]
impl<S: Store + ?Sized> StagedSession for DirectStage<'_, S> {
    fn id(&self) -> &RecordId {
        &self.id
    }

    async fn append(&mut self, events: &[EventEnvelope]) -> StoreResult<()> {
        if events.is_empty() {
            return Ok(());
        }
        self.seqs.check(&self.id, events)?;
        if self.created.is_none() {
            if events[0].seq > 1 {
                self.create(Some(events)).await?;
                self.seqs.advance(events);
                return Ok(());
            }
            self.create(None).await?;
        }
        let Some((_, writer)) = &self.created else {
            return Err(StoreError::NotFound(self.id.clone()));
        };
        self.store.append(writer, events, Durability::Flush).await?;
        self.seqs.advance(events);
        Ok(())
    }

    async fn commit(mut self: Box<Self>) -> StoreResult<SessionRecord> {
        let saved = async {
            self.create(None).await?;
            let Some((record, _)) = self.created.as_mut() else {
                return Err(StoreError::NotFound(self.id.clone()));
            };
            self.store.flush(&self.id).await?;
            record.acpx.event_log = self.store.event_log_state(&self.id).await?;
            self.store.save(record).await?;
            Ok(record.clone())
        }
        .await;
        match saved {
            Ok(record) => Ok(record),
            Err(e) => {
                if let Err(cleanup) = self.remove_created().await {
                    eprintln!(
                        "acpx: could not remove the partly written session {}: {cleanup}",
                        self.id
                    );
                }
                Err(e)
            }
        }
    }

    async fn abort(mut self: Box<Self>) -> StoreResult<()> {
        self.remove_created().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{EventContext, EventPayload, EventSource, EventStream};
    use crate::store::{EventQuery, ListQuery};
    use crate::{MemoryStore, NewSession, Timestamp};

    fn record(id: &str) -> SessionRecord {
        SessionRecord::new(
            NewSession {
                acpx_record_id: RecordId::parse(id).unwrap(),
                acp_session_id: format!("acp-{id}"),
                agent_session_id: None,
                agent_command: "agent".into(),
                cwd: "/repo".into(),
                name: None,
            },
            Timestamp::from_millis(1_000).unwrap(),
        )
    }

    fn events(id: &str, seqs: std::ops::RangeInclusive<u64>) -> Vec<EventEnvelope> {
        let id = RecordId::parse(id).unwrap();
        let ctx = EventContext {
            acpx_record_id: &id,
            acp_session_id: "acp",
            request_id: None,
            stream: EventStream::Lifecycle,
            source: EventSource::Runtime,
        };
        seqs.map(|seq| {
            EventEnvelope::new(
                &ctx,
                seq,
                Timestamp::now(),
                EventPayload::Unknown {
                    event_type: "x".into(),
                    payload: serde_json::Value::Null,
                },
            )
        })
        .collect()
    }

    /// The trait's default writes through create, append and save: visible from the first
    /// append (that is what it documents), whole at the commit, removed by an abort.
    #[tokio::test]
    async fn the_direct_stage_writes_through_create_append_and_save() {
        let store = MemoryStore::new();
        let mut stage = DirectStage::begin(&store, record("d1")).await.unwrap();
        stage.append(&events("d1", 1..=3)).await.unwrap();
        assert!(
            store.load(stage.id()).await.is_ok(),
            "not one step: created at the first append"
        );
        assert!(matches!(
            stage.append(&events("d1", 5..=5)).await,
            Err(StoreError::SeqMismatch { .. })
        ));
        stage.append(&events("d1", 4..=4)).await.unwrap();
        let stored = Box::new(stage).commit().await.unwrap();
        assert_eq!(stored.revision, 2);
        assert_eq!(stored.acpx.event_log.last_seq, 4);
        assert_eq!(store.load(&stored.acpx_record_id).await.unwrap(), stored);

        assert!(matches!(
            DirectStage::begin(&store, record("d1")).await,
            Err(StoreError::AlreadyExists(_))
        ));

        // A log retained from seq 11, then aborted: nothing stays.
        let mut stage = DirectStage::begin(&store, record("d2")).await.unwrap();
        stage.append(&events("d2", 11..=12)).await.unwrap();
        let page = store
            .read_events(stage.id(), &EventQuery::from_seq(0))
            .await
            .unwrap();
        assert_eq!(page.oldest_seq, 11);
        Box::new(stage).abort().await.unwrap();
        let ids: Vec<_> = store
            .list(&ListQuery::default())
            .await
            .unwrap()
            .sessions
            .into_iter()
            .map(|s| s.acpx_record_id.to_string())
            .collect();
        assert_eq!(ids, vec!["d1".to_owned()]);
    }
}
