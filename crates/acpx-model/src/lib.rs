//! # acpx-model
//!
//! The pure data model of [acpx](https://github.com/acpx-rs/acpx) sessions: no I/O, no async
//! runtime.
//!
//! - [`SessionRecord`]: `session.json` (schema `acpx.session.v1`) with its Zed-shaped
//!   [`Thread`] and the [`AcpxState`] runtime namespace.
//! - [`EventEnvelope`]: one line of the append-only `events.ndjson` audit log, with typed
//!   payloads ([`EventPayload`]) and lossless handling of event types it does not know.
//! - [`RecordId`]: a session's stable local id, validated so it is always safe as a file name.
//! - [`Store`]: the storage interface every backend implements, and [`MemoryStore`], a
//!   complete in-memory implementation.
//! - `testing` (feature `testing`): `FaultStore`, a `Store` wrapper that injects faults
//!   (failing appends, tampered events, bugs of a test's own) into a real store, for tests.
//!
//! ```
//! use acpx_model::{MemoryStore, NewSession, RecordId, SessionRecord, Store, Timestamp};
//!
//! # futures_executor_block_on(async {
//! let store = MemoryStore::new();
//! let mut record = SessionRecord::new(
//!     NewSession {
//!         acpx_record_id: RecordId::generate(),
//!         acp_session_id: "acp-1".into(),
//!         agent_session_id: None,
//!         agent_command: "my-agent --acp".into(),
//!         cwd: "/repo".into(),
//!         name: None,
//!     },
//!     Timestamp::now(),
//! );
//! store.create(&mut record).await.unwrap();
//! record.thread.title = "Fix the build".into();
//! store.save(&mut record).await.unwrap();
//! assert_eq!(record.revision, 2);
//! # });
//! # fn futures_executor_block_on<F: std::future::Future>(f: F) -> F::Output {
//! #     tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
//! # }
//! ```

#![warn(missing_docs)]

#[macro_use]
mod open_enum;

mod append_batch;
pub mod error;
pub mod event;
pub mod id;
mod json_pretty;
mod json_scan;
pub mod lease;
pub mod load;
pub mod lock;
pub mod memory;
mod message;
mod message_text;
pub mod migrate;
pub mod progress;
pub mod search;
pub mod session;
mod session_usage;
pub mod settled;
pub mod stage;
pub mod store;
mod summary;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod thread;
pub mod thread_json;
pub mod thread_text;
pub mod time;
mod token_usage;
pub mod usage;

pub use error::{StoreError, StoreResult, ValidationError};
pub use event::{
    ClientOperationStatus, ControlAction, EventContext, EventEnvelope, EventPayload, EventSource,
    EventStream, EventType, LifecyclePhase, PermissionStats, QueuePhase, EVENT_VERSION,
};
pub use id::{InvalidRecordId, RecordId, MAX_RECORD_ID_LEN};
pub use lease::{
    LeaseActivity, LeaseBook, LeaseGrant, LeaseHolder, OwnerLease, RemoteTask, RemoteTasks,
    SessionLeases, TaskAnswers, DEFAULT_LEASE_TTL,
};
pub use load::{SettleOnLoad, KEEP_TURNS_ON_LOAD};
pub use memory::MemoryStore;
pub use search::{match_text, search_record, SearchHit, SearchQuery};
pub use session::{
    AcpxState, AuditEvent, EventLogState, LastControlUpdate, LastTurn, NewSession, PlanState,
    SessionRecord, TurnError, TurnState, SESSION_SCHEMA,
};
pub use settled::{SettledMessages, SettledStores, SettledText};
pub use stage::{StagedSession, StaleStage};
pub use store::{
    check_append_batch, id_text_matches, list_order_key, normalize_cwd, ClosedFilter, DamagedLine,
    Durability, EventPage, EventQuery, ListPage, ListQuery, LockGuard, LockIssuer, ManyLocks,
    NewSessionData, ReadMode, SessionLock, SkippedEntry, Store, TornTail, DAMAGED_EVENT_TYPE,
    PAGE_BYTES,
};
pub use summary::SessionSummary;
pub use thread::{
    AgentContent, AgentMessage, Image, ImageSize, Mention, Message, ResultContent, Speed, Thinking,
    Thread, TokenUsage, ToolResult, ToolUse, UserContent, UserMessage, THREAD_VERSION,
};
pub use thread_json::ThreadJson;
pub use thread_text::{TextSpill, ThreadText};
pub use time::Timestamp;
pub use usage::{SessionUsage, UsageGrouping, UsageReport};
