//! The suite tests itself: each check must fail against a store with the bug it exists to
//! catch. Every mutant is a `FaultStore` over `MemoryStore` that breaks exactly one rule of
//! the `Store` contract; a check that passes against its mutant would be asserting nothing.

use acpx_tests::ops::AppendLocked;
use std::sync::Arc;
use std::time::Duration;

use acpx_model::testing::{Fault, FaultStore};
use acpx_model::{
    Durability, EventEnvelope, EventLogState, EventPage, EventQuery, ListPage, ListQuery,
    LockGuard, MemoryStore, RecordId, SearchHit, SearchQuery, SessionLock, SessionRecord, Store,
    StoreError, StoreResult, Timestamp,
};
use acpx_tests::{conformance, Backend, Capabilities};
use async_trait::async_trait;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bug {
    /// No bug: the wrapper itself must pass.
    None,
    /// save ignores the revision: last writer wins.
    LastWriterWins,
    /// append renumbers a refused batch instead of refusing it.
    RenumbersSeqs,
    /// list ignores the cursor.
    IgnoresCursor,
    /// list orders by id only.
    OrdersById,
    /// read_events ignores the requestId filter.
    IgnoresRequestIdFilter,
    /// read_events ignores the limit.
    IgnoresLimit,
    /// close moves closedAt on every call.
    CloseNotIdempotent,
    /// lock never excludes anyone.
    LockNeverBlocks,
    /// search compares case-sensitively.
    CaseSensitiveSearch,
    /// delete leaves the events behind (a recreated session sees them).
    DeleteKeepsEvents,
    /// search answers from the conversation as created: an index that saves never update.
    StaleSearch,
}

/// The fault injected into a `MemoryStore`: one bug, or none.
#[derive(Debug)]
struct Mutant {
    bug: Bug,
    /// Events set aside by `DeleteKeepsEvents`, replayed into a recreated session.
    kept: std::sync::Mutex<Vec<EventEnvelope>>,
    /// Records as created, searched by `StaleSearch`.
    created: std::sync::Mutex<Vec<SessionRecord>>,
}

#[derive(Debug)]
struct NoGuard;
impl LockGuard for NoGuard {}

