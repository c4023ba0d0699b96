//! Flow control of the agent's `session/update` notifications.
//!
//! The SDK reads the agent's stdout line by line into an unbounded queue and dispatches the
//! messages one at a time; the `session/update` handler records each event (append, reducer,
//! observers) before the next is dispatched. An agent that streams faster than acpx records
//! would fill that queue with the rest of its turn: memory proportional to the turn's size
//! (hundreds of MB for a million chunks). The [`UpdateGate`] bounds it: the transport reads
//! a `session/update` line only while fewer than [`MAX_UPDATES_IN_FLIGHT`] are read and not
//! yet handled, so the agent waits on its stdout pipe, as with any slow reader.
//!
//! Every line counted by [`UpdateGate::admit`] is a `session/update` notification (a JSON
//! object with that `method` and no `id`), which the SDK hands to the one handler that calls
//! [`UpdateGate::done`]. Should one ever go missing anyway, a reader waits at most
//! [`MAX_STALL`] and then reads on, so a miscount costs time, never a hang; except while the
//! gate is held on purpose ([`UpdateGate::hold`]: the turn waits for a slow consumer of its
//! events, `crate::output_backlog`), when the reader waits as long as the hold lasts.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::de::IgnoredAny;
use serde::Deserialize;
use tokio::sync::Semaphore;

/// `session/update` notifications read from the agent but not yet recorded, at most.
pub(crate) const MAX_UPDATES_IN_FLIGHT: usize = 256;

/// The longest a read waits for the recorder before going ahead anyway.
pub(crate) const MAX_STALL: Duration = Duration::from_secs(5);

/// See the module docs.
#[derive(Debug)]
pub(crate) struct UpdateGate {
    permits: Semaphore,
    /// Set while the places are held on purpose ([`UpdateGate::hold`]).
    held: AtomicBool,
}

/// Ends a [`UpdateGate::hold`] when dropped.
pub(crate) struct Held<'a>(&'a UpdateGate);

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.held.store(false, Ordering::SeqCst);
    }
}

/// The two keys that say what a JSON-RPC line is; everything else is skipped unparsed.
#[derive(Deserialize)]
struct Probe<'a> {
    #[serde(borrow)]
    method: Option<&'a str>,
    id: Option<IgnoredAny>,
}

fn is_session_update(line: &str) -> bool {
    // A cheap filter first: most lines of a busy turn are updates, the rest rarely mention it.
    line.contains("session/update")
        && serde_json::from_str::<Probe<'_>>(line)
            .is_ok_and(|p| p.method == Some("session/update") && p.id.is_none())
}

impl UpdateGate {
    /// A gate with every permit free.
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(UpdateGate {
            permits: Semaphore::new(MAX_UPDATES_IN_FLIGHT),
            held: AtomicBool::new(false),
        })
    }

    /// Says that the places taken are held on purpose until the guard drops (the turn waits
    /// for a slow consumer of its events): a reader then waits past [`MAX_STALL`], silently,
    /// instead of reading on.
    pub(crate) fn hold(&self) -> Held<'_> {
        self.held.store(true, Ordering::SeqCst);
        Held(self)
    }

    /// Called by the transport for each line before handing it on: a `session/update` waits
    /// while [`MAX_UPDATES_IN_FLIGHT`] are in flight (at most [`MAX_STALL`]).
    pub(crate) async fn admit(&self, line: &str) {
        if !is_session_update(line) {
            return;
        }
        loop {
            match tokio::time::timeout(MAX_STALL, self.permits.acquire()).await {
                Ok(Ok(permit)) => permit.forget(),
                Ok(Err(_)) => {}
                Err(_) if self.held.load(Ordering::SeqCst) => continue,
                Err(_) => tracing::warn!(
                    "no session/update recorded for {MAX_STALL:?} with {MAX_UPDATES_IN_FLIGHT} \
                     in flight; reading on"
                ),
            }
            return;
        }
    }

    /// Called once per `session/update` handled (recorded, buffered or counted as replay).
    pub(crate) fn done(&self) {
        // A read that went ahead after MAX_STALL took no permit: never grow past the bound.
        if self.permits.available_permits() < MAX_UPDATES_IN_FLIGHT {
            self.permits.add_permits(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_session_update_notifications_are_counted() {
        assert!(is_session_update(
            r#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s"}}"#
        ));
        assert!(!is_session_update(
            r#"{"jsonrpc":"2.0","id":3,"method":"session/update","params":{}}"#
        ));
        assert!(!is_session_update(
            r#"{"jsonrpc":"2.0","id":3,"result":{"text":"session/update"}}"#
        ));
        assert!(!is_session_update(r#"[{"method":"session/update"}]"#));
        assert!(!is_session_update("not json session/update"));
    }

    #[tokio::test]
    async fn a_full_gate_waits_for_done() {
        let gate = UpdateGate::new();
        let line = r#"{"jsonrpc":"2.0","method":"session/update","params":{}}"#;
        for _ in 0..MAX_UPDATES_IN_FLIGHT {
            gate.admit(line).await;
        }
        let blocked = tokio::time::timeout(Duration::from_millis(50), gate.admit(line)).await;
        assert!(blocked.is_err(), "the gate let one more update in");
        gate.done();
        tokio::time::timeout(Duration::from_millis(500), gate.admit(line))
            .await
            .expect("a freed permit admits the next update");
    }
}
