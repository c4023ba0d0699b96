//! The columns of a `sessions` row, derived from one record in one place so that they can
//! never disagree with the document written next to them, and the conversions of values into
//! SQL columns that both stores make the same way.

use acpx_model::{normalize_cwd, SessionRecord, SessionUsage, StoreError, StoreResult, Timestamp};
use serde_json::Value;

/// The columns of a `sessions` row for a record, with its document `D` (the JSON text, or
/// what a store streams it from).
pub struct SessionColumns<D> {
    /// `acp_session_id`.
    pub acp_session_id: String,
    /// `agent_session_id`.
    pub agent_session_id: Option<String>,
    /// `agent_command`.
    pub agent_command: String,
    /// `cwd`, as recorded.
    pub cwd: String,
    /// `cwd_key`: the cwd as `list` filters it ([`normalize_cwd`]); `None` when it is not an
    /// absolute path.
    pub cwd_key: Option<String>,
    /// `name`.
    pub name: Option<String>,
    /// `title`: the thread's title, `None` when empty.
    pub title: Option<String>,
    /// `created_at`, as the document writes it.
    pub created_at: String,
    /// `last_used_at`, as the document writes it.
    pub last_used_at: String,
    /// `last_used_ms`: the list order.
    pub last_used_ms: i64,
    /// `closed`.
    pub closed: bool,
    /// `closed_at`.
    pub closed_at: Option<String>,
    /// `last_prompt_at`.
    pub last_prompt_at: Option<String>,
    /// `message_count`, settled messages included.
    pub message_count: i64,
    /// `revision`.
    pub revision: i64,
    /// `usage`: the session's `SessionUsage` as JSON.
    pub usage: String,
    /// `document`.
    pub document: D,
}

impl<D> SessionColumns<D> {
    /// The row for `record` as it will be stored (its `revision` already set) in database
    /// `db` (`SQLite`, `PostgreSQL`: named by the error of a number too large for it), with
    /// `document` as its document.
    pub fn with_document(record: &SessionRecord, document: D, db: &str) -> StoreResult<Self> {
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
            message_count: to_i64(record.thread.message_count() as u64, "message count", db)?,
            revision: to_i64(record.revision, "revision", db)?,
            usage: SessionUsage::of(record).to_json_text(),
            document,
        })
    }
}

/// A timestamp exactly as the JSON documents write it (`2026-02-27T12:00:00.000Z`).
pub fn ts_text(t: &Timestamp) -> String {
    match serde_json::to_value(t) {
        Ok(Value::String(s)) => s,
        _ => t.to_rfc3339(),
    }
}

/// `v` as SQL's `i64`; `what` and the database `db` name the value that does not fit.
pub fn to_i64(v: u64, what: &str, db: &str) -> StoreResult<i64> {
    i64::try_from(v)
        .map_err(|_| StoreError::InvalidArgument(format!("{what} {v} does not fit in {db}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_past_i64_are_refused_naming_the_database() {
        assert_eq!(to_i64(7, "revision", "SQLite").unwrap(), 7);
        let err = to_i64(u64::MAX, "revision", "PostgreSQL").unwrap_err();
        assert!(
            err.to_string().contains("does not fit in PostgreSQL"),
            "{err}"
        );
    }

    #[test]
    fn timestamps_are_written_as_the_documents_write_them() {
        let t = Timestamp::parse("2026-02-27T12:00:00.000Z").unwrap();
        assert_eq!(ts_text(&t), "2026-02-27T12:00:00.000Z");
    }
}
