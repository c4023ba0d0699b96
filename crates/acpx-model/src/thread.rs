//! The Zed-shaped conversation snapshot stored as `thread` in `session.json`.
//!
//! Shapes follow Zed's `DbThread` at `"version": "0.3.0"` (see `docs/format.md`): enums are
//! externally tagged with PascalCase tags, struct fields are snake_case, optional values are
//! written as `null`. Unknown keys are kept in `extra` maps so a read-modify-write by this
//! version never drops what a newer writer added.

use indexmap::IndexMap;
use serde::de;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

pub use crate::message::{
    AgentContent, AgentMessage, Image, ImageSize, Mention, Message, ResultContent, Thinking,
    ToolResult, ToolUse, UserContent, UserMessage,
};
use crate::settled::{SettledMessages, SettledStores};
use crate::time::Timestamp;
pub use crate::token_usage::TokenUsage;

/// The only thread version this crate reads or writes.
pub const THREAD_VERSION: &str = "0.3.0";

/// The conversation snapshot.
///
/// The conversation is [`Thread::settled`] then [`Thread::messages`]: a process that lives on
/// between turns (the queue owner) settles its finished turns into spill stores, so its memory
/// does not grow with the session's length; a thread read back has none settled, and every
/// message is in `messages`, unless it was read settling (`crate::Store::load_settling`, or a
/// store made to settle every load, as the `acpx` binary's are). [`Thread::message_count`] counts both, and
/// [`Thread::try_for_each_message`] visits both.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Thread {
    /// Always `0.3.0`.
    pub version: ThreadVersion,
    /// The title; `""` means "no title yet" (Zed's convention). `null` reads as `""`.
    #[serde(default, deserialize_with = "null_as_default")]
    pub title: String,
    /// The conversation's first messages, settled out of memory (see above). Written first
    /// in `thread.messages`; never read from JSON.
    #[serde(skip)]
    pub settled: SettledMessages,
    /// The conversation after the settled messages, oldest first: the whole conversation in a
    /// thread read back.
    pub messages: Vec<Message>,
    /// When the thread last changed.
    pub updated_at: Timestamp,
    /// Zed's longer summary of the thread.
    #[serde(default)]
    pub detailed_summary: Option<String>,
    /// Zed's snapshot of the project when the thread began.
    #[serde(default)]
    pub initial_project_snapshot: Option<Value>,
    /// Token usage summed over the thread.
    #[serde(default)]
    pub cumulative_token_usage: TokenUsage,
    /// Keyed by the id of the `User` message that started the turn. The entries of settled
    /// turns are in [`Thread::settled`] ([`SettledMessages::usage`]), written first.
    #[serde(default)]
    pub request_token_usage: IndexMap<String, TokenUsage>,
    /// The model that answered, when known.
    #[serde(default)]
    pub model: Option<ThreadModel>,
    /// Zed's agent profile.
    #[serde(default)]
    pub profile: Option<String>,
    /// Whether Zed imported the thread.
    #[serde(default)]
    pub imported: bool,
    /// Zed's context of a subagent thread.
    #[serde(default)]
    pub subagent_context: Option<Value>,
    /// The requested speed.
    #[serde(default)]
    pub speed: Option<Speed>,
    /// Whether extended thinking was on.
    #[serde(default)]
    pub thinking_enabled: bool,
    /// The requested thinking effort.
    #[serde(default)]
    pub thinking_effort: Option<String>,
    /// Keys this version does not know (Zed editor state such as `draft_prompt`, or fields of a
    /// newer writer). Kept and written back unchanged.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Thread {
    /// An empty thread, as written for a new session.
    pub fn new(now: Timestamp) -> Self {
        Thread {
            version: ThreadVersion,
            title: String::new(),
            settled: SettledMessages::default(),
            messages: Vec::new(),
            updated_at: now,
            detailed_summary: None,
            initial_project_snapshot: None,
            cumulative_token_usage: TokenUsage::default(),
            request_token_usage: IndexMap::new(),
            model: None,
            profile: None,
            imported: false,
            subagent_context: None,
            speed: None,
            thinking_enabled: false,
            thinking_effort: None,
            extra: Map::new(),
        }
    }

    /// How many messages the conversation holds, settled ones included.
    pub fn message_count(&self) -> usize {
        self.settled.len() + self.messages.len()
    }

    /// Calls `f` with each message of the conversation and its index, settled ones (parsed
    /// back) first; stops at the first error of `f`, which it returns inside. The outer error
    /// is settled messages that could not be read back.
    pub fn try_for_each_message<E>(
        &self,
        mut f: impl FnMut(usize, &Message) -> Result<(), E>,
    ) -> std::io::Result<Result<(), E>> {
        if let Err(e) = self.settled.try_for_each(|i, m| f(i, &m))? {
            return Ok(Err(e));
        }
        let start = self.settled.len();
        Ok(self
            .messages
            .iter()
            .enumerate()
            .try_for_each(|(i, m)| f(start + i, m)))
    }

    /// The conversation's messages from index `start` on: borrowed when none of them is
    /// settled, else read back (settled ones parsed, the others copied).
    pub fn messages_from(&self, start: usize) -> std::io::Result<std::borrow::Cow<'_, [Message]>> {
        let settled = self.settled.len();
        if start >= settled {
            let from = (start - settled).min(self.messages.len());
            return Ok(std::borrow::Cow::Borrowed(&self.messages[from..]));
        }
        let mut out = Vec::with_capacity(self.message_count() - start);
        if let Err(never) = self.settled.try_for_each(|i, m| {
            if i >= start {
                out.push(m);
            }
            Ok::<_, std::convert::Infallible>(())
        })? {
            match never {}
        }
        out.extend(self.messages.iter().cloned());
        Ok(std::borrow::Cow::Owned(out))
    }

    /// Settles the first `count` messages (whole turns that will not change again) into
    /// [`Thread::settled`], with the leading entries of `request_token_usage` up to the first
    /// that belongs to a turn still in memory, and drops them from memory. `stores` gives the settled runs' spill
    /// stores the first time ([`SettledMessages`] says what they hold). All or nothing: on
    /// an error the thread is unchanged.
    pub fn settle(
        &mut self,
        count: usize,
        stores: impl FnOnce() -> std::io::Result<SettledStores>,
    ) -> std::io::Result<()> {
        let count = count.min(self.messages.len());
        // With none settled yet, nothing settles without messages (see
        // `SettledMessages::settle`); after, `count` 0 settles the usage entries alone.
        if count == 0 && self.settled.is_empty() {
            return Ok(());
        }
        // The turns that stay in memory keep their entries (the running turn's is updated in
        // place); the entries before the first of theirs settle, keys of no turn in memory
        // too (an imported thread's), a prefix only, so that the entries keep their order.
        let staying: std::collections::HashSet<&str> = self.messages[count..]
            .iter()
            .filter_map(|m| match m {
                Message::User(u) => Some(u.id.as_str()),
                _ => None,
            })
            .collect();
        let usage_entries = self
            .request_token_usage
            .keys()
            .take_while(|k| !staying.contains(k.as_str()))
            .count();
        self.settled.settle(
            &self.messages[..count],
            &self.request_token_usage,
            usage_entries,
            stores,
        )?;
        self.messages.drain(..count);
        self.request_token_usage.drain(..usage_entries);
        self.messages.shrink_to_fit();
        self.request_token_usage.shrink_to_fit();
        Ok(())
    }

    /// Brings the settled messages and token usage back into `messages` and
    /// `request_token_usage`, read back: the thread as a store reads it. On an error the
    /// thread is unchanged.
    pub fn unsettle(&mut self) -> std::io::Result<()> {
        if self.settled.is_empty() && self.settled.usage_len() == 0 {
            return Ok(());
        }
        let mut messages = self.messages_from(0)?.into_owned();
        let mut usage = self.settled.usage()?;
        usage.extend(self.request_token_usage.drain(..));
        std::mem::swap(&mut self.messages, &mut messages);
        self.request_token_usage = usage;
        self.settled = SettledMessages::default();
        Ok(())
    }

    /// The sum of every turn's token usage, settled turns included: what
    /// `cumulative_token_usage` holds.
    pub fn request_usage_total(&self) -> TokenUsage {
        self.request_token_usage
            .values()
            .fold(self.settled.usage_sum(), |acc, u| acc.saturating_add(*u))
    }

    /// The id of the last `User` message, the key of the turn in progress (the runtime keeps
    /// the last turn in `messages` when it settles the ones before).
    pub fn last_user_message_id(&self) -> Option<&str> {
        self.messages.iter().rev().find_map(|m| match m {
            Message::User(u) => Some(u.id.as_str()),
            _ => None,
        })
    }
}

