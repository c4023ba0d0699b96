//! The event log: appends (one call of the schema's `acpx_append` function: lock and seq
//! checks, the rows, retention trimming, the notification), reads and the log state.

use acpx_model::{
    check_append_batch, DamagedLine, EventEnvelope, EventLogState, EventPage, EventQuery,
    EventType, ReadMode, RecordId, StoreError, StoreResult, Timestamp,
};
use deadpool_postgres::GenericClient;
use tokio_postgres::types::ToSql;

use crate::lock::lock_halves;
use crate::rows::{event_from_row, ts_text, EventArrays, EVENT_COLUMNS};
use crate::watch::NOTIFY_CHANNEL;
use crate::Inner;
use acpx_store_sql::{LogRow, LogShape};

/// Rows the first fetch from the portal asks for when a page is bounded by bytes: few, in
/// case the events are large. Later fetches ask for as many as the bytes left would hold at
/// the size of the rows seen so far, at most [`MAX_ROWS_PER_FETCH`].
const FIRST_ROWS_PER_FETCH: i32 = 16;
/// See [`FIRST_ROWS_PER_FETCH`].
const MAX_ROWS_PER_FETCH: i32 = 4096;

impl Inner {
    pub(crate) async fn append(
        &self,
        id: &RecordId,
        events: &[EventEnvelope],
        fsync: bool,
        fence: Option<u64>,
    ) -> StoreResult<EventLogState> {
        let columns = EventArrays::new(events)?;
        let result = match self.conn().await {
            Ok(conn) => {
                self.append_rows(&conn, id, events, columns, fsync, fence)
                    .await
            }
            Err(e) => Err(e),
        };
        match &result {
            Ok(_) => self.write_errors.note(id, None),
            // A failed transaction (lost connection, lost lock, server error) is a failed
            // write and stays reported until the next append succeeds. A refused call (wrong
            // seq, unknown session) wrote nothing and is only the caller's error.
            Err(e @ (StoreError::Backend { .. } | StoreError::Io { .. })) => {
                self.write_errors.note(id, Some(e.to_string()))
            }
            Err(_) => {}
        }
        result
    }

    /// One call of `acpx_append_fenced` on `conn` (a pooled connection, or a stage's inside
    /// its transaction). `fsync` false asks for an asynchronous commit of the call's own
    /// transaction (`SET LOCAL`: within a stage's transaction it would hold for its commit,
    /// so a stage passes true).
    pub(crate) async fn append_rows(
        &self,
        conn: &deadpool_postgres::Object,
        id: &RecordId,
        events: &[EventEnvelope],
        columns: EventArrays,
        fsync: bool,
        fence: Option<u64>,
    ) -> StoreResult<EventLogState> {
        let ctx = "append events";
        // `Store::append` checked that the lock was issued by this store: it is registered.
        let held = self.held.get(id).ok_or_else(|| self.lock_lost(id))?;
        let Some(&first) = events.first().map(|e| &e.seq) else {
            return self.event_log_state(id).await;
        };
        // What does not depend on the stored log (contiguity, record ids) is checked here;
        // the server checks that the batch starts at its log's end.
        if first == 0 || check_append_batch(id, first - 1, events).is_err() {
            let last = self.event_log_state(id).await?.last_seq;
            check_append_batch(id, last, events)?;
        }
        let budget = i64::try_from(
            self.options
                .max_segment_bytes
                .saturating_mul(u64::from(self.options.max_segments)),
        )
        .unwrap_or(i64::MAX);
        let (classid, objid) = lock_halves(held.key);
        let now = ts_text(&Timestamp::now());
        let notify = self.notify_payload(id);
        let fence_param = fence.map(|g| i64::try_from(g).unwrap_or(i64::MAX));
        let stmt = conn
            .prepare_cached(
                "SELECT status, last_seq, retained_bytes, last_write_at FROM acpx_append_fenced(\
                 $21, $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, \
                 $17, $18, $19, $20)",
            )
            .await
            .map_err(self.pg(ctx))?;
        let row = conn
            .query_one(
                &stmt,
                &[
                    &id.as_str(),
                    &held.pid,
                    &classid,
                    &objid,
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
                    &budget,
                    &now,
                    &!fsync,
                    &NOTIFY_CHANNEL,
                    &notify,
                    &fence_param,
                ],
            )
            .await
            .map_err(self.pg(ctx))?;
        let status: &str = row.get(0);
        let log = LogRow {
            // Not part of the state `log_state` reports.
            key: 0,
            last_seq: row.get(1),
            retained: row.get(2),
            last_write_at: row.get(3),
        };
        match status {
            "ok" => self.log_state(id, log, None),
            "not_found" => Err(StoreError::NotFound(id.clone())),
            "lock_lost" => Err(self.lock_lost(id)),
            "fenced" => Err(self.fenced(id, fence.unwrap_or(0)).await),
            _ => {
                check_append_batch(id, u64::try_from(log.last_seq).unwrap_or(0), events)?;
                Err(crate::connection::backend_error(
                    &self.location,
                    ctx,
                    format!("the server answered {status:?} for a batch that continues its log"),
                ))
            }
        }
    }

