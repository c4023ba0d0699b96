//! Pruning: deleting closed sessions older than a cutoff (`acpx sessions prune`).
//!
//! Only closed sessions are candidates, optionally only those of one agent command; a
//! session's age is its `closedAt`, or its `lastUsedAt` when that is missing (Node acpx's
//! rule). Before a session is deleted its whole event log can be kept as a private NDJSON
//! file ([`PruneOptions::keep_logs_in`]); a dry run only reports what would go.

use std::path::PathBuf;

use acpx_model::{ClosedFilter, ListQuery, SessionSummary, Store, Timestamp};

use super::transfer::write_log_file;
use super::OpsResult;

/// What to prune.
#[derive(Debug, Clone, Default)]
pub struct PruneOptions {
    /// Only sessions of this agent command; all agents when `None`.
    pub agent_command: Option<String>,
    /// Only sessions that became closed before this instant; every closed session when
    /// `None`.
    pub before: Option<Timestamp>,
    /// Write each pruned session's log to `<dir>/<record id>.events.ndjson` (mode 0600)
    /// before deleting it; delete the log with the session when `None`.
    pub keep_logs_in: Option<PathBuf>,
    /// Report what would be pruned, change nothing.
    pub dry_run: bool,
}

/// A log kept before its session was deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptLog {
    /// The NDJSON file.
    pub path: PathBuf,
    /// How many events it holds.
    pub events: u64,
}

/// A session [`prune`] deleted (or, in a dry run, would delete).
#[derive(Debug, Clone)]
pub struct Pruned {
    /// The session as listed.
    pub session: SessionSummary,
    /// The instant its age was measured from: `closedAt`, else `lastUsedAt`.
    pub closed_at: Timestamp,
    /// Where its log was kept, if it was.
    pub kept_log: Option<KeptLog>,
}

/// The cutoff of `sessions prune`: `--before` (a date or a timestamp) or `--older-than` days
/// before `now`, `None` without either; an error names the flag and what it expects.
pub fn cutoff(
    before: Option<&str>,
    older_than: Option<f64>,
    now: Timestamp,
) -> Result<Option<Timestamp>, CutoffError> {
    match (before, older_than) {
        (Some(b), _) => parse_cutoff(b)
            .map(Some)
            .ok_or_else(|| CutoffError::NotADate(b.to_owned())),
        (None, Some(days)) => days_before(now, days)
            .map(Some)
            .ok_or(CutoffError::BadDays(days)),
        (None, None) => Ok(None),
    }
}

/// A cutoff that is not one.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CutoffError {
    /// `--before` is neither a date nor a timestamp.
    #[error("--before {0:?} is not a date")]
    NotADate(String),
    /// `--older-than` is not a number of days, 0 or more.
    #[error("--older-than {0}: expected a number of days, 0 or more")]
    BadDays(f64),
}

/// A cutoff as a user writes it (acpx's `--before`): an RFC 3339 timestamp, or a date
/// `YYYY-MM-DD` meaning its midnight UTC. `None` when it is neither.
pub fn parse_cutoff(s: &str) -> Option<Timestamp> {
    if let Ok(t) = Timestamp::parse(s) {
        return Some(t);
    }
    let date = chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").ok()?;
    Some(Timestamp::from_datetime(
        date.and_hms_opt(0, 0, 0)?.and_utc(),
    ))
}

/// The instant `days` days before `now`; `None` unless `days` is a finite number, 0 or more.
/// A cutoff before what a timestamp can hold is the Unix epoch (no session is older).
pub fn days_before(now: Timestamp, days: f64) -> Option<Timestamp> {
    if !(days.is_finite() && days >= 0.0) {
        return None;
    }
    let ms = (days * 86_400_000.0) as i64;
    Timestamp::from_millis(now.millis().saturating_sub(ms)).or_else(|| Timestamp::from_millis(0))
}

/// The closed sessions `options` selects (of its agent, closed before its cutoff), in list
/// order. Changes nothing.
pub async fn select(store: &dyn Store, options: &PruneOptions) -> OpsResult<Vec<SessionSummary>> {
    let page = store
        .list(&ListQuery {
            closed: ClosedFilter::Closed,
            agent_command: options.agent_command.clone(),
            ..ListQuery::default()
        })
        .await?;
    // Nobody else reports these here: a damaged closed session is not pruned, and says so.
    for s in &page.skipped {
        tracing::warn!(location = %s.location, reason = %s.reason, "prune skips a session it cannot read (run `acpx fsck`)");
    }
    Ok(page
        .sessions
        .into_iter()
        .filter(|s| s.closed)
        .filter(|s| options.before.is_none_or(|c| closed_at(s) < c))
        .collect())
}

/// Deletes the sessions [`select`] chooses, each after keeping its log when asked; in a dry
/// run only reports them. A failure stops the pruning: the sessions before it are gone.
pub async fn prune(store: &dyn Store, options: &PruneOptions) -> OpsResult<Vec<Pruned>> {
    prune_with_progress(store, options, &acpx_model::progress::NoProgress).await
}

/// [`prune`], telling `progress` about each session deleted (or, in a dry run, chosen).
pub async fn prune_with_progress(
    store: &dyn Store,
    options: &PruneOptions,
    progress: &dyn acpx_model::progress::Progress,
) -> OpsResult<Vec<Pruned>> {
    let mut out = Vec::new();
    let chosen = select(store, options).await?;
    progress.begin(chosen.len() as u64);
    for session in chosen {
        let mut kept_log = None;
        if !options.dry_run {
            if let Some(dir) = &options.keep_logs_in {
                let path = dir.join(format!("{}.events.ndjson", session.acpx_record_id));
                let events = write_log_file(store, &session.acpx_record_id, &path).await?;
                kept_log = Some(KeptLog { path, events });
            }
            store.delete(&session.acpx_record_id).await?;
        }
        progress.advance(session.acpx_record_id.as_str());
        out.push(Pruned {
            closed_at: closed_at(&session),
            session,
            kept_log,
        });
    }
    Ok(out)
}

fn closed_at(s: &SessionSummary) -> Timestamp {
    s.closed_at.unwrap_or(s.last_used_at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cutoff_names_the_flag_that_is_wrong() {
        let now = Timestamp::now();
        assert_eq!(cutoff(None, None, now), Ok(None));
        assert_eq!(
            cutoff(Some("soon"), None, now),
            Err(CutoffError::NotADate("soon".into()))
        );
        assert_eq!(
            cutoff(None, Some(-1.0), now),
            Err(CutoffError::BadDays(-1.0))
        );
        assert!(cutoff(Some("2026-01-01"), None, now).unwrap().is_some());
    }

    #[test]
    fn a_cutoff_is_a_timestamp_or_a_date_at_midnight_utc() {
        let t = parse_cutoff("2026-02-27T12:00:00Z").unwrap();
        assert_eq!(t, Timestamp::parse("2026-02-27T12:00:00Z").unwrap());
        let d = parse_cutoff("2026-02-27").unwrap();
        assert_eq!(d, Timestamp::parse("2026-02-27T00:00:00Z").unwrap());
        assert!(parse_cutoff("yesterday").is_none());
        assert!(parse_cutoff("2026-02-30").is_none());
    }
}
