//! Reaching a session's owner on another host, through the store's task queue
//! ([`acpx_model::RemoteTasks`]; docs/format.md § Queue across hosts).
//!
//! When no owner runs here but the store's lease of the session is another owner's and live,
//! a request is queued for it in the store instead of starting an owner here. The answer is
//! followed as if it came over a socket ([`Following`]): the owner's answer lines (accepted,
//! started, the result) from the task, and the turn's events from the session's log as they
//! are appended, the events before the result. A task no owner took when the lease lapsed or
//! was released is withdrawn ([`OWNER_GONE`]) so the caller can start an owner here; an
//! owner that stops while running the task ends the wait with the same code.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use acpx_model::{EventQuery, OwnerLease, RecordId, Store, StoreError};

use super::client::{self, Answer};
use super::host::host_name;
use super::lease::{self, LeasePaths};
use super::protocol::{Request, Response, WireError, WireQuestion};
use acpx_runtime::PermissionPrompter;

/// The detail code of a wait that ended because the owner the task was queued for stopped
/// while running it.
pub const OWNER_GONE: &str = "QUEUE_OWNER_GONE";
/// The detail code of a task withdrawn because the owner it was queued for stopped before
/// taking it: nothing ran, and the caller may start an owner here.
pub const OWNER_GONE_UNTAKEN: &str = "QUEUE_OWNER_GONE_UNTAKEN";

/// How often a waiting client looks at the lease of the owner it waits for.
const LEASE_CHECK: Duration = Duration::from_millis(500);

/// The answer to a request, from a local owner's socket or through the store.
#[derive(Debug)]
pub enum Following {
    /// A local owner's connection.
    Local(Box<Answer>),
    /// A task queued for an owner on another host.
    Remote(Box<RemoteAnswer>),
}

impl Following {
    /// The next response; `Ok(None)` after the final one.
    pub async fn next(&mut self) -> Result<Option<Response>, WireError> {
        match self {
            Following::Local(a) => a.next().await,
            Following::Remote(r) => r.next().await,
        }
    }

    /// Sends the user's answer to a forwarded permission question (a local owner only: a
    /// task from another host is never interactive).
    pub async fn answer_permission(&mut self, id: u64, approved: bool) -> std::io::Result<()> {
        match self {
            Following::Local(a) => a.answer_permission(id, approved).await,
            Following::Remote(_) => Err(std::io::Error::other(
                "a task queued for an owner on another host reads no answers",
            )),
        }
    }

    /// Asks `prompter` a forwarded question and sends the answer back.
    pub async fn answer_with(
        &mut self,
        id: u64,
        question: WireQuestion,
        prompter: &dyn PermissionPrompter,
    ) -> std::io::Result<bool> {
        match self {
            Following::Local(a) => a.answer_with(id, question, prompter).await,
            Following::Remote(_) => self.answer_permission(id, false).await.map(|_| false),
        }
    }

    /// Reads up to the final response and returns it.
    pub async fn last(mut self) -> Result<Response, WireError> {
        let mut last = None;
        while let Some(r) = self.next().await? {
            last = Some(r);
        }
        last.ok_or_else(WireError::disconnected)
    }
}

fn store_error(e: StoreError) -> WireError {
    WireError::runtime(
        "QUEUE_STORE_FAILED",
        format!("cannot reach the session's owner through the store: {e}"),
        true,
    )
}

/// The live lease of an owner of `id` that is not a local one (under `authority`), when
/// the store has a task queue across hosts; `None` otherwise.
pub async fn remote_owner(
    store: &dyn Store,
    authority: &Path,
    id: &RecordId,
) -> Result<Option<OwnerLease>, WireError> {
    if store.remote_tasks().is_none() {
        return Ok(None);
    }
    owner_elsewhere(store, authority, id).await
}

/// The live lease of an owner of `id` that is not a local one (under `authority`): on
/// another host, or, for a store one host uses, under another authority directory of this
/// one (another `XDG_RUNTIME_DIR`).
pub async fn owner_elsewhere(
    store: &dyn Store,
    authority: &Path,
    id: &RecordId,
) -> Result<Option<OwnerLease>, WireError> {
    if lease::is_alive(&LeasePaths::new(authority, id)) {
        return Ok(None);
    }
    let lease = store.leases().read_lease(id).await.map_err(store_error)?;
    Ok(lease.filter(|l| !l.lapsed))
}

/// The error of a command that cannot reach the owner holding its session: one under
/// another authority directory of a store without a task queue.
pub fn unreachable_owner(id: &RecordId, owner: &OwnerLease) -> WireError {
    let h = &owner.holder;
    WireError::runtime(
        "SESSION_HELD_ELSEWHERE",
        format!(
            "session {id} is driven by the queue owner pid {} on host {}, whose runtime \
             directory is {}; this command uses another one (XDG_RUNTIME_DIR differs), so it \
             cannot reach that owner: run it with the same XDG_RUNTIME_DIR, or wait for that \
             owner to stop (its TTL)",
            h.pid,
            h.host,
            h.authority.as_deref().unwrap_or("unknown")
        ),
        true,
    )
}

