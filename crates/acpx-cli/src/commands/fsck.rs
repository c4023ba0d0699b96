//! `fsck [--repair]`: checks every stored session.
//!
//! Checks: the snapshot validates; the log reads strictly (no damaged complete line); seqs are
//! continuous; no torn tail; the snapshot has folded in every logged event (`acpx.audit_seq`
//! equals the log's last seq) and claims no event the log lacks; and, with the log folded in,
//! no turn was left running and no agent pid of a dead process is recorded.
//!
//! `--repair`, under the session's writer lock: on the fs backend, torn tails are set aside
//! into `<id>.events.torn-<ms>` (so the next append starts on a fresh line, and the bytes are
//! kept); then the runtime's recovery ([`acpx_runtime::Runtime::recover`], the same code that
//! runs when a session is reopened) rolls the snapshot forward with the reducer, records an
//! unfinished turn as interrupted, a stale agent pid as gone, and a snapshot ahead of its log
//! as a log gap, each as a logged lifecycle or prompt event, and saves. Damaged lines, seq gaps
//! and invalid snapshots are reported, not guessed at. Sessions with a prompt running are
//! skipped: their snapshot is legitimately behind.

use std::time::Duration;

use acpx_model::{
    ClosedFilter, EventQuery, ListQuery, ReadMode, RecordId, SessionRecord, Store, StoreError,
};
use acpx_runtime::mapping::turn_is_running;
use acpx_runtime::{load_rolled_forward, Runtime, RuntimeOptions};
use serde::Serialize;
use serde_json::{json, Map};

use crate::backends::OpenStore;
use crate::cli::FsckArgs;
use crate::context::Ctx;
use crate::error::{CliError, CliResult};
use crate::output::Style;
use crate::render::action;
use crate::runs::{self, Probe};

/// One finding.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
struct Problem {
    #[serde(skip_serializing_if = "Option::is_none")]
    acpx_record_id: Option<String>,
    /// `snapshot_invalid`, `log_damaged`, `seq_gap`, `torn_tail`, `snapshot_behind`,
    /// `snapshot_ahead`, `turn_interrupted`, `stale_agent_pid`, `last_write_error`.
    kind: &'static str,
    message: String,
    repairable: bool,
    repaired: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    action: Option<String>,
}

