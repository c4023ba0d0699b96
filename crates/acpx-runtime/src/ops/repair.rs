//! `fsck`: checking every stored session, and repairing what can be repaired.
//!
//! Checks: the snapshot validates; the log reads strictly (no damaged complete line); seqs are
//! continuous; no torn tail; the snapshot has folded in every logged event (`acpx.audit_seq`
//! equals the log's last seq) and claims no event the log lacks; and, with the log folded in,
//! no turn was left running and no agent pid of a dead process is recorded.
//!
//! Repair, under the session's writer lock: torn tails are set aside by the backend (the file
//! store moves them into `<id>.events.torn-<ms>`, so the next append starts on a fresh line and
//! the bytes are kept); then the runtime's recovery ([`crate::Runtime::recover`], the same code
//! that runs when a session is reopened) rolls the snapshot forward with the reducer, records
//! an unfinished turn as interrupted, a stale agent pid as gone, and a snapshot ahead of its
//! log as a log gap, each as a logged lifecycle or prompt event, and saves. A snapshot that is
//! truncated or garbage is rebuilt from the log with the reducer ([`rebuild_from_log`],
//! `docs/format.md` § Damaged snapshots). Events that cannot be read are replaced, where the
//! backend can (SQLite), by `event_damaged` placeholders that keep what was stored
//! (`docs/format.md` § Damaged events): the content is not guessed, and the log reads again
//! without a gap; other seq gaps are reported. Sessions with a prompt running are skipped: their snapshot is legitimately
//! behind.
//!
//! Apart from the sessions: what an import killed before its commit left
//! ([`Store::stale_stages`]), which no reader sees and which is therefore not a problem of
//! any session, is reported, and removed by the repair ([`Store::remove_stale_stages`]).

use std::sync::Arc;
use std::time::Duration;

use acpx_model::{
    ClosedFilter, EventEnvelope, EventQuery, ListQuery, NewSession, ReadMode, RecordId,
    SessionRecord, StaleStage, Store, StoreError, StoreResult, Timestamp, TornTail,
};
use serde::Serialize;
use serde_json::{json, Map, Value};

use super::transfer::for_each_page;
use super::OpsError;
use crate::mapping::turn_is_running;
use crate::session::{load_rolled_forward, Runtime, RuntimeOptions};

/// What kind of problem a session has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProblemKind {
    /// The snapshot does not parse or does not validate, or (SQLite, PostgreSQL) no longer says
    /// what its row's columns say (repairable: saved again when it loads, else rebuilt from the
    /// log).
    SnapshotInvalid,
    /// A complete log line is not a valid event (not repairable).
    LogDamaged,
    /// The log's seqs jump (not repairable).
    SeqGap,
    /// The log's last line is incomplete (repairable: set aside).
    TornTail,
    /// The snapshot has not folded in every logged event (repairable: roll forward).
    SnapshotBehind,
    /// The snapshot claims events the log lacks (repairable: a `log_gap` event).
    SnapshotAhead,
    /// A turn was left running (repairable: recorded as interrupted).
    TurnInterrupted,
    /// The record names an agent process no acpx process runs (repairable: `stale_agent`).
    StaleAgentPid,
    /// The last append to the log failed (reported).
    LastWriteError,
}

impl ProblemKind {
    /// The kind's name in reports (`snapshot_behind`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            ProblemKind::SnapshotInvalid => "snapshot_invalid",
            ProblemKind::LogDamaged => "log_damaged",
            ProblemKind::SeqGap => "seq_gap",
            ProblemKind::TornTail => "torn_tail",
            ProblemKind::SnapshotBehind => "snapshot_behind",
            ProblemKind::SnapshotAhead => "snapshot_ahead",
            ProblemKind::TurnInterrupted => "turn_interrupted",
            ProblemKind::StaleAgentPid => "stale_agent_pid",
            ProblemKind::LastWriteError => "last_write_error",
        }
    }

    /// Whether the runtime's recovery repairs it.
    fn recovered(self) -> bool {
        matches!(
            self,
            ProblemKind::SnapshotBehind
                | ProblemKind::SnapshotAhead
                | ProblemKind::TurnInterrupted
                | ProblemKind::StaleAgentPid
        )
    }
}

