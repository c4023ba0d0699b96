//! Control events (`control_done`, `control_error`) and lifecycle events.

use acpx_model::event::{ControlDonePayload, ControlErrorPayload, LifecycleEventPayload};
use acpx_model::{ControlAction, EventEnvelope, LastControlUpdate, SessionRecord, Timestamp};
use serde_json::{json, Value};

use super::{
    lifecycle, Effect, ADDITIONAL_DIRECTORIES_KEY, DESIRED_CONFIG_KEY, DESIRED_MODEL_KEY,
    DESIRED_MODE_KEY, MCP_SERVERS_KEY,
};

/// `last_control_update.payload` in the snake_case shape of `session.json`'s `acpx`
/// namespace (`docs/format.md`, § `session.json`), from a control input.
pub(super) fn control_payload(action: &ControlAction, input: &Value) -> Value {
    let get = |k: &str| input.get(k).cloned().unwrap_or(Value::Null);
    match action {
        ControlAction::SetMode => json!({"mode_id": get("modeId")}),
        ControlAction::SetConfigOption => {
            json!({"config_id": get("configId"), "value": get("value")})
        }
        ControlAction::SetModel => json!({"model_id": get("modelId")}),
        _ => input.clone(),
    }
}

pub(super) fn apply_control_done(
    record: &mut SessionRecord,
    p: &ControlDonePayload,
    event: &EventEnvelope,
    at: Timestamp,
) -> Effect {
    let input = p.extra.get("input").cloned().unwrap_or(Value::Null);
    match &p.action {
        ControlAction::SetMode => {
            if let Some(mode) = input.get("modeId").and_then(Value::as_str) {
                record.acpx.current_mode_id = Some(mode.to_owned());
                record
                    .acpx
                    .extra
                    .insert(DESIRED_MODE_KEY.into(), json!(mode));
            }
        }
        ControlAction::SetConfigOption => {
            if let Some(options) = p.result.get("configOptions").and_then(Value::as_array) {
                record.acpx.config_options = options.clone();
            }
            let is_model = input.get("isModel").and_then(Value::as_bool) == Some(true);
            if let (true, Some(id), Some(model)) = (
                is_model,
                input.get("configId").and_then(Value::as_str),
                input.get("value").and_then(Value::as_str),
            ) {
                // The model option: kept as the desired model, not as a config value, so it
                // is re-applied once (docs/format.md, "Reattach and the user's choices").
                record
                    .acpx
                    .extra
                    .insert(DESIRED_MODEL_KEY.into(), json!(model));
                if let Some(map) = record
                    .acpx
                    .extra
                    .get_mut(DESIRED_CONFIG_KEY)
                    .and_then(Value::as_object_mut)
                {
                    map.remove(id);
                }
            } else if let (Some(id), Some(value)) = (
                input.get("configId").and_then(Value::as_str),
                input.get("value"),
            ) {
                let desired = record
                    .acpx
                    .extra
                    .entry(DESIRED_CONFIG_KEY)
                    .or_insert_with(|| json!({}));
                if let Some(map) = desired.as_object_mut() {
                    map.insert(id.to_owned(), value.clone());
                }
            }
        }
        ControlAction::SetModel => {
            if let Some(model) = input.get("modelId").and_then(Value::as_str) {
                record
                    .acpx
                    .extra
                    .insert(DESIRED_MODEL_KEY.into(), json!(model));
            }
        }
        _ => {}
    }
    record.acpx.last_control_update = Some(LastControlUpdate {
        action: p.action.clone(),
        request_id: event.request_id.clone().unwrap_or_default(),
        updated_at: at,
        ok: true,
        payload: control_payload(&p.action, &input),
        error: None,
    });
    Effect::Applied
}

pub(super) fn apply_control_error(
    record: &mut SessionRecord,
    p: &ControlErrorPayload,
    event: &EventEnvelope,
    at: Timestamp,
) -> Effect {
    let input = p.extra.get("input").cloned().unwrap_or(Value::Null);
    record.acpx.last_control_update = Some(LastControlUpdate {
        action: p.action.clone(),
        request_id: event.request_id.clone().unwrap_or_default(),
        updated_at: at,
        ok: false,
        payload: control_payload(&p.action, &input),
        error: serde_json::to_value(&p.error).ok(),
    });
    Effect::Applied
}