#[async_trait]
impl Fault<MemoryStore> for Mutant {
    async fn create(&self, inner: &MemoryStore, record: &mut SessionRecord) -> StoreResult<()> {
        inner.create(record).await?;
        self.created.lock().unwrap().push(record.clone());
        let kept: Vec<_> = std::mem::take(&mut *self.kept.lock().unwrap());
        let mine: Vec<_> = kept
            .into_iter()
            .filter(|e| e.acpx_record_id == record.acpx_record_id)
            .collect();
        if !mine.is_empty() {
            inner
                .append_locked(&record.acpx_record_id, &mine, Durability::Flush)
                .await?;
        }
        Ok(())
    }
    async fn save(&self, inner: &MemoryStore, record: &mut SessionRecord) -> StoreResult<()> {
        if self.bug == Bug::LastWriterWins {
            if let Ok(stored) = inner.load(&record.acpx_record_id).await {
                record.revision = stored.revision;
            }
        }
        inner.save(record).await
    }
    async fn close(
        &self,
        inner: &MemoryStore,
        id: &RecordId,
        at: Timestamp,
    ) -> StoreResult<SessionRecord> {
        let mut r = inner.close(id, at).await?;
        if self.bug == Bug::CloseNotIdempotent && r.closed_at != Some(at) {
            r.closed_at = Some(at);
            inner.save(&mut r).await?;
        }
        Ok(r)
    }
    async fn delete(&self, inner: &MemoryStore, id: &RecordId) -> StoreResult<bool> {
        if self.bug == Bug::DeleteKeepsEvents {
            if let Ok(page) = inner.read_events(id, &EventQuery::default()).await {
                self.kept.lock().unwrap().extend(page.events);
            }
        }
        inner.delete(id).await
    }
    async fn list(&self, inner: &MemoryStore, query: &ListQuery) -> StoreResult<ListPage> {
        let mut q = query.clone();
        if self.bug == Bug::IgnoresCursor && q.cursor.is_some() {
            q.cursor = None;
            // Still terminate: pretend the first page is the last.
            let mut page = inner.list(&q).await?;
            page.next_cursor = None;
            return Ok(page);
        }
        let mut page = inner.list(&q).await?;
        if self.bug == Bug::OrdersById {
            page.sessions
                .sort_by(|a, b| a.acpx_record_id.cmp(&b.acpx_record_id));
        }
        Ok(page)
    }
    async fn append(
        &self,
        inner: &MemoryStore,
        writer: &SessionLock,
        events: &[EventEnvelope],
        durability: Durability,
    ) -> StoreResult<EventLogState> {
        match inner.append(writer, events, durability).await {
            Err(StoreError::SeqMismatch { .. }) if self.bug == Bug::RenumbersSeqs => {
                let last = inner.event_log_state(writer.id()).await?.last_seq;
                let renumbered: Vec<_> = events
                    .iter()
                    .enumerate()
                    .map(|(i, e)| EventEnvelope {
                        seq: last + 1 + i as u64,
                        ..e.clone()
                    })
                    .collect();
                inner.append(writer, &renumbered, durability).await
            }
            other => other,
        }
    }
    async fn read_events(
        &self,
        inner: &MemoryStore,
        id: &RecordId,
        query: &EventQuery,
    ) -> StoreResult<EventPage> {
        let mut q = query.clone();
        match self.bug {
            Bug::IgnoresRequestIdFilter => q.request_id = None,
            Bug::IgnoresLimit => q.limit = None,
            _ => {}
        }
        inner.read_events(id, &q).await
    }
    async fn search(
        &self,
        inner: &MemoryStore,
        query: &SearchQuery,
    ) -> StoreResult<Vec<SearchHit>> {
        if self.bug == Bug::StaleSearch {
            // The latest creation of each id that still exists, as it was created.
            let created = self.created.lock().unwrap().clone();
            let mut records: Vec<SessionRecord> = Vec::new();
            for r in created.into_iter().rev() {
                let id = &r.acpx_record_id;
                if inner.load(id).await.is_ok() && records.iter().all(|k| k.acpx_record_id != *id) {
                    records.push(r);
                }
            }
            records.sort_by(|a, b| {
                acpx_model::list_order_key(&a.summary())
                    .cmp(&acpx_model::list_order_key(&b.summary()))
            });
            let mut hits: Vec<SearchHit> = records
                .iter()
                .flat_map(|r| acpx_model::search_record(r, query))
                .collect();
            hits.truncate(query.effective_limit());
            return Ok(hits);
        }
        let hits = inner.search(query).await?;
        if self.bug != Bug::CaseSensitiveSearch {
            return Ok(hits);
        }
        let mut out = Vec::new();
        for h in hits {
            let r = inner.load(&h.acpx_record_id).await?;
            let text = serde_json::to_string(&r.thread.messages[h.message_index]).unwrap();
            if query.text.split_whitespace().all(|t| text.contains(t)) {
                out.push(h);
            }
        }
        Ok(out)
    }
    async fn lock(
        &self,
        inner: &MemoryStore,
        id: &RecordId,
        timeout: Duration,
    ) -> StoreResult<SessionLock> {
        if self.bug == Bug::LockNeverBlocks {
            return Ok(SessionLock::new(
                id.clone(),
                inner.lock_issuer(),
                Box::new(NoGuard),
            ));
        }
        inner.lock(id, timeout).await
    }
}

/// Every handle the checks open is the one mutant store (over one `MemoryStore`).
struct MutantBackend(Arc<FaultStore<MemoryStore, Mutant>>);

