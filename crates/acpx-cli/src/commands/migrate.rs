//! `migrate --to sqlite|fs|postgres`: copies every session and its whole log from the `--store` backend
//! to the other one with [`acpx_model::migrate::copy_store`], which verifies each copy (event
//! count, last seq, and SHA-256 digests of the log lines and of the snapshot). Run again (after
//! an interruption, or once new sessions appeared), it copies only what the target lacks and
//! reports the identical copies already there; a different one is refused. On a terminal
//! a progress bar ([`crate::progress`]) counts the sessions on stderr.
//!
//! The source is left as it is; after a successful migration, pass `--store <to>` (or set
//! `store` in the config) to use the copy.

use acpx_model::migrate::copy_store_with_progress;

use crate::cli::MigrateArgs;
use crate::context::Ctx;
use crate::error::{CliError, CliResult};
use acpx_printer::results;

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
    let report = copied.map_err(|e| {
        // Only a session found differing before the copy began means nothing was written; a
        // plain `AlreadyExists` can come from a batch after earlier ones were written.
        let differing = matches!(e, acpx_model::StoreError::AlreadyExistsDiffering { .. });
        let mut err = CliError::from(e);
        if differing {
            // Never advise removing the source's session: the target's may be a copy that an
            // interrupted run cut short, and the source's then the only whole one.
            err = err.with_hint(format!(
                "the {} store already holds that session and it is not an identical copy \
                 (a copy an interrupted run cut short, or a different session with the same \
                 id); nothing was written. Compare the two (`acpx --store {} sessions show \
                 <id>`), remove the {} store's copy once it is not needed, and run migrate \
                 again",
                a.to.as_str(),
                a.to.as_str(),
                a.to.as_str()
            ));
        }
        err
    })?;
    let events: u64 = report.sessions.iter().map(|s| s.events).sum();
    for s in &report.skipped {
        ctx.out.warn(&format!(
            "not copied: {}: {} (run `acpx fsck`)",
            s.location, s.reason
        ));
    }
    if ctx.out.is_json() {
        let (from, to_name) = (ctx.backend.as_str(), a.to.as_str());
        let location = to.location(&ctx.home);
        ctx.out
            .json(&results::migrated(from, to_name, &location, &report));
    } else if ctx.out.is_text() {
        for s in &report.sessions {
            let trimmed = if s.trimmed {
                "; older events had been removed by retention, the retained part was copied"
            } else {
                ""
            };
            ctx.out.line(&format!(
                "copied {} ({} events, seq {}..{}{trimmed}), verified",
                s.acpx_record_id, s.events, s.first_seq, s.last_seq
            ));
        }
        for id in &report.recopied {
            ctx.out.line(&format!(
                "copied {id} again: the target held an unfinished copy of it (an earlier run \
                 stopped before its last save)"
            ));
        }
        for s in &report.already_copied {
            ctx.out.line(&format!(
                "already copied {} ({} events, seq {}..{}), verified identical",
                s.acpx_record_id, s.events, s.first_seq, s.last_seq
            ));
        }
        let trimmed = report.sessions.iter().filter(|s| s.trimmed).count();
        let trimmed = if trimmed > 0 {
            format!(" ({trimmed} with a log trimmed by retention)")
        } else {
            String::new()
        };
        ctx.out.line(&format!(
            "migrated {} session(s){trimmed}, {events} event(s) from {} to {} ({}), {} already copied; use --store {} to work with the copy",
            report.sessions.len(),
            ctx.backend.as_str(),
            a.to.as_str(),
            to.location(&ctx.home),
            report.already_copied.len(),
            a.to.as_str()
        ));
    } else {
        ctx.out.line(&report.sessions.len().to_string());
    }
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
