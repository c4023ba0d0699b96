//! The session's side of an [`OutputBacklog`]: the turn's backlog set, and the wait while its
//! consumer is behind (`crate::output_backlog` has the why).

use std::sync::Arc;

use super::SessionCore;
use crate::output_backlog::OutputBacklog;

impl SessionCore {
    /// Sets (or clears) the turn's [`OutputBacklog`]; waits on the one it replaces end.
    pub(crate) fn set_output_backlog(&self, backlog: Option<Arc<OutputBacklog>>) {
        let old = std::mem::replace(&mut *SessionCore::lock(&self.output_backlog), backlog);
        if let Some(old) = old {
            old.wake();
        }
    }

    /// Waits while the turn's consumer of its events is behind by more than its limit, the
    /// update gate held meanwhile (its places taken on purpose: `crate::flow`).
    pub(crate) async fn wait_for_output(&self) {
        let Some(backlog) = SessionCore::lock(&self.output_backlog).clone() else {
            return;
        };
        if !backlog.is_over() {
            return;
        }
        let gate = SessionCore::lock(&self.update_gate).clone();
        let _held = gate.hold();
        backlog
            .wait_until_taken(|| {
                SessionCore::lock(&self.output_backlog)
                    .as_ref()
                    .is_some_and(|b| Arc::ptr_eq(b, &backlog))
            })
            .await;
    }
}