/// One finding.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Problem {
    /// The session (none for a store entry that could not even be listed as one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acpx_record_id: Option<String>,
    /// What is wrong.
    pub kind: ProblemKind,
    /// What is wrong, for people.
    pub message: String,
    /// Whether a repair can fix it.
    pub repairable: bool,
    /// Whether the repair fixed it.
    pub repaired: bool,
    /// What the repair did (or why it could not).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
}

impl Problem {
    fn new(id: Option<&RecordId>, kind: ProblemKind, message: String, repairable: bool) -> Self {
        Problem {
            acpx_record_id: id.map(|i| i.to_string()),
            kind,
            message,
            repairable,
            repaired: false,
            action: None,
        }
    }
}

/// What [`fsck`] found (and repaired).
#[derive(Debug, Clone, Default)]
pub struct FsckReport {
    /// Sessions checked.
    pub checked: u64,
    /// Every problem, in the store's list order.
    pub problems: Vec<Problem>,
    /// Sessions skipped because a prompt runs in them.
    pub skipped_busy: Vec<RecordId>,
    /// What imports interrupted before their commit left (`Store::stale_stages`): never a
    /// session any reader sees, so not a problem (they do not fail the check); reported, and
    /// removed by the repair (into [`FsckReport::stale_stages_removed`]) or by the next import.
    pub stale_stages: Vec<StaleStage>,
    /// The stale stages the repair removed.
    pub stale_stages_removed: Vec<StaleStage>,
}

impl FsckReport {
    /// Problems the repair did not fix (or that were not repaired).
    pub fn remaining(&self) -> usize {
        self.problems.iter().filter(|p| !p.repaired).count()
    }

    /// Problems repaired.
    pub fn repaired(&self) -> usize {
        self.problems.len() - self.remaining()
    }

    /// Whether a repair could fix some of what remains.
    pub fn repairable_left(&self) -> bool {
        self.problems.iter().any(|p| p.repairable && !p.repaired)
    }
}

/// Sets a session's incomplete last log line aside (what the file store's
/// `set_aside_torn_tail` does); `Ok(None)` when the tail was complete.
pub type SetAsideTornTail<'a> = &'a (dyn Fn(&RecordId) -> StoreResult<Option<TornTail>> + Sync);

/// How [`fsck`] runs.
pub struct FsckOptions<'a> {
    /// Repair what can be repaired.
    pub repair: bool,
    /// The backend's torn-tail repair; `None` for a backend that never leaves a torn tail
    /// (SQLite commits whole batches), where a torn tail cannot occur.
    pub set_aside_torn_tail: Option<SetAsideTornTail<'a>>,
}

impl std::fmt::Debug for FsckOptions<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FsckOptions")
            .field("repair", &self.repair)
            .field("set_aside_torn_tail", &self.set_aside_torn_tail.is_some())
            .finish()
    }
}

/// Checks (and with `options.repair`, repairs) every session of `store`, open and closed.
/// `is_busy` says whether a prompt runs in a session now (its snapshot is then legitimately
/// behind, so it is skipped); its error ends the check. A store failure other than a
/// malformed or vanished session also ends it.
pub async fn fsck<E: From<OpsError>>(
    store: Arc<dyn Store>,
    options: FsckOptions<'_>,
    is_busy: impl FnMut(&RecordId) -> Result<bool, E>,
) -> Result<FsckReport, E> {
    fsck_with_progress(store, options, is_busy, &acpx_model::progress::NoProgress).await
}

