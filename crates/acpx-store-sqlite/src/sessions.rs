//! The `sessions` and `messages` rows: create, save, load, close, delete and list.

use acpx_model::{
    ClosedFilter, ListPage, ListQuery, RecordId, SessionRecord, SessionSummary, SettleOnLoad,
    StoreError, StoreResult, Timestamp,
};
use rusqlite::types::Value as SqlValue;

use rusqlite::{params, Connection, OptionalExtension, Transaction, MAIN_DB};

use crate::connection::{TxError, TxResult};
use crate::rows::{
    parse_document, part_ranges, spilled_part_ranges, summary_from_row, MessageText, SearchText,
    SessionColumns, SUMMARY_COLUMNS,
};
use acpx_store_sql::list_page::Next;
use acpx_store_sql::{summary_matching_columns, ListPageBuilder, ListSql, Param, SqliteDialect};

use crate::{lock, rows, Inner};

/// `UPDATE` of a row's columns to `?2 … ?17` (the document written before it), against
/// revision `?18`; the row is marked checked again.
const UPDATE_ROW: &str = "UPDATE session_rows SET (acp_session_id, agent_session_id, \
     agent_command, cwd, cwd_key, name, title, created_at, last_used_at, last_used_ms, closed, \
     closed_at, last_prompt_at, message_count, revision, usage) = \
     (?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17), \
     document_checked = 1 WHERE session_key = ?1 AND revision = ?18";

/// `INSERT` of a new row (its document inserted after it).
pub(crate) const INSERT_ROW: &str = "INSERT INTO session_rows (acpx_record_id, acp_session_id, \
     agent_session_id, agent_command, cwd, cwd_key, name, title, created_at, last_used_at, \
     last_used_ms, closed, closed_at, last_prompt_at, message_count, revision, usage, \
     document_checked) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, 1)";

/// A row's revision and document (NULL when its document row is missing).
const SELECT_DOCUMENT: &str = "SELECT r.revision, d.document, r.session_key \
     FROM session_rows r LEFT JOIN session_documents d USING (session_key) \
     WHERE r.acpx_record_id = ?1";

macro_rules! session_params {
    ($id:expr, $c:expr $(, $more:expr)*) => {
        params![
            $id,
            $c.acp_session_id,
            $c.agent_session_id,
            $c.agent_command,
            $c.cwd,
            $c.cwd_key,
            $c.name,
            $c.title,
            $c.created_at,
            $c.last_used_at,
            $c.last_used_ms,
            $c.closed,
            $c.closed_at,
            $c.last_prompt_at,
            $c.message_count,
            $c.revision,
            $c.usage
            $(, $more)*
        ]
    };
}

