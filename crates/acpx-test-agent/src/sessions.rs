//! The session methods: `initialize`, `session/new`, `load`, `resume`, `fork`, `close`, `delete`,
//! `set_mode` and `set_config_option`, and the state they keep.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use agent_client_protocol::v1::schema as acp;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::{Client, Error, UntypedMessage};
use serde_json::{json, Value};

use crate::flags::Flags;
use crate::{invalid_params, parse};

#[derive(Debug, Clone)]
pub(crate) struct SessionState {
    pub(crate) cwd: String,
    pub(crate) mode: String,
    pub(crate) model: String,
    /// The names of the MCP servers the client sent with new/load/resume/fork.
    pub(crate) mcp: Vec<String>,
    /// The `additionalDirectories` the client sent with new/load/resume/fork.
    pub(crate) dirs: Vec<String>,
}

pub(crate) struct AgentState {
    pub(crate) flags: Flags,
    /// `--lazy-fork`: the histories of forks not stored yet (until their first turn).
    pub(crate) unstored_forks: Mutex<HashMap<String, Vec<Value>>>,
    pub(crate) sessions: Mutex<HashMap<String, SessionState>>,
    pub(crate) cancelled: Mutex<HashMap<String, Arc<AtomicBool>>>,
    /// Whether `authenticate` succeeded (only asked for under `--require-auth`).
    pub(crate) authenticated: AtomicBool,
}

pub(crate) type Shared = Arc<AgentState>;

impl AgentState {
    pub(crate) fn cancel_flag(&self, session: &str) -> Arc<AtomicBool> {
        let mut m = self.cancelled.lock().unwrap_or_else(|p| p.into_inner());
        m.entry(session.to_owned())
            .or_insert_with(|| Arc::new(AtomicBool::new(false)))
            .clone()
    }

    pub(crate) fn session(&self, id: &str) -> Option<SessionState> {
        self.sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .cloned()
    }

    pub(crate) fn history_path(&self, id: &str) -> Option<PathBuf> {
        let dir = self.flags.state_dir.as_ref()?;
        let safe: String = id
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect();
        Some(dir.join(format!("{safe}.json")))
    }

