//! `session.json`: the authoritative snapshot of one session (schema `acpx.session.v1`).

use serde::de;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::error::ValidationError;
use crate::event::{ControlAction, EventType, PermissionStats};
use crate::id::RecordId;
use crate::thread::Thread;
use crate::time::Timestamp;

/// The only session schema this crate reads or writes.
pub const SESSION_SCHEMA: &str = "acpx.session.v1";

/// Default size at which the active event segment rotates (64 MiB).
pub const DEFAULT_MAX_SEGMENT_BYTES: u64 = 64 * 1024 * 1024;
/// Default number of event segments kept, the active one included.
pub const DEFAULT_MAX_SEGMENTS: u32 = 5;
/// Default capacity of the `acpx.audit_events` ring.
pub const DEFAULT_AUDIT_RING_CAPACITY: usize = 200;

/// The `schema` key: always `"acpx.session.v1"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SessionSchema;

impl Serialize for SessionSchema {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(SESSION_SCHEMA)
    }
}

impl<'de> Deserialize<'de> for SessionSchema {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = std::borrow::Cow::<'de, str>::deserialize(d)?;
        if s == SESSION_SCHEMA {
            Ok(SessionSchema)
        } else {
            Err(de::Error::custom(format!(
                "unsupported schema {s:?}; only {SESSION_SCHEMA:?} is supported"
            )))
        }
    }
}

/// One session record: identity, lifecycle bookkeeping, the conversation (`thread`) and the
/// runtime namespace (`acpx`).
///
/// Identity (see `docs/format.md`, "Identity"): `acpx_record_id` never changes; `acp_session_id`
/// is the id used on the ACP wire and may change after a fallback to `session/new`;
/// `agent_session_id` is the agent's own id, present only when the agent told us (never
/// `null`, never invented). Legacy names `id`, `sessionId` and `runtimeSessionId` are read as
/// aliases; the canonical names are written on the next save.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionRecord {
    /// Always `acpx.session.v1`.
    pub schema: SessionSchema,
    /// Optimistic-concurrency revision, maintained by the store: 1 after `create`, +1 on every
    /// successful save. See `docs/format.md`, Decisions 2.
    #[serde(default)]
    pub revision: u64,
    /// acpx's stable local id; never changes.
    #[serde(alias = "id")]
    pub acpx_record_id: RecordId,
    /// The id used in ACP calls; changes after a fallback to `session/new`.
    #[serde(alias = "sessionId")]
    pub acp_session_id: String,
    /// The agent's own session id, when the agent told us.
    #[serde(
        alias = "runtimeSessionId",
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "non_empty_string"
    )]
    pub agent_session_id: Option<String>,
    /// The command line that starts the agent.
    pub agent_command: String,
    /// The working directory of the session.
    pub cwd: String,
    /// The user's name for the session.
    #[serde(default)]
    pub name: Option<String>,
    /// When the session was created.
    pub created_at: Timestamp,
    /// When the session was last used.
    pub last_used_at: Timestamp,
    /// Whether the session was closed.
    #[serde(default)]
    pub closed: bool,
    /// When it was closed.
    #[serde(default)]
    pub closed_at: Option<Timestamp>,
    /// The running agent process, if any.
    #[serde(default)]
    pub pid: Option<u32>,
    /// When that agent process started.
    #[serde(default)]
    pub agent_started_at: Option<Timestamp>,
    /// When the latest prompt was sent.
    #[serde(default)]
    pub last_prompt_at: Option<Timestamp>,
    /// The exit code of the last agent process.
    #[serde(default)]
    pub last_agent_exit_code: Option<i32>,
    /// The signal that ended the last agent process.
    #[serde(default)]
    pub last_agent_exit_signal: Option<String>,
    /// When the last agent process ended.
    #[serde(default)]
    pub last_agent_exit_at: Option<Timestamp>,
    /// Why acpx last lost the agent.
    #[serde(default)]
    pub last_agent_disconnect_reason: Option<String>,
    /// The ACP protocol version the agent chose.
    #[serde(default)]
    pub protocol_version: Option<u32>,
    /// The agent's capabilities from `initialize`.
    #[serde(default = "empty_object")]
    pub agent_capabilities: Value,
    /// The conversation.
    pub thread: Thread,
    /// Runtime and control bookkeeping.
    pub acpx: AcpxState,
    /// Top-level keys this version does not know; kept and written back unchanged.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

