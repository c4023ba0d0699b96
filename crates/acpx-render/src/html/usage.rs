//! Tokens and cost: per turn from the prompt response's `usage` and the agent's
//! `usage_update` events (its cost is the session's running total, so a turn's cost is the
//! difference to the total before it), and summed over the session.

use serde_json::Value;

use super::escape::push_escaped;
use super::items::{Cost, Turn};

/// The token counts of a prompt response's `usage`, in the order shown.
pub const TOKEN_KEYS: [(&str, &str); 6] = [
    ("inputTokens", "input"),
    ("outputTokens", "output"),
    ("cachedReadTokens", "cache read"),
    ("cachedWriteTokens", "cache write"),
    ("thoughtTokens", "thought"),
    ("totalTokens", "total"),
];

/// What the whole session adds up to.
#[derive(Debug, Default)]
pub struct Totals {
    /// Turns shown.
    pub turns: u32,
    /// Turns that failed.
    pub failed_turns: u32,
    /// Tool calls.
    pub tool_calls: u64,
    /// Permission questions.
    pub permissions: u64,
    /// Sums of [`TOKEN_KEYS`], `None` where no turn reported the count.
    pub tokens: [Option<u64>; 6],
    /// The agent's latest cumulative cost.
    pub cost: Option<Cost>,
    /// The latest context window use (`used`, `size`).
    pub context: Option<(u64, u64)>,
    /// Events read.
    pub events: u64,
}

/// A token count for people: `1,234,567`.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// An amount of money: `0.0123 USD`.
pub fn money(amount: f64, currency: &str) -> String {
    let digits = if amount.abs() >= 1.0 { 2 } else { 4 };
    format!("{amount:.digits$} {currency}").trim().to_owned()
}

/// The tokens and cost of `turn`, added to `totals`, as spans of its end line.
pub fn push_turn_usage(out: &mut String, turn: &Turn, totals: &mut Totals) {
    let mut parts = Vec::new();
    if let Some(usage) = &turn.usage {
        for (i, (key, name)) in TOKEN_KEYS.iter().enumerate() {
            if let Some(n) = usage.get(*key).and_then(Value::as_u64) {
                totals.tokens[i] = Some(totals.tokens[i].unwrap_or(0) + n);
                parts.push(format!("{} {name}", thousands(n)));
            }
        }
    }
    if let Some(cost) = &turn.cost {
        let spent = match &totals.cost {
            Some(before) if before.currency == cost.currency => cost.amount - before.amount,
            _ => cost.amount,
        };
        parts.push(format!("cost {}", money(spent, &cost.currency)));
        totals.cost = Some(cost.clone());
    }
    if let Some((used, size)) = turn.context {
        parts.push(format!("context {} / {}", thousands(used), thousands(size)));
        totals.context = Some((used, size));
    }
    if !parts.is_empty() {
        out.push_str("<span class=\"usage\"><span class=\"label\">tokens</span>");
        push_escaped(out, &parts.join(" · "));
        out.push_str("</span>");
    }
}

/// The session's totals: a table placed at the end of the page (the script moves it under
/// the header).
pub fn push_summary(out: &mut String, totals: &Totals) {
    out.push_str("<div id=\"summary\"><table>");
    let mut row = |k: &str, v: String| {
        out.push_str("<tr><th>");
        push_escaped(out, k);
        out.push_str("</th><td>");
        push_escaped(out, &v);
        out.push_str("</td></tr>");
    };
    let failed = if totals.failed_turns > 0 {
        format!(" ({} failed)", totals.failed_turns)
    } else {
        String::new()
    };
    row("turns", format!("{}{failed}", totals.turns));
    row("tool calls", totals.tool_calls.to_string());
    row("permission questions", totals.permissions.to_string());
    let tokens: Vec<String> = TOKEN_KEYS
        .iter()
        .zip(totals.tokens)
        .filter_map(|((_, name), n)| Some(format!("{} {name}", thousands(n?))))
        .collect();
    row(
        "tokens",
        if tokens.is_empty() {
            "not reported by the agent".to_owned()
        } else {
            tokens.join(" · ")
        },
    );
    row(
        "cost",
        totals
            .cost
            .as_ref()
            .map_or("not reported by the agent".to_owned(), |c| {
                money(c.amount, &c.currency)
            }),
    );
    if let Some((used, size)) = totals.context {
        row(
            "context",
            format!("{} / {} tokens", thousands(used), thousands(size)),
        );
    }
    row("events", thousands(totals.events));
    out.push_str("</table></div>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_well() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(1234567), "1,234,567");
        assert_eq!(money(0.01, "USD"), "0.0100 USD");
        assert_eq!(money(12.5, "EUR"), "12.50 EUR");
    }
}
