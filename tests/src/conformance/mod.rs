//! The checks. Each is `pub async fn name(b: &dyn Backend)`, asserts behaviour through the
//! `Store` trait only (plus the [`Backend`] hooks), and uses its own session ids, so that one
//! data set per test is enough.
//!
//! [`CHECKS`] and [`RETENTION_CHECKS`] list them with the [`Capabilities`] each needs; the
//! harness ([`crate::Suite`]) reports a check whose needs the backend lacks as ignored. A
//! check called directly on a backend without what it needs fails: it never passes in place
//! of what it claims to test.

mod concurrency;
mod crash;
mod damage;
mod events;
mod failpoints;
mod ids;
mod leases;
mod list;
mod locking;
mod retention;
mod search;
mod snapshots;
mod stage;

pub use concurrency::*;
pub use crash::*;
pub use damage::*;
pub use events::*;
pub use failpoints::*;
pub use ids::*;
pub use leases::*;
pub use list::*;
pub use locking::*;
pub use retention::*;
pub use search::*;
pub use snapshots::*;
pub use stage::*;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use acpx_model::{
    ClosedFilter, Durability, EventEnvelope, EventPage, EventQuery, EventStream, ListQuery,
    ReadMode, RecordId, SearchQuery, SessionRecord, Store, StoreError, MAX_RECORD_ID_LEN,
};
use serde_json::{json, Value};

use crate::backend::{Backend, Capabilities};
use crate::fixtures::{
    agent_text, event, event_shape, events, ndjson_line, rich_session, rid, session, ts, user_text,
    BASE_MILLIS,
};
use crate::ops::{append_tagged, save_loop, AppendMode, AppendPlan};
use crate::worker::{field, last_ack, Worker};

/// A check, with what it needs from a backend.
#[derive(Clone, Copy)]
pub struct Check {
    /// The check's function name, which is also its test name.
    pub name: &'static str,
    /// What the backend must be able to do for the check to apply.
    pub needs: Capabilities,
    /// Runs the check against a backend.
    pub run: for<'a> fn(&'a dyn Backend) -> CheckFuture<'a>,
}

/// The future of one running check.
pub type CheckFuture<'a> = Pin<Box<dyn Future<Output = ()> + 'a>>;

impl std::fmt::Debug for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Check")
            .field("name", &self.name)
            .field("needs", &self.needs)
            .finish_non_exhaustive()
    }
}

/// `check!(name)` or `check!(name, needs)`: a [`Check`] entry for the check function `name`.
macro_rules! check {
    ($check:ident) => {
        check!($check, Capabilities::NONE)
    };
    ($check:ident, $needs:expr) => {
        Check {
            name: stringify!($check),
            needs: $needs,
            run: |b| Box::pin($check(b)),
        }
    };
}

const WORKER: Capabilities = Capabilities {
    worker: true,
    ..Capabilities::NONE
};
const RAW_SNAPSHOT: Capabilities = Capabilities {
    raw_snapshot: true,
    ..Capabilities::NONE
};
const RAW_LOG: Capabilities = Capabilities {
    raw_log: true,
    ..Capabilities::NONE
};
const DATA_DIR: Capabilities = Capabilities {
    data_dir: true,
    ..Capabilities::NONE
};
const REMOTE_TASKS: Capabilities = Capabilities {
    remote_tasks: true,
    ..Capabilities::NONE
};
const SMALL_EVENT_BUDGET: Capabilities = Capabilities {
    small_event_budget: true,
    ..Capabilities::NONE
};

