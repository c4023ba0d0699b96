//! The conversation a fork by copy carries to its agent.
//!
//! When the agent cannot fork its own session (it does not advertise `session/fork`, or
//! answers it -32601 as pydantic-acp 1.10.0 does: its SDK refuses the unstable method unless
//! the agent enables it), `sessions fork` makes the child a fresh ACP session with a copy of
//! the stored conversation. The record has the parent's turns, but the agent starts empty,
//! and ACP has no request that hands an agent a conversation. So the child's first prompt
//! carries it: the copied turns (user and agent text, no thinking, no tool calls) go to the
//! agent before the user's text, once. The record keeps the prompt as the user
//! wrote it. "First" is the fork being untouched: its conversation still has exactly the
//! `forked_from.messageCount` messages it was made with (the first turn adds the user's).

use acpx_model::{AgentContent, Message, SessionRecord, UserContent};
use serde_json::{json, Value};

use crate::mapping::FORKED_FROM_KEY;

/// What precedes the copied turns in the first prompt of a fork by copy.
const PREAMBLE: &str = "[This conversation was forked from an earlier one that the agent \
     did not keep; the earlier conversation follows, then the user's new message.]";

/// The copied conversation `record`'s agent has not heard, as the text to send before the
/// next prompt: `Some` only for a fork by copy (`forked_from.method` `copy`) with a
/// non-empty copy and no turn of its own yet. `None` also when the copy cannot be read back
/// (settled messages lost): the prompt then goes as it is, as before this existed.
pub(crate) fn copied_conversation(record: &SessionRecord) -> Option<String> {
    let origin = record.acpx.extra.get(FORKED_FROM_KEY)?;
    if origin.get("method").and_then(Value::as_str) != Some("copy") {
        return None;
    }
    let copied = origin.get("messageCount").and_then(Value::as_u64)?;
    if copied == 0 || copied != record.thread.message_count() as u64 {
        return None;
    }
    let mut text = String::from(PREAMBLE);
    let read = record.thread.try_for_each_message(|_, m| {
        if let Some((who, said)) = said(m) {
            text.push_str("\n\n");
            text.push_str(who);
            text.push_str(": ");
            text.push_str(&said);
        }
        Ok::<(), ()>(())
    });
    matches!(read, Ok(Ok(()))).then(|| {
        text.push_str("\n\n[End of the earlier conversation.]");
        text
    })
}

/// `prompt` with `context` in front: joined to its first block when that is text, else as a
/// text block of its own. Joined, because some agents keep only one text of a user message
/// in the session they store (qwen-code 0.2 resumed the fork's first prompt as the context
/// block alone, without the user's text).
pub(crate) fn with_context(mut prompt: Vec<Value>, context: &str) -> Vec<Value> {
    if let Some(first) = prompt.first_mut() {
        if first.get("type").and_then(Value::as_str) == Some("text") {
            if let Some(text) = first.get("text").and_then(Value::as_str) {
                first["text"] = Value::String(format!("{context}\n\n{text}"));
                return prompt;
            }
        }
    }
    prompt.insert(0, json!({"type": "text", "text": context}));
    prompt
}

/// Who said what in `message`, for the copied conversation: the user's text and mentions,
/// the agent's text; `None` for a message with neither.
fn said(message: &Message) -> Option<(&'static str, String)> {
    let (who, pieces): (&str, Vec<String>) = match message {
        Message::User(u) => (
            "User",
            u.content
                .iter()
                .filter_map(|c| match c {
                    UserContent::Text(t) => Some(t.clone()),
                    UserContent::Mention(m) => Some(m.content.clone()),
                    UserContent::Image(_) => None,
                })
                .collect(),
        ),
        Message::Agent(a) => (
            "Agent",
            a.content
                .iter()
                .filter_map(|c| match c {
                    AgentContent::Text(t) => Some(t.to_text_lossy().into_owned()),
                    _ => None,
                })
                .collect(),
        ),
        Message::Resume => return None,
    };
    let text = pieces.join("\n");
    (!text.trim().is_empty()).then_some((who, text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_context_joins_a_first_text_block() {
        let p = vec![json!({"type": "text", "text": "hi"})];
        assert_eq!(
            with_context(p, "ctx"),
            vec![json!({"type": "text", "text": "ctx\n\nhi"})]
        );
    }

    #[test]
    fn the_context_is_a_block_before_other_blocks() {
        let image = json!({"type": "image", "data": "", "mimeType": "image/png"});
        let p = with_context(vec![image.clone()], "ctx");
        assert_eq!(p, vec![json!({"type": "text", "text": "ctx"}), image]);
        assert_eq!(
            with_context(vec![], "ctx"),
            vec![json!({"type": "text", "text": "ctx"})]
        );
    }
}
