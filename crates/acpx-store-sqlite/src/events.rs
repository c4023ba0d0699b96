//! The event log: appends (seq checks, multi-row inserts, retention trimming), reads and
//! the log state.

use acpx_model::{
    check_append_batch, DamagedLine, EventEnvelope, EventLogState, EventPage, EventQuery,
    EventType, ReadMode, RecordId, StoreError, StoreResult, Timestamp,
};
use rusqlite::types::Value as SqlValue;
use rusqlite::{params, Connection, OptionalExtension, Transaction};

use crate::connection::TxResult;
use crate::event_row::{take_event_row, EVENT_COLUMNS};
use crate::rows::{ts_text, EventBatch, INSERT_COLUMNS};
use crate::schema::TYPED_ROWS;
use crate::Inner;
use acpx_store_sql::LogShape;

impl Inner {
    /// Commits in one transaction the batches `earlier` (accepted before, with
    /// [`Durability::None`](acpx_model::Durability::None), and buffered: see `pending`) and
    /// then `new`, whose seq is checked against the log's last seq (after `earlier`) here
    /// unless its precheck is `None` (already checked by the caller). Returns the log row as
    /// committed. A failed transaction is noted as the session's last write error.
    pub(crate) fn commit_events(
        &self,
        id: &RecordId,
        earlier: &[EventBatch],
        new: Option<(Option<SeqPrecheck>, &EventBatch)>,
        fsync: bool,
    ) -> StoreResult<LogRow> {
        let budget = i64::try_from(
            self.options
                .max_segment_bytes
                .saturating_mul(u64::from(self.options.max_segments)),
        )
        .unwrap_or(i64::MAX);
        let (precheck, new) = match new {
            Some((precheck, batch)) => (precheck, Some(batch)),
            None => (None, None),
        };
        // No lock is taken here: the caller holds the session's writer lock (a `SessionLock`
        // of this store, checked by `Store::append`).
        let result = self.transaction("append events", fsync, |tx| {
            let mut log = log_row(tx, id)?;
            // Buffered batches were checked against the seq before them when they were
            // accepted; the log cannot have moved since (this store holds the session's
            // lock), which is checked again here for the price of a comparison.
            let mut last = log.last_seq;
            for batch in earlier {
                if let (Some(first), Some(end)) = (batch.rows().first(), batch.rows().last()) {
                    if first.seq != last.saturating_add(1) {
                        return Err(StoreError::SeqMismatch {
                            id: id.clone(),
                            last: u64::try_from(last).unwrap_or(0),
                            got: u64::try_from(first.seq).unwrap_or(0),
                        }
                        .into());
                    }
                    last = end.seq;
                }
            }
            if let Some(precheck) = precheck {
                precheck.check(id, u64::try_from(last).unwrap_or(0))?;
            }
            let batches = earlier.iter().chain(new);
            let mut written = false;
            for batch in batches {
                let Some(end) = batch.rows().last() else {
                    continue;
                };
                insert_events(tx, log.key, batch)?;
                log.retained += batch.rows().iter().map(|r| r.bytes).sum::<i64>();
                log.last_seq = end.seq;
                written = true;
            }
            if !written {
                return Ok(log);
            }
            if log.retained > budget {
                // Down to the budget less a step, so that the next appends trim nothing: see
                // `trim_step`.
                let target = budget.saturating_sub(trim_step(self.options.max_segment_bytes));
                log.retained -= trim(tx, log.key, log.last_seq, log.retained - target)?;
            }
            let now = ts_text(&Timestamp::now());
            // The log's bookkeeping is one row update per transaction, whatever its size.
            tx.prepare_cached(
                "UPDATE event_logs SET last_seq = ?2, retained_bytes = ?3, last_write_at = ?4 \
                 WHERE session_key = ?1",
            )?
            .execute(params![log.key, log.last_seq, log.retained, now])?;
            log.last_write_at = Some(now);
            Ok(log)
        });
        match result {
            Ok(log) => {
                self.write_errors.note(id, None);
                Ok(log)
            }
            Err(e) => {
                // A failed transaction (disk full, I/O error, a busy database) is a failed
                // write and stays reported until the next append succeeds. A refused call
                // (wrong seq, unknown session) wrote nothing and is only
                // the caller's error.
                if matches!(e, StoreError::Backend { .. } | StoreError::Io { .. }) {
                    self.write_errors.note(id, Some(e.to_string()));
                }
                Err(e)
            }
        }
    }

