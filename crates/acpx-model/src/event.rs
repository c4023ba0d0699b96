//! The NDJSON audit log: one [`EventEnvelope`] per line.
//!
//! The envelope keeps `type` as a string and `payload` as raw JSON, so an event type or a field
//! this version does not know is kept and written back unchanged. [`EventEnvelope::payload_typed`]
//! gives the typed view of the event types the seed defines.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::id::RecordId;
use crate::session::PermissionStats;
use crate::time::Timestamp;

/// The envelope version this crate writes.
pub const EVENT_VERSION: u32 = 1;

macro_rules! open_enum {
    ($(#[$meta:meta])* $name:ident { $($variant:ident => $wire:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub enum $name {
            $($variant,)+
            /// A value written by a newer version; kept as is.
            Other(String),
        }

        impl $name {
            pub fn as_str(&self) -> &str {
                match self {
                    $($name::$variant => $wire,)+
                    $name::Other(s) => s,
                }
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                match s {
                    $($wire => $name::$variant,)+
                    other => $name::Other(other.to_owned()),
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = std::borrow::Cow::<'de, str>::deserialize(d)?;
                Ok($name::from(s.as_ref()))
            }
        }
    };
}

open_enum!(
    /// `stream`: which flow an event belongs to.
    EventStream {
        Prompt => "prompt",
        Control => "control",
        Lifecycle => "lifecycle",
        Queue => "queue",
    }
);

open_enum!(
    /// `source`: who produced an event.
    EventSource {
        Acp => "acp",
        Runtime => "runtime",
        Queue => "queue",
        Client => "client",
    }
);

/// One line of `events.ndjson`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventEnvelope {
    pub event_version: u32,
    /// Strictly increasing per session, starting at 1, without gaps.
    pub seq: u64,
    pub timestamp: Timestamp,
    pub acpx_record_id: RecordId,
    pub acp_session_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    pub stream: EventStream,
    pub source: EventSource,
    #[serde(rename = "type")]
    pub event_type: String,
    pub payload: Value,
    /// Envelope keys this version does not know.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The fields of an envelope that the caller chooses; [`EventEnvelope::new`] adds the rest.
#[derive(Debug, Clone)]
pub struct EventContext<'a> {
    pub acpx_record_id: &'a RecordId,
    pub acp_session_id: &'a str,
    pub request_id: Option<&'a str>,
    pub stream: EventStream,
    pub source: EventSource,
}

impl EventEnvelope {
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
            event_type,
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

    /// The typed view of the payload. Unknown event types come back as
    /// [`EventPayload::Unknown`]; a known type whose payload does not fit is an error.
    pub fn payload_typed(&self) -> Result<EventPayload, serde_json::Error> {
        EventPayload::from_parts(&self.event_type, &self.payload)
    }
}

/// Typed payloads of the event types in the seed session model.
#[derive(Debug, Clone, PartialEq)]
pub enum EventPayload {
    SessionUpdate(SessionUpdatePayload),
    ClientOperation(ClientOperationPayload),
    PromptStarted(PromptStartedPayload),
    PromptDone(PromptDonePayload),
    PromptError(PromptErrorPayload),
    ControlStarted(ControlStartedPayload),
    ControlDone(ControlDonePayload),
    ControlError(ControlErrorPayload),
    QueueEvent(QueueEventPayload),
    LifecycleEvent(LifecycleEventPayload),
    /// An event type this version does not know, kept as is.
    Unknown {
        event_type: String,
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

            pub fn into_parts(self) -> (String, Value) {
                match self {
                    $(EventPayload::$variant(p) => (
                        $wire.to_owned(),
                        serde_json::to_value(p).unwrap_or(Value::Null),
                    ),)+
                    EventPayload::Unknown { event_type, payload } => (event_type, payload),
                }
            }

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
    #[serde(rename = "sessionId")]
    pub session_id: String,
    pub update: Value,
    /// `_meta` and any other key, exactly as received (absent stays absent, `null` stays `null`).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `client_operation`: a request the agent made of the client (fs, terminal, permission).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClientOperationPayload {
    pub method: String,
    /// `running`, `completed` or `failed`.
    pub status: String,
    pub summary: String,
    #[serde(default)]
    pub details: Option<String>,
    pub timestamp: Timestamp,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PromptStartedPayload {
    /// The first 200 characters of the prompt.
    pub message_preview: String,
    pub resumed: bool,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptDonePayload {
    pub stop_reason: String,
    pub permission_stats: PermissionStats,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A JSON-RPC error object as the agent sent it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AcpErrorObject {
    pub code: i64,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptErrorPayload {
    pub code: String,
    #[serde(default)]
    pub detail_code: Option<String>,
    pub message: String,
    pub retryable: bool,
    #[serde(default)]
    pub acp: Option<AcpErrorObject>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ControlStartedPayload {
    pub action: String,
    pub input: Value,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ControlDonePayload {
    pub action: String,
    pub ok: bool,
    pub result: Value,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `{code, detailCode, message}` of a failed control request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ControlErrorDetail {
    pub code: String,
    #[serde(default)]
    pub detail_code: Option<String>,
    pub message: String,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ControlErrorPayload {
    pub action: String,
    pub ok: bool,
    pub error: ControlErrorDetail,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueEventPayload {
    pub phase: String,
    #[serde(default)]
    pub request_id: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `lifecycle_event`: agent process start/exit, reconnects, fallbacks, recovered turns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LifecycleEventPayload {
    pub phase: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
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
    fn envelope_matches_the_seed_shape() {
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
