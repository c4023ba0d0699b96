//! Following a session's log as it grows (`acpx sessions events --follow`), from another
//! process than the one that writes it.
//!
//! A [`LogFollower`] reads the log unfiltered and in seq order from the query's `from_seq`,
//! and each read starts after the last seq it saw, so every event is delivered exactly once,
//! across rotations; the query's filters then pick what is delivered. It stops when the
//! session is closed (after one more read, so nothing written before the close is missed),
//! when it is deleted, or when the query's `limit` is reached. [`follow`] drives a follower
//! with a poll interval and hands each item to a callback.

use std::time::Duration;

use acpx_model::{DamagedLine, EventEnvelope, EventQuery, RecordId, Store, StoreError};

use super::OpsResult;

/// How long [`follow`] waits between reads that found nothing new (the CLI's interval).
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(100);

/// Events read per page.
const PAGE: usize = 1000;

/// Every how many empty reads the follower checks whether the session was closed. It asks
/// for the session's summary ([`Store::summary`]), which does not read the conversation, but
/// a store may still have to read the snapshot when it changed.
const CLOSE_CHECK_EVERY: u32 = 5;

/// Something a follower saw, in the order it saw it.
// Events are nearly every item, so boxing them would cost an allocation each for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Followed {
    /// An event the query matches.
    Event(EventEnvelope),
    /// A complete line of the log that is not a valid event (lenient reads); skipped.
    Damaged(DamagedLine),
    /// The log ends with an incomplete line; it is withheld until it is complete. Reported
    /// once per follower.
    IncompleteTail,
    /// Events `from..=to` were rotated out of the log before they could be read.
    Missed {
        /// The first seq missed.
        from: u64,
        /// The last seq missed.
        to: u64,
    },
}

/// Why a follower stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FollowEnd {
    /// The session was closed; everything logged before the close was delivered.
    Closed,
    /// The session was deleted.
    Deleted,
    /// The query's `limit` of matching events was delivered.
    LimitReached,
}

/// What one [`LogFollower::poll`] found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Poll {
    /// What was seen, in order.
    pub items: Vec<Followed>,
    /// More of the log is ready: poll again without waiting.
    pub more: bool,
    /// The follower stopped; further polls return nothing new.
    pub end: Option<FollowEnd>,
}

/// Follows one session's log; see the module docs.
#[derive(Debug, Clone)]
pub struct LogFollower {
    id: RecordId,
    query: EventQuery,
    next: u64,
    delivered: usize,
    idle_polls: u32,
    reported_tail: bool,
    /// Damaged lines already delivered: a store may report one again on a later page (its
    /// seek can start before `from_seq`).
    reported_damage: std::collections::HashSet<(String, u64)>,
    end: Option<FollowEnd>,
}

impl LogFollower {
    /// A follower of `id`'s log from `query.from_seq`, delivering the events `query`
    /// matches (its `types`, `streams`, `request_id` and `limit`; `mode` is the read mode).
    pub fn new(id: RecordId, query: EventQuery) -> Self {
        LogFollower {
            id,
            next: query.from_seq.max(1),
            query,
            delivered: 0,
            idle_polls: 0,
            reported_tail: false,
            reported_damage: std::collections::HashSet::new(),
            end: None,
        }
    }

    /// The seq the next read starts at.
    pub fn next_seq(&self) -> u64 {
        self.next
    }