    /// The state of session `id`'s log `log` ([`LogShape::state`]).
    pub(crate) fn log_state(
        &self,
        id: &RecordId,
        log: LogRow,
        last_write_error: Option<String>,
    ) -> StoreResult<EventLogState> {
        self.log_shape()
            .state(id, log, last_write_error, self.active_path(id), &self.db())
    }

    /// The state of a log holding `retained` bytes of events, without its seq and write time.
    pub(crate) fn log_state_of(&self, id: &RecordId, retained: i64) -> EventLogState {
        self.log_shape().state_of(self.active_path(id), retained)
    }

    fn log_shape(&self) -> LogShape {
        LogShape {
            max_segment_bytes: self.options.max_segment_bytes,
            max_segments: self.options.max_segments,
        }
    }

    /// What a log's state names as its place: `sqlite:<db>#<id>`.
    fn active_path(&self, id: &RecordId) -> String {
        format!("sqlite:{}#{id}", self.db())
    }

    pub(crate) fn event_log_state(&self, id: &RecordId) -> StoreResult<EventLogState> {
        // What this process appended is in the state it reports.
        self.commit_pending(id)?;
        let log = {
            let conn = self.conn();
            log_row(&conn, id).map_err(|e| self.tx_error("read the event log state", e))?
        };
        let error = self.write_errors.get(id);
        self.log_state(id, log, error)
    }

    pub(crate) fn read_events(&self, id: &RecordId, query: &EventQuery) -> StoreResult<EventPage> {
        // A reader in this process sees every event whose append returned.
        self.commit_pending(id)?;
        let ctx = "read events";
        let conn = self.conn();
        let log = log_row(&conn, id).map_err(|e| self.tx_error(ctx, e))?;
        let oldest: Option<i64> = conn
            .prepare_cached("SELECT MIN(seq) FROM event_rows WHERE session_key = ?1")
            .and_then(|mut s| s.query_row([log.key], |r| r.get(0)))
            .map_err(self.sql(ctx))?;
        let (sql, args) = events_query(log.key, query);
        let mut stmt = conn.prepare_cached(&sql).map_err(self.sql(ctx))?;
        let mut rows = stmt
            .query(rusqlite::params_from_iter(args))
            .map_err(self.sql(ctx))?;
        let mut page = EventPage {
            last_seq: u64::try_from(log.last_seq).unwrap_or(0),
            oldest_seq: oldest.and_then(|s| u64::try_from(s).ok()).unwrap_or(0),
            ..EventPage::default()
        };
        let mut bytes = 0;
        let (mut fetched, mut last_seq) = (0usize, None);
        // A strict read's rows are taken as text under the connection and parsed after it is
        // released (`event_row`): a page's payloads are not parsed while every other call
        // waits. A lenient read parses each row as it steps, as before: a damaged row must not
        // count as one of the page's events (a page is filled with events, as in every store,
        // and a retry decides on whether a turn's page holds any), which only parsing tells.
        let lenient = matches!(query.mode, ReadMode::Lenient);
        let damaged = |seq: i64, reason: String| DamagedLine {
            location: format!("{} events", self.db()),
            line: u64::try_from(seq).unwrap_or(0),
            reason,
            lines: 1,
        };
        let mut taken = Vec::new();
        while let Some(row) = rows.next().map_err(self.sql(ctx))? {
            let seq: i64 = row.get(0).map_err(self.sql(ctx))?;
            fetched += 1;
            last_seq = Some(seq);
            if query.page_full(page.events.len() + taken.len(), bytes) {
                page.next_seq = u64::try_from(seq).ok();
                break;
            }
            bytes += row_text_bytes(row);
            let text = take_event_row(row);
            if lenient {
                match text.and_then(|t| t.into_event(id)) {
                    Ok(e) => page.events.push(e),
                    Err(reason) => page.damaged.push(damaged(seq, reason)),
                }
            } else {
                taken.push((seq, text));
            }
        }
        drop(rows);
        drop(stmt);
        drop(conn);
        page.events.reserve(taken.len());
        for (seq, text) in taken {
            match text.and_then(|t| t.into_event(id)) {
                Ok(e) => page.events.push(e),
                Err(reason) => {
                    return Err(StoreError::corrupt(
                        format!("{} events row ({:?}, seq {seq})", self.db(), id.as_str()),
                        None,
                        reason,
                    ))
                }
            }
        }
        // Damaged rows skipped in lenient mode used up rows of the `LIMIT` without becoming
        // events: when every row asked for came back, the log may go on after the last one.
        if page.next_seq.is_none() && query.limit.is_some_and(|l| fetched > l) {
            page.next_seq = last_seq.and_then(|s| u64::try_from(s).ok()).map(|s| s + 1);
        }
        Ok(page)
    }
}

