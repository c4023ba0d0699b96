//! A session's authority, kept in the store that holds the session (`docs/format.md`, § Owner
//! lease): who drives the session now ([`OwnerLease`], through the companion trait
//! [`SessionLeases`] every backend implements), and, in a store several hosts share, the
//! tasks other hosts queue for that owner ([`RemoteTasks`]).
//!
//! A lease has a **generation** that grows by one with every acquisition, and a heartbeat:
//! its holder renews it well within its TTL, and a lease whose heartbeat is older than its
//! TTL (by the store's clock: the database server's for PostgreSQL, so hosts' clocks never
//! disagree about it) has **lapsed**; the next acquirer takes it over. A writer lock can
//! carry the generation of the lease its holder acquired ([`crate::SessionLock::fence`]):
//! every append checks it against the stored lease and refuses a stale one with
//! [`StoreError::Fenced`], so an owner that was taken over never writes again.
//!
//! [`LeaseBook`] is the lease's state machine for one session, shared by the backends that
//! keep the record as a document (memory, files); PostgreSQL does the same in SQL.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{RecordId, StoreError, StoreResult, Timestamp};

/// The heartbeat TTL of a queue owner's lease: a lease not renewed for this long has lapsed
/// and may be taken over. The owner renews it every third of it.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(15);

/// Who holds (or asks for) a lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseHolder {
    /// The host name of the holder's machine.
    pub host: String,
    /// The holder's process id on that host.
    pub pid: u32,
    /// When the holder process started.
    pub started_at: Timestamp,
    /// Where the holder's local clients reach it: its authority directory on `host`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authority: Option<String>,
}

/// What a lease holder is doing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "camelCase")]
pub enum LeaseActivity {
    /// Waiting for a task.
    Idle,
    /// Running a task.
    #[serde(rename_all = "camelCase")]
    Running {
        /// The task's request id (a turn's `requestId` in the log).
        request_id: String,
        /// When it started.
        since: Timestamp,
    },
}

/// A session's owner lease, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnerLease {
    /// The session.
    pub record_id: RecordId,
    /// The holder.
    pub holder: LeaseHolder,
    /// One more than the generation of the lease before it (1 for the first).
    pub generation: u64,
    /// The heartbeat TTL, in milliseconds.
    pub ttl_ms: u64,
    /// When it was acquired.
    pub acquired_at: Timestamp,
    /// The last heartbeat (acquisition counts as one).
    pub heartbeat_at: Timestamp,
    /// `heartbeat_at + ttl`: when it lapses without another heartbeat.
    pub expires_at: Timestamp,
    /// What the holder is doing, as of the last heartbeat.
    pub activity: LeaseActivity,
    /// Tasks waiting behind the running one, as of the last heartbeat.
    pub queue_depth: u32,
    /// Whether `expires_at` had passed when the lease was read (by the store's clock).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub lapsed: bool,
}

/// The answer to [`SessionLeases::acquire_lease`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseGrant {
    /// The caller holds the lease now.
    Granted(OwnerLease),
    /// Another holder's lease is live (neither released nor lapsed).
    Held(OwnerLease),
}

/// The owner leases of a store's sessions. Implemented by every backend
/// ([`crate::Store::leases`]); the conformance suite checks each.
#[async_trait::async_trait]
pub trait SessionLeases: Send + Sync {
    /// Takes the lease of session `id` for `holder` with heartbeat `ttl`, unless another
    /// holder's lease is live. Taking over a lapsed lease, or one released, gives the next
    /// generation. The session need not exist yet (an owner may create it).
    async fn acquire_lease(
        &self,
        id: &RecordId,
        holder: &LeaseHolder,
        ttl: Duration,
    ) -> StoreResult<LeaseGrant>;

    /// Records a heartbeat of the lease of `generation` with what its holder does now.
    /// [`StoreError::Fenced`] when that is no longer the session's lease (taken over or
    /// released): its holder must stop.
    async fn renew_lease(
        &self,
        id: &RecordId,
        generation: u64,
        activity: &LeaseActivity,
        queue_depth: u32,
    ) -> StoreResult<OwnerLease>;

    /// Releases the lease of `generation`; `false` when it was not the session's lease any
    /// more (nothing changes then).
    async fn release_lease(&self, id: &RecordId, generation: u64) -> StoreResult<bool>;