fn empty_object() -> Value {
    Value::Object(Map::new())
}

/// `agentSessionId`: a `null` or empty string means "unknown", which is stored as absent.
fn non_empty_string<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(Option::<String>::deserialize(d)?.filter(|s| !s.is_empty()))
}

/// What a new session record is made from.
#[derive(Debug, Clone)]
pub struct NewSession {
    /// The new record's id.
    pub acpx_record_id: RecordId,
    /// The ACP session id.
    pub acp_session_id: String,
    /// The agent's own session id, when it told us.
    pub agent_session_id: Option<String>,
    /// The command line that starts the agent.
    pub agent_command: String,
    /// The working directory of the session.
    pub cwd: String,
    /// The user's name for the session.
    pub name: Option<String>,
}

impl SessionRecord {
    /// A fresh record (revision 0, not yet stored) with an empty thread.
    pub fn new(params: NewSession, now: Timestamp) -> Self {
        SessionRecord {
            schema: SessionSchema,
            revision: 0,
            acpx_record_id: params.acpx_record_id,
            acp_session_id: params.acp_session_id,
            agent_session_id: params.agent_session_id.filter(|s| !s.is_empty()),
            agent_command: params.agent_command,
            cwd: params.cwd,
            name: params.name,
            created_at: now,
            last_used_at: now,
            closed: false,
            closed_at: None,
            pid: None,
            agent_started_at: None,
            last_prompt_at: None,
            last_agent_exit_code: None,
            last_agent_exit_signal: None,
            last_agent_exit_at: None,
            last_agent_disconnect_reason: None,
            protocol_version: None,
            agent_capabilities: empty_object(),
            thread: Thread::new(now),
            acpx: AcpxState::default(),
            extra: Map::new(),
        }
    }

    /// Writes the record as [`SessionRecord::to_json_vec`] serializes it, streamed to
    /// `out` through a buffer (a long conversation is never held twice in memory).
    pub fn write_json(&self, out: impl std::io::Write) -> std::io::Result<()> {
        use std::io::Write as _;
        let mut out = std::io::BufWriter::with_capacity(64 * 1024, out);
        // The writer's own error comes back with its kind intact (a reader that went away is
        // `BrokenPipe`, which callers treat as the end of the output, not a failure).
        crate::json_pretty::to_writer_pretty(&mut out, self)?;
        out.write_all(b"\n")?;
        out.flush()
    }

    /// Serializes the record as written to disk (pretty-printed, trailing newline). It fails
    /// only when a long reply cannot be read back from its spill file
    /// ([`crate::ThreadText`]): every map key is a string and no other Serialize impl fails.
    pub fn to_json_vec(&self) -> std::io::Result<Vec<u8>> {
        // Sized exactly by a first pass that only counts: a long conversation's document is
        // megabytes (8 MB after a 1M-chunk turn), and a vector grown by doubling copies itself
        // at each step and holds up to twice the document at the moment of a save.
        let mut out = Vec::with_capacity(self.json_len());
        crate::json_pretty::to_writer_pretty(&mut out, self)?;
        out.push(b'\n');
        Ok(out)
    }

