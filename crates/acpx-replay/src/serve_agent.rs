//! `acpx serve-agent SESSION`: a recording served as an ACP agent on stdio.
//!
//! The client is answered as the recorded agent answered acpx: `initialize` with the recorded
//! protocol version, capabilities and agent info (the log's `initialized` event), `session/new`
//! with the recorded modes and config options, and each `session/prompt` whose text is the
//! next recorded prompt's with that turn played back: its updates (message and thought
//! chunks, tool calls and their updates, plans, usage, …) and permission questions (asked of
//! the client; whatever it answers, the recording goes on), then the recorded stop reason and
//! usage. The gaps between the recorded events are kept, each at most [`MAX_GAP`], unless
//! `fast`. A prompt that is not the next recorded one is refused with JSON-RPC -32602 naming
//! the prompt expected; a turn that failed in the recording fails again with its error.
//! `session/load` of any session id replays, as ACP asks, the turns played so far (their
//! prompts as `user_message_chunk`s, then their updates), without pauses or questions. A
//! client that reattaches starts a new process (a `--no-owner` prompt, a restarted queue
//! owner), which cannot know how far the earlier one got: after a load, a prompt is matched
//! with the first recorded turn from there on that has its text (a prompt that matches none
//! is refused, and the next one is matched the same way), and once one matched, each prompt
//! must again be the next one.
//! `session/cancel` ends the turn being played with `cancelled`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_client_protocol::v1::{ConnectionTo, Responder};
use agent_client_protocol::{Agent, Client, Error, Handled, Stdio, UntypedMessage};
use serde_json::{json, Map, Value};
use tokio::sync::watch;

use crate::recording::{Action, RecordedTurn, Recording};
use crate::{ReplayError, ReplayResult};

/// The longest pause kept between two recorded events: a recording of a slow agent (or of a
/// question a person took minutes to answer) plays back in reasonable time.
pub const MAX_GAP: Duration = Duration::from_secs(2);

/// The protocol version answered when the recording has none.
const DEFAULT_PROTOCOL_VERSION: u64 = 1;

/// The state of one client connection.
struct Player {
    recording: Recording,
    fast: bool,
    /// How many turns were played (the next prompt must be turn `played`).
    played: Mutex<usize>,
    /// Set by `session/load`: the next prompt may skip ahead to the turn it matches.
    resync: Mutex<bool>,
    /// The session ids handed out (new) or taken (load).
    sessions: Mutex<Vec<String>>,
    /// Set by `session/cancel` for the turn being played.
    cancel: watch::Sender<bool>,
}

