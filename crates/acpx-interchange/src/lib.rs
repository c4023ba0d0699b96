//! # acpx-interchange
//!
//! Recorded acpx sessions in the formats other tools read, written from a session's record
//! and its event log; pure (no I/O of its own, no async runtime): the caller feeds the events
//! and gives the sink.
//!
//! - [`atif`]: one session as an ATIF v1.8 trajectory (Harbor's Agent Trajectory
//!   Interchange Format), what evaluation harnesses and training pipelines read.
//! - [`otlp`]: one session as one OpenTelemetry trace in OTLP/JSON, with the GenAI semantic
//!   conventions' attributes, what tracing backends read.
//! - [`walk`]: the walk over the log both share, one turn at a time.
//!
//! ```
//! use acpx_interchange::{Export, Format};
//! use acpx_model::{EventEnvelope, NewSession, RecordId, SessionRecord, Timestamp};
//!
//! let id = RecordId::generate();
//! let record = SessionRecord::new(
//!     NewSession { acpx_record_id: id.clone(), acp_session_id: "s1".into(),
//!         agent_session_id: None, agent_command: "my-agent --acp".into(),
//!         cwd: "/repo".into(), name: None },
//!     Timestamp::now(),
//! );
//! // Three lines of a log: a prompt, the agent's reply, the end of the turn.
//! let line = |seq: u64, source: &str, kind: &str, payload: &str| -> EventEnvelope {
//!     serde_json::from_str(&format!(
//!         r#"{{"eventVersion":1,"seq":{seq},"timestamp":"2026-01-01T00:00:0{seq}.000Z",
//!         "acpxRecordId":"{id}","acpSessionId":"s1","requestId":"r1","stream":"prompt",
//!         "source":"{source}","type":"{kind}","payload":{payload}}}"#
//!     )).unwrap()
//! };
//! let events = [
//!     line(1, "runtime", "prompt_started", r#"{"prompt":[{"type":"text","text":"hi"}]}"#),
//!     line(2, "acp", "session_update", r#"{"sessionId":"s1","update":{
//!         "sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Hello"}}}"#),
//!     line(3, "runtime", "prompt_done", r#"{"stopReason":"end_turn"}"#),
//! ];
//! let mut out = Vec::new();
//! let mut export = Export::new(Format::Atif, &record);
//! for e in &events {
//!     export.push(e, &mut out).unwrap();
//! }
//! export.finish(&mut out).unwrap();
//! let doc: serde_json::Value = serde_json::from_slice(&out).unwrap();
//! assert_eq!(doc["steps"][0]["message"], "hi");
//! assert_eq!(doc["steps"][1]["message"], "Hello");
//! ```

#![warn(missing_docs)]

pub mod atif;
mod copied;
pub mod otlp;
pub mod walk;

use std::io::{self, Write};

use acpx_model::{EventEnvelope, SessionRecord};

/// Which interchange format an [`Export`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// An ATIF v1.8 trajectory ([`atif`]).
    Atif,
    /// An OTLP/JSON `ExportTraceServiceRequest` ([`otlp`]).
    Otlp,
}

#[derive(Debug)]
enum Writer {
    Atif(atif::AtifWriter),
    Otlp(otlp::OtlpWriter),
}

/// One session's export: [`Export::push`] every event of its log, oldest first, then
/// [`Export::finish`]. Holds one turn at a time.
#[derive(Debug)]
pub struct Export {
    walk: walk::Walk,
    writer: Writer,
}

impl Export {
    /// An export of `record` in `format`.
    pub fn new(format: Format, record: &SessionRecord) -> Self {
        Self {
            walk: walk::Walk::new(),
            writer: match format {
                Format::Atif => Writer::Atif(atif::AtifWriter::new(record)),
                Format::Otlp => Writer::Otlp(otlp::OtlpWriter::new(record)),
            },
        }
    }

    /// Folds in the next event; writes a turn to `out` when the event ends it.
    pub fn push(&mut self, e: &EventEnvelope, out: &mut dyn Write) -> io::Result<()> {
        let turn = self.walk.push(e);
        if let Some(thread) = self.walk.take_copied() {
            // A fork's starting conversation: ATIF keeps it as copied context; a trace has
            // the child's own turns only (the rest is the parent's trace).
            if let Writer::Atif(w) = &mut self.writer {
                w.copied(&thread, out)?;
            }
        }
        match turn {
            Some(turn) => self.write_turn(&turn, out),
            None => Ok(()),
        }
    }

    fn write_turn(&mut self, turn: &walk::Turn, out: &mut dyn Write) -> io::Result<()> {
        match &mut self.writer {
            Writer::Atif(w) => w.turn(turn, out),
            Writer::Otlp(w) => w.turn(self.walk.facts(), turn, out),
        }
    }

    /// Writes the last turn if the log ends inside it, and the end of the document. An ATIF
    /// export of a session without a turn fails here ([`io::ErrorKind::InvalidData`]).
    pub fn finish(mut self, out: &mut dyn Write) -> io::Result<()> {
        if let Some(turn) = self.walk.finish() {
            self.write_turn(&turn, out)?;
        }
        let facts = self.walk.facts();
        match self.writer {
            Writer::Atif(w) => w.finish(facts, out),
            Writer::Otlp(w) => w.finish(facts, out),
        }
    }
}

/// The OTLP/JSON request of one turn (by its `requestId`), for a live export after the turn:
/// feed it the session's events, oldest first, with [`TurnTrace::push`].
#[derive(Debug)]
pub struct TurnTrace {
    walk: walk::Walk,
    request_id: String,
    found: Option<Vec<u8>>,
    record: SessionRecord,
}

impl TurnTrace {
    /// Looks for the turn `request_id` of `record`.
    pub fn new(record: SessionRecord, request_id: &str) -> Self {
        Self {
            walk: walk::Walk::new(),
            request_id: request_id.to_owned(),
            found: None,
            record,
        }
    }

    /// Folds in the next event.
    pub fn push(&mut self, e: &EventEnvelope) {
        if self.found.is_some() {
            return;
        }
        if let Some(t) = self.walk.push(e) {
            if t.request_id == self.request_id {
                self.found = Some(otlp::turn_request(&self.record, self.walk.facts(), &t));
            }
        }
    }

    /// The request's body, when the turn was found (a turn the log ends inside counts).
    pub fn finish(mut self) -> Option<Vec<u8>> {
        if self.found.is_none() {
            if let Some(t) = self.walk.finish() {
                if t.request_id == self.request_id {
                    return Some(otlp::turn_request(&self.record, self.walk.facts(), &t));
                }
            }
        }
        self.found
    }
}

#[cfg(test)]
mod tests;
