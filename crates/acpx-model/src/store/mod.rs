//! The [`Store`] trait every backend implements, and the query types it takes.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine;
use serde::{Deserialize, Serialize};

pub use crate::append_batch::check_append_batch;
use crate::error::{StoreError, StoreResult};
use crate::event::{EventEnvelope, EventStream, EventType};
use crate::id::RecordId;
use crate::lease::{RemoteTasks, SessionLeases};
use crate::load::SettleOnLoad;
pub use crate::lock::{LockGuard, LockIssuer, ManyLocks, SessionLock};

mod direct_stage;
mod one_by_one;

pub use direct_stage::{refuse_taken, DirectStage};
pub use one_by_one::{
    append_new_log, create_sessions_in_parts, create_sessions_one_by_one, prefix_within,
    remove_created,
};
pub(crate) use one_by_one::{report_cleanup_failure, NEW_SESSION_LOCK_TIMEOUT};

/// The type of the event [`Store::replace_damaged_events`] puts in place of a stored event that
/// could not be read; its payload holds what was stored (`docs/format.md` § Damaged events).
pub const DAMAGED_EVENT_TYPE: &str = "event_damaged";
use crate::search::{SearchHit, SearchQuery};
use crate::session::{EventLogState, SessionRecord};
use crate::stage::{StagedSession, StaleStage};
use crate::summary::SessionSummary;
use crate::time::Timestamp;

/// How far an append is pushed towards the disk before `append` returns.
///
/// | level | survives a crash of the process | survives a crash of the machine |
/// |---|---|---|
/// | `None` | no: the batch may sit in an in-process buffer until the session lock is released, the buffer fills, or [`Store::flush`] | no |
/// | `Flush` | yes: handed to the operating system with one write | no |
/// | `Fsync` | yes | yes: `fdatasync` (or a synchronous commit) before returning |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// May be buffered in the process (see the table above).
    None,
    /// Written to the operating system before `append` returns (the default).
    #[default]
    Flush,
    /// On stable storage before `append` returns.
    Fsync,
}

/// Which sessions `list` returns, by lifecycle state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClosedFilter {
    /// Open and closed sessions (the default).
    #[default]
    Any,
    /// Only sessions that are not closed.
    Open,
    /// Only closed sessions.
    Closed,
}

/// Filters and paging for [`Store::list`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListQuery {
    /// Only sessions whose `cwd` equals this absolute path (a trailing `/` is ignored).
    pub cwd: Option<String>,
    /// Only sessions started with exactly this agent command.
    pub agent_command: Option<String>,
    /// Only sessions with exactly this name.
    pub name: Option<String>,
    /// Only open sessions, only closed ones, or both.
    pub closed: ClosedFilter,
    /// Page size; `None` returns every match in one page.
    pub limit: Option<usize>,
    /// The `next_cursor` of the previous page, unchanged.
    pub cursor: Option<String>,
}

/// One page of [`Store::list`]: newest `lastUsedAt` first, the record id breaking ties.
#[derive(Debug, Clone, Default)]
pub struct ListPage {
    /// The sessions of this page, in list order.
    pub sessions: Vec<SessionSummary>,
    /// Present when more sessions may follow.
    pub next_cursor: Option<String>,
    /// Stored entries that could not be read (malformed snapshots), with the reason.
    /// They are reported, never silently dropped, and never fail the whole list.
    pub skipped: Vec<SkippedEntry>,
}

/// A stored entry `list` had to skip.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SkippedEntry {
    /// The session the entry belongs to, when its name says (a snapshot file `<id>.json`, a
    /// row's key): what `fsck` names and rebuilds from the log.
    #[serde(rename = "acpxRecordId", skip_serializing_if = "Option::is_none")]
    pub acpx_record_id: Option<RecordId>,
    /// The file or row.
    pub location: String,
    /// Why it could not be read (the field and what is wrong with it, when known).
    pub reason: String,
}

/// How a reader treats a damaged complete line in the middle of the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReadMode {
    /// Fail with [`StoreError::Corrupt`] naming the file and line.
    #[default]
    Strict,
    /// Skip the line and report it in [`EventPage::damaged`].
    Lenient,
}