/// The bytes of an events row's text columns ([`EventQuery::max_bytes`]): columns 2 to 9 of
/// the `read_events` statement, `timestamp` to `extra` (in `EVENT_COLUMNS` order).
fn row_text_bytes(row: &rusqlite::Row<'_>) -> usize {
    (2..10)
        .filter_map(|i| row.get_ref(i).ok())
        .map(|v| v.as_bytes().map_or(0, <[u8]>::len))
        .sum()
}

/// The `read_events` statement and its arguments.
///
/// Without statistics SQLite reads every filtered query along the primary key, from
/// `from_seq` on, testing each row: fine for a common type, a scan of the whole rest of a
/// long log for a rare one. A single type names the index whose entries are exactly the
/// matching rows, already in seq order, so it is used explicitly, and a page still stops
/// after `limit` rows. Several types keep the primary key order (an index would return each
/// type's rows separately and need a sort of all of them before the first page).
///
/// `events_by_type` leaves out `session_update` rows (schema version 7: almost every row of
/// a streamed log, for which the index saved nothing and cost a third of a trim), so a
/// `session_update` query reads along the primary key, and any other single type repeats
/// the index's condition word for word: SQLite uses a partial index only for a query whose
/// `WHERE` contains that condition.
///
/// A request id bounds the primary key range by the request's row of `event_requests`
/// (schema version 8): a request's rows lie between its first and its last seq, a turn's
/// worth of the log. A request without a range has no rows: both bounds are NULL, and the
/// range is empty.
pub(crate) fn events_query(key: i64, query: &EventQuery) -> (String, Vec<SqlValue>) {
    let typed_index = query.request_id.is_none()
        && matches!(query.types.as_slice(), [one] if one.as_str() != EventType::SessionUpdate.as_str());
    let index = if typed_index {
        " INDEXED BY events_by_type"
    } else {
        ""
    };
    let mut sql = format!(
        "SELECT {EVENT_COLUMNS} FROM event_rows{index} WHERE session_key = ?1 AND seq >= ?2"
    );
    let mut args: Vec<SqlValue> = vec![
        SqlValue::Integer(key),
        SqlValue::Integer(i64::try_from(query.from_seq).unwrap_or(i64::MAX)),
    ];
    if let Some(r) = &query.request_id {
        args.push(SqlValue::Text(r.clone()));
        // One lower bound, the larger of the two: SQLite seeks on one `seq >=` term and
        // tests any other row by row, so with two a read from seq 0 walked the whole log up
        // to the request.
        sql = format!(
            "SELECT {EVENT_COLUMNS} FROM event_rows WHERE session_key = ?1 \
             AND seq >= max(?2, (SELECT first_seq FROM event_requests \
             WHERE session_key = ?1 AND request_id = ?3)) \
             AND seq <= (SELECT last_seq FROM event_requests \
             WHERE session_key = ?1 AND request_id = ?3) \
             AND request_id = ?3"
        );
    }
    let json_list = |items: Vec<&str>| SqlValue::Text(serde_json::json!(items).to_string());
    match query.types.as_slice() {
        [] => {}
        [one] => {
            args.push(SqlValue::Text(one.as_str().to_owned()));
            sql.push_str(&format!(" AND type = ?{}", args.len()));
            if typed_index {
                sql.push_str(&format!(" AND {TYPED_ROWS}"));
            }
        }
        many => {
            args.push(json_list(many.iter().map(EventType::as_str).collect()));
            sql.push_str(&format!(
                " AND type IN (SELECT value FROM json_each(?{}))",
                args.len()
            ));
        }
    }
    if !query.streams.is_empty() {
        args.push(json_list(
            query.streams.iter().map(|s| s.as_str()).collect(),
        ));
        sql.push_str(&format!(
            " AND stream IN (SELECT value FROM json_each(?{}))",
            args.len()
        ));
    }
    sql.push_str(" ORDER BY seq");
    if let Some(limit) = query.limit {
        // One more than asked: its seq is where the next page starts.
        args.push(SqlValue::Integer(
            i64::try_from(limit)
                .unwrap_or(i64::MAX - 1)
                .saturating_add(1),
        ));
        sql.push_str(&format!(" LIMIT ?{}", args.len()));
    }
    (sql, args)
}

