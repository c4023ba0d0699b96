//! Conversions between model types and table rows.

use std::borrow::Cow;

use acpx_model::{
    EventEnvelope, RecordId, SessionRecord, SessionSummary, SettleOnLoad, StoreError, StoreResult,
};
use acpx_store_sql::{message_texts, EventColumns, SearchText};
use tokio_postgres::Row;

/// The columns of a `sessions` row ([`acpx_store_sql::SessionColumns`]) with the document's
/// text.
pub(crate) type SessionColumns = acpx_store_sql::SessionColumns<String>;

/// The database, as errors name it.
const DB: &str = "PostgreSQL";

/// `INSERT`/`UPDATE` column list of `sessions`, bound as `$2 … $18` (`$1` is the id).
pub(crate) const WRITE_COLUMNS: &str =
    "acp_session_id, agent_session_id, agent_command, cwd, cwd_key, \
     name, title, created_at, last_used_at, last_used_ms, closed, closed_at, last_prompt_at, \
     message_count, revision, usage, document";

/// `$2 … $18`, the placeholders of [`WRITE_COLUMNS`].
pub(crate) const WRITE_VALUES: &str =
    "$2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18";

/// The row for `record` as it will be stored (its `revision` already set).
pub(crate) fn session_columns(record: &SessionRecord) -> StoreResult<SessionColumns> {
    let document = record
        .to_json_string()
        .map_err(|message| StoreError::Backend {
            backend: crate::BACKEND,
            message,
        })?;
    SessionColumns::with_document(record, document, DB)
}

/// The values of [`WRITE_COLUMNS`] of `cols`, after the id.
pub(crate) fn session_params<'a>(
    cols: &'a SessionColumns,
    id: &'a String,
) -> [&'a (dyn tokio_postgres::types::ToSql + Sync); 18] {
    [
        id,
        &cols.acp_session_id,
        &cols.agent_session_id,
        &cols.agent_command,
        &cols.cwd,
        &cols.cwd_key,
        &cols.name,
        &cols.title,
        &cols.created_at,
        &cols.last_used_at,
        &cols.last_used_ms,
        &cols.closed,
        &cols.closed_at,
        &cols.last_prompt_at,
        &cols.message_count,
        &cols.revision,
        &cols.usage,
        &cols.document,
    ]
}

pub(crate) use acpx_store_sql::ts_text;

/// `v` as PostgreSQL's `bigint`; `what` names it when it does not fit.
pub(crate) fn to_i64(v: u64, what: &str) -> StoreResult<i64> {
    acpx_store_sql::to_i64(v, what, DB)
}

/// The columns `list` reads, in this order. A row without `usage` (one whose document did not
/// parse when schema version 3 filled the column in) counts as unchecked: its summary is read
/// from its document.
pub(crate) const SUMMARY_COLUMNS: &str = "acpx_record_id, acp_session_id, agent_session_id, \
     agent_command, cwd, name, title, created_at, last_used_at, closed, closed_at, \
     last_prompt_at, message_count, revision, last_used_ms, \
     (document_checked AND usage IS NOT NULL), usage";

/// A row selected with [`SUMMARY_COLUMNS`], read through tokio-postgres.
struct SummaryColumns<'r>(&'r Row);

impl acpx_store_sql::SummaryRow for SummaryColumns<'_> {
    const FALSE: &'static str = "false";

    fn text(&self, i: usize) -> Result<String, String> {
        self.0.try_get::<_, String>(i).map_err(|e| e.to_string())
    }

    fn opt_text(&self, i: usize) -> Result<Option<String>, String> {
        self.0
            .try_get::<_, Option<String>>(i)
            .map_err(|e| e.to_string())
    }

    fn int(&self, i: usize) -> Result<i64, String> {
        self.0.try_get::<_, i64>(i).map_err(|e| e.to_string())
    }

    fn closed(&self, i: usize) -> Result<bool, String> {
        self.0.try_get::<_, bool>(i).map_err(|e| e.to_string())
    }
}

/// Reads a summary from a row selected with [`SUMMARY_COLUMNS`]. Errors are the reason the
/// row is skipped, naming the column.
pub(crate) fn summary_from_row(row: &Row) -> Result<SessionSummary, String> {
    acpx_store_sql::summary_from_row(&SummaryColumns(row))
}

/// Parses a stored document (the text of the `document` column), settling its conversation
/// as it goes when `settle` is given (`Store::load_settling`: the text arrives whole from the
/// server, the messages need not be).
pub(crate) fn parse_document(
    document: &str,
    id: &str,
    revision: i64,
    location: &str,
    settle: Option<&SettleOnLoad>,
) -> StoreResult<SessionRecord> {
    let parsed = match settle {
        None => SessionRecord::from_json_slice(document.as_bytes(), location),
        Some(settle) => {
            SessionRecord::from_json_reader(document.as_bytes(), location, Some(settle))
                .map_err(|e| StoreError::io(location, e))?
        }
    };
    acpx_store_sql::checked_document(parsed, id, revision, location)
}