impl MutantBackend {
    fn new(bug: Bug) -> Self {
        MutantBackend(Arc::new(FaultStore::new(
            Arc::new(MemoryStore::new()),
            Mutant {
                bug,
                kept: Default::default(),
                created: Default::default(),
            },
        )))
    }
}

#[async_trait]
impl Backend for MutantBackend {
    fn name(&self) -> &'static str {
        "mutant"
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities::NONE
    }
    async fn open(&self) -> Arc<dyn Store> {
        self.0.clone()
    }
    fn worker_args(&self) -> Option<Vec<String>> {
        None
    }
    async fn inject_snapshot(&self, _: &RecordId, _: &[u8]) -> Option<()> {
        None
    }
    async fn inject_log_bytes(&self, _: &RecordId, _: &[u8]) -> Option<()> {
        None
    }
    fn data_dir(&self) -> Option<std::path::PathBuf> {
        None
    }
}

macro_rules! must_catch {
    ($name:ident, $bug:expr, $check:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let backend = MutantBackend::new($bug);
            let outcome = tokio::spawn(async move { conformance::$check(&backend).await }).await;
            assert!(
                outcome.as_ref().is_err_and(|e| e.is_panic()),
                "{} passed against a store with bug {:?}",
                stringify!($check),
                $bug
            );
        }
    };
}

must_catch!(
    catches_last_writer_wins_in_a_race,
    Bug::LastWriterWins,
    concurrent_saves_exactly_one_wins
);
must_catch!(
    catches_last_writer_wins,
    Bug::LastWriterWins,
    save_stale_revision_conflicts
);
must_catch!(
    catches_renumbered_seqs,
    Bug::RenumbersSeqs,
    append_seq_must_continue_exactly
);
must_catch!(
    catches_ignored_cursor,
    Bug::IgnoresCursor,
    list_cursor_walk_exactly_once
);
must_catch!(
    catches_wrong_order,
    Bug::OrdersById,
    list_order_newest_first_with_id_tie_break
);
must_catch!(
    catches_ignored_request_id,
    Bug::IgnoresRequestIdFilter,
    read_filters_by_type_stream_and_request_id
);
must_catch!(
    catches_ignored_limit,
    Bug::IgnoresLimit,
    append_batches_and_page_back
);
must_catch!(
    catches_close_not_idempotent,
    Bug::CloseNotIdempotent,
    close_is_idempotent_and_keeps_session
);
must_catch!(
    catches_lock_never_blocks,
    Bug::LockNeverBlocks,
    lock_waits_times_out_and_releases_on_drop
);
must_catch!(
    catches_case_sensitive_search,
    Bug::CaseSensitiveSearch,
    search_finds_conversation_text
);
must_catch!(
    catches_an_index_that_saves_do_not_update,
    Bug::StaleSearch,
    search_follows_saves_deletes_and_other_handles
);
must_catch!(
    catches_events_surviving_delete,
    Bug::DeleteKeepsEvents,
    delete_removes_everything_idempotently
);

/// The wrapper without a bug passes the same checks, so a caught mutant is caught for its bug.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unbroken_wrapper_passes() {
    let fresh = || MutantBackend::new(Bug::None);
    conformance::save_stale_revision_conflicts(&fresh()).await;
    conformance::append_seq_must_continue_exactly(&fresh()).await;
    conformance::list_cursor_walk_exactly_once(&fresh()).await;
    conformance::list_order_newest_first_with_id_tie_break(&fresh()).await;
    conformance::read_filters_by_type_stream_and_request_id(&fresh()).await;
    conformance::append_batches_and_page_back(&fresh()).await;
    conformance::close_is_idempotent_and_keeps_session(&fresh()).await;
    conformance::lock_waits_times_out_and_releases_on_drop(&fresh()).await;
    conformance::search_finds_conversation_text(&fresh()).await;
    conformance::search_follows_saves_deletes_and_other_handles(&fresh()).await;
    conformance::delete_removes_everything_idempotently(&fresh()).await;
}
