//! One prompt turn.
//!
//! 1. `prompt_started` is recorded (its payload carries the user message id and the prompt
//!    blocks, so the `User` message can be rebuilt from the log) and the snapshot is saved.
//! 2. `session/prompt` is sent. Every `session/update` the agent streams meanwhile is recorded
//!    as a `session_update` event under the turn's request id (by the connection handler).
//! 3. The turn waits for the answer, a cancel, the prompt timeout, the agent's exit, or a
//!    recording failure. A cancel sends `session/cancel`, answers pending permission
//!    requests with `cancelled` and keeps waiting (up to `cancel_grace`) for the agent's
//!    answer, which normally carries `stopReason: "cancelled"`.
//! 4. `prompt_done` (stop reason, permission stats, usage) or `prompt_error` (code,
//!    detailCode, message, retryable, the ACP error, and `outcome`: `failed`, `timeout` or
//!    `cancelled`) closes the turn; the reducer gives every tool use still open an error
//!    result, so the thread is well-formed whatever happened.

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use acpx_model::event::{
    AcpErrorObject, PromptDonePayload, PromptErrorPayload, PromptStartedPayload,
};
use acpx_model::{
    AgentContent, EventPayload, EventSource, EventStream, Message, PermissionStats, SessionRecord,
    ThreadText, TokenUsage, TurnError, TurnState,
};
use serde_json::{json, Map, Value};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::agent::{AgentProcess, CallError, Connection};
use crate::core::{new_request_id, SessionCore};
use crate::error::{AcpError, RuntimeResult};
use crate::mapping;
use crate::recorder::{EventDraft, Observer};

const PREVIEW_CHARS: usize = 200;

/// How the wait for the prompt's answer ended.
enum End {
    Answer(Value),
    Rpc(AcpError),
    Disconnected(String),
    CancelUnanswered,
    Fatal(String),
}

