//! Which Agent message new content goes to: the last one, unless the agent started another
//! (a new ACP `messageId`) or text follows a finished tool call; then a new one (see
//! `messages.rs`'s module docs for the rule and why).

use acpx_model::{AgentContent, AgentMessage, Message, SessionRecord};
use serde_json::Value;

use super::MESSAGE_ID_KEY;

/// The Agent message new content goes to, starting one when needed (see the module docs).
pub(super) fn current_agent_message<'r>(
    record: &'r mut SessionRecord,
    message_id: Option<&str>,
    is_text: bool,
) -> &'r mut AgentMessage {
    let start_new = match record.thread.messages.last() {
        Some(Message::Agent(m)) => {
            let id_changed = match (
                message_id,
                m.extra.get(MESSAGE_ID_KEY).and_then(Value::as_str),
            ) {
                (Some(new), Some(old)) => new != old,
                _ => false,
            };
            let after_finished_tool = is_text
                && m.content.iter().any(
                    |c| matches!(c, AgentContent::ToolUse(t) if m.tool_results.contains_key(&t.id)),
                );
            id_changed || after_finished_tool
        }
        _ => true,
    };
    if start_new {
        record
            .thread
            .messages
            .push(Message::Agent(AgentMessage::new()));
    }
    let Some(Message::Agent(msg)) = record.thread.messages.last_mut() else {
        unreachable!("an Agent message was just ensured at the end of the thread")
    };
    if let Some(id) = message_id {
        msg.extra
            .entry(MESSAGE_ID_KEY)
            .or_insert_with(|| Value::String(id.to_owned()));
    }
    msg
}
