//! `sessions usage` for people: the tokens and cost the agents reported, one row per group
//! and a Total row, as an aligned table ([`crate::table`]). The sums are
//! `acpx_runtime::ops::usage`'s; the JSON form is the report itself.

use acpx_model::usage::{
    context_text, costs_text, thousands, UsageGrouping, UsageReport, UsageRow, UsageTotals,
};

use crate::table::{self, Align};

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
