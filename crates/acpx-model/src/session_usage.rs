//! What one session's agent reported about its token use and cost ([`SessionUsage`]), as
//! every store keeps it in the session's summary (see [`crate::usage`] for how it is derived
//! and for reports over many sessions), and how its figures are written for people.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::session::SessionRecord;
use crate::token_usage::TokenUsage;

/// The `acpx` key of the latest `usage_update` (`used`, `size`, `cost`, `updated_at`).
pub const CONTEXT_USAGE_KEY: &str = "context_usage";

/// A cost as the agent reported it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cost {
    /// The amount, in `currency`.
    pub amount: f64,
    /// The ISO 4217 code the agent gave (`USD`, …).
    pub currency: String,
}

/// A session's usage as its summary keeps it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionUsage {
    /// Whether the agent reported any usage at all (tokens, cost or context).
    #[serde(default)]
    pub reported: bool,
    /// The tokens of all turns, summed (zero when none were reported).
    #[serde(default)]
    pub tokens: TokenUsage,
    /// The session's cumulative cost from the latest `usage_update` that carried one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<Cost>,
    /// Tokens in the context window, from the latest `usage_update`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_used: Option<u64>,
    /// The context window's size, from the latest `usage_update`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_size: Option<u64>,
    /// The model that answered (`thread.model.model`), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

impl SessionUsage {
    /// The usage of `record`, as every store keeps it in the record's summary.
    pub fn of(record: &SessionRecord) -> SessionUsage {
        let context = record
            .acpx
            .extra
            .get(CONTEXT_USAGE_KEY)
            .and_then(Value::as_object);
        let field = |k: &str| context.and_then(|c| c.get(k));
        let cost = field("cost").and_then(cost_from);
        let context_used = field("used").and_then(Value::as_u64);
        let context_size = field("size").and_then(Value::as_u64);
        let tokens = record.thread.cumulative_token_usage;
        SessionUsage {
            reported: tokens != TokenUsage::default()
                || cost.is_some()
                || context_used.is_some()
                || context_size.is_some(),
            tokens,
            cost,
            context_used,
            context_size,
            model: record
                .thread
                .model
                .as_ref()
                .map(|m| m.model.clone())
                .filter(|m| !m.is_empty()),
        }
    }

    /// The compact JSON the database stores keep in their `usage` column.
    pub fn to_json_text(&self) -> String {
        // Numbers, strings and options only: serializing cannot fail.
        serde_json::to_string(self).unwrap_or_else(|_| "{}".into())
    }

    /// Reads [`SessionUsage::to_json_text`] back; the error says what is wrong.
    pub fn from_json_text(text: &str) -> Result<SessionUsage, String> {
        serde_json::from_str(text).map_err(|e| e.to_string())
    }

    /// The total tokens: the agent's own totals where it gave them, else the sum of the
    /// counts (input, output, cache read and write; thought tokens are part of output).
    pub fn total_tokens(&self) -> u64 {
        token_total(&self.tokens)
    }
}

/// `1234567` as `1,234,567`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// An amount with two to four decimals (`0.75`, `0.0123`), then its currency.
pub fn money(amount: f64, currency: &str) -> String {
    let mut a = format!("{amount:.4}");
    while a.ends_with('0') && a.len() > a.find('.').map_or(0, |d| d + 3) {
        a.pop();
    }
    format!("{a} {currency}")
}

/// Costs per currency as one text (`0.75 USD + 2.00 EUR`); `—` when there are none.
pub fn costs_text(costs: &BTreeMap<String, f64>) -> String {
    if costs.is_empty() {
        return "—".into();
    }
    costs
        .iter()
        .map(|(c, a)| money(*a, c))
        .collect::<Vec<_>>()
        .join(" + ")
}

impl SessionUsage {
    /// Readable lines for `acpx status` (two spaces in, labels padded to 18 columns):
    /// tokens, cost and context window use; one line saying so when nothing was reported.
    pub fn status_lines(&self) -> Vec<String> {
        if !self.reported {
            return vec!["  usage:            — (the agent reported none)".into()];
        }
        let t = &self.tokens;
        let mut parts = vec![
            format!("input {}", thousands(t.input_tokens)),
            format!("output {}", thousands(t.output_tokens)),
        ];
        if t.cache_read_input_tokens > 0 || t.cache_creation_input_tokens > 0 {
            parts.push(format!(
                "cache read {}, write {}",
                thousands(t.cache_read_input_tokens),
                thousands(t.cache_creation_input_tokens)
            ));
        }
        if let Some(th) = t.thought_tokens {
            parts.push(format!("thought {}", thousands(th)));
        }
        let mut lines = vec![format!(
            "  tokens:           {} ({})",
            thousands(self.total_tokens()),
            parts.join(", ")
        )];
        lines.push(format!(
            "  cost:             {}",
            self.cost
                .as_ref()
                .map_or_else(|| "—".into(), |c| money(c.amount, &c.currency))
        ));
        if let Some(l) = context_text(self.context_used, self.context_size) {
            lines.push(format!("  context:          {l}"));
        }
        lines
    }
}

/// `12,000 / 200,000 tokens (6%)`, or what of it is known; `None` when nothing is.
pub fn context_text(used: Option<u64>, size: Option<u64>) -> Option<String> {
    match (used, size) {
        (Some(u), Some(s)) if s > 0 => Some(format!(
            "{} / {} tokens ({}%)",
            thousands(u),
            thousands(s),
            u.saturating_mul(100) / s
        )),
        (Some(u), Some(s)) => Some(format!("{} / {} tokens", thousands(u), thousands(s))),
        (Some(u), None) => Some(format!("{} tokens", thousands(u))),
        (None, Some(s)) => Some(format!("? / {} tokens", thousands(s))),
        (None, None) => None,
    }
}

/// The total of one usage: its `total_tokens` when the agent sent one, else the sum of input,
/// output and cache tokens.
pub fn token_total(t: &TokenUsage) -> u64 {
    t.total_tokens.unwrap_or_else(|| {
        t.input_tokens
            .saturating_add(t.output_tokens)
            .saturating_add(t.cache_creation_input_tokens)
            .saturating_add(t.cache_read_input_tokens)
    })
}

/// Reads an ACP `Cost` object (`{amount, currency}`); `None` when it is not one.
pub fn cost_from(v: &Value) -> Option<Cost> {
    let o = v.as_object()?;
    let amount = o.get("amount")?.as_f64()?;
    let currency = o.get("currency")?.as_str()?.trim();
    if !amount.is_finite() || currency.is_empty() {
        return None;
    }
    Some(Cost {
        amount,
        currency: currency.to_owned(),
    })
}
