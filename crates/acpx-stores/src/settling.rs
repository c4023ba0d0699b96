//! [`Settling`]: a store whose every load settles the conversation as it reads it, wrapped
//! around any other store (object_store's `PrefixStore` shape: a `Store` over a `Store`).
//!
//! What it changes is what [`Store::load`] and [`Store::close`] read: each call gets a
//! settling read of its own ([`SettleOnLoad::another_load`], so concurrent calls each report
//! their own failure) through [`Store::load_settling`] and [`Store::close_settling`], and
//! [`Store::search`] goes through [`Store::search_settling`]; a settling read that left the
//! conversation in memory is logged. Every other call goes to the wrapped store unchanged.
//! The `acpx` command line opens its store this way for the commands that read sessions
//! (docs/format.md decision 17): a long session is never whole in memory, its turns before
//! the last two being read back from spill stores when asked for
//! ([`acpx_model::Thread::messages_from`]).

use std::sync::Arc;
use std::time::Duration;

use acpx_model::lease::{RemoteTasks, SessionLeases};
use acpx_model::{
    Durability, EventEnvelope, EventLogState, EventPage, EventQuery, ListPage, ListQuery,
    ManyLocks, NewSessionData, RecordId, SearchHit, SearchQuery, SessionLock, SessionRecord,
    SessionSummary, SettleOnLoad, StagedSession, StaleStage, Store, StoreResult, Timestamp,
};
use async_trait::async_trait;

/// `inner`, with every load settling with `settle` (see the module).
#[derive(Debug)]
pub struct Settling<S: Store + ?Sized> {
    inner: Arc<S>,
    settle: Arc<SettleOnLoad>,
}

impl<S: Store + ?Sized> Settling<S> {
    /// `inner`, its loads settling with `settle`.
    pub fn new(inner: Arc<S>, settle: Arc<SettleOnLoad>) -> Self {
        Settling { inner, settle }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &Arc<S> {
        &self.inner
    }

    /// A settling read of its own for one call.
    fn this_call(&self) -> Arc<SettleOnLoad> {
        Arc::new(self.settle.another_load())
    }
}

/// Logs why a settling read left the conversation in memory, if it did (the record is the
/// same either way).
fn report(id: &RecordId, settle: &SettleOnLoad) {
    if let Some(warning) = settle.failure_warning() {
        tracing::warn!(session = %id, "{warning}");
    }
}

#[async_trait]
impl<S: Store + ?Sized> Store for Settling<S> {
    fn backend_name(&self) -> &'static str {
        self.inner.backend_name()
    }

    async fn create(&self, record: &mut SessionRecord) -> StoreResult<()> {
        self.inner.create(record).await
    }

    async fn load(&self, id: &RecordId) -> StoreResult<SessionRecord> {
        let settle = self.this_call();
        let record = self.inner.load_settling(id, settle.clone()).await;
        report(id, &settle);
        record
    }

    async fn load_settling(
        &self,
        id: &RecordId,
        settle: Arc<SettleOnLoad>,
    ) -> StoreResult<SessionRecord> {
        self.inner.load_settling(id, settle).await
    }

    async fn summary(&self, id: &RecordId) -> StoreResult<SessionSummary> {
        self.inner.summary(id).await
    }

    async fn save(&self, record: &mut SessionRecord) -> StoreResult<()> {
        self.inner.save(record).await
    }

    async fn close(&self, id: &RecordId, at: Timestamp) -> StoreResult<SessionRecord> {
        let settle = self.this_call();
        let record = self.inner.close_settling(id, at, settle.clone()).await;
        report(id, &settle);
        record
    }

    async fn close_settling(
        &self,
        id: &RecordId,
        at: Timestamp,
        settle: Arc<SettleOnLoad>,
    ) -> StoreResult<SessionRecord> {
        self.inner.close_settling(id, at, settle).await
    }

    async fn delete(&self, id: &RecordId) -> StoreResult<bool> {
        self.inner.delete(id).await
    }

    async fn list(&self, query: &ListQuery) -> StoreResult<ListPage> {
        self.inner.list(query).await
    }

    fn lists_by_scanning(&self) -> bool {
        self.inner.lists_by_scanning()
    }

    async fn sessions_matching_id(&self, text: &str) -> StoreResult<Vec<SessionSummary>> {
        self.inner.sessions_matching_id(text).await
    }

    async fn append(
        &self,
        writer: &SessionLock,
        events: &[EventEnvelope],
        durability: Durability,
    ) -> StoreResult<EventLogState> {
        self.inner.append(writer, events, durability).await
    }

    async fn read_events(&self, id: &RecordId, query: &EventQuery) -> StoreResult<EventPage> {
        self.inner.read_events(id, query).await
    }

    async fn load_many_with_events(
        &self,
        ids: &[RecordId],
        query: &EventQuery,
    ) -> StoreResult<Vec<(SessionRecord, EventPage)>> {
        self.inner.load_many_with_events(ids, query).await
    }

    async fn event_log_state(&self, id: &RecordId) -> StoreResult<EventLogState> {
        self.inner.event_log_state(id).await
    }

    async fn flush(&self, id: &RecordId) -> StoreResult<()> {
        self.inner.flush(id).await
    }

