//! `sessions list --from-agent` (the agent's own sessions, ACP `session/list`) and `sessions
//! adopt` (a record for one of them, its replayed history recorded). The flows are
//! `acpx_runtime::session`'s (`Runtime::list_agent_sessions`) and `acpx_owner::adopt`'s; this
//! renders.

use acpx_owner::adopt;
use acpx_printer::failure::flows::adopt_failure;
use acpx_runtime::session::{AdoptSpec, AgentListQuery};
use acpx_runtime::{Runtime, Session};

use super::{ctrl_c, interrupted_error, report_notices, runtime_error, runtime_options};
use crate::cli::{AdoptArgs, ListArgs};
use crate::commands::sessions::dir_filter;
use crate::commands::{paint_out, print};
use crate::context::Ctx;
use crate::error::{CliError, CliResult};
use acpx_printer::reports::sessions as reports;

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
    let recorded = adopt::records_by_acp_id(&*store).await?;
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
    let runtime = Runtime::new(ctx.store().await?, runtime_options(ctx, None));
    let spec = AdoptSpec {
        agent_command: ctx.agent.command.clone(),
        cwd: ctx.cwd.clone(),
        name: a.name.clone(),
        acp_session_id: acp_id.to_owned(),
    };
    let agent = ctx.agent.display();
    let opened = |session: &Session| report_notices(ctx, session.notices());
    let (record, adopted) = adopt::adopt(&runtime, ctx.authority()?, &agent, spec, opened)
        .await
        .map_err(|e| CliError::from(adopt_failure(e, &ctx.agent.command)))?;
    print(
        ctx,
        reports::adopted(&record, &adopted, &ctx.agent.display()),
    );
    Ok(())
}
