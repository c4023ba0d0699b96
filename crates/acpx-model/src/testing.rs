//! Test support (feature `testing`): [`FaultStore`], one `Store` wrapper that injects faults
//! into a real store and forwards everything else; and [`MemorySpill`], a `TextSpill` in
//! memory whose reads can be made to fail, for code that handles spilled texts.
//!
//! A test that needs a store with a bug or a failing disk wraps a real backend instead of
//! writing yet another hand-forwarding `Store` impl:
//!
//! - [`Faults`], the ready-made faults: appends that fail like a full disk (switched on and
//!   off while the test runs), events altered on their way into the store, pages altered on
//!   their way out.
//! - [`Fault`], for anything else: implement only the methods you break; every other method
//!   forwards to the wrapped store.
//!
//! ```
//! use std::sync::Arc;
//! use acpx_model::testing::{FaultStore, Faults};
//! use acpx_model::{MemoryStore, Store};
//!
//! let store = FaultStore::new(Arc::new(MemoryStore::new()), Faults::new());
//! store.fault().fail_appends(true); // every append now fails with "No space left on device"
//! assert_eq!(store.backend_name(), "memory");
//! ```

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::{
    Durability, EventEnvelope, EventLogState, EventPage, EventQuery, ListPage, ListQuery, RecordId,
    SearchHit, SearchQuery, SessionLock, SessionRecord, Store, StoreError, StoreResult, Timestamp,
};

/// What a [`FaultStore`] does differently from the store it wraps. Each method gets the
/// wrapped store and the call's arguments; each defaults to forwarding the call unchanged, so
/// a fault overrides only the methods it breaks.
#[async_trait]
pub trait Fault<S: Store + ?Sized>: Send + Sync + std::fmt::Debug {
    /// [`Store::backend_name`].
    fn backend_name(&self, inner: &S) -> &'static str {
        inner.backend_name()
    }
    /// [`Store::create`].
    async fn create(&self, inner: &S, record: &mut SessionRecord) -> StoreResult<()> {
        inner.create(record).await
    }
    /// [`Store::load`].
    async fn load(&self, inner: &S, id: &RecordId) -> StoreResult<SessionRecord> {
        inner.load(id).await
    }
    /// [`Store::save`].
    async fn save(&self, inner: &S, record: &mut SessionRecord) -> StoreResult<()> {
        inner.save(record).await
    }
    /// [`Store::close`].
    async fn close(&self, inner: &S, id: &RecordId, at: Timestamp) -> StoreResult<SessionRecord> {
        inner.close(id, at).await
    }
    /// [`Store::delete`].
    async fn delete(&self, inner: &S, id: &RecordId) -> StoreResult<bool> {
        inner.delete(id).await
    }
    /// [`Store::list`].
    async fn list(&self, inner: &S, query: &ListQuery) -> StoreResult<ListPage> {
        inner.list(query).await
    }
    /// [`Store::append`].
    async fn append(
        &self,
        inner: &S,
        writer: &SessionLock,
        events: &[EventEnvelope],
        durability: Durability,
    ) -> StoreResult<EventLogState> {
        inner.append(writer, events, durability).await
    }
    /// [`Store::read_events`].
    async fn read_events(
        &self,
        inner: &S,
        id: &RecordId,
        query: &EventQuery,
    ) -> StoreResult<EventPage> {
        inner.read_events(id, query).await
    }
    /// [`Store::event_log_state`].
    async fn event_log_state(&self, inner: &S, id: &RecordId) -> StoreResult<EventLogState> {
        inner.event_log_state(id).await
    }
    /// [`Store::flush`].
    async fn flush(&self, inner: &S, id: &RecordId) -> StoreResult<()> {
        inner.flush(id).await
    }
    /// [`Store::search`].
    async fn search(&self, inner: &S, query: &SearchQuery) -> StoreResult<Vec<SearchHit>> {
        inner.search(query).await
    }
    /// [`Store::lock`].
    async fn lock(&self, inner: &S, id: &RecordId, timeout: Duration) -> StoreResult<SessionLock> {
        inner.lock(id, timeout).await
    }
    /// [`Store::replace_snapshot`].
    async fn replace_snapshot(
        &self,
        inner: &S,
        writer: &SessionLock,
        record: &mut SessionRecord,
    ) -> StoreResult<()> {
        inner.replace_snapshot(writer, record).await
    }
}

