//! Conversions between model types and table rows.

use acpx_model::search::message_text;
use acpx_model::{
    normalize_cwd, EventEnvelope, RecordId, SessionRecord, SessionSummary, SettleOnLoad,
    StoreError, StoreResult, Timestamp,
};
use serde_json::Value;
use tokio_postgres::Row;

/// The columns of a `sessions` row, all derived from one record in one place so that they
/// can never disagree with the document written next to them.
pub(crate) struct SessionColumns {
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
    pub closed: bool,
    pub closed_at: Option<String>,
    pub last_prompt_at: Option<String>,
    pub message_count: i64,
    pub revision: i64,
    /// The session's `SessionUsage` as JSON (schema version 3).
    pub usage: String,
    pub document: String,
}

/// `INSERT`/`UPDATE` column list of `sessions`, bound as `$2 … $18` (`$1` is the id).
pub(crate) const WRITE_COLUMNS: &str =
    "acp_session_id, agent_session_id, agent_command, cwd, cwd_key, \
     name, title, created_at, last_used_at, last_used_ms, closed, closed_at, last_prompt_at, \
     message_count, revision, usage, document";

/// `$2 … $18`, the placeholders of [`WRITE_COLUMNS`].
pub(crate) const WRITE_VALUES: &str =
    "$2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18";

impl SessionColumns {
    /// The row for `record` as it will be stored (its `revision` already set).
    pub(crate) fn from_record(record: &SessionRecord) -> StoreResult<Self> {
        let document = record
            .to_json_string()
            .map_err(|message| StoreError::Backend {
                backend: crate::BACKEND,
                message,
            })?;
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
            closed: record.closed,
            closed_at: record.closed_at.as_ref().map(ts_text),
            last_prompt_at: record.last_prompt_at.as_ref().map(ts_text),
            message_count: to_i64(record.thread.message_count() as u64, "message count")?,
            revision: to_i64(record.revision, "revision")?,
            usage: acpx_model::SessionUsage::of(record).to_json_text(),
            document,
        })
    }

    /// The values of [`WRITE_COLUMNS`], after the id.
    pub(crate) fn params<'a>(
        &'a self,
        id: &'a String,
    ) -> [&'a (dyn tokio_postgres::types::ToSql + Sync); 18] {
        [
            id,
            &self.acp_session_id,
            &self.agent_session_id,
            &self.agent_command,
            &self.cwd,
            &self.cwd_key,
            &self.name,
            &self.title,
            &self.created_at,
            &self.last_used_at,
            &self.last_used_ms,
            &self.closed,
            &self.closed_at,
            &self.last_prompt_at,
            &self.message_count,
            &self.revision,
            &self.usage,
            &self.document,
        ]
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
        .map_err(|_| StoreError::InvalidArgument(format!("{what} {v} does not fit in PostgreSQL")))
}

/// The columns `list` reads, in this order. A row without `usage` (one whose document did not
/// parse when schema version 3 filled the column in) counts as unchecked: its summary is read
/// from its document.
pub(crate) const SUMMARY_COLUMNS: &str = "acpx_record_id, acp_session_id, agent_session_id, \
     agent_command, cwd, name, title, created_at, last_used_at, closed, closed_at, \
     last_prompt_at, message_count, revision, last_used_ms, \
     (document_checked AND usage IS NOT NULL), usage";

/// Reads a summary from a row selected with [`SUMMARY_COLUMNS`]. Errors are the reason the
/// row is skipped, naming the column.
pub(crate) fn summary_from_row(row: &Row) -> Result<SessionSummary, String> {
    let text = |i: usize, name: &str| -> Result<String, String> {
        row.try_get::<_, String>(i)
            .map_err(|e| format!("column `{name}`: {e}"))
    };
    let opt_text = |i: usize, name: &str| -> Result<Option<String>, String> {
        row.try_get::<_, Option<String>>(i)
            .map_err(|e| format!("column `{name}`: {e}"))
    };
    let int = |i: usize, name: &str| -> Result<i64, String> {
        row.try_get::<_, i64>(i)
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
    let closed: bool = row
        .try_get(9)
        .map_err(|e| format!("column `closed`: {e}"))?;
    let closed_at = opt_text(10, "closed_at")?
        .map(|s| ts(s, "closed_at"))
        .transpose()?;
    if closed_at.is_some() && !closed {
        return Err("column `closed_at` is set but `closed` is false".into());
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

/// The rows of one appended batch as column arrays, inserted by the schema's `acpx_append`
/// function with one `INSERT … SELECT FROM unnest(…)` whatever the batch size.
#[derive(Default)]
pub(crate) struct EventColumns {
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

impl EventColumns {
    pub(crate) fn new(events: &[EventEnvelope]) -> StoreResult<Self> {
        let mut c = EventColumns::default();
        for e in events {
            let json_err = |err: serde_json::Error| {
                StoreError::InvalidArgument(format!("event seq {}: {err}", e.seq))
            };
            // The NDJSON line is the unit of the retention budget (the file store's size).
            let line_len = serde_json::to_vec(e).map_err(json_err)?.len();
            c.seq.push(to_i64(e.seq, "event seq")?);
            c.event_version
                .push(i32::try_from(e.event_version).map_err(|_| {
                    StoreError::InvalidArgument(format!(
                        "event seq {}: eventVersion {} is out of range",
                        e.seq, e.event_version
                    ))
                })?);
            c.timestamp.push(ts_text(&e.timestamp));
            c.acp_session_id.push(e.acp_session_id.clone());
            c.request_id.push(e.request_id.clone());
            c.stream.push(e.stream.as_str().to_owned());
            c.source.push(e.source.as_str().to_owned());
            c.event_type.push(e.event_type.as_str().to_owned());
            c.payload
                .push(serde_json::to_string(&e.payload).map_err(json_err)?);
            c.extra.push(if e.extra.is_empty() {
                None
            } else {
                Some(serde_json::to_string(&e.extra).map_err(json_err)?)
            });
            c.bytes
                .push(to_i64(line_len as u64 + 1, "event line length")?);
        }
        Ok(c)
    }
}

/// The columns `read_events` selects, in this order.
pub(crate) const EVENT_COLUMNS: &str = acpx_model::EventColumns::SELECT;

/// Rebuilds an envelope from a row selected with [`EVENT_COLUMNS`]; errors name the column.
pub(crate) fn event_from_row(row: &Row, id: &RecordId) -> Result<EventEnvelope, String> {
    let version: i32 = row
        .try_get(1)
        .map_err(|e| format!("column `event_version`: {e}"))?;
    acpx_model::EventColumns::from_columns(
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

/// The searchable messages of a record (resume markers have no text and no row), settled
/// ones (a queue owner's earlier turns) read back from their spill file.
pub(crate) fn message_rows(record: &SessionRecord) -> StoreResult<Vec<MessageRow>> {
    let unreadable = |e: std::io::Error| StoreError::Backend {
        backend: "postgres",
        message: format!(
            "session {}: its settled messages could not be read back: {e}",
            record.acpx_record_id
        ),
    };
    let mut rows = Vec::new();
    for t in record.thread.settled.searchable().map_err(unreadable)? {
        let text = t.text.to_text().map_err(unreadable)?;
        rows.extend(message_row(t.index, t.role, t.message_id.as_deref(), &text));
    }
    let start = record.thread.settled.len();
    for (i, m) in record.thread.messages.iter().enumerate() {
        if let Some((role, id, text)) = message_text(m) {
            rows.extend(message_row(start + i, role, id, &text));
        }
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