/// Filters and paging for [`Store::read_events`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventQuery {
    /// First seq to return (inclusive); 0 or 1 mean "from the oldest retained event".
    pub from_seq: u64,
    /// Only these event types (empty: all).
    pub types: Vec<EventType>,
    /// Only these streams (empty: all).
    pub streams: Vec<EventStream>,
    /// Only events with this `requestId`.
    pub request_id: Option<String>,
    /// At most this many matching events; `None`: all.
    pub limit: Option<usize>,
    /// At most about this many bytes of events: a page ends after the event that brings it to
    /// this size, so it holds at least one, and `next_seq` says where the next starts, as
    /// after `limit`. The file store counts the events' NDJSON lines, the databases the text
    /// of their columns. `None`: no bound. A reader that pages through a log of any events
    /// sets it ([`PAGE_BYTES`]), so that a page of large events stays small, and `limit` as
    /// well: PostgreSQL receives the rows of a page (at most `limit` and one) before it cuts
    /// them to `max_bytes`.
    pub max_bytes: Option<usize>,
    /// What a damaged line does: fail the read, or be skipped and reported.
    pub mode: ReadMode,
}

/// The [`EventQuery::max_bytes`] of a reader that pages through a whole log (export, fsck,
/// roll-forward, `sessions events`): with 5,000 events a page, a log of large tool outputs
/// held most of itself in one page. Parsed, a page takes about twice its lines' bytes; a
/// store call per MiB costs little next to reading that MiB.
pub const PAGE_BYTES: usize = 1 << 20;

impl EventQuery {
    /// Everything from `from_seq` on, strict.
    pub fn from_seq(from_seq: u64) -> Self {
        EventQuery {
            from_seq,
            ..EventQuery::default()
        }
    }

    /// Whether a page already holding `events` events of `bytes` bytes is full ([`limit`],
    /// [`max_bytes`]): the next matching event starts the next page.
    ///
    /// [`limit`]: EventQuery::limit
    /// [`max_bytes`]: EventQuery::max_bytes
    pub fn page_full(&self, events: usize, bytes: usize) -> bool {
        self.limit.is_some_and(|l| events >= l)
            || (events > 0 && self.max_bytes.is_some_and(|b| bytes >= b))
    }

    /// Whether `e` passes the type, stream and requestId filters (not the seq bound).
    pub fn matches(&self, e: &EventEnvelope) -> bool {
        (self.types.is_empty() || self.types.contains(&e.event_type))
            && (self.streams.is_empty() || self.streams.contains(&e.stream))
            && self
                .request_id
                .as_ref()
                .is_none_or(|r| e.request_id.as_deref() == Some(r.as_str()))
    }
}

/// A page of events, in seq order.
#[derive(Debug, Clone, Default)]
pub struct EventPage {
    /// The matching events, in seq order.
    pub events: Vec<EventEnvelope>,
    /// When `limit` or `max_bytes` cut the page: the seq to pass as `from_seq` for the next
    /// page.
    pub next_seq: Option<u64>,
    /// The last seq stored for the session (whether or not it matched the filters).
    pub last_seq: u64,
    /// The oldest seq still retained (older events were rotated out); 0 when the log is empty.
    pub oldest_seq: u64,
    /// An incomplete last line (a crash during a write). It is withheld, never parsed.
    pub torn_tail: Option<TornTail>,
    /// Damaged complete lines skipped in [`ReadMode::Lenient`].
    pub damaged: Vec<DamagedLine>,
}

/// An incomplete final line found at the end of the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TornTail {
    /// The file holding the incomplete line (after a set-aside: the file it was moved to).
    pub location: String,
    /// Its length in bytes.
    pub bytes: u64,
    /// After a set-aside: the file the line was cut from (`None` when it was not moved).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moved_from: Option<String>,
}

/// A complete line that is not a valid event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DamagedLine {
    /// The segment file or table.
    pub location: String,
    /// The 1-based line number in that file (the seq for a database row).
    pub line: u64,
    /// What is wrong with it.
    pub reason: String,
    /// How many damaged lines this entry stands for: 1, or more for the entry that ends a
    /// page listing only its first ones (the file store lists 100; this entry names the last
    /// of the others). Counts of damaged lines add this, not the entries.
    #[serde(skip_serializing_if = "is_one")]
    pub lines: u64,
}

fn is_one(n: &u64) -> bool {
    *n == 1
}

