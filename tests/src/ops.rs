//! Write loops shared by the worker binary and the in-process concurrency checks, so that a
//! check in one process and a worker in another exercise exactly the same client logic.

use std::time::Duration;

use acpx_model::{
    Durability, EventEnvelope, EventLogState, RecordId, Store, StoreError, StoreResult,
};
use async_trait::async_trait;
use serde_json::json;

use crate::fixtures::tagged_event;

/// How long a writer waits for a session's lock before giving up. Long, because a check
/// runs several writers against one session on a slow machine; it only bounds a hang.
pub const LOCK_WAIT: Duration = Duration::from_secs(60);

/// One append the way a short-lived writer does it: take the session's writer lock (appends
/// require it), append, release. Checks that are about the log rather than the lock use this,
/// so each reads as one call.
#[async_trait]
pub trait AppendLocked {
    /// Locks `id` (waiting up to [`LOCK_WAIT`]), appends `events`, and releases the lock.
    async fn append_locked(
        &self,
        id: &RecordId,
        events: &[EventEnvelope],
        durability: Durability,
    ) -> StoreResult<EventLogState>;
}

#[async_trait]
impl<T: Store + ?Sized> AppendLocked for T {
    async fn append_locked(
        &self,
        id: &RecordId,
        events: &[EventEnvelope],
        durability: Durability,
    ) -> StoreResult<EventLogState> {
        let writer = self.lock(id, LOCK_WAIT).await?;
        self.append(&writer, events, durability).await
    }
}

/// How concurrent appenders agree on the next seq.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppendMode {
    /// Hold the session's writer lock around "read the last seq, append".
    Lock,
    /// Read the last seq without the lock, then take it only around the append; on
    /// `SeqMismatch` (another writer got in between), retry after the seq the store reported.
    Retry,
}

impl std::str::FromStr for AppendMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "lock" => Ok(AppendMode::Lock),
            "retry" => Ok(AppendMode::Retry),
            other => Err(format!("--mode {other:?}: expected lock or retry")),
        }
    }
}

/// What [`append_tagged`] writes.
#[derive(Debug, Clone, Copy)]
pub struct AppendPlan<'a> {
    /// The writer's tag, stored in every event.
    pub tag: &'a str,
    /// How many events in total.
    pub count: u64,
    /// Events per `append` call.
    pub batch: u64,
    /// How concurrent writers agree on the next seq.
    pub mode: AppendMode,
    /// The durability of every append.
    pub durability: Durability,
}

/// Appends `plan.count` [`tagged_event`]s (`n` = 0..count) to `id` in batches, continuing
/// whatever seq the session has. Calls `ack(last_seq_of_batch)` after each acknowledged batch.
pub async fn append_tagged(
    store: &dyn Store,
    id: &RecordId,
    plan: &AppendPlan<'_>,
    mut ack: impl FnMut(u64),
) -> StoreResult<()> {
    let AppendPlan {
        tag,
        count,
        batch,
        mode,
        durability,
    } = *plan;
    let batch = batch.max(1);
    let mut n = 0;
    while n < count {
        let size = batch.min(count - n);
        let make = |last: u64| -> Vec<_> {
            (0..size)
                .map(|k| tagged_event(id, last + 1 + k, tag, n + k))
                .collect()
        };
        let state = match mode {
            AppendMode::Lock => {
                let writer = store.lock(id, LOCK_WAIT).await?;
                let last = store.event_log_state(id).await?.last_seq;
                store.append(&writer, &make(last), durability).await?
            }
            AppendMode::Retry => {
                let mut last = store.event_log_state(id).await?.last_seq;
                let mut attempts = 0u32;
                loop {
                    match store.append_locked(id, &make(last), durability).await {
                        Ok(state) => break state,
                        Err(StoreError::SeqMismatch { last: now, .. }) if attempts < 100_000 => {
                            attempts += 1;
                            last = now;
                        }
                        Err(e) => return Err(e),
                    }
                }
            }
        };
        ack(state.last_seq);
        n += size;
    }
    Ok(())
}

/// Runs `count` load-modify-save cycles on `id`, retrying on `Conflict`. Each save writes
/// `workerTag` = `tag` and `workerCounter` = the revision the save produces, so a reader can
/// tell that a snapshot is whole. Calls `ack(revision)` after each acknowledged save.
pub async fn save_loop(
    store: &dyn Store,
    id: &RecordId,
    tag: &str,
    count: u64,
    mut ack: impl FnMut(u64),
) -> StoreResult<()> {
    for _ in 0..count {
        let mut attempts = 0u32;
        loop {
            let mut r = store.load(id).await?;
            r.extra.insert("workerTag".into(), json!(tag));
            r.extra
                .insert("workerCounter".into(), json!(r.revision + 1));
            match store.save(&mut r).await {
                Ok(()) => {
                    ack(r.revision);
                    break;
                }
                Err(StoreError::Conflict { .. }) if attempts < 100_000 => attempts += 1,
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}
