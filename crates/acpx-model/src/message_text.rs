//! The searchable text of a message (what search matches and a store indexes): user text and
//! mentions, agent text and thinking, joined by newlines.

use std::borrow::Cow;

use crate::message::{AgentContent, Message, UserContent};

/// The searchable text of one message: user text and mentions, agent text and thinking,
/// joined by newlines. Borrowed when the message has one piece of text (a streamed reply
/// usually): it is megabytes after a long turn, and a store that indexes it need not copy it.
pub fn message_text(message: &Message) -> Option<(&'static str, Option<&str>, Cow<'_, str>)> {
    match message {
        Message::User(u) => {
            let pieces = u.content.iter().filter_map(|c| match c {
                UserContent::Text(t) => Some(Cow::Borrowed(t.as_str())),
                UserContent::Mention(m) => Some(Cow::Borrowed(m.content.as_str())),
                UserContent::Image(_) => None,
            });
            Some(("user", Some(u.id.as_str()), joined(pieces)))
        }
        Message::Agent(a) => {
            let pieces = a.content.iter().filter_map(|c| match c {
                // A text still in its spill file (in the process that streams it) is read.
                AgentContent::Text(t) => Some(t.to_text_lossy()),
                AgentContent::Thinking(t) => Some(t.text.to_text_lossy()),
                _ => None,
            });
            Some(("agent", None, joined(pieces)))
        }
        Message::Resume => None,
    }
}

/// `pieces` joined by newlines, borrowed when there is at most one.
fn joined<'a>(mut pieces: impl Iterator<Item = Cow<'a, str>>) -> Cow<'a, str> {
    let Some(first) = pieces.next() else {
        return Cow::Borrowed("");
    };
    let Some(second) = pieces.next() else {
        return first;
    };
    let mut text = first.into_owned();
    for piece in std::iter::once(second).chain(pieces) {
        text.push('\n');
        text.push_str(&piece);
    }
    Cow::Owned(text)
}

/// The length in bytes of what [`message_text`] gives for `message`, without building it.
pub fn message_text_len(message: &Message) -> usize {
    let (pieces, len): (usize, usize) = match message {
        Message::User(u) => u
            .content
            .iter()
            .filter_map(|c| match c {
                UserContent::Text(t) => Some(t.len()),
                UserContent::Mention(m) => Some(m.content.len()),
                UserContent::Image(_) => None,
            })
            .fold((0, 0), |(n, l), x| (n + 1, l + x)),
        Message::Agent(a) => a
            .content
            .iter()
            .filter_map(|c| match c {
                AgentContent::Text(t) => Some(t.len()),
                AgentContent::Thinking(t) => Some(t.text.len()),
                _ => None,
            })
            .fold((0, 0), |(n, l), x| (n + 1, l + x)),
        Message::Resume => (0, 0),
    };
    // Joined by newlines.
    len + pieces.saturating_sub(1)
}
