//! A session's background tasks (the snapshot flusher and the agent-exit logger), and its end:
//! shutdown, close, and drop.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use acpx_model::{RecordId, SessionLock, SessionRecord, Timestamp};
use serde_json::{json, Map, Value};

use crate::agent::{AgentExit, AgentProcess, Connection};
use crate::core::SessionCore;
use crate::error::RuntimeResult;
use crate::mapping::lifecycle;

use super::controls::call_with_deadline;
use super::{
    lifecycle_draft, lifecycle_payload, lifecycle_payload_with, Attachment, CancelHandle, Recovery,
    Runtime, Session,
};

pub(super) async fn record_exit(
    core: &SessionCore,
    exit: Option<AgentExit>,
    reason: &str,
    stderr: Option<String>,
) {
    let mut extra = Map::new();
    if let Some(e) = &exit {
        extra.insert("exitedAt".into(), json!(e.at));
    }
    if let Some(s) = stderr.filter(|s| !s.is_empty()) {
        extra.insert("stderrTail".into(), json!(s));
    }
    core.record(lifecycle_draft(lifecycle_payload_with(
        lifecycle::AGENT_EXIT,
        exit.as_ref().and_then(|e| e.code),
        exit.as_ref().and_then(|e| e.signal.clone()),
        Some(reason.to_owned()),
        Value::Object(extra),
    )))
    .await;
}

impl Session {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn assemble(
        runtime: &Runtime,
        core: Arc<SessionCore>,
        id: RecordId,
        lock: Arc<SessionLock>,
        agent: AgentProcess,
        conn: Connection,
        init: Value,
        attachment: Attachment,
        recovery: Recovery,
    ) -> Session {
        let interval = runtime.options.snapshot_interval;
        let flusher = {
            let notify = core.dirty_notify.clone();
            let weak = Arc::downgrade(&core);
            tokio::spawn(async move {
                loop {
                    notify.notified().await;
                    tokio::time::sleep(interval).await;
                    let Some(core) = weak.upgrade() else { break };
                    let mut guard = core.recorder.lock().await;
                    if let Some(r) = guard.as_mut() {
                        if let Err(e) = r.save_if_due_or_paused().await {
                            tracing::error!("saving the session snapshot failed: {e}");
                        }
                    }
                }
            })
        };
        let shutting_down = Arc::new(AtomicBool::new(false));
        let exit_logger = {
            let core = core.clone();
            let mut exit = agent.exit_watch();
            let shutting = shutting_down.clone();
            let tail = agent.stderr_tail_handle();
            tokio::spawn(async move {
                let e = loop {
                    if let Some(e) = exit.borrow().clone() {
                        break Some(e);
                    }
                    if exit.changed().await.is_err() {
                        break exit.borrow().clone();
                    }
                };
                let (reason, stderr) = if shutting.load(Ordering::SeqCst) {
                    ("acpx_shutdown", None)
                } else {
                    ("process_exit", Some(tail(Duration::from_millis(500)).await))
                };
                record_exit(&core, e, reason, stderr).await;
            })
        };
        let cancel = CancelHandle::new(&core);
        Session {
            core,
            store: runtime.store.clone(),
            options: runtime.options.clone(),
            id,
            lock: Some(lock),
            agent,
            conn,
            init,
            attachment,
            recovery,
            notices: Vec::new(),
            models: None,
            modes: None,
            cancel,
            shutting_down,
            flusher,
            exit_logger: Some(exit_logger),
            finished: false,
        }
    }

    /// Stops the agent (`session/close` first when the agent supports it and `close` is
    /// set), records how it ended, saves the snapshot and releases the lock.
    async fn finish(&mut self, close: bool) -> RuntimeResult<SessionRecord> {
        if self.finished {
            return Ok(self.record().await);
        }
        self.finished = true;
        let acp = self.acp_session_id().await;
        let can_close = self
            .init
            .get("agentCapabilities")
            .and_then(|c| c.get("sessionCapabilities"))
            .and_then(|s| s.get("close"))
            .is_some_and(Value::is_object);
        if close && can_close && self.agent.exit().is_none() {
            let pending = self
                .conn
                .call("session/close", json!({"sessionId": acp}), |_| {});
            if let Err(e) = call_with_deadline(
                &self.core,
                &self.agent,
                pending,
                "session/close",
                Duration::from_secs(5),
            )
            .await
            {
                tracing::warn!("session/close failed: {e}");
            }
        }
        self.core.terminals.release_all().await;
        // An agent that already ended on its own keeps `process_exit` as its reason, however
        // late the exit logger gets to run.
        if self.agent.exit().is_none() {
            self.shutting_down.store(true, Ordering::SeqCst);
        }
        self.conn.shutdown().await;
        self.agent.stop().await;
        if let Some(logger) = self.exit_logger.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), logger).await;
        }
        if close {
            self.core
                .try_record(lifecycle_draft(lifecycle_payload(
                    lifecycle::SESSION_CLOSED,
                    json!({}),
                )))
                .await?;
        }
        self.flusher.abort();
        let record = {
            let mut guard = self.core.recorder.lock().await;
            let Some(r) = guard.as_mut() else {
                unreachable!("a Session always has its recorder")
            };
            self.core.record_pending(r).await?;
            r.retry_unwritten().await?;
            r.flush_log().await?;
            r.save_if_dirty().await?;
            // Moved out, not cloned: a copy would hold the whole conversation twice at the
            // end of every command (8 MB after a 1M-chunk turn). Nothing records after this
            // point (the agent is stopped, the flusher aborted, and `self` is consumed by
            // `shutdown`/`close`); a late update would find no recorder and be dropped, as
            // before the record exists.
            match guard.take() {
                Some(r) => r.into_record(),
                None => unreachable!("a Session always has its recorder"),
            }
        };
        let record = if close {
            self.store.close(&self.id, Timestamp::now()).await?
        } else {
            record
        };
        self.lock.take();
        Ok(record)
    }

    /// Disconnects: stops the agent, saves the snapshot, releases the lock. The record stays
    /// open and can be reopened with [`Runtime::open_existing`].
    pub async fn shutdown(mut self) -> RuntimeResult<SessionRecord> {
        self.finish(false).await
    }

    /// Closes the session: as [`Session::shutdown`], after `session/close` (when the agent
    /// supports it), and marks the record closed (it stays listable and loadable).
    pub async fn close(mut self) -> RuntimeResult<SessionRecord> {
        self.finish(true).await
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if !self.finished {
            // No async here: kill the agent's group at once; the log already has every event.
            if let Some(logger) = self.exit_logger.take() {
                logger.abort();
            }
            self.flusher.abort();
            self.agent.kill_now();
        }
    }
}