/// The suite every backend runs (`docs/format.md` defines the behaviour they assert).
pub const CHECKS: &[Check] = &[
    check!(create_load_round_trip),
    check!(create_existing_id_is_refused),
    check!(save_increments_revision),
    check!(save_stale_revision_conflicts),
    check!(save_deleted_session_not_found),
    check!(close_is_idempotent_and_keeps_session),
    check!(summary_is_the_listed_one_and_follows_changes),
    check!(delete_removes_everything_idempotently),
    check!(append_seq_must_continue_exactly),
    check!(append_batches_and_page_back),
    check!(pages_are_bounded_by_bytes),
    check!(load_many_with_events_equals_load_then_read),
    check!(read_filters_by_type_stream_and_request_id),
    check!(unknown_events_round_trip_byte_equal),
    check!(event_log_state_is_consistent),
    check!(append_durability_none_then_flush),
    check!(list_filters),
    check!(list_order_newest_first_with_id_tie_break),
    check!(list_cursor_walk_exactly_once),
    check!(list_invalid_cursors_refused),
    check!(list_empty_store),
    check!(list_pagination_while_adding),
    check!(lock_waits_times_out_and_releases_on_drop),
    check!(lock_cross_process_mutations_wait, WORKER),
    check!(lock_released_when_holder_killed, WORKER),
    check!(lease_is_held_renewed_released_with_growing_generations),
    check!(lapsed_lease_is_taken_over_and_its_holder_fenced),
    check!(appends_are_fenced_by_the_lease_generation),
    check!(
        remote_tasks_are_taken_in_order_by_the_lease_holder,
        REMOTE_TASKS
    ),
    check!(record_id_rejects_hostile_strings),
    check!(hostile_inner_id_is_corrupt, RAW_SNAPSHOT),
    check!(nothing_created_outside_the_store, DATA_DIR),
    check!(malformed_snapshots_reported_not_fatal, RAW_SNAPSHOT),
    check!(
        damaged_snapshot_replaced_under_the_writer_lock,
        RAW_SNAPSHOT
    ),
    check!(torn_tail_withheld_and_next_append_is_clean, RAW_LOG),
    check!(mid_log_damage_strict_and_lenient, RAW_LOG),
    check!(crash_kill_mid_append, WORKER),
    check!(crash_kill_mid_save_loop, WORKER),
    check!(reader_during_rewrite_sees_whole_documents, WORKER),
    check!(
        failpoint_save_after_temp_fsync,
        Capabilities {
            failpoints: &["save.after_temp_fsync"],
            ..WORKER
        }
    ),
    check!(
        failpoint_save_after_rename,
        Capabilities {
            failpoints: &["save.after_rename"],
            ..WORKER
        }
    ),
    check!(
        failpoint_append_after_partial_write,
        Capabilities {
            failpoints: &["append.after_partial_write"],
            ..WORKER
        }
    ),
    check!(
        failpoint_delete_after_snapshot_unlink,
        Capabilities {
            failpoints: &["delete.after_snapshot_unlink"],
            ..WORKER
        }
    ),
    // A file-size limit makes writes fail only for a backend whose data is in local files
    // (a database server writes its own).
    check!(
        append_failure_is_reported_and_undone,
        Capabilities {
            data_dir: true,
            ..WORKER
        }
    ),
    check!(two_processes_append_one_session_locked, WORKER),
    check!(two_processes_append_one_session_retry, WORKER),
    check!(processes_write_different_sessions, WORKER),
    check!(concurrent_saves_exactly_one_wins),
    check!(two_processes_save_one_session, WORKER),
    check!(tasks_append_concurrently_in_process),
    check!(search_finds_conversation_text),
    check!(search_follows_saves_deletes_and_other_handles),
    check!(settled_messages_save_and_search_whole),
    check!(a_settling_load_reads_the_same_record),
    check!(staged_session_is_invisible_then_whole),
    check!(aborted_stage_leaves_nothing),
    check!(stage_refuses_taken_ids_and_bad_batches),
    check!(killed_stage_leaves_nothing_and_a_rerun_completes, WORKER),
    check!(
        failpoint_stage_before_commit,
        Capabilities {
            failpoints: &["stage.before_commit"],
            ..WORKER
        }
    ),
];

/// The event-retention checks, for a backend configured with a small event budget
/// ([`Capabilities::small_event_budget`]).
pub const RETENTION_CHECKS: &[Check] = &[
    check!(retention_keeps_a_contiguous_suffix, SMALL_EVENT_BUDGET),
    check!(
        staged_log_over_the_budget_is_retained_as_appended,
        SMALL_EVENT_BUDGET
    ),
    check!(
        failpoint_rotate_after_shift,
        Capabilities {
            worker: true,
            small_event_budget: true,
            failpoints: &["rotate.after_shift"],
            ..Capabilities::NONE
        }
    ),
];

