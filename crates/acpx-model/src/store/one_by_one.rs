//! [`Store::create_sessions`]'s default: the sessions written one after the other through
//! `create`, `append` and `save`, and the parts of it a backend's own batch path falls back
//! on (a session too large for the batch, a log that retention trimmed).

use std::time::Duration;

use super::{Durability, NewSessionData, SessionLock, Store};
use crate::error::{StoreError, StoreResult};
use crate::event::EventEnvelope;
use crate::id::RecordId;
use crate::session::SessionRecord;

/// Events appended per call.
const APPEND_PAGE: usize = 1_000;

/// How long a new session's writer waits for its lock (a fresh id: normally free at once).
pub(crate) const NEW_SESSION_LOCK_TIMEOUT: Duration = Duration::from_secs(10);

/// This crate does no logging; a failed cleanup is reported on stderr so it is not lost.
pub(crate) fn report_cleanup_failure(id: &RecordId, e: &StoreError) {
    eprintln!("acpx: could not remove the partial copy of session {id}: {e}");
}

/// [`Store::create_sessions`] done one session after the other through `create`, `append`
/// and `save` (the trait's default implementation, correct for every backend; backends also
/// use it for sessions too large for their batch path). The last append of each session is
/// [`Durability::Fsync`] and the save is a store's normal durable save.
pub async fn create_sessions_one_by_one<S: Store + ?Sized>(
    store: &S,
    sessions: Vec<NewSessionData>,
) -> StoreResult<Vec<SessionRecord>> {
    create_sessions_in_parts(store, sessions, |_| None).await
}

/// [`create_sessions_one_by_one`] for a store whose batch path can start a log retention
/// trimmed (first event above seq 1) but cannot take the whole of it: for such a session,
/// `retained_prefix` says how many of its first events the store's [`Store::create_sessions`]
/// takes on its batch path (at least 1; it must not come back here for them); those create
/// the session, and the rest is appended. `None` refuses the session, as the one-by-one path
/// does.
pub async fn create_sessions_in_parts<S: Store + ?Sized>(
    store: &S,
    sessions: Vec<NewSessionData>,
    retained_prefix: impl Fn(&NewSessionData) -> Option<usize>,
) -> StoreResult<Vec<SessionRecord>> {
    let mut created: Vec<RecordId> = Vec::new();
    let mut stored = Vec::with_capacity(sessions.len());
    for session in sessions {
        let result = if session.seq_before() > 0 {
            match retained_prefix(&session) {
                Some(prefix) => {
                    create_retained_in_parts(store, session, prefix, &mut created).await
                }
                None => create_one(store, session, &mut created).await,
            }
        } else {
            create_one(store, session, &mut created).await
        };
        match result {
            Ok(record) => stored.push(record),
            Err(e) => {
                remove_created(store, &created).await;
                return Err(e);
            }
        }
    }
    Ok(stored)
}

/// Removes the sessions a failed batch created (a removal that fails is logged: the batch's
/// own error is the one to report).
pub async fn remove_created<S: Store + ?Sized>(store: &S, created: &[RecordId]) {
    for id in created {
        if let Err(cleanup) = store.delete(id).await {
            report_cleanup_failure(id, &cleanup);
        }
    }
}

/// The rest of writing a new session one by one once its snapshot exists: appends `events`
/// a page at a time under `writer` (the last page [`Durability::Fsync`]), then saves `record`
/// with the log's state (a store's normal durable save).
pub async fn append_new_log<S: Store + ?Sized>(
    store: &S,
    writer: &SessionLock,
    record: &mut SessionRecord,
    events: &[EventEnvelope],
) -> StoreResult<()> {
    let id = record.acpx_record_id.clone();
    let chunks = events.chunks(APPEND_PAGE).count();
    for (i, chunk) in events.chunks(APPEND_PAGE).enumerate() {
        let durability = if i + 1 == chunks {
            Durability::Fsync
        } else {
            Durability::Flush
        };
        store.append(writer, chunk, durability).await?;
    }
    store.flush(&id).await?;
    record.acpx.event_log = store.event_log_state(&id).await?;
    store.save(record).await?;
    Ok(())
}

/// How many of the first `events` fit in `budget` bytes of NDJSON lines, at least 1: the
/// `retained_prefix` of [`create_sessions_in_parts`] for a store that measures its log in
/// lines and whose batch path takes one event of any size.
pub fn prefix_within(events: &[EventEnvelope], budget: u64) -> usize {
    let mut line = Vec::new();
    let mut held = 0u64;
    for (i, e) in events.iter().enumerate() {
        line.clear();
        e.write_ndjson_line(&mut line);
        held = held.saturating_add(line.len() as u64);
        if held > budget {
            return i.max(1);
        }
    }
    events.len().max(1)
}

/// A session whose log starts above seq 1: its first `prefix` events through the store's
/// batch path, which creates it with the log starting there, then the rest appended.
async fn create_retained_in_parts<S: Store + ?Sized>(
    store: &S,
    session: NewSessionData,
    prefix: usize,
    created: &mut Vec<RecordId>,
) -> StoreResult<SessionRecord> {
    let NewSessionData { record, mut events } = session;
    let id = record.acpx_record_id.clone();
    let rest = events.split_off(prefix.clamp(1, events.len()));
    let mut stored = store
        .create_sessions(vec![NewSessionData { record, events }])
        .await?;
    created.push(id.clone());
    let mut record = stored.pop().ok_or_else(|| StoreError::Backend {
        backend: store.backend_name(),
        message: format!("creating session {id} returned no snapshot"),
    })?;
    let writer = store.lock(&id, NEW_SESSION_LOCK_TIMEOUT).await?;
    append_new_log(store, &writer, &mut record, &rest).await?;
    drop(writer);
    Ok(record)
}

/// One session of [`create_sessions_one_by_one`]; pushes its id to `created` once it exists.
async fn create_one<S: Store + ?Sized>(
    store: &S,
    session: NewSessionData,
    created: &mut Vec<RecordId>,
) -> StoreResult<SessionRecord> {
    if let Some(first) = session.events.first().filter(|e| e.seq > 1) {
        return Err(StoreError::InvalidArgument(format!(
            "session {}: the {} store cannot create a log that starts at seq {} (one whose \
             older events retention removed) on this path: it writes through append, which \
             starts a log at seq 1",
            session.record.acpx_record_id,
            store.backend_name(),
            first.seq
        )));
    }
    let NewSessionData { mut record, events } = session;
    let id = record.acpx_record_id.clone();
    let writer = store.lock(&id, NEW_SESSION_LOCK_TIMEOUT).await?;
    store.create(&mut record).await?;
    created.push(id.clone());
    append_new_log(store, &writer, &mut record, &events).await?;
    drop(writer);
    Ok(record)
}