/// Row counts of the multi-row `INSERT` statements a batch is split into. Few distinct
/// statements keep the statement cache small; many rows per statement save most of the
/// per-statement cost of a batch.
pub(crate) const INSERT_CHUNKS: [usize; 4] = [64, 16, 4, 1];

pub(crate) fn insert_events(tx: &Transaction<'_>, key: i64, batch: &EventBatch) -> TxResult<()> {
    let mut rest = batch.rows();
    while !rest.is_empty() {
        let size = INSERT_CHUNKS
            .into_iter()
            .find(|&n| n <= rest.len())
            .unwrap_or(1);
        let (chunk, tail) = rest.split_at(size);
        let row = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
        let sql = format!(
            "INSERT INTO event_rows ({INSERT_COLUMNS}) VALUES {}",
            vec![row; size].join(", ")
        );
        let mut stmt = tx.prepare_cached(&sql)?;
        let values = chunk.iter().flat_map(|r| batch.values(key, r));
        for (i, value) in values.enumerate() {
            stmt.raw_bind_parameter(i + 1, value)?;
        }
        stmt.raw_execute()?;
        rest = tail;
    }
    // The requests' seq ranges (schema version 8), through which a read by request id finds
    // its rows: one row per request of the batch, where an index would take one per event.
    let mut stmt = tx.prepare_cached(
        "INSERT INTO event_requests (session_key, request_id, first_seq, last_seq) \
         VALUES (?1, ?2, ?3, ?4) \
         ON CONFLICT (session_key, request_id) DO UPDATE SET \
         first_seq = min(first_seq, excluded.first_seq), \
         last_seq = max(last_seq, excluded.last_seq)",
    )?;
    for (request_id, first, last) in batch.request_ranges() {
        stmt.execute(params![key, request_id, first, last])?;
    }
    Ok(())
}

/// A session's key and its `event_logs` row.
pub(crate) use acpx_store_sql::LogRow;

/// A session's key and log row; `NotFound` without a session. A session row without a log
/// row (made by hand) gets one, computed from its events.
pub(crate) fn log_row(conn: &Connection, id: &RecordId) -> TxResult<LogRow> {
    let row = conn
        .prepare_cached(
            "SELECT s.session_key, l.last_seq, l.retained_bytes, l.last_write_at \
             FROM session_rows s LEFT JOIN event_logs l ON l.session_key = s.session_key \
             WHERE s.acpx_record_id = ?1",
        )?
        .query_row([id.as_str()], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, Option<i64>>(1)?,
                r.get::<_, Option<i64>>(2)?,
                r.get::<_, Option<String>>(3)?,
            ))
        })
        .optional()?;
    let Some((key, last_seq, retained, last_write_at)) = row else {
        return Err(StoreError::NotFound(id.clone()).into());
    };
    if let (Some(last_seq), Some(retained)) = (last_seq, retained) {
        return Ok(LogRow {
            key,
            last_seq,
            retained,
            last_write_at,
        });
    }
    let (last, bytes): (Option<i64>, Option<i64>) = conn
        .prepare_cached("SELECT MAX(seq), SUM(bytes) FROM event_rows WHERE session_key = ?1")?
        .query_row([key], |r| Ok((r.get(0)?, r.get(1)?)))?;
    let (last_seq, retained) = (last.unwrap_or(0), bytes.unwrap_or(0));
    conn.prepare_cached(
        "INSERT OR IGNORE INTO event_logs (session_key, last_seq, retained_bytes) \
         VALUES (?1, ?2, ?3)",
    )?
    .execute(params![key, last_seq, retained])?;
    Ok(LogRow {
        key,
        last_seq,
        retained,
        last_write_at: None,
    })
}