/// A hook that `b`'s [`Capabilities`] promise gave nothing: the declaration is wrong, or the
/// check was called directly on a backend that cannot run it. Either way the check fails.
fn undeclared(b: &dyn Backend, check: &str, what: &str) -> ! {
    panic!(
        "{check} on {}: needs {what}, which the backend does not provide \
         (capabilities: {:?})",
        b.name(),
        b.capabilities()
    )
}

async fn create(store: &dyn Store, mut r: SessionRecord) -> SessionRecord {
    store
        .create(&mut r)
        .await
        .unwrap_or_else(|e| panic!("create {}: {e}", r.acpx_record_id));
    r
}

/// Every retained event of `id`, strict.
async fn read_all(store: &dyn Store, id: &RecordId) -> EventPage {
    store
        .read_events(id, &EventQuery::from_seq(0))
        .await
        .unwrap_or_else(|e| panic!("read_events {id}: {e}"))
}

fn seqs(events: &[EventEnvelope]) -> Vec<u64> {
    events.iter().map(|e| e.seq).collect()
}

fn assert_contiguous(events: &[EventEnvelope], first: u64, last: u64, what: &str) {
    let got = seqs(events);
    let want: Vec<u64> = (first..=last).collect();
    if got != want {
        let missing: Vec<_> = want.iter().filter(|s| !got.contains(s)).take(10).collect();
        panic!(
            "{what}: expected seqs {first}..={last} exactly once in order; got {} events \
             (first {:?}, last {:?}), missing e.g. {missing:?}",
            got.len(),
            got.first(),
            got.last()
        );
    }
}

/// Walks every page of `q` and returns the record ids in the order they came.
async fn walk_list(store: &dyn Store, mut q: ListQuery) -> Vec<String> {
    let mut out = Vec::new();
    for _ in 0..10_000 {
        let page = store.list(&q).await.expect("list page");
        if let (Some(limit), Some(_)) = (q.limit, &page.next_cursor) {
            assert_eq!(
                page.sessions.len(),
                limit,
                "a page before the last must be full"
            );
        }
        out.extend(page.sessions.iter().map(|s| s.acpx_record_id.to_string()));
        match page.next_cursor {
            Some(c) => q.cursor = Some(c),
            None => return out,
        }
    }
    panic!("list cursor walk did not end after 10,000 pages");
}

fn ids(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

async fn list_ids(store: &dyn Store, q: ListQuery) -> Vec<String> {
    let page = store
        .list(&q)
        .await
        .unwrap_or_else(|e| panic!("{q:?}: {e}"));
    page.sessions
        .iter()
        .map(|s| s.acpx_record_id.to_string())
        .collect()
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

/// Pages through `q` with `limit`, following `next_seq`; checks that pages make progress.
async fn walk_events(
    store: &dyn Store,
    id: &RecordId,
    mut q: EventQuery,
    limit: usize,
) -> Vec<EventEnvelope> {
    q.limit = Some(limit);
    let mut out: Vec<EventEnvelope> = Vec::new();
    for _ in 0..100_000 {
        let page = store.read_events(id, &q).await.expect("read page");
        assert!(page.events.len() <= limit, "page larger than the limit");
        out.extend(page.events.iter().cloned());
        match page.next_seq {
            Some(n) => {
                assert!(
                    !page.events.is_empty(),
                    "a page with next_seq must not be empty"
                );
                assert!(
                    n > page.events.last().map_or(0, |e| e.seq),
                    "next_seq {n} does not move past the page"
                );
                q.from_seq = n;
            }
            None => return out,
        }
    }
    panic!("event paging did not end");
}

/// Fails the check unless `b` runs workers that honour the failpoint `name`.
fn require_failpoint(b: &dyn Backend, check: &str, name: &str) {
    if !b.capabilities().failpoints.contains(&name) || b.worker_args().is_none() {
        undeclared(b, check, &format!("a worker with failpoint {name}"));
    }
}
