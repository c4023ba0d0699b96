//! `sessions new` (also `--resume-session`) and `sessions ensure`: a session for a scope.

use std::time::Duration;

use acpx_model::SessionRecord;
use acpx_runtime::{Attachment, NewSessionSpec, Runtime};
use serde_json::{json, Map};

use super::{
    interrupted_error, open_existing, or_interrupt, report_notices, runtime_error, runtime_options,
    Interrupts,
};
use crate::cli::{EnsureArgs, NewArgs};
use crate::context::Ctx;
use crate::error::{CliError, CliResult, ErrorKind};
use crate::lookup::find_in_scope;
use crate::render::{action, record_identity};
use crate::runs::{self};
use acpx_runtime::ops::scope;

/// The open sessions of exactly this scope (no directory walk).
async fn open_in_exact_scope(ctx: &Ctx, name: Option<&str>) -> CliResult<Vec<SessionRecord>> {
    let store = ctx.store().await?;
    Ok(scope::open_in_exact_scope(
        &*store,
        &ctx.agent.command,
        &ctx.cwd.to_string_lossy(),
        name,
    )
    .await?)
}

/// Starts the agent and creates a new session record in this scope.
async fn create_session(ctx: &Ctx, name: Option<&str>) -> CliResult<SessionRecord> {
    let runtime = Runtime::new(ctx.store().await?, runtime_options(ctx, None));
    let interrupts = Interrupts::start(None, None, &ctx.out);
    let open = runtime.open_new(NewSessionSpec {
        agent_command: ctx.agent.command.clone(),
        cwd: ctx.cwd.clone(),
        name: name.map(str::to_owned),
    });
    let opened = match ctx.timeout {
        Some(t) => match or_interrupt(tokio::time::timeout(t, open), &interrupts).await {
            None => return Err(interrupted_error()),
            Some(Err(_)) => {
                return Err(CliError::new(
                    ErrorKind::Timeout,
                    format!(
                        "the agent did not start within {} s (--timeout)",
                        t.as_secs_f64()
                    ),
                ))
            }
            Some(Ok(r)) => r,
        },
        None => match or_interrupt(open, &interrupts).await {
            None => return Err(interrupted_error()),
            Some(r) => r,
        },
    };
    let session = opened.map_err(|e| runtime_error(ctx, e))?;
    report_notices(ctx, session.notices());
    session.shutdown().await.map_err(|e| runtime_error(ctx, e))
}

fn print_ensured(
    ctx: &Ctx,
    record: &SessionRecord,
    created: bool,
    replaced: Option<&SessionRecord>,
) {
    if ctx.out.is_json() {
        let mut m = Map::new();
        m.insert("created".into(), json!(created));
        m.extend(record_identity(record));
        if let Some(n) = &record.name {
            m.insert("name".into(), json!(n));
        }
        if let Some(r) = replaced {
            m.insert("replacedSessionId".into(), json!(r.acpx_record_id));
        }
        ctx.out.json(&action("session_ensured", m));
        return;
    }
    if !ctx.out.is_text() {
        ctx.out.line(record.acpx_record_id.as_str());
        return;
    }
    let verb = if created { "created" } else { "found" };
    let where_ = match ctx.backend {
        crate::config::Backend::Fs => ctx
            .home
            .join("sessions")
            .join(format!("{}.json", record.acpx_record_id))
            .display()
            .to_string(),
        crate::config::Backend::Sqlite => format!(
            "{} (sessions row {})",
            crate::backends::sqlite_path(&ctx.home).display(),
            record.acpx_record_id
        ),
    };
    ctx.out.line(&format!(
        "{verb} session {}{} for agent {} in {}",
        record.acpx_record_id,
        record
            .name
            .as_deref()
            .map(|n| format!(" ({n})"))
            .unwrap_or_default(),
        ctx.agent.label(),
        record.cwd
    ));
    ctx.out.line(&format!("  stored in {where_}"));
    if let Some(r) = replaced {
        ctx.out.line(&format!(
            "  closed the previous session {}",
            r.acpx_record_id
        ));
    }
}

