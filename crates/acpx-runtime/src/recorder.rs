//! The write path of every event: log first, then snapshot (`docs/format.md`, § `events.ndjson`
//! and § Durability).
//!
//! For each event [`Recorder::record`]:
//!
//! 1. takes `seq = acpx.audit_seq + 1`;
//! 2. builds the [`EventEnvelope`];
//! 3. appends it with [`Store::append`] under the session's writer lock (together with earlier
//!    events whose append failed, so the log never gets a gap);
//! 4. updates `acpx.event_log` from the store's answer ([`SessionRecord::note_append_result`]:
//!    on failure `last_write_error` says why);
//! 5. folds the event into the snapshot with [`crate::mapping::apply_event`] (thread, `acpx`,
//!    audit ring);
//! 6. persists `session.json` when the event ends a turn or a control (`prompt_done`,
//!    `prompt_error`, `control_done`, `control_error`), when an append has just failed (the
//!    failure must reach disk), and otherwise only when a save is *due*
//!    ([`Recorder::save_is_due`]), the events pause, or the session finishes: at least
//!    [`DEFAULT_SNAPSHOT_INTERVAL`] (300 ms) since the last save **and** at least as many
//!    events recorded since that save as the log held at it (the snapshot-debounce budget of
//!    `docs/format.md`, § Write ordering). A save costs O(snapshot) and the snapshot grows
//!    with the events, so a save every interval made a long turn quadratic; with the budget
//!    the snapshot bytes written while a turn streams stay within a small multiple of the
//!    events recorded, and a 10k-chunk turn on a large session saves only at its end (and
//!    the session once more when it finishes). The log is the source of truth in between,
//!    and [`crate::mapping::roll_forward`] catches a snapshot up with it on the next open.
//!    A background flusher saves a dirty snapshot when a save is due or once the events
//!    pause for an interval, so readers in other processes see a quiet session's snapshot at
//!    most one interval late;
//! 7. shows the event to the observers (the CLI's output, a queue owner's clients) only once
//!    its append has returned: an event held back by a failed append is shown, in order,
//!    when a later append stores it, and never if none does. What anyone saw is stored.
//!
//! A failed `session.json` write is returned as an error (it is fatal for the operation that
//! needed it); a failed append is not fatal at once: it is recorded, logged, retried with the
//! next event, and becomes fatal ([`RuntimeError::LogUnwritable`]) after
//! [`MAX_UNWRITTEN_EVENTS`] events could not be written.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use acpx_model::{
    Durability, EventContext, EventEnvelope, EventLogState, EventPayload, EventSource, EventStream,
    Message, SessionLock, SessionRecord, Store, StoreError, StoreResult, Timestamp,
};

use crate::error::{RuntimeError, RuntimeResult};
use crate::mapping;
use crate::text_spill::SessionSpill;

/// How often, at most, `session.json` is rewritten while events stream.
pub const DEFAULT_SNAPSHOT_INTERVAL: Duration = Duration::from_millis(300);

/// Events that may wait in memory for a failing event log before the session is stopped.
pub const MAX_UNWRITTEN_EVENTS: usize = 1000;

/// A callback that sees every event once it is recorded (appended and applied). It runs
/// while the session's recorder is busy: it must return quickly and must not call back into
/// the session (hand the event to a channel instead).
pub type Observer = Arc<dyn Fn(&EventEnvelope) + Send + Sync>;

/// An event before it gets its seq and timestamp.
#[derive(Debug, Clone)]
pub struct EventDraft {
    /// `requestId`: the turn or control the event belongs to.
    pub request_id: Option<String>,
    /// `stream`: prompt, control, lifecycle, queue.
    pub stream: EventStream,
    /// `source`: acp, runtime, client, queue.
    pub source: EventSource,
    /// The typed payload (its type gives the event `type`).
    pub payload: EventPayload,
}

impl EventDraft {
    /// A draft with the given routing and payload.
    pub fn new(
        request_id: Option<&str>,
        stream: EventStream,
        source: EventSource,
        payload: EventPayload,
    ) -> Self {
        EventDraft {
            request_id: request_id.map(str::to_owned),
            stream,
            source,
            payload,
        }
    }
}

