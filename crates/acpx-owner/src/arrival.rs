//! Queue order is arrival order (issue 51): the owner numbers each connection when it accepts
//! it, in the order the kernel queued them, and the worker runs tasks in that order. A task
//! is queued only once its connection's request line is read, and after a stall (`kill
//! -STOP`) or under a burst those reads finish in any order (the newest spawned task often
//! first); so before it takes the lowest-numbered task waiting, the worker waits a moment for
//! connections accepted earlier that are still being read.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use super::mutex::locked;

/// The longest the worker waits for an earlier connection's request line before it takes a
/// later one's task: a client sends its request as soon as it is connected, so an earlier
/// connection still unread after this is idle (or hostile), and does not hold the queue.
pub(super) const ORDER_GRACE: Duration = Duration::from_millis(250);

/// The longest it waits for an earlier request that was read and is being queued (its
/// `accepted` is being appended to the log, an fsync on a busy disk): bounded only so that a
/// store that hangs cannot stop the queue for good.
pub(super) const QUEUEING_GRACE: Duration = Duration::from_secs(5);

/// The arrival numbers of an owner.
#[derive(Debug, Default)]
pub(super) struct Arrivals {
    next: AtomicU64,
    /// Connections accepted whose request line is not read yet.
    reading: Mutex<BTreeSet<u64>>,
    /// Connections whose request was read and is being dispatched (queued or answered).
    queueing: Mutex<BTreeSet<u64>>,
    /// Woken when one of them is decided.
    decided: Notify,
}

/// What the worker may still expect before the task numbered `n`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Earlier {
    /// Nothing: it may run.
    None,
    /// A request read and being queued: worth waiting for ([`QUEUEING_GRACE`]).
    Queueing,
    /// Only connections still unread ([`ORDER_GRACE`]).
    Reading,
}

/// The arrival number of one connection; dropped once its request is dispatched (queued or
/// answered) or the connection ended without one.
pub(super) struct Ticket {
    pub(super) number: u64,
    arrivals: Arc<Arrivals>,
}

impl Ticket {
    /// Its request line was read: it is being queued (or answered) now.
    pub(super) fn read(&self) {
        locked(&self.arrivals.reading).remove(&self.number);
        locked(&self.arrivals.queueing).insert(self.number);
        self.arrivals.decided.notify_waiters();
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        locked(&self.arrivals.reading).remove(&self.number);
        locked(&self.arrivals.queueing).remove(&self.number);
        self.arrivals.decided.notify_waiters();
    }
}

impl Arrivals {
    /// The next number, for a connection just accepted (in accept order).
    pub(super) fn ticket(self: &Arc<Self>) -> Ticket {
        let number = self.next.fetch_add(1, Ordering::SeqCst);
        locked(&self.reading).insert(number);
        Ticket {
            number,
            arrivals: self.clone(),
        }
    }

    /// The next number, for a task that comes without a connection (from another host
    /// through the store), decided at once.
    pub(super) fn number(&self) -> u64 {
        self.next.fetch_add(1, Ordering::SeqCst)
    }

    /// What connection accepted before `number` is still undecided.
    pub(super) fn earlier(&self, number: u64) -> Earlier {
        let before = |set: &Mutex<BTreeSet<u64>>| locked(set).first().is_some_and(|f| *f < number);
        if before(&self.queueing) {
            Earlier::Queueing
        } else if before(&self.reading) {
            Earlier::Reading
        } else {
            Earlier::None
        }
    }

    /// Waits until a connection is decided, or `max`.
    pub(super) async fn wait_decided(&self, max: Duration) {
        let _ = tokio::time::timeout(max, self.decided.notified()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ticket_is_undecided_until_dropped() {
        let a = Arc::new(Arrivals::default());
        let first = a.ticket();
        let second = a.ticket();
        assert_eq!(a.earlier(second.number), Earlier::Reading);
        assert_eq!(a.earlier(first.number), Earlier::None);
        first.read();
        assert_eq!(a.earlier(second.number), Earlier::Queueing);
        drop(first);
        assert_eq!(a.earlier(second.number), Earlier::None);
        assert!(a.number() > second.number);
    }
}