    async fn search(&self, query: &SearchQuery) -> StoreResult<Vec<SearchHit>> {
        self.inner.search_settling(query, self.settle.clone()).await
    }

    async fn search_settling(
        &self,
        query: &SearchQuery,
        settle: Arc<SettleOnLoad>,
    ) -> StoreResult<Vec<SearchHit>> {
        self.inner.search_settling(query, settle).await
    }

    async fn lock(&self, id: &RecordId, timeout: Duration) -> StoreResult<SessionLock> {
        self.inner.lock(id, timeout).await
    }

    async fn create_sessions(
        &self,
        sessions: Vec<NewSessionData>,
    ) -> StoreResult<Vec<SessionRecord>> {
        self.inner.create_sessions(sessions).await
    }

    async fn stage_session<'s>(
        &'s self,
        record: SessionRecord,
    ) -> StoreResult<Box<dyn StagedSession + 's>> {
        self.inner.stage_session(record).await
    }

    async fn stale_stages(&self) -> StoreResult<Vec<StaleStage>> {
        self.inner.stale_stages().await
    }

    async fn remove_stale_stages(&self) -> StoreResult<Vec<StaleStage>> {
        self.inner.remove_stale_stages().await
    }

    async fn lock_many(&self, ids: &[RecordId], timeout: Duration) -> StoreResult<ManyLocks> {
        self.inner.lock_many(ids, timeout).await
    }

    async fn replace_snapshot(
        &self,
        writer: &SessionLock,
        record: &mut SessionRecord,
    ) -> StoreResult<()> {
        self.inner.replace_snapshot(writer, record).await
    }

    async fn replace_damaged_events(&self, writer: &SessionLock) -> StoreResult<Vec<u64>> {
        self.inner.replace_damaged_events(writer).await
    }

    async fn wait_for_events(
        &self,
        id: &RecordId,
        after_seq: u64,
        timeout: Duration,
    ) -> StoreResult<()> {
        self.inner.wait_for_events(id, after_seq, timeout).await
    }

    fn leases(&self) -> &dyn SessionLeases {
        self.inner.leases()
    }

    fn remote_tasks(&self) -> Option<&dyn RemoteTasks> {
        self.inner.remote_tasks()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Backend, OpenBackend, OpenStore, StoreConfig};
    use acpx_model::testing::MemorySpill;
    use acpx_model::{Message, NewSession, TextSpill};

    /// A session of `turns` turns of one question and one answer each.
    fn record(turns: usize) -> SessionRecord {
        let mut r = SessionRecord::new(
            NewSession {
                acpx_record_id: RecordId::parse("settling-test").unwrap(),
                acp_session_id: "acp-1".into(),
                agent_session_id: None,
                agent_command: "agent --acp".into(),
                cwd: "/repo".into(),
                name: None,
            },
            Timestamp::parse("2026-02-27T12:10:00.000Z").unwrap(),
        );
        for i in 0..turns {
            let user: Message = serde_json::from_value(serde_json::json!(
                {"User": {"id": format!("u{i}"), "content": [{"Text": format!("question {i}")}]}}
            ))
            .unwrap();
            let agent: Message = serde_json::from_value(serde_json::json!({"Agent": {
                "content": [{"Text": format!("answer {i}")}],
                "tool_results": {}, "reasoning_details": null}}))
            .unwrap();
            r.thread.messages.push(user);
            r.thread.messages.push(agent);
        }
        r
    }

    fn in_memory() -> Arc<SettleOnLoad> {
        Arc::new(SettleOnLoad::new(|| {
            let s = || Arc::new(MemorySpill::default()) as Arc<dyn TextSpill>;
            Ok([s(), s(), s()])
        }))
    }

    /// Through the wrapper a load and a close settle the turns before the last two; the
    /// backend itself reads the conversation whole; a settling read that cannot spill still
    /// gives the whole record.
    #[tokio::test]
    async fn loads_and_closes_settle_through_the_wrapper_only() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = StoreConfig::new(Backend::Fs, dir.path().to_path_buf());
        config.settle_on_load = Some(in_memory());
        let opened = OpenStore::open(&config).await.unwrap();
        let store = opened.as_dyn();
        let mut r = record(5);
        store.create(&mut r).await.unwrap();
        let id = r.acpx_record_id.clone();

        let settled = store.load(&id).await.unwrap();
        assert_eq!(settled.thread.settled.len(), 6);
        assert_eq!(settled.thread.message_count(), 10);
        let OpenBackend::Fs(fs) = opened.backend() else {
            panic!("not the file store");
        };
        assert_eq!(fs.load(&id).await.unwrap().thread.settled.len(), 0);

        let closed = store.close(&id, Timestamp::now()).await.unwrap();
        assert!(closed.closed);
        assert_eq!(closed.thread.settled.len(), 6);

        let failing = Settling::new(
            store.clone(),
            Arc::new(SettleOnLoad::new(|| Err(std::io::Error::other("no room")))),
        );
        let whole = failing.load(&id).await.unwrap();
        assert_eq!(whole.thread.settled.len(), 0);
        assert_eq!(whole.thread.message_count(), 10);
    }
}
