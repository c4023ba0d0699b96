//! `sessions list --from-agent` (the agent's own sessions, ACP `session/list`) and `sessions
//! adopt` (a record for one of them, its replayed history recorded). The flows are
//! `acpx_runtime::session`'s (`Runtime::list_agent_sessions`, `Runtime::adopt`); this checks
//! the store, and renders.

use acpx_model::{ClosedFilter, ListQuery, Store};
use acpx_runtime::session::{AdoptSpec, AgentListQuery, AgentSessionList};
use acpx_runtime::Runtime;
use serde_json::{json, Map, Value};

use super::{ctrl_c, interrupted_error, report_notices, runtime_error, runtime_options};
use crate::cli::{AdoptArgs, ListArgs};
use crate::commands::sessions::dir_filter;
use crate::context::Ctx;
use crate::error::{CliError, CliResult};
use crate::output::Style;
use acpx_printer::table::{self, Table};

/// The record of each stored session by its ACP session id (any agent, open or closed).
async fn records_by_acp_id(store: &dyn Store) -> CliResult<Vec<(String, String)>> {
    let mut out = Vec::new();
    let mut cursor = None;
    loop {
        let page = store
            .list(&ListQuery {
                closed: ClosedFilter::Any,
                cursor: cursor.clone(),
                ..ListQuery::default()
            })
            .await?;
        out.extend(page.sessions.iter().map(|s| {
            (
                s.acp_session_id.clone(),
                s.acpx_record_id.as_str().to_owned(),
            )
        }));
        match page.next_cursor {
            Some(c) if !page.sessions.is_empty() => cursor = Some(c),
            _ => return Ok(out),
        }
    }
}

/// `sessions list --from-agent`.
pub async fn list_from_agent(ctx: &Ctx, a: ListArgs) -> CliResult<()> {
    let filter_cwd = match (&a.filter_cwd, a.all_cwds) {
        (_, true) => None,
        (Some(dir), false) => Some(dir_filter(dir)?.into()),
        (None, false) => Some(ctx.cwd.clone()),
    };
    let store = ctx.store().await?;
    let runtime = Runtime::new(store.clone(), runtime_options(ctx, None));
    let query = AgentListQuery {
        agent_command: ctx.agent.command.clone(),
        cwd: ctx.cwd.clone(),
        filter_cwd: filter_cwd.clone(),
        cursor: a.cursor.clone(),
        limit: a.limit.map(|l| l as usize),
    };
    let listed = tokio::select! {
        r = runtime.list_agent_sessions(&query) => r.map_err(|e| runtime_error(ctx, e))?,
        () = ctrl_c() => return Err(interrupted_error()),
    };
    let recorded = records_by_acp_id(&*store).await?;
    let record_of = |acp: &str| {
        recorded
            .iter()
            .find(|(a, _)| a == acp)
            .map(|(_, r)| r.as_str())
    };
    if ctx.out.is_json() {
        ctx.out.json(&agent_list_json(
            ctx,
            &listed,
            filter_cwd.as_ref(),
            &record_of,
        ));
        return Ok(());
    }
    if !ctx.out.is_text() {
        ctx.out
            .lines(listed.sessions.iter().map(|s| s.session_id.clone()));
        return Ok(());
    }
    if listed.sessions.is_empty() {
        let where_ = filter_cwd
            .as_ref()
            .map(|d| format!(" in {}", d.display()))
            .unwrap_or_default();
        ctx.out.note(&format!(
            "the agent {} lists no sessions{where_}",
            ctx.agent.display()
        ));
    } else {
        ctx.out.lines(agent_table(ctx, &listed, &record_of));
    }
    if let Some(c) = &listed.next_cursor {
        ctx.out.note(&format!(
            "more: acpx sessions list --from-agent --cursor {c} (with the same filters)"
        ));
    } else if listed.truncated {
        ctx.out
            .note("more sessions follow in the agent's page: raise --limit to list them");
    }
    Ok(())
}

fn agent_list_json<'r>(
    ctx: &Ctx,
    listed: &AgentSessionList,
    filter_cwd: Option<&std::path::PathBuf>,
    record_of: &impl Fn(&str) -> Option<&'r str>,
) -> Value {
    let sessions: Vec<Value> = listed
        .sessions
        .iter()
        .map(|s| {
            let mut m = match &s.raw {
                Value::Object(o) => o.clone(),
                _ => Map::new(),
            };
            if let Some(r) = record_of(&s.session_id) {
                m.insert("acpxRecordId".into(), json!(r));
            }
            Value::Object(m)
        })
        .collect();
    let mut m = Map::new();
    m.insert("action".into(), json!("agent_sessions_list"));
    m.insert("agentCommand".into(), json!(ctx.agent.command));
    m.insert(
        "cwd".into(),
        filter_cwd.map_or(Value::Null, |d| json!(d.display().to_string())),
    );
    m.insert("sessions".into(), Value::Array(sessions));
    if let Some(c) = &listed.next_cursor {
        m.insert("nextCursor".into(), json!(c));
    }
    if listed.truncated {
        m.insert("truncated".into(), json!(true));
    }
    Value::Object(m)
}