/// Owns a session's in-memory snapshot and writes every event through a [`Store`].
pub struct Recorder {
    store: Arc<dyn Store>,
    /// The writer lock every append is made with. The session owns it (dropping the session
    /// releases the lock at once); the recorder only borrows it for each append.
    writer: Weak<SessionLock>,
    record: SessionRecord,
    durability: Durability,
    snapshot_interval: Duration,
    last_save: Instant,
    /// `acpx.audit_seq` when `session.json` was last saved: the debounce budget's measure of
    /// the snapshot's size (see [`Recorder::save_is_due`]).
    saved_at_seq: u64,
    /// When the last event was recorded: the flusher saves once the events pause.
    last_event_at: Instant,
    dirty: bool,
    unwritten: Vec<EventEnvelope>,
    observers: Vec<Observer>,
    turn_observer: Option<Observer>,
    /// Set while a turn runs whose session is shut down right after it (`--no-owner`,
    /// `exec`): see [`Recorder::set_turn_end_saved_by_shutdown`].
    turn_end_saved_by_shutdown: bool,
    /// Set in a queue owner's session: see [`Recorder::set_task_ends_saved_by_queue_event`].
    task_ends_saved_by_queue_event: bool,
    /// Where a long reply streams instead of memory (docs/format.md decision 16).
    spill: SessionSpill,
    /// How far the finished messages were compacted.
    compacted: Compacted,
    /// Whether a turn started through this recorder: only then is the session live here (the
    /// end of an interrupted turn that recovery records before a `--no-owner` prompt does not
    /// move the whole loaded conversation to a spill file that process drops right after).
    turn_started_here: bool,
}

/// How far a session's finished messages were compacted ([`SessionSpill::compact_finished`];
/// docs/format.md decision 16).
#[derive(Debug, Default)]
struct Compacted {
    /// Messages before this index were compacted at a turn's end.
    settled: usize,
    /// The running turn's messages before this index were compacted while it ran.
    turn: usize,
    /// The message the turn is writing, and how many of its tool results (in order) had
    /// their calls compacted.
    writing: (usize, usize),
}

impl Compacted {
    /// Compacts after an event of a turn started through this recorder. While the turn
    /// runs, its own messages before the one it is writing, so that a turn of many tool calls
    /// does not hold them all (in every process, `--no-owner` too). At the end of a turn of a
    /// session that lives on (`settle`), the turns before the last settle out of memory
    /// (docs/format.md decision 17; the first time, the whole conversation the process
    /// loaded, left out while the turn runs so that its one-off write does not delay the
    /// prompt), and the last turn's messages not compacted yet are. A process that ends with
    /// its turn moves nothing then: it would only cost I/O before the shutdown's save.
    fn after_event(&mut self, spill: &mut SessionSpill, record: &mut SessionRecord, settle: bool) {
        if settle {
            // The turns before the last leave memory for good: every tool call of theirs has
            // its result, and nothing changes them again. The last turn stays, for a late
            // update of its tool calls and for its reply. Settled first, so that what
            // settles is not written to the spill file on the way.
            let last_turn = record
                .thread
                .messages
                .iter()
                .rposition(|m| matches!(m, Message::User(_)));
            if let Some(start) = last_turn.filter(|s| *s > 0) {
                let moved = spill.settle(record, start);
                if moved > 0 {
                    self.settled = self.settled.saturating_sub(moved);
                    self.turn = self.turn.saturating_sub(moved);
                    // The message a turn writes is found again from the next event on.
                    self.writing = (usize::MAX, 0);
                }
            }
            let messages = record.thread.messages.len();
            if messages > self.settled {
                self.settled = spill.compact_finished(record, self.settled, messages);
            }
            return;
        }
        let messages = record.thread.messages.len();
        let end = messages.saturating_sub(1);
        if end > self.turn {
            self.turn = spill.compact_finished(record, self.turn, end);
        }
        // The message being written: its finished tool calls (a chain of calls without text
        // between them stays in one message).
        if self.writing.0 != end {
            self.writing = (end, 0);
        }
        self.writing.1 = spill.compact_finished_tool_calls(record, end, self.writing.1);
    }
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("id", &self.record.acpx_record_id)
            .field("audit_seq", &self.record.acpx.audit_seq)
            .field("dirty", &self.dirty)
            .field("unwritten", &self.unwritten.len())
            .finish()
    }
}

