//! What the owner sends one client ([`Outgoing`], on its [`ReplyTx`]): response lines, a
//! turn's event lines and a reply in parts, written to the client's connection by that
//! connection's task.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use acpx_model::{EventEnvelope, ThreadText};
use tokio::sync::mpsc;

use super::protocol::{line, WireOutcome};

/// What the owner has for one client, in order: written to its connection by that
/// connection's task, so the worker never waits for a client.
pub(super) enum Outgoing {
    /// One response line (with its newline).
    Line(String),
    /// One event line of a turn (with its newline), counted in the connection's
    /// [`OutputBacklog`](acpx_runtime::output_backlog::OutputBacklog) until written.
    Event(String),
    /// The answer to a task that set [`TaskOptions::reply_in_parts`](crate::protocol::TaskOptions::reply_in_parts): the reply's texts, sent
    /// as `reply_part` lines, then the `result`. The connection's task reads the texts (a
    /// long one from its spill file, 64 KiB at a time) only as fast as the socket takes the
    /// lines, so the owner holds one part, not the reply, however slowly the client reads;
    /// and the worker has gone on to the next task meanwhile.
    Reply {
        /// See [`acpx_runtime::reply_texts_after`].
        texts: Vec<ThreadText>,
        /// The result, `agentText` empty.
        outcome: Box<WireOutcome>,
        /// Held until the reply is written or dropped.
        sending: Replying,
    },
}

impl From<String> for Outgoing {
    fn from(line: String) -> Self {
        Outgoing::Line(line)
    }
}

/// Where a task's answer goes (see [`Job::reply`](crate::job::Job::reply)).
pub(super) type ReplyTx = mpsc::UnboundedSender<Outgoing>;

/// Counts a reply in parts as being sent from when the worker hands it over until it is
/// written or dropped (a client gone before it was taken drops it unsent), so the idle exit
/// never sees it between the two tasks. What it counts in is the owner's count of replies
/// being sent (`Shared::replying`).
pub(super) struct Replying(Arc<AtomicUsize>);

impl Replying {
    pub(super) fn new(replying: &Arc<AtomicUsize>) -> Replying {
        replying.fetch_add(1, Ordering::SeqCst);
        Replying(replying.clone())
    }
}

impl Drop for Replying {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// How far a client may fall behind a turn's events, in bytes of event lines, before the
/// turn waits for it (`acpx_runtime::output_backlog`): a few thousand events, far more than a client
/// that reads as they come ever has outstanding.
pub(super) const CLIENT_BACKLOG_MAX: usize = 1 << 20;

/// An `event` line for `envelope`, serialized from the borrowed envelope (no copy).
pub(super) fn event_line(envelope: &EventEnvelope) -> String {
    #[derive(serde::Serialize)]
    struct EventLine<'a> {
        #[serde(rename = "type")]
        kind: &'static str,
        envelope: &'a EventEnvelope,
    }
    line(&EventLine {
        kind: "event",
        envelope,
    })
}
