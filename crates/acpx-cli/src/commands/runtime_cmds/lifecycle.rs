//! `sessions new` (also `--resume-session`) and `sessions ensure`: a session for a scope.
//! The flows are [`acpx_owner::ensure`]'s; this renders their results and errors.

use acpx_model::SessionRecord;
use acpx_owner::ensure::{self, Creator, EnsureError, EnsureEvent, OwnerLaunch, Scope};
use acpx_runtime::Runtime;

use super::{ctrl_c, report_attachment, report_notices, runtime_options};
use crate::cli::{EnsureArgs, NewArgs};
use crate::context::Ctx;
use crate::error::{CliError, CliResult};
use acpx_printer::reports::sessions as reports;

fn print_ensured(
    ctx: &Ctx,
    record: &SessionRecord,
    created: bool,
    replaced: Option<&SessionRecord>,
) {
    // The store is open by now: the session was just found or created in it.
    let location = ctx
        .opened_now()
        .map(|s| s.record_location(&ctx.home, &record.acpx_record_id))
        .unwrap_or_else(|| ctx.backend.as_str().to_owned());
    let agent = ctx.agent.display();
    let p = reports::ensured(record, created, replaced, &agent, &location);
    crate::commands::print(ctx, p);
}

/// An [`EnsureError`] as the user sees it.
fn ensure_error(ctx: &Ctx, e: EnsureError) -> CliError {
    acpx_printer::failure::flows::ensure_failure(e, &ctx.agent.command).into()
}

/// What the user is told while a session is being found or created.
fn report(ctx: &Ctx, event: EnsureEvent<'_>) {
    match event {
        EnsureEvent::Opened(session) => {
            report_notices(ctx, session.notices());
            report_attachment(ctx, session);
        }
        EnsureEvent::OpenedInOwner(notices) => report_notices(ctx, notices),
        EnsureEvent::CancelledRunningPrompt(id) => ctx
            .out
            .note(&format!("[acpx] cancelled the prompt running in {id}")),
    }
}

/// Where a new session is made: in a queue owner that keeps its agent for the first turn,
/// unless `--no-owner`. On PostgreSQL the other hosts reach that owner through the store's
/// task queue (docs/format.md § Queue across hosts).
fn creator<'a>(
    ctx: &Ctx,
    spawn: &'a (dyn Fn(&acpx_model::RecordId) -> std::io::Result<()> + Send + Sync),
) -> Creator<'a> {
    if ctx.no_owner {
        Creator::InProcess
    } else {
        Creator::Owner(Box::new(OwnerLaunch {
            spawn,
            options: super::owned::task_options(ctx),
        }))
    }
}

fn scope<'a>(ctx: &'a Ctx, name: Option<&'a str>) -> Scope<'a> {
    Scope {
        agent_command: &ctx.agent.command,
        cwd: &ctx.cwd,
        name,
    }
}

/// `sessions new`: creates a session (or, with `--resume-session`, attaches a new record to
/// an ACP session the agent already has), then closes the other open sessions of the same
/// scope.
pub async fn new_session(ctx: &Ctx, a: NewArgs) -> CliResult<()> {
    if a.resume_session
        .as_deref()
        .is_some_and(|id| id.trim().is_empty())
    {
        return Err(CliError::usage("--resume-session needs an ACP session id"));
    }
    let runtime = Runtime::new(ctx.store().await?, runtime_options(ctx, None));
    let spawn = |id: &acpx_model::RecordId| super::owned::spawn_owner(ctx, id);
    let ensured = ensure::new_session_with(
        &runtime,
        ctx.authority()?,
        scope(ctx, a.name.as_deref()),
        a.resume_session.as_deref(),
        creator(ctx, &spawn),
        ctx.timeout,
        ctrl_c(),
        |event| report(ctx, event),
    )
    .await
    .map_err(|e| ensure_error(ctx, e))?;
    print_ensured(ctx, &ensured.record, true, ensured.replaced.as_ref());
    Ok(())
}

/// `sessions ensure`: the scope's session (directory walk), created when there is none.
/// Idempotent, also when several run at once (they serialize on the scope lock).
pub async fn ensure(ctx: &Ctx, a: EnsureArgs) -> CliResult<()> {
    let runtime = Runtime::new(ctx.store().await?, runtime_options(ctx, None));
    let spawn = |id: &acpx_model::RecordId| super::owned::spawn_owner(ctx, id);
    let ensured = ensure::ensure_with(
        &runtime,
        ctx.authority()?,
        scope(ctx, a.name.as_deref()),
        creator(ctx, &spawn),
        ctx.timeout,
        ctrl_c(),
        |event| report(ctx, event),
    )
    .await
    .map_err(|e| ensure_error(ctx, e))?;
    print_ensured(ctx, &ensured.record, ensured.created, None);
    Ok(())
}
