//! `sessions usage`: the tokens and cost the agents reported, as a table or JSON. The sums
//! are `acpx_runtime::ops::usage`'s; this file only reads arguments and renders.

use acpx_model::usage::UsageFilter;
use acpx_runtime::ops::usage as ops;
use serde_json::json;

use crate::cli::{Target, UsageArgs};
use crate::commands::select_summary;
use crate::context::Ctx;
use crate::error::{CliError, CliResult};
use acpx_printer::usage::usage_table;

/// `sessions usage [SESSION] [--by …] [--since DAY] [--until DAY]`.
pub async fn usage(ctx: &Ctx, a: UsageArgs) -> CliResult<()> {
    let by = ops::parse_grouping(&a.by).map_err(|e| CliError::usage(format!("--by: {e}")))?;
    let day = |flag: &str, v: &Option<String>| {
        v.as_deref()
            .map(ops::parse_day)
            .transpose()
            .map_err(|e| CliError::usage(format!("{flag}: {e}")))
    };
    let filter = UsageFilter {
        since: day("--since", &a.since)?,
        until: day("--until", &a.until)?,
    };
    if let (Some(s), Some(u)) = (filter.since, filter.until) {
        if s > u {
            return Err(CliError::usage(format!(
                "--since {s} is after --until {u}: no day lies between them"
            )));
        }
    }
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
    if ctx.out.is_json() {
        ctx.out
            .json(&json!({"action": "sessions_usage", "report": report}));
        return Ok(());
    }
    if !ctx.out.is_text() {
        for row in &report.rows {
            ctx.out.line(&row.key);
        }
        return Ok(());
    }
    if report.rows.is_empty() {
        let filtered = filter.since.is_some() || filter.until.is_some();
        ctx.out.note(if filtered {
            "no sessions in that range"
        } else {
            "no sessions"
        });
        return Ok(());
    }
    ctx.out.lines(usage_table(&report));
    Ok(())
}
