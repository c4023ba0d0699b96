//! The one-line items of the viewer: mode, model and config changes, fallbacks, agent
//! starts and exits, controls, the agent's file and terminal requests, its elicitations and
//! their answers, and anything the viewer does not know (shown by its type, never dropped
//! silently).

use acpx_model::EventEnvelope;
use serde_json::Value;

use super::items::{exit_text, str_of, At, Item, NoteKind};

fn push(items: &mut Vec<Item>, e: &EventEnvelope, kind: NoteKind, label: &str, text: String) {
    items.push(Item::Note {
        at: At {
            seq: e.seq,
            time: e.timestamp,
        },
        kind,
        label: label.to_owned(),
        text,
    });
}

/// The note of a lifecycle, control or unknown event.
pub fn note_of(e: &EventEnvelope, items: &mut Vec<Item>) {
    let p = &e.payload;
    match e.event_type.as_str() {
        "lifecycle_event" => lifecycle(e, p, items),
        "control_done" | "control_error" => {
            let action = str_of(p, "action").unwrap_or("control");
            let input = p.get("input").map(short_json).unwrap_or_default();
            if e.event_type.as_str() == "control_done" {
                push(items, e, NoteKind::Change, action, input);
            } else {
                let message = str_of(p, "message").unwrap_or("failed");
                push(
                    items,
                    e,
                    NoteKind::Error,
                    action,
                    format!("{input} failed: {message}"),
                );
            }
        }
        other => push(items, e, NoteKind::Internal, other, short_json(p)),
    }
}

fn lifecycle(e: &EventEnvelope, p: &Value, items: &mut Vec<Item>) {
    let phase = str_of(p, "phase").unwrap_or("lifecycle");
    let (kind, text) = match phase {
        "agent_started" => (
            NoteKind::Internal,
            format!(
                "{} (pid {})",
                str_of(p, "command").unwrap_or("agent"),
                p.get("pid").and_then(Value::as_u64).unwrap_or(0)
            ),
        ),
        "initialized" => {
            let info = p.get("agentInfo");
            let name = info.and_then(|i| str_of(i, "name")).unwrap_or("agent");
            let version = info.and_then(|i| str_of(i, "version")).unwrap_or("");
            (
                NoteKind::Internal,
                format!("{name} {version}").trim().to_owned(),
            )
        }
        "agent_exit" => {
            let reason = str_of(p, "reason").unwrap_or("");
            let code = p.get("exitCode").and_then(Value::as_i64);
            let signal = str_of(p, "signal");
            let clean = reason == "acpx_shutdown" || (code == Some(0) && signal.is_none());
            let mut text = match (code, signal) {
                (_, Some(s)) => format!("signal {s}"),
                (Some(c), None) => format!("exit code {c}"),
                (None, None) => "exited".to_owned(),
            };
            if !reason.is_empty() {
                text.push_str(&format!(" ({reason})"));
            }
            let kind = if clean {
                NoteKind::Internal
            } else {
                NoteKind::Warning
            };
            (kind, text)
        }
        "session_created" | "session_attached" | "session_forked" | "session_imported" => {
            let acp = str_of(p, "acpSessionId").unwrap_or(&e.acp_session_id);
            let kind = if phase == "session_attached" {
                NoteKind::Internal
            } else {
                NoteKind::Change
            };
            (kind, format!("ACP session {acp}"))
        }
        "session_fallback" => {
            let mut text = format!(
                "new ACP session {} (the agent could not restore {}: {})",
                str_of(p, "acpSessionId").unwrap_or("?"),
                str_of(p, "previousAcpSessionId").unwrap_or("the previous one"),
                str_of(p, "reason").unwrap_or("unknown reason"),
            );
            if let Some(err) = str_of(p, "error") {
                text.push_str(&format!("; {err}"));
            }
            (NoteKind::Warning, text)
        }
        "choice_not_restored" => (
            NoteKind::Warning,
            format!(
                "{} {} = {} not set again: {}",
                str_of(p, "kind").unwrap_or("choice"),
                str_of(p, "id").unwrap_or(""),
                p.get("value").map(short_json).unwrap_or_default(),
                str_of(p, "error").unwrap_or(""),
            ),
        ),
        _ => (NoteKind::Internal, short_json(p)),
    };
    push(items, e, kind, phase, text);
}

