//! The state an owner's tasks share ([`Shared`]): the accept loop, the connections, the
//! worker, the lease keeper and the remote inbox each hold it, and it says what the owner is
//! doing (its status) and why it stops.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use acpx_model::Timestamp;
use tokio::sync::{mpsc, Notify};

use acpx_runtime::session::{CancelHandle, QueueLog};

use super::arrival::Arrivals;
use super::config::OwnerConfig;
use super::exit::OwnerExit;
use super::host::host_name;
use super::job::Job;
use super::lease::{self, Lease, LeasePaths};
use super::mutex::locked;
use super::outgoing::ReplyTx;
use super::protocol::{OwnerStatus, TaskOptions, WireError};

/// See the module docs.
pub(super) struct Shared {
    pub(super) paths: LeasePaths,
    pub(super) config: OwnerConfig,
    pub(super) started: Instant,
    pub(super) started_at: Timestamp,
    pub(super) generation: u64,
    /// Tasks waiting behind the running one.
    pub(super) depth: AtomicUsize,
    pub(super) accepting: AtomicBool,
    pub(super) stopping: Notify,
    pub(super) stop_reason: Mutex<Option<OwnerExit>>,
    pub(super) current: Mutex<Option<(String, CancelHandle)>>,
    /// The task the worker is on, from the moment it takes it (before its agent is started
    /// or attached) to its end: its request id and when it was taken. What makes the owner
    /// busy for [`Request::ReleaseIdle`](crate::protocol::Request::ReleaseIdle).
    pub(super) task: Mutex<Option<(String, Timestamp)>>,
    /// The idle time-to-live: the owner's config's, until a task brings another
    /// ([`TaskOptions::ttl_seconds`]).
    pub(super) ttl: Mutex<Option<Duration>>,
    /// The agent's pid and start time (`/proc` ticks) while the owner has one attached.
    pub(super) agent_pid: Mutex<Option<(u32, Option<u64>)>>,
    pub(super) queue_log: Mutex<Option<QueueLog>>,
    pub(super) jobs: mpsc::UnboundedSender<Job>,
    /// Connections still being served (their last lines may not be written yet), in the
    /// limit and in the reserve.
    pub(super) connections: AtomicUsize,
    /// The most connections served at once for any request ([`max_connections`](crate::connections::max_connections)).
    pub(super) max_connections: usize,
    /// Connections served within that limit, and beyond it in the `CONTROL_RESERVE` (`connections`).
    pub(super) in_limit: AtomicUsize,
    pub(super) in_reserve: AtomicUsize,
    /// Refused connections still open while their request is drained (`REFUSING_MAX`).
    pub(super) refusing: AtomicUsize,
    /// Connections refused for the limit, and when the log last said so.
    pub(super) refused: AtomicU64,
    pub(super) refusal_logged: Mutex<Option<Instant>>,
    /// Connections sending a reply in parts right now ([`write_reply`](crate::reply_parts::write_reply)): the idle exit waits
    /// for them (each bounded by `reply_stall` (`server`)), and for no other connection, so a client
    /// that stopped reading its events cannot keep the owner past its TTL.
    pub(super) replying: Arc<AtomicUsize>,
    /// Woken when the task the worker is on changes, so the store lease says so at once.
    pub(super) activity_changed: Notify,
    /// The "client gone" flags of the prompts not started yet (queued, or taken while their
    /// agent starts or attaches), by request id, for `withdraw` and `cancel`.
    pub(super) queued: Mutex<std::collections::HashMap<String, Arc<AtomicBool>>>,
    /// The prompt the worker took and whose agent is starting or attaching (no turn yet):
    /// its request id and its client's reply channel, so `cancel` can withdraw it and tell
    /// its client at once rather than after the agent is up.
    pub(super) starting: Mutex<Option<(String, ReplyTx)>>,
    /// The arrival numbers of connections and tasks (`arrival`).
    pub(super) arrivals: Arc<Arrivals>,
    /// Connections that could not be accepted, and the last error.
    pub(super) accept_errors: AtomicU64,
    pub(super) accept_error: Mutex<Option<String>>,
}

impl Shared {
    pub(super) fn stop(&self, why: OwnerExit) {
        self.accepting.store(false, Ordering::SeqCst);
        locked(&self.stop_reason).get_or_insert(why);
        if let Some((_, c)) = locked(&self.current).as_ref() {
            c.cancel();
        }
        self.stopping.notify_one();
    }

