//! A scripted ACP agent that speaks ACP on its stdio: the `acpx-test-agent` binary, the
//! quickstart example and the `acpx` command's built-in `demo` agent all run [`serve`]. It lets
//! the tests, and a new user, drive a real agent process without any API key.
//!
//! The first word of the prompt text picks a script:
//!
//! | prompt | what the agent does |
//! |---|---|
//! | `echo <text>` | replies `<text>` |
//! | `think` | a thought, then text |
//! | `tools` | a read tool call `pending → in_progress → completed`, a failed one, then text |
//! | `write-file <path> <text…>` | asks permission (edit), writes the file through `fs/write_text_file` |
//! | `read-file <path> [line] [limit]` | reads through `fs/read_text_file` and replies with the content |
//! | `terminal [--limit N] [--kill-after MS] <cmd…>` | asks permission (execute), runs `sh -c <cmd>` through `terminal/*` |
//! | `permission <kind> [title…]` | asks permission for a tool of that kind (`-`: no kind) and reports the decision |
//! | `wait-permission` | asks permission (execute) and waits for the answer (cancel tests) |
//! | `plan`, `mode`, `config`, `commands` | a `plan` / `current_mode_update` / `config_option_update` / `available_commands_update` |
//! | `usage` | a `usage_update` and token usage in the prompt response |
//! | `title <t>` | a `session_info_update` with that title |
//! | `slow N` | opens a tool call, then N chunks 50 ms apart; stops with `cancelled` on `session/cancel` |
//! | `stream N` | N 8-character chunks as fast as possible |
//! | `error` | fails the prompt with JSON-RPC error -32603 and data |
//! | `die` | sends one chunk, then exits with code 3 mid-turn |
//! | `unknown-update` | an update with an unknown `sessionUpdate` tag, then text |
//! | `late` | answers, then sends one more chunk after the response |
//! | anything else | a short greeting that echoes the prompt |
//!
//! Flags (also read, whitespace-separated, from `ACPX_TEST_AGENT_FLAGS`):
//! `--load` (advertise `loadSession`; keep history in `--state-dir` and replay it on load),
//! `--resume` (advertise `sessionCapabilities.resume`), `--load-not-found` (load and resume
//! fail with -32002), `--load-internal-error` (load fails with -32603 "Query closed before
//! response received"), `--agent-session-id` (`_meta.agentSessionId` in new/load/resume
//! responses), `--empty-agent-session-id` (the same key, empty), `--no-agent-session-id` (neither,
//! overriding earlier flags), `--fork` (advertise and serve
//! `session/fork`), `--close` (advertise `session/close`), `--state-dir <dir>`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_client_protocol::v1::schema as acp;
use agent_client_protocol::v1::{ConnectionTo, Responder};
use agent_client_protocol::{Agent, Client, Error, Handled, Stdio, UntypedMessage};
use serde_json::{json, Value};

#[derive(Debug, Default, Clone)]
struct Flags {
    load: bool,
    resume: bool,
    load_not_found: bool,
    load_internal_error: bool,
    agent_session_id: bool,
    empty_agent_session_id: bool,
    fork: bool,
    close: bool,
    state_dir: Option<PathBuf>,
}

impl Flags {
    fn parse(args: impl IntoIterator<Item = String>) -> Result<Flags, String> {
        let mut f = Flags::default();
        let mut it = args.into_iter();
        while let Some(a) = it.next() {
            match a.as_str() {
                "--load" => f.load = true,
                "--resume" => f.resume = true,
                "--load-not-found" => f.load_not_found = true,
                "--load-internal-error" => f.load_internal_error = true,
                "--agent-session-id" => f.agent_session_id = true,
                "--empty-agent-session-id" => f.empty_agent_session_id = true,
                "--no-agent-session-id" => {
                    f.agent_session_id = false;
                    f.empty_agent_session_id = false;
                }
                "--fork" => f.fork = true,
                "--close" => f.close = true,
                "--state-dir" => {
                    f.state_dir = Some(PathBuf::from(it.next().ok_or("--state-dir needs a value")?))
                }
                other => return Err(format!("unknown flag {other:?}")),
            }
        }
        Ok(f)
    }
}