/// How far below the budget an append that went over it trims: an eighth of a segment (8 MiB
/// by default, about 32,000 streamed chunks).
///
/// Trimming exactly the excess deleted a few old rows at every append of a log at its budget:
/// each commit then wrote the oldest pages of the table and of its three indexes besides the
/// newest ones, and the 2 MiB page cache read them back each time. A 10k-chunk prompt on a
/// session holding a 1M-chunk turn (at the budget) cost 1.3× one on a new session, more than
/// its document did (docs/BENCHMARKS.md § SQLite documents in place). Deleted in steps, a row
/// costs about 4 µs, once; the file store's window also moves in steps (whole segments).
pub(crate) fn trim_step(max_segment_bytes: u64) -> i64 {
    i64::try_from(max_segment_bytes / 8).unwrap_or(i64::MAX)
}

/// Rows a trim reads and deletes per step: about 1 MB of events, which stays in the 2 MiB page
/// cache between the read that finds the step's cut and the delete that follows it.
const TRIM_STEP_ROWS: i64 = 2048;

/// Deletes the oldest events until at least `excess` bytes are freed, never the newest event
/// (a single line larger than the budget stays, like the file store's active segment).
/// Returns the bytes freed.
///
/// In steps of [`TRIM_STEP_ROWS`]: a single scan to the cut followed by one `DELETE` read the
/// 8 MB of a default trim step twice from the file (the cache holds 2 MiB), which was a third
/// of a trim's system time.
pub(crate) fn trim(tx: &Transaction<'_>, key: i64, newest: i64, excess: i64) -> TxResult<i64> {
    let mut freed = 0;
    let mut last_cut = None;
    while freed < excess {
        let mut rows_read = 0;
        let mut cut = None;
        {
            let mut stmt = tx.prepare_cached(
                "SELECT seq, bytes FROM event_rows WHERE session_key = ?1 AND seq < ?2 \
                 ORDER BY seq LIMIT ?3",
            )?;
            let mut rows = stmt.query(params![key, newest, TRIM_STEP_ROWS])?;
            while let Some(row) = rows.next()? {
                rows_read += 1;
                freed += row.get::<_, i64>(1)?;
                cut = Some(row.get::<_, i64>(0)?);
                if freed >= excess {
                    break;
                }
            }
        }
        let Some(cut) = cut else {
            break;
        };
        tx.prepare_cached("DELETE FROM event_rows WHERE session_key = ?1 AND seq <= ?2")?
            .execute(params![key, cut])?;
        last_cut = Some(cut);
        if rows_read < TRIM_STEP_ROWS && freed < excess {
            // Only the newest event is left.
            break;
        }
    }
    if let Some(cut) = last_cut {
        // A request with rows left keeps its range (its first seq may now be gone: harmless).
        tx.prepare_cached("DELETE FROM event_requests WHERE session_key = ?1 AND last_seq <= ?2")?
            .execute(params![key, cut])?;
    }
    Ok(freed)
}

/// The part of [`check_append_batch`] that does not depend on the stored log, computed before
/// the transaction, so the transaction can give exactly the answer `check_append_batch` would
/// give against the log's real last seq without copying the events.
#[derive(Debug)]
pub(crate) struct SeqPrecheck {
    first_seq: Option<u64>,
    /// `check_append_batch` against the last seq the batch assumes (`first_seq - 1`).
    assuming_contiguous: StoreResult<()>,
    /// `check_append_batch`'s error for a first event of another session (it does not depend
    /// on the last seq).
    first_id_error: Option<StoreError>,
}

impl SeqPrecheck {
    pub(crate) fn new(id: &RecordId, events: &[EventEnvelope]) -> Self {
        let first_seq = events.first().map(|e| e.seq);
        SeqPrecheck {
            first_seq,
            assuming_contiguous: match first_seq {
                Some(s) if s >= 1 => check_append_batch(id, s - 1, events),
                _ => Ok(()),
            },
            first_id_error: match events.first() {
                Some(e) if e.acpx_record_id != *id => check_append_batch(id, 0, &events[..1]).err(),
                _ => None,
            },
        }
    }

