//! The [`StagedSession`] of the file store: the async side of `core::stage` (where the steps
//! and their crash behaviour are described).

use std::sync::Arc;

use acpx_model::stage::StagedSeqs;
use acpx_model::{
    EventEnvelope, RecordId, SessionLock, SessionRecord, StagedSession, StoreError, StoreResult,
};
use async_trait::async_trait;

use crate::core::{FsCore, PreparedBatch};

/// A session staged in the file store, holding its writer lock. Dropped without a commit or
/// an abort, it removes what it wrote (under the lock, before releasing it); a kill leaves an
/// interrupted delete.
#[derive(Debug)]
pub(crate) struct FsStage {
    core: Arc<FsCore>,
    record: SessionRecord,
    /// `None` once the stage ended (committed, aborted, or handed to a blocking task).
    writer: Option<SessionLock>,
    seqs: StagedSeqs,
}

impl FsStage {
    pub(crate) fn new(core: Arc<FsCore>, record: SessionRecord, writer: SessionLock) -> Self {
        FsStage {
            core,
            record,
            writer: Some(writer),
            seqs: StagedSeqs::default(),
        }
    }

    fn writer(&self) -> StoreResult<&SessionLock> {
        self.writer.as_ref().ok_or_else(|| StoreError::Backend {
            backend: "fs",
            message: format!(
                "the stage of session {} has ended",
                self.record.acpx_record_id
            ),
        })
    }

    /// Runs `f` with the stage's lock on the blocking pool (these calls write and fsync), and
    /// gives the lock back.
    async fn run<T, F>(&mut self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Arc<FsCore>, &SessionLock) -> StoreResult<T> + Send + 'static,
    {
        self.writer()?;
        let writer = self.writer.take();
        let core = self.core.clone();
        let joined = tokio::task::spawn_blocking(move || {
            let result = writer.as_ref().map_or_else(
                || Err(StoreError::InvalidArgument("no writer lock".into())),
                |w| f(&core, w),
            );
            (result, writer)
        })
        .await;
        match joined {
            Ok((result, writer)) => {
                self.writer = writer;
                result
            }
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => Err(StoreError::Backend {
                backend: "fs",
                message: format!("the blocking task was cancelled: {e}"),
            }),
        }
    }
}

impl Drop for FsStage {
    fn drop(&mut self) {
        // Neither committed nor aborted (an error path that forgot, a cancelled future): what
        // was staged goes now, under the lock, as an abort would remove it.
        if let Some(writer) = self.writer.take() {
            if let Err(e) = self.core.abort_stage(&writer) {
                tracing::warn!(session = %writer.id(), error = %e, "could not remove a dropped stage; the next stage or `fsck --repair` removes it");
            }
        }
    }
}

#[async_trait]
impl StagedSession for FsStage {
    fn id(&self) -> &RecordId {
        &self.record.acpx_record_id
    }

    async fn append(&mut self, events: &[EventEnvelope]) -> StoreResult<()> {
        if events.is_empty() {
            return Ok(());
        }
        let id = self.record.acpx_record_id.clone();
        self.seqs.check(&id, events)?;
        let before = self.seqs.before(events);
        let batch = PreparedBatch::new(&id, events);
        self.run(move |core, writer| core.stage_append(writer, batch, before))
            .await?;
        self.seqs.advance(events);
        Ok(())
    }

    async fn commit(mut self: Box<Self>) -> StoreResult<SessionRecord> {
        const REVISION: u64 = 2;
        let committed = async {
            let state = self
                .run(|core, writer| core.stage_log_state(writer))
                .await?;
            let mut record = self.record.clone();
            record.acpx.event_log = state;
            let prepared = self.core.prepare_snapshot(&mut record, REVISION)?;
            self.run(move |core, writer| core.commit_stage(writer, prepared, REVISION))
                .await?;
            record.revision = REVISION;
            Ok(record)
        }
        .await;
        if committed.is_ok() {
            // Committed: releasing the lock is all that is left (nothing to remove).
            self.writer = None;
        }
        // On an error, dropping the stage removes what it wrote.
        committed
    }

    async fn abort(mut self: Box<Self>) -> StoreResult<()> {
        let result = self.run(|core, writer| core.abort_stage(writer)).await;
        // Aborted (or the abort failed: the next stage or `fsck --repair` removes it).
        self.writer = None;
        result
    }
}
