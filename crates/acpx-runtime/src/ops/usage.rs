//! `acpx sessions usage`: the agents' own reports of tokens and cost, summed over sessions.
//!
//! Reads summaries only ([`acpx_model::Store::list`]): every store keeps each session's usage
//! in its summary (`acpx_model::usage`), so a report over 10,000 sessions reads no
//! conversation. The sums and groups are [`UsageReport::build`]'s.

use acpx_model::usage::{UsageFilter, UsageGrouping, UsageReport};
use acpx_model::{ClosedFilter, ListQuery, SessionSummary, SkippedEntry, Store};
use chrono::NaiveDate;

use super::OpsError;

/// A report over every stored session (open and closed), and the entries that could not be
/// read (reported, never silently left out of the sums).
pub async fn report_all(
    store: &dyn Store,
    by: UsageGrouping,
    filter: &UsageFilter,
) -> Result<(UsageReport, Vec<SkippedEntry>), OpsError> {
    let page = store
        .list(&ListQuery {
            closed: ClosedFilter::Any,
            ..ListQuery::default()
        })
        .await?;
    Ok((UsageReport::build(&page.sessions, by, filter), page.skipped))
}

/// A report over one session.
pub fn report_one(
    session: &SessionSummary,
    by: UsageGrouping,
    filter: &UsageFilter,
) -> UsageReport {
    UsageReport::build([session], by, filter)
}

/// Reads a `--since`/`--until` day: `YYYY-MM-DD` or `YYYYMMDD` (ccusage's form), in UTC.
pub fn parse_day(text: &str) -> Result<NaiveDate, String> {
    let t = text.trim();
    NaiveDate::parse_from_str(t, "%Y-%m-%d")
        .or_else(|_| NaiveDate::parse_from_str(t, "%Y%m%d"))
        .map_err(|_| format!("{text:?} is not a day: write YYYY-MM-DD or YYYYMMDD"))
}

/// The days `--since` and `--until` give (each `YYYY-MM-DD` or `YYYYMMDD`), as a filter; an
/// error names the flag, or says that no day lies between them.
pub fn parse_filter(since: Option<&str>, until: Option<&str>) -> Result<UsageFilter, String> {
    let day = |flag: &str, v: Option<&str>| {
        v.map(parse_day)
            .transpose()
            .map_err(|e| format!("{flag}: {e}"))
    };
    let filter = UsageFilter {
        since: day("--since", since)?,
        until: day("--until", until)?,
    };
    if let (Some(s), Some(u)) = (filter.since, filter.until) {
        if s > u {
            return Err(format!(
                "--since {s} is after --until {u}: no day lies between them"
            ));
        }
    }
    Ok(filter)
}

/// Reads a `--by` value.
pub fn parse_grouping(text: &str) -> Result<UsageGrouping, String> {
    match text {
        "session" => Ok(UsageGrouping::Session),
        "agent" => Ok(UsageGrouping::Agent),
        "day" => Ok(UsageGrouping::Day),
        "model" => Ok(UsageGrouping::Model),
        other => Err(format!(
            "{other:?} is not a grouping: use session, agent, day or model"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filter_names_its_flag_and_refuses_an_empty_range() {
        assert!(parse_filter(Some("nope"), None)
            .unwrap_err()
            .starts_with("--since: "));
        assert!(parse_filter(None, Some("x"))
            .unwrap_err()
            .starts_with("--until: "));
        let e = parse_filter(Some("2026-03-02"), Some("2026-03-01")).unwrap_err();
        assert!(e.contains("no day lies between them"), "{e}");
        let f = parse_filter(Some("20260301"), None).unwrap();
        assert_eq!(
            f.since.map(|d| d.to_string()).as_deref(),
            Some("2026-03-01")
        );
    }

    #[test]
    fn days_take_both_forms_and_refuse_others() {
        let d = NaiveDate::from_ymd_opt(2026, 12, 7).unwrap();
        assert_eq!(parse_day("2026-12-07"), Ok(d));
        assert_eq!(parse_day("20261207"), Ok(d));
        let e = parse_day("yesterday").unwrap_err();
        assert!(e.contains("YYYY-MM-DD"), "{e}");
        assert!(parse_day("2026-13-01").is_err());
    }
}
