//! [`Store::stage_session`]'s default ([`DirectStage`]), for a store that has no staging of
//! its own: the session written through `create`, `append` and `save` (see
//! [`crate::stage`] for what a stage is and how each backend makes it one step).

use async_trait::async_trait;

use super::{Durability, NewSessionData, SessionLock, Store};
use crate::error::{StoreError, StoreResult};
use crate::event::EventEnvelope;
use crate::id::RecordId;
use crate::session::SessionRecord;
use crate::stage::{StagedSeqs, StagedSession, STAGE_LOCK_TIMEOUT};

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
