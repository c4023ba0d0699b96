//! Bringing a stored record up to date before (or without) starting its agent.

use std::sync::Arc;

use acpx_model::event::PromptErrorPayload;
use acpx_model::{
    EventLogState, EventPayload, EventQuery, EventSource, EventStream, ReadMode, RecordId,
    SessionLock, SessionRecord, SettleOnLoad, Store,
};
use serde_json::{json, Map};

use crate::error::RuntimeResult;
use crate::mapping::{self, lifecycle, RollForward};
use crate::recorder::{EventDraft, Recorder};

use super::{lifecycle_draft, lifecycle_payload, lifecycle_payload_with, Recovery, Runtime};

impl Runtime {
    /// Brings a stored session up to date without starting its agent: rolls the snapshot
    /// forward from the log, records an unfinished turn as interrupted, and saves. Takes the
    /// writer lock for the duration (fails with `Locked` while another process uses it).
    pub async fn recover(&self, id: &RecordId) -> RuntimeResult<(SessionRecord, Recovery)> {
        let lock = self.lock_session(id).await?;
        let (mut recorder, recovery) = self.recover_locked(&lock).await?;
        recorder.save_if_dirty().await?;
        Ok((recorder.snapshot().clone(), recovery))
    }

    /// Closes a stored session without its agent (none runs: a queue owner would have closed
    /// it itself): under the writer lock, brings it up to date as [`Runtime::recover`] does,
    /// records `session_closed` (the reducer marks the record closed) and saves. A session
    /// already closed is returned as it is. Every close path records the event, so the log
    /// alone says when a session was closed.
    pub async fn close_stored(&self, id: &RecordId) -> RuntimeResult<SessionRecord> {
        let lock = self.lock_session(id).await?;
        let (mut recorder, _) = self.recover_locked(&lock).await?;
        if !recorder.snapshot().closed {
            recorder
                .record(lifecycle_draft(lifecycle_payload(
                    lifecycle::SESSION_CLOSED,
                    json!({}),
                )))
                .await?;
        }
        recorder.retry_unwritten().await?;
        recorder.flush_log().await?;
        recorder.save_if_dirty().await?;
        let record = recorder.into_record();
        drop(lock);
        Ok(record)
    }

    /// [`Runtime::recover`] under the held writer lock `writer`.
    pub(super) async fn recover_locked(
        &self,
        writer: &Arc<SessionLock>,
    ) -> RuntimeResult<(Recorder, Recovery)> {
        let id = writer.id();
        let settle = self
            .options
            .lives_on
            .then(|| Arc::new(SettleOnLoad::new(crate::text_spill::settled_stores)));
        let (mut record, rolled, damaged, state) =
            load_and_roll_forward(&*self.store, id, settle.clone()).await?;
        if let Some(why) = settle.and_then(|s| s.failure()) {
            tracing::warn!(
                "the conversation stays in memory: its finished turns could not be written to spill files ({why})"
            );
        }
        if record.thread.settled.len() >= crate::text_spill::TRIM_AFTER {
            // The load freed each settled turn as it went: give those pages back.
            crate::text_spill::release_freed_heap();
        }
        let mut recovery = Recovery {
            rolled_forward: rolled,
            damaged_lines: damaged,
            ..Recovery::default()
        };
        if state.last_seq < record.acpx.audit_seq {
            recovery.log_gap = Some((state.last_seq + 1, record.acpx.audit_seq));
            record.acpx.audit_seq = state.last_seq;
        }
        let rolled_any = recovery.rolled_forward.applied > 0;
        record.acpx.event_log = state;
        let mut recorder = self.new_recorder(writer, record);
        if let Some((from, to)) = recovery.log_gap {
            recorder
                .record(lifecycle_draft(lifecycle_payload(
                    lifecycle::LOG_GAP,
                    json!({"fromSeq": from, "toSeq": to,
                           "reason": "the snapshot folded in events that never reached the log (an append failed or was lost in a crash); seq numbering continues from the log"}),
                )))
                .await?;
        }
        if let Some(pid) = recorder.snapshot().pid {
            recovery.stale_agent_pid = Some(pid);
            recorder
                .record(lifecycle_draft(lifecycle_payload_with(
                    lifecycle::STALE_AGENT,
                    None,
                    None,
                    Some("acpx_exited".into()),
                    json!({"pid": pid}),
                )))
                .await?;
        }
        if mapping::turn_is_running(recorder.snapshot()) {
            let request_id = recorder
                .snapshot()
                .acpx
                .last_turn
                .as_ref()
                .map(|t| t.request_id.clone())
                .unwrap_or_default();
            let mut extra = Map::new();
            extra.insert("outcome".into(), json!("interrupted"));
            recorder
                .record(EventDraft::new(
                    Some(&request_id),
                    EventStream::Prompt,
                    EventSource::Runtime,
                    EventPayload::PromptError(PromptErrorPayload {
                        code: "RUNTIME".into(),
                        detail_code: Some("TURN_INTERRUPTED".into()),
                        message: "acpx stopped before this turn finished (the process was killed or crashed); everything that reached the event log was kept".into(),
                        retryable: true,
                        acp: None,
                        extra,
                    }),
                ))
                .await?;
            recovery.interrupted_turn = Some(request_id);
        }
        if rolled_any {
            // A fresh recorder is not dirty: the rolled-forward snapshot must be saved
            // explicitly, or `recover` alone would leave the stale snapshot on disk.
            recorder.save().await?;
        }
        Ok((recorder, recovery))
    }
}

