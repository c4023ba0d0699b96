//! The event log: appends (lock and seq checks, one insert per batch, retention trimming),
//! reads and the log state.

use std::collections::HashMap;
use std::sync::MutexGuard;

use acpx_model::{
    check_append_batch, DamagedLine, EventEnvelope, EventLogState, EventPage, EventQuery,
    EventType, ReadMode, RecordId, StoreError, StoreResult, Timestamp,
};
use deadpool_postgres::GenericClient;
use tokio_postgres::types::ToSql;

use crate::lock::lock_halves;
use crate::rows::{event_from_row, ts_text, EventColumns, EVENT_COLUMNS, INSERT_EVENTS};
use crate::watch::NOTIFY_CHANNEL;
use crate::Inner;

/// A session's key and its `event_logs` row.
pub(crate) struct LogRow {
    key: i64,
    last_seq: i64,
    retained: i64,
    last_write_at: Option<String>,
}

impl Inner {
    pub(crate) async fn append(
        &self,
        id: &RecordId,
        events: &[EventEnvelope],
        fsync: bool,
    ) -> StoreResult<EventLogState> {
        let columns = EventColumns::new(events)?;
        let result = self.append_rows(id, events, columns, fsync).await;
        match &result {
            Ok(_) => self.note_write_error(id, None),
            // A failed transaction (lost connection, lost lock, server error) is a failed
            // write and stays reported until the next append succeeds. A refused call (wrong
            // seq, unknown session) wrote nothing and is only the caller's error.
            Err(e @ (StoreError::Backend { .. } | StoreError::Io { .. })) => {
                self.note_write_error(id, Some(e.to_string()))
            }
            Err(_) => {}
        }
        result
    }

    async fn append_rows(
        &self,
        id: &RecordId,
        events: &[EventEnvelope],
        columns: EventColumns,
        fsync: bool,
    ) -> StoreResult<EventLogState> {
        let ctx = "append events";
        // `Store::append` checked that the lock was issued by this store: it is registered.
        let held = self.held.get(id).ok_or_else(|| self.lock_lost(id))?;
        let budget = i64::try_from(
            self.options
                .max_segment_bytes
                .saturating_mul(u64::from(self.options.max_segments)),
        )
        .unwrap_or(i64::MAX);
        let mut conn = self.conn().await?;
        let tx = conn.transaction().await.map_err(self.pg(ctx))?;
        if !fsync {
            tx.batch_execute("SET LOCAL synchronous_commit = off")
                .await
                .map_err(self.pg(ctx))?;
        }
        let (classid, objid) = lock_halves(held.key);
        // The log row is locked for the transaction (seq order), and the writer lock must
        // still be held by the connection that took it.
        let row = tx
            .query_opt(
                "SELECT s.session_key, l.last_seq, l.retained_bytes, l.last_write_at, \
                 EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = $2 \
                 AND classid = $3 AND objid = $4 AND objsubid = 1 AND granted) \
                 FROM sessions s JOIN event_logs l ON l.session_key = s.session_key \
                 WHERE s.acpx_record_id = $1 FOR UPDATE OF l",
                &[&id.as_str(), &held.pid, &classid, &objid],
            )
            .await
            .map_err(self.pg(ctx))?;
        let Some(row) = row else {
            return Err(StoreError::NotFound(id.clone()));
        };
        if !row.get::<_, bool>(4) {
            return Err(self.lock_lost(id));
        }
        let mut log = LogRow {
            key: row.get(0),
            last_seq: row.get(1),
            retained: row.get(2),
            last_write_at: row.get(3),
        };
        check_append_batch(id, u64::try_from(log.last_seq).unwrap_or(0), events)?;
        let Some(&last) = columns.seq.last() else {
            return self.log_state(id, log, None);
        };
        tx.execute(
            INSERT_EVENTS,
            &[
                &log.key,
                &columns.seq,
                &columns.event_version,
                &columns.timestamp,
                &columns.acp_session_id,
                &columns.request_id,
                &columns.stream,
                &columns.source,
                &columns.event_type,
                &columns.payload,
                &columns.extra,
                &columns.bytes,
            ],
        )
        .await
        .map_err(self.pg(ctx))?;
        log.retained += columns.total_bytes();
        log.last_seq = last;
        if log.retained > budget {
            log.retained -= self
                .trim(&tx, log.key, log.last_seq, log.retained - budget)
                .await?;
        }
        let now = ts_text(&Timestamp::now());
        tx.execute(
            "UPDATE event_logs SET last_seq = $2, retained_bytes = $3, last_write_at = $4 \
             WHERE session_key = $1",
            &[&log.key, &log.last_seq, &log.retained, &now],
        )
        .await
        .map_err(self.pg(ctx))?;
        // Delivered at commit, to followers on every host (see watch.rs).
        tx.execute(
            "SELECT pg_notify($1, $2)",
            &[&NOTIFY_CHANNEL, &self.notify_payload(id)],
        )
        .await
        .map_err(self.pg(ctx))?;
        tx.commit().await.map_err(self.pg(ctx))?;
        log.last_write_at = Some(now);
        self.log_state(id, log, None)
    }