    /// What `check_append_batch(id, last_seq, events)` returns.
    pub(crate) fn check(self, id: &RecordId, last_seq: u64) -> StoreResult<()> {
        let Some(first) = self.first_seq else {
            return Ok(());
        };
        if first >= 1 && first - 1 == last_seq {
            return self.assuming_contiguous;
        }
        // The batch does not continue the log: check_append_batch stops at the first event,
        // on its record id if that is wrong, else on its seq.
        if let Some(e) = self.first_id_error {
            return Err(e);
        }
        Err(StoreError::SeqMismatch {
            id: id.clone(),
            last: last_seq,
            got: first,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connection::migrate;
    use acpx_model::{EventContext, EventPayload, EventSource, EventStream};

    fn batch(id: &RecordId, seqs: &[u64], foreign_at: Option<usize>) -> Vec<EventEnvelope> {
        let other = RecordId::parse("other").unwrap();
        seqs.iter()
            .enumerate()
            .map(|(i, &seq)| {
                let owner = if foreign_at == Some(i) { &other } else { id };
                let ctx = EventContext {
                    acpx_record_id: owner,
                    acp_session_id: "a",
                    request_id: None,
                    stream: EventStream::Prompt,
                    source: EventSource::Acp,
                };
                let payload = EventPayload::Unknown {
                    event_type: "t".into(),
                    payload: serde_json::Value::Null,
                };
                EventEnvelope::new(&ctx, seq, Timestamp::now(), payload)
            })
            .collect()
    }

    fn outcome(r: StoreResult<()>) -> String {
        match r {
            Ok(()) => "ok".into(),
            Err(StoreError::SeqMismatch { last, got, .. }) => format!("seq {last} {got}"),
            Err(e) => format!("{}: {e}", e.kind()),
        }
    }

    #[test]
    fn precheck_answers_exactly_like_check_append_batch() {
        let id = RecordId::parse("s").unwrap();
        let shapes: &[&[u64]] = &[
            &[],
            &[0],
            &[1],
            &[1, 2, 3],
            &[4, 5, 6],
            &[4, 6],
            &[5, 5],
            &[3, 4, 9],
            &[u64::MAX],
        ];
        for seqs in shapes {
            for foreign in [None, Some(0), Some(1), Some(2)] {
                if foreign.is_some_and(|f| f >= seqs.len()) {
                    continue;
                }
                let events = batch(&id, seqs, foreign);
                for last in [0, 2, 3, 4, 5, 8] {
                    let expected = outcome(check_append_batch(&id, last, &events));
                    let got = outcome(SeqPrecheck::new(&id, &events).check(&id, last));
                    assert_eq!(
                        got, expected,
                        "seqs {seqs:?} foreign {foreign:?} last {last}"
                    );
                }
            }
        }
    }

    /// A read by request id seeks to the request's first row, whatever `from_seq` it is
    /// given: from seq 0 it executes no more steps than from the request's own first seq (a
    /// second lower bound was tested row by row from `from_seq`, a walk of the whole log).
    #[test]
    fn a_read_by_request_seeks_to_its_range() {
        let mut conn = Connection::open_in_memory().unwrap();
        migrate(&mut conn, std::path::Path::new(":memory:")).unwrap_or_else(|_| panic!("migrate"));
        conn.execute_batch(
            "PRAGMA foreign_keys = OFF;
             WITH RECURSIVE n(seq) AS (SELECT 1 UNION ALL SELECT seq + 1 FROM n WHERE seq < 5000)
             INSERT INTO event_rows (session_key, seq, event_version, timestamp, acp_session_id,
                 request_id, stream, source, type, payload, bytes)
             SELECT 1, seq, 1, '2026-01-01T00:00:00.000Z', 'a',
                 CASE WHEN seq <= 4000 THEN 'req_a' ELSE 'req_b' END,
                 'prompt', 'acp', 'session_update', '{}', 10 FROM n;
             INSERT INTO event_requests VALUES (1, 'req_a', 1, 4000), (1, 'req_b', 4001, 5000);",
        )
        .unwrap();
        let steps = |from_seq: u64, request: &str| -> (usize, i32) {
            let q = EventQuery {
                request_id: Some(request.into()),
                ..EventQuery::from_seq(from_seq)
            };
            let (sql, args) = events_query(1, &q);
            let mut stmt = conn.prepare(&sql).unwrap();
            let rows = stmt
                .query_map(rusqlite::params_from_iter(args), |r| r.get::<_, i64>(1))
                .unwrap()
                .count();
            (rows, stmt.get_status(rusqlite::StatementStatus::VmStep))
        };
        let (from_zero, zero_steps) = steps(0, "req_b");
        let (from_first, first_steps) = steps(4001, "req_b");
        assert_eq!((from_zero, from_first), (1000, 1000));
        assert!(
            zero_steps <= first_steps + 50,
            "from seq 0: {zero_steps} steps; from the request's first seq: {first_steps}"
        );
        let (none, none_steps) = steps(0, "req_unknown");
        assert_eq!(none, 0);
        assert!(
            none_steps < 100,
            "{none_steps} steps for an unknown request"
        );
    }

    /// A save reads the search parts' hashes from the covering index, not from the rows,
    /// which hold each part's text (up to 65 KiB, in overflow pages) before its hash.
    #[test]
    fn part_hashes_are_read_from_the_index_alone() {
        let mut conn = Connection::open_in_memory().unwrap();
        migrate(&mut conn, std::path::Path::new(":memory:")).unwrap_or_else(|_| panic!("migrate"));
        let plan: String = conn
            .query_row(
                &format!("EXPLAIN QUERY PLAN {}", crate::sessions::SELECT_PART_HASHES),
                ["x"],
                |r| r.get(3),
            )
            .unwrap();
        assert!(
            plan.contains("USING COVERING INDEX messages_hashes"),
            "{plan}"
        );
    }

    /// The plan SQLite picks for each shape of `read_events` query (no statistics, as in a
    /// fresh database): always in seq order without a sort, through the index that holds
    /// exactly the rows asked for when there is one, or along the primary key between the
    /// bounds of a request's range.
    #[test]
    fn read_events_queries_use_the_narrowest_index() {
        let mut conn = Connection::open_in_memory().unwrap();
        migrate(&mut conn, std::path::Path::new(":memory:")).unwrap_or_else(|_| panic!("migrate"));
        let plan = |query: &EventQuery| -> String {
            let (sql, args) = events_query(1, query);
            let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
            let rows = stmt
                .query_map(rusqlite::params_from_iter(args), |r| r.get::<_, String>(3))
                .unwrap();
            rows.collect::<Result<Vec<_>, _>>().unwrap().join("; ")
        };
        let with = |f: &dyn Fn(&mut EventQuery)| {
            let mut q = EventQuery {
                limit: Some(10),
                ..EventQuery::from_seq(5)
            };
            f(&mut q);
            q
        };
        let cases: [(EventQuery, &str); 7] = [
            (with(&|_| {}), "USING PRIMARY KEY (session_key=? AND seq>?)"),
            (
                with(&|q| q.types = vec!["prompt_error".into()]),
                "USING INDEX events_by_type (session_key=? AND type=? AND seq>?)",
            ),
            // Not in the partial index: nearly every row of a log is one.
            (
                with(&|q| q.types = vec![EventType::SessionUpdate]),
                "USING PRIMARY KEY (session_key=? AND seq>?)",
            ),
            (
                with(&|q| {
                    q.request_id = Some("req_1".into());
                    q.types = vec![EventType::SessionUpdate];
                }),
                "USING PRIMARY KEY (session_key=? AND seq>? AND seq<?)",
            ),
            (
                with(&|q| {
                    q.types = vec!["a".into(), "b".into()];
                    q.streams = vec![EventStream::Prompt];
                }),
                "USING PRIMARY KEY (session_key=? AND seq>?)",
            ),
            (
                with(&|q| q.request_id = Some("req_1".into())),
                "USING PRIMARY KEY (session_key=? AND seq>? AND seq<?)",
            ),
            (
                with(&|q| {
                    q.request_id = Some("req_1".into());
                    q.types = vec!["a".into()];
                }),
                "USING PRIMARY KEY (session_key=? AND seq>? AND seq<?)",
            ),
        ];
        for (query, expected) in cases {
            let plan = plan(&query);
            assert!(plan.contains(expected), "{query:?}: {plan}");
            assert!(!plan.contains("TEMP B-TREE"), "{query:?}: {plan}");
        }
    }
}