/// One new session for [`Store::create_sessions`]: its snapshot and its whole event log.
#[derive(Debug, Clone, PartialEq)]
pub struct NewSessionData {
    /// The snapshot. Its `revision` and `acpx.event_log` are the target store's to set.
    pub record: SessionRecord,
    /// The whole retained log, in seq order, without a gap (may be empty). It starts at seq 1,
    /// or at a later seq for a log whose oldest events retention removed (a copy of such a
    /// log is the retained part): the file and SQLite stores' batch paths store it as a log
    /// retained from that seq; the one-by-one path ([`Store::create_sessions`]'s default, and
    /// the stores' fallback for a log larger than their retention budget) refuses it with
    /// `InvalidArgument`, since it writes through `append`, whose seq check starts at 1.
    pub events: Vec<EventEnvelope>,
}

impl NewSessionData {
    /// The seq the log continues from: one below its first event (0 for an empty log).
    pub fn seq_before(&self) -> u64 {
        self.events.first().map_or(0, |e| e.seq.saturating_sub(1))
    }
}

/// The persistence interface of acpx sessions.
///
/// Every backend (memory, files, SQLite) passes the same conformance suite (`tests/`).
/// Mutations of one session are serialized by its writer lock ([`Store::lock`]). Appending
/// requires holding it: [`Store::append`] takes the [`SessionLock`] as its first argument, and
/// a backend refuses one it did not issue. The other mutations (create, save, close, delete)
/// proceed without waiting when the caller holds the lock through this store; otherwise they
/// take it for the duration of the call (waiting up to the backend's lock timeout).
#[async_trait]
pub trait Store: Send + Sync + fmt::Debug {
    /// A short backend name: `memory`, `fs`, `sqlite`.
    fn backend_name(&self) -> &'static str;

    /// Stores a new session. Fails with [`StoreError::AlreadyExists`] if the id is taken.
    /// On success `record.revision` is 1.
    async fn create(&self, record: &mut SessionRecord) -> StoreResult<()>;

    /// Reads a session. [`StoreError::NotFound`] if absent, [`StoreError::Corrupt`] (naming
    /// what is wrong) if the stored document does not validate.
    async fn load(&self, id: &RecordId) -> StoreResult<SessionRecord>;

    /// [`Store::load`] for a process that lives on between turns (the queue owner): the
    /// conversation's turns before the last [`crate::KEEP_TURNS_ON_LOAD`] settle into
    /// `settle`'s spill stores ([`crate::SettledMessages`]), so that a long session is not
    /// held whole in memory. A backend that can read its document as a stream settles while
    /// it reads (the file and SQLite stores); the default reads the record whole, then settles
    /// it. Settling is best effort: what cannot be settled stays in memory
    /// ([`SettleOnLoad::failure`] says why); the record is the same either way.
    async fn load_settling(
        &self,
        id: &RecordId,
        settle: Arc<SettleOnLoad>,
    ) -> StoreResult<SessionRecord> {
        let mut record = self.load(id).await?;
        settle.settle_loaded(&mut record.thread);
        Ok(record)
    }

    /// The summary of one session (what [`Store::list`] gives for it), without holding its
    /// conversation: for a caller that needs a few fields of a session, perhaps often (a
    /// follower of the log checks whether the session was closed). A session that does not
    /// exist is [`StoreError::NotFound`], as for [`Store::load`]; a damaged one is
    /// [`StoreError::Corrupt`], though not always where `load` says so: SQLite and
    /// PostgreSQL read their summary columns (checking them against the document only for a
    /// row acpx did not write, as `list` does), the file store the snapshot, and only when
    /// it changed since it last summarized it. The default loads the record and summarizes
    /// it.
    async fn summary(&self, id: &RecordId) -> StoreResult<SessionSummary> {
        Ok(self.load(id).await?.summary())
    }

    /// Replaces the snapshot atomically, if the stored revision still equals
    /// `record.revision`; then increments `record.revision`. A stale revision gets
    /// [`StoreError::Conflict`]; a session that no longer exists gets `NotFound`.
    async fn save(&self, record: &mut SessionRecord) -> StoreResult<()>;

    /// Marks a session closed (`closed`, `closedAt`, no `pid`). Idempotent: closing a closed
    /// session returns it unchanged. The session stays listable and loadable.
    async fn close(&self, id: &RecordId, at: Timestamp) -> StoreResult<SessionRecord>;

