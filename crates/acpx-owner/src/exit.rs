//! Why an owner stopped ([`OwnerExit`]): what [`crate::run_owner`] returns, and what the
//! tasks that stop it (a signal, `close`, `release`, the lease keeper, the worker) say.

/// Why an owner stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OwnerExit {
    /// Another owner holds the lease; this one did nothing.
    AlreadyRunning,
    /// Idle for the TTL.
    Idle,
    /// The session was closed.
    Closed,
    /// A client asked it to stop (`release`).
    Released,
    /// SIGTERM, SIGINT or SIGHUP.
    Signalled,
    /// Its lease file or its data home disappeared (removed under it).
    LeaseGone,
    /// The agent could not be started; the tasks were answered with the error.
    OpenFailed(String),
    /// Another owner's lease of the session (in the store, maybe on another host) is live;
    /// this one did nothing.
    HeldElsewhere(Box<acpx_model::OwnerLease>),
    /// Its lease in the store was taken over by another owner, or could not be renewed for
    /// its whole TTL: it stopped at once (none of its later appends could land anyway).
    TakenOver,
}

impl OwnerExit {
    /// Why the owner stopped, for people (its log line).
    pub fn describe(&self) -> String {
        match self {
            OwnerExit::AlreadyRunning => "another owner already serves the session".into(),
            OwnerExit::Idle => "idle for its ttl".into(),
            OwnerExit::Closed => "the session was closed".into(),
            OwnerExit::Released => "released by a client".into(),
            OwnerExit::Signalled => "stopped by a signal".into(),
            OwnerExit::LeaseGone => "its lease file or data home was removed".into(),
            OwnerExit::OpenFailed(why) => format!("the agent could not be started: {why}"),
            OwnerExit::HeldElsewhere(l) => format!(
                "the owner on host {} (pid {}) holds the session",
                l.holder.host, l.holder.pid
            ),
            OwnerExit::TakenOver => "its lease was taken over by another owner".into(),
        }
    }
}