/// [`fsck`], telling `progress` about each session checked (or skipped as busy).
pub async fn fsck_with_progress<E: From<OpsError>>(
    store: Arc<dyn Store>,
    options: FsckOptions<'_>,
    mut is_busy: impl FnMut(&RecordId) -> Result<bool, E>,
    progress: &dyn acpx_model::progress::Progress,
) -> Result<FsckReport, E> {
    let store_err = |e: StoreError| E::from(OpsError::Store(e));
    let page = store
        .list(&ListQuery {
            closed: ClosedFilter::Any,
            ..ListQuery::default()
        })
        .await
        .map_err(store_err)?;
    // Leftovers of interrupted imports: invisible to every check below, reported apart.
    let mut report = FsckReport {
        stale_stages: store.stale_stages().await.map_err(store_err)?,
        ..FsckReport::default()
    };
    if options.repair && !report.stale_stages.is_empty() {
        report.stale_stages_removed = store.remove_stale_stages().await.map_err(store_err)?;
        let removed = &report.stale_stages_removed;
        report.stale_stages.retain(|s| !removed.contains(s));
    }
    progress.begin((page.skipped.len() + page.sessions.len()) as u64);
    // Sessions whose snapshot could not be read are counted and named; with their id known,
    // the repair rebuilds the snapshot from the log.
    for s in &page.skipped {
        progress.advance(&s.location);
        report.checked += 1;
        let id = s.acpx_record_id.as_ref();
        if let Some(id) = id {
            if is_busy(id)? {
                report.checked -= 1;
                report.skipped_busy.push(id.clone());
                continue;
            }
        }
        let mut found = vec![Problem::new(
            id,
            ProblemKind::SnapshotInvalid,
            format!("{}: {}", s.location, s.reason),
            id.is_some(),
        )];
        if let (Some(id), true) = (id, options.repair) {
            repair(&store, options.set_aside_torn_tail, id, &mut found).await;
        }
        report.problems.extend(found);
    }
    for s in &page.sessions {
        let id = &s.acpx_record_id;
        progress.advance(id.as_str());
        if is_busy(id)? {
            report.skipped_busy.push(id.clone());
            continue;
        }
        report.checked += 1;
        let mut found = Vec::new();
        let record = match store.load(id).await {
            Ok(r) => Some(r),
            Err(e @ (StoreError::Corrupt { .. } | StoreError::Invalid(_))) => {
                found.push(Problem::new(
                    Some(id),
                    ProblemKind::SnapshotInvalid,
                    e.to_string(),
                    true,
                ));
                None
            }
            Err(StoreError::NotFound(_)) => continue,
            Err(e) => return Err(store_err(e)),
        };
        let scan = scan_log(&*store, id, &mut found).await.map_err(store_err)?;
        if let Some(r) = &record {
            check_snapshot(r, &scan, &mut found);
            check_rolled(&*store, id, &mut found).await;
        }
        if options.repair {
            repair(&store, options.set_aside_torn_tail, id, &mut found).await;
        }
        report.problems.extend(found);
    }
    Ok(report)
}

/// What the strict read of a log found.
#[derive(Debug, Default)]
struct LogScan {
    last_seq: u64,
    events: u64,
}

