//! The one-line summaries kept in the `acpx.audit_events` ring.

use acpx_model::event::ClientOperationPayload;
use acpx_model::EventEnvelope;
use serde_json::Value;

use super::Effect;

pub(super) const SUMMARY_MAX_CHARS: usize = 160;

pub(super) fn clip(s: &str, max: usize) -> String {
    let mut chars = s.chars();
    let head: String = chars.by_ref().take(max).collect();
    if chars.next().is_some() {
        format!("{head}…")
    } else {
        head
    }
}

/// The one-line summary kept in the `acpx.audit_events` ring for an event.
pub fn summarize(event: &EventEnvelope, effect: &Effect) -> String {
    let p = &event.payload;
    let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
    let base = match event.event_type.as_str() {
        "session_update" => {
            // Borrowed, not cloned: this runs for every event, chunks included.
            let u = p.get("update").unwrap_or(&Value::Null);
            let kind = s(u, "sessionUpdate");
            match kind.as_str() {
                "agent_message_chunk" | "agent_thought_chunk" | "user_message_chunk" => {
                    let content = u.get("content").unwrap_or(&Value::Null);
                    match content.get("text").and_then(Value::as_str) {
                        Some(t) => format!("{kind} ({} chars)", t.chars().count()),
                        None => format!("{kind} ({})", s(content, "type")),
                    }
                }
                "tool_call" | "tool_call_update" => {
                    let mut line = format!("{kind} {}", s(u, "toolCallId"));
                    let title = s(u, "title");
                    if !title.is_empty() {
                        line.push_str(&format!(" {title:?}"));
                    }
                    let status = s(u, "status");
                    if !status.is_empty() {
                        line.push_str(&format!(" ({status})"));
                    }
                    line
                }
                "plan" => format!(
                    "plan ({} entries)",
                    u.get("entries")
                        .and_then(Value::as_array)
                        .map_or(0, Vec::len)
                ),
                "current_mode_update" => format!("current_mode_update {}", s(u, "currentModeId")),
                "session_info_update" => format!("session_info_update {}", s(u, "title")),
                "" => "session_update (no kind)".into(),
                other => other.to_owned(),
            }
        }
        "client_operation" => match serde_json::from_value::<ClientOperationPayload>(p.clone()) {
            Ok(op) => format!("{} {}: {}", op.method, op.status, op.summary),
            Err(_) => "client_operation".into(),
        },
        "prompt_started" => format!("prompt: {}", s(p, "message_preview")),
        "prompt_done" => format!("done: {}", s(p, "stopReason")),
        "prompt_error" => format!("error {}: {}", s(p, "code"), s(p, "message")),
        "control_started" | "control_done" | "control_error" => {
            format!("{} {}", event.event_type, s(p, "action"))
        }
        "lifecycle_event" => {
            let mut line = s(p, "phase");
            let reason = s(p, "reason");
            if !reason.is_empty() {
                line.push_str(&format!(": {reason}"));
            }
            line
        }
        other => other.to_owned(),
    };
    let line = match effect {
        Effect::Ignored(why) if event.event_type == "session_update" => {
            format!("{base} [not mapped: {why}]")
        }
        _ => base,
    };
    clip(&line, SUMMARY_MAX_CHARS)
}
