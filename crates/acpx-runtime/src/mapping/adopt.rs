//! A session adopted from the agent (`acpx sessions adopt`): the conversation the agent
//! replays while `session/load` attaches it becomes the record's thread.
//!
//! The log of an adoption (docs/format.md § Adopting a session the agent made elsewhere):
//!
//! 1. `lifecycle_event` `session_adopted` — the identity and setup keys of
//!    `session_created` (`acpSessionId`, `agentSessionId`, `modes`, `configOptions`,
//!    `mcpServers`, `additionalDirectories`, `agentCommand`, `cwd`, `name`) and `method`
//!    (`session/load` or `session/resume`). Sets them as `session_created` does, keeps
//!    `acpx.adopted` (`{acpSessionId, method, adoptedAt}`) and opens the replay:
//!    `acpx.adopting` is `true`;
//! 2. the agent's replay, one `session_update` event per notification, exactly as received;
//!    while `acpx.adopting` is set they are mapped as a turn's are (agent text, thoughts, tool
//!    calls, plans), and a `user_message_chunk` builds a `User` message: consecutive chunks
//!    go into one message (a new one when the chunk's `messageId` changes), whose id is the
//!    chunk's `messageId`, else `adopted-user-<seq>` (the seq of its first chunk);
//! 3. `lifecycle_event` `adoption_replayed` — `replayedUpdates` (how many updates the replay
//!    had). Closes the replay: `acpx.adopting` is removed, `replayedUpdates` goes into
//!    `acpx.adopted`, and a tool call the replay left open gets an error result
//!    ([`ToolCallEnd::HistoryEnded`]).
//!
//! Anything else that ends the replay first (a `prompt_started`: the log of an adoption that
//! was cut short) closes it the same way, so a later turn is never mapped as history.

use acpx_model::{EventEnvelope, Message, SessionRecord, Timestamp, UserContent, UserMessage};
use serde_json::{json, Map, Value};

use super::tool_calls::flush_open_tool_uses;
use super::tool_content::ToolCallEnd;
use super::user_content::user_content_from_block;
use super::{Effect, MESSAGE_ID_KEY};

/// `acpx` key set while an adoption's replayed history is being recorded.
pub const ADOPTING_KEY: &str = "adopting";
/// `acpx` key of an adopted session: `{acpSessionId, method, adoptedAt, replayedUpdates}`.
pub const ADOPTED_KEY: &str = "adopted";

/// Whether the replayed history of an adoption is being recorded.
pub fn is_adopting(record: &SessionRecord) -> bool {
    record.acpx.extra.get(ADOPTING_KEY) == Some(&Value::Bool(true))
}

/// `session_adopted`: opens the replay (the identity keys are applied by the caller, as for
/// `session_created`).
pub(super) fn open_replay(record: &mut SessionRecord, extra: &Map<String, Value>, at: Timestamp) {
    let mut adopted = Map::new();
    for key in ["acpSessionId", "method"] {
        if let Some(v) = extra.get(key) {
            adopted.insert(key.into(), v.clone());
        }
    }
    adopted.insert("adoptedAt".into(), json!(at));
    record
        .acpx
        .extra
        .insert(ADOPTED_KEY.into(), Value::Object(adopted));
    record
        .acpx
        .extra
        .insert(ADOPTING_KEY.into(), Value::Bool(true));
}

/// `adoption_replayed` (and anything else that ends a replay): closes it.
pub(super) fn close_replay(
    record: &mut SessionRecord,
    replayed: Option<&Value>,
    at: Timestamp,
) -> Effect {
    if record.acpx.extra.remove(ADOPTING_KEY).is_none() {
        return Effect::ignored("no adoption replay is open");
    }
    flush_open_tool_uses(record, at, &ToolCallEnd::HistoryEnded);
    if let (Some(n), Some(Value::Object(adopted))) =
        (replayed, record.acpx.extra.get_mut(ADOPTED_KEY))
    {
        adopted.insert("replayedUpdates".into(), n.clone());
    }
    Effect::Applied
}

/// A replayed `user_message_chunk`: into the thread's last `User` message when it is the one
/// the chunk continues, else a new one.
pub(super) fn apply_user_chunk(
    record: &mut SessionRecord,
    update: &Map<String, Value>,
    event: &EventEnvelope,
    at: Timestamp,
) -> Effect {
    let Some(content) = update.get("content").filter(|c| c.is_object()) else {
        return Effect::ignored("user_message_chunk without content");
    };
    let message_id = update.get("messageId").and_then(Value::as_str);
    let item = user_content_from_block(content);
    let continues = match record.thread.messages.last() {
        Some(Message::User(m)) => {
            m.extra.contains_key(ADOPTED_KEY)
                && match (
                    message_id,
                    m.extra.get(MESSAGE_ID_KEY).and_then(Value::as_str),
                ) {
                    (Some(new), Some(old)) => new == old,
                    (None, None) => true,
                    _ => false,
                }
        }
        _ => false,
    };
    if continues {
        if let Some(Message::User(m)) = record.thread.messages.last_mut() {
            match (m.content.last_mut(), item) {
                (Some(UserContent::Text(t)), UserContent::Text(more)) => t.push_str(&more),
                (_, item) => m.content.push(item),
            }
        }
    } else {
        let mut extra = Map::new();
        // Marks a message rebuilt from the agent's replay (and lets the next chunk join it).
        extra.insert(ADOPTED_KEY.into(), Value::Bool(true));
        if let Some(id) = message_id {
            extra.insert(MESSAGE_ID_KEY.into(), json!(id));
        }
        record.thread.messages.push(Message::User(UserMessage {
            id: message_id.map_or_else(|| format!("adopted-user-{}", event.seq), str::to_owned),
            content: vec![item],
            extra,
        }));
    }
    record.thread.updated_at = at;
    Effect::Applied
}