/// A store that sends every call through the fault `F` to the real store `S` it wraps
/// (a `MemoryStore`, or any backend as `Arc<dyn Store>`).
#[derive(Debug)]
pub struct FaultStore<S: Store + ?Sized, F = Faults> {
    inner: Arc<S>,
    fault: F,
}

impl<S: Store + ?Sized, F: Fault<S>> FaultStore<S, F> {
    /// `inner`, with `fault` injected.
    pub fn new(inner: Arc<S>, fault: F) -> Self {
        FaultStore { inner, fault }
    }

    /// The wrapped store, to look at what really reached it.
    pub fn inner(&self) -> &Arc<S> {
        &self.inner
    }

    /// The fault, to switch it while the test runs.
    pub fn fault(&self) -> &F {
        &self.fault
    }
}

#[async_trait]
impl<S: Store + ?Sized, F: Fault<S>> Store for FaultStore<S, F> {
    fn backend_name(&self) -> &'static str {
        self.fault.backend_name(&self.inner)
    }
    async fn create(&self, record: &mut SessionRecord) -> StoreResult<()> {
        self.fault.create(&self.inner, record).await
    }
    async fn load(&self, id: &RecordId) -> StoreResult<SessionRecord> {
        self.fault.load(&self.inner, id).await
    }
    async fn save(&self, record: &mut SessionRecord) -> StoreResult<()> {
        self.fault.save(&self.inner, record).await
    }
    async fn close(&self, id: &RecordId, at: Timestamp) -> StoreResult<SessionRecord> {
        self.fault.close(&self.inner, id, at).await
    }
    async fn delete(&self, id: &RecordId) -> StoreResult<bool> {
        self.fault.delete(&self.inner, id).await
    }
    async fn list(&self, query: &ListQuery) -> StoreResult<ListPage> {
        self.fault.list(&self.inner, query).await
    }
    async fn append(
        &self,
        writer: &SessionLock,
        events: &[EventEnvelope],
        durability: Durability,
    ) -> StoreResult<EventLogState> {
        self.fault
            .append(&self.inner, writer, events, durability)
            .await
    }
    async fn read_events(&self, id: &RecordId, query: &EventQuery) -> StoreResult<EventPage> {
        self.fault.read_events(&self.inner, id, query).await
    }
    async fn event_log_state(&self, id: &RecordId) -> StoreResult<EventLogState> {
        self.fault.event_log_state(&self.inner, id).await
    }
    async fn flush(&self, id: &RecordId) -> StoreResult<()> {
        self.fault.flush(&self.inner, id).await
    }
    async fn search(&self, query: &SearchQuery) -> StoreResult<Vec<SearchHit>> {
        self.fault.search(&self.inner, query).await
    }
    async fn lock(&self, id: &RecordId, timeout: Duration) -> StoreResult<SessionLock> {
        self.fault.lock(&self.inner, id, timeout).await
    }
    async fn replace_snapshot(
        &self,
        writer: &SessionLock,
        record: &mut SessionRecord,
    ) -> StoreResult<()> {
        self.fault
            .replace_snapshot(&self.inner, writer, record)
            .await
    }
    fn leases(&self) -> &dyn crate::lease::SessionLeases {
        self.inner.leases()
    }
    fn remote_tasks(&self) -> Option<&dyn crate::lease::RemoteTasks> {
        self.inner.remote_tasks()
    }
}

/// The ready-made faults. None is active in [`Faults::new`].
#[derive(Debug, Default)]
pub struct Faults {
    failing_appends: AtomicBool,
    /// Events still allowed while `counting` (see [`Faults::fail_appends_after`]).
    events_left: AtomicU64,
    counting: AtomicBool,
    tamper_appends: Option<fn(&mut Vec<EventEnvelope>)>,
    tamper_reads: Option<fn(&mut EventPage)>,
}

impl Faults {
    /// No fault: every call forwards unchanged.
    pub fn new() -> Self {
        Self::default()
    }

    /// While `on`, every append fails, writing nothing, with the I/O error of a full disk
    /// (`No space left on device` on the log file); switchable while the store is in use.
    pub fn fail_appends(&self, on: bool) {
        self.counting.store(false, Ordering::SeqCst);
        self.failing_appends.store(on, Ordering::SeqCst);
    }

