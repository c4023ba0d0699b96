//! `sessions list --from-agent` (the agent's own sessions, ACP `session/list`) and `sessions
//! adopt` (a record for one of them, its replayed history recorded). The flows are
//! `acpx_runtime::session`'s (`Runtime::list_agent_sessions`, `Runtime::adopt`); this checks
//! the store, and renders.

use acpx_model::{ClosedFilter, ListQuery, Store};
use acpx_runtime::session::{AdoptSpec, AgentListQuery};
use acpx_runtime::Runtime;

use super::{ctrl_c, interrupted_error, report_notices, runtime_error, runtime_options};
use crate::cli::{AdoptArgs, ListArgs};
use crate::commands::sessions::dir_filter;
use crate::commands::{paint_out, print};
use crate::context::Ctx;
use crate::error::{CliError, CliResult};
use acpx_printer::reports::sessions as reports;

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
    let agent = ctx.agent.display();
    let p = reports::agent_sessions(
        &listed,
        &ctx.agent.command,
        &agent,
        filter_cwd.as_ref(),
        &record_of,
        &paint_out(ctx),
    );
    print(ctx, p);
    Ok(())
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
    print(
        ctx,
        reports::adopted(&record, &adopted, &ctx.agent.display()),
    );
    Ok(())
}
