//! What a session's agent reported about its token use and cost, and reports summed over
//! sessions (`acpx sessions usage`).
//!
//! Every store keeps a [`SessionUsage`] (`session_usage`) in each [`crate::SessionSummary`], derived from the
//! record at every save: the thread's `cumulative_token_usage` (the sum of the turns' usage,
//! from the prompt responses' `usage` and token counts in `usage_update`'s `_meta`) and the
//! latest `usage_update` (`acpx.context_usage`: `used`, `size`, `cost`, which ACP defines as
//! the session's cumulative cost). A report over many sessions then reads summaries only, never
//! a conversation. A session without any report has a usage of zero with `reported: false`,
//! never a missing value.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use crate::session_usage::{
    context_text, cost_from, costs_text, money, thousands, token_total, Cost, SessionUsage,
    CONTEXT_USAGE_KEY,
};
use crate::summary::SessionSummary;
use crate::time::Timestamp;

/// How a usage report groups sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UsageGrouping {
    /// One row per session.
    Session,
    /// One row per agent command.
    Agent,
    /// One row per UTC day of the session's last prompt (its creation when it has none).
    Day,
    /// One row per model (`unknown` when the agent never named one).
    Model,
}

impl UsageGrouping {
    /// Its name on the command line and in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            UsageGrouping::Session => "session",
            UsageGrouping::Agent => "agent",
            UsageGrouping::Day => "day",
            UsageGrouping::Model => "model",
        }
    }
}

/// Token counts and costs summed over some sessions.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageTotals {
    /// Sessions summed.
    pub sessions: u64,
    /// Of them, those whose agent reported any usage.
    pub reported_sessions: u64,
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Input tokens read from the prompt cache.
    pub cache_read_tokens: u64,
    /// Input tokens written to the prompt cache.
    pub cache_write_tokens: u64,
    /// Reasoning tokens.
    pub thought_tokens: u64,
    /// Total tokens (see [`token_total`]).
    pub total_tokens: u64,
    /// Cost per currency code: amounts in different currencies are never added together.
    pub cost: BTreeMap<String, f64>,
}

impl UsageTotals {
    /// Adds one session's usage.
    pub fn add(&mut self, u: &SessionUsage) {
        self.sessions += 1;
        self.reported_sessions += u64::from(u.reported);
        let t = &u.tokens;
        self.input_tokens = self.input_tokens.saturating_add(t.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(t.output_tokens);
        self.cache_read_tokens = self
            .cache_read_tokens
            .saturating_add(t.cache_read_input_tokens);
        self.cache_write_tokens = self
            .cache_write_tokens
            .saturating_add(t.cache_creation_input_tokens);
        self.thought_tokens = self
            .thought_tokens
            .saturating_add(t.thought_tokens.unwrap_or(0));
        self.total_tokens = self.total_tokens.saturating_add(token_total(t));
        if let Some(c) = &u.cost {
            *self.cost.entry(c.currency.clone()).or_insert(0.0) += c.amount;
        }
    }
}

/// One row of a usage report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageRow {
    /// The group's key: a record id, an agent command, a `YYYY-MM-DD` day or a model.
    pub key: String,
    /// For a row per session: its name or title, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// For a row per session: its context window use (`used`, `size`) when reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<ContextUse>,
    /// Whether any session of the group reported usage: `false` means its zeros are
    /// "nothing reported", not "nothing used".
    pub reported: bool,
    /// The models seen in the group, sorted.
    pub models: Vec<String>,
    /// The sums.
    #[serde(flatten)]
    pub totals: UsageTotals,
}

/// A context window's use.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ContextUse {
    /// Tokens in the window.
    pub used: Option<u64>,
    /// The window's size.
    pub size: Option<u64>,
}

/// Which sessions a report sums: those whose day (see [`UsageGrouping::Day`]) lies within
/// `since..=until`, both `YYYY-MM-DD` in UTC.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UsageFilter {
    /// The first day included.
    pub since: Option<chrono::NaiveDate>,
    /// The last day included.
    pub until: Option<chrono::NaiveDate>,
}

/// A usage report: rows in key order (sessions most recent first) and their total.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageReport {
    /// How rows group sessions.
    pub by: UsageGrouping,
    /// The rows.
    pub rows: Vec<UsageRow>,
    /// All rows summed.
    pub totals: UsageTotals,
}

/// The day a session counts for: the UTC date of its last prompt, else of its creation.
pub fn session_day(s: &SessionSummary) -> chrono::NaiveDate {
    let at: Timestamp = s.last_prompt_at.unwrap_or(s.created_at);
    at.as_datetime().date_naive()
}

