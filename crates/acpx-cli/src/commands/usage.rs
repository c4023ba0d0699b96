//! `sessions usage`: the tokens and cost the agents reported, as a table or JSON. The sums
//! are `acpx_runtime::ops::usage`'s; this file only reads arguments and renders.

use acpx_runtime::ops::usage as ops;

use crate::cli::{Target, UsageArgs};
use crate::commands::print;
use crate::commands::select_summary;
use crate::context::Ctx;
use crate::error::{CliError, CliResult};
use acpx_printer::reports::maintenance as reports;

/// `sessions usage [SESSION] [--by …] [--since DAY] [--until DAY]`.
pub async fn usage(ctx: &Ctx, a: UsageArgs) -> CliResult<()> {
    let by = ops::parse_grouping(&a.by).map_err(|e| CliError::usage(format!("--by: {e}")))?;
    let filter =
        ops::parse_filter(a.since.as_deref(), a.until.as_deref()).map_err(CliError::usage)?;
    let report = match &a.session {
        Some(id) => {
            let target = Target {
                id: Some(id.clone()),
                session: None,
            };
            let summary = select_summary(ctx, &target).await?;
            ops::report_one(&summary, by, &filter)
        }
        None => {
            let store = ctx.store().await?;
            let (report, skipped) = ops::report_all(&*store, by, &filter).await?;
            for s in &skipped {
                ctx.out.warn(&format!(
                    "left out of the sums: {} ({})",
                    s.location, s.reason
                ));
            }
            report
        }
    };
    let filtered = filter.since.is_some() || filter.until.is_some();
    print(ctx, reports::usage(&report, filtered));
    Ok(())
}
