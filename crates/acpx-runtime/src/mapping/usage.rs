//! Token usage: reading ACP usage objects and keeping per-turn and cumulative counts.

use acpx_model::{SessionRecord, TokenUsage};
use serde_json::Value;

/// Reads an ACP usage object (`inputTokens`, `outputTokens`, `cachedReadTokens`,
/// `cachedWriteTokens`, `thoughtTokens`, `totalTokens`; snake_case spellings are accepted too).
/// `None` when it holds no count.
pub fn token_usage_from(v: &Value) -> Option<TokenUsage> {
    let o = v.as_object()?;
    let get = |camel: &str, snake: &str| {
        o.get(camel)
            .or_else(|| o.get(snake))
            .and_then(Value::as_u64)
    };
    let input = get("inputTokens", "input_tokens");
    let output = get("outputTokens", "output_tokens");
    let cache_read = get("cachedReadTokens", "cache_read_input_tokens");
    let cache_write = get("cachedWriteTokens", "cache_creation_input_tokens");
    let thought = get("thoughtTokens", "thought_tokens");
    let total = get("totalTokens", "total_tokens");
    if [input, output, cache_read, cache_write, thought, total]
        .iter()
        .all(Option::is_none)
    {
        return None;
    }
    Some(TokenUsage {
        input_tokens: input.unwrap_or(0),
        output_tokens: output.unwrap_or(0),
        cache_creation_input_tokens: cache_write.unwrap_or(0),
        cache_read_input_tokens: cache_read.unwrap_or(0),
        thought_tokens: thought,
        total_tokens: total,
    })
}

/// Stores the turn's usage under its user message id (the latest value wins, as in Zed) and
/// recomputes the cumulative usage as the sum over all turns (settled ones included).
pub(super) fn set_request_usage(record: &mut SessionRecord, usage: TokenUsage) {
    let Some(user_id) = record.thread.last_user_message_id().map(str::to_owned) else {
        return;
    };
    record.thread.request_token_usage.insert(user_id, usage);
    record.thread.cumulative_token_usage = record.thread.request_usage_total();
}
