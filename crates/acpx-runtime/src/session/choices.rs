//! The user's choices — the desired mode, config values and model — set again after every
//! attach (created, resumed, loaded, fallback, fork), before anything else is sent.
//!
//! Agents keep the mode and model in process memory, so a new agent process (every `acpx`
//! command starts one) begins in its defaults whatever ACP said before. A mode is a safety
//! boundary: when it cannot be set again the session is not opened
//! ([`RuntimeError::ModeNotRestored`]), so no prompt runs in a more permissive mode. A config
//! value or a model is not: its failure is logged (`choice_not_restored`), reported as a
//! [`Notice`], and the session goes on (`docs/format.md`, "Reattach and the user's choices").

use acpx_model::SessionRecord;
use serde_json::{json, Value};

use crate::error::{RuntimeError, RuntimeResult};
use crate::mapping::{lifecycle, DESIRED_CONFIG_KEY, DESIRED_MODEL_KEY, DESIRED_MODE_KEY};

use super::controls::Controls;
use super::{lifecycle_draft, lifecycle_payload, Notice, Session};

/// What the user chose for a session.
#[derive(Debug, Default, Clone)]
pub(super) struct Desired {
    pub(super) mode: Option<String>,
    pub(super) config: Vec<(String, Value)>,
    pub(super) model: Option<String>,
}

impl Desired {
    /// The choices stored in `record`. `with_current_mode`: also keep the last mode the
    /// agent reported when the user chose none (used after a fallback, where the new session
    /// would otherwise start in the agent's default).
    pub(super) fn of(record: &SessionRecord, with_current_mode: bool) -> Desired {
        let extra = &record.acpx.extra;
        let mut mode = extra
            .get(DESIRED_MODE_KEY)
            .and_then(Value::as_str)
            .map(str::to_owned);
        if mode.is_none() && with_current_mode {
            mode = record.acpx.current_mode_id.clone();
        }
        Desired {
            mode,
            config: extra
                .get(DESIRED_CONFIG_KEY)
                .and_then(Value::as_object)
                .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
                .unwrap_or_default(),
            model: extra
                .get(DESIRED_MODEL_KEY)
                .and_then(Value::as_str)
                .map(str::to_owned),
        }
    }
}

/// How a model is selected with this agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ModelRoute {
    /// `session/set_config_option` on this option (id `model`, or category `model`).
    ConfigOption(String),
    /// The unstable `session/set_model` (the session answer listed `models`).
    SetModel,
    /// The session answer offers no model selection: both requests are tried in turn.
    Unavailable,
}

/// The model config option's id: the option whose id is `model`, else the first whose
/// category is `model`.
pub(crate) fn model_option_id(options: &[Value]) -> Option<String> {
    let id_of = |o: &Value| o.get("id").and_then(Value::as_str).map(str::to_owned);
    options
        .iter()
        .find(|o| o.get("id").and_then(Value::as_str) == Some("model"))
        .and_then(id_of)
        .or_else(|| {
            options
                .iter()
                .find(|o| o.get("category").and_then(Value::as_str) == Some("model"))
                .and_then(id_of)
        })
}

pub(super) fn model_route(config_options: &[Value], models: Option<&Value>) -> ModelRoute {
    match model_option_id(config_options) {
        Some(id) => ModelRoute::ConfigOption(id),
        None if models.is_some_and(Value::is_object) => ModelRoute::SetModel,
        None => ModelRoute::Unavailable,
    }
}

fn current_config_value<'a>(options: &'a [Value], id: &str) -> Option<&'a Value> {
    options
        .iter()
        .find(|o| o.get("id").and_then(Value::as_str) == Some(id))
        .and_then(|o| o.get("currentValue"))
}

/// Applies `model` by `route`.
pub(super) async fn apply_model(
    controls: &Controls<'_>,
    route: &ModelRoute,
    model: &str,
) -> RuntimeResult<Vec<Value>> {
    match route {
        ModelRoute::ConfigOption(id) => controls.set_config_option_as(id, json!(model), true).await,
        ModelRoute::SetModel => controls.set_model_rpc(model).await.map(|()| Vec::new()),
        ModelRoute::Unavailable => probe_model(controls, model).await,
    }
}

/// Selects `model` on an agent whose session answer offers no model selection: real agents
/// (pydantic-acp) still accept `session/set_config_option` with configId `model`, others
/// the unstable `session/set_model`; both are tried, in that order. A -32602 (invalid params)
/// from the first is the agent refusing this model and is returned as is; when both refuse,
/// the error carries both of the agent's own messages.
async fn probe_model(controls: &Controls<'_>, model: &str) -> RuntimeResult<Vec<Value>> {
    let by_option = match controls
        .set_config_option_as("model", json!(model), true)
        .await
    {
        Ok(options) => return Ok(options),
        Err(RuntimeError::Agent { error, .. }) if error.code != -32602 => error,
        Err(other) => return Err(other),
    };
    match controls.set_model_rpc(model).await {
        Ok(()) => Ok(Vec::new()),
        Err(RuntimeError::Agent { error, .. }) => Err(RuntimeError::InvalidInput(format!(
            "the agent offers no model selection in its session answer and refused both ways \
             to select {model:?}: `session/set_config_option` (configId `model`) failed: \
             {by_option}; `session/set_model` failed: {error}"
        ))),
        Err(other) => Err(other),
    }
}

