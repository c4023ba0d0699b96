//! Flow control between a turn and a consumer of its events that runs at its own pace (a
//! queue owner's client connection).
//!
//! A turn's observer is called as each event is recorded and must not wait, so an observer
//! that hands events to another task (the owner writes them to its client's socket) queues
//! them. A client that reads slower than the agent streams (a slow pipe after `acpx`, a
//! terminal that scrolls slowly, a client stopped with `^Z`) would let that queue grow with
//! the turn: every event line of a million-chunk reply (issue 15: nothing holds a whole turn).
//! An [`OutputBacklog`] counts the bytes handed over and not yet taken; while more than its
//! limit are outstanding, the session records no more of the agent's `session/update`s and
//! holds their places in the connection's update gate (`crate::flow`, which then waits past
//! its miscount guard), so the agent waits on its stdout pipe, exactly as it does when a
//! `--no-owner` command's own stdout is slow. The
//! consumer closes the backlog when it goes away, and the turn's end releases its waits, so a
//! backlog never holds a session up past its consumer or its turn.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

/// See the module docs.
#[derive(Debug)]
pub struct OutputBacklog {
    outstanding: AtomicUsize,
    limit: usize,
    closed: AtomicBool,
    changed: Notify,
}

impl OutputBacklog {
    /// A backlog that holds the turn up while more than `limit` bytes are outstanding.
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(OutputBacklog {
            outstanding: AtomicUsize::new(0),
            limit,
            closed: AtomicBool::new(false),
            changed: Notify::new(),
        })
    }

    /// `bytes` more were handed to the consumer (count them before handing them over, so a
    /// consumer that takes them at once never takes more than was counted).
    pub fn handed(&self, bytes: usize) {
        self.outstanding.fetch_add(bytes, Ordering::SeqCst);
    }

    /// The consumer took (wrote out) `bytes` of what was handed to it.
    pub fn taken(&self, bytes: usize) {
        let _ = self
            .outstanding
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                Some(n.saturating_sub(bytes))
            });
        self.changed.notify_waiters();
    }

    /// The consumer is gone: nothing waits for it any more.
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.changed.notify_waiters();
    }

    /// Bytes handed over and not taken yet.
    pub fn outstanding(&self) -> usize {
        self.outstanding.load(Ordering::SeqCst)
    }

    /// Whether the consumer is behind by more than the limit (and still there).
    pub fn is_over(&self) -> bool {
        !self.closed.load(Ordering::SeqCst) && self.outstanding() > self.limit
    }

    /// Wakes the waits, which look again whether they are still needed.
    pub(crate) fn wake(&self) {
        self.changed.notify_waiters();
    }

    /// Waits while the consumer is over the limit and `still_needed()` (the backlog is still
    /// the turn's in progress; a change to that must call [`OutputBacklog::wake`]).
    pub(crate) async fn wait_until_taken(&self, still_needed: impl Fn() -> bool) {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            // Registered before the checks, so a change between them and the wait wakes it.
            notified.as_mut().enable();
            if !self.is_over() || !still_needed() {
                return;
            }
            notified.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_wait_ends_when_the_consumer_catches_up_or_leaves() {
        let b = OutputBacklog::new(10);
        b.handed(8);
        tokio::time::timeout(Duration::from_millis(100), b.wait_until_taken(|| true))
            .await
            .expect("under the limit: no wait");
        b.handed(8);
        assert!(b.is_over());
        let waiting = {
            let b = b.clone();
            tokio::spawn(async move { b.wait_until_taken(|| true).await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "over the limit: it waits");
        b.taken(8);
        tokio::time::timeout(Duration::from_secs(2), waiting)
            .await
            .expect("taken: the wait ends")
            .unwrap();

        b.handed(100);
        let waiting = {
            let b = b.clone();
            tokio::spawn(async move { b.wait_until_taken(|| true).await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished());
        b.close();
        tokio::time::timeout(Duration::from_secs(2), waiting)
            .await
            .expect("closed: the wait ends")
            .unwrap();
        assert!(!b.is_over());
    }

    #[tokio::test]
    async fn a_wait_ends_when_it_is_no_longer_needed() {
        let b = OutputBacklog::new(0);
        b.handed(1);
        let needed = Arc::new(AtomicBool::new(true));
        let waiting = {
            let (b, needed) = (b.clone(), needed.clone());
            tokio::spawn(async move { b.wait_until_taken(|| needed.load(Ordering::SeqCst)).await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished());
        needed.store(false, Ordering::SeqCst);
        b.wake();
        tokio::time::timeout(Duration::from_secs(2), waiting)
            .await
            .expect("the turn ended: the wait ends")
            .unwrap();
        // More taken than handed never wraps around.
        b.taken(5);
        assert_eq!(b.outstanding(), 0);
    }
}
