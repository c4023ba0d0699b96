//! The `usage` column of `session_rows` (schema version 9): the session's
//! [`SessionUsage`] as JSON, written with every save so that `acpx sessions usage` reads
//! the rows, never the documents.
//!
//! Rows written before version 9 get theirs in the migration, through the SQL function
//! [`register`] installs, which derives it from the row's document exactly as a save would.
//! A row whose document does not parse keeps NULL; such a row counts as unchecked
//! (`rows::SUMMARY_COLUMNS`), so its summary is read from its document as before.

use acpx_model::{SessionRecord, SessionUsage};
use rusqlite::functions::FunctionFlags;
use rusqlite::types::ValueRef;
use rusqlite::Connection;

/// The SQL function of the version 9 migration: `acpx_session_usage(document)`.
const SQL_FUNCTION: &str = "acpx_session_usage";

/// Installs `acpx_session_usage(document)` on `conn`: the usage column's text for a
/// document (TEXT or BLOB, padded or not), NULL when it does not parse.
pub(crate) fn register(conn: &Connection) -> rusqlite::Result<()> {
    conn.create_scalar_function(
        SQL_FUNCTION,
        1,
        FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC,
        |ctx| {
            let bytes = match ctx.get_raw(0) {
                ValueRef::Text(b) | ValueRef::Blob(b) => b,
                _ => return Ok(None),
            };
            Ok(SessionRecord::from_json_slice(bytes, "document")
                .ok()
                .map(|r| SessionUsage::of(&r).to_json_text()))
        },
    )
}

/// Removes what [`register`] installed.
pub(crate) fn unregister(conn: &Connection) -> rusqlite::Result<()> {
    conn.remove_function(SQL_FUNCTION, 1)
}

#[cfg(test)]
mod tests {
    use acpx_model::{
        ListQuery, NewSession, RecordId, SessionRecord, SessionUsage, Store, Timestamp,
    };
    use serde_json::json;

    use crate::SqliteStore;

    /// A session saved by version 8 (no `usage` column) gets its usage from its document in
    /// the upgrade, and the list reads it from the row.
    #[tokio::test]
    async fn the_upgrade_fills_in_the_usage_of_existing_rows() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("acpx.db");
        let store = SqliteStore::open(&path).unwrap();
        let mut record = SessionRecord::new(
            NewSession {
                acpx_record_id: RecordId::parse("u1").unwrap(),
                acp_session_id: "acp-u1".into(),
                agent_session_id: None,
                agent_command: "agent".into(),
                cwd: "/repo".into(),
                name: None,
            },
            Timestamp::now(),
        );
        record.thread.cumulative_token_usage.input_tokens = 40;
        record.acpx.extra.insert(
            "context_usage".into(),
            json!({"used": 7, "size": 70, "cost": {"amount": 0.5, "currency": "USD"}}),
        );
        store.create(&mut record).await.unwrap();
        drop(store);
        // Back to version 8 as it was: no column, the index and trigger of version 6.
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            "DROP INDEX sessions_list; DROP TRIGGER session_rows_edited; \
             ALTER TABLE session_rows DROP COLUMN usage; \
             CREATE INDEX sessions_list ON session_rows (last_used_ms DESC, acpx_record_id, \
                 acp_session_id, agent_session_id, agent_command, cwd, name, title, created_at, \
                 last_used_at, closed, closed_at, last_prompt_at, message_count, revision, \
                 document_checked); \
             CREATE TRIGGER session_rows_edited AFTER UPDATE OF acp_session_id ON session_rows \
             FOR EACH ROW WHEN NEW.revision = OLD.revision BEGIN \
                 UPDATE session_rows SET document_checked = 0 \
                 WHERE session_key = NEW.session_key; END; \
             PRAGMA user_version = 8;",
        )
        .unwrap();
        drop(conn);
        let store = SqliteStore::open(&path).unwrap();
        let conn = rusqlite::Connection::open(&path).unwrap();
        let stored: Option<String> = conn
            .query_row("SELECT usage FROM session_rows", [], |r| r.get(0))
            .unwrap();
        let expected = SessionUsage::of(&record);
        assert!(expected.reported && expected.cost.is_some());
        assert_eq!(
            stored.as_deref().map(SessionUsage::from_json_text),
            Some(Ok(expected.clone()))
        );
        let page = store.list(&ListQuery::default()).await.unwrap();
        assert_eq!(page.sessions[0].usage, expected);
    }
}