    /// [`Store::close`], reading the session as [`Store::load_settling`] does (a store that
    /// reads its document as a stream settles while it reads, and the write streams the
    /// settled turns back). The default closes as `close` does.
    async fn close_settling(
        &self,
        id: &RecordId,
        at: Timestamp,
        settle: Arc<SettleOnLoad>,
    ) -> StoreResult<SessionRecord> {
        let _ = settle;
        self.close(id, at).await
    }

    /// Removes the snapshot and every event-log segment. Returns whether anything existed.
    async fn delete(&self, id: &RecordId) -> StoreResult<bool>;

    /// Lists sessions without reading their conversations.
    async fn list(&self, query: &ListQuery) -> StoreResult<ListPage>;

    /// Whether [`Store::list`] looks at every stored session whatever the filters, and
    /// applies them with [`ListQuery::paginate`] (memory, files). A caller that needs several
    /// filtered lists (the directory walk of a scope lookup) then does better with one list
    /// filtered further in memory by `paginate`, which gives the same answer as the separate
    /// lists. Stores that filter in their queries (SQLite, PostgreSQL) say `false`.
    fn lists_by_scanning(&self) -> bool {
        false
    }

    /// The sessions (open and closed) a typed id could designate: those [`id_text_matches`]
    /// accepts, in list order; rows a list would skip are left out. What the id steps of a
    /// lookup search when the text is no exact record id. The default filters a list of
    /// every session; SQLite filters in its query.
    async fn sessions_matching_id(&self, text: &str) -> StoreResult<Vec<SessionSummary>> {
        let page = self
            .list(&ListQuery {
                closed: ClosedFilter::Any,
                ..ListQuery::default()
            })
            .await?;
        Ok(page
            .sessions
            .into_iter()
            .filter(|s| id_text_matches(s, text))
            .collect())
    }

    /// Appends a batch of events to the log of session `writer.id()` in one write, under the
    /// writer lock the caller holds. A lock this store did not issue (see [`LockIssuer`]) is
    /// refused with [`StoreError::InvalidArgument`]. The seqs must continue the log exactly
    /// (last + 1, last + 2, …) and every event must belong to the session; otherwise nothing
    /// is written and the call fails with [`StoreError::SeqMismatch`] or `InvalidArgument`.
    /// Returns the log's state after the append, for `acpx.event_log`.
    async fn append(
        &self,
        writer: &SessionLock,
        events: &[EventEnvelope],
        durability: Durability,
    ) -> StoreResult<EventLogState>;

    /// Reads events in seq order.
    async fn read_events(&self, id: &RecordId, query: &EventQuery) -> StoreResult<EventPage>;

    /// [`Store::load`], then [`Store::read_events`] with `query`, for each of `ids`, in
    /// one call: the snapshots and first pages of many small sessions, in the order of `ids`.
    /// A store whose calls each hand their work to a blocking thread (files, SQLite) does them
    /// all in one hand-off; a migration reads and verifies thousands of small sessions, and
    /// one hand-off per call was a large part of its time. The first error (a missing session
    /// is [`StoreError::NotFound`], as `load` says) is returned and nothing else. Like the
    /// separate calls, the reads are not one view: the caller holds the sessions' writer locks
    /// when it needs them to agree. Memory holds every page at once: keep `ids` short and
    /// `query.limit` set.
    async fn load_many_with_events(
        &self,
        ids: &[RecordId],
        query: &EventQuery,
    ) -> StoreResult<Vec<(SessionRecord, EventPage)>> {
        // A few at a time: for a store whose calls are round trips (PostgreSQL), one after
        // the other would be slower than the separate calls a caller made concurrently.
        use futures::{StreamExt, TryStreamExt};
        let reads: Vec<_> = ids
            .iter()
            .map(|id| load_then_read(self, id, query))
            .collect();
        futures::stream::iter(reads).buffered(8).try_collect().await
    }

    /// The state of the session's log (last seq, segments, …) as stored.
    async fn event_log_state(&self, id: &RecordId) -> StoreResult<EventLogState>;

    /// Pushes appends made with [`Durability::None`] to the operating system.
    async fn flush(&self, id: &RecordId) -> StoreResult<()>;

    /// Full-text search over conversation text (see [`crate::search`] for the matching rule).
    /// Hits are ordered by session (`list` order) then message index.
    async fn search(&self, query: &SearchQuery) -> StoreResult<Vec<SearchHit>>;

