//! The NDJSON audit log: one [`EventEnvelope`] per line.
//!
//! The envelope keeps `type` as an open [`EventType`] and `payload` as raw JSON, so an event
//! type or a field this version does not know is kept and written back unchanged.
//! [`EventEnvelope::payload_typed`] gives the typed view of the event types listed in
//! `docs/format.md`, "`events.ndjson`".

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::id::RecordId;
use crate::time::Timestamp;

/// The envelope version this crate writes.
pub const EVENT_VERSION: u32 = 1;

open_enum!(
    /// `stream`: which flow an event belongs to.
    EventStream {
        /// A prompt turn and what the agent sent during it.
        Prompt => "prompt",
        /// Control requests: mode, config option, cancel.
        Control => "control",
        /// The agent process and the ACP session: start, exit, attach, fallback, close.
        Lifecycle => "lifecycle",
        /// The prompt queue.
        Queue => "queue",
    }
);

open_enum!(
    /// `source`: who produced an event.
    EventSource {
        /// The agent, over ACP.
        Acp => "acp",
        /// The acpx runtime itself.
        Runtime => "runtime",
        /// The prompt queue.
        Queue => "queue",
        /// The client side of ACP (file system, terminals, permissions).
        Client => "client",
    }
);

open_enum!(
    /// `type`: what an event records; selects the shape of its payload ([`EventPayload`]).
    EventType {
        /// An ACP `session/update` notification, exactly as received.
        SessionUpdate => "session_update",
        /// A request the agent made of the client.
        ClientOperation => "client_operation",
        /// A prompt turn began.
        PromptStarted => "prompt_started",
        /// A prompt turn ended with the agent's answer.
        PromptDone => "prompt_done",
        /// A prompt turn ended without an answer (failure, timeout, cancel, interruption).
        PromptError => "prompt_error",
        /// A control request was sent.
        ControlStarted => "control_started",
        /// A control request succeeded.
        ControlDone => "control_done",
        /// A control request failed.
        ControlError => "control_error",
        /// The prompt queue changed.
        QueueEvent => "queue_event",
        /// The agent process or the ACP session changed state ([`LifecyclePhase`]).
        LifecycleEvent => "lifecycle_event",
    }
);

open_enum!(
    /// `phase` of a `lifecycle_event`: which change of the agent process or the ACP session
    /// it records. `acpx-runtime`'s `mapping::lifecycle` documents each phase's keys and what
    /// it does to the snapshot.
    LifecyclePhase {
        /// The agent process was spawned.
        AgentStarted => "agent_started",
        /// `initialize` was answered.
        Initialized => "initialized",
        /// `authenticate` succeeded.
        Authenticated => "authenticated",
        /// The agent advertised auth methods and none had a credential (`skip` policy).
        AuthenticationSkipped => "authentication_skipped",
        /// `session/new` was answered.
        SessionCreated => "session_created",
        /// `session/load` or `session/resume` succeeded.
        SessionAttached => "session_attached",
        /// Load or resume failed and a fresh ACP session replaced the old one.
        SessionFallback => "session_fallback",
        /// The agent process ended.
        AgentExit => "agent_exit",
        /// The record named an agent process of an earlier acpx process that did not shut
        /// down cleanly.
        StaleAgent => "stale_agent",
        /// Events the snapshot had folded in never reached the log.
        LogGap => "log_gap",
        /// The session was closed.
        SessionClosed => "session_closed",
        /// The session was created as a fork of another one.
        SessionForked => "session_forked",
    }
);

open_enum!(
    /// `action` of a control request (`control_started`, `control_done`, `control_error`)
    /// and of [`crate::LastControlUpdate`].
    ControlAction {
        /// `session/set_mode`.
        SetMode => "set_mode",
        /// `session/set_config_option`.
        SetConfigOption => "set_config_option",
        /// `session/set_model`.
        SetModel => "set_model",
        /// `session/cancel`.
        Cancel => "cancel",
    }
);

open_enum!(
    /// `phase` of a `queue_event`: what happened to a task of a session's queue owner
    /// (`docs/format.md`, § Queue owner).
    QueuePhase {
        /// The owner queued the task.
        Accepted => "accepted",
        /// The task reached the head of the queue.
        Started => "started",
        /// The task ended with an answer (a turn of any outcome, or a control's result).
        Done => "done",
        /// The task failed without an answer.
        Error => "error",
    }
);

open_enum!(
    /// `status` of a `client_operation`.
    ClientOperationStatus {
        /// Started, not finished yet.
        Running => "running",
        /// Finished successfully.
        Completed => "completed",
        /// Finished with an error (or was denied).
        Failed => "failed",
    }
);

