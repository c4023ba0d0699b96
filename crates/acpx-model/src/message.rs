//! One entry of `thread.messages` ([`Message`]) and what it holds, in Zed's `DbThread`
//! shapes (see [`crate::thread`] and `docs/format.md`): a user turn's content, an agent
//! response's text, thinking, tool uses and tool results.

use indexmap::IndexMap;
use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::thread_json::ThreadJson;
use crate::thread_text::ThreadText;

/// One entry of `thread.messages`.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// A user turn.
    User(UserMessage),
    /// A model response.
    Agent(AgentMessage),
    /// A turn continued after an interruption; written as the bare string `"Resume"`.
    Resume,
}

impl Serialize for Message {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match self {
            Message::Resume => s.serialize_str("Resume"),
            Message::User(m) => {
                let mut map = s.serialize_map(Some(1))?;
                map.serialize_entry("User", m)?;
                map.end()
            }
            Message::Agent(m) => {
                let mut map = s.serialize_map(Some(1))?;
                map.serialize_entry("Agent", m)?;
                map.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for Message {
    // Hand-written so that legacy role-based shapes (`{"kind": ...}`, `{"type": ...}`,
    // `{"role": ...}`) fail with an error that says so, without buffering the message.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct MessageVisitor;
        impl<'de> Visitor<'de> for MessageVisitor {
            type Value = Message;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(r#"a message tagged {"User": ..}, {"Agent": ..} or "Resume""#)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Message, E> {
                match v {
                    "Resume" => Ok(Message::Resume),
                    other => Err(E::custom(format!(
                        "unknown message {other:?}; expected {{\"User\": ..}}, {{\"Agent\": ..}} or \"Resume\""
                    ))),
                }
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Message, A::Error> {
                let Some(tag) = map.next_key::<std::borrow::Cow<'de, str>>()? else {
                    return Err(de::Error::custom("empty message object"));
                };
                let msg = match tag.as_ref() {
                    "User" => Message::User(map.next_value()?),
                    "Agent" => Message::Agent(map.next_value()?),
                    "kind" | "type" | "role" => {
                        return Err(de::Error::custom(format!(
                            "legacy message shape (`{tag}` key) is not supported; messages must be tagged User, Agent or \"Resume\""
                        )))
                    }
                    other => {
                        return Err(de::Error::custom(format!(
                            "unknown message variant {other:?}; expected User, Agent or \"Resume\""
                        )))
                    }
                };
                if let Some(k) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    return Err(de::Error::custom(format!(
                        "a message object must have exactly one key; found {tag:?} and {k:?}"
                    )));
                }
                Ok(msg)
            }
        }
        d.deserialize_any(MessageVisitor)
    }
}

/// A user turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UserMessage {
    /// UUID; also the key into `request_token_usage`.
    pub id: String,
    /// What the user sent.
    pub content: Vec<UserContent>,
    /// Keys this version does not know; kept and written back unchanged.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// User content items.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum UserContent {
    /// Plain text.
    Text(String),
    /// A reference to a file, symbol or URL.
    Mention(Mention),
    /// An image.
    Image(Image),
}

/// `{"uri": <MentionUri>, "content": "..."}`; `uri` is Zed's externally tagged `MentionUri`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Mention {
    /// What is mentioned (Zed's `MentionUri`).
    pub uri: Value,
    /// The mentioned content as text.
    #[serde(default)]
    pub content: String,
}

/// `{"source": "<base64>", "size": {"width", "height"}}`. `size` is left out when unknown,
/// never written as `null`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Image {
    /// The image data, base64.
    pub source: String,
    /// Its size, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<ImageSize>,
    /// Keys this version does not know; kept and written back unchanged.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Width and height of an image, in pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageSize {
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
}

/// One model response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentMessage {
    /// What the model produced, in order.
    pub content: Vec<AgentContent>,
    /// Always written, even empty: Zed fails to load an Agent message without it. Keyed by
    /// tool-use id, in arrival order.
    pub tool_results: IndexMap<String, ToolResult>,
    /// Provider-specific reasoning data.
    #[serde(default)]
    pub reasoning_details: Option<Value>,
    /// Keys this version does not know; kept and written back unchanged.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl AgentMessage {
    /// An empty response.
    pub fn new() -> Self {
        AgentMessage {
            content: Vec::new(),
            tool_results: IndexMap::new(),
            reasoning_details: None,
            extra: Map::new(),
        }
    }

    /// The `ToolUse` with this id, if this message holds it.
    pub fn tool_use_mut(&mut self, id: &str) -> Option<&mut ToolUse> {
        self.content.iter_mut().find_map(|c| match c {
            AgentContent::ToolUse(t) if t.id == id => Some(t),
            _ => None,
        })
    }
}

impl Default for AgentMessage {
    fn default() -> Self {
        Self::new()
    }
}

/// Agent content items.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum AgentContent {
    /// Plain text (kept in a spill file while a long reply streams: see [`ThreadText`]).
    Text(ThreadText),
    /// Visible reasoning.
    Thinking(Thinking),
    /// Reasoning the provider sent encrypted.
    RedactedThinking(String),
    /// A tool call.
    ToolUse(ToolUse),
}

/// Visible reasoning of the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Thinking {
    /// The reasoning text (kept in a spill file while a long one streams, as a reply's: see
    /// [`ThreadText`]).
    pub text: ThreadText,
    /// The provider's signature of it.
    #[serde(default)]
    pub signature: Option<String>,
}

/// A tool call the model made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolUse {
    /// The ACP `toolCallId`.
    pub id: String,
    /// The tool's name or title.
    pub name: String,
    /// JSON text of `input` (moved to a spill file once its turn has finished in a session
    /// that lives on: see [`ThreadText`]).
    pub raw_input: ThreadText,
    /// The tool's input (moved to a spill file as its JSON text once its turn has finished in
    /// a session that lives on: see [`ThreadJson`]).
    pub input: ThreadJson,
    /// Whether `input` is final (streaming may send it in parts).
    pub is_input_complete: bool,
    /// The provider's signature of the call.
    #[serde(default)]
    pub thought_signature: Option<String>,
    /// Keys this version does not know; kept and written back unchanged.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A tool result, stored in `AgentMessage::tool_results`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    /// The `ToolUse` this result answers.
    pub tool_use_id: String,
    /// The tool's name.
    pub tool_name: String,
    /// Whether the tool failed.
    pub is_error: bool,
    /// Always written as an array; a single legacy item is accepted on read.
    #[serde(deserialize_with = "one_or_many")]
    pub content: Vec<ResultContent>,
    /// The tool's raw output (moved to a spill file as [`ToolUse::input`] is).
    #[serde(default)]
    pub output: Option<ThreadJson>,
    /// Keys this version does not know; kept and written back unchanged.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Content of a tool result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ResultContent {
    /// Plain text (moved to a spill file once its turn has finished in a session that lives
    /// on: see [`ThreadText`]).
    Text(ThreadText),
    /// An image.
    Image(Image),
}

fn one_or_many<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<ResultContent>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        Many(Vec<ResultContent>),
        One(ResultContent),
    }
    match OneOrMany::deserialize(d)? {
        OneOrMany::Many(v) => Ok(v),
        OneOrMany::One(c) => Ok(vec![c]),
    }
}