    /// [`Store::search`], where a store that reads documents to search them reads a large one
    /// settling with `settle` (the file store). The default searches as `search` does.
    async fn search_settling(
        &self,
        query: &SearchQuery,
        settle: Arc<SettleOnLoad>,
    ) -> StoreResult<Vec<SearchHit>> {
        let _ = settle;
        self.search(query).await
    }

    /// Takes the exclusive writer lock of a session, waiting up to `timeout`, then failing
    /// with [`StoreError::Locked`]. Released when the returned guard is dropped, and by the
    /// operating system when the process dies.
    async fn lock(&self, id: &RecordId, timeout: Duration) -> StoreResult<SessionLock>;

    /// Stores new sessions, each with its whole event log, as [`Store::create`], appends of
    /// every event in order and a [`Store::save`] of the snapshot with the log's
    /// [`EventLogState`] would (so each is stored at revision 2), and makes them durable: when
    /// it returns they survive a crash of the machine. Returns the snapshots as stored, in
    /// order. What `acpx migrate` writes with.
    ///
    /// An id that is taken fails the call with [`StoreError::AlreadyExists`]; an event that
    /// does not continue its log, or belongs to another session, with `SeqMismatch` or
    /// `InvalidArgument`. On any error the sessions this call created are removed again (a
    /// removal that fails is reported on stderr). A crash during the call leaves each session
    /// of the batch absent or whole, except in this default implementation, which writes one
    /// session after the other through `create`, `append` and `save` (correct for every
    /// backend): there the session being written can be left as a crash of those calls leaves
    /// it. A backend may write the whole batch with one durable point (the file and SQLite
    /// stores do; `docs/format.md` § Writing many new sessions at once).
    async fn create_sessions(
        &self,
        sessions: Vec<NewSessionData>,
    ) -> StoreResult<Vec<SessionRecord>> {
        create_sessions_one_by_one(self, sessions).await
    }