fn preview_of(prompt: &[Value]) -> String {
    let text: Vec<&str> = prompt
        .iter()
        .filter_map(|b| b.get("text").and_then(Value::as_str))
        .collect();
    let joined = if text.is_empty() {
        "[non-text prompt]".to_owned()
    } else {
        text.join(" ")
    };
    joined.chars().take(PREVIEW_CHARS).collect()
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// Runs one turn: records it, sends the prompt and waits for its end (see the module docs).
pub(crate) async fn run(
    p: TurnParts<'_>,
    prompt: Vec<Value>,
    observer: Option<Observer>,
    request_id: Option<String>,
) -> RuntimeResult<TurnOutcome> {
    let acp = p.acp_session_id.clone();
    let request_id = request_id.unwrap_or_else(|| new_request_id("req"));
    let user_id = uuid::Uuid::new_v4().to_string();
    set_turn_observer(&p, observer, true).await;
    // The turn counts as running (cancellable) before `prompt_started` is recorded: callers
    // react to that event (the CLI prints it), and a cancel that arrives before the prompt
    // request is sent must not be answered "nothing running" and lost. `drive` sends
    // `session/cancel` after `session/prompt`, so the agent sees them in that order.
    // A fork by copy's first prompt carries the copied conversation to the agent (see
    // `fork_context`); read before `prompt_started` adds the user's message.
    let context = match p.core.recorder.lock().await.as_ref() {
        Some(r) => crate::fork_context::copied_conversation(r.snapshot()),
        None => None,
    };
    let cancel_rx = p.cancel.start();
    let started = p
        .core
        .try_record(EventDraft::new(
            Some(&request_id),
            EventStream::Prompt,
            EventSource::Runtime,
            prompt_started(preview_of(&prompt), p.resumed, &user_id, &prompt),
        ))
        .await;
    if let Err(e) = started {
        p.cancel.stop();
        set_turn_observer(&p, None, false).await;
        return Err(e);
    }
    let prompt = match context {
        Some(c) => crate::fork_context::with_context(prompt, &c),
        None => prompt,
    };
    let result = drive(&p, cancel_rx, &acp, &request_id, &user_id, prompt).await;
    p.cancel.stop();
    set_turn_observer(&p, None, false).await;
    result
}

/// Sets the turn's observer and whether its end is saved by the shutdown that follows
/// ([`crate::TurnOptions::session_ends_after`]) when the turn starts; clears both when it ends.
async fn set_turn_observer(p: &TurnParts<'_>, observer: Option<Observer>, starting: bool) {
    if let Some(r) = p.core.recorder.lock().await.as_mut() {
        r.set_turn_observer(observer);
        r.set_turn_end_saved_by_shutdown(starting && p.session_ends_after);
    }
}

async fn drive(
    p: &TurnParts<'_>,
    mut cancel_rx: tokio::sync::watch::Receiver<bool>,
    acp: &str,
    request_id: &str,
    user_id: &str,
    prompt: Vec<Value>,
) -> RuntimeResult<TurnOutcome> {
    p.core.begin_turn(request_id);
    let finished: Arc<Mutex<Option<PermissionStats>>> = Arc::new(Mutex::new(None));
    let mut pending = {
        let core = p.core.clone();
        let finished = finished.clone();
        // Runs on the dispatch loop with the answer: updates after it are late, not the turn's.
        p.conn.call(
            "session/prompt",
            json!({"sessionId": acp, "prompt": prompt}),
            move |_| {
                let stats = core.end_turn();
                *finished.lock().unwrap_or_else(|e| e.into_inner()) = Some(stats);
            },
        )
    };
    let mut exit = p.agent.exit_watch();
    let mut cancel_deadline: Option<Instant> = None;
    let prompt_deadline = p.prompt_timeout.map(|d| Instant::now() + d);
    let mut timed_out = false;
    let end = loop {
        tokio::select! {
            r = &mut pending => break match r {
                Ok(Ok(v)) => End::Answer(v),
                Ok(Err(CallError::Rpc(e))) => End::Rpc(e),
                Ok(Err(CallError::Disconnected(d))) => End::Disconnected(d),
                Err(_) => End::Disconnected("the connection ended".into()),
            },
            _ = cancel_rx.wait_for(|c| *c), if cancel_deadline.is_none() => {
                send_cancel(p, acp, request_id, "requested").await;
                cancel_deadline = Some(Instant::now() + p.cancel_grace);
            }
            _ = sleep_until(prompt_deadline), if !timed_out && cancel_deadline.is_none() => {
                timed_out = true;
                send_cancel(p, acp, request_id, "timeout").await;
                cancel_deadline = Some(Instant::now() + p.cancel_grace);
            }
            _ = sleep_until(cancel_deadline), if cancel_deadline.is_some() => {
                // Stuck: the next task of a session that lives on gets a new agent process
                // rather than this one's same silence.
                p.core.set_unresponsive(format!(
                    "the agent did not answer within {} s after session/cancel",
                    p.cancel_grace.as_secs()
                ));
                crate::session::given_up::give_up(p.core, &pending, "session/prompt", "cancel_unanswered").await;
                break End::CancelUnanswered;
            }
            _ = exit.wait_for(Option::is_some) => {
                // The EOF error usually follows at once; do not wait long for it.
                break match tokio::time::timeout(Duration::from_millis(500), &mut pending).await {
                    Ok(Ok(Ok(v))) => End::Answer(v),
                    Ok(Ok(Err(CallError::Rpc(e)))) => End::Rpc(e),
                    _ => End::Disconnected("the agent process ended".into()),
                };
            }
            _ = p.core.prompt_unavailable_notify.notified(), if cancel_deadline.is_none() => {
                // A stale wake-up from an earlier turn is ignored.
                if p.core.prompt_unavailable_is_set() {
                    send_cancel(p, acp, request_id, "permission prompt unavailable").await;
                    cancel_deadline = Some(Instant::now() + p.cancel_grace);
                }
            }
            _ = p.core.fatal_notify.notified() => {
                let msg = p.core.fatal().unwrap_or_default();
                send_cancel(p, acp, request_id, "recording failed").await;
                // Nothing more can be recorded: the agent is only told.
                if let Err(e) = pending.give_up() {
                    tracing::debug!("cannot send $/cancel_request for the prompt: {e}");
                }
                break End::Fatal(msg);
            }
        }
    };
    let stats = finished
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
        .unwrap_or_else(|| p.core.end_turn());
    // A cancel can end the turn before this loop sees it: `CancelHandle::cancel` answers an
    // open permission question "cancelled" at once, and an agent may then end the turn before
    // the loop polls `cancel_rx` (seen under load: a Ctrl-C at a permission question exited 5,
    // a refusal, instead of 130). The request still came from the user.
    let cancelled = cancel_deadline.is_some() || *cancel_rx.borrow();
    let prompt_unavailable = p.core.take_prompt_unavailable();
    let (payload, acp_error, usage_value) = match end {
        // A decision needed a human and there was none (`--non-interactive-permissions
        // fail`): the turn fails whatever the agent answered after its cancel.
        End::Answer(_) | End::Rpc(_) | End::CancelUnanswered if prompt_unavailable.is_some() => (
            error_payload(
                "PERMISSION_PROMPT_UNAVAILABLE",
                "PERMISSION_PROMPT_UNAVAILABLE",
                prompt_unavailable.clone().unwrap_or_default(),
                false,
                None,
                "failed",
                stats,
                None,
            ),
            None,
            None,
        ),
        End::Answer(resp) => {
            let usage = resp.get("usage").filter(|u| u.is_object()).cloned();
            match resp.get("stopReason").and_then(Value::as_str) {
                Some(stop) if timed_out => (
                    error_payload(
                        "TIMEOUT",
                        "PROMPT_TIMEOUT",
                        format!(
                            "the turn did not finish within {} s and was cancelled",
                            p.prompt_timeout.unwrap_or_default().as_secs()
                        ),
                        true,
                        None,
                        "timeout",
                        stats,
                        Some(stop),
                    ),
                    None,
                    usage,
                ),
                Some(stop) => (prompt_done(stop, stats, usage.as_ref()), None, usage),
                None => (
                    error_payload(
                        "RUNTIME",
                        "INVALID_PROMPT_RESPONSE",
                        format!("the agent's session/prompt answer has no stopReason: {resp}"),
                        false,
                        None,
                        "failed",
                        stats,
                        None,
                    ),
                    None,
                    None,
                ),
            }
        }
        End::Rpc(e) => {
            let code = if e.is_not_found() {
                "NO_SESSION"
            } else {
                "RUNTIME"
            };
            let retryable = matches!(e.code, -32700 | -32603 | -32800);
            let outcome = if timed_out {
                "timeout"
            } else if cancelled {
                "cancelled"
            } else {
                "failed"
            };
            (
                error_payload(
                    code,
                    "AGENT_PROMPT_FAILED",
                    e.message.clone(),
                    retryable,
                    Some(&e),
                    outcome,
                    stats,
                    None,
                ),
                Some(e),
                None,
            )
        }
        End::Disconnected(why) => {
            let exit = tokio::time::timeout(Duration::from_secs(2), p.agent.wait())
                .await
                .ok()
                .flatten();
            let mut detail = match &exit {
                Some(e) => format!("the agent process {e} during the turn"),
                None => format!("the agent closed its connection during the turn ({why})"),
            };
            let tail = p.agent.final_stderr_tail(Duration::from_millis(500)).await;
            if let Some(last) = tail.lines().last() {
                detail.push_str(&format!(" (its last stderr line: {last})"));
            }
            let mut payload = error_payload(
                "RUNTIME",
                "AGENT_DISCONNECTED",
                detail,
                true,
                None,
                "failed",
                stats,
                None,
            );
            if let (EventPayload::PromptError(pe), Some(e)) = (&mut payload, &exit) {
                pe.extra.insert(
                    "agentExit".into(),
                    json!({"exitCode": e.code, "signal": e.signal}),
                );
            }
            (payload, None, None)
        }
        End::CancelUnanswered => (
            error_payload(
                "RUNTIME",
                "CANCEL_UNANSWERED",
                format!(
                    "the agent did not answer within {} s after session/cancel",
                    p.cancel_grace.as_secs()
                ),
                true,
                None,
                if timed_out { "timeout" } else { "cancelled" },
                stats,
                None,
            ),
            None,
            None,
        ),
        End::Fatal(msg) => (
            error_payload(
                "STORE",
                "RECORDING_FAILED",
                msg,
                false,
                None,
                "failed",
                stats,
                None,
            ),
            None,
            None,
        ),
    };
    p.core
        .try_record(EventDraft::new(
            Some(request_id),
            EventStream::Prompt,
            EventSource::Runtime,
            payload,
        ))
        .await?;
    // Read what the outcome needs from the live snapshot under the lock: cloning the whole
    // record held a second copy of the thread (the whole conversation, megabytes on a long
    // session) at the peak of the turn (docs/BENCHMARKS.md § Turn size and session size).
    let guard = p.core.recorder.lock().await;
    let Some(recorder) = guard.as_ref() else {
        unreachable!("a Session always has its recorder")
    };
    let record = recorder.snapshot();
    let turn = record.acpx.last_turn.as_ref();
    let (agent_text, agent_text_error) = match p
        .collect_agent_text
        .then(|| agent_text_after(record, user_id))
    {
        None => (String::new(), None),
        Some(Ok(text)) => (text, None),
        Some(Err(e)) => (String::new(), Some(e.to_string())),
    };
    Ok(TurnOutcome {
        request_id: request_id.to_owned(),
        user_message_id: user_id.to_owned(),
        outcome: turn.map_or(TurnState::Other(String::new()), |t| t.outcome.clone()),
        stop_reason: turn.and_then(|t| t.stop_reason.clone()),
        error: turn.and_then(|t| t.error.clone()),
        acp_error,
        permission_stats: turn.map(|t| t.permission_stats).unwrap_or_default(),
        usage: usage_value.as_ref().and_then(mapping::token_usage_from),
        agent_text,
        agent_text_error,
        log_write_error: record.acpx.event_log.last_write_error.clone(),
        cancel_requested: cancelled && !timed_out && prompt_unavailable.is_none(),
    })
}

#[allow(clippy::too_many_arguments)]
fn error_payload(
    code: &str,
    detail_code: &str,
    message: String,
    retryable: bool,
    acp: Option<&AcpError>,
    outcome: &str,
    stats: PermissionStats,
    stop_reason: Option<&str>,
) -> EventPayload {
    let mut extra = Map::new();
    extra.insert("outcome".into(), json!(outcome));
    extra.insert("permissionStats".into(), json!(stats));
    if let Some(s) = stop_reason {
        extra.insert("stopReason".into(), json!(s));
    }
    EventPayload::PromptError(PromptErrorPayload {
        code: code.to_owned(),
        detail_code: Some(detail_code.to_owned()),
        message,
        retryable,
        acp: acp.map(acp_error_object),
        extra,
    })
}

/// Sends `session/cancel`, answers the turn's pending permission requests with `cancelled`,
/// and records the cancel as a control (`last_control_update`).
async fn send_cancel(p: &TurnParts<'_>, acp: &str, request_id: &str, reason: &str) {
    use acpx_model::event::{
        ControlDonePayload, ControlErrorDetail, ControlErrorPayload, ControlStartedPayload,
    };
    p.core.cancel_turn();
    let input = json!({"requestId": request_id, "reason": reason});
    let draft = |payload| {
        EventDraft::new(
            Some(request_id),
            EventStream::Control,
            EventSource::Runtime,
            payload,
        )
    };
    p.core
        .record(draft(EventPayload::ControlStarted(ControlStartedPayload {
            action: "cancel".into(),
            input: input.clone(),
            extra: Map::new(),
        })))
        .await;
    let mut extra = Map::new();
    extra.insert("input".into(), input);
    let payload = match p.conn.notify("session/cancel", json!({"sessionId": acp})) {
        Ok(()) => EventPayload::ControlDone(ControlDonePayload {
            action: "cancel".into(),
            ok: true,
            result: json!({}),
            extra,
        }),
        Err(e) => EventPayload::ControlError(ControlErrorPayload {
            action: "cancel".into(),
            ok: false,
            error: ControlErrorDetail {
                code: "RUNTIME".into(),
                detail_code: Some("AGENT_DISCONNECTED".into()),
                message: e.into_runtime("session/cancel").to_string(),
                extra: Map::new(),
            },
            extra,
        }),
    };
    p.core.record(draft(payload)).await;
}

/// The result of one prompt turn.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnOutcome {
    /// The turn's `requestId` in the event log.
    pub request_id: String,
    /// The id of the `User` message this turn added.
    pub user_message_id: String,
    /// `completed`, `cancelled`, `failed` or `timeout`.
    pub outcome: TurnState,
    /// The agent's `stopReason`, when it answered.
    pub stop_reason: Option<String>,
    /// Why the turn did not complete (`code`, `detailCode`, `message`, `retryable`).
    pub error: Option<TurnError>,
    /// The JSON-RPC error the agent answered with, if any.
    pub acp_error: Option<AcpError>,
    /// Permission requests of the turn and how they were decided.
    pub permission_stats: PermissionStats,
    /// Token usage from the prompt response, when the agent reported it.
    pub usage: Option<TokenUsage>,
    /// The agent's text of this turn (all Agent messages after the user message); empty
    /// when the turn ran with [`TurnOptions::without_agent_text`](crate::TurnOptions), or
    /// when it could not be read back (then `agent_text_error` says why).
    pub agent_text: String,
    /// Set when the reply was asked for and a long part of it could not be read back from
    /// its spill file (docs/format.md decision 16): `agent_text` is then empty, never cut.
    pub agent_text_error: Option<String>,
    /// Set when the event log could not be written during the turn.
    pub log_write_error: Option<String>,
    /// Whether acpx cancelled the turn on request (Ctrl-C, `acpx cancel`, the API): such a
    /// turn is not a permission refusal, whatever its permission stats.
    pub cancel_requested: bool,
}

