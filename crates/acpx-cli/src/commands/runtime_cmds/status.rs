//! `status`: local health of a session, no ACP call (a running queue owner is asked for its
//! state over its socket). What the state is and how it reads is
//! [`acpx_owner::status`]'s; this gathers the facts and prints.

use acpx_owner::status::{log_shows_unfinished_turn, SessionStatus};

use crate::cli::SessionSelect;
use crate::context::Ctx;
use crate::error::CliResult;
use crate::lookup::find_in_scope;
use acpx_owner::remote_client;
use acpx_owner::runs;
use acpx_owner::submit::SubmitError;

use super::owned;

/// `status`: local health, no ACP call. Exit 0 whatever the state (it is the answer).
pub async fn status(ctx: &Ctx, a: SessionSelect) -> CliResult<()> {
    let store = ctx.store().await?;
    let found = find_in_scope(&*store, &ctx.agent.command, &ctx.cwd, a.session.as_deref()).await?;
    let status = match found {
        None => SessionStatus::no_session(&ctx.agent.display(), &ctx.cwd),
        Some(found) => {
            let record = store.load(&found.acpx_record_id).await?;
            let remote =
                remote_client::remote_owner(&*store, ctx.authority()?, &found.acpx_record_id)
                    .await
                    .map_err(|e| owned::submit_error(SubmitError::Wire(e)))?;
            match (owned::status(ctx, &record.acpx_record_id).await?, remote) {
                (Some(owner), _) => SessionStatus::of_owner(record, owner),
                (None, Some(lease)) => SessionStatus::of_remote_owner(record, lease),
                (None, None) => {
                    let mut record = record;
                    let mut turn = runs::local_turn(ctx.authority()?, &record)?;
                    if matches!(turn, runs::LocalTurn::Idle) {
                        // Read again: a prompt that ended since the first read saved it.
                        record = store.load(&record.acpx_record_id).await?;
                        if log_shows_unfinished_turn(&*store, &record).await? {
                            turn = runs::LocalTurn::Unfinished;
                        }
                    }
                    SessionStatus::of_local(record, turn)
                }
            }
        }
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
