//! [`QueueLog`]: how a queue owner records `queue_event`s in a session's log while the
//! session itself is busy with a turn.

use std::sync::{Arc, Weak};

use acpx_model::event::QueueEventPayload;
use acpx_model::{EventPayload, EventSource, EventStream, QueuePhase};
use serde_json::{Map, Value};

use crate::core::SessionCore;
use crate::error::{RuntimeError, RuntimeResult};
use crate::recorder::EventDraft;

use super::Session;

/// Records `queue_event`s (stream and source `queue`) in one session's log. Holds the
/// session weakly: once the session is shut down, recording fails with
/// [`RuntimeError::InvalidInput`].
#[derive(Clone)]
pub struct QueueLog {
    core: Weak<SessionCore>,
}

impl std::fmt::Debug for QueueLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueLog")
            .field("live", &(self.core.strong_count() > 0))
            .finish()
    }
}

impl QueueLog {
    /// Appends a `queue_event` with `phase` (see `docs/format.md`, § Queue owner) for
    /// `request_id`, with `extra` keys in its payload.
    pub async fn record(
        &self,
        phase: QueuePhase,
        request_id: Option<&str>,
        extra: Map<String, Value>,
    ) -> RuntimeResult<()> {
        let Some(core) = self.core.upgrade() else {
            return Err(RuntimeError::InvalidInput("the session has ended".into()));
        };
        core.try_record(EventDraft::new(
            request_id,
            EventStream::Queue,
            EventSource::Queue,
            EventPayload::QueueEvent(QueueEventPayload {
                phase,
                request_id: request_id.map(str::to_owned),
                extra,
            }),
        ))
        .await
        .map(|_| ())
    }
}

impl Session {
    /// A handle that records `queue_event`s in this session's log from another task.
    pub fn queue_log(&self) -> QueueLog {
        QueueLog {
            core: Arc::downgrade(&self.core),
        }
    }

    /// Tells the session that every task it runs (a turn, a mode, model or config change) is
    /// followed by a `queue_event` of phase `done` or `error`, recorded through
    /// [`Session::queue_log`] before the task's caller is answered: that event then saves the
    /// snapshot, and the task's own end does not. A queue owner's task thus rewrites the
    /// snapshot once instead of twice (the end, then the event after it once events paused);
    /// a caller that does not record that event must not set this, or its task ends are saved
    /// only when the events pause.
    pub async fn set_task_ends_saved_by_queue_event(&self, on: bool) {
        if let Some(r) = self.core.recorder.lock().await.as_mut() {
            r.set_task_ends_saved_by_queue_event(on);
        }
    }
}