/// Cancels the turn in progress, from any task.
#[derive(Clone, Debug)]
pub struct CancelHandle {
    running: Arc<AtomicBool>,
    tx: Arc<watch::Sender<bool>>,
    /// The session's core, whose pending permission requests a cancel answers at once.
    core: std::sync::Weak<SessionCore>,
}

impl CancelHandle {
    pub(crate) fn new(core: &Arc<SessionCore>) -> Self {
        let (tx, _) = watch::channel(false);
        CancelHandle {
            running: Arc::new(AtomicBool::new(false)),
            tx: Arc::new(tx),
            core: Arc::downgrade(core),
        }
    }

    /// Asks the agent to stop the turn in progress (`session/cancel`). Returns `false` when no
    /// turn is running (a no-op).
    ///
    /// An open permission question is answered `cancelled` here, before this returns, not
    /// when the turn's loop gets to send `session/cancel`: whoever asked for the cancel (the
    /// owner's client after a Ctrl-C) may answer the question next, and that answer must find
    /// the question already cancelled.
    pub fn cancel(&self) -> bool {
        if self.running.load(Ordering::SeqCst) {
            self.tx.send_replace(true);
            if let Some(core) = self.core.upgrade() {
                core.cancel_turn();
            }
            true
        } else {
            false
        }
    }

