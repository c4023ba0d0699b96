//! The local health of a session (`acpx status`), without an ACP call: whether its queue owner
//! runs (and what it is doing), whether a one-process prompt runs or died mid-turn, or whether
//! the session is idle. [`of_session`] gathers the facts (the record, the owner's
//! [`OwnerStatus`] over its socket or its lease on another host, the run registry's
//! [`LocalTurn`]); this module names the state and gives its JSON object (`status_snapshot`)
//! and its readable lines, so every front end says the same.

use acpx_model::{
    EventQuery, EventType, LeaseActivity, OwnerLease, ReadMode, SessionRecord, Store, StoreResult,
};
use serde_json::{json, Map, Value};

use crate::protocol::OwnerStatus;
use crate::runs::{self, LocalTurn, RunInfo, RunsError};
use crate::submit::SubmitError;
use acpx_runtime::record_json::{action, record_identity};

/// Why a session's status could not be gathered.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// Reading the session.
    #[error(transparent)]
    Store(#[from] acpx_model::StoreError),
    /// Asking its queue owner (here, or on another host through the store).
    #[error(transparent)]
    Owner(#[from] SubmitError),
    /// Probing the run registry.
    #[error(transparent)]
    Runs(#[from] RunsError),
}

/// The status of the stored session `id`, whose processes meet in `authority`: its queue
/// owner's when one runs here, else its owner's lease when one runs on another host (a store
/// several hosts share), else the run registry's and the log's (a one-process prompt running,
/// died, or a turn left unfinished).
pub async fn of_session(
    store: &dyn Store,
    authority: &std::path::Path,
    id: &acpx_model::RecordId,
) -> Result<SessionStatus, StatusError> {
    let record = store.load(id).await?;
    let remote = crate::remote_client::remote_owner(store, authority, id)
        .await
        .map_err(SubmitError::Wire)?;
    Ok(
        match (crate::submit::status(authority, id).await?, remote) {
            (Some(owner), _) => SessionStatus::of_owner(record, owner),
            (None, Some(lease)) => SessionStatus::of_remote_owner(record, lease),
            (None, None) => {
                let mut record = record;
                let mut turn = runs::local_turn(authority, &record)?;
                if matches!(turn, LocalTurn::Idle) {
                    // Read again: a prompt that ended since the first read saved it.
                    record = store.load(id).await?;
                    if log_shows_unfinished_turn(store, &record).await? {
                        turn = LocalTurn::Unfinished;
                    }
                }
                SessionStatus::of_local(record, turn)
            }
        },
    )
}

/// Whether the log holds a turn that started after the snapshot was last saved and never
/// ended: a process killed before its first save of the turn (the snapshot then still shows
/// the turn before as finished). Only the turn events past the snapshot are read (a type
/// filter, a page at a time), and the last of them decides; nothing is read when the
/// snapshot has folded in the whole log.
pub async fn log_shows_unfinished_turn(
    store: &dyn Store,
    record: &SessionRecord,
) -> StoreResult<bool> {
    let id = &record.acpx_record_id;
    let folded = record.acpx.audit_seq;
    if store.event_log_state(id).await?.last_seq <= folded {
        return Ok(false);
    }
    let mut query = EventQuery {
        from_seq: folded + 1,
        types: vec![
            EventType::PromptStarted,
            EventType::PromptDone,
            EventType::PromptError,
        ],
        limit: Some(1_000),
        mode: ReadMode::Lenient,
        ..EventQuery::default()
    };
    let mut open = false;
    loop {
        let page = store.read_events(id, &query).await?;
        if let Some(e) = page.events.last() {
            open = e.event_type == EventType::PromptStarted;
        }
        match page.next_seq {
            Some(next) if next > query.from_seq => query.from_seq = next,
            _ => return Ok(open),
        }
    }
}

/// The state word of a status (`status` in JSON, the first word in text).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusState {
    /// No open session in the scope.
    NoSession,
    /// A prompt was taken up and its agent is starting or attaching: its turn has not
    /// started (`cancel` withdraws it).
    Starting,
    /// A prompt is running (through the owner or in a one-process `acpx`).
    Running,
    /// The queue owner runs and no prompt does.
    Alive,
    /// The last turn was left unfinished by a process that died or was stopped.
    Dead,
    /// No owner, no prompt running, the last turn ended.
    Idle,
}

impl StatusState {
    /// The word: `no-session`, `starting`, `running`, `alive`, `dead`, `idle`.
    pub fn as_str(self) -> &'static str {
        match self {
            StatusState::NoSession => "no-session",
            StatusState::Starting => "starting",
            StatusState::Running => "running",
            StatusState::Alive => "alive",
            StatusState::Dead => "dead",
            StatusState::Idle => "idle",
        }
    }
}

