//! [`acpx_model::Store::create_sessions`] for SQLite: a batch of new sessions, each with its
//! whole log, inserted in one transaction committed with `synchronous=FULL` (one durable
//! point for the batch, and no writer lock: see [`Inner::create_sessions`]; `docs/format.md`
//! § Writing many new sessions at once).

use acpx_model::{
    check_append_batch, EventLogState, NewSessionData, RecordId, SessionRecord, StoreError,
    StoreResult, Timestamp,
};
use rusqlite::{params, Transaction};

use crate::connection::TxResult;

use crate::events::insert_events;
use crate::rows::{self, message_texts, ts_text, EventBatch, MessageText, SessionColumns};
use crate::sessions::{sync_messages, INSERT_ROW};
use crate::Inner;

/// One session of a batch, serialized before the transaction.
pub(crate) struct PreparedSession {
    id: RecordId,
    cols: SessionColumns<'static>,
    msgs: Vec<MessageText<'static>>,
    events: EventBatch,
    last_seq: u64,
    retained: i64,
    written_at: String,
}

/// What [`prepare`] made of a batch.
pub(crate) enum Prepared {
    /// Ready for [`Inner::create_sessions`], with the snapshots as they will be stored.
    Batch(Vec<PreparedSession>, Vec<SessionRecord>),
    /// A log larger than the retention budget (it would be trimmed while written): the
    /// batch goes through the one-by-one path, which trims exactly as appends do.
    TooLarge(Vec<NewSessionData>),
}

/// Validates and serializes every session (revision 2, `acpx.event_log` describing the log
/// it will have), outside the transaction. `create_sessions` runs it on the blocking pool:
/// run on the caller's task, it held up whatever else that task was doing (a migration
/// digests the batch before on the same task while it writes the next).
pub(crate) fn prepare(inner: &Inner, sessions: Vec<NewSessionData>) -> StoreResult<Prepared> {
    let budget = inner
        .options
        .max_segment_bytes
        .saturating_mul(u64::from(inner.options.max_segments));
    let now = Timestamp::now();
    let written_at = ts_text(&now);
    let mut prepared = Vec::with_capacity(sessions.len());
    let mut batches = Vec::with_capacity(sessions.len());
    for s in &sessions {
        let id = &s.record.acpx_record_id;
        s.record.validate(&inner.row_location(id.as_str()))?;
        // A log retention trimmed starts at a later seq: its rows start there, which every
        // reader takes as a log retained from that seq, as after trimming.
        check_append_batch(id, s.seq_before(), &s.events)?;
        let events = EventBatch::new(&s.events)?;
        let retained: i64 = events.rows().iter().map(|r| r.bytes).sum();
        // One event goes the batch way whatever its size (an append of it would too), so
        // that a log retention trimmed can always be started from its first event.
        if u64::try_from(retained).unwrap_or(u64::MAX) > budget && s.events.len() > 1 {
            return Ok(Prepared::TooLarge(sessions));
        }
        batches.push((events, retained));
    }
    let mut records = Vec::with_capacity(sessions.len());
    for (s, (events, retained)) in sessions.into_iter().zip(batches) {
        let NewSessionData { mut record, .. } = s;
        let id = record.acpx_record_id.clone();
        let last_seq = events.rows().last().map_or(0, |r| r.seq);
        let last_seq = u64::try_from(last_seq).unwrap_or(0);
        record.acpx.event_log = EventLogState {
            last_seq,
            last_write_at: (last_seq > 0).then_some(now),
            ..inner.log_state_of(&id, retained)
        };
        record.revision = 2;
        let cols = rows::session_columns(&record)?;
        let msgs = message_texts(&record)?
            .into_iter()
            .map(MessageText::into_owned)
            .collect();
        prepared.push(PreparedSession {
            id,
            cols,
            msgs,
            events,
            last_seq,
            retained,
            written_at: written_at.clone(),
        });
        records.push(record);
    }
    Ok(Prepared::Batch(prepared, records))
}

impl Inner {
    /// Inserts every prepared session with its log in one `BEGIN IMMEDIATE` transaction,
    /// committed with `synchronous=FULL`. All or nothing. No writer lock is taken: every
    /// session is new, inserted only if its id is free, in one transaction, so no writer can
    /// have seen any part of it. (A lock file per session, created and removed, costs an
    /// inode allocation each: the largest kernel cost in a profile of a migration.)
    pub(crate) fn create_sessions(&self, sessions: Vec<PreparedSession>) -> StoreResult<()> {
        self.transaction("create sessions", true, |tx| {
            for s in &sessions {
                let written_at = (s.last_seq > 0).then_some(s.written_at.as_str());
                let key = insert_session(
                    tx, &s.id, &s.cols, &s.msgs, s.last_seq, s.retained, written_at,
                )?;
                insert_events(tx, key, &s.events)?;
            }
            Ok(())
        })
    }
}

/// Inserts a new session's row, its document, its `event_logs` row (`last_seq`, `retained`
/// bytes, `written_at`) and its message parts, in the caller's transaction; returns its key.
/// [`StoreError::AlreadyExists`] when the id is taken. Its events are the caller's to insert.
pub(crate) fn insert_session(
    tx: &Transaction<'_>,
    id: &RecordId,
    c: &SessionColumns<'_>,
    msgs: &[MessageText<'_>],
    last_seq: u64,
    retained: i64,
    written_at: Option<&str>,
) -> TxResult<i64> {
    let exists = tx
        .prepare_cached("SELECT 1 FROM session_rows WHERE acpx_record_id = ?1")?
        .exists([id.as_str()])?;
    if exists {
        return Err(StoreError::AlreadyExists(id.clone()).into());
    }
    tx.prepare_cached(INSERT_ROW)?.execute(params![
        id.as_str(),
        c.acp_session_id,
        c.agent_session_id,
        c.agent_command,
        c.cwd,
        c.cwd_key,
        c.name,
        c.title,
        c.created_at,
        c.last_used_at,
        c.last_used_ms,
        c.closed,
        c.closed_at,
        c.last_prompt_at,
        c.message_count,
        c.revision,
        c.usage
    ])?;
    let key = tx.last_insert_rowid();
    crate::document::write(tx, id, key, &c.document, true)?;
    let last_seq = i64::try_from(last_seq).unwrap_or(i64::MAX);
    tx.prepare_cached(
        "INSERT INTO event_logs (session_key, last_seq, retained_bytes, last_write_at) \
         VALUES (?1, ?2, ?3, ?4)",
    )?
    .execute(params![key, last_seq, retained, written_at])?;
    sync_messages(tx, id, msgs)?;
    Ok(key)
}
