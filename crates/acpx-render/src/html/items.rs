//! What a turn of the page is made of: the items the fold (`fold.rs`) builds from events and
//! the writers (`turns.rs`, `tools.rs`, `notes.rs`, `usage.rs`) write out.

use std::collections::HashMap;

use acpx_model::{EventEnvelope, Timestamp};
use serde_json::Value;

/// The most text one message, thought or output keeps for the page; the rest is counted
/// (the log keeps every byte, and the item links to it).
pub const TEXT_CAP: usize = 2 * 1024 * 1024;

/// A string field of a JSON object.
pub fn str_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// Where an item came from in the log.
#[derive(Debug, Clone)]
pub struct At {
    /// Its first event.
    pub seq: u64,
    /// When that event was recorded.
    pub time: Timestamp,
}

impl At {
    pub(super) fn of(e: &EventEnvelope) -> Self {
        At {
            seq: e.seq,
            time: e.timestamp,
        }
    }
}

/// Text gathered from chunks, capped at [`TEXT_CAP`].
#[derive(Debug, Default, Clone)]
pub struct Capped {
    /// What is kept.
    pub text: String,
    /// Bytes left out.
    pub dropped: u64,
}

impl Capped {
    /// Adds `s`, or counts it when the cap is reached.
    pub fn push(&mut self, s: &str) {
        let room = TEXT_CAP.saturating_sub(self.text.len());
        if s.len() <= room {
            self.text.push_str(s);
        } else {
            let mut cut = room;
            while !s.is_char_boundary(cut) {
                cut -= 1;
            }
            self.text.push_str(&s[..cut]);
            self.dropped += (s.len() - cut) as u64;
        }
    }
}

/// What kind of note an item is: decides its colour and whether it is shown by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoteKind {
    /// A change of mode, model or config option, a title.
    Change,
    /// A fallback, a choice not restored, an agent that exited badly.
    Warning,
    /// A failure.
    Error,
    /// acpx's own bookkeeping (agent started, initialized, file reads): hidden unless asked.
    Internal,
}

/// A permission question and its answer.
#[derive(Debug, Clone, Default)]
pub struct Permission {
    /// The question (`running` client operation), when logged.
    pub asked: Option<At>,
    /// The options offered: (id, name, kind).
    pub options: Vec<(String, String, String)>,
    /// The answer, when logged.
    pub answered: Option<At>,
    /// `approved`, `denied`, `cancelled`…
    pub decision: Option<String>,
    /// The option chosen.
    pub option_id: Option<String>,
    /// The permission mode in force (`approve-all`, `approve-reads`, …).
    pub policy: Option<String>,
    /// The `--permission-policy` action that decided, if a rule did.
    pub rule: Option<String>,
    /// The summary line acpx logged for the answer.
    pub summary: Option<String>,
}

/// A terminal an agent ran.
#[derive(Debug, Clone, Default)]
pub struct Terminal {
    /// The command line, from `terminal/create`.
    pub command: Option<String>,
    /// The latest output acpx logged for it.
    pub output: Option<String>,
    /// Whether that output was cut by the agent's byte limit.
    pub truncated: bool,
    /// `exit code N` / `signal S`, once known.
    pub exit: Option<String>,
    /// The event that created it.
    pub created: Option<At>,
}

/// A tool call with everything its updates said.
#[derive(Debug, Clone)]
pub struct ToolCall {
    /// Its first event.
    pub at: At,
    /// ACP `toolCallId`.
    pub id: String,
    /// ACP `kind` (`read`, `edit`, `execute`…).
    pub kind: Option<String>,
    /// ACP `title`.
    pub title: Option<String>,
    /// Latest status.
    pub status: Option<String>,
    /// When it reached `completed` or `failed`.
    pub ended: Option<Timestamp>,
    /// `locations` (path, line).
    pub locations: Vec<String>,
    /// Latest `rawInput`.
    pub raw_input: Option<Value>,
    /// Latest `rawOutput`.
    pub raw_output: Option<Value>,
    /// Latest text content items.
    pub texts: Vec<String>,
    /// Every diff shown, the latest per path: (path, old text, new text).
    pub diffs: Vec<(String, Option<String>, String)>,
    /// Terminal ids embedded in its content, in order.
    pub terminals: Vec<String>,
    /// Its permission questions.
    pub permissions: Vec<Permission>,
    /// Every event that touched it.
    pub seqs: Vec<u64>,
}

/// One thing shown in a turn, in log order.
#[derive(Debug, Clone)]
pub enum Item {
    /// The agent's reply text (Markdown).
    Message(At, Capped),
    /// The agent's thoughts.
    Thought(At, Capped),
    /// A user message chunk (history an agent replayed, an imported conversation).
    User(At, Capped),
    /// A tool call.
    Tool(Box<ToolCall>),
    /// A plan: (content, status, priority) per entry.
    Plan(At, Vec<(String, String, String)>),
    /// A permission question about no tool call the turn shows.
    Permission(String, Permission),
    /// Anything else worth a line.
    Note {
        /// Where.
        at: At,
        /// How it is shown.
        kind: NoteKind,
        /// A short label (`mode`, `fallback`, `fs/read_text_file`).
        label: String,
        /// What happened.
        text: String,
    },
}

/// How a turn ended.
#[derive(Debug, Clone)]
pub struct TurnEnd {
    /// The event that ended it.
    pub at: At,
    /// `end_turn`, `cancelled`, … or the error outcome.
    pub reason: String,
    /// Whether it failed.
    pub failed: bool,
    /// The error message of a failed turn.
    pub message: Option<String>,
}

/// A cost the agent reported.
#[derive(Debug, Clone, PartialEq)]
pub struct Cost {
    /// Amount.
    pub amount: f64,
    /// Currency code.
    pub currency: String,
}

/// A prompt turn (or, with `number` 0, the events between turns).
#[derive(Debug, Clone)]
pub struct Turn {
    /// 1-based turn number; 0 for events outside any turn.
    pub number: u32,
    /// `prompt_started`.
    pub at: Option<At>,
    /// Its request id.
    pub request_id: Option<String>,
    /// The prompt's text blocks, joined.
    pub prompt: String,
    /// The prompt's other blocks, described.
    pub attachments: Vec<String>,
    /// What happened, in order.
    pub items: Vec<Item>,
    /// Tool call id → its index among all the turn's items (written ones included: the
    /// index into `items` is this minus `written`).
    pub tools: HashMap<String, usize>,
    /// Items already written to the page and dropped from `items` ([`Turn::take_settled`]).
    pub written: usize,
    /// Whether the turn's header is on the page.
    pub head_written: bool,
    /// Updates of tool calls already written (the log has them; the page cannot change).
    pub late_updates: u64,
    /// Terminals of the turn by id.
    pub terminals: HashMap<String, Terminal>,
    /// How it ended.
    pub end: Option<TurnEnd>,
    /// The prompt response's `usage`.
    pub usage: Option<Value>,
    /// The cumulative cost the agent reported last, during this turn.
    pub cost: Option<Cost>,
    /// The context window (`used`, `size`) the agent reported last, during this turn.
    pub context: Option<(u64, u64)>,
}

/// `exit code N` or `signal S` of an ACP exit status.
pub fn exit_text(exit: &Value) -> String {
    match (
        exit.get("exitCode").and_then(Value::as_i64),
        str_of(exit, "signal"),
    ) {
        (_, Some(sig)) => format!("signal {sig}"),
        (Some(code), None) => format!("exit code {code}"),
        (None, None) => "exited".to_owned(),
    }
}