    /// Begins writing a new session whose log comes a batch at a time (an imported archive of
    /// any length): nothing of it is visible until [`StagedSession::commit`] makes all of it
    /// visible, durable, in one step; [`StagedSession::abort`] removes it. A process killed at
    /// any point leaves nothing visible, only a stale stage ([`Store::stale_stages`]) that
    /// the next stage of the same id reclaims, so that running the same import again
    /// completes it. The stage holds the session's writer lock until it ends (waiting up to
    /// [`crate::stage::STAGE_LOCK_TIMEOUT`] for it).
    ///
    /// A taken id is refused with [`StoreError::AlreadyExists`] before anything is written,
    /// and a `record` that does not validate at the latest by the commit (the stores of this
    /// workspace at once). See [`crate::stage`] for how each backend stages. The default
    /// is [`DirectStage`]: today's `create`, `append`, `save`, which is not one
    /// step (documented there), for a store without staging of its own.
    async fn stage_session<'s>(
        &'s self,
        record: SessionRecord,
    ) -> StoreResult<Box<dyn StagedSession + 's>> {
        Ok(Box::new(DirectStage::begin(self, record).await?))
    }

    /// What stages interrupted by a kill left behind (see [`Store::stage_session`]): invisible
    /// to every reader, reported by `fsck`. Stages in progress (their writer lock is held) are
    /// not listed. The default: none (a store whose stages leave nothing, or that has none).
    async fn stale_stages(&self) -> StoreResult<Vec<StaleStage>> {
        Ok(Vec::new())
    }

    /// Removes what [`Store::stale_stages`] lists (`fsck --repair`); returns what it removed.
    /// A stage that became busy meanwhile is left alone. The default: nothing to remove.
    async fn remove_stale_stages(&self) -> StoreResult<Vec<StaleStage>> {
        Ok(Vec::new())
    }

    /// Takes the writer locks of all of `ids` for reading them unchanged (what `migrate` holds
    /// while it copies a batch of sessions), each waiting up to `timeout`. They are not
    /// [`SessionLock`]s: nothing can be appended with them, and this store's own mutations of
    /// those sessions proceed without waiting while they are held. The default takes
    /// [`Store::lock`] of each in turn; the file store takes them through one lock file.
    async fn lock_many(&self, ids: &[RecordId], timeout: Duration) -> StoreResult<ManyLocks> {
        let mut locks = Vec::with_capacity(ids.len());
        for id in ids {
            locks.push(self.lock(id, timeout).await?);
        }
        Ok(ManyLocks::each(locks))
    }

    /// Writes `record` as the snapshot of the session whose writer lock is `writer`, whatever
    /// the stored snapshot holds (truncated, not JSON, invalid), leaving the log as
    /// it is: the repair of a damaged snapshot from its log (`docs/format.md` § Damaged
    /// snapshots). On success `record.revision` is the revision stored. A backend that keeps
    /// no snapshot separate from what it validates on write refuses with `InvalidArgument`.
    async fn replace_snapshot(
        &self,
        writer: &SessionLock,
        record: &mut SessionRecord,
    ) -> StoreResult<()> {
        let _ = (writer, record);
        Err(StoreError::InvalidArgument(format!(
            "the {} store cannot replace a damaged snapshot",
            self.backend_name()
        )))
    }

    /// Replaces every stored event of the writer's session that cannot be read (a damaged
    /// row) with a well-formed event of type [`DAMAGED_EVENT_TYPE`] at the same seq, whose
    /// payload keeps what was stored (`docs/format.md` § Damaged events), so that the log
    /// reads strictly again without a gap; returns the seqs replaced. Nothing is guessed: the
    /// lost content stays lost, and readers skip the placeholder. A backend that cannot do it
    /// refuses with `InvalidArgument` (the default).
    async fn replace_damaged_events(&self, writer: &SessionLock) -> StoreResult<Vec<u64>> {
        let _ = writer;
        Err(StoreError::InvalidArgument(format!(
            "the {} store cannot replace damaged events",
            self.backend_name()
        )))
    }

    /// Waits until the log of `id` may hold events after `after_seq`, or until `timeout` has
    /// passed, whichever comes first, for followers of a log written by another process or
    /// host. It may return early; the caller reads the log again either way. The default
    /// sleeps `timeout` (polling); a backend that is told of appends (PostgreSQL's
    /// `LISTEN`/`NOTIFY`) returns as soon as one is committed.
    async fn wait_for_events(
        &self,
        id: &RecordId,
        after_seq: u64,
        timeout: Duration,
    ) -> StoreResult<()> {
        let _ = (id, after_seq);
        futures_timer::Delay::new(timeout).await;
        Ok(())
    }

    /// The owner leases of this store's sessions ([`crate::lease`]): who drives each session,
    /// kept beside the session in the same store.
    fn leases(&self) -> &dyn SessionLeases;

    /// The task queue through which a command on one host reaches a session's owner on
    /// another, for a store several hosts share; `None` (the default) for a store one host
    /// uses, whose owners are reached through a local socket.
    fn remote_tasks(&self) -> Option<&dyn RemoteTasks> {
        None
    }
}

/// Whether a typed `text` could designate `s`: its ACP session id is `text`, or its record
/// id or ACP session id ends or starts with `text` (which of them wins is the caller's rule).
pub fn id_text_matches(s: &SessionSummary, text: &str) -> bool {
    s.acp_session_id == text
        || s.acpx_record_id.as_str().ends_with(text)
        || s.acp_session_id.ends_with(text)
        || s.acpx_record_id.as_str().starts_with(text)
        || s.acp_session_id.starts_with(text)
}

/// Normalizes a `cwd` for comparison: must be absolute; trailing `/` removed (except `/`).
pub fn normalize_cwd(cwd: &str) -> StoreResult<String> {
    if !cwd.starts_with('/') {
        return Err(StoreError::InvalidArgument(format!(
            "cwd filter {cwd:?} is not an absolute path"
        )));
    }
    let trimmed = cwd.trim_end_matches('/');
    Ok(if trimmed.is_empty() {
        "/".to_owned()
    } else {
        trimmed.to_owned()
    })
}

/// The keyset position a list cursor encodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct CursorBody {
    v: u32,
    /// `lastUsedAt` of the last session returned, in milliseconds.
    t: i64,
    /// Its record id.
    id: String,
    /// Fingerprint of the filters the cursor was made for.
    f: String,
}

const CURSOR_VERSION: u32 = 1;