    /// Whether a turn is running.
    pub fn is_running(&self) -> bool {
        self.running.load(Ordering::SeqCst)
    }
}

/// What a turn needs from its session (handed over by `Session::prompt_with`, so this module
/// does not depend on the session module).
pub(crate) struct TurnParts<'a> {
    pub core: &'a Arc<SessionCore>,
    pub conn: &'a Connection,
    pub agent: &'a AgentProcess,
    pub cancel: &'a CancelHandle,
    /// The ACP session id the prompt goes to.
    pub acp_session_id: String,
    /// Whether the ACP session existed before this process (`prompt_started.resumed`).
    pub resumed: bool,
    /// See [`crate::RuntimeOptions::prompt_timeout`].
    pub prompt_timeout: Option<Duration>,
    /// See [`crate::RuntimeOptions::cancel_grace`].
    pub cancel_grace: Duration,
    /// See [`crate::TurnOptions::without_agent_text`].
    pub collect_agent_text: bool,
    /// See [`crate::TurnOptions::session_ends_after`].
    pub session_ends_after: bool,
}

impl CancelHandle {
    pub(crate) fn start(&self) -> watch::Receiver<bool> {
        self.tx.send_replace(false);
        self.running.store(true, Ordering::SeqCst);
        self.tx.subscribe()
    }