async fn scan_log(
    store: &dyn Store,
    id: &RecordId,
    problems: &mut Vec<Problem>,
) -> StoreResult<LogScan> {
    let mut scan = LogScan::default();
    let mut mode = ReadMode::Strict;
    let mut from = 0;
    let mut prev: Option<u64> = None;
    let mut strict_error: Option<Problem> = None;
    let mut lenient_damaged = 0u64;
    let mut damaged_seen = std::collections::HashSet::new();
    // Damaged lines skipped and not yet matched with a seq jump: a jump they account for is
    // the same damage, not a second problem.
    let mut unmatched_damaged = 0u64;
    loop {
        let q = EventQuery {
            from_seq: from,
            limit: Some(5000),
            max_bytes: Some(acpx_model::PAGE_BYTES),
            mode,
            ..EventQuery::default()
        };
        let page = match store.read_events(id, &q).await {
            Ok(p) => p,
            Err(StoreError::Corrupt {
                location,
                line,
                reason,
            }) if mode == ReadMode::Strict => {
                // Reported only if the lenient read below does not name the damage itself.
                strict_error = Some(Problem::new(
                    Some(id),
                    ProblemKind::LogDamaged,
                    format!(
                        "{location}{}: {reason}",
                        line.map(|l| format!(" line {l}")).unwrap_or_default()
                    ),
                    false,
                ));
                // Read the rest leniently so the other checks still run.
                mode = ReadMode::Lenient;
                from = 0;
                prev = None;
                scan = LogScan::default();
                continue;
            }
            Err(e) => return Err(e),
        };
        for d in &page.damaged {
            // A store may report a line again on a later page (its seek can start before
            // `from_seq`): counted once, or it would account for a real gap.
            if !damaged_seen.insert((d.location.clone(), d.line)) {
                continue;
            }
            lenient_damaged += d.lines;
            unmatched_damaged += d.lines;
            if !problems.iter().any(|p| {
                p.kind == ProblemKind::LogDamaged
                    && p.message.contains(&d.location)
                    && p.message.contains(&format!("line {}", d.line))
            }) {
                problems.push(Problem::new(
                    Some(id),
                    ProblemKind::LogDamaged,
                    format!("{} line {}: {}", d.location, d.line, d.reason),
                    false,
                ));
            }
        }
        for e in &page.events {
            if let Some(p) = prev {
                let missing = e.seq.saturating_sub(p + 1);
                if missing > 0 && missing <= unmatched_damaged {
                    unmatched_damaged -= missing;
                } else if e.seq != p + 1 {
                    problems.push(Problem::new(
                        Some(id),
                        ProblemKind::SeqGap,
                        format!("the log jumps from seq {p} to seq {}", e.seq),
                        false,
                    ));
                }
            }
            prev = Some(e.seq);
            scan.events += 1;
            scan.last_seq = e.seq;
        }
        scan.last_seq = scan.last_seq.max(page.last_seq);
        if let Some(t) = &page.torn_tail {
            if page.next_seq.is_none() && !problems.iter().any(|p| p.kind == ProblemKind::TornTail)
            {
                problems.push(Problem::new(
                    Some(id),
                    ProblemKind::TornTail,
                    format!(
                        "{}: the last line is incomplete ({} bytes; a write was cut short)",
                        t.location, t.bytes
                    ),
                    true,
                ));
            }
        }
        match page.next_seq {
            Some(n) => from = n,
            None => {
                if lenient_damaged == 0 {
                    problems.extend(strict_error);
                }
                return Ok(scan);
            }
        }
    }
}

fn check_snapshot(r: &SessionRecord, scan: &LogScan, problems: &mut Vec<Problem>) {
    let id = &r.acpx_record_id;
    let folded = r.acpx.audit_seq;
    if folded < scan.last_seq {
        problems.push(Problem::new(
            Some(id),
            ProblemKind::SnapshotBehind,
            format!(
                "the snapshot has folded in events up to seq {folded}, the log goes to seq {}",
                scan.last_seq
            ),
            true,
        ));
    } else if folded > scan.last_seq {
        problems.push(Problem::new(
            Some(id),
            ProblemKind::SnapshotAhead,
            format!(
                "the snapshot has folded in events up to seq {folded}, but the log ends at seq {} \
                 (events {}..{folded} never reached the log)",
                scan.last_seq,
                scan.last_seq + 1
            ),
            true,
        ));
    }
    if let Some(e) = &r.acpx.event_log.last_write_error {
        problems.push(Problem::new(
            Some(id),
            ProblemKind::LastWriteError,
            format!("the last append to the log failed: {e}"),
            false,
        ));
    }
}