impl ListQuery {
    fn fingerprint(&self) -> String {
        // FNV-1a over the filter fields: a cursor made for other filters is refused.
        let mut h: u64 = 0xcbf29ce484222325;
        let mut feed = |s: &str| {
            for b in s.bytes().chain(std::iter::once(0xff)) {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x100000001b3);
            }
        };
        let cwd = self
            .cwd
            .as_deref()
            .map(|c| normalize_cwd(c).unwrap_or_else(|_| c.to_owned()));
        feed(cwd.as_deref().unwrap_or("\u{0}"));
        feed(self.agent_command.as_deref().unwrap_or("\u{0}"));
        feed(self.name.as_deref().unwrap_or("\u{0}"));
        feed(match self.closed {
            ClosedFilter::Any => "any",
            ClosedFilter::Open => "open",
            ClosedFilter::Closed => "closed",
        });
        format!("{h:016x}")
    }

    /// Encodes the cursor that continues after `last` under this query's filters.
    pub fn cursor_after(&self, last: &SessionSummary) -> String {
        let body = CursorBody {
            v: CURSOR_VERSION,
            t: last.last_used_at.millis(),
            id: last.acpx_record_id.as_str().to_owned(),
            f: self.fingerprint(),
        };
        let json = serde_json::to_vec(&body).unwrap_or_default();
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
    }

    /// Decodes this query's cursor into the keyset position `(lastUsedAt millis, record id)`.
    /// Malformed, tampered and foreign (other filters) cursors are refused.
    pub fn decode_cursor(&self) -> StoreResult<Option<(i64, String)>> {
        let Some(cursor) = &self.cursor else {
            return Ok(None);
        };
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(cursor.as_bytes())
            .map_err(|_| {
                StoreError::InvalidCursor(format!("{cursor:?} is not a cursor returned by list"))
            })?;
        let body: CursorBody = serde_json::from_slice(&bytes).map_err(|_| {
            StoreError::InvalidCursor(format!("{cursor:?} is not a cursor returned by list"))
        })?;
        if body.v != CURSOR_VERSION {
            return Err(StoreError::InvalidCursor(format!(
                "cursor version {} is not supported",
                body.v
            )));
        }
        if body.f != self.fingerprint() {
            return Err(StoreError::InvalidCursor(
                "the cursor was made for different filters; start again without --cursor".into(),
            ));
        }
        RecordId::parse(&body.id).map_err(|_| {
            StoreError::InvalidCursor("the cursor names an invalid record id".into())
        })?;
        Ok(Some((body.t, body.id)))
    }

    /// Whether a summary passes the filters (not the cursor). `cwd` must be normalized.
    pub fn matches(&self, s: &SessionSummary, cwd: Option<&str>) -> bool {
        cwd.is_none_or(|c| normalize_cwd(&s.cwd).map(|sc| sc == c).unwrap_or(false))
            && self
                .agent_command
                .as_ref()
                .is_none_or(|a| *a == s.agent_command)
            && self
                .name
                .as_ref()
                .is_none_or(|n| s.name.as_deref() == Some(n.as_str()))
            && match self.closed {
                ClosedFilter::Any => true,
                ClosedFilter::Open => !s.closed,
                ClosedFilter::Closed => s.closed,
            }
    }

    /// Applies filters, order, cursor and limit to a full set of summaries. Backends that
    /// cannot do this natively (memory, files) share this one implementation.
    pub fn paginate(
        &self,
        summaries: impl IntoIterator<Item = SessionSummary>,
        skipped: Vec<SkippedEntry>,
    ) -> StoreResult<ListPage> {
        let cwd = self.cwd.as_deref().map(normalize_cwd).transpose()?;
        let after = self.decode_cursor()?;
        if self.limit == Some(0) {
            return Err(StoreError::InvalidArgument(
                "limit must be at least 1".into(),
            ));
        }
        let mut matching: Vec<SessionSummary> = summaries
            .into_iter()
            .filter(|s| self.matches(s, cwd.as_deref()))
            .filter(|s| match &after {
                None => true,
                Some((t, id)) => list_order_key(s) > (std::cmp::Reverse(*t), id.as_str()),
            })
            .collect();
        matching.sort_by(|a, b| list_order_key(a).cmp(&list_order_key(b)));
        let mut next_cursor = None;
        if let Some(limit) = self.limit {
            if matching.len() > limit {
                matching.truncate(limit);
                next_cursor = matching.last().map(|s| self.cursor_after(s));
            }
        }
        Ok(ListPage {
            sessions: matching,
            next_cursor,
            skipped,
        })
    }
}

/// The total order of `list`: newest `lastUsedAt` first, then record id ascending.
pub fn list_order_key(s: &SessionSummary) -> (std::cmp::Reverse<i64>, &str) {
    (
        std::cmp::Reverse(s.last_used_at.millis()),
        s.acpx_record_id.as_str(),
    )
}