    pub(super) fn status(&self) -> OwnerStatus {
        // An agent killed while the owner is idle is noticed by the next task, which attaches
        // a new one; until then say so rather than show the dead process as the agent.
        let agent = *locked(&self.agent_pid);
        let agent_exited = agent.is_some_and(|(pid, ticks)| !lease::process_running(pid, ticks));
        OwnerStatus {
            pid: std::process::id(),
            started_at: self.started_at,
            uptime_seconds: self.started.elapsed().as_secs(),
            agent_pid: agent.filter(|_| !agent_exited).map(|(pid, _)| pid),
            agent_exited,
            queue_depth: self.depth.load(Ordering::SeqCst),
            running: locked(&self.current).as_ref().map(|(r, _)| r.clone()),
            starting: locked(&self.starting).as_ref().map(|(r, _)| r.clone()),
            running_since: locked(&self.task).as_ref().map(|(_, since)| *since),
            generation: self.generation,
            ttl_seconds: self.ttl().map_or(0, |t| t.as_secs()),
            accept_errors: self.accept_errors.load(Ordering::SeqCst),
            last_accept_error: locked(&self.accept_error).clone(),
            connections: self.connections.load(Ordering::SeqCst),
            max_connections: self.max_connections,
            refused_connections: self.refused.load(Ordering::SeqCst),
        }
    }

    /// Ends the prompt `request_id`'s time as withdrawable (it starts now, or is dropped):
    /// whether it was withdrawn. Under the same lock as [`Shared::withdraw`], so a withdrawal
    /// either lands before this (and the prompt is dropped) or finds nothing to withdraw.
    pub(super) fn take_withdrawn(&self, request_id: &str) -> bool {
        locked(&self.queued)
            .remove(request_id)
            .is_some_and(|gone| gone.load(Ordering::SeqCst))
    }

    /// Whether the prompt `request_id` was withdrawn (it stays withdrawable).
    pub(super) fn withdrawn(&self, request_id: &str) -> bool {
        locked(&self.queued)
            .get(request_id)
            .is_some_and(|gone| gone.load(Ordering::SeqCst))
    }

    /// Withdraws the prompt `request_id` if it has not started: whether it was still
    /// withdrawable.
    pub(super) fn withdraw(&self, request_id: &str) -> bool {
        locked(&self.queued).get(request_id).is_some_and(|gone| {
            gone.store(true, Ordering::SeqCst);
            true
        })
    }

    /// The idle time-to-live now (`None`: until the session is closed).
    pub(super) fn ttl(&self) -> Option<Duration> {
        *locked(&self.ttl)
    }

    /// Takes the time-to-live a task brought, if any.
    pub(super) fn take_ttl(&self, options: &TaskOptions) {
        if let Some(secs) = options.ttl_seconds {
            *locked(&self.ttl) = (secs > 0).then(|| Duration::from_secs(secs));
        }
    }

    /// Why the owner cannot let go of its session at once: the task it is on (with how long
    /// it has run) and how many wait; `None` when idle.
    pub(super) fn busy(&self) -> Option<WireError> {
        let task = locked(&self.task).clone();
        let waiting = self.depth.load(Ordering::SeqCst);
        if task.is_none() && waiting == 0 {
            return None;
        }
        let id = &self.config.record_id;
        let mut message = match task {
            Some((rid, since)) => format!(
                "session {id} is busy: its queue owner (pid {} on host {}) is running task {rid}, started {} ({} s ago)",
                std::process::id(),
                host_name(),
                since.to_rfc3339(),
                Timestamp::now().millis().saturating_sub(since.millis()) / 1000
            ),
            None => format!(
                "session {id} is busy: its queue owner (pid {} on host {}) is about to run a task",
                std::process::id(),
                host_name()
            ),
        };
        if waiting > 0 {
            message.push_str(&format!(", and {waiting} more wait"));
        }
        Some(WireError::runtime("SESSION_BUSY", message, true))
    }

    pub(super) fn write_lease(&self, agent_pid: Option<u32>) {
        let lease = Lease {
            pid: std::process::id(),
            socket: self.paths.socket.clone(),
            started_at: self.started_at,
            generation: self.generation,
            agent_pid,
            agent_start_ticks: agent_pid.and_then(lease::process_start_ticks),
        };
        if let Err(e) = lease::write(&self.paths, &lease) {
            tracing::warn!("cannot write the owner lease: {e}");
        }
    }
}
