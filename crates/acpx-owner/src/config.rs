//! What an owner is started with ([`OwnerConfig`]) and the defaults of its limits.

use std::path::PathBuf;
use std::time::Duration;

use acpx_model::RecordId;

/// The idle time-to-live when none is configured.
pub const DEFAULT_TTL: Duration = Duration::from_secs(300);
/// The most tasks queued behind the running one when none is configured.
pub const DEFAULT_QUEUE_MAX_DEPTH: usize = 16;

/// What an owner serves.
#[derive(Debug, Clone)]
pub struct OwnerConfig {
    /// The store's authority directory ([`crate::authority`]): the lease and the socket
    /// live under `<authority>/owners/`.
    pub authority: PathBuf,
    /// A path whose disappearance ends the owner (the data home): removing a home does not
    /// leave its owners running until their TTL.
    pub home: PathBuf,
    /// The session.
    pub record_id: RecordId,
    /// Exit after this long without a task; `None` keeps the owner until the session is
    /// closed.
    pub ttl: Option<Duration>,
    /// The most tasks waiting behind the running one; more are refused (overloaded).
    pub queue_max_depth: usize,
}
