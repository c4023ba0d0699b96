//! `migrate --to sqlite|fs|postgres`: copies every session and its whole log from the `--store` backend
//! to the other one with [`acpx_model::migrate::copy_store`], which verifies each copy (event
//! count, last seq, and SHA-256 digests of the log lines and of the snapshot). Run again (after
//! an interruption, or once new sessions appeared), it copies only what the target lacks and
//! reports the identical copies already there; a different one is refused. On a terminal
//! a progress bar (([`crate::progress`])) counts the sessions on stderr.
//!
//! The source is left as it is; after a successful migration, pass `--store <to>` (or set
//! `store` in the config) to use the copy.

use acpx_model::migrate::copy_store_with_progress;
use acpx_printer::failure::migrate_failure;

use crate::cli::MigrateArgs;
use crate::commands::print;
use crate::context::Ctx;
use crate::error::{CliError, CliResult};
use acpx_printer::reports::maintenance as reports;

/// `migrate`.
pub async fn run(ctx: &Ctx, a: MigrateArgs) -> CliResult<()> {
    if a.to == ctx.backend {
        return Err(CliError::usage(format!(
            "--to {} is the backend already in use (--store {})",
            a.to.as_str(),
            ctx.backend.as_str()
        ))
        .with_hint("pick the other backend, or change --store to the source backend"));
    }
    // The owners of both stores let go: the source's save their sessions whole before they
    // are read, and no owner of the target writes a session while its copy is compared.
    crate::commands::runtime_cmds::release_all_owners(ctx).await?;
    crate::commands::runtime_cmds::release_all_owners_of(ctx, a.to).await?;
    let from = ctx.opened().await?;
    let to = crate::backends::open(a.to, &ctx.home, ctx.config.store_url.as_ref(), false).await?;
    let bar = crate::progress::Bar::new(&ctx.out, "migrating");
    let copied = copy_store_with_progress(&*from.as_dyn(), &*to.as_dyn(), &bar).await;
    drop(bar);
    let report = copied.map_err(|e| CliError::from(migrate_failure(e, a.to.as_str())))?;
    let location = to.location(&ctx.home);
    let (from, to) = (ctx.backend.as_str(), a.to.as_str());
    print(ctx, reports::migrated(from, to, &location, &report));
    if !report.skipped.is_empty() {
        return Err(CliError::runtime(format!(
            "{} stored session(s) could not be read and were not copied",
            report.skipped.len()
        ))
        .with_hint("run `acpx fsck` on the source store")
        .reported());
    }
    Ok(())
}