/// Checks what only the rolled-forward state shows: a turn left running, a stale agent pid.
async fn check_rolled(store: &dyn Store, id: &RecordId, problems: &mut Vec<Problem>) {
    let Ok((rolled, _, _, _)) = load_rolled_forward(store, id).await else {
        return;
    };
    if turn_is_running(&rolled) {
        let t = rolled.acpx.last_turn.as_ref();
        problems.push(Problem::new(
            Some(id),
            ProblemKind::TurnInterrupted,
            format!(
                "turn {} started at {} never ended (the process running it stopped)",
                t.map(|t| t.request_id.as_str()).unwrap_or("?"),
                t.map(|t| t.started_at.to_string()).unwrap_or_default()
            ),
            true,
        ));
    }
    if let Some(pid) = rolled.pid {
        problems.push(Problem::new(
            Some(id),
            ProblemKind::StaleAgentPid,
            format!("the record names agent process {pid}, which no acpx process runs any more"),
            true,
        ));
    }
}

async fn repair(
    store: &Arc<dyn Store>,
    set_aside_torn_tail: Option<SetAsideTornTail<'_>>,
    id: &RecordId,
    found: &mut [Problem],
) {
    // Torn tails first: the recovery then reads a clean log.
    for p in found.iter_mut().filter(|p| p.kind == ProblemKind::TornTail) {
        match set_aside_torn_tail.map_or(Ok(None), |f| f(id)) {
            Ok(Some(t)) => {
                p.repaired = true;
                p.action = Some(match &t.moved_from {
                    Some(from) => format!(
                        "set {} bytes aside: moved from {from} to {}",
                        t.bytes, t.location
                    ),
                    None => format!("set {} bytes aside in {}", t.bytes, t.location),
                });
            }
            Ok(None) => {
                p.repaired = true;
                p.action = Some("the tail was already complete".into());
            }
            Err(e) => p.action = Some(format!("could not set the tail aside: {e}")),
        }
    }
    if found.iter().any(|p| p.kind == ProblemKind::LogDamaged) {
        replace_damaged(store, id, found).await;
    }
    // A snapshot that cannot be read is rebuilt from the log (which includes the recovery);
    // one that validates and only disagrees with the columns a store derives from it (a
    // document edited by hand in SQLite or PostgreSQL) is kept, and its columns written again.
    if let Some(p) = found
        .iter_mut()
        .find(|p| p.kind == ProblemKind::SnapshotInvalid)
    {
        match resave_snapshot(store, id).await {
            Resaved::Done(action) => {
                p.repaired = true;
                p.action = Some(action);
                return;
            }
            Resaved::Failed(why) => {
                // It loaded: rebuilding from the log now would throw the document away.
                p.action = Some(why);
                return;
            }
            Resaved::DoesNotLoad => {}
        }
        match restore_snapshot(store, id).await {
            Ok((_, action)) => {
                p.repaired = true;
                p.action = Some(action);
            }
            Err(why) => p.action = Some(format!("could not rebuild it from the log: {why}")),
        }
        return;
    }
    if !found.iter().any(|p| p.kind.recovered()) {
        return;
    }
    let runtime = recovery_runtime(store);
    let result = runtime.recover(id).await;
    for p in found.iter_mut().filter(|p| p.kind.recovered()) {
        match &result {
            Ok((_, rec)) => {
                p.repaired = true;
                p.action = Some(match p.kind {
                    ProblemKind::SnapshotBehind => format!(
                        "rolled the snapshot forward by {} event(s)",
                        rec.rolled_forward.applied
                    ),
                    ProblemKind::SnapshotAhead => match rec.log_gap {
                        Some((from, to)) => format!(
                            "recorded events {from}..{to} as lost (a log_gap lifecycle event); the snapshot now follows the log"
                        ),
                        None => "the snapshot now follows the log".into(),
                    },
                    ProblemKind::TurnInterrupted => {
                        "recorded the turn as interrupted (a prompt_error event)".into()
                    }
                    _ => "recorded the agent process as gone (a stale_agent lifecycle event)".into(),
                });
            }
            Err(e) => p.action = Some(format!("could not recover the session: {e}")),
        }
    }
}

