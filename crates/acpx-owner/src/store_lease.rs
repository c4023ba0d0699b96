//! The owner's lease in the store that holds its session (`acpx_model::lease`,
//! docs/format.md § Owner lease): acquired when the owner starts, renewed with what it does
//! (idle, or the task it runs, and how many wait) every third of its TTL, and in a store
//! several hosts share whenever that changes, released when it stops. Every writer lock the owner takes carries the lease's
//! generation ([`acpx_runtime::Runtime::with_fence`]), so once another owner took the lease over
//! (this one frozen, or cut off from the database past its TTL) none of its appends lands;
//! and a heartbeat refused as fenced, or none getting through for a whole TTL, stops it.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use acpx_model::{
    LeaseActivity, LeaseGrant, LeaseHolder, OwnerLease, RecordId, Store, StoreError, Timestamp,
    DEFAULT_LEASE_TTL,
};

use super::exit::OwnerExit;
pub use super::host::host_name;
use super::mutex::locked;
use super::shared::Shared;

/// The lease's TTL: [`DEFAULT_LEASE_TTL`], or `ACPX_LEASE_TTL_MS` (milliseconds, 500 to
/// 600,000), which the tests of a host's death set short.
pub fn lease_ttl() -> Duration {
    std::env::var("ACPX_LEASE_TTL_MS")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|ms| (500..=600_000).contains(ms))
        .map_or(DEFAULT_LEASE_TTL, Duration::from_millis)
}

/// A lease this owner holds.
#[derive(Debug)]
pub(super) struct HeldLease {
    store: Arc<dyn Store>,
    id: RecordId,
    /// The generation every append of the owner is fenced by.
    pub(super) generation: u64,
    ttl: Duration,
}

/// Takes the session's lease for this process: `Ok(Err(lease))` when another owner's is
/// live.
pub(super) async fn acquire(
    store: &Arc<dyn Store>,
    id: &RecordId,
    authority: &Path,
    started_at: Timestamp,
) -> Result<Result<HeldLease, OwnerLease>, StoreError> {
    let holder = LeaseHolder {
        host: host_name(),
        pid: std::process::id(),
        started_at,
        authority: Some(authority.display().to_string()),
    };
    let ttl = lease_ttl();
    Ok(
        match store.leases().acquire_lease(id, &holder, ttl).await? {
            LeaseGrant::Granted(l) => Ok(HeldLease {
                store: store.clone(),
                id: id.clone(),
                generation: l.generation,
                ttl,
            }),
            LeaseGrant::Held(l) => Err(l),
        },
    )
}

impl HeldLease {
    /// Releases the lease (best effort: a lease left behind lapses after its TTL).
    pub(super) async fn release(&self) {
        let released = tokio::time::timeout(
            self.ttl,
            self.store.leases().release_lease(&self.id, self.generation),
        )
        .await;
        if let Ok(Err(e)) = released {
            tracing::warn!("cannot release the owner lease of session {}: {e}", self.id);
        }
    }
}

/// What the owner does now, for the lease.
fn activity(shared: &Shared) -> (LeaseActivity, u32) {
    let activity = match locked(&shared.task).clone() {
        Some((request_id, since)) => LeaseActivity::Running { request_id, since },
        None => LeaseActivity::Idle,
    };
    let depth = u32::try_from(shared.depth.load(Ordering::SeqCst)).unwrap_or(u32::MAX);
    (activity, depth)
}

/// Renews the lease until the owner stops; stops the owner when the lease is lost.
pub(super) async fn keep(shared: Arc<Shared>, lease: Arc<HeldLease>) {
    let mut last_ok = Instant::now();
    let mut last_sent: Option<(LeaseActivity, u32)> = None;
    // Other hosts learn what the owner does from its lease alone: a store they share gets
    // each change at once. A store of one host is asked over the owner's socket (`status`),
    // so the heartbeat carries the activity there, without a write per task.
    let shared_store = lease.store.remote_tasks().is_some();
    loop {
        let now = activity(&shared);
        let due = last_ok.elapsed() >= lease.ttl / 3;
        if due || (shared_store && last_sent.as_ref() != Some(&now)) {
            let renewed = tokio::time::timeout(
                lease.ttl / 3,
                lease
                    .store
                    .leases()
                    .renew_lease(&lease.id, lease.generation, &now.0, now.1),
            )
            .await;
            match renewed {
                Ok(Ok(_)) => {
                    last_ok = Instant::now();
                    last_sent = Some(now);
                }
                Ok(Err(e @ StoreError::Fenced { .. })) => {
                    tracing::warn!("stopping: {e}");
                    shared.stop(OwnerExit::TakenOver);
                    return;
                }
                Ok(Err(e)) => tracing::warn!("cannot renew the owner lease: {e}"),
                Err(_) => tracing::warn!("renewing the owner lease timed out"),
            }
            if last_ok.elapsed() >= lease.ttl {
                tracing::warn!(
                    "stopping: the owner lease could not be renewed for {} s, its TTL",
                    lease.ttl.as_secs()
                );
                shared.stop(OwnerExit::TakenOver);
                return;
            }
        }
        tokio::select! {
            _ = shared.activity_changed.notified() => {}
            _ = tokio::time::sleep(lease.ttl / 6) => {}
        }
    }
}