/// Sets the user's choices again on the session `controls` talks to. `answer` is the agent's
/// new/load/resume/fork answer (its `modes`, `configOptions`, `models` say what is current).
/// `explicit_model` is a model chosen for this invocation (`--model`): its failure is an
/// error, not a notice.
pub(super) async fn restore(
    controls: &Controls<'_>,
    desired: &Desired,
    answer: &Value,
    explicit_model: Option<&str>,
) -> RuntimeResult<Vec<Notice>> {
    let mut notices = Vec::new();
    if let Some(mode) = &desired.mode {
        let current = answer
            .get("modes")
            .and_then(|m| m.get("currentModeId"))
            .and_then(Value::as_str);
        if current != Some(mode.as_str()) {
            if let Err(e) = controls.set_mode(mode).await {
                return Err(RuntimeError::ModeNotRestored {
                    mode: mode.clone(),
                    detail: e.to_string(),
                });
            }
        }
    }
    let options: Vec<Value> = answer
        .get("configOptions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let model = explicit_model
        .map(str::to_owned)
        .or_else(|| desired.model.clone());
    let model_option = model_option_id(&options);
    for (id, value) in &desired.config {
        if model.is_some() && model_option.as_deref() == Some(id.as_str()) {
            continue; // set below, as the model
        }
        if current_config_value(&options, id) == Some(value) {
            continue;
        }
        if let Err(e) = controls.set_config_option(id, value.clone()).await {
            notices.push(not_restored(controls, "config_option", id, value.clone(), &e).await?);
        }
    }
    if let Some(model) = model {
        let route = model_route(&options, answer.get("models"));
        let current = match &route {
            ModelRoute::ConfigOption(id) => current_config_value(&options, id)
                .and_then(Value::as_str)
                .map(str::to_owned),
            ModelRoute::SetModel => answer
                .get("models")
                .and_then(|m| m.get("currentModelId"))
                .and_then(Value::as_str)
                .map(str::to_owned),
            ModelRoute::Unavailable => None,
        };
        if explicit_model.is_some() || current.as_deref() != Some(model.as_str()) {
            if let Err(e) = apply_model(controls, &route, &model).await {
                if explicit_model.is_some() {
                    return Err(e);
                }
                notices.push(not_restored(controls, "model", "model", json!(model), &e).await?);
            }
        }
    }
    Ok(notices)
}

async fn not_restored(
    controls: &Controls<'_>,
    kind: &str,
    id: &str,
    value: Value,
    error: &RuntimeError,
) -> RuntimeResult<Notice> {
    tracing::warn!("could not set {kind} {id} again: {error}");
    controls
        .core
        .try_record(lifecycle_draft(lifecycle_payload(
            lifecycle::CHOICE_NOT_RESTORED,
            json!({"kind": kind, "id": id, "value": value, "error": error.to_string()}),
        )))
        .await?;
    Ok(Notice::ChoiceNotRestored {
        kind: kind.to_owned(),
        id: id.to_owned(),
        value,
        error: error.to_string(),
    })
}

impl Session {
    /// Selects the model (`--model`, `set model`): through the agent's model config option
    /// (id or category `model`) with `session/set_config_option`, else the unstable
    /// `session/set_model` when the session answer listed `models`, else both in turn (an
    /// agent may accept either without advertising it), with the agent's errors when both
    /// refuse. The record keeps it as the desired model, set again after
    /// every attach. Returns the agent's updated config options (empty for `set_model`) and
    /// whether the config option route was used.
    pub async fn set_model(&mut self, model_id: &str) -> RuntimeResult<(Vec<Value>, bool)> {
        self.ensure_connected()?;
        let (route, acp, offered) = self
            .with_record(|r| {
                let route = model_route(&r.acpx.config_options, self.models.as_ref());
                let model_option = match &route {
                    ModelRoute::ConfigOption(id) => Some(id.as_str()),
                    _ => None,
                };
                let offered = super::offered::model_ids(
                    &r.acpx.config_options,
                    model_option,
                    self.models.as_ref(),
                );
                (route, r.acp_session_id.clone(), offered)
            })
            .await;
        if let Some(ids) = &offered {
            if !ids.iter().any(|m| m == model_id) {
                return Err(super::offered::not_offered("model", model_id, ids.clone()));
            }
        }
        let controls = self.controls(&acp);
        let options = apply_model(&controls, &route, model_id)
            .await
            .map_err(|e| {
                super::offered::refused(e, "model", model_id, offered.clone().unwrap_or_default())
            })?;
        Ok((options, matches!(route, ModelRoute::ConfigOption(_))))
    }
}