/// Replaces the events that cannot be read by `event_damaged` placeholders keeping what was
/// stored (`Store::replace_damaged_events`, `docs/format.md` § Damaged events), then reads
/// the log again: a damaged-line or seq-gap problem is repaired when the new read no longer
/// finds one of its kind.
async fn replace_damaged(store: &Arc<dyn Store>, id: &RecordId, found: &mut [Problem]) {
    let result = match store.lock(id, Duration::from_secs(10)).await {
        Ok(writer) => store.replace_damaged_events(&writer).await,
        Err(e) => Err(e),
    };
    let mut again = Vec::new();
    let reread = scan_log(&**store, id, &mut again).await.is_ok();
    for p in found
        .iter_mut()
        .filter(|p| matches!(p.kind, ProblemKind::LogDamaged | ProblemKind::SeqGap))
    {
        let fixed = reread && !again.iter().any(|a| a.kind == p.kind);
        match &result {
            Ok(seqs) if fixed => {
                p.repairable = true;
                p.repaired = true;
                if p.kind == ProblemKind::LogDamaged {
                    let seqs: Vec<String> = seqs.iter().map(u64::to_string).collect();
                    p.action = Some(format!(
                        "replaced the unreadable event(s) at seq {} by `event_damaged` events \
                         that keep what was stored",
                        seqs.join(", ")
                    ));
                }
            }
            Ok(_) => {}
            Err(e) if p.kind == ProblemKind::LogDamaged => {
                p.action = Some(format!("could not replace the damaged events: {e}"));
            }
            Err(_) => {}
        }
    }
}

/// Adds the record's identity (`agentCommand`, `cwd`, `name`) to the payload of the event
/// that starts its log (`session_created`, `session_forked`), so the log alone can rebuild
/// a lost snapshot (`docs/format.md` § Damaged snapshots).
pub(crate) fn add_identity(payload: &mut Map<String, Value>, r: &SessionRecord) {
    payload.insert("agentCommand".into(), json!(r.agent_command));
    payload.insert("cwd".into(), json!(r.cwd));
    if let Some(name) = &r.name {
        payload.insert("name".into(), json!(name));
    }
}

/// A session's identity as its log tells it.
#[derive(Debug, Default)]
struct LogIdentity {
    acp_session_id: Option<String>,
    agent_command: Option<String>,
    cwd: Option<String>,
    name: Option<String>,
    created_at: Option<Timestamp>,
    /// The seq of the oldest event retained: above 1 when retention removed the first ones.
    first_seq: u64,
}

impl LogIdentity {
    fn learn(&mut self, e: &EventEnvelope) {
        if self.created_at.is_none() {
            self.created_at = Some(e.timestamp);
            self.first_seq = e.seq;
            self.acp_session_id = Some(e.acp_session_id.clone());
        }
        if e.event_type != "lifecycle_event" {
            return;
        }
        let p = &e.payload;
        let text = |k: &str| p.get(k).and_then(Value::as_str).map(str::to_owned);
        match p.get("phase").and_then(Value::as_str) {
            Some("session_created" | "session_forked" | "session_adopted")
                if self.cwd.is_none() =>
            {
                if let Some(c) = text("agentCommand") {
                    self.agent_command = Some(c);
                }
                self.cwd = text("cwd");
                self.name = text("name");
            }
            Some("agent_started") if self.agent_command.is_none() => {
                self.agent_command = text("command");
            }
            _ => {}
        }
    }
}