/// Where the facts of a session's status came from.
#[derive(Debug, Clone)]
enum Source {
    None,
    Owner(OwnerStatus),
    /// The lease of an owner on another host (a store several hosts share).
    RemoteOwner(Box<OwnerLease>),
    /// A one-process prompt's run file, shown while it runs.
    Local(Option<RunInfo>),
}

/// The health of one session (or the lack of one), ready to render.
#[derive(Debug, Clone)]
pub struct SessionStatus {
    /// The state word.
    pub state: StatusState,
    /// One sentence saying what the state means.
    pub summary: String,
    record: Option<SessionRecord>,
    source: Source,
}

impl SessionStatus {
    /// No open session for `agent` (its name or command) in `cwd`.
    pub fn no_session(agent: &str, cwd: &std::path::Path) -> Self {
        SessionStatus {
            state: StatusState::NoSession,
            summary: format!("no open session for agent {agent} in {}", cwd.display()),
            record: None,
            source: Source::None,
        }
    }

    /// A session whose queue owner answered with `owner`.
    pub fn of_owner(record: SessionRecord, owner: OwnerStatus) -> Self {
        let (state, summary) = match &owner.running {
            Some(r) => (
                StatusState::Running,
                format!("queue owner healthy; prompt {r} is running"),
            ),
            None if owner.starting.is_some() => (
                StatusState::Starting,
                format!(
                    "queue owner healthy; its agent is starting for prompt {} (`acpx cancel` \
                     withdraws it)",
                    owner.starting.as_deref().unwrap_or_default()
                ),
            ),
            None if owner.agent_exited => (
                StatusState::Alive,
                "queue owner healthy; its agent exited, and the next prompt starts a new one"
                    .to_owned(),
            ),
            None => (StatusState::Alive, "queue owner healthy".to_owned()),
        };
        SessionStatus {
            state,
            summary,
            record: Some(record),
            source: Source::Owner(owner),
        }
    }

    /// A session whose queue owner runs on another host, as its lease in the store says.
    pub fn of_remote_owner(record: SessionRecord, lease: OwnerLease) -> Self {
        let at = format!(
            "queue owner on host {} (pid {})",
            lease.holder.host, lease.holder.pid
        );
        let (state, summary) = match &lease.activity {
            LeaseActivity::Running { request_id, .. } => (
                StatusState::Running,
                format!("{at}; prompt {request_id} is running"),
            ),
            LeaseActivity::Idle => (StatusState::Alive, at),
        };
        SessionStatus {
            state,
            summary,
            record: Some(record),
            source: Source::RemoteOwner(Box::new(lease)),
        }
    }

    /// A session without a queue owner, from the run registry's view of its last turn.
    pub fn of_local(record: SessionRecord, turn: LocalTurn) -> Self {
        let (state, summary, run) = match turn {
            LocalTurn::Running(info) => (StatusState::Running, "a prompt is running", info),
            LocalTurn::Died(_) => (
                StatusState::Dead,
                "the process running its last prompt died mid-turn; the next prompt records the turn as interrupted",
                None,
            ),
            LocalTurn::Unfinished => (
                StatusState::Dead,
                "its last turn never finished (acpx was stopped); the next prompt records it as interrupted",
                None,
            ),
            LocalTurn::Idle => (StatusState::Idle, "no prompt is running", None),
        };
        SessionStatus {
            state,
            summary: summary.to_owned(),
            record: Some(record),
            source: Source::Local(run),
        }
    }