/// A task queued for an owner on another host, followed.
#[derive(Debug)]
pub struct RemoteAnswer {
    store: Arc<dyn Store>,
    id: RecordId,
    task_id: u64,
    /// The owner the task was queued for.
    owner: OwnerLease,
    /// A prompt's request id: its events are followed.
    request_id: Option<String>,
    wait: bool,
    next_seq: u64,
    skip: usize,
    claimed: bool,
    /// Whether the owner said it started the task: before that, nothing of it ran.
    started: bool,
    pending: VecDeque<Response>,
    finished: bool,
    last_check: Instant,
}

/// Queues `request` for `owner`, the live owner of `id` on another host.
pub async fn submit(
    store: &Arc<dyn Store>,
    id: &RecordId,
    request: &Request,
    owner: OwnerLease,
) -> Result<RemoteAnswer, WireError> {
    let tasks = store.remote_tasks().ok_or_else(|| {
        WireError::runtime(
            "QUEUE_STORE_FAILED",
            "this store has no task queue across hosts",
            false,
        )
    })?;
    let (request_id, wait) = match request {
        Request::SubmitPrompt {
            request_id, wait, ..
        } => (Some(request_id.clone()), *wait),
        _ => (None, true),
    };
    // The turn's events come after the log's end now; a session still being created has
    // none yet.
    let next_seq = match store.event_log_state(id).await {
        Ok(s) => s.last_seq + 1,
        Err(StoreError::NotFound(_)) => 1,
        Err(e) => return Err(store_error(e)),
    };
    let json = serde_json::to_value(request)
        .map_err(|e| WireError::runtime("QUEUE_REQUEST_INVALID", e.to_string(), false))?;
    let task_id = tasks
        .submit_task(id, &json, &host_name())
        .await
        .map_err(store_error)?;
    Ok(RemoteAnswer {
        store: store.clone(),
        id: id.clone(),
        task_id,
        owner,
        request_id,
        wait,
        next_seq,
        skip: 0,
        claimed: false,
        started: false,
        pending: VecDeque::new(),
        finished: false,
        last_check: Instant::now(),
    })
}

impl RemoteAnswer {
    /// The owner the task was queued for.
    pub fn owner(&self) -> &OwnerLease {
        &self.owner
    }

    fn tasks(&self) -> &dyn acpx_model::RemoteTasks {
        // `submit` made sure the store has a queue.
        self.store
            .remote_tasks()
            .expect("a RemoteAnswer is made only for a store with a task queue")
    }

    /// Withdraws this task (`request`: [`Request::Withdraw`] of its prompt): from the queue
    /// when no owner took it yet, else through its owner.
    pub async fn withdraw(&mut self, request: Request) {
        if let Ok(true) = self.tasks().withdraw_task(self.task_id).await {
            self.finished = true;
            return;
        }
        if let Ok(answer) = submit(&self.store, &self.id, &request, self.owner.clone()).await {
            let _ = Following::Remote(Box::new(answer)).last().await;
        }
        self.forget().await;
    }

    async fn forget(&self) {
        if let Err(e) = self.tasks().forget_task(self.task_id).await {
            tracing::debug!("cannot forget task {}: {e}", self.task_id);
        }
    }

    /// The next response; `Ok(None)` after the final one.
    pub async fn next(&mut self) -> Result<Option<Response>, WireError> {
        loop {
            if let Some(r) = self.pending.pop_front() {
                let last = r.is_final() || (matches!(r, Response::Accepted { .. }) && !self.wait);
                if last {
                    self.finished = true;
                    if r.is_final() {
                        self.forget().await;
                    }
                }
                return Ok(Some(r));
            }
            if self.finished {
                return Ok(None);
            }
            self.read().await?;
            if !self.pending.is_empty() {
                continue;
            }
            if self.last_check.elapsed() >= LEASE_CHECK {
                self.last_check = Instant::now();
                self.check_owner().await?;
            }
            let answers = self
                .tasks()
                .wait_for_answers(self.task_id, self.skip, LEASE_CHECK);
            if self.claimed && self.request_id.is_some() {
                let events = self.store.wait_for_events(
                    &self.id,
                    self.next_seq.saturating_sub(1),
                    LEASE_CHECK,
                );
                tokio::select! {
                    r = answers => r.map_err(store_error)?,
                    r = events => match r {
                        Ok(()) | Err(StoreError::NotFound(_)) => {}
                        Err(e) => return Err(store_error(e)),
                    },
                }
            } else {
                answers.await.map_err(store_error)?;
            }
        }
    }