// Written by hand for `messages`, which holds the settled messages and the others; the bytes
// are what `#[derive(Serialize)]` wrote (a flattened field makes a struct a map).
impl Serialize for Thread {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        struct AllMessages<'a>(&'a Thread);
        impl Serialize for AllMessages<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                self.0.settled.serialize_with(&self.0.messages, s)
            }
        }
        struct AllUsage<'a>(&'a Thread);
        impl Serialize for AllUsage<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                self.0
                    .settled
                    .serialize_usage_with(&self.0.request_token_usage, s)
            }
        }
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("version", &self.version)?;
        map.serialize_entry("title", &self.title)?;
        map.serialize_entry("messages", &AllMessages(self))?;
        map.serialize_entry("updated_at", &self.updated_at)?;
        map.serialize_entry("detailed_summary", &self.detailed_summary)?;
        map.serialize_entry("initial_project_snapshot", &self.initial_project_snapshot)?;
        map.serialize_entry("cumulative_token_usage", &self.cumulative_token_usage)?;
        map.serialize_entry("request_token_usage", &AllUsage(self))?;
        map.serialize_entry("model", &self.model)?;
        map.serialize_entry("profile", &self.profile)?;
        map.serialize_entry("imported", &self.imported)?;
        map.serialize_entry("subagent_context", &self.subagent_context)?;
        map.serialize_entry("speed", &self.speed)?;
        map.serialize_entry("thinking_enabled", &self.thinking_enabled)?;
        map.serialize_entry("thinking_effort", &self.thinking_effort)?;
        for (key, value) in &self.extra {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

/// The `version` key: always `"0.3.0"`. Any other value is refused, never misread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ThreadVersion;

impl Serialize for ThreadVersion {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(THREAD_VERSION)
    }
}

