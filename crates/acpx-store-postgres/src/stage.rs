//! [`acpx_model::Store::stage_session`] for PostgreSQL: the whole session written in one
//! transaction, on a connection the stage keeps to itself (`docs/format.md` § Importing a
//! session: staged, then committed).
//!
//! - **begin**: the session's writer lock (its advisory lock, on a connection of its own, as
//!   [`acpx_model::Store::lock`] takes it); a taken id is refused; a pooled connection is taken
//!   out for the stage and `BEGIN` starts its transaction.
//! - **append**: the first batch inserts the session's row (revision 1) and its `event_logs`
//!   row (the log continuing after the seq below the first event) in that transaction; every
//!   batch goes through `acpx_append_fenced` there (the lock, seq and retention rules of every
//!   append). Other connections see none of it (they read committed rows only); a `create`
//!   of the id elsewhere waits for the writer lock.
//! - **commit**: the snapshot with the log's state (read in the transaction) replaces the row
//!   (revision 2, its messages indexed), and `COMMIT` (with `synchronous_commit` on: the
//!   server's write-ahead log is on disk) makes all of it visible at once.
//! - **abort**: `ROLLBACK`, and the connection goes back to the pool.
//!
//! A kill of the process, or of its host or network, ends the connection, and the server rolls
//! the transaction back: nothing is left anywhere, so there are no stale stages. A stage
//! dropped without a commit or an abort closes its connection instead of handing it back to
//! the pool in the middle of a transaction.

use acpx_model::stage::StagedSeqs;
use acpx_model::{
    EventEnvelope, RecordId, SessionLock, SessionRecord, StagedSession, StoreError, StoreResult,
};
use async_trait::async_trait;
use deadpool_postgres::Object;

use crate::rows::{message_rows, EventArrays};
use crate::PostgresStore;

/// A session staged in PostgreSQL: its writer lock and the connection of its transaction.
pub(crate) struct PostgresStage {
    store: PostgresStore,
    record: SessionRecord,
    writer: Option<SessionLock>,
    /// In a transaction (`BEGIN` sent) while `Some`.
    conn: Option<Object>,
    /// Whether the session's row is inserted (at the first append, or at the commit).
    inserted: bool,
    seqs: StagedSeqs,
}

impl std::fmt::Debug for PostgresStage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStage")
            .field("id", &self.record.acpx_record_id)
            .field("inserted", &self.inserted)
            .field("seqs", &self.seqs)
            .finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// [`acpx_model::Store::stage_session`].
    pub(crate) async fn begin_stage(
        &self,
        mut record: SessionRecord,
    ) -> StoreResult<PostgresStage> {
        let id = record.acpx_record_id.clone();
        record.validate(&self.inner.row_location(id.as_str()))?;
        record.revision = 0;
        let writer =
            acpx_model::Store::lock(self, &id, acpx_model::stage::STAGE_LOCK_TIMEOUT).await?;
        if self.inner.exists(&id).await? {
            return Err(StoreError::AlreadyExists(id));
        }
        let conn = self.inner.conn().await?;
        conn.batch_execute("BEGIN")
            .await
            .map_err(self.inner.pg("begin a staged session"))?;
        Ok(PostgresStage {
            store: self.clone(),
            record,
            writer: Some(writer),
            conn: Some(conn),
            inserted: false,
            seqs: StagedSeqs::default(),
        })
    }
}

impl PostgresStage {
    fn conn(&self) -> StoreResult<&Object> {
        self.conn.as_ref().ok_or_else(|| StoreError::Backend {
            backend: crate::BACKEND,
            message: format!(
                "the stage of session {} has ended",
                self.record.acpx_record_id
            ),
        })
    }

    /// Inserts the session's row (revision 1) with its log continuing after `log_after`.
    async fn insert(&mut self, log_after: u64) -> StoreResult<()> {
        if self.inserted {
            return Ok(());
        }
        let mut record = self.record.clone();
        record.revision = 1;
        let cols = crate::rows::session_columns(&record)?;
        let inner = &self.store.inner;
        let conn = self.conn()?;
        inner
            .insert_row(conn, &record.acpx_record_id, &cols, &[], log_after)
            .await?;
        self.inserted = true;
        Ok(())
    }

    /// Ends the transaction with `ROLLBACK` and hands the connection back to the pool; one
    /// that does not take the `ROLLBACK` is closed instead (the server rolls back).
    async fn roll_back(&mut self) -> StoreResult<()> {
        let Some(conn) = self.conn.take() else {
            return Ok(());
        };
        match conn.batch_execute("ROLLBACK").await {
            Ok(()) => Ok(()),
            Err(e) => {
                drop(Object::take(conn));
                Err(self.store.inner.pg("roll a staged session back")(e))
            }
        }
    }
}

impl Drop for PostgresStage {
    fn drop(&mut self) {
        // Never back to the pool inside a transaction: closing the connection makes the
        // server roll it back.
        if let Some(conn) = self.conn.take() {
            drop(Object::take(conn));
        }
    }
}

#[async_trait]
impl StagedSession for PostgresStage {
    fn id(&self) -> &RecordId {
        &self.record.acpx_record_id
    }

    async fn append(&mut self, events: &[EventEnvelope]) -> StoreResult<()> {
        if events.is_empty() {
            return Ok(());
        }
        let id = self.record.acpx_record_id.clone();
        self.seqs.check(&id, events)?;
        let columns = EventArrays::new(events)?;
        self.insert(self.seqs.before(events)).await?;
        let conn = self.conn()?;
        // Synchronous: `fsync` false would switch the whole transaction's commit to
        // asynchronous.
        self.store
            .inner
            .append_rows(conn, &id, events, columns, true, None)
            .await?;
        self.seqs.advance(events);
        Ok(())
    }

    async fn commit(mut self: Box<Self>) -> StoreResult<SessionRecord> {
        let ctx = "commit a staged session";
        let committed = async {
            self.insert(0).await?;
            let id = self.record.acpx_record_id.clone();
            let inner = &self.store.inner;
            let conn = self.conn()?;
            let mut record = self.record.clone();
            record.acpx.event_log = inner.event_log_state_on(conn, &id).await?;
            record.revision = 2;
            let cols = crate::rows::session_columns(&record)?;
            let msgs = message_rows(&record)?;
            inner.update_row(conn, &id, 1, &cols, &msgs).await?;
            conn.batch_execute("SET LOCAL synchronous_commit = on; COMMIT")
                .await
                .map_err(inner.pg(ctx))?;
            Ok(record)
        }
        .await;
        match committed {
            Ok(record) => {
                // Committed: the connection goes back to the pool, then the lock.
                self.conn = None;
                self.writer = None;
                Ok(record)
            }
            Err(e) => {
                if let Err(rollback) = self.roll_back().await {
                    tracing::debug!(error = %rollback, "rolling a failed commit back");
                }
                Err(e)
            }
        }
    }

    async fn abort(mut self: Box<Self>) -> StoreResult<()> {
        let result = self.roll_back().await;
        self.writer = None;
        result
    }
}
