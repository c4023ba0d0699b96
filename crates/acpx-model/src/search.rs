//! Full-text search over conversation text.
//!
//! [`crate::Store::search`] is answered natively by backends with an index (SQLite FTS5) and
//! by scanning with [`search_record`] elsewhere. Matching rule shared by all backends: every
//! whitespace-separated term of the query must occur in the message text, compared
//! case-insensitively (ASCII); index-backed backends may match more loosely (tokenized), never
//! more strictly.

use serde::Serialize;

use crate::id::RecordId;
pub use crate::message_text::{message_text, message_text_len};
use crate::session::SessionRecord;

/// What to search for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SearchQuery {
    /// Terms, separated by whitespace; all must match.
    pub text: String,
    /// Only sessions in this absolute cwd.
    pub cwd: Option<String>,
    /// At most this many hits (default 50).
    pub limit: Option<usize>,
}

impl SearchQuery {
    /// The query's words, lowercased; a message matches when it contains all of them.
    pub fn terms(&self) -> Vec<String> {
        self.text
            .split_whitespace()
            .map(|t| t.to_ascii_lowercase())
            .collect()
    }

    /// The hit limit to apply (the default when unset, at least 1).
    pub fn effective_limit(&self) -> usize {
        self.limit.unwrap_or(50).max(1)
    }
}

/// One matching message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SearchHit {
    /// The session.
    pub acpx_record_id: RecordId,
    /// The session's title, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Index of the message in the whole conversation (settled messages first: see
    /// [`crate::Thread::settled`]; a thread read back holds them all in `thread.messages`).
    pub message_index: usize,
    /// `user` or `agent`.
    pub role: String,
    /// The `User` message id (agent messages have none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    /// Up to about 160 characters of text around the first match.
    pub snippet: String,
}

/// A snippet of `text` around byte offset `at`, on character boundaries.
pub fn snippet(text: &str, at: usize, len: usize) -> String {
    snippet_in_window(text, 0, text.len(), at, len)
}

/// [`snippet`] for a backend that holds a message in parts: `window` is the part of the
/// message text that starts at byte `window_start` of a message `message_len` bytes long, and
/// `at` is relative to it. The window must reach 60 bytes before and 160 after the match (or
/// the message's ends) for the snippet to equal the one of the whole text.
pub fn snippet_in_window(
    window: &str,
    window_start: usize,
    message_len: usize,
    at: usize,
    len: usize,
) -> String {
    const BEFORE: usize = 60;
    const WIDTH: usize = 160;
    let text = window;
    let mut start = at.saturating_sub(BEFORE);
    while !text.is_char_boundary(start) {
        start -= 1;
    }
    let mut end = (at + len).max(start + WIDTH).min(text.len());
    while !text.is_char_boundary(end) {
        end += 1;
    }
    let mut s = String::new();
    if window_start + start > 0 {
        s.push('…');
    }
    s.push_str(&text[start..end].replace('\n', " "));
    if window_start + end < message_len {
        s.push('…');
    }
    s
}

/// Matches one message's text against `terms` (as [`SearchQuery::terms`] gives them, at
/// least one): the snippet of the hit when every term occurs in it. The one rule every way of
/// answering a search applies, so a scan and an index give the same hits.
pub fn match_text(text: &str, terms: &[String]) -> Option<String> {
    let first = terms.first()?;
    let lower = text.to_ascii_lowercase();
    if !terms.iter().all(|t| lower.contains(t.as_str())) {
        return None;
    }
    let at = lower.find(first.as_str()).unwrap_or(0);
    Some(snippet(text, at, first.len()))
}

/// Scans one record for messages matching `query` (the scanning implementation of search).
pub fn search_record(record: &SessionRecord, query: &SearchQuery) -> Vec<SearchHit> {
    let terms = query.terms();
    if terms.is_empty() {
        return Vec::new();
    }
    let mut hits = Vec::new();
    let mut hit = |index: usize, role: &str, id: Option<&str>, text: &str| {
        if let Some(snippet) = match_text(text, &terms) {
            hits.push(SearchHit {
                acpx_record_id: record.acpx_record_id.clone(),
                title: (!record.thread.title.is_empty()).then(|| record.thread.title.clone()),
                message_index: index,
                role: role.to_owned(),
                message_id: id.map(str::to_owned),
                snippet,
            });
        }
    };
    // Settled messages are a live session's (a record a store read has none): their texts
    // are read back, and one that cannot be is searched as what could be.
    for t in record.thread.settled.searchable().unwrap_or_default() {
        hit(
            t.index,
            t.role,
            t.message_id.as_deref(),
            &t.text.to_text_lossy(),
        );
    }
    let start = record.thread.settled.len();
    for (i, message) in record.thread.messages.iter().enumerate() {
        if let Some((role, id, text)) = message_text(message) {
            hit(start + i, role, id, &text);
        }
    }
    hits
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::thread::{
        AgentContent, AgentMessage, Image, Mention, Message, Thinking, UserContent, UserMessage,
    };

    #[test]
    fn text_len_is_the_length_of_the_text() {
        let user = Message::User(UserMessage {
            id: "u".into(),
            content: vec![
                UserContent::Text("héllo".into()),
                UserContent::Image(Image {
                    source: "AAAA".into(),
                    size: None,
                    extra: Default::default(),
                }),
                UserContent::Mention(Mention {
                    uri: serde_json::json!({"File": {"abs_path": "/x"}}),
                    content: "fn main() {}".into(),
                }),
            ],
            extra: Default::default(),
        });
        let mut agent = AgentMessage::new();
        agent.content.push(AgentContent::Thinking(Thinking {
            text: "hmm".into(),
            signature: None,
        }));
        agent
            .content
            .push(AgentContent::RedactedThinking("x".into()));
        agent.content.push(AgentContent::Text("done".into()));
        let empty_user = Message::User(UserMessage {
            id: "e".into(),
            content: Vec::new(),
            extra: Default::default(),
        });
        for m in [user, Message::Agent(agent), empty_user, Message::Resume] {
            let expected = message_text(&m).map_or(0, |(_, _, t)| t.len());
            assert_eq!(message_text_len(&m), expected, "{m:?}");
        }
    }
}