/// One session of the default [`Store::load_many_with_events`].
async fn load_then_read<S: Store + ?Sized>(
    store: &S,
    id: &RecordId,
    query: &EventQuery,
) -> StoreResult<(SessionRecord, EventPage)> {
    let record = store.load(id).await?;
    let page = store.read_events(id, query).await?;
    Ok((record, page))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(id: &str, t: i64) -> SessionSummary {
        SessionSummary {
            acpx_record_id: RecordId::parse(id).unwrap(),
            acp_session_id: id.into(),
            agent_session_id: None,
            agent_command: "agent".into(),
            cwd: "/repo".into(),
            name: None,
            title: None,
            created_at: Timestamp::from_millis(t).unwrap(),
            last_used_at: Timestamp::from_millis(t).unwrap(),
            closed: false,
            closed_at: None,
            last_prompt_at: None,
            message_count: 0,
            revision: 1,
            usage: Default::default(),
        }
    }

    #[test]
    fn pages_walk_every_session_once_in_order() {
        let all: Vec<_> = (0..25)
            .map(|i| summary(&format!("s{i:02}"), 1000 + (i / 3)))
            .collect();
        let mut q = ListQuery {
            limit: Some(4),
            ..ListQuery::default()
        };
        let mut seen = Vec::new();
        loop {
            let page = q.paginate(all.clone(), vec![]).unwrap();
            seen.extend(page.sessions.iter().map(|s| s.acpx_record_id.to_string()));
            match page.next_cursor {
                Some(c) => q.cursor = Some(c),
                None => break,
            }
        }
        let mut expected = all.clone();
        expected.sort_by(|a, b| list_order_key(a).cmp(&list_order_key(b)));
        let expected: Vec<_> = expected
            .iter()
            .map(|s| s.acpx_record_id.to_string())
            .collect();
        assert_eq!(seen, expected);
    }

    #[test]
    fn append_batch_near_u64_max_is_refused_not_overflowed() {
        let id = RecordId::parse("x").unwrap();
        let ctx = crate::event::EventContext {
            acpx_record_id: &id,
            acp_session_id: "a",
            request_id: None,
            stream: crate::event::EventStream::Lifecycle,
            source: crate::event::EventSource::Runtime,
        };
        let e = |seq| {
            EventEnvelope::new(
                &ctx,
                seq,
                Timestamp::now(),
                crate::event::EventPayload::Unknown {
                    event_type: "x".into(),
                    payload: serde_json::Value::Null,
                },
            )
        };
        assert!(check_append_batch(&id, u64::MAX - 1, &[e(u64::MAX)]).is_ok());
        assert!(matches!(
            check_append_batch(&id, u64::MAX, &[e(0)]),
            Err(StoreError::SeqMismatch { .. })
        ));
        assert!(matches!(
            check_append_batch(&id, u64::MAX - 1, &[e(u64::MAX), e(0)]),
            Err(StoreError::SeqMismatch { .. })
        ));
    }

    #[test]
    fn bad_cursors_are_refused() {
        let q = ListQuery {
            cursor: Some("not-a-cursor!".into()),
            ..ListQuery::default()
        };
        assert!(matches!(
            q.paginate(vec![], vec![]),
            Err(StoreError::InvalidCursor(_))
        ));
        let made_for = ListQuery {
            name: Some("a".into()),
            ..ListQuery::default()
        };
        let foreign = ListQuery {
            cursor: Some(made_for.cursor_after(&summary("x", 5))),
            ..ListQuery::default()
        };
        assert!(matches!(
            foreign.paginate(vec![], vec![]),
            Err(StoreError::InvalidCursor(_))
        ));
    }

    #[test]
    fn cwd_filter_must_be_absolute_and_ignores_trailing_slash() {
        let q = ListQuery {
            cwd: Some("repo".into()),
            ..ListQuery::default()
        };
        assert!(matches!(
            q.paginate(vec![], vec![]),
            Err(StoreError::InvalidArgument(_))
        ));
        let q = ListQuery {
            cwd: Some("/repo/".into()),
            ..ListQuery::default()
        };
        assert_eq!(
            q.paginate(vec![summary("a", 1)], vec![])
                .unwrap()
                .sessions
                .len(),
            1
        );
    }
}