/// One line of `events.ndjson`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventEnvelope {
    /// `eventVersion`: the envelope version ([`EVENT_VERSION`] for events this crate writes).
    pub event_version: u32,
    /// Strictly increasing per session, starting at 1, without gaps.
    pub seq: u64,
    /// When the event was recorded.
    pub timestamp: Timestamp,
    /// The session it belongs to.
    pub acpx_record_id: RecordId,
    /// The ACP session id in use when the event was recorded.
    pub acp_session_id: String,
    /// The turn or control request it belongs to; absent when not request-scoped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// Which flow the event belongs to.
    pub stream: EventStream,
    /// Who produced the event.
    pub source: EventSource,
    /// `type`: what the event records. A type this version does not know is kept as
    /// [`EventType::Other`] and written back exactly as read.
    #[serde(rename = "type")]
    pub event_type: EventType,
    /// The type-specific body, as raw JSON ([`EventEnvelope::payload_typed`] parses it).
    pub payload: Value,
    /// Envelope keys this version does not know.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The fields of an envelope that the caller chooses; [`EventEnvelope::new`] adds the rest.
#[derive(Debug, Clone)]
pub struct EventContext<'a> {
    /// The session the event belongs to.
    pub acpx_record_id: &'a RecordId,
    /// The ACP session id in use.
    pub acp_session_id: &'a str,
    /// The turn or control request, if the event is request-scoped.
    pub request_id: Option<&'a str>,
    /// Which flow the event belongs to.
    pub stream: EventStream,
    /// Who produced the event.
    pub source: EventSource,
}

impl EventEnvelope {
    /// An envelope of the current [`EVENT_VERSION`] around `payload`, without unknown keys.
    pub fn new(
        ctx: &EventContext<'_>,
        seq: u64,
        timestamp: Timestamp,
        payload: EventPayload,
    ) -> Self {
        let (event_type, payload) = payload.into_parts();
        EventEnvelope {
            event_version: EVENT_VERSION,
            seq,
            timestamp,
            acpx_record_id: ctx.acpx_record_id.clone(),
            acp_session_id: ctx.acp_session_id.to_owned(),
            request_id: ctx.request_id.map(str::to_owned),
            stream: ctx.stream.clone(),
            source: ctx.source.clone(),
            event_type: EventType::from(event_type),
            payload,
            extra: Map::new(),
        }
    }

    /// Appends this event as one NDJSON line (JSON text plus `\n`) to `out`.
    pub fn write_ndjson_line(&self, out: &mut Vec<u8>) {
        // Cannot fail: all keys are strings and no Serialize impl here returns an error.
        if serde_json::to_writer(&mut *out, self).is_ok() {
            out.push(b'\n');
        }
    }

    /// The NDJSON line for this event, without the trailing newline.
    pub fn to_ndjson(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Parses one line (with or without its trailing newline).
    pub fn from_ndjson_line(line: &[u8]) -> Result<Self, serde_json::Error> {
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        serde_json::from_slice(line)
    }

    /// The event's `type` (a copy of [`EventEnvelope::event_type`]).
    pub fn kind(&self) -> EventType {
        self.event_type.clone()
    }

    /// The typed view of the payload. Unknown event types come back as
    /// [`EventPayload::Unknown`]; a known type whose payload does not fit is an error.
    pub fn payload_typed(&self) -> Result<EventPayload, serde_json::Error> {
        EventPayload::from_parts(self.event_type.as_str(), &self.payload)
    }
}

/// Permission requests of one turn (a `prompt_done`'s, and the session's last turn's).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PermissionStats {
    /// Requests the agent made.
    pub requested: u64,
    /// Requests approved.
    pub approved: u64,
    /// Requests denied.
    pub denied: u64,
    /// Requests cancelled (the turn ended first).
    pub cancelled: u64,
}

/// Typed payloads of the event types listed in `docs/format.md`, "`events.ndjson`".
#[derive(Debug, Clone, PartialEq)]
pub enum EventPayload {
    /// `session_update`.
    SessionUpdate(SessionUpdatePayload),
    /// `client_operation`.
    ClientOperation(ClientOperationPayload),
    /// `prompt_started`.
    PromptStarted(PromptStartedPayload),
    /// `prompt_done`.
    PromptDone(PromptDonePayload),
    /// `prompt_error`.
    PromptError(PromptErrorPayload),
    /// `control_started`.
    ControlStarted(ControlStartedPayload),
    /// `control_done`.
    ControlDone(ControlDonePayload),
    /// `control_error`.
    ControlError(ControlErrorPayload),
    /// `queue_event`.
    QueueEvent(QueueEventPayload),
    /// `lifecycle_event`.
    LifecycleEvent(LifecycleEventPayload),
    /// An event type this version does not know, kept as is.
    Unknown {
        /// The `type` as written.
        event_type: String,
        /// The payload as written.
        payload: Value,
    },
}

