//! [`MemoryStore`]: a complete in-process [`Store`], for tests and for library users who do
//! not want anything on disk. Reads return deep copies, so callers never share state with it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use async_trait::async_trait;

use crate::error::{StoreError, StoreResult};
use crate::event::EventEnvelope;
use crate::id::RecordId;
use crate::lease::{LeaseActivity, LeaseBook, LeaseGrant, LeaseHolder, OwnerLease, SessionLeases};
use crate::search::{search_record, SearchHit, SearchQuery};
use crate::session::{EventLogState, SessionRecord};
use crate::stage::{StagedSeqs, StagedSession, STAGE_LOCK_TIMEOUT};
use crate::store::{
    check_append_batch, list_order_key, normalize_cwd, Durability, EventPage, EventQuery, ListPage,
    ListQuery, LockGuard, LockIssuer, SessionLock, Store,
};
use crate::time::Timestamp;

#[derive(Debug, Default)]
struct Inner {
    sessions: HashMap<RecordId, MemSession>,
    /// Ids whose writer lock is held, with the token of the holder.
    locks: HashMap<RecordId, u64>,
    next_token: u64,
    /// The owner leases, by session.
    leases: HashMap<RecordId, LeaseBook>,
}

#[derive(Debug, Clone)]
struct MemSession {
    record: SessionRecord,
    events: Vec<EventEnvelope>,
    last_write_at: Option<Timestamp>,
}

/// An in-memory store. Cloning gives another handle to the same sessions.
#[derive(Debug, Clone)]
pub struct MemoryStore {
    inner: Arc<Mutex<Inner>>,
    /// The token of the session locks this store (and its clones) issue.
    issuer: LockIssuer,
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore {
            inner: Arc::default(),
            issuer: LockIssuer::unique(),
        }
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// The issuer token of the session locks this store hands out: a wrapper that builds
    /// its own [`SessionLock`]s over this store (a test double) stamps them with it.
    pub fn lock_issuer(&self) -> LockIssuer {
        self.issuer
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the mutex leaves data that is still structurally valid.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn log_state(id: &RecordId, s: &MemSession) -> EventLogState {
        EventLogState {
            active_path: format!("memory:{id}"),
            segment_count: 1,
            last_seq: s.events.last().map_or(0, |e| e.seq),
            last_write_at: s.last_write_at,
            ..EventLogState::default()
        }
    }
}

#[async_trait]
impl SessionLeases for MemoryStore {
    async fn acquire_lease(
        &self,
        id: &RecordId,
        holder: &LeaseHolder,
        ttl: Duration,
    ) -> StoreResult<LeaseGrant> {
        let mut inner = self.inner();
        let book = inner.leases.entry(id.clone()).or_default();
        Ok(book.acquire(id, holder, ttl, Timestamp::now()))
    }

    async fn renew_lease(
        &self,
        id: &RecordId,
        generation: u64,
        activity: &LeaseActivity,
        queue_depth: u32,
    ) -> StoreResult<OwnerLease> {
        let mut inner = self.inner();
        let book = inner.leases.entry(id.clone()).or_default();
        book.renew(id, generation, activity, queue_depth, Timestamp::now())
    }

    async fn release_lease(&self, id: &RecordId, generation: u64) -> StoreResult<bool> {
        Ok(self
            .inner()
            .leases
            .get_mut(id)
            .is_some_and(|b| b.release(generation)))
    }

    async fn read_lease(&self, id: &RecordId) -> StoreResult<Option<OwnerLease>> {
        Ok(self
            .inner()
            .leases
            .get(id)
            .and_then(|b| b.current(Timestamp::now())))
    }
}

#[derive(Debug)]
struct MemoryLockGuard {
    inner: Arc<Mutex<Inner>>,
    id: RecordId,
    token: u64,
}

impl LockGuard for MemoryLockGuard {}

impl Drop for MemoryLockGuard {
    fn drop(&mut self) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if inner.locks.get(&self.id) == Some(&self.token) {
            inner.locks.remove(&self.id);
        }
    }
}

