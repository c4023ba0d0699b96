//! The `sessions` and `messages` rows: create, save, load, close, delete and list.

use std::collections::HashMap;

use acpx_model::{
    ListPage, ListQuery, RecordId, SessionRecord, SessionSummary, SettleOnLoad, StoreError,
    StoreResult, Timestamp,
};
use deadpool_postgres::{GenericClient, Transaction};
use tokio_postgres::types::ToSql;

use crate::connection::{is_unique_violation, pg_error};
use crate::lock::{lock_for_transaction, lock_key};
use crate::rows::{
    parse_document, session_params, summary_from_row, to_i64, MessageRow, SessionColumns,
    SUMMARY_COLUMNS, WRITE_COLUMNS, WRITE_VALUES,
};
use crate::Inner;
use acpx_store_sql::list_page::Next;
use acpx_store_sql::{summary_matching_columns, ListPageBuilder, ListSql, Param, PostgresDialect};

impl Inner {
    /// Maps a client error of the step `context`.
    pub(crate) fn pg(
        &self,
        context: &'static str,
    ) -> impl Fn(tokio_postgres::Error) -> StoreError + '_ {
        move |e| pg_error(&self.location, context, e)
    }

    /// The writer lock of `id` for this transaction, unless this store holds it already.
    pub(crate) async fn lock_unless_held(
        &self,
        tx: &Transaction<'_>,
        id: &RecordId,
    ) -> StoreResult<()> {
        if self.held.get(id).is_some() {
            return Ok(());
        }
        lock_for_transaction(
            tx,
            id,
            lock_key(&self.schema, id),
            self.options.lock_timeout,
            &self.location,
        )
        .await
    }

    pub(crate) async fn create(
        &self,
        id: &RecordId,
        cols: SessionColumns,
        msgs: Vec<MessageRow>,
        log_after: u64,
    ) -> StoreResult<()> {
        let ctx = "create the session";
        let mut conn = self.conn().await?;
        let tx = conn.transaction().await.map_err(self.pg(ctx))?;
        self.lock_unless_held(&tx, id).await?;
        self.insert_row(&tx, id, &cols, &msgs, log_after).await?;
        tx.commit().await.map_err(self.pg(ctx))
    }

    /// Inserts a new session's row, its `event_logs` row (the log continuing after seq
    /// `log_after`) and its messages on `tx`, inside the caller's transaction (which holds the
    /// session's writer lock); returns its key. A taken id is `AlreadyExists`.
    pub(crate) async fn insert_row(
        &self,
        tx: &impl GenericClient,
        id: &RecordId,
        cols: &SessionColumns,
        msgs: &[MessageRow],
        log_after: u64,
    ) -> StoreResult<i64> {
        let ctx = "create the session";
        let log_after = to_i64(log_after, "seq")?;
        let key = id.as_str().to_owned();
        let inserted = tx
            .query_opt(
                &format!(
                    "INSERT INTO sessions (acpx_record_id, {WRITE_COLUMNS}, document_checked) \
                     VALUES ($1, {WRITE_VALUES}, true) \
                     ON CONFLICT (acpx_record_id) DO NOTHING RETURNING session_key"
                ),
                &session_params(cols, &key),
            )
            .await;
        let session_key: i64 = match inserted {
            Ok(Some(row)) => row.get(0),
            Ok(None) => return Err(StoreError::AlreadyExists(id.clone())),
            Err(e) if is_unique_violation(&e) => return Err(StoreError::AlreadyExists(id.clone())),
            Err(e) => return Err(self.pg(ctx)(e)),
        };
        tx.execute(
            "INSERT INTO event_logs (session_key, last_seq) VALUES ($1, $2)",
            &[&session_key, &log_after],
        )
        .await
        .map_err(self.pg(ctx))?;
        self.sync_messages(tx, session_key, msgs).await?;
        Ok(session_key)
    }

    pub(crate) async fn save(
        &self,
        id: &RecordId,
        expected: u64,
        cols: SessionColumns,
        msgs: Vec<MessageRow>,
    ) -> StoreResult<()> {
        let ctx = "save the session";
        let mut conn = self.conn().await?;
        let tx = conn.transaction().await.map_err(self.pg(ctx))?;
        self.lock_unless_held(&tx, id).await?;
        self.update_row(&tx, id, expected, &cols, &msgs).await?;
        tx.commit().await.map_err(self.pg(ctx))
    }

    /// A save's statements on `tx`, inside the caller's transaction (which holds the session's
    /// writer lock): the row replaced if its revision is still `expected`, and its messages.
    pub(crate) async fn update_row(
        &self,
        tx: &impl GenericClient,
        id: &RecordId,
        expected: u64,
        cols: &SessionColumns,
        msgs: &[MessageRow],
    ) -> StoreResult<()> {
        let ctx = "save the session";
        let expected_i = to_i64(expected, "revision")?;
        let key = id.as_str().to_owned();
        let mut params: Vec<&(dyn ToSql + Sync)> = session_params(cols, &key).to_vec();
        params.push(&expected_i);
        let updated = tx
            .query_opt(
                &format!(
                    "UPDATE sessions SET ({WRITE_COLUMNS}) = ROW({WRITE_VALUES}), \
                     document_checked = true \
                     WHERE acpx_record_id = $1 AND revision = $19 RETURNING session_key"
                ),
                &params,
            )
            .await
            .map_err(self.pg(ctx))?;
        let Some(row) = updated else {
            let actual = tx
                .query_opt(
                    "SELECT revision FROM sessions WHERE acpx_record_id = $1",
                    &[&key],
                )
                .await
                .map_err(self.pg(ctx))?;
            return Err(match actual {
                None => StoreError::NotFound(id.clone()),
                Some(r) => StoreError::Conflict {
                    id: id.clone(),
                    expected,
                    actual: u64::try_from(r.get::<_, i64>(0)).unwrap_or(0),
                },
            });
        };
        self.sync_messages(tx, row.get(0), msgs).await
    }

    /// The `revision` column of a session's row, read without its document (which may be
    /// damaged): what `Store::replace_snapshot` saves against.
    pub(crate) async fn row_revision(&self, id: &RecordId) -> StoreResult<u64> {
        let conn = self.conn().await?;
        let row = conn
            .query_opt(
                "SELECT revision FROM sessions WHERE acpx_record_id = $1",
                &[&id.as_str()],
            )
            .await
            .map_err(self.pg("read the session's revision"))?
            .ok_or_else(|| StoreError::NotFound(id.clone()))?;
        Ok(u64::try_from(row.get::<_, i64>(0)).unwrap_or(0))
    }

    pub(crate) async fn load(&self, id: &RecordId) -> StoreResult<SessionRecord> {
        self.load_with(id, None).await
    }

    /// `Store::summary`: the row's summary columns, without its document; a row acpx did not
    /// write itself is checked against its document first, as `list` checks it.
    pub(crate) async fn summary(&self, id: &RecordId) -> StoreResult<SessionSummary> {
        let ctx = "read the session's summary";
        let conn = self.conn().await?;
        let row = conn
            .query_opt(
                &format!("SELECT {SUMMARY_COLUMNS} FROM sessions WHERE acpx_record_id = $1"),
                &[&id.as_str()],
            )
            .await
            .map_err(self.pg(ctx))?
            .ok_or_else(|| StoreError::NotFound(id.clone()))?;
        let checked: bool = row.try_get(15).unwrap_or(false);
        let summary = match summary_from_row(&row) {
            Ok(s) if checked => Ok(s),
            Ok(s) => self.check_document(&conn, &s).await,
            Err(reason) => Err(reason),
        };
        summary.map_err(|reason| StoreError::corrupt(self.row_location(id.as_str()), None, reason))
    }

    /// [`Inner::load`], settling the conversation as it is parsed when `settle` is given.
    pub(crate) async fn load_with(
        &self,
        id: &RecordId,
        settle: Option<&SettleOnLoad>,
    ) -> StoreResult<SessionRecord> {
        let ctx = "load the session";
        let conn = self.conn().await?;
        let row = conn
            .query_opt(
                "SELECT revision, document FROM sessions WHERE acpx_record_id = $1",
                &[&id.as_str()],
            )
            .await
            .map_err(self.pg(ctx))?
            .ok_or_else(|| StoreError::NotFound(id.clone()))?;
        parse_document(
            row.get(1),
            id.as_str(),
            row.get(0),
            &self.row_location(id.as_str()),
            settle,
        )
    }

    /// Marks a session closed; idempotent. With `settle`, the document is parsed settling
    /// (`Store::close_settling`); its text is received whole all the same.
    pub(crate) async fn close(
        &self,
        id: &RecordId,
        at: Timestamp,
        settle: Option<&SettleOnLoad>,
    ) -> StoreResult<SessionRecord> {
        let ctx = "close the session";
        let location = self.row_location(id.as_str());
        let mut conn = self.conn().await?;
        let tx = conn.transaction().await.map_err(self.pg(ctx))?;
        self.lock_unless_held(&tx, id).await?;
        let row = tx
            .query_opt(
                "SELECT revision, document FROM sessions WHERE acpx_record_id = $1 FOR UPDATE",
                &[&id.as_str()],
            )
            .await
            .map_err(self.pg(ctx))?
            .ok_or_else(|| StoreError::NotFound(id.clone()))?;
        let revision: i64 = row.get(0);
        let mut record = parse_document(row.get(1), id.as_str(), revision, &location, settle)?;
        drop(row);
        if record.closed {
            return Ok(record);
        }
        record.closed = true;
        record.closed_at = Some(at);
        record.pid = None;
        record.revision += 1;
        let cols = crate::rows::session_columns(&record)?;
        let key = id.as_str().to_owned();
        let mut params: Vec<&(dyn ToSql + Sync)> = session_params(&cols, &key).to_vec();
        params.push(&revision);
        tx.execute(
            &format!(
                "UPDATE sessions SET ({WRITE_COLUMNS}) = ROW({WRITE_VALUES}), \
                 document_checked = true WHERE acpx_record_id = $1 AND revision = $19"
            ),
            &params,
        )
        .await
        .map_err(self.pg(ctx))?;
        tx.commit().await.map_err(self.pg(ctx))?;
        Ok(record)
    }

    pub(crate) async fn delete(&self, id: &RecordId) -> StoreResult<bool> {
        let ctx = "delete the session";
        let mut conn = self.conn().await?;
        let tx = conn.transaction().await.map_err(self.pg(ctx))?;
        self.lock_unless_held(&tx, id).await?;
        // The events, log row and messages go with it (ON DELETE CASCADE).
        let deleted = tx
            .execute(
                "DELETE FROM sessions WHERE acpx_record_id = $1",
                &[&id.as_str()],
            )
            .await
            .map_err(self.pg(ctx))?;
        tx.commit().await.map_err(self.pg(ctx))?;
        self.write_errors.forget(id);
        Ok(deleted > 0)
    }

    pub(crate) async fn list(&self, query: &ListQuery) -> StoreResult<ListPage> {
        let (sql, params) =
            ListSql::new::<PostgresDialect>(query, SUMMARY_COLUMNS, "sessions")?.ordered();
        let args: Vec<Box<dyn ToSql + Sync + Send>> = params
            .into_iter()
            .map(|p| -> Box<dyn ToSql + Sync + Send> {
                match p {
                    Param::Text(t) => Box::new(t),
                    Param::Int(i) => Box::new(i),
                }
            })
            .collect();
        let ctx = "list sessions";
        let conn = self.conn().await?;
        let params: Vec<&(dyn ToSql + Sync)> = args
            .iter()
            .map(|a| a.as_ref() as &(dyn ToSql + Sync))
            .collect();
        // One more row than asked: it tells whether a next page exists. Malformed rows do not
        // fill the page; when the rows ran out on some, the query runs again with twice the
        // window, so a page holds about its own size in rows, never the whole store.
        if let Some(limit) = query.limit {
            let mut fetch = i64::try_from(limit)
                .unwrap_or(i64::MAX / 2)
                .saturating_add(1);
            loop {
                let limited = format!("{sql} LIMIT {fetch}");
                let rows = conn.query(&limited, &params).await.map_err(self.pg(ctx))?;
                let page = self.list_page(&conn, query, &rows).await;
                let ran_out = i64::try_from(rows.len()).is_ok_and(|n| n < fetch);
                if page.next_cursor.is_some() || ran_out {
                    return Ok(page);
                }
                fetch = fetch.saturating_mul(2);
            }
        }
        let rows = conn.query(&sql, &params).await.map_err(self.pg(ctx))?;
        Ok(self.list_page(&conn, query, &rows).await)
    }

    /// A page of `list` from the rows in list order.
    async fn list_page(
        &self,
        conn: &impl GenericClient,
        query: &ListQuery,
        rows: &[tokio_postgres::Row],
    ) -> ListPage {
        let mut page = ListPageBuilder::new(query);
        for row in rows {
            let key: String = row.try_get(0).unwrap_or_default();
            let checked: bool = row.try_get(15).unwrap_or(false);
            let summary = match summary_from_row(row) {
                Ok(s) if checked => Ok(s),
                Ok(s) => self.check_document(conn, &s).await,
                Err(reason) => Err(reason),
            };
            if page.push(&key, summary, |k| self.row_location(k)) == Next::Full {
                break;
            }
        }
        page.finish()
    }

    /// For a row changed outside acpx: the columns are used only if the document validates
    /// and says the same.
    async fn check_document(
        &self,
        conn: &impl GenericClient,
        columns: &SessionSummary,
    ) -> Result<SessionSummary, String> {
        let id = columns.acpx_record_id.as_str();
        let revision = i64::try_from(columns.revision).unwrap_or(i64::MAX);
        let row = conn
            .query_one(
                "SELECT document FROM sessions WHERE acpx_record_id = $1",
                &[&id],
            )
            .await
            .map_err(|e| format!("reading the document: {e}"))?;
        let record = parse_document(row.get(0), id, revision, &self.row_location(id), None);
        summary_matching_columns(record, columns)
    }

    pub(crate) async fn exists(&self, id: &RecordId) -> StoreResult<bool> {
        let conn = self.conn().await?;
        Ok(conn
            .query_opt(
                "SELECT 1 FROM sessions WHERE acpx_record_id = $1",
                &[&id.as_str()],
            )
            .await
            .map_err(self.pg("look up the session"))?
            .is_some())
    }

    /// Brings the `messages` rows in step with a snapshot, touching only the messages that
    /// changed.
    async fn sync_messages(
        &self,
        tx: &impl GenericClient,
        session_key: i64,
        msgs: &[MessageRow],
    ) -> StoreResult<()> {
        let ctx = "index the messages";
        let mut existing: HashMap<i32, i64> = tx
            .query(
                "SELECT message_index, text_hash FROM messages WHERE session_key = $1",
                &[&session_key],
            )
            .await
            .map_err(self.pg(ctx))?
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        let mut upsert = (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for m in msgs {
            if existing.remove(&m.index) == Some(m.hash) {
                continue;
            }
            upsert.0.push(m.index);
            upsert.1.push(m.role);
            upsert.2.push(m.message_id.as_deref());
            upsert.3.push(m.text.as_str());
            upsert.4.push(m.hash);
        }
        if !upsert.0.is_empty() {
            tx.execute(
                "INSERT INTO messages (session_key, message_index, role, message_id, text, \
                 text_hash) SELECT $1, * FROM unnest($2::integer[], $3::text[], $4::text[], \
                 $5::text[], $6::bigint[]) \
                 ON CONFLICT (session_key, message_index) DO UPDATE SET role = EXCLUDED.role, \
                 message_id = EXCLUDED.message_id, text = EXCLUDED.text, \
                 text_hash = EXCLUDED.text_hash",
                &[
                    &session_key,
                    &upsert.0,
                    &upsert.1,
                    &upsert.2,
                    &upsert.3,
                    &upsert.4,
                ],
            )
            .await
            .map_err(self.pg(ctx))?;
        }
        if !existing.is_empty() {
            let gone: Vec<i32> = existing.into_keys().collect();
            tx.execute(
                "DELETE FROM messages WHERE session_key = $1 AND message_index = ANY($2)",
                &[&session_key, &gone],
            )
            .await
            .map_err(self.pg(ctx))?;
        }
        Ok(())
    }
}