macro_rules! payload_dispatch {
    ($($variant:ident => $wire:literal),+ $(,)?) => {
        impl EventPayload {
            /// The `type` discriminator of this payload.
            pub fn event_type(&self) -> &str {
                match self {
                    $(EventPayload::$variant(_) => $wire,)+
                    EventPayload::Unknown { event_type, .. } => event_type,
                }
            }

            /// The `type` of this payload as an [`EventType`].
            pub fn kind(&self) -> EventType {
                EventType::from(self.event_type())
            }

            /// The `type` string and the payload as JSON, as an envelope stores them.
            pub fn into_parts(self) -> (String, Value) {
                match self {
                    $(EventPayload::$variant(p) => (
                        $wire.to_owned(),
                        serde_json::to_value(p).unwrap_or(Value::Null),
                    ),)+
                    EventPayload::Unknown { event_type, payload } => (event_type, payload),
                }
            }

            /// The typed payload of an event of type `event_type`; an unknown type gives
            /// [`EventPayload::Unknown`], a known type whose payload does not fit an error.
            pub fn from_parts(event_type: &str, payload: &Value) -> Result<Self, serde_json::Error> {
                Ok(match event_type {
                    $($wire => EventPayload::$variant(serde_json::from_value(payload.clone())?),)+
                    other => EventPayload::Unknown {
                        event_type: other.to_owned(),
                        payload: payload.clone(),
                    },
                })
            }
        }
    };
}

payload_dispatch!(
    SessionUpdate => "session_update",
    ClientOperation => "client_operation",
    PromptStarted => "prompt_started",
    PromptDone => "prompt_done",
    PromptError => "prompt_error",
    ControlStarted => "control_started",
    ControlDone => "control_done",
    ControlError => "control_error",
    QueueEvent => "queue_event",
    LifecycleEvent => "lifecycle_event",
);