fn agent_table<'r>(
    ctx: &Ctx,
    listed: &AgentSessionList,
    record_of: &impl Fn(&str) -> Option<&'r str>,
) -> Vec<String> {
    let printable = acpx_runtime::text::printable;
    let mut t = Table::new(&["ACP SESSION", "UPDATED", "RECORD", "CWD", "TITLE"])
        .shrink(4)
        .shrink(3);
    for s in &listed.sessions {
        t.row(vec![
            printable(&s.session_id).into_owned(),
            printable(s.updated_at.as_deref().unwrap_or("-")).into_owned(),
            record_of(&s.session_id).unwrap_or("-").to_owned(),
            printable(&s.cwd).into_owned(),
            s.title
                .as_deref()
                .map(|t| crate::render::clip(t, 50))
                .unwrap_or_default(),
        ]);
    }
    t.render(table::stdout_width(), |row, col, cell| match (row, col) {
        (None, _) | (Some(_), 0) => ctx.out.paint_out(Style::Bold, cell),
        _ => cell.to_owned(),
    })
}

/// `sessions adopt ACP_SESSION_ID [--name N]`.
pub async fn adopt(ctx: &Ctx, a: AdoptArgs) -> CliResult<()> {
    let acp_id = a.acp_session_id.trim();
    if acp_id.is_empty() {
        return Err(CliError::usage("sessions adopt needs an ACP session id"));
    }
    let store = ctx.store().await?;
    let cwd = ctx.cwd.to_string_lossy().into_owned();
    // As `sessions new` does: one creation at a time in a scope.
    let _scope_lock = acpx_owner::runs::lock_scope(
        ctx.authority()?,
        &ctx.agent.command,
        &cwd,
        a.name.as_deref(),
    )
    .await?;
    if let Some((_, record)) = records_by_acp_id(&*store)
        .await?
        .into_iter()
        .find(|(acp, _)| acp == acp_id)
    {
        return Err(CliError::usage(format!(
            "the ACP session {acp_id} already has a record: {record}"
        ))
        .with_hint(format!(
            "continue it with `acpx prompt` in its scope, or see it with `acpx sessions show {record}`"
        )));
    }
    let open = acpx_runtime::ops::scope::open_in_exact_scope(
        &*store,
        &ctx.agent.command,
        &cwd,
        a.name.as_deref(),
    )
    .await?;
    if let Some(other) = open.first() {
        let which = a
            .name
            .as_deref()
            .map_or("an unnamed open session".to_owned(), |n| {
                format!("an open session named {n:?}")
            });
        return Err(CliError::usage(format!(
            "agent {} already has {which} in {cwd}: {}",
            ctx.agent.display(),
            other.acpx_record_id
        ))
        .with_hint("give the adopted session another name with --name, or close that one first"));
    }
    let runtime = Runtime::new(store, runtime_options(ctx, None));
    let spec = AdoptSpec {
        agent_command: ctx.agent.command.clone(),
        cwd: ctx.cwd.clone(),
        name: a.name.clone(),
        acp_session_id: acp_id.to_owned(),
    };
    let (session, adopted) = runtime.adopt(spec).await.map_err(|e| {
        runtime_error(ctx, e).with_hint(
            "`acpx sessions list --from-agent` lists the agent's sessions (run it in the session's directory, or pass --cwd)",
        )
    })?;
    report_notices(ctx, session.notices());
    let record = session
        .shutdown()
        .await
        .map_err(|e| runtime_error(ctx, e))?;
    if ctx.out.is_json() {
        let mut m = Map::new();
        m.insert("action".into(), json!("session_adopted"));
        m.insert("acpxRecordId".into(), json!(record.acpx_record_id.as_str()));
        m.insert("acpxSessionId".into(), json!(record.acp_session_id));
        if let Some(id) = &record.agent_session_id {
            m.insert("agentSessionId".into(), json!(id));
        }
        if let Some(n) = &record.name {
            m.insert("name".into(), json!(n));
        }
        m.insert("method".into(), json!(adopted.method));
        m.insert("replayedUpdates".into(), json!(adopted.replayed_updates));
        m.insert("messageCount".into(), json!(record.thread.message_count()));
        ctx.out.json(&Value::Object(m));
        return Ok(());
    }
    if !ctx.out.is_text() {
        ctx.out.line(record.acpx_record_id.as_str());
        return Ok(());
    }
    ctx.out.line(&format!(
        "adopted ACP session {} as {}{} for agent {} in {}",
        record.acp_session_id,
        record.acpx_record_id,
        record
            .name
            .as_deref()
            .map(|n| format!(" ({n})"))
            .unwrap_or_default(),
        ctx.agent.display(),
        record.cwd
    ));
    let history = if adopted.method == "session/resume" {
        "the agent resumed it without replaying its history, so the record starts empty".to_owned()
    } else {
        format!(
            "{} messages from the history the agent replayed ({} updates)",
            record.thread.message_count(),
            adopted.replayed_updates
        )
    };
    ctx.out.line(&format!("  {history}"));
    Ok(())
}