    pub(crate) fn load_history(&self, id: &str) -> Option<Vec<Value>> {
        let unstored = self
            .unstored_forks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .cloned();
        if unstored.is_some() {
            return unstored;
        }
        let bytes = std::fs::read(self.history_path(id)?).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    pub(crate) fn save_history(&self, id: &str, history: &[Value]) {
        self.unstored_forks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
        if let Some(path) = self.history_path(id) {
            if let Some(dir) = path.parent() {
                let _ = std::fs::create_dir_all(dir);
            }
            let _ = std::fs::write(path, serde_json::to_vec(history).unwrap_or_default());
        }
    }

    pub(crate) fn response_meta(&self, session_id: &str) -> Option<Value> {
        if self.flags.empty_agent_session_id {
            Some(json!({"agentSessionId": ""}))
        } else if self.flags.agent_session_id {
            Some(json!({"agentSessionId": format!("native-{session_id}")}))
        } else {
            None
        }
    }
}

pub(crate) fn modes(current: &str) -> Value {
    json!({
        "currentModeId": current,
        "availableModes": [
            {"id": "default", "name": "Default"},
            {"id": "plan", "name": "Plan"},
            {"id": "code", "name": "Code"}
        ]
    })
}

/// The session answer's `modes`, `configOptions` and (with `--models`, instead of a model
/// config option) the unstable `models`, plus `extra` keys.
pub(crate) fn session_answer(state: &AgentState, s: &SessionState, extra: Value) -> Value {
    let mut v = json!({"modes": modes(&s.mode)});
    if state.flags.models {
        v["configOptions"] = json!([]);
        v["models"] = json!({
            "currentModelId": s.model,
            "availableModels": [
                {"modelId": "small", "name": "Small"},
                {"modelId": "large", "name": "Large"}
            ]
        });
    } else if !state.flags.unadvertised_model {
        v["configOptions"] = config_options(&s.model);
    }
    if let (Some(o), Value::Object(e)) = (v.as_object_mut(), extra) {
        o.extend(e);
    }
    v
}

fn additional_dirs(params: &Value) -> Vec<String> {
    params
        .get("additionalDirectories")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

fn mcp_names(params: &Value) -> Vec<String> {
    params
        .get("mcpServers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|s| s.get("name").and_then(Value::as_str).map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

pub(crate) fn config_options(model: &str) -> Value {
    json!([{
        "id": "model",
        "name": "Model",
        "category": "model",
        "type": "select",
        "currentValue": model,
        "options": [
            {"value": "small", "name": "Small"},
            {"value": "large", "name": "Large"}
        ]
    }])
}

pub(crate) fn initialize(state: &AgentState, params: &Value) -> Result<Value, Error> {
    let req: acp::InitializeRequest = parse(params)?;
    let mut session_caps = serde_json::Map::new();
    if state.flags.resume {
        session_caps.insert("resume".into(), json!({}));
    }
    if state.flags.fork {
        session_caps.insert("fork".into(), json!({}));
    }
    if state.flags.delete {
        session_caps.insert("delete".into(), json!({}));
    }
    if state.flags.close {
        session_caps.insert("close".into(), json!({}));
    }
    if state.flags.list {
        session_caps.insert("list".into(), json!({}));
    }
    if state.flags.additional_dirs {
        session_caps.insert("additionalDirectories".into(), json!({}));
    }
    eprintln!(
        "acpx-test-agent: initialize from {:?}, fs={:?} terminal={}",
        req.client_info.map(|i| i.name),
        req.client_capabilities.fs,
        req.client_capabilities.terminal
    );
    Ok(json!({
        "protocolVersion": 1,
        "agentCapabilities": {
            "loadSession": state.flags.load || state.flags.load_not_found || state.flags.load_internal_error,
            "promptCapabilities": {"image": true, "audio": false, "embeddedContext": true},
            "sessionCapabilities": session_caps,
        },
        "authMethods": auth_methods(state),
        "agentInfo": {"name": "acpx-test-agent", "version": env!("CARGO_PKG_VERSION")}
    }))
}

fn auth_methods(state: &AgentState) -> Value {
    match state.flags.auth_method() {
        Some(id) => json!([{"id": id, "name": format!("test method {id}"),
                            "description": "needs a non-empty ACPX_AUTH_<ID> in the agent's environment"}]),
        None => json!([]),
    }
}

/// The environment variable that must hold the credential of method `id`: `ACPX_AUTH_` and
/// the id upper-cased, runs of other characters than letters and digits as one `_`.
pub(crate) fn auth_env_key(id: &str) -> String {
    let mut token = String::new();
    for c in id.trim().chars() {
        if c.is_ascii_alphanumeric() {
            token.push(c.to_ascii_uppercase());
        } else if !token.ends_with('_') {
            token.push('_');
        }
    }
    format!("ACPX_AUTH_{}", token.trim_matches('_'))
}

/// `authenticate {methodId}`: succeeds for the `--require-auth` method when its credential is
/// in this process's environment.
pub(crate) fn authenticate(state: &AgentState, params: &Value) -> Result<Value, Error> {
    let method = params.get("methodId").and_then(Value::as_str).unwrap_or("");
    let Some(required) = state.flags.auth_method() else {
        return Err(invalid_params("this agent advertises no auth methods"));
    };
    if method != required {
        return Err(invalid_params(format!("unknown auth method {method:?}")));
    }
    let key = auth_env_key(required);
    if std::env::var(&key)
        .map(|v| v.trim().is_empty())
        .unwrap_or(true)
    {
        return Err(auth_required().data(json!({"methodId": required, "missing": key})));
    }
    state.authenticated.store(true, Ordering::SeqCst);
    eprintln!("acpx-test-agent: authenticated with {method}");
    Ok(json!({}))
}

fn auth_required() -> Error {
    Error::new(-32000, "Authentication required")
}

/// Under `--require-auth`, the session methods fail until `authenticate` succeeded.
pub(crate) fn check_authenticated(state: &AgentState) -> Result<(), Error> {
    match &state.flags.require_auth {
        Some(id) if !state.authenticated.load(Ordering::SeqCst) => {
            Err(auth_required().data(json!({"methodId": id, "authRequired": true})))
        }
        _ => Ok(()),
    }
}

pub(crate) fn with_meta(mut v: Value, meta: Option<Value>) -> Value {
    if let (Some(m), Some(o)) = (meta, v.as_object_mut()) {
        o.insert("_meta".into(), m);
    }
    v
}

pub(crate) fn register(state: &AgentState, id: &str, cwd: String, params: &Value) -> SessionState {
    // Mode and model live in this process only, as real agents keep them: a new agent
    // process starts every session in its defaults.
    let s = SessionState {
        cwd,
        mode: "default".into(),
        model: "small".into(),
        mcp: mcp_names(params),
        dirs: additional_dirs(params),
    };
    state
        .sessions
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(id.to_owned(), s.clone());
    s
}

pub(crate) fn new_session(state: &AgentState, params: &Value) -> Result<Value, Error> {
    let req: acp::NewSessionRequest = parse(params)?;
    if !req.cwd.is_absolute() {
        return Err(invalid_params("cwd must be absolute"));
    }
    let id = format!("sess-{}", uuid::Uuid::new_v4().simple());
    let s = register(state, &id, req.cwd.display().to_string(), params);
    if state.flags.load {
        state.save_history(&id, &[]);
        state.touch_meta(&id, &req.cwd.display().to_string(), None);
    }
    Ok(with_meta(
        session_answer(state, &s, json!({"sessionId": id})),
        state.response_meta(&id),
    ))
}

pub(crate) fn not_found(id: &str) -> Error {
    Error::new(-32002, format!("Resource not found: session {id}"))
        .data(json!({"uri": format!("session:{id}")}))
}

pub(crate) fn load_session(
    state: &AgentState,
    params: &Value,
    cx: &ConnectionTo<Client>,
) -> Result<Value, Error> {
    let req: acp::LoadSessionRequest = parse(params)?;
    let id = req.session_id.to_string();
    if state.flags.load_internal_error {
        return Err(Error::new(-32603, "Query closed before response received"));
    }
    if !state.flags.load || state.flags.load_not_found {
        return Err(not_found(&id));
    }
    let Some(history) = state.load_history(&id) else {
        return Err(not_found(&id));
    };
    for update in history {
        cx.send_notification(UntypedMessage::new(
            "session/update",
            json!({"sessionId": id, "update": update}),
        )?)?;
    }
    let s = register(state, &id, req.cwd.display().to_string(), params);
    Ok(with_meta(
        session_answer(state, &s, json!({})),
        state.response_meta(&id),
    ))
}

pub(crate) fn resume_session(state: &AgentState, params: &Value) -> Result<Value, Error> {
    let req: acp::ResumeSessionRequest = parse(params)?;
    let id = req.session_id.to_string();
    if !state.flags.resume || state.flags.resume_unsupported {
        return Err(Error::method_not_found());
    }
    if state.flags.load_not_found || (state.flags.lazy_fork && state.load_history(&id).is_none()) {
        return Err(not_found(&id));
    }
    let s = register(state, &id, req.cwd.display().to_string(), params);
    Ok(with_meta(
        session_answer(state, &s, json!({})),
        state.response_meta(&id),
    ))
}

pub(crate) fn fork_session(state: &AgentState, params: &Value) -> Result<Value, Error> {
    let req: acp::ForkSessionRequest = parse(params)?;
    if state.flags.fork_unsupported {
        return Err(Error::method_not_found());
    }
    let id = format!("sess-{}", uuid::Uuid::new_v4().simple());
    if let Some(h) = state.load_history(&req.session_id.to_string()) {
        if state.flags.lazy_fork {
            state
                .unstored_forks
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(id.clone(), h);
        } else {
            state.save_history(&id, &h);
        }
    }
    let s = register(state, &id, req.cwd.display().to_string(), params);
    Ok(with_meta(
        session_answer(state, &s, json!({"sessionId": id})),
        state.response_meta(&id),
    ))
}

pub(crate) fn close_session(state: &AgentState, params: &Value) -> Result<Value, Error> {
    let req: acp::CloseSessionRequest = parse(params)?;
    state
        .sessions
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&req.session_id.to_string());
    Ok(json!({}))
}

/// `session/delete`: forgets the session and removes its history from `--state-dir`; an
/// unknown session is -32602, as the schema's "Invalid params".
pub(crate) fn delete_session(state: &AgentState, params: &Value) -> Result<Value, Error> {
    let req: acp::DeleteSessionRequest = parse(params)?;
    let id = req.session_id.to_string();
    state
        .sessions
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&id);
    if let Some(meta) = state.meta_path(&id) {
        // No longer listed by `session/list`.
        let _ = std::fs::remove_file(meta);
    }
    match state.history_path(&id) {
        Some(path) if path.exists() => std::fs::remove_file(&path)
            .map(|()| json!({}))
            .map_err(|e| Error::new(-32603, format!("cannot delete {}: {e}", path.display()))),
        _ => Err(invalid_params(format!("no stored session {id:?}"))),
    }
}

pub(crate) fn set_mode(
    state: &AgentState,
    params: &Value,
    cx: &ConnectionTo<Client>,
) -> Result<Value, Error> {
    let req: acp::SetSessionModeRequest = parse(params)?;
    let id = req.session_id.to_string();
    let mode = req.mode_id.to_string();
    if !["default", "plan", "code"].contains(&mode.as_str()) {
        return Err(invalid_params(format!("unknown mode {mode:?}")));
    }
    if state.flags.refuse_mode.as_deref() == Some(mode.as_str()) {
        return Err(Error::new(
            -32603,
            format!("mode {mode} is not available right now"),
        ));
    }
    let mut sessions = state.sessions.lock().unwrap_or_else(|p| p.into_inner());
    let s = sessions.get_mut(&id).ok_or_else(|| not_found(&id))?;
    s.mode = mode.clone();
    cx.send_notification(UntypedMessage::new(
        "session/update",
        json!({"sessionId": id, "update": {"sessionUpdate": "current_mode_update", "currentModeId": mode}}),
    )?)?;
    Ok(json!({}))
}

pub(crate) fn set_config(state: &AgentState, params: &Value) -> Result<Value, Error> {
    let req: acp::SetSessionConfigOptionRequest = parse(params)?;
    let id = req.session_id.to_string();
    if req.config_id.to_string() != "model" || state.flags.models {
        return Err(invalid_params(format!(
            "unknown config option {}",
            req.config_id
        )));
    }
    let value = params
        .get("value")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid_params("value must be a string"))?
        .to_owned();
    if !["small", "large"].contains(&value.as_str()) {
        return Err(invalid_params(format!("unknown model {value:?}")));
    }
    let mut sessions = state.sessions.lock().unwrap_or_else(|p| p.into_inner());
    let s = sessions.get_mut(&id).ok_or_else(|| not_found(&id))?;
    s.model = value;
    if state.flags.unadvertised_model {
        // pydantic-acp answers with its other options, none of them the model.
        return Ok(json!({"configOptions": []}));
    }
    Ok(json!({"configOptions": config_options(&s.model)}))
}

/// The unstable `session/set_model` (served with `--models`).
pub(crate) fn set_model(state: &AgentState, params: &Value) -> Result<Value, Error> {
    let id = params
        .get("sessionId")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid_params("sessionId is missing"))?
        .to_owned();
    let model = params
        .get("modelId")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid_params("modelId is missing"))?
        .to_owned();
    if !["small", "large"].contains(&model.as_str()) {
        return Err(invalid_params(format!("unknown model {model:?}")));
    }
    let mut sessions = state.sessions.lock().unwrap_or_else(|p| p.into_inner());
    let s = sessions.get_mut(&id).ok_or_else(|| not_found(&id))?;
    s.model = model;
    Ok(json!({}))
}
