//! # acpx-test-agent
//!
//! A scripted ACP agent that speaks ACP on its stdio: the `acpx-test-agent` binary, the runtime's
//! quickstart example and the `acpx` command's built-in `demo` agent all run [`serve`]. It lets
//! the tests, and a new user, drive a real agent process without any API key.
//!
//! The first word of the prompt text picks a script:
//!
//! | prompt | what the agent does |
//! |---|---|
//! | `echo <text>` | replies `<text>` |
//! | `think [N]` | a thought (N 8-character thought chunks as fast as possible), then text |
//! | `tools [N] [K] [chained]` | a read tool call `pending → in_progress → completed` (N more bytes in its input, result text and raw output), a failed search, then text; K rounds of the two calls, each after a `Step k. ` text (`chained`: no text at all, every call in one message); ids `call_read-<pid>-<n>`… of their own when N or K is given |
//! | `write-file <path> <text…>` | asks permission (edit), writes the file through `fs/write_text_file` |
//! | `read-file <path> [line] [limit]` | reads through `fs/read_text_file` and replies with the content |
//! | `terminal [--limit N] [--kill-after MS] [--keep] [--detach] [--no-output] <cmd…>` | asks permission (execute), runs `sh -c <cmd>` through `terminal/*`; `--keep` never releases the terminal, `--detach` does not wait for it either (says `started <id>`), `--no-output` waits and releases it without `terminal/output` (the call's last update has no text) |
//! | `permission <kind> [title…]` | asks permission for a tool of that kind (`-`: no kind) and reports the decision |
//! | `wait-permission` | asks permission (execute) and waits for the answer (cancel tests) |
//! | `elicit [rich]` | sends a form `elicitation/create` (a required `name`, an optional integer `age`; `rich`: a titled form with a described `name`, a required `age` from 0 to 150, a `colour` of titled choices defaulting to `red`, a yes/no `subscribe`) and replies `elicitation <action> <content JSON>` |
//! | `elicit-url [URL] [complete]` | sends a URL `elicitation/create` (id `url-1`, URL `https://example.com/authorize?session=1` unless given; `complete`: `elicitation/complete` for it a second later) and replies `elicitation <action>` |
//! | `plan`, `mode`, `config`, `commands` | a `plan` / `current_mode_update` / `config_option_update` / `available_commands_update` |
//! | `stderr TEXT` | a line on the agent's stderr, then TEXT as the reply |
//! | `usage [AMOUNT [CURRENCY]]` | a `usage_update` (cost AMOUNT CURRENCY, 0.01 USD by default) and token usage in the prompt response |
//! | `showcase` | a coding agent's turn for the session viewer: a thought, a plan, a read, an edit with a diff asked for in a permission request, a `usage_update` with cost, a Markdown reply, token usage in the response |
//! | `hostile` | hostile strings (`<script>`, `onerror=`, `javascript:` and `data:` links, CSS `url()`, images, frames) in a thought, a plan, a tool call (title, kind, path, input, output, diff), the title and a Markdown reply ending `HOSTILE-END` |
//! | `title <t>` | a `session_info_update` with that title |
//! | `slow N` | opens a tool call, then N chunks 50 ms apart; stops with `cancelled` on `session/cancel` |
//! | `stream N` | N 8-character chunks as fast as possible |
//! | `error` | fails the prompt with JSON-RPC error -32603 and data |
//! | `flaky N` | fails the first N `flaky` prompts of the process with -32603 before any update, then replies |
//! | `die` | sends one chunk, then exits with code 3 mid-turn |
//! | `unknown-update` | an update with an unknown `sessionUpdate` tag, then text |
//! | `late` | answers, then sends one more chunk after the response |
//! | `dirs` | replies `dirs=<the additionalDirectories of the session, comma-separated>` |
//! | `state` | replies `mode=<mode>; model=<model>; mcp=<MCP server names, comma-separated>` |
//! | `dirs` | replies `dirs=<the additionalDirectories of the session's last new/load/resume/fork, comma-separated>` |
//! | `write-asked <path> <text…>` | like `write-file`, but as qwen-code does: the `tool_call` has an empty input, and the title, path, input and diff come only in the permission request's `toolCall` |
//! | `recall` | says what this session remembers: `remembered N: TEXTS` (the user texts joined by ` \| `) (its stored history, or the unstored fork's) |
//! | `write-direct <path> <text…>` | writes through `fs/write_text_file` without asking permission first |
//! | anything else | a short greeting that echoes the prompt |
//!
//! Flags (also read, whitespace-separated, from `ACPX_TEST_AGENT_FLAGS`):
//! `--load` (advertise `loadSession`; keep history in `--state-dir` and replay it on load),
//! `--resume` (advertise `sessionCapabilities.resume`), `--load-not-found` (load and resume
//! fail with -32002), `--load-internal-error` (load fails with -32603 "Query closed before
//! response received"), `--agent-session-id` (`_meta.agentSessionId` in new/load/resume
//! responses), `--empty-agent-session-id` (the same key, empty), `--no-agent-session-id` (neither,
//! overriding earlier flags), `--fork` (advertise and serve
//! `session/fork`), `--lazy-fork` (`--fork`, but a fork lives in this process only until its
//! first turn stores it, as some agents do: another process cannot load or resume it
//! before), `--start-delay-ms <ms>` (wait that long before serving: an agent slow to start),
//! `--fork-unsupported` (advertise fork but answer it with -32601, as
//! pydantic-acp does: its SDK refuses the unstable method), `--close` (advertise
//! `session/close`), `--list` (advertise and serve `session/list`: the sessions of
//! `--state-dir`, whichever process made them, newest first), `--list-page-size <n>`
//! (`session/list` pages of n sessions, default 50), `--stall <method>` (never answer that
//! request until the client sends `$/cancel_request` for it, then answer -32800),
//! `--cancel-log <file>` (note each stalled request's id and each `$/cancel_request` received,
//! one JSON line each), `--additional-dirs` (advertise
//! `sessionCapabilities.additionalDirectories`), `--delete` (advertise `session/delete`, which removes the session's
//! history from `--state-dir`), `--resume-unsupported` (advertise resume but answer it with -32601, as
//! pydantic-acp does), `--models` (no model config
//! option; answers carry the unstable `models` and `session/set_model` is served),
//! `--unadvertised-model` (session answers carry modes only, no model option and no `models`;
//! `session/set_config_option` with configId `model` is still served and `session/set_model`
//! answers -32601, as pydantic-acp 1.10.0 does),
//! `--refuse-mode <id>` (`session/set_mode` to that mode fails with -32603),
//! `--cancel-on-deny` (a refused permission ends the turn with stopReason `cancelled`, as
//! codex does), `--state-dir <dir>`, `--require-auth <method-id>` (advertise that auth method;
//! `session/new`, `load` and `resume` fail with -32000 "Authentication required" until
//! `authenticate {methodId}` succeeded, which needs a non-empty `ACPX_AUTH_<METHOD_ID>` in the
//! agent's environment), `--advertise-auth <method-id>` (list that method and serve
//! `authenticate` the same way, but never require it).
//!
//! The mode and model of a session live in the agent process only: a new process starts
//! every loaded or resumed session in `default` / `small`, as real agents do.
//!
//! ## Modules
//!
//! `flags` parses the flags, `sessions` serves the session methods (initialize, new, load,
//! resume, fork, close, set_mode, set_config_option), `listing` serves `session/list`, `stall`
//! holds `--stall` requests until they are cancelled, and `scripts` plays the prompt scripts.

