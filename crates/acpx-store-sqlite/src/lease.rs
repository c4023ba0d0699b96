//! The owner leases of the database's sessions: `<db>.locks/<id>.lease`, beside each
//! session's writer lock file (`acpx_lock::lease_file`). A lease is about the processes of
//! one machine, like the lock files, so it lives with them rather than in the database,
//! whose writes it would otherwise add a transaction to every few seconds per owner.

use std::path::PathBuf;
use std::time::Duration;

use acpx_model::{
    LeaseActivity, LeaseGrant, LeaseHolder, OwnerLease, RecordId, SessionLeases, StoreError,
    StoreResult,
};
use async_trait::async_trait;

use crate::{Inner, SqliteStore};

impl Inner {
    pub(crate) fn lease_path(&self, id: &RecordId) -> PathBuf {
        self.locks.dir().join(format!("{id}.lease"))
    }

    /// The lease path, with its directory made when missing (the lock files' directory is
    /// made on the first lock).
    fn lease_path_made(&self, id: &RecordId) -> StoreResult<PathBuf> {
        self.locks
            .make()
            .map_err(|e| StoreError::io(self.locks.dir().display(), e))?;
        Ok(self.lease_path(id))
    }

    /// The fence check of an append under a lock carrying lease `generation`.
    pub(crate) fn check_fence(&self, id: &RecordId, generation: u64) -> StoreResult<()> {
        self.fences.check(&self.lease_path(id), id, generation)
    }
}

#[async_trait]
impl SessionLeases for SqliteStore {
    async fn acquire_lease(
        &self,
        id: &RecordId,
        holder: &LeaseHolder,
        ttl: Duration,
    ) -> StoreResult<LeaseGrant> {
        let (id, holder) = (id.clone(), holder.clone());
        self.run(move |inner| {
            inner
                .leases
                .acquire(&inner.lease_path_made(&id)?, &id, &holder, ttl)
        })
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
        self.run(move |inner| {
            inner.leases.renew(
                &inner.lease_path(&id),
                &id,
                generation,
                &activity,
                queue_depth,
            )
        })
        .await
    }

    async fn release_lease(&self, id: &RecordId, generation: u64) -> StoreResult<bool> {
        let id = id.clone();
        self.run(move |inner| inner.leases.release(&inner.lease_path(&id), generation))
            .await
    }

    async fn read_lease(&self, id: &RecordId) -> StoreResult<Option<OwnerLease>> {
        let id = id.clone();
        self.run(move |inner| inner.leases.read(&inner.lease_path(&id)))
            .await
    }
}