    /// The state of session `id`'s log `log` ([`LogShape::state`]).
    fn log_state(
        &self,
        id: &RecordId,
        log: LogRow,
        last_write_error: Option<String>,
    ) -> StoreResult<EventLogState> {
        let shape = LogShape {
            max_segment_bytes: self.options.max_segment_bytes,
            max_segments: self.options.max_segments,
        };
        let active_path = format!("{}/{id}", self.location);
        shape.state(id, log, last_write_error, active_path, &self.location)
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

    /// The log's state as `conn` sees it (a stage's connection, inside its transaction).
    pub(crate) async fn event_log_state_on(
        &self,
        conn: &impl GenericClient,
        id: &RecordId,
    ) -> StoreResult<EventLogState> {
        let log = self.log_row(conn, id).await?;
        self.log_state(id, log, None)
    }

    pub(crate) async fn event_log_state(&self, id: &RecordId) -> StoreResult<EventLogState> {
        let conn = self.conn().await?;
        let log = self.log_row(&conn, id).await?;
        let error = self.write_errors.get(id);
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
        let mut page = EventPage {
            last_seq: u64::try_from(log.last_seq).unwrap_or(0),
            oldest_seq: oldest.and_then(|s| u64::try_from(s).ok()).unwrap_or(0),
            ..EventPage::default()
        };
        // Rows come through a portal, a batch at a time, so that a page cut short by
        // `max_bytes` never holds the rest of its `LIMIT` of rows (a thousand large tool
        // outputs) in memory. Without `max_bytes`, one fetch takes every row (0: all).
        let portal = tx.bind(&sql, &params).await.map_err(self.pg(ctx))?;
        let mut bytes = 0;
        let mut fetched: i64 = 0;
        let mut last_fetched = None;
        let mut fetch = if query.max_bytes.is_some() {
            FIRST_ROWS_PER_FETCH
        } else {
            0
        };
        'batches: loop {
            let rows = tx
                .query_portal(&portal, fetch)
                .await
                .map_err(self.pg(ctx))?;
            let got = rows.len();
            let batch_from = (fetched, bytes);
            for row in &rows {
                let seq: i64 = row.get(0);
                if query.page_full(page.events.len(), bytes) {
                    page.next_seq = u64::try_from(seq).ok();
                    break 'batches;
                }
                fetched += 1;
                last_fetched = Some(seq);
                bytes += (2..10)
                    .filter_map(|i| row.try_get::<_, Option<&str>>(i).ok().flatten())
                    .map(str::len)
                    .sum::<usize>();
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
                            lines: 1,
                        }),
                    },
                }
            }
            if fetch == 0 || got < fetch.unsigned_abs() as usize {
                break;
            }
            fetch = next_fetch(
                query.max_bytes,
                bytes,
                bytes - batch_from.1,
                fetched - batch_from.0,
            );
        }
        tx.commit().await.map_err(self.pg(ctx))?;
        // Damaged rows skipped in lenient mode used up rows of the `LIMIT` without becoming
        // events: when every row fetched was used, the log may go on after the last one.
        let fetched_all = limit.is_some_and(|l| fetched >= l);
        if page.next_seq.is_none() && fetched_all {
            if let Some(seq) = last_fetched {
                page.next_seq = u64::try_from(seq).ok().map(|s| s + 1);
            }
        }
        Ok(page)
    }
}

/// The rows the next fetch of a page bounded by `max_bytes` asks for, `bytes` of the page
/// read so far, the last fetch's rows `batch_rows` of `batch_bytes`: as many as the bytes left
/// would hold at the last fetch's mean row size (so that small rows after a few large ones
/// are fetched in bulk again), one more so that the row that ends the page comes with them,
/// within [`FIRST_ROWS_PER_FETCH`]..=[`MAX_ROWS_PER_FETCH`].
fn next_fetch(max_bytes: Option<usize>, bytes: usize, batch_bytes: usize, batch_rows: i64) -> i32 {
    let (Some(max), Ok(rows)) = (max_bytes, usize::try_from(batch_rows)) else {
        return FIRST_ROWS_PER_FETCH;
    };
    let mean = (batch_bytes / rows.max(1)).max(1);
    let fit = (max.saturating_sub(bytes) / mean).saturating_add(1);
    i32::try_from(fit)
        .unwrap_or(MAX_ROWS_PER_FETCH)
        .clamp(FIRST_ROWS_PER_FETCH, MAX_ROWS_PER_FETCH)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fetch_asks_for_what_the_bytes_left_would_hold() {
        let page = 1 << 20;
        // Small events: the rest of a 1 MiB page in one more fetch, within the maximum.
        assert_eq!(next_fetch(Some(page), 16 * 300, 16 * 300, 16), 3480);
        assert_eq!(
            next_fetch(Some(page), 16 * 100, 16 * 100, 16),
            MAX_ROWS_PER_FETCH
        );
        assert_eq!(next_fetch(Some(page), 16 * 1000, 16 * 1000, 16), 1033);
        // Large events: no more than the first fetch's few.
        assert_eq!(
            next_fetch(Some(page), 16 * 100_000, 16 * 100_000, 16),
            FIRST_ROWS_PER_FETCH
        );
        // Small events after large ones: sized by the last fetch's rows, not the page's.
        assert_eq!(
            next_fetch(Some(page), 16 * 30_000 + 16 * 200, 16 * 200, 16),
            (page - 16 * 30_200) as i32 / 200 + 1
        );
        // Rows of no text at all, a bound of usize::MAX, no rows: no overflow, in range.
        assert_eq!(next_fetch(Some(usize::MAX), 0, 0, 16), MAX_ROWS_PER_FETCH);
        assert_eq!(next_fetch(Some(page), 0, 0, 0), MAX_ROWS_PER_FETCH);
        // No bound: the first fetch's size (unused: such a read takes every row at once).
        assert_eq!(next_fetch(None, 0, 0, 0), FIRST_ROWS_PER_FETCH);
    }
}
