//! Controls (`session/set_mode`, `session/set_config_option`) with their control events, and
//! requests raced against the agent's exit and a deadline.

use std::sync::Arc;
use std::time::Duration;

use acpx_model::event::{
    ControlDonePayload, ControlErrorDetail, ControlErrorPayload, ControlStartedPayload,
};
use acpx_model::{ControlAction, EventPayload, EventSource, EventStream};
use serde_json::{json, Map, Value};

use crate::agent::{self, AgentExit, AgentProcess, CallError, Connection};
use crate::core::{new_request_id, SessionCore};
use crate::error::{RuntimeError, RuntimeResult};
use crate::recorder::EventDraft;

use super::Session;

/// Waits for a request's answer, the agent's exit, or the deadline.
pub(super) async fn call_with_deadline(
    core: &SessionCore,
    agent: &AgentProcess,
    pending: agent::Pending,
    method: &str,
    timeout: Duration,
) -> RuntimeResult<Value> {
    let mut pending = pending;
    tokio::select! {
        r = &mut pending => match r.unwrap_or_else(|_| Err(CallError::Disconnected("the connection ended".into()))) {
            Ok(v) => Ok(v),
            Err(CallError::Disconnected(_)) => {
                // The exit status usually follows the closed output by a moment.
                let exit = tokio::time::timeout(Duration::from_secs(1), agent.wait()).await.ok().flatten();
                Err(RuntimeError::Disconnected {
                    method: method.to_owned(),
                    detail: exit_detail(exit.as_ref(), agent).await,
                })
            }
            Err(e) => Err(e.into_runtime(method)),
        },
        exit = agent.wait() => {
            // The answer may still be in flight: give it a moment.
            match tokio::time::timeout(Duration::from_millis(500), &mut pending).await {
                Ok(Ok(Ok(v))) => return Ok(v),
                Ok(Ok(Err(e @ CallError::Rpc(_)))) => return Err(e.into_runtime(method)),
                _ => {}
            }
            Err(RuntimeError::Disconnected {
                method: method.to_owned(),
                detail: exit_detail(exit.as_ref(), agent).await,
            })
        }
        _ = tokio::time::sleep(timeout) => {
            super::given_up::give_up(core, &pending, method, "timeout").await;
            Err(RuntimeError::Timeout {
                agent: agent.command.clone(),
                method: method.to_owned(),
                seconds: timeout.as_secs(),
            })
        }
    }
}

async fn exit_detail(exit: Option<&AgentExit>, agent: &AgentProcess) -> String {
    if let Some(why) = agent.cut_off() {
        return why;
    }
    let mut s = match exit {
        Some(e) => format!("the agent process {e}"),
        None => "the agent closed its output".to_owned(),
    };
    let tail = agent.final_stderr_tail(Duration::from_millis(500)).await;
    if !tail.is_empty() {
        let last: Vec<&str> = tail.lines().rev().take(5).collect();
        let last: Vec<&str> = last.into_iter().rev().collect();
        s.push_str(&format!("; its stderr ends with: {}", last.join(" | ")));
    }
    s
}

/// set_mode / set_config_option, with their control events.
pub(super) struct Controls<'a> {
    pub(super) core: &'a Arc<SessionCore>,
    pub(super) conn: &'a Connection,
    pub(super) agent: &'a AgentProcess,
    pub(super) timeout: Duration,
    pub(super) acp_session_id: &'a str,
}