    /// The session's lease, lapsed or not; `None` when none was acquired since the last
    /// release.
    async fn read_lease(&self, id: &RecordId) -> StoreResult<Option<OwnerLease>>;
}

/// The lease record of one session kept as one document (`<id>.lease` of the file-based
/// stores), and the rules every backend applies to it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseBook {
    /// The generation of the last lease acquired (0: never).
    pub generation: u64,
    /// The lease, until released.
    #[serde(default)]
    pub lease: Option<OwnerLease>,
}

fn plus(t: Timestamp, d: Duration) -> Timestamp {
    let ms = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
    Timestamp::from_millis(t.millis().saturating_add(ms)).unwrap_or(t)
}

fn ttl_ms(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX)
}

impl LeaseBook {
    /// The lease as read at `now`, with [`OwnerLease::lapsed`] set.
    pub fn current(&self, now: Timestamp) -> Option<OwnerLease> {
        self.lease.clone().map(|mut l| {
            l.lapsed = l.expires_at.millis() <= now.millis();
            l
        })
    }

    /// [`SessionLeases::acquire_lease`] at `now`.
    pub fn acquire(
        &mut self,
        id: &RecordId,
        holder: &LeaseHolder,
        ttl: Duration,
        now: Timestamp,
    ) -> LeaseGrant {
        self.acquire_unless_held(id, holder, ttl, now, true)
    }

    /// [`LeaseBook::acquire`], where `holder_may_live` is false when the store knows the
    /// current holder is gone whatever its heartbeat says (the lock it held while holding the
    /// lease is free): then the lease is taken over at once.
    pub fn acquire_unless_held(
        &mut self,
        id: &RecordId,
        holder: &LeaseHolder,
        ttl: Duration,
        now: Timestamp,
        holder_may_live: bool,
    ) -> LeaseGrant {
        if let Some(live) = self.current(now).filter(|l| !l.lapsed && holder_may_live) {
            return LeaseGrant::Held(live);
        }
        self.generation += 1;
        let lease = OwnerLease {
            record_id: id.clone(),
            holder: holder.clone(),
            generation: self.generation,
            ttl_ms: ttl_ms(ttl),
            acquired_at: now,
            heartbeat_at: now,
            expires_at: plus(now, ttl),
            activity: LeaseActivity::Idle,
            queue_depth: 0,
            lapsed: false,
        };
        self.lease = Some(lease.clone());
        LeaseGrant::Granted(lease)
    }

    /// [`SessionLeases::renew_lease`] at `now`.
    pub fn renew(
        &mut self,
        id: &RecordId,
        generation: u64,
        activity: &LeaseActivity,
        queue_depth: u32,
        now: Timestamp,
    ) -> StoreResult<OwnerLease> {
        self.check_fence(id, generation)?;
        let Some(lease) = self.lease.as_mut() else {
            return Err(self.fenced(id, generation));
        };
        lease.heartbeat_at = now;
        lease.expires_at = plus(now, Duration::from_millis(lease.ttl_ms));
        lease.activity = activity.clone();
        lease.queue_depth = queue_depth;
        Ok(lease.clone())
    }

    /// [`SessionLeases::release_lease`].
    pub fn release(&mut self, generation: u64) -> bool {
        let ours = self
            .lease
            .as_ref()
            .is_some_and(|l| l.generation == generation);
        if ours {
            self.lease = None;
        }
        ours
    }

    /// `Ok` when the lease of `generation` is the session's lease now (lapsed or not:
    /// nobody took it over), else [`StoreError::Fenced`]. Every append of a writer whose lock
    /// carries a fence checks this.
    pub fn check_fence(&self, id: &RecordId, generation: u64) -> StoreResult<()> {
        match &self.lease {
            Some(l) if l.generation == generation => Ok(()),
            _ => Err(self.fenced(id, generation)),
        }
    }

    fn fenced(&self, id: &RecordId, generation: u64) -> StoreError {
        StoreError::Fenced {
            id: id.clone(),
            generation,
            current: self.lease.as_ref().map(|l| l.generation),
        }
    }
}

/// A task another host queued for a session's owner ([`RemoteTasks`]).
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteTask {
    /// The store's id of the task.
    pub task_id: u64,
    /// The owner protocol request, as JSON.
    pub request: Value,
    /// The submitting host.
    pub from_host: String,
}