/// Whether recording `event_type` saves the snapshot at once: the end of a turn or a control,
/// whose result the caller is told about next (docs/format.md § Snapshot debounce). Starts and
/// lifecycle events are not worth a save of their own: each is followed within the same
/// operation by an end, a pause of one snapshot interval, or the session's final save, and a
/// save costs O(snapshot), so forcing them made one short turn on a large session rewrite its
/// snapshot six times instead of two.
fn forces_save(event_type: &str) -> bool {
    matches!(
        event_type,
        "prompt_done" | "prompt_error" | "control_done" | "control_error"
    )
}

/// Whether `event` is the `queue_event` that ends a queue owner's task (phase `done` or
/// `error`), recorded after the task's own end and before the owner answers its client.
fn ends_queue_task(event: &EventEnvelope) -> bool {
    event.event_type == "queue_event"
        && matches!(
            event
                .payload
                .get("phase")
                .and_then(serde_json::Value::as_str),
            Some("done" | "error")
        )
}

impl Recorder {
    /// A recorder for a record that already exists in `store` (created or loaded), appending
    /// under `writer`, the session's writer lock taken through `store` and held by the caller
    /// for as long as it records.
    pub fn new(
        store: Arc<dyn Store>,
        writer: &Arc<SessionLock>,
        record: SessionRecord,
        durability: Durability,
        snapshot_interval: Duration,
    ) -> Self {
        Recorder {
            store,
            writer: Arc::downgrade(writer),
            durability,
            snapshot_interval,
            last_save: Instant::now(),
            saved_at_seq: record.acpx.audit_seq,
            last_event_at: Instant::now(),
            record,
            dirty: false,
            unwritten: Vec::new(),
            observers: Vec::new(),
            turn_observer: None,
            turn_end_saved_by_shutdown: false,
            task_ends_saved_by_queue_event: false,
            spill: SessionSpill::default(),
            compacted: Compacted::default(),
            turn_started_here: false,
        }
    }

    /// The current snapshot (possibly newer than what is on disk).
    pub fn snapshot(&self) -> &SessionRecord {
        &self.record
    }

    /// A copy of the snapshot without its conversation (`thread.messages` and
    /// `thread.settled` empty): what a caller needs for the session's settings (ids,
    /// directory, agent command, the user's choices) without a second copy of a conversation
    /// that can be megabytes long.
    pub(crate) fn settings_copy(&mut self) -> SessionRecord {
        let messages = std::mem::take(&mut self.record.thread.messages);
        let settled = std::mem::take(&mut self.record.thread.settled);
        let copy = self.record.clone();
        self.record.thread.messages = messages;
        self.record.thread.settled = settled;
        copy
    }

    /// The snapshot, moved out: the end of a session hands its record over without a copy.
    pub fn into_record(self) -> SessionRecord {
        self.record
    }

    /// Adds an observer for every later event.
    pub fn add_observer(&mut self, o: Observer) {
        self.observers.push(o);
    }

    /// Sets (or clears) the observer of the current turn.
    pub fn set_turn_observer(&mut self, o: Option<Observer>) {
        self.turn_observer = o;
    }

    /// Whether the end of the current turn (`prompt_done`, `prompt_error`) is saved by the
    /// session's shutdown, which its caller makes right after the turn, instead of by a save
    /// of its own: a save rewrites the whole snapshot, and two in a row for one short turn on
    /// a long session were most of what it cost over the same turn on a new one. The log holds
    /// the end either way (a crash in between is rolled forward by the next open).
    pub fn set_turn_end_saved_by_shutdown(&mut self, on: bool) {
        self.turn_end_saved_by_shutdown = on;
    }

