//! [`acpx_model::Store::create_sessions`] for a batch that holds a log retention trimmed (its
//! first event above seq 1: a copy of the retained part, `docs/format.md` § Writing many new
//! sessions at once). Each session is written as the one-by-one path writes it (create, appends,
//! save), except that its `event_logs` row is created with `last_seq` one below the first
//! event, in the transaction that creates the session, so the appends (whose seq check, in
//! `acpx_append`, is unchanged) continue the log from there: the rows start at that seq, which
//! every reader already takes as a log retention trimmed.

use std::time::Duration;

use acpx_model::{Durability, NewSessionData, RecordId, SessionRecord, Store, StoreResult};

use crate::rows::{message_rows, SessionColumns};
use crate::PostgresStore;

/// Events per append (what the one-by-one path uses).
const EVENT_PAGE: usize = 1_000;
/// How long a new session's writer waits for its lock (a fresh id: normally free at once).
const NEW_SESSION_LOCK_TIMEOUT: Duration = Duration::from_secs(10);

/// Writes `sessions` one after the other; on an error, removes the ones it created.
pub(crate) async fn create_sessions(
    store: &PostgresStore,
    sessions: Vec<NewSessionData>,
) -> StoreResult<Vec<SessionRecord>> {
    let mut created: Vec<RecordId> = Vec::new();
    let mut stored = Vec::with_capacity(sessions.len());
    for session in sessions {
        match create_one(store, session, &mut created).await {
            Ok(record) => stored.push(record),
            Err(e) => {
                for id in &created {
                    if let Err(cleanup) = store.delete(id).await {
                        tracing::error!(session = %id, error = %cleanup, "could not remove a session of a failed batch");
                    }
                }
                return Err(e);
            }
        }
    }
    Ok(stored)
}

async fn create_one(
    store: &PostgresStore,
    session: NewSessionData,
    created: &mut Vec<RecordId>,
) -> StoreResult<SessionRecord> {
    let log_after = session.seq_before();
    let NewSessionData { mut record, events } = session;
    let id = record.acpx_record_id.clone();
    record.validate(&store.inner.row_location(id.as_str()))?;
    let writer = store.lock(&id, NEW_SESSION_LOCK_TIMEOUT).await?;
    record.revision = 1;
    let cols = SessionColumns::from_record(&record)?;
    let msgs = message_rows(&record);
    store.inner.create(&id, cols, msgs, log_after).await?;
    created.push(id.clone());
    let chunks = events.chunks(EVENT_PAGE).count();
    for (i, chunk) in events.chunks(EVENT_PAGE).enumerate() {
        let durability = if i + 1 == chunks {
            Durability::Fsync
        } else {
            Durability::Flush
        };
        store.append(&writer, chunk, durability).await?;
    }
    store.flush(&id).await?;
    record.acpx.event_log = store.event_log_state(&id).await?;
    store.save(&mut record).await?;
    drop(writer);
    Ok(record)
}