    /// [`SessionRecord::to_json_vec`] as a string, for a store that binds the document as
    /// text; the error names the session and says why (for a store's `Backend` error).
    pub fn to_json_string(&self) -> Result<String, String> {
        let bytes = self.to_json_vec().map_err(|e| {
            format!(
                "session {}: serializing its document: {e}",
                self.acpx_record_id
            )
        })?;
        // serde_json writes UTF-8 only; checked all the same, never assumed.
        String::from_utf8(bytes).map_err(|e| {
            format!(
                "session {}: serialized document is not UTF-8: {e}",
                self.acpx_record_id
            )
        })
    }

    /// The length in bytes of what [`SessionRecord::to_json_vec`] and
    /// [`SessionRecord::write_json`] write, counted without keeping any of it.
    pub fn json_len(&self) -> usize {
        let mut count = ByteCount(0);
        let _ = crate::json_pretty::to_writer_pretty(&mut count, self);
        count.0 + 1
    }

    /// Checks the rules that serde's types do not express.
    pub fn validate(&self, origin: &str) -> Result<(), ValidationError> {
        if self.acp_session_id.is_empty() {
            return Err(ValidationError::new(
                origin,
                "acpSessionId",
                "must not be empty",
            ));
        }
        if let Some(closed_at) = self.closed_at {
            if !self.closed {
                return Err(ValidationError::new(
                    origin,
                    "closedAt",
                    format!("is {closed_at} but `closed` is false"),
                ));
            }
        }
        if !self.agent_capabilities.is_object() {
            return Err(ValidationError::new(
                origin,
                "agentCapabilities",
                "must be a JSON object",
            ));
        }
        Ok(())
    }

    /// Records the outcome of an event-log append (`docs/format.md`, "Write ordering"): on success `event_log` takes the store's view and `last_write_error` clears;
    /// on failure `last_write_error` says what went wrong and nothing else changes.
    pub fn note_append_result<E: std::fmt::Display>(&mut self, result: &Result<EventLogState, E>) {
        match result {
            Ok(state) => self.acpx.event_log = state.clone(),
            Err(e) => self.acpx.event_log.last_write_error = Some(e.to_string()),
        }
    }
}

/// The `acpx` namespace: runtime and control bookkeeping, never conversation content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AcpxState {
    /// The agent's current session mode.
    #[serde(default)]
    pub current_mode_id: Option<String>,
    /// Names of the agent's slash commands (`docs/format.md`, Decisions 7).
    #[serde(default)]
    pub available_commands: Vec<String>,
    /// The agent's config options, as the ACP `SessionConfigOption` objects it sent.
    #[serde(default)]
    pub config_options: Vec<Value>,
    /// The latest plan the agent sent, if any.
    #[serde(default)]
    pub plan: Option<PlanState>,
    /// Seq of the last event folded into this snapshot.
    #[serde(default)]
    pub audit_seq: u64,
    /// How many summaries fell out of the `audit_events` ring.
    #[serde(default)]
    pub audit_dropped_count: u64,
    /// Compact summaries of recent events, oldest first, capped.
    #[serde(default)]
    pub audit_events: Vec<AuditEvent>,
    /// The latest prompt turn.
    #[serde(default)]
    pub last_turn: Option<LastTurn>,
    /// The latest control request.
    #[serde(default)]
    pub last_control_update: Option<LastControlUpdate>,
    /// Where the event log is and how far it has been written.
    #[serde(default)]
    pub event_log: EventLogState,
    /// Keys this version does not know (and the runtime's own, `docs/format.md`, "Keys the
    /// runtime adds"); kept and written back unchanged.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Default for AcpxState {
    fn default() -> Self {
        AcpxState {
            current_mode_id: None,
            available_commands: Vec::new(),
            config_options: Vec::new(),
            plan: None,
            audit_seq: 0,
            audit_dropped_count: 0,
            audit_events: Vec::new(),
            last_turn: None,
            last_control_update: None,
            event_log: EventLogState::default(),
            extra: Map::new(),
        }
    }
}

