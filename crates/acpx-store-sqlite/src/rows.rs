//! Conversions between model types and table rows.

use std::borrow::Cow;

use acpx_model::search::message_text;
use acpx_model::{
    normalize_cwd, AgentContent, EventEnvelope, Message, RecordId, SessionRecord, SessionSummary,
    StoreError, StoreResult, ThreadText, Timestamp,
};
use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::Row;
use serde_json::Value;

/// The document of a session as a write stores it (see `document::write`).
pub(crate) enum Document<'a> {
    /// Serialized beforehand: a call that runs on a pool thread with a record it borrowed
    /// from its caller must own its data.
    Text(String),
    /// Serialized by the write itself, from a record that outlives the write (a save by the
    /// holder of the session's lock, which runs in place, see `SqliteStore::run_held`; a close,
    /// which owns the record it read), straight into the row through
    /// SQLite's incremental blob I/O: no copy of the whole document is ever built, in acpx or
    /// in SQLite (rusqlite binds text as `SQLITE_TRANSIENT`, a copy, and SQLite builds the
    /// row's record from it, another).
    Streamed { record: &'a SessionRecord },
}

impl Document<'_> {
    /// Its length in bytes (for a streamed document, a serialization pass that only counts).
    pub(crate) fn counted_len(&self) -> usize {
        match self {
            Document::Text(t) => t.len(),
            Document::Streamed { record } => record.json_len(),
        }
    }

    /// Writes its bytes to `out`.
    pub(crate) fn write_to(&self, mut out: impl std::io::Write) -> std::io::Result<()> {
        match self {
            Document::Text(t) => out.write_all(t.as_bytes()),
            Document::Streamed { record, .. } => record.write_json(out),
        }
    }
}

/// The columns of a `sessions` row, all derived from one record in one place so that they
/// can never disagree with the document written next to them.
pub(crate) struct SessionColumns<'a> {
    pub acp_session_id: String,
    pub agent_session_id: Option<String>,
    pub agent_command: String,
    pub cwd: String,
    pub cwd_key: Option<String>,
    pub name: Option<String>,
    pub title: Option<String>,
    pub created_at: String,
    pub last_used_at: String,
    pub last_used_ms: i64,
    pub closed: i64,
    pub closed_at: Option<String>,
    pub last_prompt_at: Option<String>,
    pub message_count: i64,
    pub revision: i64,
    /// `SessionUsage` as JSON (`usage_column.rs`).
    pub usage: String,
    pub document: Document<'a>,
}

impl SessionColumns<'static> {
    /// The row for `record` as it will be stored (its `revision` already set), with the
    /// document serialized.
    pub(crate) fn from_record(record: &SessionRecord) -> StoreResult<Self> {
        let document = record
            .to_json_string()
            .map_err(|message| StoreError::Backend {
                backend: crate::BACKEND,
                message,
            })?;
        SessionColumns::with_document(record, Document::Text(document))
    }
}

impl<'a> SessionColumns<'a> {
    /// The row for `record`, its document to be streamed into the row by the write
    /// ([`Document::Streamed`]).
    pub(crate) fn streamed(record: &'a SessionRecord) -> StoreResult<Self> {
        SessionColumns::with_document(record, Document::Streamed { record })
    }

    fn with_document(record: &SessionRecord, document: Document<'a>) -> StoreResult<Self> {
        Ok(SessionColumns {
            acp_session_id: record.acp_session_id.clone(),
            agent_session_id: record.agent_session_id.clone(),
            agent_command: record.agent_command.clone(),
            cwd: record.cwd.clone(),
            cwd_key: normalize_cwd(&record.cwd).ok(),
            name: record.name.clone(),
            title: (!record.thread.title.is_empty()).then(|| record.thread.title.clone()),
            created_at: ts_text(&record.created_at),
            last_used_at: ts_text(&record.last_used_at),
            last_used_ms: record.last_used_at.millis(),
            closed: i64::from(record.closed),
            closed_at: record.closed_at.as_ref().map(ts_text),
            last_prompt_at: record.last_prompt_at.as_ref().map(ts_text),
            message_count: to_i64(record.thread.message_count() as u64, "message count")?,
            revision: to_i64(record.revision, "revision")?,
            usage: acpx_model::SessionUsage::of(record).to_json_text(),
            document,
        })
    }
}

