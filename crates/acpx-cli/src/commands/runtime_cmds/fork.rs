//! `sessions fork` (the flow is [`acpx_owner::drive::Driver::fork`]'s, the record
//! bookkeeping [`acpx_runtime::ops::fork`]'s).

use acpx_owner::local::Forked;

use super::{drive_error, driver, report_drive, runtime_options};
use crate::cli::ForkArgs;
use crate::commands::{print, select};
use crate::context::Ctx;
use crate::error::{CliError, CliResult};
use acpx_printer::reports::sessions as reports;

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
    let local = Box::new(|| runtime_options(ctx, None));
    let Forked {
        parent: parent_now,
        child,
    } = driver(ctx, ctx.store().await?, local)?
        .fork(&parent.acpx_record_id, a.name.clone(), |event| {
            report_drive(ctx, event, false)
        })
        .await
        .map_err(|e| drive_error(ctx, e))?;
    print(ctx, reports::forked(&child, &parent_now));
    Ok(())
}
