//! How far an operation over many sessions has come (`migrate`, `fsck`, `sessions prune`):
//! the operation says how many sessions it will go through and each one it finished; a caller
//! draws it (the `acpx` command draws a bar on a terminal) or ignores it ([`NoProgress`]).

/// Told how an operation over many sessions advances.
pub trait Progress: Send + Sync {
    /// The operation will go through `total` sessions.
    fn begin(&self, total: u64);
    /// One more session is taken (`id`: its record id, or where it is stored).
    fn advance(&self, id: &str);
}

/// Progress nobody looks at.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProgress;

impl Progress for NoProgress {
    fn begin(&self, _total: u64) {}
    fn advance(&self, _id: &str) {}
}
