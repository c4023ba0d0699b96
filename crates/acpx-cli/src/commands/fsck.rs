//! `fsck [--repair]`: checks every stored session with [`acpx_runtime::ops::repair::fsck`]
//! (see there for the checks and repairs) and renders its report. Sessions in use (a queue
//! owner or a one-process prompt, [`acpx_owner::runs::in_use`]) are skipped. On a terminal a progress
//! bar ([`crate::progress`]) counts the sessions on stderr.

use acpx_runtime::ops::repair::{fsck_with_progress, FsckOptions};

use crate::cli::FsckArgs;
use crate::context::Ctx;
use crate::error::{CliError, CliResult};
use crate::output::Style;
use acpx_printer::results;

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
    let problems = &report.problems;
    let checked = report.checked;
    let remaining = report.remaining();
    let repaired = report.repaired();
    let repairable_left = report.repairable_left();
    if ctx.out.is_json() {
        ctx.out.json(&results::fsck(&report));
    } else {
        for p in problems {
            let tag = if p.repaired {
                ctx.out.paint_out(Style::Green, "repaired")
            } else if p.repairable {
                ctx.out.paint_out(Style::Yellow, "repairable")
            } else {
                ctx.out.paint_out(Style::Red, "problem")
            };
            let who = p.acpx_record_id.as_deref().unwrap_or("-");
            ctx.out
                .line(&format!("{tag} {who} {}: {}", p.kind.as_str(), p.message));
            if let Some(act) = &p.action {
                ctx.out.line(&format!("  → {act}"));
            }
        }
        // A skipped session was not checked at all (exit 0 says nothing about it): say how
        // to get it checked. `--repair` releases idle queue owners first (above).
        let how = if a.repair {
            "run fsck again when its prompt is over"
        } else {
            "`acpx fsck --repair` has idle queue owners release their sessions first"
        };
        for b in &report.skipped_busy {
            ctx.out.note(&format!(
                "skipped {b}: in use by a running prompt or its queue owner, not checked"
            ));
        }
        if !report.skipped_busy.is_empty() {
            ctx.out.note(&format!("to check a skipped session: {how}"));
        }
        for s in &report.stale_stages_removed {
            ctx.out
                .note(&format!("removed {}: {}", s.location, s.detail));
        }
        for s in &report.stale_stages {
            ctx.out.note(&format!(
                "left over: {} ({}); not a session, nothing lists it; the next import or \
                 `acpx fsck --repair` removes it",
                s.detail, s.location
            ));
        }
        let skipped = match report.skipped_busy.len() {
            0 => String::new(),
            n => format!(", skipped {n} in use"),
        };
        ctx.out.note(&format!(
            "checked {checked} session(s){skipped}: {} problem(s), {repaired} repaired",
            problems.len()
        ));
    }
    if remaining > 0 {
        // The hint once: on the error (stderr), not also as a note before it.
        let mut e = CliError::runtime(format!("fsck: {remaining} problem(s) remain")).reported();
        if repairable_left {
            e = e.with_hint("run `acpx fsck --repair` to fix the problems marked repairable");
        }
        return Err(e);
    }
    Ok(())
}