/// Rebuilds the snapshot of session `id` from its log alone, with the reducer: the identity
/// from the log's envelopes and lifecycle events (`session_created` / `session_forked` /
/// `session_adopted` carry `agentCommand`, `cwd` and `name`; `agent_started` the command),
/// everything else by rolling the log forward. The result is not stored (revision 0). Fails, saying why, when
/// the log is empty or does not tell the session's directory or agent (logs written before
/// the identity keys existed).
pub async fn rebuild_from_log(store: &dyn Store, id: &RecordId) -> Result<SessionRecord, String> {
    // Two passes over the log, a page at a time, so that a log of millions of events is never
    // in memory at once: the identity first (the record cannot be made without it), then the
    // reducer.
    let mut identity = LogIdentity::default();
    for_each_page(store, id, ReadMode::Lenient, |events| {
        events.iter().for_each(|e| identity.learn(e));
        Ok::<_, StoreError>(())
    })
    .await
    .map_err(|e| format!("cannot read the event log: {e}"))?;
    let (Some(acp_session_id), Some(created_at)) = (identity.acp_session_id, identity.created_at)
    else {
        return Err("the event log is empty: there is nothing to rebuild from".into());
    };
    let Some(cwd) = identity.cwd else {
        return Err(if identity.first_seq > 1 {
            format!(
                "the event log no longer holds the session's first events, which record its \
                 directory: its oldest readable event is seq {} (retention removes the oldest \
                 events of a log past its budget)",
                identity.first_seq
            )
        } else {
            "the event log does not record the session's directory (it was written before \
             acpx logged a session's identity)"
                .into()
        });
    };
    let Some(agent_command) = identity.agent_command else {
        return Err("the event log does not record the session's agent command".into());
    };
    let mut record = SessionRecord::new(
        NewSession {
            acpx_record_id: id.clone(),
            acp_session_id,
            agent_session_id: None,
            agent_command,
            cwd,
            name: identity.name,
        },
        created_at,
    );
    for_each_page(store, id, ReadMode::Lenient, |events| {
        crate::mapping::roll_forward(&mut record, events);
        Ok::<_, StoreError>(())
    })
    .await
    .map_err(|e| format!("cannot read the event log: {e}"))?;
    if let Ok(state) = store.event_log_state(id).await {
        record.acpx.event_log = state;
    }
    Ok(record)
}

/// What a lookup needs of a session whose snapshot is damaged: the identity a rebuild would
/// start from, and whether the session was closed.
#[derive(Debug)]
pub(crate) struct LoggedScope {
    pub agent_command: String,
    pub cwd: String,
    pub name: Option<String>,
    pub closed: bool,
}

/// The [`LoggedScope`] of session `id`, from its log alone: one pass a page at a time without
/// the reducer, so nothing of the conversation is held (a [`rebuild_from_log`] holds the
/// whole rebuilt record). Fails when the log does not tell the session's directory or agent.
pub(crate) async fn scope_from_log(
    store: &dyn Store,
    id: &RecordId,
) -> Result<LoggedScope, String> {
    let mut identity = LogIdentity::default();
    let mut closed = false;
    for_each_page(store, id, ReadMode::Lenient, |events| {
        for e in events {
            identity.learn(e);
            closed |= e.event_type == "lifecycle_event"
                && e.payload.get("phase").and_then(Value::as_str)
                    == Some(crate::mapping::lifecycle::SESSION_CLOSED);
        }
        Ok::<_, StoreError>(())
    })
    .await
    .map_err(|e| format!("cannot read the event log: {e}"))?;
    match (identity.agent_command, identity.cwd) {
        (Some(agent_command), Some(cwd)) => Ok(LoggedScope {
            agent_command,
            cwd,
            name: identity.name,
            closed,
        }),
        _ => Err("the event log does not tell the session's agent and directory".into()),
    }
}

/// The runtime whose `recover` a repair runs: the session's lock is waited for 10 s.
fn recovery_runtime(store: &Arc<dyn Store>) -> Runtime {
    Runtime::new(
        store.clone(),
        RuntimeOptions {
            lock_timeout: Duration::from_secs(10),
            ..RuntimeOptions::default()
        },
    )
}

