//! `status`: local health of a session, no ACP call (a running queue owner is asked for its
//! state over its socket). What the state is and how it reads is
//! [`acpx_owner::status`]'s (the facts gathered too); this prints it.

use acpx_owner::status::{self, SessionStatus};
use acpx_printer::failure::flows::status_failure;

use crate::cli::SessionSelect;
use crate::context::Ctx;
use crate::error::{CliError, CliResult};
use crate::lookup::find_in_scope;

/// `status`: local health, no ACP call. Exit 0 whatever the state (it is the answer).
pub async fn status(ctx: &Ctx, a: SessionSelect) -> CliResult<()> {
    let store = ctx.store().await?;
    let found = find_in_scope(&*store, &ctx.agent.command, &ctx.cwd, a.session.as_deref()).await?;
    let status = match found {
        None => SessionStatus::no_session(&ctx.agent.display(), &ctx.cwd),
        Some(found) => status::of_session(&*store, ctx.authority()?, &found.acpx_record_id)
            .await
            .map_err(|e| CliError::from(status_failure(e)))?,
    };
    if ctx.out.is_json() {
        ctx.out.json(&status.to_json());
    } else if !ctx.out.is_text() {
        // quiet: the answer alone, for `[ "$(acpx --format quiet status)" = idle ]`.
        ctx.out.line(status.state.as_str());
    } else {
        for line in status.text_lines() {
            ctx.out.line(&line);
        }
    }
    Ok(())
}