/// A timestamp exactly as the JSON documents write it (`2026-02-27T12:00:00.000Z`).
pub(crate) fn ts_text(t: &Timestamp) -> String {
    match serde_json::to_value(t) {
        Ok(Value::String(s)) => s,
        _ => t.to_rfc3339(),
    }
}

pub(crate) fn to_i64(v: u64, what: &str) -> StoreResult<i64> {
    i64::try_from(v)
        .map_err(|_| StoreError::InvalidArgument(format!("{what} {v} does not fit in SQLite")))
}

/// The columns `list` reads, in this order. A row without `usage` (written before schema
/// version 9 and not backfilled, or inserted by hand) counts as unchecked: its summary is
/// read from its document.
pub(crate) const SUMMARY_COLUMNS: &str = "acpx_record_id, acp_session_id, agent_session_id, \
     agent_command, cwd, name, title, created_at, last_used_at, closed, closed_at, \
     last_prompt_at, message_count, revision, last_used_ms, \
     document_checked AND usage IS NOT NULL, usage";

/// Reads a summary from a row selected with [`SUMMARY_COLUMNS`]. Errors are the reason the
/// row is skipped, naming the column.
pub(crate) fn summary_from_row(row: &Row<'_>) -> Result<SessionSummary, String> {
    let text = |i: usize, name: &str| -> Result<String, String> {
        row.get::<_, String>(i)
            .map_err(|e| format!("column `{name}`: {e}"))
    };
    let opt_text = |i: usize, name: &str| -> Result<Option<String>, String> {
        row.get::<_, Option<String>>(i)
            .map_err(|e| format!("column `{name}`: {e}"))
    };
    let int = |i: usize, name: &str| -> Result<i64, String> {
        row.get::<_, i64>(i)
            .map_err(|e| format!("column `{name}`: {e}"))
    };
    let ts = |s: String, name: &str| -> Result<Timestamp, String> {
        Timestamp::parse(&s).map_err(|e| format!("column `{name}`: {e}"))
    };
    let non_negative = |v: i64, name: &str| -> Result<u64, String> {
        u64::try_from(v).map_err(|_| format!("column `{name}`: {v} is negative"))
    };
    let id = RecordId::parse(&text(0, "acpx_record_id")?)
        .map_err(|e| format!("column `acpx_record_id`: {e}"))?;
    let acp_session_id = text(1, "acp_session_id")?;
    if acp_session_id.is_empty() {
        return Err("column `acp_session_id`: must not be empty".into());
    }
    let closed = match int(9, "closed")? {
        0 => false,
        1 => true,
        other => return Err(format!("column `closed`: {other} is neither 0 nor 1")),
    };
    let closed_at = opt_text(10, "closed_at")?
        .map(|s| ts(s, "closed_at"))
        .transpose()?;
    if closed_at.is_some() && !closed {
        return Err("column `closed_at` is set but `closed` is 0".into());
    }
    let last_used_at = ts(text(8, "last_used_at")?, "last_used_at")?;
    if last_used_at.millis() != int(14, "last_used_ms")? {
        return Err("column `last_used_ms` does not match `last_used_at`".into());
    }
    Ok(SessionSummary {
        acpx_record_id: id,
        acp_session_id,
        agent_session_id: opt_text(2, "agent_session_id")?.filter(|s| !s.is_empty()),
        agent_command: text(3, "agent_command")?,
        cwd: text(4, "cwd")?,
        name: opt_text(5, "name")?,
        title: opt_text(6, "title")?.filter(|s| !s.is_empty()),
        created_at: ts(text(7, "created_at")?, "created_at")?,
        last_used_at,
        closed,
        closed_at,
        last_prompt_at: opt_text(11, "last_prompt_at")?
            .map(|s| ts(s, "last_prompt_at"))
            .transpose()?,
        message_count: non_negative(int(12, "message_count")?, "message_count")?,
        revision: non_negative(int(13, "revision")?, "revision")?,
        usage: match opt_text(16, "usage")? {
            Some(t) => acpx_model::SessionUsage::from_json_text(&t)
                .map_err(|e| format!("column `usage`: {e}"))?,
            None => Default::default(),
        },
    })
}

