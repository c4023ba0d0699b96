//! Handing a session's agent process to another session record: a fork made in an agent may
//! exist only in that process until its first turn (some agents store a session only then),
//! so the process that made it must serve the fork next, not stop (issue 52).

use acpx_model::RecordId;
use serde_json::{json, Value};

use crate::error::{RuntimeError, RuntimeResult};
use crate::mapping::lifecycle;
use crate::recorder::EventDraft;

use super::{lifecycle_draft, lifecycle_payload, Attachment, Runtime, Session};

impl Session {
    /// Makes this session the session `child`, keeping the agent process and its connection:
    /// `child` is a stored record whose ACP session lives in this agent (the fork it just
    /// made, or a session it just created), and `answer` is the agent's answer that made it
    /// (its `modes` and `models` are kept for the controls). First the parent's record gets
    /// `agent_handed_over` (`toRecordId`, `pid`: it has no agent process any more), its log
    /// is flushed, its snapshot saved and its writer lock released; then `child` is taken
    /// under `runtime`'s lock (rolled forward like any open), gets `first` (the event that
    /// makes it what it is, such as its `session_forked`), then `agent_started` with this
    /// process's `pid`, `command`, `startedAt` and `handedOverFrom`. Returns the parent's
    /// record as saved. Refused while a turn runs.
    pub async fn hand_agent_to(
        &mut self,
        runtime: &Runtime,
        child: &RecordId,
        answer: &Value,
        first: Option<EventDraft>,
    ) -> RuntimeResult<acpx_model::SessionRecord> {
        self.ensure_connected()?;
        if self.core.turn_request_id().is_some() {
            return Err(RuntimeError::InvalidInput(format!(
                "session {}: a turn is running; its agent cannot serve another session now",
                self.id
            )));
        }
        let child_lock = runtime.lock_session(child).await?;
        let (child_recorder, recovery) = runtime.recover_locked(&child_lock).await?;
        let parent = {
            let mut guard = self.core.recorder.lock().await;
            let Some(r) = guard.as_mut() else {
                unreachable!("a Session always has its recorder")
            };
            self.core.record_pending(r).await?;
            r.record(lifecycle_draft(lifecycle_payload(
                lifecycle::AGENT_HANDED_OVER,
                json!({"toRecordId": child, "pid": self.agent.pid}),
            )))
            .await?;
            r.retry_unwritten().await?;
            r.flush_log().await?;
            r.save_if_dirty().await?;
            match guard.replace(child_recorder) {
                Some(r) => r.into_record(),
                None => unreachable!("a Session always has its recorder"),
            }
        };
        // The parent's lock goes with the old value.
        self.lock = Some(child_lock);
        let from = std::mem::replace(&mut self.id, child.clone());
        self.attachment = Attachment::Created;
        self.recovery = recovery;
        self.notices.clear();
        self.models = answer.get("models").cloned();
        self.modes = answer.get("modes").cloned();
        if let Some(draft) = first {
            self.core.try_record(draft).await?;
        }
        self.core
            .try_record(lifecycle_draft(lifecycle_payload(
                lifecycle::AGENT_STARTED,
                json!({"pid": self.agent.pid, "command": self.agent.command,
                       "startedAt": self.agent.started_at, "handedOverFrom": from}),
            )))
            .await?;
        Ok(parent)
    }

    /// Sets the user's choices the record holds (desired mode, config values and model, and
    /// the current mode) in the agent's session, as after an attach to a fresh ACP session:
    /// what a fork made in this process needs, since the agent starts its fork (or the fresh
    /// session of a copy) in its defaults. Every choice is sent, the current values being
    /// unknown; one that cannot be set is recorded and told as after an attach.
    pub async fn restore_choices(&mut self) -> RuntimeResult<()> {
        let (desired, acp, options) = self
            .with_record(|r| {
                (
                    super::choices::Desired::of(r, true),
                    r.acp_session_id.clone(),
                    r.acpx.config_options.clone(),
                )
            })
            .await;
        let options: Vec<Value> = options
            .into_iter()
            .map(|mut o| {
                if let Some(m) = o.as_object_mut() {
                    m.remove("currentValue");
                }
                o
            })
            .collect();
        let mut answer = json!({"configOptions": options});
        if let Some(m) = &self.modes {
            answer["modes"] = m.clone();
        }
        if let Some(m) = &self.models {
            let mut m = m.clone();
            if let Some(o) = m.as_object_mut() {
                o.remove("currentModelId");
            }
            answer["models"] = m;
        }
        let controls = self.controls(&acp);
        let notices =
            super::choices::restore(&controls, &desired, &answer, self.options.model.as_deref())
                .await?;
        self.notices.extend(notices);
        Ok(())
    }

    /// Flushes the log and saves the snapshot now (not at the next debounce): what readers of
    /// the store must see at once, such as a fork just made.
    pub async fn save_now(&self) -> RuntimeResult<()> {
        let mut guard = self.core.recorder.lock().await;
        if let Some(r) = guard.as_mut() {
            r.flush_log().await?;
            r.save_if_dirty().await?;
        }
        Ok(())
    }

    /// Records `draft` in this session's log and saves the snapshot (what ops record through
    /// a live session, such as the `session_forked` of a fork it serves, which readers of
    /// the store must see at once).
    pub async fn record_and_save(&self, draft: EventDraft) -> RuntimeResult<()> {
        self.core.try_record(draft).await?;
        self.save_now().await
    }
}
