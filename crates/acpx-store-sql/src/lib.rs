//! What the SQLite and PostgreSQL stores share: the logic over rows that both keep the same
//! way, written once over plain values, while each backend keeps its driver code (binding,
//! stepping, transactions).
//!
//! - [`columns`]: the columns of a `sessions` row derived from a record ([`SessionColumns`]),
//!   timestamps as the documents write them, integers checked into SQL's `i64`.
//! - [`summary`]: a summary read back from a row through [`SummaryRow`], and a document
//!   checked against its row ([`checked_document`], [`summary_matching_columns`]).
//! - [`event_columns`]: an event as a row ([`EventColumns`]), both ways.
//! - [`list_sql`]: the query of `Store::list` ([`ListSql`]), in each database's words
//!   ([`ListDialect`]: [`SqliteDialect`], [`PostgresDialect`]).
//! - [`list_page`]: the page of `Store::list` built from rows in list order ([`ListPageBuilder`]).
//! - [`log_state`]: the `event_logs` row and the state a store reports for it, and the
//!   per-session errors of failed appends ([`WriteErrors`]).
//! - [`held_locks`]: the writer locks a store holds through `Store::lock` ([`HeldLocks`]).
//! - [`messages`]: the searchable texts of a record ([`message_texts`]).
//!
//! It depends on no database driver: nothing here opens, binds or steps anything. A list
//! query and the page made from its rows:
//!
//! ```
//! use acpx_model::ListQuery;
//! use acpx_store_sql::{ListPageBuilder, ListSql, SqliteDialect};
//!
//! let query = ListQuery { limit: Some(50), ..ListQuery::default() };
//! let (sql, params) = ListSql::new::<SqliteDialect>(&query, "acpx_record_id", "session_rows")?.ordered();
//! assert!(sql.ends_with("ORDER BY last_used_ms DESC, acpx_record_id ASC"));
//! assert!(params.is_empty());
//! let page = ListPageBuilder::new(&query);
//! // For each row, in order: page.push(key, summary_or_reason, location); stop at Next::Full.
//! let page = page.finish();
//! assert!(page.sessions.is_empty());
//! # Ok::<(), acpx_model::StoreError>(())
//! ```

pub mod columns;
pub mod event_columns;
pub mod held_locks;
pub mod list_page;
pub mod list_sql;
pub mod log_state;
pub mod messages;
pub mod summary;

pub use columns::{to_i64, ts_text, SessionColumns};
pub use event_columns::EventColumns;
pub use held_locks::HeldLocks;
pub use list_page::ListPageBuilder;
pub use list_sql::{ListDialect, ListSql, Param, PostgresDialect, SqliteDialect};
pub use log_state::{LogRow, LogShape, WriteErrors};
pub use messages::{message_texts, JoinedText, MessageText, SearchText};
pub use summary::{
    checked_document, summary_difference, summary_from_row, summary_matching_columns, SummaryRow,
};

// The README's examples are compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