impl<'de> Deserialize<'de> for ThreadVersion {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = std::borrow::Cow::<'de, str>::deserialize(d)?;
        if s == THREAD_VERSION {
            Ok(ThreadVersion)
        } else {
            Err(de::Error::custom(format!(
                "unsupported thread version {s:?}; only {THREAD_VERSION:?} is supported"
            )))
        }
    }
}

fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// `{"provider": "...", "model": "..."}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadModel {
    /// The model's provider.
    pub provider: String,
    /// The model's name.
    pub model: String,
}

/// `speed`: `"standard"`, `"fast"`, or `null` (the `Option`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Speed {
    /// Normal speed.
    Standard,
    /// Fast mode.
    Fast,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn message_shapes_match_the_documented_format() {
        let user = Message::User(UserMessage {
            id: "u1".into(),
            content: vec![UserContent::Text("hello".into())],
            extra: Map::new(),
        });
        assert_eq!(
            serde_json::to_value(&user).unwrap(),
            json!({"User": {"id": "u1", "content": [{"Text": "hello"}]}})
        );
        assert_eq!(
            serde_json::to_value(Message::Resume).unwrap(),
            json!("Resume")
        );
        let mut agent = AgentMessage::new();
        agent.content.push(AgentContent::Thinking(Thinking {
            text: "planning".into(),
            signature: None,
        }));
        assert_eq!(
            serde_json::to_value(Message::Agent(agent)).unwrap(),
            json!({"Agent": {"content": [{"Thinking": {"text": "planning", "signature": null}}], "tool_results": {}, "reasoning_details": null}})
        );
    }

    #[test]
    fn legacy_shapes_are_rejected_with_a_clear_error() {
        for legacy in [
            json!({"kind": "user", "content": "hi"}),
            json!({"type": "message", "role": "user"}),
            json!({"role": "assistant", "content": "x"}),
        ] {
            let err = serde_json::from_value::<Message>(legacy)
                .unwrap_err()
                .to_string();
            assert!(err.contains("legacy message shape"), "{err}");
        }
        let err = serde_json::from_value::<Message>(json!("Paused"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown message"), "{err}");
    }

    #[test]
    fn tool_result_reads_single_item_and_writes_array() {
        let r: ToolResult = serde_json::from_value(json!({
            "tool_use_id": "c", "tool_name": "t", "is_error": false,
            "content": {"Text": "ok"}, "output": {"exitCode": 0}
        }))
        .unwrap();
        assert_eq!(r.content, vec![ResultContent::Text("ok".into())]);
        assert_eq!(
            serde_json::to_value(&r).unwrap()["content"],
            json!([{"Text": "ok"}])
        );
    }

    #[test]
    fn token_usage_rejects_negatives() {
        assert!(serde_json::from_value::<TokenUsage>(json!({"input_tokens": -1})).is_err());
        assert!(serde_json::from_value::<TokenUsage>(json!({"input_tokens": 1.5})).is_err());
        let u: TokenUsage = serde_json::from_value(json!({"output_tokens": 3})).unwrap();
        assert_eq!(u.output_tokens, 3);
        assert_eq!(u.input_tokens, 0);
        assert_eq!(u.thought_tokens, None);
    }

    #[test]
    fn thought_and_total_tokens_are_written_only_when_reported() {
        let plain = TokenUsage::default();
        assert_eq!(
            serde_json::to_value(plain).unwrap(),
            json!({"input_tokens": 0, "output_tokens": 0, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0})
        );
        let reported: TokenUsage = serde_json::from_value(
            json!({"input_tokens": 2, "thought_tokens": 5, "total_tokens": 9}),
        )
        .unwrap();
        assert_eq!(serde_json::to_value(reported).unwrap()["thought_tokens"], 5);
        let sum = reported.saturating_add(plain);
        assert_eq!((sum.thought_tokens, sum.total_tokens), (Some(5), Some(9)));
        assert_eq!(plain.saturating_add(plain).total_tokens, None);
    }

    #[test]
    fn speed_is_standard_fast_or_null() {
        assert_eq!(
            serde_json::from_value::<Option<Speed>>(json!("fast")).unwrap(),
            Some(Speed::Fast)
        );
        assert_eq!(
            serde_json::from_value::<Option<Speed>>(json!(null)).unwrap(),
            None
        );
        assert!(serde_json::from_value::<Option<Speed>>(json!("turbo")).is_err());
        assert!(serde_json::from_value::<Option<Speed>>(json!("Fast")).is_err());
    }

    #[test]
    fn unknown_thread_keys_survive() {
        let t: Thread = serde_json::from_value(json!({
            "version": "0.3.0", "title": "t", "messages": [], "updated_at": "2026-01-01T00:00:00Z",
            "draft_prompt": [{"type": "text", "text": "x"}]
        }))
        .unwrap();
        let back = serde_json::to_value(&t).unwrap();
        assert_eq!(back["draft_prompt"], json!([{"type": "text", "text": "x"}]));
    }

    #[test]
    fn other_thread_versions_are_refused() {
        let err = serde_json::from_value::<Thread>(json!({
            "version": "0.2.0", "title": "", "messages": [], "updated_at": "2026-01-01T00:00:00Z"
        }))
        .unwrap_err()
        .to_string();
        assert!(err.contains("unsupported thread version"), "{err}");
    }
}