/// `sessions new`: creates a session (or, with `--resume-session`, attaches a new record to
/// an ACP session the agent already has), then closes the other open sessions of the same
/// scope. Creating first means a failure leaves the old session usable.
pub async fn new_session(ctx: &Ctx, a: NewArgs) -> CliResult<()> {
    let name = a.name.as_deref();
    let _scope = runs::lock_scope(
        &ctx.home,
        &ctx.agent.command,
        &ctx.cwd.to_string_lossy(),
        name,
    )
    .await?;
    let store = ctx.store().await?;
    let previous = open_in_exact_scope(ctx, name).await?;
    let record = match &a.resume_session {
        Some(acp_id) => resume_session(ctx, acp_id, name).await?,
        None => create_session(ctx, name).await?,
    };
    let mut replaced = None;
    for old in previous {
        if runs::request_cancel(&ctx.home, &old.acpx_record_id)?.is_some() {
            ctx.out.note(&format!(
                "[acpx] cancelled the prompt running in {}",
                old.acpx_record_id
            ));
            runs::wait_idle(&ctx.home, &old.acpx_record_id, Duration::from_secs(30)).await?;
        }
        let closed = scope::close_with_retry(&*store, &old).await?;
        replaced = Some(closed);
    }
    print_ensured(ctx, &record, true, replaced.as_ref());
    Ok(())
}

/// A new record for the ACP session `acp_id` that the agent already has: the record id is
/// that id when it is usable and free (as Node acpx does), else a fresh one. The agent must
/// resume or load it; if it cannot (it would start a fresh session instead), the record is
/// removed again and nothing is created.
async fn resume_session(ctx: &Ctx, acp_id: &str, name: Option<&str>) -> CliResult<SessionRecord> {
    if acp_id.trim().is_empty() {
        return Err(CliError::usage("--resume-session needs an ACP session id"));
    }
    let store = ctx.store().await?;
    let record = scope::create_resume_record(
        &*store,
        acp_id,
        &ctx.agent.command,
        &ctx.cwd.to_string_lossy(),
        name,
    )
    .await?;
    let id = record.acpx_record_id.clone();
    let runtime = Runtime::new(store.clone(), runtime_options(ctx, None));
    let interrupts = Interrupts::start(None, None, &ctx.out);
    let attached = match open_existing(ctx, &runtime, &id, &interrupts).await {
        Ok(session) => {
            let attachment = session.attachment().clone();
            let shut = session.shutdown().await.map_err(|e| runtime_error(ctx, e));
            match (attachment, shut) {
                (Attachment::Reattached { .. }, Ok(r)) => Ok(r),
                (Attachment::Reattached { .. }, Err(e)) => Err(e),
                (Attachment::Fallback { reason, .. }, _) => Err(CliError::new(
                    ErrorKind::NoSession,
                    format!("the agent could not resume ACP session {acp_id:?} ({reason}); no session was created"),
                )),
                (Attachment::Created, _) => Err(CliError::runtime(format!(
                    "the agent did not attach ACP session {acp_id:?}; no session was created"
                ))),
            }
        }
        Err(e) => Err(e),
    };
    match attached {
        Ok(r) => Ok(r),
        Err(e) => {
            let _ = store.delete(&id).await;
            Err(e.with_hint(
                "check the id (the agent's own session list), and that the agent supports session/resume or session/load",
            ))
        }
    }
}

/// `sessions ensure`: the scope's session (directory walk), created when there is none.
/// Idempotent, also when several run at once (they serialize on the scope lock).
pub async fn ensure(ctx: &Ctx, a: EnsureArgs) -> CliResult<()> {
    let name = a.name.as_deref();
    let _scope = runs::lock_scope(
        &ctx.home,
        &ctx.agent.command,
        &ctx.cwd.to_string_lossy(),
        name,
    )
    .await?;
    let store = ctx.store().await?;
    if let Some(found) = find_in_scope(&*store, &ctx.agent.command, &ctx.cwd, name).await? {
        let record = store.load(&found.acpx_record_id).await?;
        print_ensured(ctx, &record, false, None);
        return Ok(());
    }
    let record = create_session(ctx, name).await?;
    print_ensured(ctx, &record, true, None);
    Ok(())
}