/// The first field in which two summaries differ, if any.
pub(crate) fn summary_difference(a: &SessionSummary, b: &SessionSummary) -> Option<&'static str> {
    let checks: [(&'static str, bool); 14] = [
        ("acpxRecordId", a.acpx_record_id == b.acpx_record_id),
        ("acpSessionId", a.acp_session_id == b.acp_session_id),
        ("agentSessionId", a.agent_session_id == b.agent_session_id),
        ("agentCommand", a.agent_command == b.agent_command),
        ("cwd", a.cwd == b.cwd),
        ("name", a.name == b.name),
        ("thread.title", a.title == b.title),
        ("createdAt", a.created_at == b.created_at),
        ("lastUsedAt", a.last_used_at == b.last_used_at),
        ("closed", a.closed == b.closed),
        ("closedAt", a.closed_at == b.closed_at),
        ("lastPromptAt", a.last_prompt_at == b.last_prompt_at),
        ("thread.messages", a.message_count == b.message_count),
        ("revision", a.revision == b.revision),
    ];
    checks.iter().find(|(_, same)| !same).map(|(name, _)| *name)
}

/// Parses a stored document: the bytes of the `document` column, whatever their SQL type.
pub(crate) fn parse_document(
    value: ValueRef<'_>,
    id: &str,
    revision: i64,
    location: &str,
) -> StoreResult<SessionRecord> {
    let bytes = match value {
        ValueRef::Text(b) | ValueRef::Blob(b) => b,
        other => {
            return Err(StoreError::corrupt(
                location,
                None,
                format!(
                    "column `document` holds {:?}, not a JSON document",
                    other.data_type()
                ),
            ))
        }
    };
    let record = SessionRecord::from_json_slice(bytes, location);
    checked_document(record, id, revision, location)
}

/// A parsed document, if it parsed and is the row's: its id must be the row's key, and its
/// revision becomes the row's.
pub(crate) fn checked_document(
    parsed: Result<SessionRecord, acpx_model::ValidationError>,
    id: &str,
    revision: i64,
    location: &str,
) -> StoreResult<SessionRecord> {
    let mut record = parsed.map_err(|e| {
        StoreError::corrupt(
            location,
            None,
            format!("document field `{}`: {}", e.field, e.message),
        )
    })?;
    if record.acpx_record_id.as_str() != id {
        return Err(StoreError::corrupt(
            location,
            None,
            format!(
                "document field `acpxRecordId` is {:?} but the row's key is {id:?}",
                record.acpx_record_id.as_str()
            ),
        ));
    }
    // The column is what the revision check compares against, so it is the truth.
    record.revision = u64::try_from(revision).map_err(|_| {
        StoreError::corrupt(location, None, format!("column `revision` is {revision}"))
    })?;
    Ok(record)
}

/// The rows of one appended batch, prepared before its transaction. Every text column of
/// every row lives in one buffer: a batch costs a few allocations instead of about ten per
/// event (with the line serialized a second time for its length, building the columns was a
/// fifth of the time of an append of 64 events).
pub(crate) struct EventBatch {
    text: String,
    rows: Vec<EventRow>,
}

/// A part of [`EventBatch::text`].
#[derive(Debug, Clone, Copy)]
struct Span {
    start: usize,
    end: usize,
}

/// One `event_rows` row (without its session key); text columns are spans of the batch text.
pub(crate) struct EventRow {
    pub seq: i64,
    event_version: i64,
    timestamp: Span,
    acp_session_id: Span,
    request_id: Option<Span>,
    stream: Span,
    source: Span,
    event_type: Span,
    /// The payload as JSON text.
    payload: Span,
    /// Envelope keys this version does not know, as a JSON object.
    extra: Option<Span>,
    /// Length of the NDJSON line, newline included: the unit of the retention budget.
    pub bytes: i64,
}

