//! `sessions usage`: the tokens and cost the agents reported, as a table or JSON. The sums
//! are `acpx_runtime::ops::usage`'s; this file only reads arguments and renders.

use acpx_model::usage::{
    context_text, costs_text, thousands, UsageFilter, UsageGrouping, UsageReport, UsageRow,
    UsageTotals,
};
use acpx_runtime::ops::usage as ops;
use serde_json::json;

use crate::cli::{Target, UsageArgs};
use crate::commands::select_summary;
use crate::context::Ctx;
use crate::error::{CliError, CliResult};
use acpx_printer::table::{self, Align};

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

/// The report as a table: one row per group, a Total row; `—` where nothing was reported.
/// Headers in capitals, as every table of the binary (`sessions list`, `config show`).
pub fn usage_table(report: &UsageReport) -> Vec<String> {
    let first = match report.by {
        UsageGrouping::Session => "SESSION",
        UsageGrouping::Agent => "AGENT",
        UsageGrouping::Day => "DATE",
        UsageGrouping::Model => "MODEL",
    };
    let mut header = vec![(first, Align::Left)];
    if report.by != UsageGrouping::Model {
        header.push(("MODELS", Align::Left));
    }
    header.extend([
        ("INPUT", Align::Right),
        ("OUTPUT", Align::Right),
        ("CACHE READ", Align::Right),
        ("CACHE WRITE", Align::Right),
        ("TOTAL TOKENS", Align::Right),
        ("COST", Align::Right),
    ]);
    if report.by == UsageGrouping::Session {
        header.push(("CONTEXT", Align::Left));
    }
    let cells = |first: String, row: Option<&UsageRow>, t: &UsageTotals| {
        let mut out = vec![first];
        if report.by != UsageGrouping::Model {
            out.push(row.map_or_else(String::new, |r| {
                if r.models.is_empty() {
                    "—".into()
                } else {
                    r.models.join(", ")
                }
            }));
        }
        let none = t.reported_sessions == 0;
        let n = |v: u64| if none { "—".into() } else { thousands(v) };
        out.extend([
            n(t.input_tokens),
            n(t.output_tokens),
            n(t.cache_read_tokens),
            n(t.cache_write_tokens),
            n(t.total_tokens),
            costs_text(&t.cost),
        ]);
        if report.by == UsageGrouping::Session {
            out.push(
                row.and_then(|r| r.context)
                    .and_then(|c| context_text(c.used, c.size))
                    .unwrap_or_default(),
            );
        }
        out
    };
    let rows: Vec<Vec<String>> = report
        .rows
        .iter()
        .map(|r| {
            let key = match &r.label {
                Some(l) => format!("{} ({l})", r.key),
                None => r.key.clone(),
            };
            cells(key, Some(r), &r.totals)
        })
        .collect();
    let total = cells(
        format!("Total ({} sessions)", report.totals.sessions),
        None,
        &report.totals,
    );
    table::render(&header, &rows, Some(&total))
}