    pub(crate) fn write_errors(&self) -> MutexGuard<'_, HashMap<RecordId, String>> {
        // The map stays consistent even if a holder panicked.
        self.write_errors.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn note_write_error(&self, id: &RecordId, error: Option<String>) {
        let mut errors = self.write_errors();
        match error {
            Some(e) => {
                errors.insert(id.clone(), e);
            }
            None => {
                if !errors.is_empty() {
                    errors.remove(id);
                }
            }
        }
    }

    fn log_state(
        &self,
        id: &RecordId,
        log: LogRow,
        last_write_error: Option<String>,
    ) -> StoreResult<EventLogState> {
        let max = self.options.max_segment_bytes;
        let retained = u64::try_from(log.retained).unwrap_or(0);
        Ok(EventLogState {
            format_version: 1,
            active_path: format!("{}/{id}", self.location),
            // Retained bytes in units of max_segment_bytes: how many file segments the same
            // events would fill. See docs/format.md.
            segment_count: u32::try_from(retained.div_ceil(max))
                .unwrap_or(u32::MAX)
                .min(self.options.max_segments),
            max_segment_bytes: max,
            max_segments: self.options.max_segments,
            last_seq: u64::try_from(log.last_seq).unwrap_or(0),
            last_write_at: log
                .last_write_at
                .map(|t| {
                    Timestamp::parse(&t).map_err(|e| {
                        StoreError::corrupt(
                            format!("{} event_logs row {:?}", self.location, id.as_str()),
                            None,
                            format!("column `last_write_at`: {e}"),
                        )
                    })
                })
                .transpose()?,
            last_write_error,
        })
    }

    /// A session's key and log row; `NotFound` without a session.
    async fn log_row(&self, conn: &impl GenericClient, id: &RecordId) -> StoreResult<LogRow> {
        let row = conn
            .query_opt(
                "SELECT s.session_key, l.last_seq, l.retained_bytes, l.last_write_at \
                 FROM sessions s LEFT JOIN event_logs l ON l.session_key = s.session_key \
                 WHERE s.acpx_record_id = $1",
                &[&id.as_str()],
            )
            .await
            .map_err(self.pg("read the event log state"))?
            .ok_or_else(|| StoreError::NotFound(id.clone()))?;
        Ok(LogRow {
            key: row.get(0),
            last_seq: row.get::<_, Option<i64>>(1).unwrap_or(0),
            retained: row.get::<_, Option<i64>>(2).unwrap_or(0),
            last_write_at: row.get(3),
        })
    }

    pub(crate) async fn event_log_state(&self, id: &RecordId) -> StoreResult<EventLogState> {
        let conn = self.conn().await?;
        let log = self.log_row(&conn, id).await?;
        let error = self.write_errors().get(id).cloned();
        self.log_state(id, log, error)
    }