/// The values of an `event_rows` row in the order of [`INSERT_COLUMNS`].
pub(crate) type EventValues<'a> = [ToSqlOutput<'a>; 12];

/// The columns of an `event_rows` insert, in the order of [`EventBatch::values`].
pub(crate) const INSERT_COLUMNS: &str = "session_key, seq, event_version, timestamp, \
     acp_session_id, request_id, stream, source, type, payload, extra, bytes";

impl EventBatch {
    pub(crate) fn new(events: &[EventEnvelope]) -> StoreResult<Self> {
        let mut buf: Vec<u8> = Vec::with_capacity(events.len() * 512);
        let mut rows = Vec::with_capacity(events.len());
        for e in events {
            let json_err = |err: serde_json::Error| {
                StoreError::InvalidArgument(format!("event seq {}: {err}", e.seq))
            };
            // The NDJSON line itself: its length is the row's size, and it already holds the
            // timestamp and (without unknown keys) the payload as text.
            let line_start = buf.len();
            serde_json::to_writer(&mut buf, e).map_err(json_err)?;
            let line_len = buf.len() - line_start;
            let line = std::str::from_utf8(&buf[line_start..]).map_err(|err| {
                StoreError::InvalidArgument(format!(
                    "event seq {}: line is not UTF-8: {err}",
                    e.seq
                ))
            })?;
            let within_line = |r: std::ops::Range<usize>| Span {
                start: line_start + r.start,
                end: line_start + r.end,
            };
            let timestamp = timestamp_in_line(line).map(within_line);
            let payload = payload_in_line(line, e).map(within_line);
            let timestamp = match timestamp {
                Some(t) => t,
                None => push_text(&mut buf, &ts_text(&e.timestamp)),
            };
            let payload = match payload {
                Some(p) => p,
                None => push_json(&mut buf, &e.payload).map_err(json_err)?,
            };
            let extra = if e.extra.is_empty() {
                None
            } else {
                Some(push_json(&mut buf, &e.extra).map_err(json_err)?)
            };
            rows.push(EventRow {
                seq: to_i64(e.seq, "event seq")?,
                event_version: i64::from(e.event_version),
                timestamp,
                acp_session_id: push_text(&mut buf, &e.acp_session_id),
                request_id: e.request_id.as_deref().map(|r| push_text(&mut buf, r)),
                stream: push_text(&mut buf, e.stream.as_str()),
                source: push_text(&mut buf, e.source.as_str()),
                event_type: push_text(&mut buf, e.event_type.as_str()),
                payload,
                extra,
                bytes: to_i64(line_len as u64 + 1, "event line length")?,
            });
        }
        // Everything in the buffer is serde_json output or a copy of a `str`.
        let text = String::from_utf8(buf)
            .map_err(|e| StoreError::InvalidArgument(format!("event batch is not UTF-8: {e}")))?;
        Ok(EventBatch { text, rows })
    }

    pub(crate) fn rows(&self) -> &[EventRow] {
        &self.rows
    }

    fn text(&self, span: Span) -> &str {
        &self.text[span.start..span.end]
    }

    /// Each request id of the batch once, in the order of first appearance, with the lowest
    /// and highest seq of its rows (the `event_requests` ranges this batch extends).
    pub(crate) fn request_ranges(&self) -> Vec<(&str, i64, i64)> {
        let mut ranges: Vec<(&str, i64, i64)> = Vec::new();
        for row in &self.rows {
            let Some(span) = row.request_id else {
                continue;
            };
            let id = self.text(span);
            // A batch holds one request's rows, or a handful: a linear search is the cheapest.
            match ranges.iter_mut().rev().find(|(r, _, _)| *r == id) {
                Some((_, first, last)) => {
                    *first = (*first).min(row.seq);
                    *last = (*last).max(row.seq);
                }
                None => ranges.push((id, row.seq, row.seq)),
            }
        }
        ranges
    }