/// `session_update`: the ACP `session/update` notification body exactly as received.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionUpdatePayload {
    /// The ACP session id the notification named.
    #[serde(rename = "sessionId")]
    pub session_id: String,
    /// The `update` object (`sessionUpdate` discriminator and its fields).
    pub update: Value,
    /// `_meta` and any other key, exactly as received (absent stays absent, `null` stays `null`).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `client_operation`: a request the agent made of the client (fs, terminal, permission).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClientOperationPayload {
    /// The ACP method the agent called (`fs/read_text_file`, `terminal/create`, …).
    pub method: String,
    /// Whether it is still running, completed or failed.
    pub status: ClientOperationStatus,
    /// A short human-readable line.
    pub summary: String,
    /// More detail (an error message, for example).
    #[serde(default)]
    pub details: Option<String>,
    /// When the operation reached this status.
    pub timestamp: Timestamp,
    /// Method-specific keys (`docs/format.md`, "Keys the runtime adds").
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `prompt_started`: a turn began.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PromptStartedPayload {
    /// The first 200 characters of the prompt.
    pub message_preview: String,
    /// Whether the turn runs in a session reattached with `session/load` or `session/resume`.
    pub resumed: bool,
    /// Keys this version does not know; kept and written back unchanged.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `prompt_done`: the agent answered the prompt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptDonePayload {
    /// The ACP `stopReason` (`end_turn`, `cancelled`, …).
    pub stop_reason: String,
    /// Permission requests of the turn and how they were decided.
    pub permission_stats: PermissionStats,
    /// Keys this version does not know; kept and written back unchanged.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A JSON-RPC error object as the agent sent it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AcpErrorObject {
    /// The JSON-RPC error code.
    pub code: i64,
    /// The error message.
    pub message: String,
    /// Extra data, when the agent sent any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

/// `prompt_error`: the turn ended without an answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptErrorPayload {
    /// The error class (`RUNTIME`, `TIMEOUT`, …).
    pub code: String,
    /// A finer, machine-readable reason.
    #[serde(default)]
    pub detail_code: Option<String>,
    /// A human-readable message.
    pub message: String,
    /// Whether trying again may succeed.
    pub retryable: bool,
    /// The JSON-RPC error the agent answered with, if any.
    #[serde(default)]
    pub acp: Option<AcpErrorObject>,
    /// Keys this version does not know; kept and written back unchanged.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `control_started`: a control request was sent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ControlStartedPayload {
    /// What was asked.
    pub action: ControlAction,
    /// The request's parameters.
    pub input: Value,
    /// Keys this version does not know; kept and written back unchanged.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `control_done`: a control request succeeded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ControlDonePayload {
    /// What was asked.
    pub action: ControlAction,
    /// Always `true` here.
    pub ok: bool,
    /// The agent's answer.
    pub result: Value,
    /// Keys this version does not know; kept and written back unchanged.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `{code, detailCode, message}` of a failed control request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ControlErrorDetail {
    /// The error class.
    pub code: String,
    /// A finer, machine-readable reason.
    #[serde(default)]
    pub detail_code: Option<String>,
    /// A human-readable message.
    pub message: String,
    /// Keys this version does not know; kept and written back unchanged.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `control_error`: a control request failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ControlErrorPayload {
    /// What was asked.
    pub action: ControlAction,
    /// Always `false` here.
    pub ok: bool,
    /// Why it failed.
    pub error: ControlErrorDetail,
    /// Keys this version does not know; kept and written back unchanged.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `queue_event`: the prompt queue changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueEventPayload {
    /// What happened to the task.
    pub phase: QueuePhase,
    /// The queued request concerned, if any.
    #[serde(default)]
    pub request_id: Option<String>,
    /// Keys this version does not know; kept and written back unchanged.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `lifecycle_event`: agent process start/exit, reconnects, fallbacks, recovered turns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LifecycleEventPayload {
    /// Which change this records.
    pub phase: LifecyclePhase,
    /// The agent's exit code (`agent_exit`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The signal that ended the agent (`agent_exit`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
    /// Why it happened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Keys this version does not know; kept and written back unchanged.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ctx(id: &RecordId) -> EventContext<'_> {
        EventContext {
            acpx_record_id: id,
            acp_session_id: "acp-1",
            request_id: Some("req_1"),
            stream: EventStream::Prompt,
            source: EventSource::Runtime,
        }
    }

    #[test]
    fn envelope_matches_the_documented_shape() {
        let id = RecordId::parse("rec-1").unwrap();
        let e = EventEnvelope::new(
            &ctx(&id),
            413,
            Timestamp::parse("2026-02-27T12:10:00Z").unwrap(),
            EventPayload::PromptStarted(PromptStartedPayload {
                message_preview: "hi".into(),
                resumed: true,
                extra: Map::new(),
            }),
        );
        assert_eq!(
            e.to_ndjson(),
            r#"{"eventVersion":1,"seq":413,"timestamp":"2026-02-27T12:10:00.000Z","acpxRecordId":"rec-1","acpSessionId":"acp-1","requestId":"req_1","stream":"prompt","source":"runtime","type":"prompt_started","payload":{"message_preview":"hi","resumed":true}}"#
        );
    }

    #[test]
    fn unknown_types_and_fields_round_trip_byte_for_byte() {
        let line = r#"{"eventVersion":1,"seq":7,"timestamp":"2026-02-27T12:10:00.000Z","acpxRecordId":"rec-1","acpSessionId":"a","stream":"telemetry","source":"sidecar","type":"x.acme.metric","payload":{"z":1,"a":[true,null]},"futureKey":{"k":"v"}}"#;
        let e = EventEnvelope::from_ndjson_line(line.as_bytes()).unwrap();
        assert_eq!(e.stream, EventStream::Other("telemetry".into()));
        assert!(matches!(
            e.payload_typed().unwrap(),
            EventPayload::Unknown { .. }
        ));
        assert_eq!(e.to_ndjson(), line);
    }

    #[test]
    fn known_payloads_keep_unknown_fields() {
        let p = json!({"phase": "agent_exit", "exitCode": 1, "signal": null, "reason": "process_exit", "extraInfo": 5});
        let typed = EventPayload::from_parts("lifecycle_event", &p).unwrap();
        let EventPayload::LifecycleEvent(l) = &typed else {
            panic!()
        };
        assert_eq!(l.exit_code, Some(1));
        let (_, back) = typed.into_parts();
        assert_eq!(back["extraInfo"], json!(5));
    }

    #[test]
    fn session_update_payload_is_the_raw_notification() {
        let raw = json!({"sessionId": "s", "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"}, "newField": 1}, "_meta": null});
        let t = EventPayload::from_parts("session_update", &raw).unwrap();
        let (ty, back) = t.into_parts();
        assert_eq!(ty, "session_update");
        assert_eq!(back, raw);
        let raw = json!({"sessionId": "s", "update": {"sessionUpdate": "plan", "entries": []}});
        let (_, back) = EventPayload::from_parts("session_update", &raw)
            .unwrap()
            .into_parts();
        assert_eq!(back, raw, "an absent _meta must stay absent");
    }
}