impl AcpxState {
    /// Pushes a summary into the ring, dropping (and counting) the oldest beyond `capacity`.
    pub fn push_audit_event(&mut self, event: AuditEvent, capacity: usize) {
        self.audit_events.push(event);
        if self.audit_events.len() > capacity {
            let excess = self.audit_events.len() - capacity;
            self.audit_events.drain(..excess);
            self.audit_dropped_count += excess as u64;
        }
    }
}

/// The latest plan: ACP `PlanEntry` objects as received.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanState {
    /// The plan entries.
    pub entries: Vec<Value>,
    /// When the plan arrived.
    pub updated_at: Timestamp,
}

/// A compact summary of one event, for quick introspection without reading the log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditEvent {
    /// The event's seq.
    pub seq: u64,
    /// The event's time.
    pub timestamp: Timestamp,
    /// The event's type.
    #[serde(rename = "type")]
    pub event_type: EventType,
    /// A short human-readable line, for example `agent_message_chunk (12 chars)`.
    pub summary: String,
}

/// `acpx.event_log`: where the audit log is and how far it has been written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventLogState {
    /// The log format version (1).
    pub format_version: u32,
    /// Where the active segment lives (a path for the file store, a URI for others).
    pub active_path: String,
    /// Segments that really exist, the active one included.
    pub segment_count: u32,
    /// Size after which the active segment rotates.
    pub max_segment_bytes: u64,
    /// Segments kept, the active one included.
    pub max_segments: u32,
    /// Seq of the last event in the log.
    pub last_seq: u64,
    /// When the log was last written.
    pub last_write_at: Option<Timestamp>,
    /// Why the latest append failed; cleared by the next successful one.
    pub last_write_error: Option<String>,
}

impl Default for EventLogState {
    fn default() -> Self {
        EventLogState {
            format_version: 1,
            active_path: String::new(),
            segment_count: 0,
            max_segment_bytes: DEFAULT_MAX_SEGMENT_BYTES,
            max_segments: DEFAULT_MAX_SEGMENTS,
            last_seq: 0,
            last_write_at: None,
            last_write_error: None,
        }
    }
}

open_enum!(
    /// `outcome` of a prompt turn (`acpx.last_turn.outcome`, and the `outcome` key of a
    /// `prompt_error` payload, `docs/format.md`, "Keys the runtime adds").
    TurnState {
        /// The turn has started and not ended yet.
        Running => "running",
        /// The agent answered.
        Completed => "completed",
        /// The turn was cancelled.
        Cancelled => "cancelled",
        /// The turn failed (an agent error, the agent process ended, …).
        Failed => "failed",
        /// The turn took longer than its timeout.
        Timeout => "timeout",
        /// The acpx process that ran the turn ended before the turn did; found on reopening.
        Interrupted => "interrupted",
    }
);

/// Terminal outcome of the latest prompt turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LastTurn {
    /// The turn's `requestId` in the event log.
    pub request_id: String,
    /// When the turn started.
    pub started_at: Timestamp,
    /// When it ended; `None` while running.
    #[serde(default)]
    pub ended_at: Option<Timestamp>,
    /// Whether it ran in a reattached session.
    #[serde(default)]
    pub resumed: bool,
    /// The agent's `stopReason`, when it answered.
    #[serde(default)]
    pub stop_reason: Option<String>,
    /// How it ended (`running` while live).
    pub outcome: TurnState,
    /// Why it did not complete.
    #[serde(default)]
    pub error: Option<TurnError>,
    /// Permission requests of the turn and how they were decided.
    #[serde(default)]
    pub permission_stats: PermissionStats,
}

/// Why a turn did not complete: `{code, detailCode, message, retryable}`, the fields of a
/// `prompt_error` payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnError {
    /// The error class.
    pub code: String,
    /// A finer, machine-readable reason.
    #[serde(default)]
    pub detail_code: Option<String>,
    /// A human-readable message.
    pub message: String,
    /// Whether trying again may succeed.
    #[serde(default)]
    pub retryable: bool,
}