    /// Reads the new answer lines and events into `pending`: the lines before the final one,
    /// then the turn's events, then the final line.
    async fn read(&mut self) -> Result<(), WireError> {
        let answers = self
            .tasks()
            .task_answers(self.task_id, self.skip)
            .await
            .map_err(store_error)?;
        if !answers.exists {
            self.finished = true;
            return Err(WireError::runtime(
                OWNER_GONE,
                format!("task {} left the session's queue unanswered", self.task_id),
                true,
            ));
        }
        self.claimed |= answers.claimed;
        let mut finals = Vec::new();
        for line in answers.lines {
            self.skip += 1;
            let r: Response = serde_json::from_value(line).map_err(|e| {
                WireError::runtime(
                    "QUEUE_PROTOCOL_INVALID",
                    format!("the queue owner wrote an unreadable answer: {e}"),
                    false,
                )
            })?;
            self.started |= matches!(r, Response::Started { .. });
            if r.is_final() {
                finals.push(r);
            } else {
                self.pending.push_back(r);
            }
        }
        if self.claimed && self.request_id.is_some() {
            self.read_events().await?;
        }
        self.pending.extend(finals);
        Ok(())
    }

    async fn read_events(&mut self) -> Result<(), WireError> {
        let Some(request_id) = self.request_id.clone() else {
            return Ok(());
        };
        loop {
            let page = match self
                .store
                .read_events(&self.id, &EventQuery::from_seq(self.next_seq))
                .await
            {
                Ok(p) => p,
                Err(StoreError::NotFound(_)) => return Ok(()),
                Err(e) => return Err(store_error(e)),
            };
            let Some(last) = page.events.last().map(|e| e.seq) else {
                return Ok(());
            };
            self.next_seq = last + 1;
            for envelope in page.events {
                if envelope.request_id.as_deref() == Some(request_id.as_str())
                    && envelope.stream != acpx_model::EventStream::Queue
                {
                    self.pending.push_back(Response::Event { envelope });
                }
            }
            if page.next_seq.is_none() {
                return Ok(());
            }
        }
    }

    /// Ends the wait when the owner the task was queued for is gone: a task it never took is
    /// withdrawn (the caller may start an owner here); one it was running ends with
    /// [`OWNER_GONE`].
    async fn check_owner(&mut self) -> Result<(), WireError> {
        let lease = self
            .store
            .leases()
            .read_lease(&self.id)
            .await
            .map_err(store_error)?;
        let same = lease
            .as_ref()
            .is_some_and(|l| !l.lapsed && l.generation == self.owner.generation);
        if same {
            return Ok(());
        }
        let holder = self.owner.holder.clone();
        if !self.claimed {
            if self
                .tasks()
                .withdraw_task(self.task_id)
                .await
                .map_err(store_error)?
            {
                self.finished = true;
                return Err(WireError::runtime(
                    OWNER_GONE_UNTAKEN,
                    format!(
                        "the queue owner on host {} (pid {}) stopped before taking the task",
                        holder.host, holder.pid
                    ),
                    true,
                ));
            }
            // Taken just now: follow it.
            self.claimed = true;
            return Ok(());
        }
        // Its last answers may have landed just before it went.
        self.read().await?;
        if !self.pending.is_empty() {
            return Ok(());
        }
        self.finished = true;
        self.forget().await;
        if !self.started {
            // Taken into its queue, never started: nothing of it ran.
            return Err(WireError::runtime(
                OWNER_GONE_UNTAKEN,
                format!(
                    "the queue owner on host {} (pid {}) stopped before starting the task",
                    holder.host, holder.pid
                ),
                true,
            ));
        }
        Err(WireError::runtime(
            OWNER_GONE,
            format!(
                "the queue owner on host {} (pid {}) stopped while running the task; the \
                 next command takes the session over",
                holder.host, holder.pid
            ),
            true,
        ))
    }
}

/// Sends `request` to a local owner if one runs, else to the live owner on another host
/// through the store; `Ok(None)` when neither runs (nothing is started).
pub async fn send_if_running_anywhere(
    store: Option<&Arc<dyn Store>>,
    authority: &Path,
    id: &RecordId,
    request: &Request,
) -> Result<Option<Following>, WireError> {
    if let Some(answer) = client::send_if_running(authority, id, request)
        .await
        .map_err(|e| client::io_wire(&e))?
    {
        return Ok(Some(Following::Local(Box::new(answer))));
    }
    let Some(store) = store else {
        return Ok(None);
    };
    match remote_owner(&**store, authority, id).await? {
        Some(owner) => Ok(Some(Following::Remote(Box::new(
            submit(store, id, request, owner).await?,
        )))),
        None => Ok(None),
    }
}