/// The note of a session update that is not text, a tool call, a plan or usage.
pub fn update_note(e: &EventEnvelope, tag: &str, update: &Value, items: &mut Vec<Item>) {
    let (kind, label, text) = match tag {
        "current_mode_update" => (
            NoteKind::Change,
            "mode",
            str_of(update, "currentModeId").unwrap_or("?").to_owned(),
        ),
        "config_option_update" => {
            let options = update.get("configOptions").and_then(Value::as_array);
            let text = options
                .into_iter()
                .flatten()
                .map(|o| {
                    format!(
                        "{} = {}",
                        str_of(o, "id").unwrap_or("?"),
                        o.get("currentValue").map(short_json).unwrap_or_default()
                    )
                })
                .collect::<Vec<_>>()
                .join(", ");
            (NoteKind::Change, "config", text)
        }
        "current_model_update" => (
            NoteKind::Change,
            "model",
            str_of(update, "currentModelId")
                .or_else(|| str_of(update, "modelId"))
                .unwrap_or("?")
                .to_owned(),
        ),
        "session_info_update" => (
            NoteKind::Change,
            "title",
            str_of(update, "title").unwrap_or("").to_owned(),
        ),
        "available_commands_update" => {
            let n = update
                .get("availableCommands")
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            (
                NoteKind::Internal,
                "commands",
                format!("{n} commands available"),
            )
        }
        other => (NoteKind::Internal, other, short_json(update)),
    };
    push(items, e, kind, label, text);
}

/// The note of a client operation other than a permission request. Terminal operations are
/// shown with their tool call as well (the fold keeps their output); these lines are acpx's
/// own record and hidden unless asked, except failures.
pub fn client_note(e: &EventEnvelope, method: &str, status: &str, items: &mut Vec<Item>) {
    let p = &e.payload;
    let mut text = str_of(p, "summary").unwrap_or(method).to_owned();
    if let Some(details) = str_of(p, "details") {
        text.push_str(": ");
        text.push_str(details);
    }
    if let Some(exit) = p.get("exitStatus").filter(|x| x.is_object()) {
        if !text.contains("exit") {
            text.push_str(&format!(" ({})", exit_text(exit)));
        }
    }
    let kind = match status {
        "failed" => NoteKind::Error,
        _ if method.starts_with("fs/write") => NoteKind::Change,
        _ => NoteKind::Internal,
    };
    push(items, e, kind, method, text);
}

/// The note of an elicitation (docs/format.md § Elicitations), shown with the turn: the
/// question (its message, then a form's fields, `*` marking required ones, or the URL), the
/// answer (action, who gave it, the content sent, why when nobody chose it), and the agent's
/// `elicitation/complete`.
pub fn elicitation_note(e: &EventEnvelope, method: &str, status: &str, items: &mut Vec<Item>) {
    let p = &e.payload;
    if method != "elicitation/create" {
        let params = p.get("params").unwrap_or(&Value::Null);
        let mut text = str_of(params, "elicitationId").unwrap_or("?").to_owned();
        if p.get("endedWait").and_then(Value::as_bool) == Some(true) {
            text.push_str(" (ended the wait for the person)");
        }
        return push(items, e, NoteKind::Change, "elicitation complete", text);
    }
    if status == "running" {
        let params = p.get("params").unwrap_or(&Value::Null);
        let mut text = str_of(params, "message").unwrap_or("").to_owned();
        if let Some(url) = str_of(params, "url") {
            text.push_str(&format!(" — URL {url}"));
        }
        let schema = params.get("requestedSchema").unwrap_or(&Value::Null);
        let required: Vec<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if let Some(props) = schema.get("properties").and_then(Value::as_object) {
            let fields: Vec<String> = props
                .keys()
                .map(|k| match required.contains(&k.as_str()) {
                    true => format!("{k}*"),
                    false => k.clone(),
                })
                .collect();
            text.push_str(&format!(" — form: {}", fields.join(", ")));
        }
        return push(items, e, NoteKind::Change, "elicitation", text);
    }
    let action = str_of(p, "action").unwrap_or("answered");
    let mut text = action.to_owned();
    if let Some(by) = str_of(p, "answeredBy") {
        text.push_str(&format!(" by {by}"));
    }
    if let Some(content) = p.get("content").filter(|c| !c.is_null()) {
        text.push_str(&format!(" {}", short_json(content)));
    }
    if let Some(why) = str_of(p, "details") {
        text.push_str(&format!(": {why}"));
    }
    let kind = match action {
        "accept" => NoteKind::Change,
        _ => NoteKind::Warning,
    };
    push(items, e, kind, "elicitation answer", text);
}

/// A JSON value on one line, at most 300 characters.
pub fn short_json(v: &Value) -> String {
    let s = match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    };
    if s.chars().count() > 300 {
        let cut: String = s.chars().take(300).collect();
        format!("{cut}…")
    } else {
        s
    }
}