/// Serves `recording` on this process's stdin and stdout until the client closes stdin.
pub async fn serve(recording: Recording, fast: bool) -> ReplayResult<()> {
    let (cancel, _) = watch::channel(false);
    let player = Arc::new(Player {
        recording,
        fast,
        played: Mutex::new(0),
        resync: Mutex::new(false),
        sessions: Mutex::new(Vec::new()),
        cancel,
    });
    let on_note = player.clone();
    let on_request = player.clone();
    let name = on_request
        .recording
        .initialized
        .as_ref()
        .and_then(|i| i.get("agentInfo"))
        .and_then(|a| a.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("acpx-serve-agent")
        .to_owned();
    Agent
        .v1()
        .name(name)
        .on_receive_notification(
            async move |n: UntypedMessage, cx: ConnectionTo<Client>| {
                if n.method == "session/cancel" {
                    on_note.cancel.send_replace(true);
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
                let player = on_request.clone();
                let answer = |responder: Responder, r: Result<Value, Error>| {
                    responder.respond_with_result(r).map(|()| Handled::Yes)
                };
                match req.method.as_str() {
                    "initialize" => answer(responder, Ok(player.initialize())),
                    "session/new" => answer(responder, Ok(player.new_session())),
                    "session/load" => answer(responder, player.load(&req.params, &cx)),
                    "session/prompt" => {
                        player.cancel.send_replace(false);
                        // A turn asks the client questions and waits: not on the dispatch loop.
                        cx.spawn({
                            let cx = cx.clone();
                            async move {
                                let result = player.prompt(&req.params, &cx).await;
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
        .await
        .map_err(|e| ReplayError::Serve(e.to_string()))
}

impl Player {
    fn initialize(&self) -> Value {
        let recorded = self.recording.initialized.as_ref();
        let get = |k: &str| recorded.and_then(|i| i.get(k)).cloned();
        json!({
            "protocolVersion": get("protocolVersion").unwrap_or(json!(DEFAULT_PROTOCOL_VERSION)),
            "agentCapabilities": get("agentCapabilities").unwrap_or(json!({})),
            "agentInfo": get("agentInfo").unwrap_or(json!({"name": "acpx-serve-agent", "version": env!("CARGO_PKG_VERSION")})),
            "authMethods": [],
        })
    }

    /// The recorded answer's session state (modes, config options, models) under `id`.
    fn session_answer(&self, id: Option<&str>) -> Value {
        let mut answer = Map::new();
        if let Some(id) = id {
            answer.insert("sessionId".into(), json!(id));
        }
        if let Some(setup) = &self.recording.session_setup {
            for key in ["modes", "configOptions", "models"] {
                if let Some(v) = setup.get(key).filter(|v| !v.is_null()) {
                    answer.insert(key.into(), v.clone());
                }
            }
        }
        Value::Object(answer)
    }

    fn new_session(&self) -> Value {
        let mut sessions = lock(&self.sessions);
        let id = format!("replay-{}-{}", self.recording.record_id, sessions.len() + 1);
        sessions.push(id.clone());
        self.session_answer(Some(&id))
    }

    /// `session/load`: the turns played so far sent again, then the session's state.
    fn load(&self, params: &Value, cx: &ConnectionTo<Client>) -> Result<Value, Error> {
        let Some(id) = params.get("sessionId").and_then(Value::as_str) else {
            return Err(
                Error::invalid_params().data(json!({"reason": "session/load needs a sessionId"}))
            );
        };
        lock(&self.sessions).push(id.to_owned());
        *lock(&self.resync) = true;
        let played = *lock(&self.played);
        for turn in self.recording.turns.iter().take(played) {
            for block in &turn.prompt {
                send(
                    cx,
                    id,
                    json!({"sessionUpdate": "user_message_chunk", "content": block}),
                )?;
            }
            for update in turn.updates() {
                send(cx, id, update.clone())?;
            }
        }
        Ok(self.session_answer(None))
    }

    async fn prompt(&self, params: &Value, cx: &ConnectionTo<Client>) -> Result<Value, Error> {
        let Some(session) = params.get("sessionId").and_then(Value::as_str) else {
            return Err(
                Error::invalid_params().data(json!({"reason": "session/prompt needs a sessionId"}))
            );
        };
        let text = prompt_text(params.get("prompt"));
        let mut index = *lock(&self.played);
        // After a load the position is unknown until a prompt matches a recorded turn.
        let resyncing = *lock(&self.resync);
        if resyncing {
            if let Some(found) = (index..self.recording.turns.len())
                .find(|&i| self.recording.turns[i].prompt_text() == text)
            {
                index = found;
            }
        }
        let Some(turn) = self.recording.turns.get(index) else {
            return Err(Error::new(
                -32602,
                format!(
                    "the recording has no more turns: all {} were played",
                    self.recording.turns.len()
                ),
            ));
        };
        let expected = turn.prompt_text();
        if text != expected {
            return Err(Error::new(
                -32602,
                format!(
                    "this prompt is not the recording's turn {}: expected {expected:?}{}, got {text:?}",
                    index + 1,
                    if resyncing {
                        " (or, after a reattach, a later recorded prompt)"
                    } else {
                        ""
                    }
                ),
            )
            .data(json!({"turn": index + 1, "expectedPrompt": turn.prompt})));
        }
        *lock(&self.played) = index + 1;
        *lock(&self.resync) = false;
        self.play(turn, session, cx).await
    }

    /// Plays one recorded turn to the client.
    async fn play(
        &self,
        turn: &RecordedTurn,
        session: &str,
        cx: &ConnectionTo<Client>,
    ) -> Result<Value, Error> {
        let mut cancelled = self.cancel.subscribe();
        let mut last = turn.started_at;
        for step in &turn.steps {
            if self.pause(last, step.at, &mut cancelled).await {
                return Ok(json!({"stopReason": "cancelled"}));
            }
            last = step.at;
            match &step.action {
                Action::Update(u) => send(cx, session, u.clone())?,
                Action::Permission { request, .. } => {
                    let mut params = request.clone();
                    if let Some(p) = params.as_object_mut() {
                        p.insert("sessionId".into(), json!(session));
                    }
                    // Whatever the client answers, the recording goes on as it was.
                    let ask = cx
                        .send_request(UntypedMessage::new("session/request_permission", params)?)
                        .block_task();
                    tokio::select! {
                        _ = ask => {}
                        _ = cancelled.wait_for(|c| *c) => {
                            return Ok(json!({"stopReason": "cancelled"}));
                        }
                    }
                }
            }
        }
        if let Some(end) = turn.ended_at {
            if self.pause(last, end, &mut cancelled).await {
                return Ok(json!({"stopReason": "cancelled"}));
            }
        }
        if let Some(error) = &turn.error {
            return Err(recorded_error(error));
        }
        let mut answer = Map::new();
        answer.insert(
            "stopReason".into(),
            json!(turn.stop_reason.as_deref().unwrap_or("end_turn")),
        );
        if let Some(usage) = &turn.usage {
            answer.insert("usage".into(), usage.clone());
        }
        Ok(Value::Object(answer))
    }

    /// Waits the recorded gap from `from` to `to` (capped; none when fast). True when the
    /// turn was cancelled meanwhile.
    async fn pause(
        &self,
        from: acpx_model::Timestamp,
        to: acpx_model::Timestamp,
        cancelled: &mut watch::Receiver<bool>,
    ) -> bool {
        if *cancelled.borrow() {
            return true;
        }
        if self.fast {
            return false;
        }
        let gap = u64::try_from(to.millis() - from.millis()).unwrap_or(0);
        let gap = Duration::from_millis(gap).min(MAX_GAP);
        tokio::select! {
            () = tokio::time::sleep(gap) => false,
            _ = cancelled.wait_for(|c| *c) => true,
        }
    }
}

/// The recorded `prompt_error` as the JSON-RPC error the agent answered with (its `acp`
/// object), else an internal error with the recorded message.
fn recorded_error(error: &Value) -> Error {
    if let Some(acp) = error.get("acp") {
        let code = acp.get("code").and_then(Value::as_i64).unwrap_or(-32603);
        let message = acp
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("error");
        let mut e = Error::new(i32::try_from(code).unwrap_or(-32603), message);
        if let Some(d) = acp.get("data").filter(|d| !d.is_null()) {
            e = e.data(d.clone());
        }
        return e;
    }
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("the recorded turn failed");
    Error::new(-32603, message)
}

/// The text blocks of a prompt, joined as [`RecordedTurn::prompt_text`] joins them.
fn prompt_text(prompt: Option<&Value>) -> String {
    prompt
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|b| b.get("text").and_then(Value::as_str))
        .collect::<Vec<_>>()
        .join("\n")
}

fn send(cx: &ConnectionTo<Client>, session: &str, update: Value) -> Result<(), Error> {
    cx.send_notification(UntypedMessage::new(
        "session/update",
        json!({"sessionId": session, "update": update}),
    )?)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_agent_error_comes_back_with_its_code() {
        let e =
            recorded_error(&json!({"acp": {"code": -32000, "message": "Authentication required"}}));
        assert_eq!(i32::from(e.code), -32000);
        let e = recorded_error(&json!({"message": "agent died"}));
        assert_eq!(i32::from(e.code), -32603);
        assert_eq!(e.message, "agent died");
    }

    #[test]
    fn prompts_match_by_their_text() {
        let p = json!([{"type": "text", "text": "a"}, {"type": "image", "data": ""}, {"type": "text", "text": "b"}]);
        assert_eq!(prompt_text(Some(&p)), "a\nb");
    }
}
