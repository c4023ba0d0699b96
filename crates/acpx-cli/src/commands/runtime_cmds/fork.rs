//! `sessions fork` (the flow is [`acpx_owner::local::fork`]'s, the record bookkeeping
//! [`acpx_runtime::ops::fork`]'s).

use acpx_model::RecordId;
use acpx_owner::local::{self, Forked};
use acpx_owner::protocol::Request;
use acpx_runtime::Runtime;

use super::{local_error, owned, report_local, runtime_options, sigint_count, WAITING_FOR_PROMPT};
use crate::cli::ForkArgs;
use crate::commands::select;
use crate::context::Ctx;
use crate::error::{CliError, CliResult};
use acpx_printer::results;
use acpx_runtime::ops::fork::FORKED_FROM_KEY;

/// `sessions fork`: a new session that starts from the parent's conversation. With an agent
/// that advertises `session/fork`, the agent forks its own session (it keeps the context);
/// otherwise the new session gets a fresh ACP session and a copy of the stored conversation
/// (the agent starts without the context, which is said). The parent is never changed, and
/// the new session gets a new record id.
pub async fn fork(ctx: &Ctx, a: ForkArgs) -> CliResult<()> {
    let parent = select(ctx, &a.target).await?;
    if parent.closed {
        return Err(CliError::usage(format!(
            "session {} is closed; fork an open session",
            parent.acpx_record_id
        ))
        .with_hint("`acpx sessions export` and `sessions import --new-id` copy a closed session"));
    }
    let store = ctx.store().await?;
    // The parent's queue owner (if any) finishes its queue and lets go of the session.
    owned::release_owner_of(ctx, &parent.acpx_record_id).await?;
    let Forked {
        parent: parent_now,
        child,
    } = if ctx.no_owner {
        let runtime = Runtime::new(store, runtime_options(ctx, None));
        local::fork(
            &runtime,
            ctx.authority()?,
            &parent.acpx_record_id,
            a.name.clone(),
            ctx.timeout,
            sigint_count(),
            |event| report_local(ctx, event, WAITING_FOR_PROMPT),
        )
        .await
        .map_err(|e| local_error(ctx, e))?
    } else {
        // The fork is made in the child's queue owner, which keeps the agent that made it
        // for the child's first turns: some agents keep a fork only in that process until
        // its first turn, and a later process would find nothing to load.
        let child_id = RecordId::generate();
        let request = Request::ForkSession {
            parent_record_id: parent.acpx_record_id.to_string(),
            name: a.name.clone(),
            options: owned::task_options(ctx),
        };
        owned::control(ctx, &child_id, request).await?;
        let child = store.load(&child_id).await.map_err(CliError::from)?;
        let parent_now = store
            .load(&parent.acpx_record_id)
            .await
            .map_err(CliError::from)?;
        if child.acpx.extra[FORKED_FROM_KEY]["method"] == "copy" {
            report_local(ctx, local::LocalEvent::ForkByCopy, WAITING_FOR_PROMPT);
        }
        Forked {
            parent: parent_now,
            child,
        }
    };
    let method = child.acpx.extra[FORKED_FROM_KEY]["method"].clone();
    if ctx.out.is_json() {
        ctx.out.json(&results::session_forked(
            &child,
            &parent_now,
            method.clone(),
        ));
    } else if ctx.out.is_text() {
        ctx.out.line(&format!(
            "forked {} into {} ({} messages, {})",
            parent_now.acpx_record_id,
            child.acpx_record_id,
            child.thread.message_count(),
            method.as_str().unwrap_or_default()
        ));
    } else {
        ctx.out.line(child.acpx_record_id.as_str());
    }
    Ok(())
}