impl Controls<'_> {
    async fn run(
        &self,
        action: ControlAction,
        method: &str,
        input: Value,
        params: Value,
    ) -> RuntimeResult<Value> {
        let ctl = new_request_id("ctl");
        let draft = |payload| {
            EventDraft::new(
                Some(&ctl),
                EventStream::Control,
                EventSource::Runtime,
                payload,
            )
        };
        self.core
            .try_record(draft(EventPayload::ControlStarted(ControlStartedPayload {
                action: action.clone(),
                input: input.clone(),
                extra: Map::new(),
            })))
            .await?;
        let pending = self.conn.call(method, params, |_| {});
        match call_with_deadline(self.core, self.agent, pending, method, self.timeout).await {
            Ok(result) => {
                let mut extra = Map::new();
                extra.insert("input".into(), input);
                self.core
                    .try_record(draft(EventPayload::ControlDone(ControlDonePayload {
                        action: action.clone(),
                        ok: true,
                        result: result.clone(),
                        extra,
                    })))
                    .await?;
                Ok(result)
            }
            Err(e) => {
                let (detail_code, acp) = match &e {
                    RuntimeError::Agent { error, .. } => ("ACP_ERROR", Some(error.to_json())),
                    RuntimeError::Timeout { .. } => ("TIMEOUT", None),
                    _ => ("AGENT_DISCONNECTED", None),
                };
                let mut detail_extra = Map::new();
                if let Some(a) = acp {
                    detail_extra.insert("acp".into(), a);
                }
                let mut extra = Map::new();
                extra.insert("input".into(), input);
                self.core
                    .try_record(draft(EventPayload::ControlError(ControlErrorPayload {
                        action: action.clone(),
                        ok: false,
                        error: ControlErrorDetail {
                            code: "RUNTIME".into(),
                            detail_code: Some(detail_code.into()),
                            message: e.to_string(),
                            extra: detail_extra,
                        },
                        extra,
                    })))
                    .await?;
                Err(e)
            }
        }
    }

    pub(super) async fn set_mode(&self, mode_id: &str) -> RuntimeResult<()> {
        self.run(
            ControlAction::SetMode,
            "session/set_mode",
            json!({"modeId": mode_id}),
            json!({"sessionId": self.acp_session_id, "modeId": mode_id}),
        )
        .await
        .map(|_| ())
    }

    pub(super) async fn set_config_option(
        &self,
        config_id: &str,
        value: Value,
    ) -> RuntimeResult<Vec<Value>> {
        self.set_config_option_as(config_id, value, false).await
    }

    /// `session/set_config_option`; `is_model` marks the agent's model option, whose value
    /// the record keeps as the desired model (`docs/format.md`, "Reattach and the user's
    /// choices").
    pub(super) async fn set_config_option_as(
        &self,
        config_id: &str,
        value: Value,
        is_model: bool,
    ) -> RuntimeResult<Vec<Value>> {
        let mut params =
            json!({"sessionId": self.acp_session_id, "configId": config_id, "value": value});
        if value.is_boolean() {
            params["type"] = json!("boolean");
        }
        let mut input = json!({"configId": config_id, "value": value});
        if is_model {
            input["isModel"] = json!(true);
        }
        let result = self
            .run(
                ControlAction::SetConfigOption,
                "session/set_config_option",
                input,
                params,
            )
            .await?;
        Ok(result
            .get("configOptions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default())
    }
}

impl Controls<'_> {
    /// The unstable `session/set_model`, for agents that list `models` but no model config
    /// option.
    pub(super) async fn set_model_rpc(&self, model_id: &str) -> RuntimeResult<()> {
        self.run(
            ControlAction::SetModel,
            "session/set_model",
            json!({"modelId": model_id}),
            json!({"sessionId": self.acp_session_id, "modelId": model_id}),
        )
        .await
        .map(|_| ())
    }
}

impl Session {
    pub(super) fn controls<'a>(&'a self, acp_session_id: &'a str) -> Controls<'a> {
        Controls {
            core: &self.core,
            conn: &self.conn,
            agent: &self.agent,
            timeout: self.options.request_timeout,
            acp_session_id,
        }
    }

    /// Sets the session mode (`session/set_mode`), recording control events. A mode the
    /// agent's session answer does not list among its `availableModes` is refused here,
    /// before anything is sent or recorded: an agent may answer such a request with success
    /// without switching, and the record would then keep a mode it sends again after every
    /// restart. An agent that lists no modes is asked anyway (it answers).
    pub async fn set_mode(&mut self, mode_id: &str) -> RuntimeResult<()> {
        self.ensure_connected()?;
        if let Some(available) = available_mode_ids(self.modes.as_ref()) {
            if !available.contains(&mode_id) {
                return Err(RuntimeError::UnknownMode {
                    mode: mode_id.to_owned(),
                    available: available.into_iter().map(str::to_owned).collect(),
                });
            }
        }
        let acp = self.acp_session_id().await;
        self.controls(&acp).set_mode(mode_id).await
    }

    /// Sets a config option (`session/set_config_option`; a JSON boolean is sent as a boolean
    /// option), recording control events. Returns the agent's updated option list.
    pub async fn set_config_option(
        &mut self,
        config_id: &str,
        value: Value,
    ) -> RuntimeResult<Vec<Value>> {
        self.ensure_connected()?;
        let (acp, offered) = self
            .with_record(|r| (r.acp_session_id.clone(), r.acpx.config_options.clone()))
            .await;
        super::offered::check_config(&offered, config_id, &value)?;
        let asked = value
            .as_str()
            .map_or_else(|| value.to_string(), str::to_owned);
        self.controls(&acp)
            .set_config_option(config_id, value)
            .await
            .map_err(|e| {
                let (what, available) = match offered
                    .iter()
                    .find(|o| o.get("id").and_then(Value::as_str) == Some(config_id))
                {
                    Some(o) => (
                        format!("value of config option {config_id}"),
                        super::offered::option_values(o).unwrap_or_default(),
                    ),
                    None => (
                        "config option".to_owned(),
                        super::offered::option_ids(&offered),
                    ),
                };
                let asked = if what == "config option" {
                    config_id.to_owned()
                } else {
                    asked.clone()
                };
                super::offered::refused(e, &what, &asked, available)
            })
    }

    /// Sends one ACP request this crate does not wrap (for example `session/fork`) to the
    /// agent and returns its result, with the request timeout. Nothing is recorded: the caller
    /// records what the answer means.
    pub async fn agent_request(&self, method: &str, params: Value) -> RuntimeResult<Value> {
        self.ensure_connected()?;
        let pending = self.conn.call(method, params, |_| {});
        call_with_deadline(
            &self.core,
            &self.agent,
            pending,
            method,
            self.options.request_timeout,
        )
        .await
    }
}

/// The mode ids of a session answer's `modes.availableModes`, when it lists any.
fn available_mode_ids(modes: Option<&Value>) -> Option<Vec<&str>> {
    let ids: Vec<&str> = modes?
        .get("availableModes")?
        .as_array()?
        .iter()
        .filter_map(|m| m.get("id").and_then(Value::as_str))
        .collect();
    (!ids.is_empty()).then_some(ids)
}