/// The rows of one appended batch as column arrays, inserted by the schema's `acpx_append`
/// function with one `INSERT … SELECT FROM unnest(…)` whatever the batch size: the
/// [`EventColumns`] of each event, a column at a time.
#[derive(Default)]
pub(crate) struct EventArrays {
    pub seq: Vec<i64>,
    pub event_version: Vec<i32>,
    pub timestamp: Vec<String>,
    pub acp_session_id: Vec<String>,
    pub request_id: Vec<Option<String>>,
    pub stream: Vec<String>,
    pub source: Vec<String>,
    pub event_type: Vec<String>,
    pub payload: Vec<String>,
    pub extra: Vec<Option<String>>,
    pub bytes: Vec<i64>,
}

impl EventArrays {
    pub(crate) fn new(events: &[EventEnvelope]) -> StoreResult<Self> {
        let mut c = EventArrays::default();
        for e in events {
            let (row, bytes) = EventColumns::from_event(e, DB)?;
            c.seq.push(row.seq);
            c.event_version
                .push(i32::try_from(row.event_version).map_err(|_| {
                    StoreError::InvalidArgument(format!(
                        "event seq {}: eventVersion {} is out of range",
                        e.seq, e.event_version
                    ))
                })?);
            c.timestamp.push(row.timestamp);
            c.acp_session_id.push(row.acp_session_id);
            c.request_id.push(row.request_id);
            c.stream.push(row.stream);
            c.source.push(row.source);
            c.event_type.push(row.event_type);
            c.payload.push(row.payload);
            c.extra.push(row.extra);
            c.bytes.push(bytes);
        }
        Ok(c)
    }
}

/// The columns `read_events` selects, in this order.
pub(crate) const EVENT_COLUMNS: &str = EventColumns::SELECT;

/// Rebuilds an envelope from a row selected with [`EVENT_COLUMNS`]; errors name the column.
pub(crate) fn event_from_row(row: &Row, id: &RecordId) -> Result<EventEnvelope, String> {
    let version: i32 = row
        .try_get(1)
        .map_err(|e| format!("column `event_version`: {e}"))?;
    EventColumns::from_columns(
        row.try_get(0).map_err(|e| format!("column `seq`: {e}"))?,
        i64::from(version),
        |i, name| {
            row.try_get::<_, Option<String>>(i)
                .map_err(|e| format!("column `{name}`: {e}"))
        },
    )?
    .into_event(id)
}

/// One row of the `messages` table (the text the search covers).
pub(crate) struct MessageRow {
    pub index: i32,
    pub role: &'static str,
    pub message_id: Option<String>,
    pub text: String,
    pub hash: i64,
}

/// The searchable messages of a record ([`acpx_store_sql::message_texts`]), read whole:
/// settled ones (a queue owner's earlier turns) from their spill file, which must be readable;
/// a reply still streaming into its spill as [`acpx_model::search::message_text`] reads it.
pub(crate) fn message_rows(record: &SessionRecord) -> StoreResult<Vec<MessageRow>> {
    let unreadable = |e: std::io::Error| StoreError::Backend {
        backend: crate::BACKEND,
        message: format!(
            "session {}: its settled messages could not be read back: {e}",
            record.acpx_record_id
        ),
    };
    let settled = record.thread.settled.len();
    let mut rows = Vec::new();
    for m in message_texts(record, crate::BACKEND)? {
        let text = match &m.text {
            SearchText::Str(t) => Cow::Borrowed(t.as_ref()),
            SearchText::Spilled(t) if usize::try_from(m.index).is_ok_and(|i| i < settled) => {
                Cow::Owned(t.to_text().map_err(unreadable)?)
            }
            SearchText::Spilled(t) => Cow::Owned(t.to_text_lossy()),
        };
        let index = usize::try_from(m.index).unwrap_or(usize::MAX);
        rows.extend(message_row(index, m.role, m.message_id.as_deref(), &text));
    }
    Ok(rows)
}

fn message_row(
    index: usize,
    role: &'static str,
    id: Option<&str>,
    text: &str,
) -> Option<MessageRow> {
    // PostgreSQL text cannot hold NUL; search treats it like any other character that no
    // query term can contain after whitespace splitting, so it is dropped.
    let text = if text.contains('\0') {
        text.replace('\0', "")
    } else {
        text.to_owned()
    };
    let hash = fnv1a(&[
        role.as_bytes(),
        id.unwrap_or("").as_bytes(),
        text.as_bytes(),
    ]);
    Some(MessageRow {
        index: i32::try_from(index).ok()?,
        role,
        message_id: id.map(str::to_owned),
        text,
        hash,
    })
}

/// FNV-1a (64 bit) over the parts, each followed by a separator byte. Stable across Rust
/// versions, unlike `std`'s hasher, because the value is stored.
pub(crate) fn fnv1a(parts: &[&[u8]]) -> i64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for part in parts {
        for &b in part.iter().chain(std::iter::once(&0xffu8)) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x100000001b3);
        }
    }
    h as i64
}