impl Problem {
    fn new(id: Option<&RecordId>, kind: &'static str, message: String, repairable: bool) -> Self {
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
) -> CliResult<LogScan> {
    let mut scan = LogScan::default();
    let mut mode = ReadMode::Strict;
    let mut from = 0;
    let mut prev: Option<u64> = None;
    loop {
        let q = EventQuery {
            from_seq: from,
            limit: Some(5000),
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
                problems.push(Problem::new(
                    Some(id),
                    "log_damaged",
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
            Err(e) => return Err(e.into()),
        };
        for d in &page.damaged {
            if !problems.iter().any(|p| {
                p.kind == "log_damaged"
                    && p.message.contains(&d.location)
                    && p.message.contains(&format!("line {}", d.line))
            }) {
                problems.push(Problem::new(
                    Some(id),
                    "log_damaged",
                    format!("{} line {}: {}", d.location, d.line, d.reason),
                    false,
                ));
            }
        }
        for e in &page.events {
            if let Some(p) = prev {
                if e.seq != p + 1 {
                    problems.push(Problem::new(
                        Some(id),
                        "seq_gap",
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
            if page.next_seq.is_none() && !problems.iter().any(|p| p.kind == "torn_tail") {
                problems.push(Problem::new(
                    Some(id),
                    "torn_tail",
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
            None => return Ok(scan),
        }
    }
}

fn check_snapshot(r: &SessionRecord, scan: &LogScan, problems: &mut Vec<Problem>) {
    let id = &r.acpx_record_id;
    let folded = r.acpx.audit_seq;
    if folded < scan.last_seq {
        problems.push(Problem::new(
            Some(id),
            "snapshot_behind",
            format!(
                "the snapshot has folded in events up to seq {folded}, the log goes to seq {}",
                scan.last_seq
            ),
            true,
        ));
    } else if folded > scan.last_seq {
        problems.push(Problem::new(
            Some(id),
            "snapshot_ahead",
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
            "last_write_error",
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
            "turn_interrupted",
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
            "stale_agent_pid",
            format!("the record names agent process {pid}, which no acpx process runs any more"),
            true,
        ));
    }
}

/// `fsck`.
pub async fn run(ctx: &Ctx, a: FsckArgs) -> CliResult<()> {
    let opened = ctx.opened().await?;
    let store = opened.as_dyn();
    let page = store
        .list(&ListQuery {
            closed: ClosedFilter::Any,
            ..ListQuery::default()
        })
        .await?;
    let mut problems = Vec::new();
    let mut busy = Vec::new();
    for s in &page.skipped {
        problems.push(Problem::new(
            None,
            "snapshot_invalid",
            format!("{}: {}", s.location, s.reason),
            false,
        ));
    }
    let mut checked = 0u64;
    for s in &page.sessions {
        let id = &s.acpx_record_id;
        if let Probe::Running(_) = runs::probe(&ctx.home, id)? {
            busy.push(id.to_string());
            continue;
        }
        checked += 1;
        let mut found = Vec::new();
        let record = match store.load(id).await {
            Ok(r) => Some(r),
            Err(e @ (StoreError::Corrupt { .. } | StoreError::Invalid(_))) => {
                found.push(Problem::new(
                    Some(id),
                    "snapshot_invalid",
                    e.to_string(),
                    false,
                ));
                None
            }
            Err(StoreError::NotFound(_)) => continue,
            Err(e) => return Err(e.into()),
        };
        let scan = scan_log(&*store, id, &mut found).await?;
        if let Some(r) = &record {
            check_snapshot(r, &scan, &mut found);
            check_rolled(&*store, id, &mut found).await;
        }
        if a.repair {
            repair(opened, id, &mut found).await;
        }
        problems.extend(found);
    }
    let remaining = problems.iter().filter(|p| !p.repaired).count();
    let repaired = problems.len() - remaining;
    let repairable_left = problems.iter().any(|p| p.repairable && !p.repaired);
    if ctx.out.is_json() {
        let mut m = Map::new();
        m.insert("ok".into(), json!(remaining == 0));
        m.insert("sessions".into(), json!(checked));
        m.insert("repaired".into(), json!(repaired));
        m.insert("problems".into(), json!(problems));
        if !busy.is_empty() {
            m.insert("skippedBusy".into(), json!(busy));
        }
        ctx.out.json(&action("fsck", m));
    } else {
        for p in &problems {
            let tag = if p.repaired {
                ctx.out.paint_out(Style::Green, "repaired")
            } else if p.repairable {
                ctx.out.paint_out(Style::Yellow, "repairable")
            } else {
                ctx.out.paint_out(Style::Red, "problem")
            };
            let who = p.acpx_record_id.as_deref().unwrap_or("-");
            ctx.out
                .line(&format!("{tag} {who} {}: {}", p.kind, p.message));
            if let Some(act) = &p.action {
                ctx.out.line(&format!("  → {act}"));
            }
        }
        for b in &busy {
            ctx.out
                .note(&format!("skipped {b}: a prompt is running in it"));
        }
        ctx.out.note(&format!(
            "checked {checked} session(s): {} problem(s), {repaired} repaired",
            problems.len()
        ));
        if repairable_left {
            ctx.out
                .note("run `acpx fsck --repair` to fix the problems marked repairable");
        }
    }
    if remaining > 0 {
        let mut e = CliError::runtime(format!("fsck: {remaining} problem(s) remain")).reported();
        if repairable_left {
            e = e.with_hint("run `acpx fsck --repair`");
        }
        return Err(e);
    }
    Ok(())
}

/// What the runtime's recovery repairs.
const RECOVERED: &[&str] = &[
    "snapshot_behind",
    "snapshot_ahead",
    "turn_interrupted",
    "stale_agent_pid",
];

async fn repair(opened: &OpenStore, id: &RecordId, found: &mut [Problem]) {
    // Torn tails first: the recovery then reads a clean log.
    for p in found.iter_mut().filter(|p| p.kind == "torn_tail") {
        match opened.set_aside_torn_tail(id) {
            Ok(Some(t)) => {
                p.repaired = true;
                p.action = Some(format!("set {} bytes aside from {}", t.bytes, t.location));
            }
            Ok(None) => {
                p.repaired = true;
                p.action = Some("the tail was already complete".into());
            }
            Err(e) => p.action = Some(format!("could not set the tail aside: {e}")),
        }
    }
    if !found.iter().any(|p| RECOVERED.contains(&p.kind)) {
        return;
    }
    let runtime = Runtime::new(
        opened.as_dyn(),
        RuntimeOptions {
            lock_timeout: Duration::from_secs(10),
            ..RuntimeOptions::default()
        },
    );
    let result = runtime.recover(id).await;
    for p in found.iter_mut().filter(|p| RECOVERED.contains(&p.kind)) {
        match &result {
            Ok((_, rec)) => {
                p.repaired = true;
                p.action = Some(match p.kind {
                    "snapshot_behind" => format!(
                        "rolled the snapshot forward by {} event(s)",
                        rec.rolled_forward.applied
                    ),
                    "snapshot_ahead" => match rec.log_gap {
                        Some((from, to)) => format!(
                            "recorded events {from}..{to} as lost (a log_gap lifecycle event); the snapshot now follows the log"
                        ),
                        None => "the snapshot now follows the log".into(),
                    },
                    "turn_interrupted" => "recorded the turn as interrupted (a prompt_error event)".into(),
                    _ => "recorded the agent process as gone (a stale_agent lifecycle event)".into(),
                });
            }
            Err(e) => p.action = Some(format!("could not recover the session: {e}")),
        }
    }
}