    /// Reads what is new once. Wait a little before the next poll unless [`Poll::more`].
    pub async fn poll(&mut self, store: &dyn Store) -> OpsResult<Poll> {
        let mut out = Poll {
            end: self.end,
            ..Poll::default()
        };
        if self.end.is_some() {
            return Ok(out);
        }
        let page_query = EventQuery {
            from_seq: self.next,
            limit: Some(PAGE),
            max_bytes: Some(acpx_model::PAGE_BYTES),
            mode: self.query.mode,
            ..EventQuery::default()
        };
        let page = match store.read_events(&self.id, &page_query).await {
            Ok(p) => p,
            Err(StoreError::NotFound(_)) => return Ok(self.finish(out, FollowEnd::Deleted)),
            Err(e) => return Err(e.into()),
        };
        let reported = &mut self.reported_damage;
        out.items.extend(
            page.damaged
                .into_iter()
                .filter(|d| reported.insert((d.location.clone(), d.line)))
                .map(Followed::Damaged),
        );
        if page.torn_tail.is_some() && !self.reported_tail && page.next_seq.is_none() {
            self.reported_tail = true;
            out.items.push(Followed::IncompleteTail);
        }
        let got_any = !page.events.is_empty();
        for e in page.events {
            if e.seq < self.next {
                continue;
            }
            if e.seq > self.next && self.next > 1 {
                out.items.push(Followed::Missed {
                    from: self.next,
                    to: e.seq - 1,
                });
            }
            self.next = e.seq + 1;
            if self.deliver(&mut out, e) {
                return Ok(self.finish(out, FollowEnd::LimitReached));
            }
        }
        if page.next_seq.is_some() {
            out.more = true;
            return Ok(out);
        }
        if got_any {
            self.idle_polls = 0;
            return Ok(out);
        }
        self.idle_polls += 1;
        if !self.idle_polls.is_multiple_of(CLOSE_CHECK_EVERY) {
            return Ok(out);
        }
        match store.summary(&self.id).await {
            Ok(s) if s.closed => {
                // One more read so nothing written before the close is missed. A page at a
                // time: when there is more, the next polls read it as usual (and check the
                // close again once caught up), so a follower far behind never holds the rest
                // of the log at once.
                let last = store
                    .read_events(
                        &self.id,
                        &EventQuery {
                            from_seq: self.next,
                            limit: Some(PAGE),
                            max_bytes: Some(acpx_model::PAGE_BYTES),
                            mode: self.query.mode,
                            ..EventQuery::default()
                        },
                    )
                    .await?;
                let from = self.next;
                for e in last.events.into_iter().filter(|e| e.seq >= from) {
                    self.next = e.seq + 1;
                    if self.deliver(&mut out, e) {
                        return Ok(self.finish(out, FollowEnd::LimitReached));
                    }
                }
                if last.next_seq.is_some() {
                    out.more = true;
                    return Ok(out);
                }
                Ok(self.finish(out, FollowEnd::Closed))
            }
            Ok(_) => Ok(out),
            Err(StoreError::NotFound(_)) => Ok(self.finish(out, FollowEnd::Deleted)),
            // A snapshot being replaced or damaged does not stop a follower.
            Err(_) => Ok(out),
        }
    }

    /// Delivers `e` if the query matches it; whether the limit is now reached.
    fn deliver(&mut self, out: &mut Poll, e: EventEnvelope) -> bool {
        if !self.query.matches(&e) {
            return false;
        }
        out.items.push(Followed::Event(e));
        self.delivered += 1;
        self.query.limit.is_some_and(|l| self.delivered >= l)
    }

    fn finish(&mut self, mut out: Poll, end: FollowEnd) -> Poll {
        self.end = Some(end);
        out.end = Some(end);
        out
    }
}

/// Follows `id`'s log (see [`LogFollower`]), calling `on` with each item as it is seen and
/// waiting up to `interval` between reads that found nothing new
/// ([`Store::wait_for_events`]), until the follower stops.
pub async fn follow(
    store: &dyn Store,
    id: &RecordId,
    query: &EventQuery,
    interval: Duration,
    mut on: impl FnMut(Followed),
) -> OpsResult<FollowEnd> {
    let mut follower = LogFollower::new(id.clone(), query.clone());
    loop {
        let poll = follower.poll(store).await?;
        for item in poll.items {
            on(item);
        }
        if let Some(end) = poll.end {
            return Ok(end);
        }
        if !poll.more {
            // Polling for most stores; a store told of appends (PostgreSQL's LISTEN/NOTIFY)
            // returns as soon as another process or host commits one.
            let after = follower.next_seq().saturating_sub(1);
            if store.wait_for_events(id, after, interval).await.is_err() {
                tokio::time::sleep(interval).await;
            }
        }
    }
}