/// Loads a snapshot and folds in the logged events it has not seen. Returns the record, the
/// roll-forward report, how many damaged lines were skipped, and the log's state.
pub async fn load_rolled_forward(
    store: &dyn Store,
    id: &RecordId,
) -> RuntimeResult<(SessionRecord, RollForward, usize, EventLogState)> {
    load_and_roll_forward(store, id, None).await
}

/// [`load_rolled_forward`], the snapshot read with [`Store::load_settling`] when `settle` is
/// given (the events rolled forward fold into the turns it keeps in memory).
async fn load_and_roll_forward(
    store: &dyn Store,
    id: &RecordId,
    settle: Option<Arc<SettleOnLoad>>,
) -> RuntimeResult<(SessionRecord, RollForward, usize, EventLogState)> {
    let mut record = match settle {
        Some(settle) => store.load_settling(id, settle).await?,
        None => store.load(id).await?,
    };
    let mut report = RollForward::default();
    let mut damaged = 0;
    let mut damaged_seen = std::collections::HashSet::new();
    let mut from = record.acpx.audit_seq.saturating_add(1);
    // Nearly always the snapshot has folded in the whole log: the log's state says so without
    // a read (on the file store a read opens every segment of the log, a prompt's cost that
    // grows with the number of segments).
    let state = store.event_log_state(id).await?;
    if state.last_seq < from {
        return Ok((record, report, damaged, state));
    }
    loop {
        let page = store
            .read_events(
                id,
                &EventQuery {
                    from_seq: from,
                    limit: Some(5000),
                    max_bytes: Some(acpx_model::PAGE_BYTES),
                    mode: ReadMode::Lenient,
                    ..EventQuery::default()
                },
            )
            .await?;
        // A store may report a line again on a later page: each counts once.
        damaged += page
            .damaged
            .iter()
            .filter(|d| damaged_seen.insert((d.location.clone(), d.line)))
            .map(|d| usize::try_from(d.lines).unwrap_or(usize::MAX))
            .sum::<usize>();
        let r = mapping::roll_forward(&mut record, &page.events);
        report.applied += r.applied;
        report.already_applied += r.already_applied;
        if r.last_seq.is_some() {
            report.last_seq = r.last_seq;
        }
        match page.next_seq {
            Some(n) if n > from => from = n,
            _ => break,
        }
    }
    let state = store.event_log_state(id).await?;
    Ok((record, report, damaged, state))
}
