//! An event as a database store keeps it: the envelope's fields as columns, read back into an
//! envelope ([`EventColumns::into_event`]) and made from one ([`EventColumns::from_event`]).

use acpx_model::{EventEnvelope, RecordId, StoreError, StoreResult, Timestamp};
use serde_json::{Map, Value};

use crate::columns::{to_i64, ts_text};

/// An event as a database store keeps it: the envelope's fields as columns, the payload
/// and the unknown keys (`extra`, a JSON object) as JSON text. The SQLite and PostgreSQL stores
/// read a row into this and build the envelope with [`EventColumns::into_event`], whose errors
/// name the column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventColumns {
    /// `seq`.
    pub seq: i64,
    /// `event_version`.
    pub event_version: i64,
    /// `timestamp`, as text.
    pub timestamp: String,
    /// `acp_session_id`.
    pub acp_session_id: String,
    /// `request_id`.
    pub request_id: Option<String>,
    /// `stream`.
    pub stream: String,
    /// `source`.
    pub source: String,
    /// `type`.
    pub event_type: String,
    /// `payload`, JSON text.
    pub payload: String,
    /// `extra`: the envelope keys this version does not know, a JSON object's text.
    pub extra: Option<String>,
}

impl EventColumns {
    /// The columns a database store selects for an event, in the order
    /// [`EventColumns::from_columns`] reads them.
    pub const SELECT: &'static str = "seq, event_version, timestamp, acp_session_id, \
         request_id, stream, source, type, payload, extra";

    /// The columns of a row selected with [`EventColumns::SELECT`]: `seq` and
    /// `event_version` as read, the others through `text(index, name)` (`None` for NULL);
    /// errors name the column.
    pub fn from_columns(
        seq: i64,
        event_version: i64,
        text: impl Fn(usize, &str) -> Result<Option<String>, String>,
    ) -> Result<Self, String> {
        let req = |i: usize, name: &str| -> Result<String, String> {
            text(i, name)?.ok_or_else(|| format!("column `{name}` is NULL"))
        };
        Ok(EventColumns {
            seq,
            event_version,
            timestamp: req(2, "timestamp")?,
            acp_session_id: req(3, "acp_session_id")?,
            request_id: text(4, "request_id")?,
            stream: req(5, "stream")?,
            source: req(6, "source")?,
            event_type: req(7, "type")?,
            payload: req(8, "payload")?,
            extra: text(9, "extra")?,
        })
    }

    /// The columns of `e` as a database store writes them, and the length in bytes of its
    /// NDJSON line with its newline: the unit of the retention budget (the file store's
    /// size). `db` names the database in the error of a number too large for it.
    pub fn from_event(e: &EventEnvelope, db: &str) -> StoreResult<(Self, i64)> {
        let json_err = |err: serde_json::Error| {
            StoreError::InvalidArgument(format!("event seq {}: {err}", e.seq))
        };
        let line_len = serde_json::to_vec(e).map_err(json_err)?.len();
        let columns = EventColumns {
            seq: to_i64(e.seq, "event seq", db)?,
            event_version: i64::from(e.event_version),
            timestamp: ts_text(&e.timestamp),
            acp_session_id: e.acp_session_id.clone(),
            request_id: e.request_id.clone(),
            stream: e.stream.as_str().to_owned(),
            source: e.source.as_str().to_owned(),
            event_type: e.event_type.as_str().to_owned(),
            payload: serde_json::to_string(&e.payload).map_err(json_err)?,
            extra: if e.extra.is_empty() {
                None
            } else {
                Some(serde_json::to_string(&e.extra).map_err(json_err)?)
            },
        };
        Ok((
            columns,
            to_i64(line_len as u64 + 1, "event line length", db)?,
        ))
    }

    /// The envelope of session `id` these columns hold; an error names the column at fault.
    pub fn into_event(self, id: &RecordId) -> Result<EventEnvelope, String> {
        let EventColumns {
            seq,
            event_version,
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
            event_version: u32::try_from(event_version)
                .map_err(|_| format!("column `event_version`: {event_version} is out of range"))?,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_make_the_envelope_and_errors_name_the_column() {
        let id = RecordId::parse("rec-1").unwrap();
        let line = r#"{"eventVersion":1,"seq":7,"timestamp":"2026-02-27T12:10:00.000Z","acpxRecordId":"rec-1","acpSessionId":"a","requestId":"r","stream":"prompt","source":"acp","type":"x.y","payload":{"z":[1,2]},"later":true}"#;
        let cols = EventColumns {
            seq: 7,
            event_version: 1,
            timestamp: "2026-02-27T12:10:00.000Z".into(),
            acp_session_id: "a".into(),
            request_id: Some("r".into()),
            stream: "prompt".into(),
            source: "acp".into(),
            event_type: "x.y".into(),
            payload: r#"{"z":[1,2]}"#.into(),
            extra: Some(r#"{"later":true}"#.into()),
        };
        assert_eq!(cols.clone().into_event(&id).unwrap().to_ndjson(), line);
        let fails = |change: fn(&mut EventColumns)| {
            let mut c = cols.clone();
            change(&mut c);
            c.into_event(&id).unwrap_err()
        };
        assert!(fails(|c| c.seq = -1).starts_with("column `seq`"));
        assert!(fails(|c| c.event_version = 1 << 40).starts_with("column `event_version`"));
        assert!(fails(|c| c.timestamp = "yesterday".into()).starts_with("column `timestamp`"));
        assert!(fails(|c| c.payload = "{".into()).starts_with("column `payload`"));
        assert!(fails(|c| c.extra = Some("[]".into())).starts_with("column `extra`"));
    }

    #[test]
    fn an_event_makes_the_columns_it_is_read_back_from() {
        let line = r#"{"eventVersion":1,"seq":7,"timestamp":"2026-02-27T12:10:00.000Z","acpxRecordId":"rec-1","acpSessionId":"a","requestId":"r","stream":"prompt","source":"acp","type":"x.y","payload":{"z":[1,2]},"later":true}"#;
        let e = EventEnvelope::from_ndjson_line(line.as_bytes()).unwrap();
        let (cols, bytes) = EventColumns::from_event(&e, "SQLite").unwrap();
        assert_eq!(bytes, line.len() as i64 + 1);
        assert_eq!(cols.extra.as_deref(), Some(r#"{"later":true}"#));
        let id = RecordId::parse("rec-1").unwrap();
        assert_eq!(cols.into_event(&id).unwrap().to_ndjson(), line);
    }
}
