//! `sessions import --from-node-acpx <dir>`: brings every session of a Node acpx 0.19 home (or
//! of its `sessions/` directory, or of a Node `sessions export` archive) into the store, with
//! [`acpx_runtime::ops::node_import::import_node`]; this renders its report (and a progress
//! bar on a terminal).

use std::io::IsTerminal;
use std::path::Path;

use acpx_runtime::ops::node_import::{import_node, NodeImportOptions};
use acpx_runtime::ops::OpsError;

use crate::commands::print;
use crate::context::Ctx;
use crate::error::{CliError, CliResult};
use acpx_printer::reports::maintenance as reports;

const HOME_HINT: &str = "pass the Node acpx home (usually ~/.acpx) or its sessions/ directory";

/// Homes with fewer record files than this import without a progress bar.
const PROGRESS_MIN_FILES: usize = 20;

/// `sessions import --from-node-acpx`.
pub async fn run(ctx: &Ctx, dir: &Path, new_id: bool, dry_run: bool) -> CliResult<()> {
    let store = ctx.store().await?;
    let options = NodeImportOptions {
        new_id,
        dry_run,
        home: std::env::var_os("HOME").map(Into::into),
    };
    let bar = std::io::stderr()
        .is_terminal()
        .then(indicatif::ProgressBar::hidden);
    let progress = |done: usize, total: usize| {
        if let Some(bar) = bar.as_ref().filter(|_| total >= PROGRESS_MIN_FILES) {
            if bar.is_hidden() {
                bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
                bar.set_length(total as u64);
            }
            bar.set_position(done as u64);
        }
    };
    let report = import_node(&*store, dir, &options, &progress).await;
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    let report = report.map_err(|e| match e {
        OpsError::Invalid(m) => CliError::usage(m).with_hint(HOME_HINT),
        other => other.into(),
    })?;
    // Nothing to import is the error alone, not a report of 0 sessions followed by it.
    if report.files == 0 {
        return Err(CliError::usage(format!(
            "no Node acpx session records found in {}",
            dir.display()
        ))
        .with_hint(HOME_HINT));
    }
    print(ctx, reports::node_imported(dir, dry_run, &report));
    if !ctx.out.is_json() {
        print(ctx, reports::node_import_skipped(dir, dry_run, &report));
    }
    // Sessions already present (an earlier import) and files that are not sessions are not
    // failures: re-running an import is safe.
    let failed = report.failed();
    if failed > 0 {
        return Err(
            CliError::runtime(format!("{failed} file(s) could not be imported")).reported(),
        );
    }
    Ok(())
}