    /// The values of `row` for an insert into the session with `key`.
    pub(crate) fn values<'a>(&'a self, key: i64, row: &EventRow) -> EventValues<'a> {
        let int = |v: i64| ToSqlOutput::Borrowed(ValueRef::Integer(v));
        let text = |span: Span| ToSqlOutput::Borrowed(ValueRef::Text(self.text(span).as_bytes()));
        let opt = |span: Option<Span>| span.map_or(ToSqlOutput::Borrowed(ValueRef::Null), text);
        [
            int(key),
            int(row.seq),
            int(row.event_version),
            text(row.timestamp),
            text(row.acp_session_id),
            opt(row.request_id),
            text(row.stream),
            text(row.source),
            text(row.event_type),
            text(row.payload),
            opt(row.extra),
            int(row.bytes),
        ]
    }
}

fn push_text(buf: &mut Vec<u8>, text: &str) -> Span {
    let start = buf.len();
    buf.extend_from_slice(text.as_bytes());
    Span {
        start,
        end: buf.len(),
    }
}

fn push_json<T: serde::Serialize + ?Sized>(
    buf: &mut Vec<u8>,
    value: &T,
) -> serde_json::Result<Span> {
    let start = buf.len();
    serde_json::to_writer(&mut *buf, value)?;
    Ok(Span {
        start,
        end: buf.len(),
    })
}

/// Where the timestamp text is inside the event's own NDJSON line (formatting it again costs
/// more than the rest of the row). It follows two numbers,
/// `{"eventVersion":1,"seq":7,"timestamp":"…"`, so the first `"timestamp":"` is the key.
fn timestamp_in_line(line: &str) -> Option<std::ops::Range<usize>> {
    const KEY: &str = "\"timestamp\":\"";
    let start = line.find(KEY)? + KEY.len();
    let len = line[start..].find('"')?;
    Some(start..start + len)
}

/// Where the payload's JSON text is inside the event's own NDJSON line, which saves
/// serializing it a second time. Only for envelopes without unknown keys, whose line ends
/// with the payload: `…,"payload":<payload>}`. The first `"payload":` is the envelope's key:
/// inside a JSON string every `"` is escaped, so the earlier (string) fields cannot contain it.
fn payload_in_line(line: &str, e: &EventEnvelope) -> Option<std::ops::Range<usize>> {
    if !e.extra.is_empty() || !line.ends_with('}') {
        return None;
    }
    const KEY: &str = "\"payload\":";
    let start = line.find(KEY)? + KEY.len();
    Some(start..line.len() - 1).filter(|r| r.start < r.end)
}

/// The own bytes of one row of the `messages` table: a message's text is stored and indexed
/// in parts of this size, so that a long agent reply (8 MB after a 1M-chunk turn) is neither
/// tokenized whole by FTS5 (its in-memory term list grows with the row) nor re-indexed whole
/// at every save while it grows: a save rewrites only the parts that changed, the last one
/// and the new ones.
pub(crate) const PART_BYTES: usize = 64 * 1024;

/// How many bytes of the text before a part (after the first) its row repeats, so that a term
/// that crosses a part boundary is still found in one row, and a snippet has its context.
pub(crate) const OVERLAP_BYTES: usize = 1024;

/// The searchable text of one message, which the `messages` table holds in parts
/// ([`part_ranges`]). Borrowed from the record when the save runs in place, so a long reply
/// is not copied for it; owned when the save runs on a pool thread.
pub(crate) struct MessageText<'a> {
    pub index: i64,
    pub role: &'static str,
    pub message_id: Option<Cow<'a, str>>,
    pub text: SearchText<'a>,
}

/// What a message's parts are cut from.
pub(crate) enum SearchText<'a> {
    /// Text in memory.
    Str(Cow<'a, str>),
    /// An agent message holding a reply still in its spill file (in the process recording
    /// the turn): read a part at a time, never whole.
    Spilled(JoinedText),
}

