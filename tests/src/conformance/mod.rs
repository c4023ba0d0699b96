//! The checks. Each is `pub async fn name(b: &dyn Backend)`, asserts behaviour through the
//! `Store` trait only (plus the [`Backend`] hooks), and uses its own session ids, so that one
//! data set per test is enough. A check that cannot apply to a backend says so with
//! [`skip`] and returns.

mod snapshots;
mod events;
mod list;
mod locking;
mod ids;
mod damage;
mod crash;
mod failpoints;
mod concurrency;
mod search;
mod retention;

pub use snapshots::*;
pub use events::*;
pub use list::*;
pub use locking::*;
pub use ids::*;
pub use damage::*;
pub use crash::*;
pub use failpoints::*;
pub use concurrency::*;
pub use search::*;
pub use retention::*;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use acpx_model::{
    ClosedFilter, Durability, EventEnvelope, EventPage, EventQuery, EventStream, ListQuery,
    ReadMode, RecordId, SearchQuery, SessionRecord, Store, StoreError, MAX_RECORD_ID_LEN,
};
use serde_json::{json, Value};

use crate::backend::Backend;
use crate::fixtures::{
    agent_text, event, event_shape, events, ndjson_line, rich_session, rid, session, ts, user_text,
    BASE_MILLIS,
};
use crate::ops::{append_tagged, save_loop, AppendMode, AppendPlan};
use crate::worker::{field, last_ack, Worker};

/// Reports that a check does not apply to this backend, and why.
pub fn skip(b: &dyn Backend, check: &str, why: &str) {
    println!("skipped: {check} on {}: {why}", b.name());
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

fn has_failpoint(b: &dyn Backend, check: &str, name: &str) -> bool {
    let ok = b.failpoints().contains(&name) && b.worker_args().is_some();
    if !ok {
        skip(b, check, &format!("backend has no failpoint {name}"));
    }
    ok
}
