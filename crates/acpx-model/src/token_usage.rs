//! Token counts of the agent's requests ([`TokenUsage`]), as `thread.cumulative_token_usage`
//! and `thread.request_token_usage` store them in Zed's shape.

use serde::{Deserialize, Serialize};

/// Token counts. Zed's four fields are always written (`docs/format.md`, Decisions 5); a missing
/// field reads as 0; negative, fractional or non-numeric values are rejected. `thought_tokens`
/// and `total_tokens` are written only when the agent reported them (`docs/format.md`, § Tool
/// calls, diffs, terminals and tokens in the thread); Zed ignores them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TokenUsage {
    /// Input tokens.
    #[serde(default)]
    pub input_tokens: u64,
    /// Output tokens.
    #[serde(default)]
    pub output_tokens: u64,
    /// Input tokens written to the prompt cache.
    #[serde(default)]
    pub cache_creation_input_tokens: u64,
    /// Input tokens read from the prompt cache.
    #[serde(default)]
    pub cache_read_input_tokens: u64,
    /// Reasoning tokens, when the agent reports them (ACP `thoughtTokens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thought_tokens: Option<u64>,
    /// The agent's own total, when it reports one (ACP `totalTokens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_tokens: Option<u64>,
}

impl TokenUsage {
    /// The field-wise sum, saturating at `u64::MAX`.
    pub fn saturating_add(self, o: TokenUsage) -> TokenUsage {
        TokenUsage {
            input_tokens: self.input_tokens.saturating_add(o.input_tokens),
            output_tokens: self.output_tokens.saturating_add(o.output_tokens),
            cache_creation_input_tokens: self
                .cache_creation_input_tokens
                .saturating_add(o.cache_creation_input_tokens),
            cache_read_input_tokens: self
                .cache_read_input_tokens
                .saturating_add(o.cache_read_input_tokens),
            thought_tokens: add_reported(self.thought_tokens, o.thought_tokens),
            total_tokens: add_reported(self.total_tokens, o.total_tokens),
        }
    }
}

/// The sum of two optional counts: absent only when neither side reported one.
fn add_reported(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
    }
}