fn save_row(
    tx: &Transaction<'_>,
    id: &RecordId,
    expected: u64,
    expected_i: i64,
    cols: &SessionColumns<'_>,
    msgs: &[MessageText<'_>],
) -> TxResult<()> {
    let row: Option<(i64, i64)> = tx
        .prepare_cached("SELECT session_key, revision FROM session_rows WHERE acpx_record_id = ?1")?
        .query_row([id.as_str()], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    let key = match row {
        None => return Err(StoreError::NotFound(id.clone()).into()),
        Some((_, actual)) if actual != expected_i => {
            return Err(StoreError::Conflict {
                id: id.clone(),
                expected,
                actual: u64::try_from(actual).unwrap_or(0),
            }
            .into())
        }
        Some((key, _)) => key,
    };
    // The document first: the row's update after it marks the row checked (a change of a
    // document alone marks it unchecked, see schema version 6).
    crate::document::write(tx, id, key, &cols.document, false)?;
    update_row(tx, key, cols, expected_i)?;
    sync_messages(tx, id, msgs)?;
    Ok(())
}

/// Updates the row's columns against revision `expected` (checked by the caller in the same
/// transaction: exactly one row changes).
fn update_row(
    tx: &Transaction<'_>,
    key: i64,
    cols: &SessionColumns<'_>,
    expected: i64,
) -> TxResult<()> {
    let changed = tx
        .prepare_cached(UPDATE_ROW)?
        .execute(session_params!(key, cols, expected))?;
    if changed != 1 {
        return Err(TxError::Store(StoreError::Backend {
            backend: crate::BACKEND,
            message: format!(
                "session row {key}: the update of its columns changed {changed} rows, not 1"
            ),
        }));
    }
    Ok(())
}

impl Inner {
    pub(crate) fn create(
        &self,
        id: &RecordId,
        cols: SessionColumns<'_>,
        msgs: &[MessageText<'_>],
    ) -> StoreResult<()> {
        self.mutate(id, "create the session", false, |tx| {
            let exists = tx
                .prepare_cached("SELECT 1 FROM session_rows WHERE acpx_record_id = ?1")?
                .exists([id.as_str()])?;
            if exists {
                return Err(StoreError::AlreadyExists(id.clone()).into());
            }
            tx.prepare_cached(INSERT_ROW)?
                .execute(session_params!(id.as_str(), cols))?;
            let key = tx.last_insert_rowid();
            crate::document::write(tx, id, key, &cols.document, true)?;
            tx.prepare_cached("INSERT INTO event_logs (session_key) VALUES (?1)")?
                .execute([key])?;
            sync_messages(tx, id, msgs)?;
            Ok(())
        })
    }

    pub(crate) fn save(
        &self,
        id: &RecordId,
        expected: u64,
        cols: SessionColumns<'_>,
        msgs: &[MessageText<'_>],
    ) -> StoreResult<()> {
        let expected_i = rows::to_i64(expected, "revision")?;
        self.mutate(id, "save the session", false, |tx| {
            save_row(tx, id, expected, expected_i, &cols, msgs)
        })
    }

    /// The `revision` column of a session's row, read without its document (which may be
    /// damaged): what `Store::replace_snapshot` saves against.
    pub(crate) fn row_revision(&self, id: &RecordId) -> StoreResult<u64> {
        let conn = self.conn();
        let revision: Option<i64> = conn
            .prepare_cached("SELECT revision FROM session_rows WHERE acpx_record_id = ?1")
            .and_then(|mut st| st.query_row([id.as_str()], |r| r.get(0)).optional())
            .map_err(self.sql("read the session's revision"))?;
        match revision {
            Some(r) => Ok(u64::try_from(r).unwrap_or(0)),
            None => Err(StoreError::NotFound(id.clone())),
        }
    }

    pub(crate) fn load(&self, id: &RecordId) -> StoreResult<SessionRecord> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare_cached(SELECT_DOCUMENT)
            .map_err(self.sql("load the session"))?;
        let mut rows = stmt
            .query([id.as_str()])
            .map_err(self.sql("load the session"))?;
        let Some(row) = rows.next().map_err(self.sql("load the session"))? else {
            return Err(StoreError::NotFound(id.clone()));
        };
        let revision: i64 = row.get(0).map_err(self.sql("load the session"))?;
        let document = row.get_ref(1).map_err(self.sql("load the session"))?;
        parse_document(
            document,
            id.as_str(),
            revision,
            &self.row_location(id.as_str()),
        )
    }

    /// `Store::summary`: the row's summary columns, without its document; a row acpx did not
    /// write itself is checked against its document first, as `list` checks it.
    pub(crate) fn summary(&self, id: &RecordId) -> StoreResult<SessionSummary> {
        let ctx = "read the session's summary";
        let conn = self.conn();
        let mut stmt = conn
            .prepare_cached(&format!(
                "SELECT {SUMMARY_COLUMNS} FROM session_rows WHERE acpx_record_id = ?1"
            ))
            .map_err(self.sql(ctx))?;
        let mut rows = stmt.query([id.as_str()]).map_err(self.sql(ctx))?;
        let Some(row) = rows.next().map_err(self.sql(ctx))? else {
            return Err(StoreError::NotFound(id.clone()));
        };
        let checked: i64 = row.get(15).unwrap_or(0);
        summary_from_row(row)
            .and_then(|s| {
                if checked == 1 {
                    Ok(s)
                } else {
                    self.check_document(&conn, &s)
                }
            })
            .map_err(|reason| StoreError::corrupt(self.row_location(id.as_str()), None, reason))
    }

    /// [`Inner::load`] read through SQLite's incremental blob I/O, 64 KiB at a time, settling
    /// the conversation as it goes (`Store::load_settling`): the document is never whole in
    /// memory, neither in SQLite's nor in this process's.
    pub(crate) fn load_settling(
        &self,
        id: &RecordId,
        settle: &SettleOnLoad,
    ) -> StoreResult<SessionRecord> {
        let conn = self.conn();
        // One read transaction: the revision and the document of the same save.
        let tx = conn
            .unchecked_transaction()
            .map_err(self.sql("load the session"))?;
        let (_, _, record) = self.read_settling(&tx, id, settle, "load the session")?;
        Ok(record)
    }

    /// The revision, the session key and the record of `id`, the document read through the
    /// incremental blob I/O and settled as it is parsed, within the caller's transaction.
    fn read_settling(
        &self,
        conn: &Connection,
        id: &RecordId,
        settle: &SettleOnLoad,
        ctx: &str,
    ) -> StoreResult<(i64, i64, SessionRecord)> {
        let location = self.row_location(id.as_str());
        // `typeof`, not the document: selecting the column would read it whole.
        let row: Option<(i64, i64, String)> = conn
            .prepare_cached(
                "SELECT r.revision, r.session_key, typeof(d.document) \
                 FROM session_rows r LEFT JOIN session_documents d USING (session_key) \
                 WHERE r.acpx_record_id = ?1",
            )
            .and_then(|mut st| {
                st.query_row([id.as_str()], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                    .optional()
            })
            .map_err(self.sql(ctx))?;
        let Some((revision, key, kind)) = row else {
            return Err(StoreError::NotFound(id.clone()));
        };
        if kind == "text" || kind == "blob" {
            let blob = conn
                .blob_open(MAIN_DB, c"session_documents", c"document", key, true)
                .map_err(self.sql(ctx))?;
            let parsed = SessionRecord::from_json_reader(blob, &location, Some(settle))
                .map_err(|e| StoreError::io(&location, e))?;
            let record = rows::checked_document(parsed, id.as_str(), revision, &location)?;
            return Ok((revision, key, record));
        }
        // A row without a document: parsing says what is wrong with it, as `load` does.
        let mut record = conn
            .prepare_cached(SELECT_DOCUMENT)
            .and_then(|mut st| {
                st.query_row([id.as_str()], |r| {
                    Ok(parse_document(
                        r.get_ref(1)?,
                        id.as_str(),
                        revision,
                        &location,
                    ))
                })
            })
            .map_err(self.sql(ctx))??;
        settle.settle_loaded(&mut record.thread);
        Ok((revision, key, record))
    }

    /// Marks a session closed; idempotent. With `settle`, the document is read settling,
    /// through the incremental blob I/O (`Store::close_settling`).
    pub(crate) fn close(
        &self,
        id: &RecordId,
        at: Timestamp,
        settle: Option<&SettleOnLoad>,
    ) -> StoreResult<SessionRecord> {
        let location = self.row_location(id.as_str());
        self.mutate(id, "close the session", false, |tx| {
            let (revision, key, mut record) = match settle {
                Some(settle) => self.read_settling(tx, id, settle, "close the session")?,
                None => {
                    let mut stmt = tx.prepare_cached(SELECT_DOCUMENT)?;
                    let mut rows = stmt.query([id.as_str()])?;
                    let Some(row) = rows.next()? else {
                        return Err(StoreError::NotFound(id.clone()).into());
                    };
                    let revision: i64 = row.get(0)?;
                    let key: i64 = row.get(2)?;
                    let record = parse_document(row.get_ref(1)?, id.as_str(), revision, &location)?;
                    (revision, key, record)
                }
            };
            if record.closed {
                return Ok(record);
            }
            record.closed = true;
            record.closed_at = Some(at);
            record.pid = None;
            record.revision += 1;
            {
                // Serialized by the write itself, straight into the row (this runs on the
                // thread that does the write): the document is never whole in memory.
                let cols = rows::streamed_columns(&record)?;
                crate::document::write(tx, id, key, &cols.document, false)?;
                update_row(tx, key, &cols, revision)?;
            }
            Ok(record)
        })
    }

    pub(crate) fn delete(&self, id: &RecordId) -> StoreResult<bool> {
        // Its events go with it: nothing buffered is left to write afterwards.
        self.pending().remove(id);
        let lock = self.call_lock(id)?;
        let existed = self.transaction("delete the session", false, |tx| {
            let Some(key) = session_key(tx, id)? else {
                return Ok(false);
            };
            tx.prepare_cached("DELETE FROM messages WHERE acpx_record_id = ?1")?
                .execute([id.as_str()])?;
            for sql in [
                "DELETE FROM event_rows WHERE session_key = ?1",
                "DELETE FROM event_requests WHERE session_key = ?1",
                "DELETE FROM event_logs WHERE session_key = ?1",
                "DELETE FROM session_documents WHERE session_key = ?1",
                "DELETE FROM session_rows WHERE session_key = ?1",
            ] {
                tx.prepare_cached(sql)?.execute([key])?;
            }
            Ok(true)
        })?;
        self.write_errors.forget(id);
        acpx_lock::lease_file::remove_unheld(&self.lease_path(id))?;
        // Only a lock this call took is removed; a caller's held lock stays valid.
        if let Some(lock) = &lock {
            lock::remove_lock_file(lock);
        }
        Ok(existed)
    }

    pub(crate) fn list(&self, query: &ListQuery) -> StoreResult<ListPage> {
        self.list_where(query, None)
    }

    /// [`acpx_model::Store::sessions_matching_id`]: the rows whose columns pass
    /// [`acpx_model::id_text_matches`], read and checked as `list` reads them, instead of
    /// every row (30 ms with 10k sessions). `substr(x, -length(t)) = t` is the suffix test
    /// and `substr(x, 1, length(t)) = t` the prefix test, exact and case-sensitive (`LIKE` is
    /// neither); an empty text, a suffix of everything, takes the list of every row.
    pub(crate) fn sessions_matching_id(&self, text: &str) -> StoreResult<Vec<SessionSummary>> {
        let every = ListQuery {
            closed: ClosedFilter::Any,
            ..ListQuery::default()
        };
        // SQLite's `length()` stops at a NUL: such a text is tested in Rust on every row.
        let page = if text.is_empty() || text.contains('\0') {
            self.list_where(&every, None)?
        } else {
            self.list_where(&every, Some(text))?
        };
        // The columns passed the SQL test; a row whose document was changed outside acpx
        // is listed with what its document says, so the test is applied once more.
        Ok(page
            .sessions
            .into_iter()
            .filter(|s| acpx_model::id_text_matches(s, text))
            .collect())
    }

    /// `list`, with the rows also restricted to those a typed id `id_text` could designate.
    fn list_where(&self, query: &ListQuery, id_text: Option<&str>) -> StoreResult<ListPage> {
        let mut list = ListSql::new::<SqliteDialect>(query, SUMMARY_COLUMNS, "session_rows")?;
        if let Some(t) = id_text {
            let t = list.bind(Param::Text(t.to_owned()));
            list.and(&format!(
                "(acp_session_id = {t} OR substr(acpx_record_id, -length({t})) = {t} \
                 OR substr(acp_session_id, -length({t})) = {t} \
                 OR substr(acpx_record_id, 1, length({t})) = {t} \
                 OR substr(acp_session_id, 1, length({t})) = {t})"
            ));
        }
        let (sql, params) = list.ordered();
        let args = params.into_iter().map(|p| match p {
            Param::Text(t) => SqlValue::Text(t),
            Param::Int(i) => SqlValue::Integer(i),
        });

        let conn = self.conn();
        let ctx = "list sessions";
        let mut stmt = conn.prepare_cached(&sql).map_err(self.sql(ctx))?;
        let mut rows = stmt
            .query(rusqlite::params_from_iter(args))
            .map_err(self.sql(ctx))?;
        let mut page = ListPageBuilder::new(query);
        while let Some(row) = rows.next().map_err(self.sql(ctx))? {
            let key = row
                .get_ref(0)
                .ok()
                .and_then(|v| v.as_str().ok().map(str::to_owned))
                .unwrap_or_default();
            let checked: i64 = row.get(15).unwrap_or(0);
            let summary = summary_from_row(row).and_then(|s| {
                if checked == 1 {
                    Ok(s)
                } else {
                    self.check_document(&conn, &s)
                }
            });
            if page.push(&key, summary, |k| self.row_location(k)) == Next::Full {
                break;
            }
        }
        Ok(page.finish())
    }

    /// For a row whose document was changed outside acpx: the columns are used only if the
    /// document validates and says the same.
    pub(crate) fn check_document(
        &self,
        conn: &Connection,
        columns: &acpx_model::SessionSummary,
    ) -> Result<acpx_model::SessionSummary, String> {
        let id = columns.acpx_record_id.as_str();
        let revision = i64::try_from(columns.revision).unwrap_or(i64::MAX);
        let record = conn
            .prepare_cached(SELECT_DOCUMENT)
            .and_then(|mut stmt| {
                stmt.query_row([id], |r| {
                    Ok(parse_document(
                        r.get_ref(1)?,
                        id,
                        revision,
                        &self.row_location(id),
                    ))
                })
            })
            .map_err(|e| format!("reading the document: {e}"))?;
        summary_matching_columns(record, columns)
    }

    pub(crate) fn exists(&self, id: &RecordId) -> StoreResult<bool> {
        self.conn()
            .prepare_cached("SELECT 1 FROM session_rows WHERE acpx_record_id = ?1")
            .and_then(|mut s| s.exists([id.as_str()]))
            .map_err(self.sql("look up the session"))
    }
}

/// The `session_key` of a session, if it exists.
pub(crate) fn session_key(conn: &Connection, id: &RecordId) -> rusqlite::Result<Option<i64>> {
    conn.prepare_cached("SELECT session_key FROM session_rows WHERE acpx_record_id = ?1")?
        .query_row([id.as_str()], |r| r.get(0))
        .optional()
}

/// The stored search parts of a session, without their text: read from `messages_hashes`
/// alone (schema version 8), never from the table, whose rows hold the text before the hash.
pub(crate) const SELECT_PART_HASHES: &str =
    "SELECT message_index, part, text_hash, text_start FROM messages WHERE acpx_record_id = ?1";

/// Brings the `messages` rows (and through its triggers the FTS index) in step with a
/// snapshot, touching only the message parts that changed.
pub(crate) fn sync_messages(
    tx: &Transaction<'_>,
    id: &RecordId,
    messages: &[MessageText<'_>],
) -> TxResult<()> {
    let mut existing = std::collections::HashMap::new();
    {
        let mut stmt = tx.prepare_cached(SELECT_PART_HASHES)?;
        let mut rows = stmt.query([id.as_str()])?;
        while let Some(row) = rows.next()? {
            existing.insert(
                (row.get::<_, i64>(0)?, row.get::<_, i64>(1)?),
                (row.get::<_, i64>(2)?, row.get::<_, i64>(3)?),
            );
        }
    }
    let mut insert = tx.prepare_cached(
        "INSERT INTO messages (acpx_record_id, message_index, part, role, message_id, text, \
         text_hash, text_start) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?;
    let mut update = tx.prepare_cached(
        "UPDATE messages SET role = ?4, message_id = ?5, text = ?6, text_hash = ?7, \
         text_start = ?8 WHERE acpx_record_id = ?1 AND message_index = ?2 AND part = ?3",
    )?;
    let mut sync_part = |m: &MessageText<'_>, part: usize, start: usize, text: &str| {
        let hash = rows::part_hash(m, text);
        let part = part as i64;
        let start = start as i64;
        let args = params![
            id.as_str(),
            m.index,
            part,
            m.role,
            m.message_id.as_deref(),
            text,
            hash,
            start
        ];
        match existing.remove(&(m.index, part)) {
            // The same text can start at another byte (a change before it moved a
            // boundary of multibyte text by a byte or two): the start must match too.
            Some(stored) if stored == (hash, start) => Ok(0),
            Some(_) => update.execute(args),
            None => insert.execute(args),
        }
    };
    for m in messages {
        match &m.text {
            SearchText::Str(text) => {
                for (part, (start, end)) in part_ranges(text).into_iter().enumerate() {
                    sync_part(m, part, start, &text[start..end])?;
                }
            }
            // A part at a time from the spill file: never the whole reply in memory.
            SearchText::Spilled(text) => {
                let unreadable = |e: std::io::Error| {
                    TxError::Store(StoreError::Backend {
                        backend: crate::BACKEND,
                        message: format!(
                            "session {id}: message {} could not be read back from its spill \
                             file: {e}",
                            m.index
                        ),
                    })
                };
                let ranges = spilled_part_ranges(text).map_err(unreadable)?;
                for (part, (start, end)) in ranges.into_iter().enumerate() {
                    let bytes = text.read_bytes(start, end).map_err(unreadable)?;
                    let piece = std::str::from_utf8(&bytes).map_err(|e| {
                        unreadable(std::io::Error::new(std::io::ErrorKind::InvalidData, e))
                    })?;
                    sync_part(m, part, start, piece)?;
                }
            }
        }
    }
    if !existing.is_empty() {
        let mut delete = tx.prepare_cached(
            "DELETE FROM messages WHERE acpx_record_id = ?1 AND message_index = ?2 AND part = ?3",
        )?;
        for (index, part) in existing.keys() {
            delete.execute(params![id.as_str(), index, part])?;
        }
    }
    Ok(())
}
