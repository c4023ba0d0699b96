//! The `session_forked` lifecycle event: everything a forked session starts from.
//!
//! A fork's child record is the fold of its own log like every other record: the one event
//! that makes it a fork carries the parent's conversation and the session state the child
//! takes over, so rolling the child forward from its log alone (after a crash, or in
//! `acpx fsck --repair`) rebuilds the same snapshot (`docs/format.md`, § Lifecycle phases).
//!
//! | payload key | value | snapshot effect |
//! |---|---|---|
//! | `forkedFrom` | `{acpxRecordId, acpSessionId, seq, messageCount, method, forkedAt}`: the parent at the fork point | `acpx.forked_from` |
//! | `thread` | the parent's thread at the fork point | `thread` |
//! | `state` | `currentModeId`, `availableCommands`, `configOptions`, `desiredModeId`, `desiredConfigOptions`, `desiredModelId`, `mcpServers`, `additionalDirectories`, `protocolVersion`, `agentCapabilities` | each key present sets the field of that name (`acpx.current_mode_id`, …, `protocolVersion`, `agentCapabilities`); `currentModeId: null` clears the mode |
//!
//! A `session_forked` event without `forkedFrom` (written before the payload carried the
//! parent's state) has the origin keys at the top level; they become `acpx.forked_from` and
//! nothing else changes.

use acpx_model::{SessionRecord, Thread};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::{
    Effect, ADDITIONAL_DIRECTORIES_KEY, DESIRED_CONFIG_KEY, DESIRED_MODEL_KEY, DESIRED_MODE_KEY,
    MCP_SERVERS_KEY,
};

/// `acpx` key of a forked session: the `forkedFrom` document of its `session_forked` event.
pub const FORKED_FROM_KEY: &str = "forked_from";

/// `session_forked` payload key: the parent at the fork point.
pub const FORKED_FROM: &str = "forkedFrom";
/// `session_forked` payload key: the parent's thread.
pub const THREAD: &str = "thread";
/// `session_forked` payload key: the session state the child starts with.
pub const STATE: &str = "state";

/// The `session_forked` payload (its keys besides `phase`) that makes `child` a fork of
/// `parent`: `origin` as `forkedFrom`, the parent's thread, and as `state` the parent's
/// current mode, commands and desired mode and config values, the config options the child
/// already has (from the agent) or else the parent's, and the child's protocol version and
/// capabilities when it has them. Fails only when a long reply of the parent (a live record)
/// cannot be read back from its spill file.
pub fn session_forked_payload(
    parent: &SessionRecord,
    child: &SessionRecord,
    origin: Value,
) -> Result<Map<String, Value>, serde_json::Error> {
    let mut state = Map::new();
    state.insert("currentModeId".into(), json!(parent.acpx.current_mode_id));
    state.insert(
        "availableCommands".into(),
        json!(parent.acpx.available_commands),
    );
    let config_options = if child.acpx.config_options.is_empty() {
        &parent.acpx.config_options
    } else {
        &child.acpx.config_options
    };
    state.insert("configOptions".into(), json!(config_options));
    if let Some(v) = parent.acpx.extra.get(DESIRED_MODE_KEY) {
        state.insert("desiredModeId".into(), v.clone());
    }
    if let Some(v) = parent.acpx.extra.get(DESIRED_CONFIG_KEY) {
        state.insert("desiredConfigOptions".into(), v.clone());
    }
    if let Some(v) = parent.acpx.extra.get(DESIRED_MODEL_KEY) {
        state.insert("desiredModelId".into(), v.clone());
    }
    if let Some(v) = parent.acpx.extra.get(MCP_SERVERS_KEY) {
        state.insert("mcpServers".into(), v.clone());
    }
    if let Some(v) = parent.acpx.extra.get(ADDITIONAL_DIRECTORIES_KEY) {
        state.insert("additionalDirectories".into(), v.clone());
    }
    if let Some(v) = child.protocol_version {
        state.insert("protocolVersion".into(), json!(v));
    }
    if child
        .agent_capabilities
        .as_object()
        .is_some_and(|c| !c.is_empty())
    {
        state.insert("agentCapabilities".into(), child.agent_capabilities.clone());
    }
    let mut payload = Map::new();
    payload.insert(FORKED_FROM.into(), origin);
    payload.insert(THREAD.into(), serde_json::to_value(&parent.thread)?);
    payload.insert(STATE.into(), Value::Object(state));
    Ok(payload)
}

/// Folds a `session_forked` payload (its keys besides `phase`) into the record. A `thread`
/// that does not fit the thread shape changes nothing ([`Effect::Ignored`]).
pub(super) fn apply_session_forked(
    record: &mut SessionRecord,
    extra: &Map<String, Value>,
) -> Effect {
    let thread = match extra.get(THREAD) {
        // Read from the value in place: a long parent's thread is tens of MB as a value,
        // and a clone of it was the largest part of a fork's peak.
        Some(v) => match Thread::deserialize(v) {
            Ok(t) => Some(t),
            Err(e) => {
                return Effect::ignored(format!(
                    "session_forked: the parent's thread does not fit the thread shape: {e}"
                ))
            }
        },
        None => None,
    };
    let origin = match extra.get(FORKED_FROM) {
        Some(o) => o.clone(),
        None => Value::Object(
            extra
                .iter()
                .filter(|(k, _)| k.as_str() != THREAD && k.as_str() != STATE)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ),
    };
    record.acpx.extra.insert(FORKED_FROM_KEY.into(), origin);
    if let Some(t) = thread {
        record.thread = t;
    }
    if let Some(state) = extra.get(STATE).and_then(Value::as_object) {
        apply_state(record, state);
    }
    Effect::Applied
}

fn apply_state(record: &mut SessionRecord, state: &Map<String, Value>) {
    if let Some(v) = state.get("currentModeId") {
        record.acpx.current_mode_id = v.as_str().map(str::to_owned);
    }
    if let Some(v) = state.get("availableCommands").and_then(Value::as_array) {
        record.acpx.available_commands = v
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect();
    }
    if let Some(v) = state.get("configOptions").and_then(Value::as_array) {
        record.acpx.config_options = v.clone();
    }
    for (key, acpx_key) in [
        ("desiredModeId", DESIRED_MODE_KEY),
        ("desiredConfigOptions", DESIRED_CONFIG_KEY),
        ("desiredModelId", DESIRED_MODEL_KEY),
        ("mcpServers", MCP_SERVERS_KEY),
        ("additionalDirectories", ADDITIONAL_DIRECTORIES_KEY),
    ] {
        if let Some(v) = state.get(key).filter(|v| !v.is_null()) {
            record.acpx.extra.insert(acpx_key.to_owned(), v.clone());
        }
    }
    if let Some(v) = state
        .get("protocolVersion")
        .and_then(Value::as_u64)
        .and_then(|v| u32::try_from(v).ok())
    {
        record.protocol_version = Some(v);
    }
    if let Some(caps) = state.get("agentCapabilities").filter(|c| c.is_object()) {
        record.agent_capabilities = caps.clone();
    }
}