impl MemoryStore {
    /// Stores whole new sessions in one step (under the store's mutex): what `create`, appends
    /// and a `save` with the log's state would leave (revision 2), for logs starting at any
    /// seq. A taken id (or one given twice) refuses the whole call.
    fn insert_whole(
        &self,
        sessions: Vec<crate::NewSessionData>,
    ) -> StoreResult<Vec<SessionRecord>> {
        let mut inner = self.inner();
        let mut seen = std::collections::HashSet::new();
        for s in &sessions {
            let id = &s.record.acpx_record_id;
            s.record.validate("memory")?;
            check_append_batch(id, s.seq_before(), &s.events)?;
            if inner.sessions.contains_key(id) || !seen.insert(id) {
                return Err(StoreError::AlreadyExists(id.clone()));
            }
        }
        let mut out = Vec::with_capacity(sessions.len());
        for mut s in sessions {
            let id = s.record.acpx_record_id.clone();
            s.record
                .thread
                .unsettle()
                .map_err(|e| StoreError::io("memory", e))?;
            let mut session = MemSession {
                record: s.record,
                last_write_at: (!s.events.is_empty()).then(Timestamp::now),
                events: s.events,
            };
            session.record.acpx.event_log = Self::log_state(&id, &session);
            // As after create and the save with the log's state (the trait's contract).
            session.record.revision = 2;
            out.push(session.record.clone());
            inner.sessions.insert(id, session);
        }
        Ok(out)
    }
}

