//! The queue of live `session/update`s between the agent connection and the recorder.
//!
//! The connection's handler only queues a live update; a task of its own records what queued
//! up, in one append per batch ([`Recorder::record_all`]), while the connection reads on (up to
//! the bound of the connection's [`UpdateGate`], `crate::flow`). Every other record of the
//! session first records the queued updates under the recorder lock
//! ([`SessionCore::record_pending`]), so the log keeps the arrival order.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use serde_json::Value;

use super::{update_draft, Phase, SessionCore};
use crate::error::RuntimeResult;
use crate::flow::UpdateGate;
use crate::recorder::{EventDraft, Recorder};

/// Tells the connection's [`UpdateGate`] that one `session/update` was handled, on drop.
pub(crate) struct UpdateHandled(Arc<UpdateGate>);

impl Drop for UpdateHandled {
    fn drop(&mut self) {
        self.0.done();
    }
}

/// A new [`UpdateGate`] for a new agent connection, installed as the session's current one.
pub(crate) fn new_update_gate(core: &SessionCore) -> Arc<UpdateGate> {
    let gate = UpdateGate::new();
    *SessionCore::lock(&core.update_gate) = gate.clone();
    gate
}

/// Queued updates below this many wait [`BATCH_WAIT`] for more before they are recorded.
const BATCH_TARGET: usize = 32;

/// How long a short queue of updates waits for more (see [`SessionCore::on_session_update`]).
const BATCH_WAIT: std::time::Duration = std::time::Duration::from_millis(1);

/// A live `session/update` waiting to be recorded.
pub(crate) struct PendingUpdate {
    request_id: Option<String>,
    params: Value,
    /// Frees its place in the connection's gate once recorded.
    _handled: UpdateHandled,
}

impl SessionCore {
    /// A `session/update` notification.
    ///
    /// A live update is queued and recorded by a task of its own, so that the connection
    /// reads on while an append runs: the updates that arrive meanwhile are recorded together
    /// by the next one ([`Recorder::record_all`]). Every other record first records the
    /// queued updates (under the recorder lock), so the log's order is the arrival order.
    /// The connection's [`UpdateGate`] bounds the queue.
    pub fn on_session_update(self: &Arc<Self>, params: Value) {
        // Frees the update's place in the gate once it is handled, whichever way.
        let handled = UpdateHandled(Self::lock(&self.update_gate).clone());
        // In arrival order, before any later request: a finished tool call's approval no
        // longer covers client operations (core::grants).
        self.end_grant_if_finished(&params);
        {
            let mut phase = Self::lock(&self.phase);
            match &mut *phase {
                Phase::Buffering(buf) => {
                    buf.push(params);
                    return;
                }
                Phase::Replaying(n) => {
                    *n += 1;
                    return;
                }
                Phase::Live => {}
            }
        }
        let request_id = self.turn_request_id();
        Self::lock(&self.pending_updates).push(PendingUpdate {
            request_id,
            params,
            _handled: handled,
        });
        if !self.draining.swap(true, Ordering::AcqRel) {
            let core = self.clone();
            tokio::spawn(async move { core.drain_pending().await });
        }
    }

    /// The queue's task: records queued updates until none is left.
    async fn drain_pending(&self) {
        loop {
            // A store pays a fixed cost per append (a SQLite transaction commit writes its
            // pages to the WAL: tens of µs), and an agent streams a chunk every few µs to tens
            // of µs. Letting a short queue fill for a moment turns one append per chunk into
            // one per few dozen, for a delay no reader can see.
            if Self::lock(&self.pending_updates).len() < BATCH_TARGET {
                tokio::time::sleep(BATCH_WAIT).await;
            }
            let handled = {
                let mut guard = self.recorder.lock().await;
                match guard.as_mut() {
                    Some(rec) => {
                        let handled = match self.record_pending(rec).await {
                            Ok(handled) => handled,
                            Err(e) => {
                                self.set_fatal(e.to_string());
                                Vec::new()
                            }
                        };
                        if rec.is_dirty() {
                            self.dirty_notify.notify_one();
                        }
                        handled
                    }
                    None => {
                        tracing::debug!("updates before the session record exists: dropped");
                        Self::lock(&self.pending_updates).clear();
                        Vec::new()
                    }
                }
            };
            // A consumer of the turn's events that is behind (a queue owner's slow client)
            // holds the updates' places in the gate, outside the recorder lock, so the agent
            // waits as it would on a slow terminal (`crate::output_backlog`).
            if !handled.is_empty() {
                self.wait_for_output().await;
            }
            drop(handled);
            self.draining.store(false, Ordering::Release);
            // An update queued after the last take, while `draining` was still set, found
            // no task to start: take it over unless a new task already did.
            if Self::lock(&self.pending_updates).is_empty()
                || self.draining.swap(true, Ordering::AcqRel)
            {
                return;
            }
        }
    }

    /// Records the queued updates (called with the recorder lock held). Returns their places
    /// in the connection's gate, freed when dropped.
    pub(crate) async fn record_pending(
        &self,
        rec: &mut Recorder,
    ) -> RuntimeResult<Vec<UpdateHandled>> {
        let pending = std::mem::take(&mut *Self::lock(&self.pending_updates));
        if pending.is_empty() {
            return Ok(Vec::new());
        }
        let mut handled = Vec::with_capacity(pending.len());
        let drafts: Vec<EventDraft> = pending
            .into_iter()
            .map(|u| {
                handled.push(u._handled);
                update_draft(u.request_id.as_deref(), u.params)
            })
            .collect();
        rec.record_all(drafts).await?;
        Ok(handled)
    }
}