    pub(crate) fn stop(&self) {
        self.running.store(false, Ordering::SeqCst);
    }
}

/// The text of the Agent messages that follow the `User` message `user_message_id`; an error
/// when a long part of it cannot be read back from its spill file.
pub fn agent_text_after(record: &SessionRecord, user_message_id: &str) -> std::io::Result<String> {
    // Sized once: a 1M-chunk turn's text is 8 MB, and growing it by doubling would hold up to
    // twice that.
    let mut out = String::with_capacity(
        agent_texts_after(record, user_message_id)
            .map(ThreadText::len)
            .sum(),
    );
    for text in agent_texts_after(record, user_message_id) {
        out.push_str(&text.to_text()?);
    }
    Ok(out)
}

/// [`agent_text_after`] in pieces (each text of the thread, a long one read from its spill
/// file 64 KiB at a time), for a caller that writes the reply out without joining it (a long
/// reply is megabytes).
pub fn agent_text_parts_after<'a>(
    record: &'a SessionRecord,
    user_message_id: &'a str,
) -> impl Iterator<Item = std::io::Result<Cow<'a, str>>> + 'a {
    agent_texts_after(record, user_message_id).flat_map(ThreadText::chunks)
}

/// The texts of [`agent_text_after`], as handles that outlive the lock on the record: a
/// spilled text is a range of its spill file (which only grows: the range keeps reading what
/// it held), copied as such; a text in memory is copied, and is at most
/// [`crate::text_spill::SPILL_AT`] long unless its spill file could not be made. For a caller
/// that writes the reply out after letting go of the session (the queue owner, at its
/// client's pace).
pub fn reply_texts_after(record: &SessionRecord, user_message_id: &str) -> Vec<ThreadText> {
    agent_texts_after(record, user_message_id)
        .cloned()
        .collect()
}