/// The latest non-prompt control mutation (mode, config option, cancel).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LastControlUpdate {
    /// What was asked.
    pub action: ControlAction,
    /// The control request's `requestId` in the event log.
    pub request_id: String,
    /// When it finished.
    pub updated_at: Timestamp,
    /// Whether it succeeded.
    pub ok: bool,
    /// The request's input and result.
    #[serde(default)]
    pub payload: Value,
    /// The error, when it failed.
    #[serde(default)]
    pub error: Option<Value>,
}

/// A writer that keeps only the number of bytes written to it.
struct ByteCount(usize);

impl std::io::Write for ByteCount {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sample() -> Value {
        json!({
            "schema": "acpx.session.v1",
            "acpxRecordId": "rec-1",
            "acpSessionId": "acp-1",
            "agentCommand": "npx @zed-industries/codex-acp",
            "cwd": "/repo",
            "name": "backend",
            "createdAt": "2026-02-27T12:00:00.000Z",
            "lastUsedAt": "2026-02-27T12:10:00.000Z",
            "closed": false,
            "closedAt": null,
            "pid": 1234,
            "agentStartedAt": "2026-02-27T12:00:01.000Z",
            "lastPromptAt": "2026-02-27T12:09:40.000Z",
            "lastAgentExitCode": null,
            "lastAgentExitSignal": null,
            "lastAgentExitAt": null,
            "lastAgentDisconnectReason": null,
            "protocolVersion": 1,
            "agentCapabilities": {},
            "thread": {"version": "0.3.0", "title": "", "messages": [], "updated_at": "2026-02-27T12:10:00.000Z"},
            "acpx": {"current_mode_id": "code", "available_commands": ["create_plan", "run"]}
        })
    }

    fn parse(v: &Value) -> Result<SessionRecord, ValidationError> {
        SessionRecord::from_json_slice(&serde_json::to_vec(v).unwrap(), "s.json")
    }

    #[test]
    fn reads_the_documented_example() {
        let r = parse(&sample()).unwrap();
        assert_eq!(r.acpx_record_id.as_str(), "rec-1");
        assert_eq!(r.agent_session_id, None);
        assert_eq!(r.acpx.current_mode_id.as_deref(), Some("code"));
        let out: Value = serde_json::from_slice(&r.to_json_vec().unwrap()).unwrap();
        assert!(
            out.get("agentSessionId").is_none(),
            "unknown agentSessionId must be omitted"
        );
    }

    #[test]
    fn agent_session_id_null_or_empty_is_absent() {
        for v in [json!(null), json!("")] {
            let mut s = sample();
            s["agentSessionId"] = v;
            assert_eq!(parse(&s).unwrap().agent_session_id, None);
        }
    }

    #[test]
    fn legacy_identity_names_are_normalized() {
        let mut s = sample();
        let o = s.as_object_mut().unwrap();
        o.remove("acpxRecordId");
        o.remove("acpSessionId");
        o.insert("id".into(), json!("legacy-rec"));
        o.insert("sessionId".into(), json!("legacy-acp"));
        o.insert("runtimeSessionId".into(), json!("native-1"));
        let r = parse(&s).unwrap();
        assert_eq!(r.acpx_record_id.as_str(), "legacy-rec");
        assert_eq!(r.acp_session_id, "legacy-acp");
        assert_eq!(r.agent_session_id.as_deref(), Some("native-1"));
        let out: Value = serde_json::from_slice(&r.to_json_vec().unwrap()).unwrap();
        assert_eq!(out["acpxRecordId"], "legacy-rec");
        assert_eq!(out["acpSessionId"], "legacy-acp");
        assert_eq!(out["agentSessionId"], "native-1");
        for legacy in ["id", "sessionId", "runtimeSessionId"] {
            assert!(
                out.get(legacy).is_none(),
                "{legacy} must not be written back"
            );
        }
    }

