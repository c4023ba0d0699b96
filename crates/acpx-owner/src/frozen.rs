//! A frozen local owner (`kill -STOP`, a hang): it holds its locks and the kernel accepts
//! connections for it, but it answers nothing and renews nothing. Once its lease in the store
//! has expired (no heartbeat for a whole TTL) it is ended like a dead one, so the next owner
//! can start (issue 45, item 3). An owner that is merely slow still renews its lease, and is
//! left alone.

use std::time::Duration;

use acpx_model::{RecordId, Store, Timestamp};

use super::host::host_name;
use super::lease::{self, LeasePaths};
use super::store_lease::lease_ttl;

/// How long after the lease's expiry a client still waits for it to be renewed (clock skew
/// between the owner's heartbeat and this reading).
const EXPIRY_MARGIN: Duration = Duration::from_millis(500);

/// Ends the local owner of `id` if it is frozen: its lease in `store` is held by the same
/// process (host and pid of its lease file) and expired, waiting up to one lease TTL for that
/// to happen. The owner gets SIGKILL (a stopped process dies of it), and this waits up to 5 s
/// for its lock to be free; the agent it ran is stopped by the next owner
/// ([`lease::stale_agent`]). Returns whether a frozen owner was ended.
pub(super) async fn end_frozen_owner(
    store: &dyn Store,
    authority: &std::path::Path,
    id: &RecordId,
) -> bool {
    let paths = LeasePaths::new(authority, id);
    let Some(local) = lease::read(&paths) else {
        return false;
    };
    let here = host_name();
    let give_up = tokio::time::Instant::now() + lease_ttl() + EXPIRY_MARGIN;
    loop {
        let Ok(Some(held)) = store.leases().read_lease(id).await else {
            return false;
        };
        if held.holder.host != here || held.holder.pid != local.pid {
            // Another owner's lease (or another host's): not the process that is frozen here.
            return false;
        }
        let margin = EXPIRY_MARGIN.as_millis() as i64;
        let now = Timestamp::now().millis();
        let expires = held.expires_at.millis();
        if now >= expires.saturating_add(margin) {
            break;
        }
        if tokio::time::Instant::now() >= give_up {
            return false;
        }
        let wait = (expires + margin - now).clamp(50, 1_000) as u64;
        tokio::time::sleep(Duration::from_millis(wait)).await;
    }
    tracing::warn!(
        "the queue owner of {id} (pid {}) stopped renewing its lease and answers nothing: ending it",
        local.pid
    );
    // SAFETY: kill(2) on the pid the owner's own lease file names, whose store lease (same host,
    // same pid) stopped being renewed; its lock is still held, so the process is that owner.
    unsafe {
        libc::kill(local.pid as libc::pid_t, libc::SIGKILL);
    }
    for _ in 0..200 {
        if !lease::is_alive(&paths) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    false
}

/// Whether the local owner of `id` is frozen now (no waiting): its lease in `store` is held
/// by the process its lease file names, on this host, and expired more than a margin ago.
/// What a client following a turn checks whenever the owner has been silent a while: a live
/// owner renews its lease every third of its TTL, whatever its agent does.
pub(super) async fn frozen_now(
    store: &dyn Store,
    authority: &std::path::Path,
    id: &RecordId,
) -> bool {
    let paths = LeasePaths::new(authority, id);
    let Some(local) = lease::read(&paths) else {
        return false;
    };
    let Ok(Some(held)) = store.leases().read_lease(id).await else {
        return false;
    };
    held.holder.host == host_name()
        && held.holder.pid == local.pid
        && Timestamp::now().millis()
            >= held
                .expires_at
                .millis()
                .saturating_add(EXPIRY_MARGIN.as_millis() as i64)
}