impl UsageReport {
    /// Sums `sessions` (in the store's list order, most recent first) grouped `by`, keeping
    /// those `filter` admits.
    pub fn build<'a>(
        sessions: impl IntoIterator<Item = &'a SessionSummary>,
        by: UsageGrouping,
        filter: &UsageFilter,
    ) -> UsageReport {
        let mut rows: Vec<UsageRow> = Vec::new();
        let mut index: BTreeMap<String, usize> = BTreeMap::new();
        let mut totals = UsageTotals::default();
        for s in sessions {
            let day = session_day(s);
            if filter.since.is_some_and(|d| day < d) || filter.until.is_some_and(|d| day > d) {
                continue;
            }
            let u = &s.usage;
            let key = match by {
                UsageGrouping::Session => s.acpx_record_id.as_str().to_owned(),
                UsageGrouping::Agent => s.agent_command.clone(),
                UsageGrouping::Day => day.format("%Y-%m-%d").to_string(),
                UsageGrouping::Model => u.model.clone().unwrap_or_else(|| "unknown".into()),
            };
            let i = *index.entry(key.clone()).or_insert_with(|| {
                rows.push(UsageRow {
                    key,
                    label: None,
                    context: None,
                    reported: false,
                    models: Vec::new(),
                    totals: UsageTotals::default(),
                });
                rows.len() - 1
            });
            let row = &mut rows[i];
            if by == UsageGrouping::Session {
                row.label = s.name.clone().or_else(|| s.title.clone());
                row.context =
                    (u.context_used.is_some() || u.context_size.is_some()).then_some(ContextUse {
                        used: u.context_used,
                        size: u.context_size,
                    });
            }
            if let Some(m) = &u.model {
                if let Err(at) = row.models.binary_search(m) {
                    row.models.insert(at, m.clone());
                }
            }
            row.totals.add(u);
            row.reported |= u.reported;
            totals.add(u);
        }
        if by != UsageGrouping::Session {
            rows.sort_by(|a, b| a.key.cmp(&b.key));
        }
        UsageReport { by, rows, totals }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{NewSession, RecordId, SessionRecord, TokenUsage};
    use serde_json::{json, Value};

    fn record(id: &str, tokens: Option<(u64, u64)>, cost: Option<Value>) -> SessionRecord {
        let mut r = SessionRecord::new(
            NewSession {
                acpx_record_id: RecordId::parse(id).unwrap(),
                acp_session_id: id.into(),
                agent_session_id: None,
                agent_command: "agent".into(),
                cwd: "/repo".into(),
                name: None,
            },
            Timestamp::from_millis(1_780_000_000_000).unwrap(),
        );
        if let Some((i, o)) = tokens {
            r.thread.cumulative_token_usage = TokenUsage {
                input_tokens: i,
                output_tokens: o,
                ..TokenUsage::default()
            };
        }
        if let Some(c) = cost {
            r.acpx.extra.insert(
                CONTEXT_USAGE_KEY.into(),
                json!({"used": 10, "size": 100, "cost": c}),
            );
        }
        r
    }

    #[test]
    fn numbers_and_money_read_well() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(1234567), "1,234,567");
        assert_eq!(money(0.75, "USD"), "0.75 USD");
        assert_eq!(money(0.0123, "USD"), "0.0123 USD");
        assert_eq!(money(2.0, "EUR"), "2.00 EUR");
        assert_eq!(
            context_text(Some(10), Some(100)).unwrap(),
            "10 / 100 tokens (10%)"
        );
    }

    #[test]
    fn a_session_without_reports_is_zero_and_says_so() {
        let u = SessionUsage::of(&record("a", None, None));
        assert!(!u.reported);
        assert_eq!(u.total_tokens(), 0);
        assert_eq!(u.cost, None);
    }

    #[test]
    fn costs_are_summed_per_currency_and_tokens_across_sessions() {
        let sessions: Vec<_> = [
            record(
                "a",
                Some((10, 5)),
                Some(json!({"amount": 0.5, "currency": "USD"})),
            ),
            record(
                "b",
                Some((1, 1)),
                Some(json!({"amount": 0.25, "currency": "USD"})),
            ),
            record("c", None, Some(json!({"amount": 2.0, "currency": "EUR"}))),
            record("d", None, Some(json!({"amount": "NaN", "currency": "USD"}))),
            record("e", None, None),
        ]
        .iter()
        .map(SessionRecord::summary)
        .collect();
        let report = UsageReport::build(&sessions, UsageGrouping::Session, &UsageFilter::default());
        assert_eq!(report.rows.len(), 5);
        assert_eq!(report.totals.input_tokens, 11);
        assert_eq!(report.totals.total_tokens, 17);
        assert_eq!(report.totals.cost.get("USD"), Some(&0.75));
        assert_eq!(report.totals.cost.get("EUR"), Some(&2.0));
        assert_eq!(
            report.totals.reported_sessions, 4,
            "d reported a context only"
        );
        let by_agent = UsageReport::build(&sessions, UsageGrouping::Agent, &UsageFilter::default());
        assert_eq!(by_agent.rows.len(), 1);
        assert_eq!(by_agent.rows[0].totals.sessions, 5);
        let day = session_day(&sessions[0]);
        let none = UsageReport::build(
            &sessions,
            UsageGrouping::Day,
            &UsageFilter {
                since: day.succ_opt(),
                until: None,
            },
        );
        assert!(none.rows.is_empty(), "{none:?}");
    }
}