#[derive(Debug, Clone)]
struct SessionState {
    cwd: String,
    mode: String,
    model: String,
}

struct AgentState {
    flags: Flags,
    sessions: Mutex<HashMap<String, SessionState>>,
    cancelled: Mutex<HashMap<String, Arc<AtomicBool>>>,
}

type Shared = Arc<AgentState>;

impl AgentState {
    fn cancel_flag(&self, session: &str) -> Arc<AtomicBool> {
        let mut m = self.cancelled.lock().unwrap_or_else(|p| p.into_inner());
        m.entry(session.to_owned())
            .or_insert_with(|| Arc::new(AtomicBool::new(false)))
            .clone()
    }

    fn session(&self, id: &str) -> Option<SessionState> {
        self.sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .cloned()
    }

    fn history_path(&self, id: &str) -> Option<PathBuf> {
        let dir = self.flags.state_dir.as_ref()?;
        let safe: String = id
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect();
        Some(dir.join(format!("{safe}.json")))
    }

    fn load_history(&self, id: &str) -> Option<Vec<Value>> {
        let bytes = std::fs::read(self.history_path(id)?).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    fn save_history(&self, id: &str, history: &[Value]) {
        if let Some(path) = self.history_path(id) {
            if let Some(dir) = path.parent() {
                let _ = std::fs::create_dir_all(dir);
            }
            let _ = std::fs::write(path, serde_json::to_vec(history).unwrap_or_default());
        }
    }

    fn response_meta(&self, session_id: &str) -> Option<Value> {
        if self.flags.empty_agent_session_id {
            Some(json!({"agentSessionId": ""}))
        } else if self.flags.agent_session_id {
            Some(json!({"agentSessionId": format!("native-{session_id}")}))
        } else {
            None
        }
    }
}

fn modes(current: &str) -> Value {
    json!({
        "currentModeId": current,
        "availableModes": [
            {"id": "default", "name": "Default"},
            {"id": "plan", "name": "Plan"},
            {"id": "code", "name": "Code"}
        ]
    })
}

fn config_options(model: &str) -> Value {
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

fn invalid_params(msg: impl Into<String>) -> Error {
    Error::invalid_params().data(json!({"reason": msg.into()}))
}

fn parse<T: serde::de::DeserializeOwned>(params: &Value) -> Result<T, Error> {
    serde_json::from_value(params.clone()).map_err(|e| invalid_params(e.to_string()))
}

/// Serves one client on stdio until it closes stdin. `args` are the flags above; more are
/// read from `ACPX_TEST_AGENT_FLAGS`.
pub async fn serve(mut args: Vec<String>) {
    if let Ok(extra) = std::env::var("ACPX_TEST_AGENT_FLAGS") {
        args.extend(extra.split_whitespace().map(str::to_owned));
    }
    let flags = match Flags::parse(args) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("acpx-test-agent: {e}");
            std::process::exit(2);
        }
    };
    let state: Shared = Arc::new(AgentState {
        flags,
        sessions: Mutex::new(HashMap::new()),
        cancelled: Mutex::new(HashMap::new()),
    });
    let s_req = state.clone();
    let s_not = state.clone();
    let result = Agent
        .v1()
        .name("acpx-test-agent")
        .on_receive_notification(
            async move |n: UntypedMessage, cx: ConnectionTo<Client>| {
                if n.method == "session/cancel" {
                    if let Ok(c) = parse::<acp::CancelNotification>(&n.params) {
                        s_not
                            .cancel_flag(&c.session_id.to_string())
                            .store(true, Ordering::SeqCst);
                    }
                    return Ok(Handled::Yes);
                }
                Ok(Handled::No {
                    message: (n, cx),
                    retry: false,
                })
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .on_receive_request(
            async move |req: UntypedMessage, responder: Responder, cx: ConnectionTo<Client>| {
                let state = s_req.clone();
                let answer = |responder: Responder, r: Result<Value, Error>| {
                    responder.respond_with_result(r).map(|()| Handled::Yes)
                };
                match req.method.as_str() {
                    "initialize" => answer(responder, initialize(&state, &req.params)),
                    "session/new" => answer(responder, new_session(&state, &req.params)),
                    "session/load" => answer(responder, load_session(&state, &req.params, &cx)),
                    "session/resume" => answer(responder, resume_session(&state, &req.params)),
                    "session/fork" if state.flags.fork => {
                        answer(responder, fork_session(&state, &req.params))
                    }
                    "session/close" if state.flags.close => {
                        answer(responder, close_session(&state, &req.params))
                    }
                    "session/set_mode" => answer(responder, set_mode(&state, &req.params, &cx)),
                    "session/set_config_option" => {
                        answer(responder, set_config(&state, &req.params))
                    }
                    "session/prompt" => {
                        // A new turn starts uncancelled. This runs on the dispatch loop, which
                        // handles messages in arrival order, so a `session/cancel` sent after
                        // this prompt always wins, even if it is handled before the turn's
                        // task below gets to run.
                        if let Some(sid) = req.params.get("sessionId").and_then(Value::as_str) {
                            state.cancel_flag(sid).store(false, Ordering::SeqCst);
                        }
                        // Scripts call back into the client and wait for answers, which must
                        // not happen on the dispatch loop.
                        cx.spawn({
                            let cx = cx.clone();
                            async move {
                                let result = prompt(&state, &req.params, &cx).await;
                                responder.respond_with_result(result)
                            }
                        })?;
                        Ok(Handled::Yes)
                    }
                    _ => Ok(Handled::No {
                        message: (req, responder),
                        retry: false,
                    }),
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .connect_to(Stdio::new())
        .await;
    if let Err(e) = result {
        eprintln!("acpx-test-agent: connection ended: {e}");
    }
}

fn initialize(state: &AgentState, params: &Value) -> Result<Value, Error> {
    let req: acp::InitializeRequest = parse(params)?;
    let mut session_caps = serde_json::Map::new();
    if state.flags.resume {
        session_caps.insert("resume".into(), json!({}));
    }
    if state.flags.fork {
        session_caps.insert("fork".into(), json!({}));
    }
    if state.flags.close {
        session_caps.insert("close".into(), json!({}));
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
        "authMethods": [],
        "agentInfo": {"name": "acpx-test-agent", "version": env!("CARGO_PKG_VERSION")}
    }))
}

fn with_meta(mut v: Value, meta: Option<Value>) -> Value {
    if let (Some(m), Some(o)) = (meta, v.as_object_mut()) {
        o.insert("_meta".into(), m);
    }
    v
}

fn register(state: &AgentState, id: &str, cwd: String) -> SessionState {
    let s = SessionState {
        cwd,
        mode: "default".into(),
        model: "small".into(),
    };
    state
        .sessions
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(id.to_owned(), s.clone());
    s
}

fn new_session(state: &AgentState, params: &Value) -> Result<Value, Error> {
    let req: acp::NewSessionRequest = parse(params)?;
    if !req.cwd.is_absolute() {
        return Err(invalid_params("cwd must be absolute"));
    }
    let id = format!("sess-{}", uuid::Uuid::new_v4().simple());
    let s = register(state, &id, req.cwd.display().to_string());
    if state.flags.load {
        state.save_history(&id, &[]);
    }
    Ok(with_meta(
        json!({"sessionId": id, "modes": modes(&s.mode), "configOptions": config_options(&s.model)}),
        state.response_meta(&id),
    ))
}

fn not_found(id: &str) -> Error {
    Error::new(-32002, format!("Resource not found: session {id}"))
        .data(json!({"uri": format!("session:{id}")}))
}

fn load_session(
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
    let s = register(state, &id, req.cwd.display().to_string());
    Ok(with_meta(
        json!({"modes": modes(&s.mode), "configOptions": config_options(&s.model)}),
        state.response_meta(&id),
    ))
}

fn resume_session(state: &AgentState, params: &Value) -> Result<Value, Error> {
    let req: acp::ResumeSessionRequest = parse(params)?;
    let id = req.session_id.to_string();
    if !state.flags.resume {
        return Err(Error::method_not_found());
    }
    if state.flags.load_not_found {
        return Err(not_found(&id));
    }
    let s = register(state, &id, req.cwd.display().to_string());
    Ok(with_meta(
        json!({"modes": modes(&s.mode), "configOptions": config_options(&s.model)}),
        state.response_meta(&id),
    ))
}

fn fork_session(state: &AgentState, params: &Value) -> Result<Value, Error> {
    let req: acp::ForkSessionRequest = parse(params)?;
    let id = format!("sess-{}", uuid::Uuid::new_v4().simple());
    if let Some(h) = state.load_history(&req.session_id.to_string()) {
        state.save_history(&id, &h);
    }
    let s = register(state, &id, req.cwd.display().to_string());
    Ok(with_meta(
        json!({"sessionId": id, "modes": modes(&s.mode), "configOptions": config_options(&s.model)}),
        state.response_meta(&id),
    ))
}

fn close_session(state: &AgentState, params: &Value) -> Result<Value, Error> {
    let req: acp::CloseSessionRequest = parse(params)?;
    state
        .sessions
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&req.session_id.to_string());
    Ok(json!({}))
}

fn set_mode(state: &AgentState, params: &Value, cx: &ConnectionTo<Client>) -> Result<Value, Error> {
    let req: acp::SetSessionModeRequest = parse(params)?;
    let id = req.session_id.to_string();
    let mode = req.mode_id.to_string();
    if !["default", "plan", "code"].contains(&mode.as_str()) {
        return Err(invalid_params(format!("unknown mode {mode:?}")));
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

fn set_config(state: &AgentState, params: &Value) -> Result<Value, Error> {
    let req: acp::SetSessionConfigOptionRequest = parse(params)?;
    let id = req.session_id.to_string();
    if req.config_id.to_string() != "model" {
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
    Ok(json!({"configOptions": config_options(&s.model)}))
}

/// Sends one `session/update` for the session.
fn send(cx: &ConnectionTo<Client>, session: &str, update: Value) -> Result<(), Error> {
    cx.send_notification(UntypedMessage::new(
        "session/update",
        json!({"sessionId": session, "update": update}),
    )?)
}

fn chunk(text: &str) -> Value {
    json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}})
}

async fn request(cx: &ConnectionTo<Client>, method: &str, params: Value) -> Result<Value, Error> {
    cx.send_request(UntypedMessage::new(method, params)?)
        .block_task()
        .await
}

/// Asks for permission; returns the selected option id, or `None` when cancelled. A kind of
/// `-` leaves `kind` out (the client then infers it from the title).
async fn ask_permission(
    cx: &ConnectionTo<Client>,
    session: &str,
    call_id: &str,
    title: &str,
    kind: &str,
) -> Result<Option<String>, Error> {
    let mut tool_call = json!({"toolCallId": call_id, "title": title});
    if kind != "-" {
        tool_call["kind"] = json!(kind);
    }
    let resp = request(
        cx,
        "session/request_permission",
        json!({
            "sessionId": session,
            "toolCall": tool_call,
            "options": [
                {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
                {"optionId": "always", "name": "Always allow", "kind": "allow_always"},
                {"optionId": "reject", "name": "Reject", "kind": "reject_once"}
            ]
        }),
    )
    .await?;
    let typed: acp::RequestPermissionResponse = parse(&resp)?;
    Ok(match typed.outcome {
        acp::RequestPermissionOutcome::Selected(s) => Some(s.option_id.to_string()),
        _ => None,
    })
}

fn prompt_text(req: &acp::PromptRequest) -> String {
    req.prompt
        .iter()
        .filter_map(|b| match b {
            acp::ContentBlock::Text(t) => Some(t.text.clone()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join(" ")
}

async fn prompt(
    state: &AgentState,
    params: &Value,
    cx: &ConnectionTo<Client>,
) -> Result<Value, Error> {
    let req: acp::PromptRequest = parse(params)?;
    let sid = req.session_id.to_string();
    let Some(session) = state.session(&sid) else {
        return Err(invalid_params(format!("unknown session {sid}")));
    };
    // Reset by the dispatch loop before this task was spawned (see `serve`), so a cancel that
    // arrives before this task runs is not lost.
    let cancel = state.cancel_flag(&sid);
    let text = prompt_text(&req);
    let mut words = text.split_whitespace();
    let first = words.next().unwrap_or("");
    let rest: Vec<&str> = words.collect();
    let mut reply = String::new();
    let mut say = |cx: &ConnectionTo<Client>, t: &str| -> Result<(), Error> {
        reply.push_str(t);
        send(cx, &sid, chunk(t))
    };
    let mut stop = "end_turn";
    let mut usage: Option<Value> = None;
    match first {
        "echo" => say(cx, &rest.join(" "))?,
        "think" => {
            send(
                cx,
                &sid,
                json!({"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "Thinking it over."}}),
            )?;
            say(cx, "Done thinking.")?;
        }
        "tools" => {
            let path = format!("{}/README.md", session.cwd);
            send(
                cx,
                &sid,
                json!({"sessionUpdate": "tool_call", "toolCallId": "call_read", "title": "Read README.md",
                                  "kind": "read", "status": "pending", "locations": [{"path": path}], "rawInput": {"path": path}}),
            )?;
            send(
                cx,
                &sid,
                json!({"sessionUpdate": "tool_call_update", "toolCallId": "call_read", "status": "in_progress"}),
            )?;
            send(
                cx,
                &sid,
                json!({"sessionUpdate": "tool_call_update", "toolCallId": "call_read", "status": "completed",
                                  "content": [{"type": "content", "content": {"type": "text", "text": "# README"}}],
                                  "rawOutput": {"bytes": 8}}),
            )?;
            send(
                cx,
                &sid,
                json!({"sessionUpdate": "tool_call", "toolCallId": "call_grep", "title": "Search TODO",
                                  "kind": "search", "status": "in_progress", "rawInput": {"pattern": "TODO"}}),
            )?;
            send(
                cx,
                &sid,
                json!({"sessionUpdate": "tool_call_update", "toolCallId": "call_grep", "status": "failed",
                                  "content": [{"type": "content", "content": {"type": "text", "text": "grep: no matches"}}]}),
            )?;
            say(cx, "Read the README; the search failed.")?;
        }
        "write-file" => {
            let path = rest.first().copied().unwrap_or("");
            let content = rest.get(1..).map(|r| r.join(" ")).unwrap_or_default();
            send(
                cx,
                &sid,
                json!({"sessionUpdate": "tool_call", "toolCallId": "call_write", "title": format!("Write {path}"),
                                  "kind": "edit", "status": "pending", "rawInput": {"path": path, "content": content}}),
            )?;
            match ask_permission(cx, &sid, "call_write", &format!("Write {path}"), "edit").await? {
                Some(opt) if opt != "reject" => {
                    let r = request(
                        cx,
                        "fs/write_text_file",
                        json!({"sessionId": sid, "path": path, "content": content}),
                    )
                    .await;
                    match r {
                        Ok(_) => {
                            send(
                                cx,
                                &sid,
                                json!({"sessionUpdate": "tool_call_update", "toolCallId": "call_write", "status": "completed",
                                                  "content": [{"type": "diff", "path": path, "newText": content}]}),
                            )?;
                            say(cx, &format!("Wrote {path}."))?;
                        }
                        Err(e) => {
                            send(
                                cx,
                                &sid,
                                json!({"sessionUpdate": "tool_call_update", "toolCallId": "call_write", "status": "failed",
                                                  "content": [{"type": "content", "content": {"type": "text", "text": e.message}}]}),
                            )?;
                            say(cx, &format!("Write failed: {}", e.message))?;
                        }
                    }
                }
                Some(_) => {
                    send(
                        cx,
                        &sid,
                        json!({"sessionUpdate": "tool_call_update", "toolCallId": "call_write", "status": "failed"}),
                    )?;
                    say(cx, "Permission denied.")?;
                }
                None => stop = "cancelled",
            }
        }
        "read-file" => {
            let path = rest.first().copied().unwrap_or("");
            let mut params = json!({"sessionId": sid, "path": path});
            if let Some(line) = rest.get(1).and_then(|s| s.parse::<u64>().ok()) {
                params["line"] = json!(line);
            }
            if let Some(limit) = rest.get(2).and_then(|s| s.parse::<u64>().ok()) {
                params["limit"] = json!(limit);
            }
            send(
                cx,
                &sid,
                json!({"sessionUpdate": "tool_call", "toolCallId": "call_readf", "title": format!("Read {path}"),
                                  "kind": "read", "status": "in_progress", "rawInput": {"path": path}}),
            )?;
            match request(cx, "fs/read_text_file", params).await {
                Ok(v) => {
                    let typed: acp::ReadTextFileResponse = parse(&v)?;
                    send(
                        cx,
                        &sid,
                        json!({"sessionUpdate": "tool_call_update", "toolCallId": "call_readf", "status": "completed",
                                          "content": [{"type": "content", "content": {"type": "text", "text": typed.content}}]}),
                    )?;
                    say(cx, &format!("Content: {}", typed.content))?;
                }
                Err(e) => {
                    send(
                        cx,
                        &sid,
                        json!({"sessionUpdate": "tool_call_update", "toolCallId": "call_readf", "status": "failed",
                                          "content": [{"type": "content", "content": {"type": "text", "text": e.message.clone()}}]}),
                    )?;
                    say(
                        cx,
                        &format!("Read failed ({}): {}", i32::from(e.code), e.message),
                    )?;
                }
            }
        }
        "terminal" => {
            let mut limit: Option<u64> = None;
            let mut kill_after: Option<u64> = None;
            let mut cmd_words = Vec::new();
            let mut it = rest.iter();
            while let Some(w) = it.next() {
                match *w {
                    "--limit" if cmd_words.is_empty() => {
                        limit = it.next().and_then(|s| s.parse().ok())
                    }
                    "--kill-after" if cmd_words.is_empty() => {
                        kill_after = it.next().and_then(|s| s.parse().ok())
                    }
                    other => cmd_words.push(other),
                }
            }
            let cmd = cmd_words.join(" ");
            send(
                cx,
                &sid,
                json!({"sessionUpdate": "tool_call", "toolCallId": "call_term", "title": format!("Run {cmd}"),
                                  "kind": "execute", "status": "pending", "rawInput": {"command": cmd}}),
            )?;
            match ask_permission(cx, &sid, "call_term", &format!("Run {cmd}"), "execute").await? {
                Some(opt) if opt != "reject" => {
                    let mut create =
                        json!({"sessionId": sid, "command": "sh", "args": ["-c", cmd]});
                    if let Some(l) = limit {
                        create["outputByteLimit"] = json!(l);
                    }
                    match request(cx, "terminal/create", create).await {
                        Ok(v) => {
                            let created: acp::CreateTerminalResponse = parse(&v)?;
                            let tid = created.terminal_id.to_string();
                            send(
                                cx,
                                &sid,
                                json!({"sessionUpdate": "tool_call_update", "toolCallId": "call_term", "status": "in_progress",
                                                  "content": [{"type": "terminal", "terminalId": tid}]}),
                            )?;
                            if let Some(ms) = kill_after {
                                tokio::time::sleep(Duration::from_millis(ms)).await;
                                request(
                                    cx,
                                    "terminal/kill",
                                    json!({"sessionId": sid, "terminalId": tid}),
                                )
                                .await?;
                            }
                            let exit = request(
                                cx,
                                "terminal/wait_for_exit",
                                json!({"sessionId": sid, "terminalId": tid}),
                            )
                            .await?;
                            let exit: acp::TerminalExitStatus = parse(&exit)?;
                            let out = request(
                                cx,
                                "terminal/output",
                                json!({"sessionId": sid, "terminalId": tid}),
                            )
                            .await?;
                            let out: acp::TerminalOutputResponse = parse(&out)?;
                            request(
                                cx,
                                "terminal/release",
                                json!({"sessionId": sid, "terminalId": tid}),
                            )
                            .await?;
                            send(
                                cx,
                                &sid,
                                json!({"sessionUpdate": "tool_call_update", "toolCallId": "call_term", "status": "completed",
                                                  "content": [{"type": "content", "content": {"type": "text", "text": out.output}}],
                                                  "rawOutput": {"exitCode": exit.exit_code, "signal": exit.signal, "truncated": out.truncated}}),
                            )?;
                            say(
                                cx,
                                &format!(
                                    "exit={:?} signal={:?} truncated={} output={}",
                                    exit.exit_code, exit.signal, out.truncated, out.output
                                ),
                            )?;
                        }
                        Err(e) => {
                            send(
                                cx,
                                &sid,
                                json!({"sessionUpdate": "tool_call_update", "toolCallId": "call_term", "status": "failed"}),
                            )?;
                            say(cx, &format!("terminal/create failed: {}", e.message))?;
                        }
                    }
                }
                Some(_) => {
                    send(
                        cx,
                        &sid,
                        json!({"sessionUpdate": "tool_call_update", "toolCallId": "call_term", "status": "failed"}),
                    )?;
                    say(cx, "Permission denied.")?;
                }
                None => stop = "cancelled",
            }
        }
        "permission" => {
            let kind = rest.first().copied().unwrap_or("other");
            let title = rest
                .get(1..)
                .map(|r| r.join(" "))
                .filter(|t| !t.is_empty())
                .unwrap_or_else(|| format!("Do {kind}"));
            match ask_permission(cx, &sid, "call_perm", &title, kind).await? {
                Some(opt) => say(cx, &format!("selected {opt}"))?,
                None => {
                    say(cx, "permission cancelled")?;
                    stop = "cancelled";
                }
            }
        }
        "wait-permission" => {
            send(
                cx,
                &sid,
                json!({"sessionUpdate": "tool_call", "toolCallId": "call_wait", "title": "Dangerous thing",
                                  "kind": "execute", "status": "pending"}),
            )?;
            match ask_permission(cx, &sid, "call_wait", "Dangerous thing", "execute").await? {
                Some(opt) => say(cx, &format!("selected {opt}"))?,
                None => stop = "cancelled",
            }
        }
        "plan" => {
            send(
                cx,
                &sid,
                json!({"sessionUpdate": "plan", "entries": [
                {"content": "Read the code", "priority": "high", "status": "completed"},
                {"content": "Fix the bug", "priority": "medium", "status": "in_progress"},
                {"content": "Write a test", "priority": "low", "status": "pending"}]}),
            )?;
            say(cx, "Planned.")?;
        }
        "mode" => {
            send(
                cx,
                &sid,
                json!({"sessionUpdate": "current_mode_update", "currentModeId": "plan"}),
            )?;
            say(cx, "Switched to plan mode.")?;
        }
        "config" => {
            send(
                cx,
                &sid,
                json!({"sessionUpdate": "config_option_update", "configOptions": config_options("large")}),
            )?;
            say(cx, "Model is now large.")?;
        }
        "commands" => {
            send(
                cx,
                &sid,
                json!({"sessionUpdate": "available_commands_update", "availableCommands": [
                {"name": "create_plan", "description": "Make a plan"},
                {"name": "run", "description": "Run it", "input": {"hint": "what to run"}}]}),
            )?;
            say(cx, "Commands updated.")?;
        }
        "usage" => {
            send(
                cx,
                &sid,
                json!({"sessionUpdate": "usage_update", "used": 1200, "size": 200000,
                                  "cost": {"amount": 0.01, "currency": "USD"}}),
            )?;
            say(cx, "Counted.")?;
            usage = Some(
                json!({"totalTokens": 150, "inputTokens": 100, "outputTokens": 50,
                                "cachedReadTokens": 20, "cachedWriteTokens": 5, "thoughtTokens": 7}),
            );
        }
        "title" => {
            let t = rest.join(" ");
            send(
                cx,
                &sid,
                json!({"sessionUpdate": "session_info_update", "title": t, "updatedAt": "2030-01-02T03:04:05Z"}),
            )?;
            say(cx, "Titled.")?;
        }
        "slow" => {
            let n: u64 = rest.first().and_then(|s| s.parse().ok()).unwrap_or(20);
            send(
                cx,
                &sid,
                json!({"sessionUpdate": "tool_call", "toolCallId": "call_slow", "title": "Long task",
                                  "kind": "execute", "status": "in_progress"}),
            )?;
            for i in 0..n {
                if cancel.load(Ordering::SeqCst) {
                    stop = "cancelled";
                    break;
                }
                say(cx, &format!("chunk {i}. "))?;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            if stop == "cancelled" {
                // What a well-behaved agent does: flush a final update, then answer.
                send(
                    cx,
                    &sid,
                    json!({"sessionUpdate": "tool_call_update", "toolCallId": "call_slow", "status": "failed"}),
                )?;
            } else {
                send(
                    cx,
                    &sid,
                    json!({"sessionUpdate": "tool_call_update", "toolCallId": "call_slow", "status": "completed"}),
                )?;
            }
        }
        "stream" => {
            let n: u64 = rest.first().and_then(|s| s.parse().ok()).unwrap_or(100);
            for i in 0..n {
                say(cx, &format!("{:07} ", i % 10_000_000))?;
            }
        }
        "error" => {
            say(cx, "About to fail.")?;
            return Err(Error::new(-32603, "scripted failure")
                .data(json!({"details": "the test agent was asked to fail"})));
        }
        "die" => {
            say(cx, "Goodbye, cruel world.")?;
            // Give the writer a moment to flush the chunk, then die mid-turn.
            tokio::time::sleep(Duration::from_millis(200)).await;
            eprintln!("acpx-test-agent: dying mid-turn as scripted");
            std::process::exit(3);
        }
        "unknown-update" => {
            cx.send_notification(UntypedMessage::new(
                "session/update",
                json!({"sessionId": sid, "update": {"sessionUpdate": "hologram_update", "beam": {"color": "green"}, "intensity": 3},
                       "_meta": null, "futureTopLevel": [1, 2]}),
            )?)?;
            say(cx, "Sent a hologram.")?;
        }
        "late" => {
            say(cx, "Early.")?;
            let cx2 = cx.clone();
            let sid2 = sid.clone();
            cx.spawn(async move {
                tokio::time::sleep(Duration::from_millis(100)).await;
                send(&cx2, &sid2, chunk("Too late."))
            })?;
        }
        _ => say(cx, &format!("Hello! You said: {text}"))?,
    }
    if state.flags.load {
        let mut history = state.load_history(&sid).unwrap_or_default();
        history.push(json!({"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": text}}));
        if !reply.is_empty() {
            history.push(chunk(&reply));
        }
        state.save_history(&sid, &history);
    }
    let mut resp = json!({"stopReason": stop});
    if let Some(u) = usage {
        resp["usage"] = u;
    }
    // The typed view must accept what is sent.
    let _: acp::PromptResponse = parse(&resp)?;
    Ok(resp)
}
