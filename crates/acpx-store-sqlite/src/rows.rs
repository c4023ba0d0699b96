//! Conversions between model types and table rows.

use acpx_model::{EventEnvelope, SessionRecord, SessionSummary, StoreError, StoreResult};
use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::Row;

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

/// The columns of a `sessions` row ([`acpx_store_sql::SessionColumns`]) with the document
/// as a write stores it.
pub(crate) type SessionColumns<'a> = acpx_store_sql::SessionColumns<Document<'a>>;

/// The row for `record` as it will be stored (its `revision` already set), with the document
/// serialized.
pub(crate) fn session_columns(record: &SessionRecord) -> StoreResult<SessionColumns<'static>> {
    let document = record
        .to_json_string()
        .map_err(|message| StoreError::Backend {
            backend: crate::BACKEND,
            message,
        })?;
    SessionColumns::with_document(record, Document::Text(document), DB)
}

/// The row for `record`, its document to be streamed into the row by the write
/// ([`Document::Streamed`]).
pub(crate) fn streamed_columns(record: &SessionRecord) -> StoreResult<SessionColumns<'_>> {
    SessionColumns::with_document(record, Document::Streamed { record }, DB)
}

/// The database, as errors name it.
const DB: &str = "SQLite";

pub(crate) use acpx_store_sql::ts_text;

/// `v` as SQLite's `i64`; `what` names it when it does not fit.
pub(crate) fn to_i64(v: u64, what: &str) -> StoreResult<i64> {
    acpx_store_sql::to_i64(v, what, DB)
}

/// The columns `list` reads, in this order. A row without `usage` (written before schema
/// version 9 and not backfilled, or inserted by hand) counts as unchecked: its summary is
/// read from its document.
pub(crate) const SUMMARY_COLUMNS: &str = "acpx_record_id, acp_session_id, agent_session_id, \
     agent_command, cwd, name, title, created_at, last_used_at, closed, closed_at, \
     last_prompt_at, message_count, revision, last_used_ms, \
     document_checked AND usage IS NOT NULL, usage";

/// A row selected with [`SUMMARY_COLUMNS`], read through rusqlite.
struct SummaryColumns<'r, 's>(&'r Row<'s>);

impl acpx_store_sql::SummaryRow for SummaryColumns<'_, '_> {
    const FALSE: &'static str = "0";

    fn text(&self, i: usize) -> Result<String, String> {
        self.0.get::<_, String>(i).map_err(|e| e.to_string())
    }

    fn opt_text(&self, i: usize) -> Result<Option<String>, String> {
        self.0
            .get::<_, Option<String>>(i)
            .map_err(|e| e.to_string())
    }

    fn int(&self, i: usize) -> Result<i64, String> {
        self.0.get::<_, i64>(i).map_err(|e| e.to_string())
    }

    fn closed(&self, i: usize) -> Result<bool, String> {
        match self.int(i)? {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(format!("{other} is neither 0 nor 1")),
        }
    }
}

/// Reads a summary from a row selected with [`SUMMARY_COLUMNS`]. Errors are the reason the
/// row is skipped, naming the column.
pub(crate) fn summary_from_row(row: &Row<'_>) -> Result<SessionSummary, String> {
    acpx_store_sql::summary_from_row(&SummaryColumns(row))
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

pub(crate) use acpx_store_sql::checked_document;

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

pub(crate) use acpx_store_sql::{JoinedText, MessageText, SearchText};

/// The searchable messages of a record ([`acpx_store_sql::message_texts`]), which the
/// `messages` table holds in parts ([`part_ranges`]).
pub(crate) fn message_texts(record: &SessionRecord) -> StoreResult<Vec<MessageText<'_>>> {
    acpx_store_sql::message_texts(record, crate::BACKEND)
}

/// The hash of role, message id and a part's text of message `m`: what `messages.text_hash`
/// holds.
pub(crate) fn part_hash(m: &MessageText<'_>, part: &str) -> i64 {
    crate::text_hash::part_hash(m.role, m.message_id.as_deref(), part)
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
    use acpx_model::{EventContext, EventPayload, EventSource, EventStream, RecordId, Timestamp};
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