    /// Whether the end of each task (`prompt_done`, `prompt_error`, `control_done`,
    /// `control_error`) is saved by the `queue_event` of phase `done` or `error` that a queue
    /// owner records right after it, before it tells its client, instead of by a save of its
    /// own. That event came a few milliseconds after the end and changed the snapshot again,
    /// so every task of an owner rewrote the whole snapshot twice: at its end, then once the
    /// events paused (docs/format.md § Snapshot debounce).
    pub fn set_task_ends_saved_by_queue_event(&mut self, on: bool) {
        self.task_ends_saved_by_queue_event = on;
    }

    /// Whether the snapshot has changes that are not on disk yet.
    pub fn is_dirty(&self) -> bool {
        self.dirty
    }

    /// Events recorded in the snapshot whose append has not succeeded yet.
    pub fn unwritten(&self) -> usize {
        self.unwritten.len()
    }

    /// Records one event (see the module docs for the exact order).
    pub async fn record(&mut self, draft: EventDraft) -> RuntimeResult<EventEnvelope> {
        match self.record_all(std::iter::once(draft)).await? {
            Some(event) => Ok(event),
            None => unreachable!("one draft recorded gives one event"),
        }
    }

    /// Records several events with one append (the order of the module docs, per batch):
    /// consecutive seqs, one [`Store::append`] call, then each event folded into the snapshot
    /// in order and shown to the observers. A turn's streamed updates come here in the
    /// batches that queued up while the previous append ran, so a store's fixed cost per
    /// append (a SQLite transaction, a `write(2)`) is shared by the batch. Returns the last
    /// event (`None` for no drafts).
    pub async fn record_all(
        &mut self,
        drafts: impl IntoIterator<Item = EventDraft>,
    ) -> RuntimeResult<Option<EventEnvelope>> {
        let first_new = self.unwritten.len();
        let mut seq = self.record.acpx.audit_seq;
        for draft in drafts {
            seq += 1;
            let ctx = EventContext {
                acpx_record_id: &self.record.acpx_record_id,
                acp_session_id: &self.record.acp_session_id,
                request_id: draft.request_id.as_deref(),
                stream: draft.stream,
                source: draft.source,
            };
            let event = EventEnvelope::new(&ctx, seq, Timestamp::now(), draft.payload);
            self.unwritten.push(event);
        }
        let new_count = self.unwritten.len() - first_new;
        if new_count == 0 {
            return Ok(None);
        }
        let result = self.append_unwritten().await;
        self.record.note_append_result(&result);
        // Only events whose append returned are shown to observers (the CLI's output, the
        // owner's clients): what was acknowledged is stored. Events held back by a failed
        // append are shown, in order, once a later append stores them.
        let mut stored = Vec::new();
        let first_failure = match &result {
            Ok(_) => {
                stored = std::mem::take(&mut self.unwritten);
                false
            }
            Err(e) => {
                tracing::error!(
                    session = %self.record.acpx_record_id,
                    seq,
                    pending = self.unwritten.len(),
                    "event log append failed: {e}"
                );
                self.unwritten.len() == new_count
            }
        };
        let new_events = if stored.is_empty() {
            &self.unwritten[first_new..]
        } else {
            &stored[first_new..]
        };
        let mut forced = false;
        for event in new_events {
            mapping::apply_event(&mut self.record, event);
            let kind = event.event_type.as_str();
            let turn_end = matches!(kind, "prompt_done" | "prompt_error");
            let saved_later = self.turn_end_saved_by_shutdown && turn_end;
            self.turn_started_here |= kind == "prompt_started";
            if kind == "prompt_started" {
                // The turn's own messages start with its user message.
                self.compacted.turn = self.record.thread.messages.len().saturating_sub(1);
            }
            if self.turn_started_here {
                let lives_on = !self.turn_end_saved_by_shutdown;
                self.compacted
                    .after_event(&mut self.spill, &mut self.record, turn_end && lives_on);
            }
            // After the compaction, which appends to the same file: a long reply spilled
            // before it would no longer end the file, and its next chunk would bring it back.
            self.spill.spill_last_reply_if_long(&mut self.record);
            forced |= if self.task_ends_saved_by_queue_event {
                ends_queue_task(event)
            } else {
                forces_save(kind) && !saved_later
            };
        }
        let last = new_events.last().cloned();
        self.dirty = true;
        self.last_event_at = Instant::now();
        if first_failure || forced || self.save_is_due() {
            self.save().await?;
        }
        for e in &stored {
            for o in self.observers.iter().chain(self.turn_observer.iter()) {
                o(e);
            }
        }
        if self.unwritten.len() > MAX_UNWRITTEN_EVENTS {
            return Err(RuntimeError::LogUnwritable {
                id: self.record.acpx_record_id.clone(),
                detail: self
                    .record
                    .acpx
                    .event_log
                    .last_write_error
                    .clone()
                    .unwrap_or_default(),
            });
        }
        Ok(last)
    }