    #[test]
    fn errors_name_the_file_and_field() {
        let mut s = sample();
        s["schema"] = json!("acpx.session.v2");
        let e = parse(&s).unwrap_err().to_string();
        assert!(
            e.contains("s.json") && e.contains("schema") && e.contains("acpx.session.v2"),
            "{e}"
        );

        let mut s = sample();
        s["thread"]["cumulative_token_usage"] = json!({"input_tokens": -3});
        let e = parse(&s).unwrap_err().to_string();
        assert!(
            e.contains("thread.cumulative_token_usage.input_tokens"),
            "{e}"
        );

        let mut s = sample();
        s["thread"]["speed"] = json!("warp");
        let e = parse(&s).unwrap_err().to_string();
        assert!(e.contains("thread.speed"), "{e}");

        let mut s = sample();
        s["thread"]["messages"] = json!([{"kind": "user", "text": "hi"}]);
        let e = parse(&s).unwrap_err().to_string();
        assert!(
            e.contains("thread.messages[0]") && e.contains("legacy"),
            "{e}"
        );

        let mut s = sample();
        s["acpxRecordId"] = json!("../escape");
        let e = parse(&s).unwrap_err().to_string();
        assert!(e.contains("acpxRecordId"), "{e}");

        let mut s = sample();
        s["createdAt"] = json!("2026-02-27 12:00");
        let e = parse(&s).unwrap_err().to_string();
        assert!(e.contains("createdAt"), "{e}");
    }

    #[test]
    fn unknown_fields_survive_a_read_modify_write() {
        let mut s = sample();
        s["futureField"] = json!({"a": [1, 2]});
        s["acpx"]["future_bookkeeping"] = json!(true);
        let mut r = parse(&s).unwrap();
        r.name = Some("renamed".into());
        let out: Value = serde_json::from_slice(&r.to_json_vec().unwrap()).unwrap();
        assert_eq!(out["futureField"], json!({"a": [1, 2]}));
        assert_eq!(out["acpx"]["future_bookkeeping"], json!(true));
    }

    #[test]
    fn non_object_documents_are_rejected() {
        let e = SessionRecord::from_json_slice(b"[1,2]", "x.json")
            .unwrap_err()
            .to_string();
        assert!(e.contains("x.json"), "{e}");
        let e = SessionRecord::from_json_slice(b"", "x.json")
            .unwrap_err()
            .to_string();
        assert!(e.contains("x.json"), "{e}");
        let e = SessionRecord::from_json_slice(&[0xff, 0xfe], "x.json")
            .unwrap_err()
            .to_string();
        assert!(e.contains("x.json"), "{e}");
        // Broken syntax is said to be broken JSON, with where; before any key, it is the
        // document's.
        for (bytes, field, at) in [
            (&b"{ broken"[..], ".", "line 1 column 3"),
            (b"{\"a\": ", "a", "line 1 column 6"),
            (b"{\"thread\": { 7", "thread", "line 1 column 14"),
        ] {
            let e = SessionRecord::from_json_slice(bytes, "x.json").unwrap_err();
            assert_eq!(e.field, field, "{e}");
            assert!(e.message.starts_with("not valid JSON: "), "{e}");
            assert!(e.message.contains(at), "{e}");
        }
    }

    #[test]
    fn audit_ring_drops_oldest_and_counts() {
        let mut a = AcpxState::default();
        for seq in 1..=5 {
            a.push_audit_event(
                AuditEvent {
                    seq,
                    timestamp: Timestamp::now(),
                    event_type: "session_update".into(),
                    summary: String::new(),
                },
                3,
            );
        }
        assert_eq!(
            a.audit_events.iter().map(|e| e.seq).collect::<Vec<_>>(),
            vec![3, 4, 5]
        );
        assert_eq!(a.audit_dropped_count, 2);
    }
}