#[async_trait]
impl Store for MemoryStore {
    fn backend_name(&self) -> &'static str {
        "memory"
    }

    async fn create(&self, record: &mut SessionRecord) -> StoreResult<()> {
        record.validate("memory")?;
        let mut inner = self.inner();
        let id = record.acpx_record_id.clone();
        if inner.sessions.contains_key(&id) {
            return Err(StoreError::AlreadyExists(id));
        }
        let mut stored = record.clone();
        stored.revision = 1;
        // Held as a store holds it: every message in `messages`, none in a process's spill.
        stored
            .thread
            .unsettle()
            .map_err(|e| StoreError::io("memory", e))?;
        inner.sessions.insert(
            id,
            MemSession {
                record: stored,
                events: Vec::new(),
                last_write_at: None,
            },
        );
        record.revision = 1;
        Ok(())
    }

    async fn create_sessions(
        &self,
        sessions: Vec<crate::NewSessionData>,
    ) -> StoreResult<Vec<SessionRecord>> {
        if sessions.iter().all(|s| s.seq_before() == 0) {
            return crate::store::create_sessions_one_by_one(self, sessions).await;
        }
        // A log retention trimmed starts above seq 1: stored as given, in one step.
        self.insert_whole(sessions)
    }

    async fn stage_session<'s>(
        &'s self,
        mut record: SessionRecord,
    ) -> StoreResult<Box<dyn StagedSession + 's>> {
        record.validate("memory")?;
        let id = record.acpx_record_id.clone();
        let taken = || StoreError::AlreadyExists(id.clone());
        if self.inner().sessions.contains_key(&id) {
            return Err(taken());
        }
        let writer = self.lock(&id, STAGE_LOCK_TIMEOUT).await?;
        if self.inner().sessions.contains_key(&id) {
            return Err(taken());
        }
        record.revision = 0;
        Ok(Box::new(MemoryStage {
            store: self.clone(),
            record,
            events: Vec::new(),
            seqs: StagedSeqs::default(),
            _writer: writer,
        }))
    }

    async fn load(&self, id: &RecordId) -> StoreResult<SessionRecord> {
        self.inner()
            .sessions
            .get(id)
            .map(|s| s.record.clone())
            .ok_or_else(|| StoreError::NotFound(id.clone()))
    }

    async fn save(&self, record: &mut SessionRecord) -> StoreResult<()> {
        record.validate("memory")?;
        let mut inner = self.inner();
        let id = record.acpx_record_id.clone();
        let stored = inner
            .sessions
            .get_mut(&id)
            .ok_or_else(|| StoreError::NotFound(id.clone()))?;
        if stored.record.revision != record.revision {
            return Err(StoreError::Conflict {
                id,
                expected: record.revision,
                actual: stored.record.revision,
            });
        }
        let mut next = record.clone();
        next.revision += 1;
        next.thread
            .unsettle()
            .map_err(|e| StoreError::io("memory", e))?;
        stored.record = next;
        record.revision += 1;
        Ok(())
    }

    async fn close(&self, id: &RecordId, at: Timestamp) -> StoreResult<SessionRecord> {
        let mut inner = self.inner();
        let stored = inner
            .sessions
            .get_mut(id)
            .ok_or_else(|| StoreError::NotFound(id.clone()))?;
        if !stored.record.closed {
            stored.record.closed = true;
            stored.record.closed_at = Some(at);
            stored.record.pid = None;
            stored.record.revision += 1;
        }
        Ok(stored.record.clone())
    }

    async fn delete(&self, id: &RecordId) -> StoreResult<bool> {
        Ok(self.inner().sessions.remove(id).is_some())
    }

    fn lists_by_scanning(&self) -> bool {
        true
    }

    fn leases(&self) -> &dyn SessionLeases {
        self
    }

    async fn list(&self, query: &ListQuery) -> StoreResult<ListPage> {
        let summaries: Vec<_> = self
            .inner()
            .sessions
            .values()
            .map(|s| s.record.summary())
            .collect();
        query.paginate(summaries, Vec::new())
    }

    async fn append(
        &self,
        writer: &SessionLock,
        events: &[EventEnvelope],
        _durability: Durability,
    ) -> StoreResult<EventLogState> {
        writer.check_issuer(self.issuer, "memory")?;
        let id = writer.id();
        let mut inner = self.inner();
        if let Some(generation) = writer.fence() {
            inner
                .leases
                .get(id)
                .cloned()
                .unwrap_or_default()
                .check_fence(id, generation)?;
        }
        let s = inner
            .sessions
            .get_mut(id)
            .ok_or_else(|| StoreError::NotFound(id.clone()))?;
        let last = s.events.last().map_or(0, |e| e.seq);
        check_append_batch(id, last, events)?;
        s.events.extend_from_slice(events);
        if !events.is_empty() {
            s.last_write_at = Some(Timestamp::now());
        }
        Ok(Self::log_state(id, s))
    }

    async fn read_events(&self, id: &RecordId, query: &EventQuery) -> StoreResult<EventPage> {
        let inner = self.inner();
        let s = inner
            .sessions
            .get(id)
            .ok_or_else(|| StoreError::NotFound(id.clone()))?;
        let start = s.events.partition_point(|e| e.seq < query.from_seq);
        let mut page = EventPage {
            last_seq: s.events.last().map_or(0, |e| e.seq),
            oldest_seq: s.events.first().map_or(0, |e| e.seq),
            ..EventPage::default()
        };
        let mut bytes = 0;
        for e in &s.events[start..] {
            if !query.matches(e) {
                continue;
            }
            if query.page_full(page.events.len(), bytes) {
                page.next_seq = Some(e.seq);
                break;
            }
            if query.max_bytes.is_some() {
                let mut line = Vec::new();
                e.write_ndjson_line(&mut line);
                bytes += line.len();
            }
            page.events.push(e.clone());
        }
        Ok(page)
    }

    async fn event_log_state(&self, id: &RecordId) -> StoreResult<EventLogState> {
        let inner = self.inner();
        let s = inner
            .sessions
            .get(id)
            .ok_or_else(|| StoreError::NotFound(id.clone()))?;
        Ok(Self::log_state(id, s))
    }

    async fn flush(&self, id: &RecordId) -> StoreResult<()> {
        if self.inner().sessions.contains_key(id) {
            Ok(())
        } else {
            Err(StoreError::NotFound(id.clone()))
        }
    }

    async fn search(&self, query: &SearchQuery) -> StoreResult<Vec<SearchHit>> {
        let cwd = query.cwd.as_deref().map(normalize_cwd).transpose()?;
        let mut records: Vec<SessionRecord> = self
            .inner()
            .sessions
            .values()
            .map(|s| s.record.clone())
            .filter(|r| {
                cwd.as_deref()
                    .is_none_or(|c| normalize_cwd(&r.cwd).is_ok_and(|rc| rc == c))
            })
            .collect();
        records.sort_by(|a, b| list_order_key(&a.summary()).cmp(&list_order_key(&b.summary())));
        let mut hits = Vec::new();
        for r in &records {
            hits.extend(search_record(r, query));
            if hits.len() >= query.effective_limit() {
                break;
            }
        }
        hits.truncate(query.effective_limit());
        Ok(hits)
    }

    async fn lock(&self, id: &RecordId, timeout: Duration) -> StoreResult<SessionLock> {
        let started = Instant::now();
        let mut backoff = Duration::from_millis(1);
        loop {
            {
                let mut inner = self.inner();
                if !inner.locks.contains_key(id) {
                    inner.next_token += 1;
                    let token = inner.next_token;
                    inner.locks.insert(id.clone(), token);
                    return Ok(SessionLock::new(
                        id.clone(),
                        self.issuer,
                        Box::new(MemoryLockGuard {
                            inner: self.inner.clone(),
                            id: id.clone(),
                            token,
                        }),
                    ));
                }
            }
            let waited = started.elapsed();
            if waited >= timeout {
                return Err(StoreError::Locked {
                    id: id.clone(),
                    waited,
                });
            }
            futures_timer::Delay::new(backoff.min(timeout - waited)).await;
            backoff = (backoff * 2).min(Duration::from_millis(50));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::NewSession;

    #[tokio::test]
    async fn append_requires_a_lock_of_this_store_and_lock_waits_then_times_out() {
        let store = MemoryStore::new();
        let id = RecordId::parse("a").unwrap();
        let mut r = SessionRecord::new(
            NewSession {
                acpx_record_id: id.clone(),
                acp_session_id: "acp".into(),
                agent_session_id: None,
                agent_command: "agent".into(),
                cwd: "/r".into(),
                name: None,
            },
            Timestamp::now(),
        );
        store.create(&mut r).await.unwrap();
        let foreign = MemoryStore::new().lock(&id, Duration::ZERO).await.unwrap();
        match store.append(&foreign, &[], Durability::Flush).await {
            Err(StoreError::InvalidArgument(m)) => assert!(m.contains("not issued"), "{m}"),
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
        let held = store.clone().lock(&id, Duration::ZERO).await.unwrap();
        store.append(&held, &[], Durability::Flush).await.unwrap();
        assert!(matches!(
            store.lock(&id, Duration::from_millis(20)).await,
            Err(StoreError::Locked { .. })
        ));
        drop(held);
        store.lock(&id, Duration::ZERO).await.unwrap();
    }
}

/// A stage of the memory store ([`Store::stage_session`]): the batches are held in memory
/// and the session inserted whole at the commit. A dropped stage leaves nothing.
#[derive(Debug)]
struct MemoryStage {
    store: MemoryStore,
    record: SessionRecord,
    events: Vec<EventEnvelope>,
    seqs: StagedSeqs,
    _writer: SessionLock,
}

#[async_trait]
impl StagedSession for MemoryStage {
    fn id(&self) -> &RecordId {
        &self.record.acpx_record_id
    }

    async fn append(&mut self, events: &[EventEnvelope]) -> StoreResult<()> {
        self.seqs.check(&self.record.acpx_record_id, events)?;
        self.events.extend_from_slice(events);
        self.seqs.advance(events);
        Ok(())
    }

    async fn commit(self: Box<Self>) -> StoreResult<SessionRecord> {
        let MemoryStage {
            store,
            record,
            events,
            ..
        } = *self;
        let mut stored = store.insert_whole(vec![crate::NewSessionData { record, events }])?;
        stored.pop().ok_or_else(|| StoreError::Backend {
            backend: "memory",
            message: "a commit stored no session".into(),
        })
    }

    async fn abort(self: Box<Self>) -> StoreResult<()> {
        Ok(())
    }
}