/// The text and thinking pieces of an agent message joined by newlines, as
/// [`message_text`] joins them, without building the joined text: copies of the pieces (a
/// spilled one shares its file).
pub(crate) struct JoinedText {
    pieces: Vec<ThreadText>,
}

impl JoinedText {
    /// The joined length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.pieces.iter().map(ThreadText::len).sum::<usize>() + self.pieces.len().saturating_sub(1)
    }

    /// Bytes `start..end` of the joined text.
    pub(crate) fn read_bytes(&self, start: usize, end: usize) -> std::io::Result<Vec<u8>> {
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
    pub(crate) fn into_owned(self) -> MessageText<'static> {
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

    /// The hash of role, message id and a part's text: what `messages.text_hash` holds.
    pub(crate) fn part_hash(&self, part: &str) -> i64 {
        crate::text_hash::part_hash(self.role, self.message_id.as_deref(), part)
    }
}

/// The searchable messages of a record (resume markers have no text and no row). The texts
/// of settled messages (a queue owner's earlier turns) stay in their spill file, read a part
/// at a time as a spilled reply's are.
pub(crate) fn message_texts(record: &SessionRecord) -> StoreResult<Vec<MessageText<'_>>> {
    let settled = record
        .thread
        .settled
        .searchable()
        .map_err(|e| StoreError::Backend {
            backend: "sqlite",
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

/// The stored byte range of each part of `text`: part `p` owns the bytes from its own start
/// to the next part's, and its row starts [`OVERLAP_BYTES`] earlier. Boundaries depend only
/// on the text before them, so a message that grows keeps its earlier parts unchanged. An
/// empty text is one empty part.
pub(crate) fn part_ranges(text: &str) -> Vec<(usize, usize)> {
    match ranges_by(text.len(), |at| {
        Ok::<_, std::convert::Infallible>(floor_char_boundary(text, at))
    }) {
        Ok(ranges) => ranges,
        Err(never) => match never {},
    }
}

/// [`part_ranges`] of a message holding a spilled reply, reading a few bytes at each
/// boundary.
pub(crate) fn spilled_part_ranges(text: &JoinedText) -> std::io::Result<Vec<(usize, usize)>> {
    ranges_by(text.len(), |at| spilled_floor_char_boundary(text, at))
}

/// The ranges of [`part_ranges`] for a text of `len` bytes, `floor` giving the character
/// boundary at or before a byte.
fn ranges_by<E>(
    len: usize,
    mut floor: impl FnMut(usize) -> Result<usize, E>,
) -> Result<Vec<(usize, usize)>, E> {
    let mut ranges = Vec::new();
    let mut own = 0;
    loop {
        let end = if len - own <= PART_BYTES {
            len
        } else {
            // A part of at least PART_BYTES - 3 bytes: a character is at most 4 bytes long.
            floor(own + PART_BYTES)?
        };
        let start = if own == 0 {
            0
        } else {
            floor(own - OVERLAP_BYTES)?
        };
        ranges.push((start, end));
        if end == len {
            return Ok(ranges);
        }
        own = end;
    }
}

fn floor_char_boundary(text: &str, mut at: usize) -> usize {
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// [`floor_char_boundary`] in a spilled text: the last byte at or before `at` that does not
/// continue a character.
fn spilled_floor_char_boundary(text: &JoinedText, at: usize) -> std::io::Result<usize> {
    if at >= text.len() {
        return Ok(text.len());
    }
    let from = at.saturating_sub(3);
    let bytes = text.read_bytes(from, at + 1)?;
    (from..=at)
        .rev()
        .find(|p| bytes.get(p - from).is_some_and(|b| b & 0xC0 != 0x80))
        .ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "the spill file holds bytes that are not UTF-8",
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use acpx_model::{EventContext, EventPayload, EventSource, EventStream};
    use serde_json::json;

    /// A list reads only the `sessions_list` index (schema version 5), never the table rows
    /// with their documents: every column of `SUMMARY_COLUMNS` must stay in that index.
    #[test]
    fn an_ordered_list_reads_only_its_covering_index() {
        let mut conn = rusqlite::Connection::open_in_memory().unwrap();
        crate::connection::migrate(&mut conn, std::path::Path::new(":memory:"))
            .unwrap_or_else(|e| panic!("migrate: {e:?}"));
        let sql = format!(
            "EXPLAIN QUERY PLAN SELECT {SUMMARY_COLUMNS} FROM session_rows WHERE 1 \
             ORDER BY last_used_ms DESC, acpx_record_id ASC"
        );
        let plan: Vec<String> = conn
            .prepare(&sql)
            .unwrap()
            .query_map([], |r| r.get::<_, String>(3))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let plan = plan.join("; ");
        assert!(
            plan.contains("USING COVERING INDEX sessions_list"),
            "{plan}"
        );
        assert!(!plan.contains("TEMP B-TREE"), "{plan}");
    }

    fn texts(batch: &EventBatch, row: &EventRow) -> Vec<Option<String>> {
        batch
            .values(7, row)
            .iter()
            .map(|v| match v {
                ToSqlOutput::Borrowed(ValueRef::Text(t)) => {
                    Some(String::from_utf8(t.to_vec()).unwrap())
                }
                ToSqlOutput::Borrowed(ValueRef::Integer(i)) => Some(i.to_string()),
                ToSqlOutput::Borrowed(ValueRef::Null) => None,
                other => panic!("{other:?}"),
            })
            .collect()
    }

    /// The columns taken from inside the NDJSON line (payload, timestamp) are exactly their
    /// own serialization, even when other fields contain look-alikes of the keys; every
    /// column is the envelope's value.
    #[test]
    fn batch_columns_are_the_envelope_values() {
        let id = RecordId::parse("rec").unwrap();
        let tricky = r#"x","payload":{"fake":1},"timestamp":"y","y":""#;
        let mut events = Vec::new();
        for (acp, req, ty, payload) in [
            ("a", None, "t", json!({"k": "v"})),
            (tricky, Some(tricky), tricky, json!("\"payload\":")),
            (
                "a",
                Some("r"),
                "payload",
                json!([{"payload": {"payload": 1}}, 0.1, null]),
            ),
            ("\u{1F600}\n\\", None, "x", json!(null)),
            ("a", None, "t", json!({})),
        ] {
            let ctx = EventContext {
                acpx_record_id: &id,
                acp_session_id: acp,
                request_id: req,
                stream: EventStream::Other(tricky.into()),
                source: EventSource::Acp,
            };
            let e = EventEnvelope::new(
                &ctx,
                events.len() as u64 + 1,
                Timestamp::now(),
                EventPayload::Unknown {
                    event_type: ty.into(),
                    payload,
                },
            );
            let mut with_extra = e.clone();
            with_extra.seq += 100;
            with_extra.extra.insert("later".into(), json!({"k": [1]}));
            events.push(e);
            events.push(with_extra);
        }
        let batch = EventBatch::new(&events).unwrap();
        assert_eq!(batch.rows().len(), events.len());
        for (e, row) in events.iter().zip(batch.rows()) {
            let line = e.to_ndjson();
            if e.extra.is_empty() {
                assert!(payload_in_line(&line, e).is_some(), "{line}");
            } else {
                assert_eq!(payload_in_line(&line, e), None, "{line}");
            }
            let extra = (!e.extra.is_empty()).then(|| serde_json::to_string(&e.extra).unwrap());
            let expected = vec![
                Some("7".to_owned()),
                Some(e.seq.to_string()),
                Some("1".to_owned()),
                Some(ts_text(&e.timestamp)),
                Some(e.acp_session_id.clone()),
                e.request_id.clone(),
                Some(e.stream.as_str().to_owned()),
                Some(e.source.as_str().to_owned()),
                Some(e.event_type.as_str().to_owned()),
                Some(serde_json::to_string(&e.payload).unwrap()),
                extra,
                Some((line.len() + 1).to_string()),
            ];
            assert_eq!(texts(&batch, row), expected, "{line}");
        }
    }
}