/// What [`resave_snapshot`] did.
enum Resaved {
    /// Saved again and recovered; what was done.
    Done(String),
    /// It loaded, but a later step failed; why (the snapshot is not to be rebuilt).
    Failed(String),
    /// The snapshot does not load (it is corrupt or not valid): nothing changed.
    DoesNotLoad,
}

/// Loads the session and saves it as it is, which writes what the store derives from the
/// snapshot again (SQLite and PostgreSQL: the row's columns, the store's documented answer to a
/// document edited by hand that still validates), then recovers it like [`restore_snapshot`].
async fn resave_snapshot(store: &Arc<dyn Store>, id: &RecordId) -> Resaved {
    let writer = match store.lock(id, Duration::from_secs(10)).await {
        Ok(w) => w,
        Err(e) => return Resaved::Failed(format!("cannot take the session's writer lock: {e}")),
    };
    // Only a snapshot that cannot be read is rebuilt; a busy database or a dropped connection
    // is reported, so that a document that would load is never replaced.
    let mut record = match store.load(id).await {
        Ok(r) => r,
        Err(StoreError::Corrupt { .. } | StoreError::Invalid(_) | StoreError::NotFound(_)) => {
            return Resaved::DoesNotLoad
        }
        Err(e) => return Resaved::Failed(format!("cannot load the session: {e}")),
    };
    if let Err(e) = store.save(&mut record).await {
        return Resaved::Failed(format!(
            "the snapshot loads, but saving it again failed: {e}"
        ));
    }
    drop(writer);
    let runtime = recovery_runtime(store);
    match runtime.recover(id).await {
        Ok((_, rec)) => {
            let mut action =
                "the snapshot loads: kept it as it is and saved it again, which rewrote the \
                 columns the store derives from it"
                    .to_owned();
            if rec.rolled_forward.applied > 0 {
                action.push_str(&format!(
                    "; rolled it forward by {} event(s)",
                    rec.rolled_forward.applied
                ));
            }
            if let Some((from, to)) = rec.log_gap {
                action.push_str(&format!("; recorded events {from}..{to} as lost"));
            }
            if let Some(turn) = rec.interrupted_turn {
                action.push_str(&format!("; recorded turn {turn} as interrupted"));
            }
            Resaved::Done(action)
        }
        Err(e) => Resaved::Failed(format!(
            "saved the snapshot again, but its recovery failed: {e}"
        )),
    }
}

/// Rebuilds a damaged snapshot from the log ([`rebuild_from_log`]) and stores it
/// under the session's writer lock, then runs the runtime's recovery (an unfinished turn
/// recorded as interrupted, a stale agent pid as gone). Returns the stored record and what
/// was done, or why it could not be done.
pub async fn restore_snapshot(
    store: &Arc<dyn Store>,
    id: &RecordId,
) -> Result<(SessionRecord, String), String> {
    let writer = store
        .lock(id, Duration::from_secs(10))
        .await
        .map_err(|e| format!("cannot take the session's writer lock: {e}"))?;
    let mut record = rebuild_from_log(&**store, id).await?;
    let events = record.acpx.audit_seq;
    store
        .replace_snapshot(&writer, &mut record)
        .await
        .map_err(|e| format!("cannot write the rebuilt snapshot: {e}"))?;
    drop(writer);
    let runtime = recovery_runtime(store);
    let (record, recovery) = runtime
        .recover(id)
        .await
        .map_err(|e| format!("rebuilt the snapshot, but its recovery failed: {e}"))?;
    let mut action = format!("rebuilt the snapshot from the log ({events} event(s))");
    if let Some(turn) = recovery.interrupted_turn {
        action.push_str(&format!("; recorded turn {turn} as interrupted"));
    }
    Ok((record, action))
}