    /// Appends the events not written yet under the writer lock.
    async fn append_unwritten(&self) -> StoreResult<EventLogState> {
        let Some(writer) = self.writer.upgrade() else {
            return Err(self.writer_released());
        };
        self.store
            .append(&writer, &self.unwritten, self.durability)
            .await
    }

    fn writer_released(&self) -> StoreError {
        StoreError::InvalidArgument(format!(
            "the writer lock of session {} was released; nothing more can be written",
            self.record.acpx_record_id
        ))
    }

    /// Whether a save that no event forces may happen now: the snapshot has unsaved changes,
    /// the snapshot interval has passed since the last save, and at least as many events were
    /// recorded since that save as the log held at it. The event count stands for the
    /// snapshot's size (the thread is folded from the events), so the saves of a streaming
    /// turn come at seq s, 2s, 4s, … and their total cost is a small multiple of the last
    /// one's, instead of one full rewrite per interval.
    pub fn save_is_due(&self) -> bool {
        let since = self.record.acpx.audit_seq.saturating_sub(self.saved_at_seq);
        self.dirty
            && self.last_save.elapsed() >= self.snapshot_interval
            && since >= self.saved_at_seq.max(1)
    }

    /// Writes `session.json` now (atomic replace, conditional on the revision).
    pub async fn save(&mut self) -> RuntimeResult<()> {
        // Only the holder of the writer lock may write the snapshot: a recorder whose session
        // was dropped (events still draining from a killed agent's pipe) must not race the
        // next holder's open. The upgraded guard keeps the lock held for the whole save.
        let Some(_writer) = self.writer.upgrade() else {
            return Err(RuntimeError::Store(self.writer_released()));
        };
        self.store.save(&mut self.record).await?;
        self.dirty = false;
        self.last_save = Instant::now();
        self.saved_at_seq = self.record.acpx.audit_seq;
        Ok(())
    }

    /// The background flusher's call: saves if a save is due ([`Recorder::save_is_due`]) or
    /// if there are unsaved changes and no event came for a snapshot interval (the stream
    /// paused or ended).
    pub async fn save_if_due_or_paused(&mut self) -> RuntimeResult<()> {
        let paused = self.dirty && self.last_event_at.elapsed() >= self.snapshot_interval;
        if paused || self.save_is_due() {
            self.save().await?;
        }
        Ok(())
    }

    /// Saves if there are unsaved changes.
    pub async fn save_if_dirty(&mut self) -> RuntimeResult<()> {
        if self.dirty {
            self.save().await?;
        }
        Ok(())
    }

    /// Retries the append of events that could not be written yet.
    pub async fn retry_unwritten(&mut self) -> RuntimeResult<()> {
        if self.unwritten.is_empty() {
            return Ok(());
        }
        let result = self.append_unwritten().await;
        self.record.note_append_result(&result);
        self.dirty = true;
        if result.is_ok() {
            // Stored now: shown now, in order, as `record` shows held-back events.
            for e in std::mem::take(&mut self.unwritten) {
                for o in self.observers.iter().chain(self.turn_observer.iter()) {
                    o(&e);
                }
            }
        }
        Ok(())
    }

    /// Pushes appends made with [`Durability::None`] to the operating system.
    pub async fn flush_log(&mut self) -> RuntimeResult<()> {
        self.store.flush(&self.record.acpx_record_id).await?;
        Ok(())
    }
}