    /// The `status_snapshot` JSON object.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("status".into(), json!(self.state.as_str()));
        m.insert("summary".into(), json!(self.summary));
        let Some(record) = &self.record else {
            return action("status_snapshot", m);
        };
        m.extend(record_identity(record));
        match &self.source {
            Source::Owner(owner) => {
                m.insert("pid".into(), json!(owner.pid));
                if let Some(p) = owner.agent_pid {
                    m.insert("agentPid".into(), json!(p));
                }
                if owner.agent_exited {
                    m.insert("agentExited".into(), json!(true));
                }
                if let Some(r) = &owner.running {
                    m.insert("requestId".into(), json!(r));
                }
                if let Some(r) = &owner.starting {
                    m.insert("startingRequestId".into(), json!(r));
                }
                m.insert("uptime".into(), json!(uptime(owner.uptime_seconds)));
                m.insert("queueDepth".into(), json!(owner.queue_depth));
                m.insert("ownerGeneration".into(), json!(owner.generation));
                m.insert("ttl".into(), json!(owner.ttl_seconds));
                if owner.accept_errors > 0 {
                    m.insert("acceptErrors".into(), json!(owner.accept_errors));
                    m.insert("lastAcceptError".into(), json!(owner.last_accept_error));
                }
                if owner.max_connections > 0 {
                    m.insert("connections".into(), json!(owner.connections));
                    m.insert("maxConnections".into(), json!(owner.max_connections));
                }
                if owner.refused_connections > 0 {
                    m.insert(
                        "refusedConnections".into(),
                        json!(owner.refused_connections),
                    );
                }
            }
            Source::RemoteOwner(lease) => {
                m.insert("ownerHost".into(), json!(lease.holder.host));
                m.insert("pid".into(), json!(lease.holder.pid));
                if let LeaseActivity::Running { request_id, since } = &lease.activity {
                    m.insert("requestId".into(), json!(request_id));
                    m.insert("runningSince".into(), json!(since));
                }
                m.insert("queueDepth".into(), json!(lease.queue_depth));
                m.insert("leaseGeneration".into(), json!(lease.generation));
                m.insert("leaseExpiresAt".into(), json!(lease.expires_at));
            }
            Source::Local(Some(i)) => {
                m.insert("pid".into(), json!(i.pid));
                m.insert("requestId".into(), json!(i.request_id));
                m.insert("runningSince".into(), json!(i.started_at));
                if let Some(p) = record.pid {
                    m.insert("agentPid".into(), json!(p));
                }
            }
            Source::Local(None) | Source::None => {}
        }
        if let Some(mode) = &record.acpx.current_mode_id {
            m.insert("mode".into(), json!(mode));
        }
        if let Some(t) = record.last_prompt_at {
            m.insert("lastPromptTime".into(), json!(t));
        }
        let usage = acpx_model::SessionUsage::of(record);
        let mut u = json!(usage);
        u["totalTokens"] = json!(usage.total_tokens());
        m.insert("usage".into(), u);
        action("status_snapshot", m)
    }

    /// The readable lines: the state and summary, the ids, what runs, the mode, the last
    /// prompt's time, and the tokens, cost and context use the agent reported.
    pub fn text_lines(&self) -> Vec<String> {
        let mut lines = vec![format!("{}: {}", self.state.as_str(), self.summary)];
        let Some(record) = &self.record else {
            return lines;
        };
        lines.push(format!("  record id:        {}", record.acpx_record_id));
        lines.push(format!("  ACP session id:   {}", record.acp_session_id));
        if let Some(a) = &record.agent_session_id {
            lines.push(format!("  agent session id: {a}"));
        }
        match &self.source {
            Source::Owner(owner) => {
                lines.push(format!(
                    "  owner pid:        {} (up {}, since {})",
                    owner.pid,
                    uptime(owner.uptime_seconds),
                    owner.started_at
                ));
                if let Some(p) = owner.agent_pid {
                    lines.push(format!("  agent pid:        {p}"));
                }
                lines.push(format!("  queue depth:      {}", owner.queue_depth));
                if owner.accept_errors > 0 {
                    lines.push(format!(
                        "  accept errors:    {} (last: {}); it goes on accepting",
                        owner.accept_errors,
                        owner.last_accept_error.as_deref().unwrap_or("unknown")
                    ));
                }
                if owner.max_connections > 0 {
                    let mut l = format!(
                        "  connections:      {} (limit {})",
                        owner.connections, owner.max_connections
                    );
                    if owner.refused_connections > 0 {
                        l.push_str(&format!(
                            "; {} refused at the limit",
                            owner.refused_connections
                        ));
                    }
                    lines.push(l);
                }
            }
            Source::RemoteOwner(lease) => {
                lines.push(format!(
                    "  owner:            host {}, pid {} (since {})",
                    lease.holder.host, lease.holder.pid, lease.acquired_at
                ));
                if let LeaseActivity::Running { since, .. } = &lease.activity {
                    lines.push(format!("  running since:    {since}"));
                }
                lines.push(format!("  queue depth:      {}", lease.queue_depth));
                lines.push(format!(
                    "  lease:            generation {}, expires {} unless renewed",
                    lease.generation, lease.expires_at
                ));
            }
            Source::Local(Some(i)) => {
                lines.push(format!(
                    "  pid:              {} (since {})",
                    i.pid, i.started_at
                ));
            }
            Source::Local(None) | Source::None => {}
        }
        if let Some(mode) = &record.acpx.current_mode_id {
            lines.push(format!("  mode:             {mode}"));
        }
        if let Some(t) = record.last_prompt_at {
            lines.push(format!("  last prompt:      {t}"));
        }
        lines.extend(acpx_model::SessionUsage::of(record).status_lines());
        lines
    }
}