#![warn(missing_docs)]

mod flags;
mod listing;
mod permission;
mod script_words;
mod scripts;
mod sessions;
mod showcase;
mod stall;

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use agent_client_protocol::v1::schema as acp;
use agent_client_protocol::v1::{ConnectionTo, Responder};
use agent_client_protocol::{Agent, Client, Error, Handled, Stdio, UntypedMessage};
use serde_json::{json, Value};

use crate::flags::Flags;
pub use crate::script_words::SCRIPT_WORDS;
use crate::scripts::prompt;
use crate::sessions::{
    authenticate, check_authenticated, close_session, delete_session, fork_session, initialize,
    load_session, new_session, resume_session, set_config, set_mode, set_model, AgentState, Shared,
};

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
    if flags.start_delay_ms > 0 {
        tokio::time::sleep(std::time::Duration::from_millis(flags.start_delay_ms)).await;
    }
    let state: Shared = Arc::new(AgentState {
        flags,
        unstored_forks: Mutex::new(HashMap::new()),
        sessions: Mutex::new(HashMap::new()),
        cancelled: Mutex::new(HashMap::new()),
        authenticated: std::sync::atomic::AtomicBool::new(false),
    });
    let s_req = state.clone();
    let s_not = state.clone();
    let result = Agent
        .v1()
        .name("acpx-test-agent")
        .on_receive_notification(
            async move |n: UntypedMessage, cx: ConnectionTo<Client>| {
                if n.method == "$/cancel_request" {
                    stall::note_cancel_request(&s_not, &n.params);
                    return Ok(Handled::Yes);
                }
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
                if state.stalls(&req.method) {
                    return stall::stall(&state, &req, responder, &cx);
                }
                match req.method.as_str() {
                    "initialize" => answer(responder, initialize(&state, &req.params)),
                    "authenticate" => answer(responder, authenticate(&state, &req.params)),
                    "session/new" => answer(
                        responder,
                        check_authenticated(&state).and_then(|()| new_session(&state, &req.params)),
                    ),
                    "session/load" => answer(
                        responder,
                        check_authenticated(&state)
                            .and_then(|()| load_session(&state, &req.params, &cx)),
                    ),
                    "session/resume" => answer(
                        responder,
                        check_authenticated(&state)
                            .and_then(|()| resume_session(&state, &req.params)),
                    ),
                    "session/fork" if state.flags.fork => {
                        answer(responder, fork_session(&state, &req.params))
                    }
                    "session/list" if state.flags.list => {
                        answer(responder, listing::list_sessions(&state, &req.params))
                    }
                    "session/close" if state.flags.close => {
                        answer(responder, close_session(&state, &req.params))
                    }
                    "session/delete" if state.flags.delete => {
                        answer(responder, delete_session(&state, &req.params))
                    }
                    "session/set_mode" => answer(responder, set_mode(&state, &req.params, &cx)),
                    "session/set_config_option" => {
                        answer(responder, set_config(&state, &req.params))
                    }
                    "session/set_model" if state.flags.models => {
                        answer(responder, set_model(&state, &req.params))
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

pub(crate) fn invalid_params(msg: impl Into<String>) -> Error {
    Error::invalid_params().data(json!({"reason": msg.into()}))
}

pub(crate) fn parse<T: serde::de::DeserializeOwned>(params: &Value) -> Result<T, Error> {
    serde_json::from_value(params.clone()).map_err(|e| invalid_params(e.to_string()))
}

/// Sends one `session/update` for the session.
pub(crate) fn send(cx: &ConnectionTo<Client>, session: &str, update: Value) -> Result<(), Error> {
    cx.send_notification(UntypedMessage::new(
        "session/update",
        json!({"sessionId": session, "update": update}),
    )?)
}

pub(crate) fn chunk(text: &str) -> Value {
    json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}})
}

pub(crate) async fn request(
    cx: &ConnectionTo<Client>,
    method: &str,
    params: Value,
) -> Result<Value, Error> {
    cx.send_request(UntypedMessage::new(method, params)?)
        .block_task()
        .await
}
