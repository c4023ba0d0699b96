//! `status`: local health of a session, no ACP call (a running queue owner is asked for its
//! state over its socket).

use acpx_model::SessionRecord;
use acpx_runtime::owner::protocol::OwnerStatus;
use serde_json::{json, Map, Value};

use crate::cli::SessionSelect;
use crate::context::Ctx;
use crate::error::CliResult;
use crate::lookup::find_in_scope;
use crate::render::{action, record_identity};
use crate::runs::{self, LocalTurn};

use super::owned;

fn uptime(seconds: u64) -> String {
    format!(
        "{:02}:{:02}:{:02}",
        seconds / 3600,
        (seconds / 60) % 60,
        seconds % 60
    )
}

/// `status`, `summary` and the session's ids: how every JSON status begins.
fn json_head(status: &str, summary: &str, record: &SessionRecord) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("status".into(), json!(status));
    m.insert("summary".into(), json!(summary));
    m.extend(record_identity(record));
    m
}

/// The current mode and the last prompt's time: how every JSON status ends.
fn json_tail(m: &mut Map<String, Value>, record: &SessionRecord) {
    if let Some(mode) = &record.acpx.current_mode_id {
        m.insert("mode".into(), json!(mode));
    }
    if let Some(t) = record.last_prompt_at {
        m.insert("lastPromptTime".into(), json!(t));
    }
}

/// The state line and the session's ids: how every text status begins.
fn text_head(ctx: &Ctx, status: &str, summary: &str, record: &SessionRecord) {
    let o = &ctx.out;
    o.line(&format!("{status}: {summary}"));
    o.line(&format!("  record id:        {}", record.acpx_record_id));
    o.line(&format!("  ACP session id:   {}", record.acp_session_id));
    if let Some(a) = &record.agent_session_id {
        o.line(&format!("  agent session id: {a}"));
    }
}

/// The current mode and the last prompt's time: how every text status ends.
fn text_tail(ctx: &Ctx, record: &SessionRecord) {
    let o = &ctx.out;
    if let Some(mode) = &record.acpx.current_mode_id {
        o.line(&format!("  mode:             {mode}"));
    }
    if let Some(t) = record.last_prompt_at {
        o.line(&format!("  last prompt:      {t}"));
    }
}

/// The status of a session whose queue owner runs.
fn owner_status(ctx: &Ctx, record: &SessionRecord, owner: &OwnerStatus) -> CliResult<()> {
    let (status, summary) = match &owner.running {
        Some(r) => (
            "running",
            format!("queue owner healthy; prompt {r} is running"),
        ),
        None => ("alive", "queue owner healthy".to_owned()),
    };
    if ctx.out.is_json() {
        let mut m = json_head(status, &summary, record);
        m.insert("pid".into(), json!(owner.pid));
        if let Some(p) = owner.agent_pid {
            m.insert("agentPid".into(), json!(p));
        }
        if let Some(r) = &owner.running {
            m.insert("requestId".into(), json!(r));
        }
        m.insert("uptime".into(), json!(uptime(owner.uptime_seconds)));
        m.insert("queueDepth".into(), json!(owner.queue_depth));
        m.insert("ownerGeneration".into(), json!(owner.generation));
        m.insert("ttl".into(), json!(owner.ttl_seconds));
        json_tail(&mut m, record);
        ctx.out.json(&action("status_snapshot", m));
        return Ok(());
    }
    let o = &ctx.out;
    text_head(ctx, status, &summary, record);
    o.line(&format!(
        "  owner pid:        {} (up {}, since {})",
        owner.pid,
        uptime(owner.uptime_seconds),
        owner.started_at
    ));
    if let Some(p) = owner.agent_pid {
        o.line(&format!("  agent pid:        {p}"));
    }
    o.line(&format!("  queue depth:      {}", owner.queue_depth));
    text_tail(ctx, record);
    Ok(())
}

/// `status`: local health, no ACP call. Exit 0 whatever the state (it is the answer).
pub async fn status(ctx: &Ctx, a: SessionSelect) -> CliResult<()> {
    let store = ctx.store().await?;
    let found = find_in_scope(&*store, &ctx.agent.command, &ctx.cwd, a.session.as_deref()).await?;
    let Some(found) = found else {
        let summary = format!(
            "no open session for agent {} in {}",
            ctx.agent.label(),
            ctx.cwd.display()
        );
        if ctx.out.is_json() {
            let mut m = Map::new();
            m.insert("status".into(), json!("no-session"));
            m.insert("summary".into(), json!(summary));
            ctx.out.json(&action("status_snapshot", m));
        } else {
            ctx.out.line(&format!("no-session: {summary}"));
        }
        return Ok(());
    };
    let record = store.load(&found.acpx_record_id).await?;
    if let Some(owner) = owned::status(ctx, &record.acpx_record_id).await? {
        return owner_status(ctx, &record, &owner);
    }
    let (status, summary, run) = match runs::local_turn(&ctx.home, &record)? {
        LocalTurn::Running(info) => ("running", "a prompt is running".to_owned(), info),
        LocalTurn::Died(info) => (
            "dead",
            "the process running its last prompt died mid-turn; the next prompt records the turn as interrupted".to_owned(),
            info,
        ),
        LocalTurn::Unfinished => (
            "dead",
            "its last turn never finished (acpx was stopped); the next prompt records it as interrupted".to_owned(),
            None,
        ),
        LocalTurn::Idle => ("idle", "no prompt is running".to_owned(), None),
    };
    if ctx.out.is_json() {
        let mut m = json_head(status, &summary, &record);
        if let (Some(i), "running") = (&run, status) {
            m.insert("pid".into(), json!(i.pid));
            m.insert("requestId".into(), json!(i.request_id));
            m.insert("runningSince".into(), json!(i.started_at));
            if let Some(p) = record.pid {
                m.insert("agentPid".into(), json!(p));
            }
        }
        json_tail(&mut m, &record);
        ctx.out.json(&action("status_snapshot", m));
        return Ok(());
    }
    let o = &ctx.out;
    text_head(ctx, status, &summary, &record);
    if let (Some(i), "running") = (&run, status) {
        o.line(&format!(
            "  pid:              {} (since {})",
            i.pid, i.started_at
        ));
    }
    text_tail(ctx, &record);
    Ok(())
}
