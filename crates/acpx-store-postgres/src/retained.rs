//! [`acpx_model::Store::create_sessions`] for a batch that holds a log retention trimmed (its
//! first event above seq 1: a copy of the retained part, `docs/format.md` § Writing many new
//! sessions at once). Each session is written as the one-by-one path writes it (create, appends,
//! save), except that its `event_logs` row is created with `last_seq` one below the first
//! event, in the transaction that creates the session, so the appends (whose seq check, in
//! `acpx_append`, is unchanged) continue the log from there: the rows start at that seq, which
//! every reader already takes as a log retention trimmed.

use std::time::Duration;

use acpx_model::store::{append_new_log, remove_created};
use acpx_model::{NewSessionData, RecordId, SessionRecord, Store, StoreResult};

use crate::rows::message_rows;
use crate::PostgresStore;

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
                remove_created(store, &created).await;
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
    let cols = crate::rows::session_columns(&record)?;
    let msgs = message_rows(&record)?;
    store.inner.create(&id, cols, msgs, log_after).await?;
    created.push(id.clone());
    append_new_log(store, &writer, &mut record, &events).await?;
    drop(writer);
    Ok(record)
}