    /// Lets `n` more events be appended, then fails the append that would go past them and
    /// every later one like [`Faults::fail_appends`] (a disk that fills up at a chosen point
    /// of a stream). Counting events rather than calls keeps the point where the disk fills
    /// the same however the caller batches. [`Faults::fail_appends`]`(false)` ends the
    /// outage.
    pub fn fail_appends_after(&self, n: u64) {
        self.events_left.store(n, Ordering::SeqCst);
        self.counting.store(true, Ordering::SeqCst);
    }

    /// Whether this append fails: switched on, or past the count of
    /// [`Faults::fail_appends_after`] (which then switches the failure on).
    fn this_append_fails(&self, events: usize) -> bool {
        if self.failing_appends.load(Ordering::SeqCst) {
            return true;
        }
        if !self.counting.load(Ordering::SeqCst) {
            return false;
        }
        let count = u64::try_from(events).unwrap_or(u64::MAX);
        let left = self
            .events_left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(count));
        if left.is_err() {
            self.counting.store(false, Ordering::SeqCst);
            self.failing_appends.store(true, Ordering::SeqCst);
            return true;
        }
        false
    }

    /// Alters every batch before it is appended (a lossy store: what it keeps differs from
    /// what it was given, while the append succeeds).
    pub fn tamper_appends(mut self, tamper: fn(&mut Vec<EventEnvelope>)) -> Self {
        self.tamper_appends = Some(tamper);
        self
    }

    /// Alters every page `read_events` returns (for example a log trimmed by retention).
    pub fn tamper_reads(mut self, tamper: fn(&mut EventPage)) -> Self {
        self.tamper_reads = Some(tamper);
        self
    }
}

#[async_trait]
impl<S: Store + ?Sized> Fault<S> for Faults {
    async fn append(
        &self,
        inner: &S,
        writer: &SessionLock,
        events: &[EventEnvelope],
        durability: Durability,
    ) -> StoreResult<EventLogState> {
        if self.this_append_fails(events.len()) {
            return Err(StoreError::io(
                "events.ndjson",
                std::io::Error::new(std::io::ErrorKind::StorageFull, "No space left on device"),
            ));
        }
        match self.tamper_appends {
            Some(tamper) => {
                let mut events = events.to_vec();
                tamper(&mut events);
                inner.append(writer, &events, durability).await
            }
            None => inner.append(writer, events, durability).await,
        }
    }

    async fn read_events(
        &self,
        inner: &S,
        id: &RecordId,
        query: &EventQuery,
    ) -> StoreResult<EventPage> {
        let mut page = inner.read_events(id, query).await?;
        if let Some(tamper) = self.tamper_reads {
            tamper(&mut page);
        }
        Ok(page)
    }
}

/// A [`crate::TextSpill`] in memory, for tests of code that handles spilled texts
/// ([`crate::ThreadText::spill_into`]); reads short (at most 1,000 bytes a call, to exercise
/// callers' loops), and fail while [`MemorySpill::fail_reads`] is set.
#[derive(Debug, Default)]
pub struct MemorySpill {
    bytes: std::sync::Mutex<Vec<u8>>,
    fail_reads: AtomicBool,
}

impl MemorySpill {
    /// Makes every later read fail (`true`) or work again (`false`).
    pub fn fail_reads(&self, on: bool) {
        self.fail_reads.store(on, Ordering::Relaxed);
    }
}

impl crate::TextSpill for MemorySpill {
    fn len(&self) -> u64 {
        self.bytes.lock().map_or(0, |b| b.len() as u64)
    }

    fn append_at(&self, expected: u64, text: &str) -> std::io::Result<bool> {
        let mut b = self
            .bytes
            .lock()
            .map_err(|_| std::io::Error::other("poisoned"))?;
        if b.len() as u64 != expected {
            return Ok(false);
        }
        b.extend_from_slice(text.as_bytes());
        Ok(true)
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.fail_reads.load(Ordering::Relaxed) {
            return Err(std::io::Error::other("disk gone"));
        }
        let b = self
            .bytes
            .lock()
            .map_err(|_| std::io::Error::other("poisoned"))?;
        let start = usize::try_from(offset).map_or(b.len(), |o| o.min(b.len()));
        let n = buf.len().min(b.len() - start).min(1000);
        buf[..n].copy_from_slice(&b[start..start + n]);
        Ok(n)
    }
}
