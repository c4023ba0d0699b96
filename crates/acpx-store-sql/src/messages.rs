//! The searchable texts of a record: one per message that has text (resume markers have
//! none), the settled ones and the spilled replies kept in their spill files, which a store
//! reads whole (PostgreSQL) or a part at a time (SQLite).

use std::borrow::Cow;

use acpx_model::search::message_text;
use acpx_model::{AgentContent, Message, SessionRecord, StoreError, StoreResult, ThreadText};

/// The searchable text of one message, which SQLite's `messages` table holds in parts.
/// Borrowed from the record when the save runs in place, so a long reply is not copied for
/// it; owned when the save runs on a pool thread.
pub struct MessageText<'a> {
    pub index: i64,
    pub role: &'static str,
    pub message_id: Option<Cow<'a, str>>,
    pub text: SearchText<'a>,
}

/// What a message's parts are cut from.
pub enum SearchText<'a> {
    /// Text in memory.
    Str(Cow<'a, str>),
    /// An agent message holding a reply still in its spill file (in the process recording
    /// the turn): read a part at a time, never whole.
    Spilled(JoinedText),
}

/// The text and thinking pieces of an agent message joined by newlines, as
/// [`message_text`] joins them, without building the joined text: copies of the pieces (a
/// spilled one shares its file).
pub struct JoinedText {
    pieces: Vec<ThreadText>,
}

impl JoinedText {
    /// The joined length in bytes.
    pub fn len(&self) -> usize {
        self.pieces.iter().map(ThreadText::len).sum::<usize>() + self.pieces.len().saturating_sub(1)
    }

    /// Whether the joined text is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The joined text, read whole; an error when a spill cannot be read back.
    pub fn to_text(&self) -> std::io::Result<String> {
        let mut out = String::with_capacity(self.len());
        for (i, piece) in self.pieces.iter().enumerate() {
            if i > 0 {
                out.push('\n');
            }
            out.push_str(&piece.to_text()?);
        }
        Ok(out)
    }

    /// [`JoinedText::to_text`], with what could not be read back replaced by a note saying
    /// so, as [`message_text`] reads an agent message.
    pub fn to_text_lossy(&self) -> String {
        let mut out = String::with_capacity(self.len());
        for (i, piece) in self.pieces.iter().enumerate() {
            if i > 0 {
                out.push('\n');
            }
            out.push_str(&piece.to_text_lossy());
        }
        out
    }

    /// Bytes `start..end` of the joined text.
    pub fn read_bytes(&self, start: usize, end: usize) -> std::io::Result<Vec<u8>> {
        let mut out = Vec::with_capacity(end.saturating_sub(start));
        let mut at = 0;
        for (i, piece) in self.pieces.iter().enumerate() {
            if i > 0 {
                if (start..end).contains(&at) {
                    out.push(b'\n');
                }
                at += 1;
            }
            let (from, to) = (at.max(start), (at + piece.len()).min(end));
            if from < to {
                out.extend_from_slice(&piece.read_bytes(from - at, to - at)?);
            }
            at += piece.len();
            if at >= end {
                break;
            }
        }
        Ok(out)
    }
}

impl MessageText<'_> {
    /// The same text, owned (to move to another thread).
    pub fn into_owned(self) -> MessageText<'static> {
        MessageText {
            index: self.index,
            role: self.role,
            message_id: self.message_id.map(|m| Cow::Owned(m.into_owned())),
            text: match self.text {
                SearchText::Str(t) => SearchText::Str(Cow::Owned(t.into_owned())),
                SearchText::Spilled(t) => SearchText::Spilled(t),
            },
        }
    }
}

/// The searchable messages of a record (resume markers have no text and no row). The texts
/// of settled messages (a queue owner's earlier turns) stay in their spill file, read a part
/// at a time as a spilled reply's are. `backend` names the store in the error of settled
/// messages that cannot be read back.
pub fn message_texts<'r>(
    record: &'r SessionRecord,
    backend: &'static str,
) -> StoreResult<Vec<MessageText<'r>>> {
    let settled = record
        .thread
        .settled
        .searchable()
        .map_err(|e| StoreError::Backend {
            backend,
            message: format!(
                "session {}: its settled messages could not be read back: {e}",
                record.acpx_record_id
            ),
        })?;
    let start = record.thread.settled.len();
    let mut texts: Vec<MessageText<'_>> = settled
        .into_iter()
        .map(|t| MessageText {
            index: t.index as i64,
            role: t.role,
            message_id: t.message_id.map(Cow::Owned),
            text: SearchText::Spilled(JoinedText {
                pieces: vec![t.text],
            }),
        })
        .collect();
    texts.extend(
        record
            .thread
            .messages
            .iter()
            .enumerate()
            .filter_map(|(i, m)| {
                let index = (start + i) as i64;
                if let Some(joined) = spilled_pieces(m) {
                    return Some(MessageText {
                        index,
                        role: "agent",
                        message_id: None,
                        text: SearchText::Spilled(joined),
                    });
                }
                let (role, id, text) = message_text(m)?;
                Some(MessageText {
                    index,
                    role,
                    message_id: id.map(Cow::Borrowed),
                    text: SearchText::Str(text),
                })
            }),
    );
    Ok(texts)
}

/// The searchable pieces of an agent message that holds a spilled text (a reply or its
/// reasoning: what [`message_text`] would read back whole and join), if it holds one.
fn spilled_pieces(m: &Message) -> Option<JoinedText> {
    let Message::Agent(a) = m else {
        return None;
    };
    let spilled = a.content.iter().any(|c| match c {
        AgentContent::Text(t) => t.is_spilled(),
        AgentContent::Thinking(t) => t.text.is_spilled(),
        _ => false,
    });
    spilled.then(|| JoinedText {
        pieces: a
            .content
            .iter()
            .filter_map(|c| match c {
                AgentContent::Text(t) => Some(t.clone()),
                AgentContent::Thinking(t) => Some(t.text.clone()),
                _ => None,
            })
            .collect(),
    })
}