    pub(crate) async fn read_events(
        &self,
        id: &RecordId,
        query: &EventQuery,
    ) -> StoreResult<EventPage> {
        let ctx = "read events";
        let mut conn = self.conn().await?;
        // One snapshot for the log row, the oldest seq and the rows.
        let tx = conn
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await
            .map_err(self.pg(ctx))?;
        let log = self.log_row(&tx, id).await?;
        let oldest: Option<i64> = tx
            .query_one(
                "SELECT MIN(seq) FROM event_rows WHERE session_key = $1",
                &[&log.key],
            )
            .await
            .map_err(self.pg(ctx))?
            .get(0);
        let from = i64::try_from(query.from_seq).unwrap_or(i64::MAX);
        let mut sql =
            format!("SELECT {EVENT_COLUMNS} FROM event_rows WHERE session_key = $1 AND seq >= $2");
        let types: Vec<&str> = query.types.iter().map(EventType::as_str).collect();
        let streams: Vec<&str> = query.streams.iter().map(|s| s.as_str()).collect();
        let limit = query
            .limit
            .map(|l| i64::try_from(l).unwrap_or(i64::MAX - 1).saturating_add(1));
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![&log.key, &from];
        if !types.is_empty() {
            params.push(&types);
            sql.push_str(&format!(" AND type = ANY(${})", params.len()));
        }
        if !streams.is_empty() {
            params.push(&streams);
            sql.push_str(&format!(" AND stream = ANY(${})", params.len()));
        }
        if let Some(r) = &query.request_id {
            params.push(r);
            sql.push_str(&format!(" AND request_id = ${}", params.len()));
        }
        sql.push_str(" ORDER BY seq");
        if let Some(limit) = &limit {
            // One more than asked: its seq is where the next page starts.
            params.push(limit);
            sql.push_str(&format!(" LIMIT ${}", params.len()));
        }
        let rows = tx.query(&sql, &params).await.map_err(self.pg(ctx))?;
        tx.commit().await.map_err(self.pg(ctx))?;
        let mut page = EventPage {
            last_seq: u64::try_from(log.last_seq).unwrap_or(0),
            oldest_seq: oldest.and_then(|s| u64::try_from(s).ok()).unwrap_or(0),
            ..EventPage::default()
        };
        for row in &rows {
            let seq: i64 = row.get(0);
            if query.limit.is_some_and(|l| page.events.len() >= l) {
                page.next_seq = u64::try_from(seq).ok();
                break;
            }
            match event_from_row(row, id) {
                Ok(e) => page.events.push(e),
                Err(reason) => match query.mode {
                    ReadMode::Strict => {
                        return Err(StoreError::corrupt(
                            format!(
                                "{} events row ({:?}, seq {seq})",
                                self.location,
                                id.as_str()
                            ),
                            None,
                            reason,
                        ))
                    }
                    ReadMode::Lenient => page.damaged.push(DamagedLine {
                        location: format!("{} events", self.location),
                        line: u64::try_from(seq).unwrap_or(0),
                        reason,
                    }),
                },
            }
        }
        Ok(page)
    }

    /// Deletes the oldest events until at least `excess` bytes are freed, never the newest
    /// event (a single line larger than the budget stays, like the file store's active
    /// segment). Returns the bytes freed.
    async fn trim(
        &self,
        tx: &deadpool_postgres::Transaction<'_>,
        key: i64,
        newest: i64,
        excess: i64,
    ) -> StoreResult<i64> {
        let ctx = "trim the event log";
        let cut = tx
            .query_opt(
                "SELECT seq, running FROM (SELECT seq, (sum(bytes) OVER (ORDER BY seq))::bigint AS running \
                 FROM event_rows WHERE session_key = $1 AND seq < $2) t \
                 WHERE running >= $3 ORDER BY seq LIMIT 1",
                &[&key, &newest, &excess],
            )
            .await
            .map_err(self.pg(ctx))?;
        let (cut, freed): (Option<i64>, Option<i64>) = match cut {
            Some(row) => (Some(row.get(0)), Some(row.get::<_, i64>(1))),
            None => {
                let row = tx
                    .query_one(
                        "SELECT MAX(seq), SUM(bytes)::bigint FROM event_rows \
                         WHERE session_key = $1 AND seq < $2",
                        &[&key, &newest],
                    )
                    .await
                    .map_err(self.pg(ctx))?;
                (row.get(0), row.get(1))
            }
        };
        if let Some(cut) = cut {
            tx.execute(
                "DELETE FROM event_rows WHERE session_key = $1 AND seq <= $2",
                &[&key, &cut],
            )
            .await
            .map_err(self.pg(ctx))?;
        }
        Ok(freed.unwrap_or(0))
    }
}