fn agent_texts_after<'a>(
    record: &'a SessionRecord,
    user_message_id: &'a str,
) -> impl Iterator<Item = &'a ThreadText> + 'a {
    record
        .thread
        .messages
        .iter()
        .skip_while(move |m| !matches!(m, Message::User(u) if u.id == user_message_id))
        .skip(1)
        .take_while(|m| !matches!(m, Message::User(_)))
        .filter_map(|m| match m {
            Message::Agent(a) => Some(a.content.iter()),
            _ => None,
        })
        .flatten()
        .filter_map(|c| match c {
            AgentContent::Text(t) => Some(t),
            _ => None,
        })
}

fn acp_error_object(e: &AcpError) -> AcpErrorObject {
    AcpErrorObject {
        code: e.code,
        message: e.message.clone(),
        data: e.data.clone(),
    }
}

fn prompt_started(preview: String, resumed: bool, user_id: &str, prompt: &[Value]) -> EventPayload {
    let mut extra = Map::new();
    extra.insert("userMessageId".into(), json!(user_id));
    extra.insert("prompt".into(), Value::Array(prompt.to_vec()));
    EventPayload::PromptStarted(PromptStartedPayload {
        message_preview: preview,
        resumed,
        extra,
    })
}

fn prompt_done(stop_reason: &str, stats: PermissionStats, usage: Option<&Value>) -> EventPayload {
    let mut extra = Map::new();
    if let Some(u) = usage {
        extra.insert("usage".into(), u.clone());
    }
    EventPayload::PromptDone(PromptDonePayload {
        stop_reason: stop_reason.to_owned(),
        permission_stats: stats,
        extra,
    })
}
