//! `fsck [--repair]`: checks every stored session with [`acpx_runtime::ops::repair::fsck`]
//! (see there for the checks and repairs) and renders its report. Sessions in use (a queue
//! owner or a one-process prompt, [`acpx_owner::runs::in_use`]) are skipped. On a terminal a progress
//! bar (([`crate::progress`])) counts the sessions on stderr.

use acpx_runtime::ops::repair::{fsck_with_progress, FsckOptions};

use crate::cli::FsckArgs;
use crate::commands::{paint_out, print};
use crate::context::Ctx;
use crate::error::{CliError, CliResult};
use acpx_printer::reports::maintenance as reports;

/// `fsck`.
pub async fn run(ctx: &Ctx, a: FsckArgs) -> CliResult<()> {
    if a.repair {
        crate::commands::runtime_cmds::release_all_owners(ctx).await?;
    }
    let opened = ctx.opened().await?;
    let set_aside = |id: &acpx_model::RecordId| opened.set_aside_torn_tail(id);
    let options = FsckOptions {
        repair: a.repair,
        set_aside_torn_tail: Some(&set_aside),
    };
    let bar = crate::progress::Bar::new(&ctx.out, "checking");
    let report = fsck_with_progress(
        opened.as_dyn(),
        options,
        // In use: a one-process prompt, or a queue owner (it saves its snapshot when due and
        // runs the agent the record names; `--repair` released the owners above).
        |id| acpx_owner::runs::in_use(ctx.authority()?, id).map_err(CliError::from),
        &bar,
    )
    .await?;
    drop(bar);
    print(ctx, reports::fsck(&report, a.repair, &paint_out(ctx)));
    match acpx_printer::failure::fsck_failure(&report) {
        Some(f) => Err(f.into()),
        None => Ok(()),
    }
}