/// `HH:MM:SS` of a number of seconds.
fn uptime(seconds: u64) -> String {
    format!(
        "{:02}:{:02}:{:02}",
        seconds / 3600,
        (seconds / 60) % 60,
        seconds % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A turn whose process was killed before its first save: its events are in the log past
    /// the snapshot, opening a turn that never ends.
    #[tokio::test]
    async fn a_turn_started_after_the_last_save_is_unfinished() {
        use acpx_model::{
            Durability, EventContext, EventEnvelope, EventPayload, EventSource, EventStream,
            MemoryStore, NewSession, RecordId, Timestamp,
        };
        let store = MemoryStore::new();
        let id = RecordId::parse("s1").unwrap();
        let mut record = SessionRecord::new(
            NewSession {
                acpx_record_id: id.clone(),
                acp_session_id: "acp".into(),
                agent_session_id: None,
                agent_command: "agent".into(),
                cwd: "/r".into(),
                name: None,
            },
            Timestamp::now(),
        );
        store.create(&mut record).await.unwrap();
        let event = |seq: u64, t: &str| {
            let ctx = EventContext {
                acpx_record_id: &id,
                acp_session_id: "acp",
                request_id: Some("req"),
                stream: EventStream::Prompt,
                source: EventSource::Runtime,
            };
            EventEnvelope::new(
                &ctx,
                seq,
                Timestamp::now(),
                EventPayload::Unknown {
                    event_type: t.into(),
                    payload: json!({}),
                },
            )
        };
        let append = |events: Vec<EventEnvelope>| {
            let store = &store;
            let id = &id;
            async move {
                let writer = store
                    .lock(id, std::time::Duration::from_secs(1))
                    .await
                    .unwrap();
                store
                    .append(&writer, &events, Durability::Flush)
                    .await
                    .unwrap();
            }
        };
        assert!(!log_shows_unfinished_turn(&store, &record).await.unwrap());
        append(vec![event(1, "prompt_started"), event(2, "prompt_done")]).await;
        assert!(!log_shows_unfinished_turn(&store, &record).await.unwrap());
        append(vec![event(3, "queue_event"), event(4, "prompt_started")]).await;
        assert!(log_shows_unfinished_turn(&store, &record).await.unwrap());
        // Folded into the snapshot, the turn is the snapshot's to tell.
        record.acpx.audit_seq = 4;
        assert!(!log_shows_unfinished_turn(&store, &record).await.unwrap());
        append(vec![event(5, "prompt_error")]).await;
        record.acpx.audit_seq = 2;
        assert!(!log_shows_unfinished_turn(&store, &record).await.unwrap());
    }

    #[test]
    fn uptime_is_hours_minutes_seconds() {
        assert_eq!(uptime(3_725), "01:02:05");
        assert_eq!(uptime(0), "00:00:00");
    }

    #[test]
    fn no_session_has_only_its_state_and_summary() {
        let s = SessionStatus::no_session("codex", std::path::Path::new("/p"));
        let v = s.to_json();
        assert_eq!(v["action"], "status_snapshot");
        assert_eq!(v["status"], "no-session");
        assert_eq!(v["summary"], "no open session for agent codex in /p");
        assert_eq!(v.as_object().map(|m| m.len()), Some(3));
        assert_eq!(
            s.text_lines(),
            ["no-session: no open session for agent codex in /p"]
        );
    }
}
