//! `Store::replace_damaged_events`: an event row that cannot be read (a column that is not
//! JSON, a bad timestamp, a NULL where a value must be) is replaced, in one transaction, by a
//! well-formed `event_damaged` event at the same seq whose payload keeps every stored column
//! (`docs/format.md` § Damaged events). The log then reads strictly again without a gap.

use acpx_model::{
    EventEnvelope, EventSource, EventStream, RecordId, StoreError, StoreResult, Timestamp,
    DAMAGED_EVENT_TYPE,
};
use rusqlite::types::ValueRef;
use rusqlite::{params, Row};
use serde_json::{json, Map, Value};

use crate::event_row::{event_from_row, EVENT_COLUMNS};
use crate::events::insert_events;
use crate::rows::EventBatch;
use crate::sessions::session_key;
use crate::Inner;

/// The names of [`EVENT_COLUMNS`], in order.
const COLUMN_NAMES: [&str; 10] = [
    "seq",
    "event_version",
    "timestamp",
    "acp_session_id",
    "request_id",
    "stream",
    "source",
    "type",
    "payload",
    "extra",
];

impl Inner {
    /// Replaces the unreadable event rows of `id` (see the module docs); the seqs replaced.
    /// The caller holds the session's writer lock.
    pub(crate) fn replace_damaged_events(&self, id: &RecordId) -> StoreResult<Vec<u64>> {
        self.commit_pending(id)?;
        self.transaction("replace damaged events", true, |tx| {
            let Some(key) = session_key(tx, id)? else {
                return Err(StoreError::NotFound(id.clone()).into());
            };
            let mut damaged: Vec<(EventEnvelope, i64)> = Vec::new();
            {
                let sql = format!(
                    "SELECT {EVENT_COLUMNS}, bytes FROM event_rows WHERE session_key = ?1 \
                     ORDER BY seq"
                );
                let mut stmt = tx.prepare(&sql)?;
                let mut rows = stmt.query([key])?;
                while let Some(row) = rows.next()? {
                    if let Err(reason) = event_from_row(row, id) {
                        let old_bytes: i64 = row.get(COLUMN_NAMES.len()).unwrap_or(0);
                        damaged.push((placeholder(row, id, &reason)?, old_bytes));
                    }
                }
            }
            let mut seqs = Vec::with_capacity(damaged.len());
            let mut delta = 0i64;
            for (event, old_bytes) in damaged {
                let seq = i64::try_from(event.seq).unwrap_or(i64::MAX);
                tx.prepare_cached("DELETE FROM event_rows WHERE session_key = ?1 AND seq = ?2")?
                    .execute(params![key, seq])?;
                let batch = EventBatch::new(std::slice::from_ref(&event))?;
                insert_events(tx, key, &batch)?;
                delta += batch.rows().iter().map(|r| r.bytes).sum::<i64>() - old_bytes;
                seqs.push(event.seq);
            }
            if delta != 0 {
                tx.prepare_cached(
                    "UPDATE event_logs SET retained_bytes = max(0, retained_bytes + ?2) \
                     WHERE session_key = ?1",
                )?
                .execute(params![key, delta])?;
            }
            Ok(seqs)
        })
    }
}

/// A stored column as JSON: text as a string (invalid UTF-8 replaced), numbers as numbers,
/// a blob as the string of its bytes.
fn column_json(row: &Row<'_>, i: usize) -> Value {
    match row.get_ref(i) {
        Ok(ValueRef::Null) | Err(_) => Value::Null,
        Ok(ValueRef::Integer(n)) => json!(n),
        Ok(ValueRef::Real(f)) => json!(f),
        Ok(ValueRef::Text(t)) | Ok(ValueRef::Blob(t)) => {
            Value::String(String::from_utf8_lossy(t).into_owned())
        }
    }
}

/// The `event_damaged` event that takes the place of the unreadable `row`: the row's seq,
/// its timestamp, ACP session, request, stream and source when they are readable (else now,
/// empty, none, `lifecycle`, `runtime`), and every stored column in the payload.
fn placeholder(row: &Row<'_>, id: &RecordId, reason: &str) -> StoreResult<EventEnvelope> {
    let seq: i64 = row
        .get(0)
        .map_err(|e| StoreError::corrupt("event_rows", None, format!("column `seq`: {e}")))?;
    let text = |i: usize| row.get::<_, Option<String>>(i).ok().flatten();
    let stored: Map<String, Value> = COLUMN_NAMES
        .iter()
        .enumerate()
        .skip(1)
        .map(|(i, name)| ((*name).to_owned(), column_json(row, i)))
        .collect();
    let payload = json!({
        "reason": reason,
        "stored": stored,
    });
    Ok(EventEnvelope {
        event_version: 1,
        seq: u64::try_from(seq)
            .map_err(|_| StoreError::corrupt("event_rows", None, format!("seq {seq}")))?,
        timestamp: text(2)
            .and_then(|t| Timestamp::parse(&t).ok())
            .unwrap_or_else(Timestamp::now),
        acpx_record_id: id.clone(),
        acp_session_id: text(3).unwrap_or_default(),
        request_id: text(4),
        stream: text(5).map_or(EventStream::Lifecycle, |s| s.as_str().into()),
        source: text(6).map_or(EventSource::Runtime, |s| s.as_str().into()),
        event_type: DAMAGED_EVENT_TYPE.into(),
        payload,
        extra: Map::new(),
    })
}
