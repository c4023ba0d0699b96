//! An `event_rows` row read back: its columns taken as text while the statement runs, and
//! parsed into an [`EventEnvelope`] after, without the connection.
//!
//! Parsing a page's payloads is most of a read's CPU. Done while the rows are stepped, it
//! holds the connection (one per store) that long, and every other call waits: a migration
//! writing the next batch while it verifies the last one did, as does a save of a live
//! session while a `watch` reads its log. So a strict
//! [`read_events`](crate::Inner::read_events) takes each row's text under the connection
//! ([`EventRowText::take`]) and parses it once the connection is released
//! ([`EventRowText::into_event`]). (A lenient read parses each row as it steps: a damaged row
//! must not fill a place of the page's events, and only parsing tells it is damaged.)

use acpx_model::{EventEnvelope, RecordId, Timestamp};
use rusqlite::Row;
use serde_json::{Map, Value};

/// The columns `read_events` selects, in this order.
pub(crate) const EVENT_COLUMNS: &str = "seq, event_version, timestamp, acp_session_id, \
     request_id, stream, source, type, payload, extra";

/// The columns of one row selected with [`EVENT_COLUMNS`], as stored.
pub(crate) struct EventRowText {
    seq: i64,
    version: i64,
    timestamp: String,
    acp_session_id: String,
    request_id: Option<String>,
    stream: String,
    source: String,
    event_type: String,
    payload: String,
    extra: Option<String>,
}

impl EventRowText {
    /// Takes the row's columns; errors name the column.
    pub(crate) fn take(row: &Row<'_>) -> Result<EventRowText, String> {
        let col = |i: usize, name: &str| -> Result<Option<String>, String> {
            row.get::<_, Option<String>>(i)
                .map_err(|e| format!("column `{name}`: {e}"))
        };
        let req = |i: usize, name: &str| -> Result<String, String> {
            col(i, name)?.ok_or_else(|| format!("column `{name}` is NULL"))
        };
        Ok(EventRowText {
            seq: row.get(0).map_err(|e| format!("column `seq`: {e}"))?,
            version: row
                .get(1)
                .map_err(|e| format!("column `event_version`: {e}"))?,
            timestamp: req(2, "timestamp")?,
            acp_session_id: req(3, "acp_session_id")?,
            request_id: col(4, "request_id")?,
            stream: req(5, "stream")?,
            source: req(6, "source")?,
            event_type: req(7, "type")?,
            payload: req(8, "payload")?,
            extra: col(9, "extra")?,
        })
    }

    /// The envelope of session `id` these columns hold; errors name the column.
    pub(crate) fn into_event(self, id: &RecordId) -> Result<EventEnvelope, String> {
        let EventRowText {
            seq,
            version,
            timestamp,
            acp_session_id,
            request_id,
            stream,
            source,
            event_type,
            payload,
            extra,
        } = self;
        let extra = match extra {
            None => Map::new(),
            Some(text) => serde_json::from_str::<Map<String, Value>>(&text)
                .map_err(|e| format!("column `extra`: not a JSON object: {e}"))?,
        };
        Ok(EventEnvelope {
            event_version: u32::try_from(version)
                .map_err(|_| format!("column `event_version`: {version} is out of range"))?,
            seq: u64::try_from(seq).map_err(|_| format!("column `seq`: {seq} is negative"))?,
            timestamp: Timestamp::parse(&timestamp)
                .map_err(|e| format!("column `timestamp`: {e}"))?,
            acpx_record_id: id.clone(),
            acp_session_id,
            request_id,
            stream: stream.as_str().into(),
            source: source.as_str().into(),
            event_type: event_type.as_str().into(),
            payload: serde_json::from_str(&payload)
                .map_err(|e| format!("column `payload`: not JSON: {e}"))?,
            extra,
        })
    }
}

/// Rebuilds an envelope from a row selected with [`EVENT_COLUMNS`] (both steps at once, for
/// a caller that checks rows as it steps them); errors name the column.
pub(crate) fn event_from_row(row: &Row<'_>, id: &RecordId) -> Result<EventEnvelope, String> {
    EventRowText::take(row)?.into_event(id)
}