pub(super) fn apply_lifecycle(
    record: &mut SessionRecord,
    p: &LifecycleEventPayload,
    at: Timestamp,
) -> Effect {
    let extra = &p.extra;
    let non_empty = |k: &str| {
        extra
            .get(k)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    match p.phase.as_str() {
        lifecycle::AGENT_STARTED => {
            record.pid = extra
                .get("pid")
                .and_then(Value::as_u64)
                .and_then(|p| u32::try_from(p).ok());
            record.agent_started_at = Some(
                extra
                    .get("startedAt")
                    .and_then(Value::as_str)
                    .and_then(|s| Timestamp::parse(s).ok())
                    .unwrap_or(at),
            );
        }
        lifecycle::INITIALIZED => {
            if let Some(v) = extra
                .get("protocolVersion")
                .and_then(Value::as_u64)
                .and_then(|v| u32::try_from(v).ok())
            {
                record.protocol_version = Some(v);
            }
            if let Some(caps) = extra.get("agentCapabilities").filter(|c| c.is_object()) {
                record.agent_capabilities = caps.clone();
            }
        }
        lifecycle::SESSION_CREATED
        | lifecycle::SESSION_ATTACHED
        | lifecycle::SESSION_FALLBACK
        | lifecycle::SESSION_ADOPTED => {
            if p.phase == lifecycle::SESSION_ADOPTED {
                super::adopt::open_replay(record, extra, at);
            }
            if let Some(id) = non_empty("acpSessionId") {
                record.acp_session_id = id;
            }
            // docs/format.md § Identity: replaced only by a new non-empty value, never invented.
            if let Some(id) = non_empty("agentSessionId") {
                record.agent_session_id = Some(id);
            }
            if let Some(mode) = extra
                .get("modes")
                .and_then(|m| m.get("currentModeId"))
                .and_then(Value::as_str)
            {
                record.acpx.current_mode_id = Some(mode.to_owned());
            }
            if let Some(options) = extra.get("configOptions").and_then(Value::as_array) {
                record.acpx.config_options = options.clone();
            }
            if let Some(servers) = extra.get("mcpServers").filter(|v| v.is_array()) {
                record
                    .acpx
                    .extra
                    .insert(MCP_SERVERS_KEY.into(), servers.clone());
            }
            if let Some(dirs) = extra.get("additionalDirectories").filter(|v| v.is_array()) {
                record
                    .acpx
                    .extra
                    .insert(ADDITIONAL_DIRECTORIES_KEY.into(), dirs.clone());
            }
        }
        lifecycle::CHOICE_NOT_RESTORED => {
            return Effect::ignored("a choice that could not be restored is logged only")
        }
        lifecycle::ADOPTION_REPLAYED => {
            return super::adopt::close_replay(record, extra.get("replayedUpdates"), at)
        }
        lifecycle::REQUEST_ABANDONED => {
            return Effect::ignored("a request acpx gave up on is logged only")
        }
        lifecycle::AGENT_EXIT => {
            record.pid = None;
            record.last_agent_exit_code = p.exit_code;
            record.last_agent_exit_signal = p.signal.clone();
            record.last_agent_exit_at = Some(at);
            record.last_agent_disconnect_reason = p.reason.clone();
        }
        lifecycle::AGENT_HANDED_OVER => {
            record.pid = None;
            record.last_agent_disconnect_reason = Some("handed_over".into());
        }
        lifecycle::SESSION_IMPORTED => super::imports::apply_imported(record, extra),
        lifecycle::IMPORT_TRUSTED => super::imports::apply_trusted(record, extra),
        lifecycle::STALE_AGENT => {
            record.pid = None;
            record.last_agent_disconnect_reason = p.reason.clone();
        }
        lifecycle::SESSION_FORKED => return super::fork::apply_session_forked(record, extra),
        lifecycle::SESSION_REPLAY_OF => match non_empty(super::REPLAY_OF_KEY) {
            Some(source) => {
                record
                    .acpx
                    .extra
                    .insert(super::REPLAY_OF_KEY.into(), Value::String(source));
            }
            None => return Effect::ignored("session_replay_of without a replayOf record id"),
        },
        lifecycle::SESSION_CLOSED => {
            record.closed = true;
            record.closed_at = Some(at);
            record.pid = None;
        }
        _ => {
            return Effect::ignored(format!(
                "lifecycle phase {:?} has no snapshot effect",
                p.phase
            ))
        }
    }
    Effect::Applied
}