/// What [`RemoteTasks::task_answers`] found.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TaskAnswers {
    /// The answer lines after the ones asked to skip, in order.
    pub lines: Vec<Value>,
    /// Whether an owner has taken the task.
    pub claimed: bool,
    /// Whether the task exists (it was not withdrawn).
    pub exists: bool,
}

/// The task queue of a store several hosts share (PostgreSQL): a command on one host hands
/// a task (an owner protocol request) to the session's owner on another host, and reads its
/// answer lines; the turn's events it reads from the session's log. Stores used by one host
/// only have none ([`crate::Store::remote_tasks`]): their owners are reached through a local
/// socket.
#[async_trait::async_trait]
pub trait RemoteTasks: Send + Sync {
    /// Queues `request` for the owner of session `id` and wakes it; returns the task's id.
    async fn submit_task(
        &self,
        id: &RecordId,
        request: &Value,
        from_host: &str,
    ) -> StoreResult<u64>;

    /// Takes every task queued for session `id`, oldest first, for the holder of the lease of
    /// `generation` ([`StoreError::Fenced`] when that is not the session's lease).
    async fn claim_tasks(&self, id: &RecordId, generation: u64) -> StoreResult<Vec<RemoteTask>>;

    /// Adds one answer line to task `task_id` and wakes its submitter.
    async fn answer_task(&self, task_id: u64, line: &Value) -> StoreResult<()>;

    /// The answer lines of task `task_id` after the first `skip`.
    async fn task_answers(&self, task_id: u64, skip: usize) -> StoreResult<TaskAnswers>;

    /// Withdraws a task no owner took yet; `false` when an owner had taken it (it runs).
    async fn withdraw_task(&self, task_id: u64) -> StoreResult<bool>;

    /// Deletes task `task_id` and its answers (its submitter read the final one).
    async fn forget_task(&self, task_id: u64) -> StoreResult<()>;

    /// The leases held now (lapsed or not), of every session: what a command that must
    /// reach every owner of the store (migrate, `fsck --repair`) asks.
    async fn held_leases(&self) -> StoreResult<Vec<OwnerLease>>;

    /// Returns when a task may be queued for session `id`, or after `timeout`.
    async fn wait_for_tasks(&self, id: &RecordId, timeout: Duration) -> StoreResult<()>;

    /// Returns when task `task_id` may have more than `skip` answer lines (or is gone), or
    /// after `timeout`.
    async fn wait_for_answers(
        &self,
        task_id: u64,
        skip: usize,
        timeout: Duration,
    ) -> StoreResult<()>;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(pid: u32) -> LeaseHolder {
        LeaseHolder {
            host: "h".into(),
            pid,
            started_at: Timestamp::from_millis(1).unwrap(),
            authority: None,
        }
    }

    fn at(ms: i64) -> Timestamp {
        Timestamp::from_millis(ms).unwrap()
    }

    #[test]
    fn a_live_lease_is_held_a_lapsed_one_taken_over_and_fenced() {
        let id = RecordId::parse("s").unwrap();
        let ttl = Duration::from_secs(10);
        let mut book = LeaseBook::default();
        let LeaseGrant::Granted(first) = book.acquire(&id, &holder(1), ttl, at(1_000)) else {
            panic!("first acquire")
        };
        assert_eq!(first.generation, 1);
        assert!(matches!(
            book.acquire(&id, &holder(2), ttl, at(10_999)),
            LeaseGrant::Held(l) if l.holder.pid == 1
        ));
        let LeaseGrant::Granted(second) = book.acquire(&id, &holder(2), ttl, at(11_000)) else {
            panic!("takeover")
        };
        assert_eq!(second.generation, 2);
        let err = book
            .renew(&id, 1, &LeaseActivity::Idle, 0, at(11_001))
            .unwrap_err();
        assert!(matches!(
            err,
            StoreError::Fenced {
                generation: 1,
                current: Some(2),
                ..
            }
        ));
        assert!(book.check_fence(&id, 2).is_ok());
        assert!(!book.release(1));
        assert!(book.release(2));
        assert!(book.check_fence(&id, 2).is_err());
        let LeaseGrant::Granted(third) = book.acquire(&id, &holder(3), ttl, at(11_002)) else {
            panic!("after release")
        };
        assert_eq!(third.generation, 3);
    }
}
