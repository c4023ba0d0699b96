//! State shared by a session's API calls and its connection handlers, and the handlers
//! themselves: `session/update` notifications and the agent's requests to the client.
//!
//! Handlers run on the SDK's dispatch loop, which waits for each one; anything that may take
//! long (asking a human, waiting for a terminal) runs in a task spawned on the connection, so
//! the loop keeps going (and a cancel can still reach a pending permission request).

mod elicitation;
pub(crate) mod elicitation_form;
mod grants;
mod output_wait;
mod permission_request;
pub(crate) mod update_queue;

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use acpx_model::event::ClientOperationPayload;
use acpx_model::{
    EventEnvelope, EventPayload, EventSource, EventStream, PermissionStats, Timestamp,
};
use agent_client_protocol::v1::{ConnectionTo, Responder};
use agent_client_protocol::{Agent, Error as SdkError, Handled, UntypedMessage};
use serde_json::{json, Map, Value};
use tokio::sync::{watch, Notify};

use crate::client_ops::{
    gate, not_offered, permission_denied, refusal, FsRoot, PermissionMode, PermissionPrompter,
    PermissionQuestion, TerminalSpec, Terminals,
};
use crate::error::RuntimeResult;
use crate::flow::UpdateGate;
use crate::output_backlog::OutputBacklog;
use crate::permission_rules::PermissionRules;
use crate::recorder::{EventDraft, Recorder};
use crate::session::options::NonInteractivePermissions;
use update_queue::PendingUpdate;

/// Where incoming `session/update`s go.
#[derive(Debug)]
pub(crate) enum Phase {
    /// Kept until the session's identity is recorded (during setup), then recorded in order.
    Buffering(Vec<Value>),
    /// History replayed by `session/load`: counted, not recorded (the thread already has it).
    Replaying(u64),
    /// Recorded as they come.
    Live,
}

/// The turn in progress.
#[derive(Debug)]
pub(crate) struct TurnCtx {
    pub request_id: String,
    pub stats: PermissionStats,
    pub cancel: watch::Sender<bool>,
    /// Approved tool calls of the turn still open ([`grants`]).
    pub grants: Vec<grants::Grant>,
    /// What each tool call of the turn named in its `tool_call` / `tool_call_update`
    /// notifications ([`grants::targets_of`]), for a permission request whose `toolCall`
    /// carries only its id.
    pub tool_targets: std::collections::HashMap<String, Vec<String>>,
}

/// The client capabilities and policies a session serves the agent with.
#[derive(Clone)]
pub(crate) struct ClientPolicy {
    pub fs: bool,
    pub terminal: bool,
    pub permission_mode: PermissionMode,
    pub prompter: Option<Arc<dyn PermissionPrompter>>,
    pub non_interactive: NonInteractivePermissions,
    pub elicitation_answers: Option<crate::ElicitationAnswers>,
    /// `--permission-policy` rules, applied to `session/request_permission` before the mode.
    pub permission_rules: Option<PermissionRules>,
    /// Answers recorded in another session (`acpx replay`), asked before the rules.
    pub recorded_permissions: Option<Arc<dyn crate::client_ops::RecordedPermissions>>,
    pub terminal_output_limit: usize,
    pub terminal_output_ceiling: usize,
}

/// Shared by a [`crate::Session`] and its connection handlers.
pub(crate) struct SessionCore {
    pub recorder: tokio::sync::Mutex<Option<Recorder>>,
    pub phase: Mutex<Phase>,
    pub turn: Mutex<Option<TurnCtx>>,
    pub fs_root: FsRoot,
    pub cwd: PathBuf,
    pub policy: ClientPolicy,
    pub terminals: Terminals,
    /// Set when the agent did not answer a turn within the grace after `session/cancel`:
    /// it is stuck, and a session that lives on replaces it before its next task (issue 45).
    pub unresponsive: Mutex<Option<String>>,
    /// Set when recording failed fatally; the turn in progress stops.
    pub fatal: Mutex<Option<String>>,
    pub fatal_notify: Notify,
    /// Signalled when the snapshot has unsaved changes (wakes the flusher).
    pub dirty_notify: Arc<Notify>,
    /// The permission policy of the turn in progress, when its caller chose one other than
    /// the session's (a queue owner serves each client's turn with that client's options).
    pub turn_policy: Mutex<Option<TurnPolicy>>,
    /// Set when a decision of the turn needed a human and there was none, under
    /// [`NonInteractivePermissions::Fail`]: the turn fails with `PERMISSION_PROMPT_UNAVAILABLE`.
    pub prompt_unavailable: Mutex<Option<String>>,
    pub prompt_unavailable_notify: Notify,
    /// The flow control of the current agent connection's `session/update`s (a new one per
    /// agent process: a dead connection's lines in flight are never handled).
    pub update_gate: Mutex<Arc<UpdateGate>>,
    /// Live `session/update`s handed over by the connection and not recorded yet, in order.
    pub(crate) pending_updates: Mutex<Vec<PendingUpdate>>,
    /// Whether a task is recording `pending_updates` (see [`SessionCore::on_session_update`]).
    pub(crate) draining: AtomicBool,
    /// The turn's consumer of its events that runs at its own pace, if any
    /// ([`crate::TurnOptions::output_backlog`]): while it is behind, no more updates are
    /// recorded (see [`crate::output_backlog`]).
    pub(crate) output_backlog: Mutex<Option<Arc<OutputBacklog>>>,
    /// The URL elicitations waiting for a person, by `elicitationId` ([`elicitation`]).
    pub(crate) url_waits: elicitation::UrlWaits,
}

/// A permission policy chosen for one turn.
#[derive(Clone)]
pub(crate) struct TurnPolicy {
    pub permission_mode: PermissionMode,
    pub prompter: Option<Arc<dyn PermissionPrompter>>,
    pub non_interactive: NonInteractivePermissions,
    pub permission_rules: Option<PermissionRules>,
    pub elicitation_answers: Option<crate::ElicitationAnswers>,
}

impl SessionCore {
    pub fn new(cwd: PathBuf, fs_root: FsRoot, policy: ClientPolicy) -> Self {
        SessionCore {
            recorder: tokio::sync::Mutex::new(None),
            phase: Mutex::new(Phase::Buffering(Vec::new())),
            turn: Mutex::new(None),
            fs_root,
            cwd,
            policy,
            terminals: Terminals::default(),
            unresponsive: Mutex::new(None),
            fatal: Mutex::new(None),
            fatal_notify: Notify::new(),
            dirty_notify: Arc::new(Notify::new()),
            turn_policy: Mutex::new(None),
            prompt_unavailable: Mutex::new(None),
            prompt_unavailable_notify: Notify::new(),
            update_gate: Mutex::new(UpdateGate::new()),
            pending_updates: Mutex::new(Vec::new()),
            draining: AtomicBool::new(false),
            output_backlog: Mutex::new(None),
            url_waits: Default::default(),
        }
    }

    pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
        m.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The permission mode in force: the turn's, else the session's.
    pub fn permission_mode(&self) -> PermissionMode {
        Self::lock(&self.turn_policy)
            .as_ref()
            .map_or(self.policy.permission_mode, |p| p.permission_mode)
    }

    /// Who answers permission questions now: the turn's prompter, else the session's.
    pub fn prompter(&self) -> Option<Arc<dyn PermissionPrompter>> {
        match Self::lock(&self.turn_policy).as_ref() {
            Some(p) => p.prompter.clone(),
            None => self.policy.prompter.clone(),
        }
    }

    /// What happens now when a decision needs a human and there is none: the turn's rule,
    /// else the session's.
    pub fn non_interactive(&self) -> NonInteractivePermissions {
        Self::lock(&self.turn_policy)
            .as_ref()
            .map_or(self.policy.non_interactive, |p| p.non_interactive)
    }

    /// The `--permission-policy` rules now: the turn's, else the session's.
    pub fn permission_rules(&self) -> Option<PermissionRules> {
        match Self::lock(&self.turn_policy).as_ref() {
            Some(p) => p.permission_rules.clone(),
            None => self.policy.permission_rules.clone(),
        }
    }

    /// Sets (or clears) the permission policy of the turn in progress.
    pub fn set_turn_policy(&self, policy: Option<TurnPolicy>) {
        *Self::lock(&self.turn_policy) = policy;
    }

    pub fn set_phase(&self, phase: Phase) -> Phase {
        std::mem::replace(&mut *Self::lock(&self.phase), phase)
    }

    /// Why the agent counts as stuck, if it does ([`SessionCore::unresponsive`]).
    pub fn unresponsive(&self) -> Option<String> {
        Self::lock(&self.unresponsive).clone()
    }

    pub(crate) fn set_unresponsive(&self, why: String) {
        tracing::warn!("{why}");
        *Self::lock(&self.unresponsive) = Some(why);
    }

    pub fn fatal(&self) -> Option<String> {
        Self::lock(&self.fatal).clone()
    }

    pub(crate) fn set_fatal(&self, msg: String) {
        tracing::error!("{msg}");
        *Self::lock(&self.fatal) = Some(msg);
        self.fatal_notify.notify_waiters();
    }

    pub fn turn_request_id(&self) -> Option<String> {
        Self::lock(&self.turn)
            .as_ref()
            .map(|t| t.request_id.clone())
    }

    pub fn begin_turn(&self, request_id: &str) -> watch::Receiver<bool> {
        *Self::lock(&self.prompt_unavailable) = None;
        let (tx, rx) = watch::channel(false);
        *Self::lock(&self.turn) = Some(TurnCtx {
            request_id: request_id.to_owned(),
            stats: PermissionStats::default(),
            cancel: tx,
            grants: Vec::new(),
            tool_targets: Default::default(),
        });
        rx
    }

    /// Ends the turn (called when its response is dispatched); returns its permission stats.
    pub fn end_turn(&self) -> PermissionStats {
        Self::lock(&self.turn)
            .take()
            .map(|t| t.stats)
            .unwrap_or_default()
    }

    /// Why the turn needed a human that was not there (`--non-interactive-permissions fail`).
    pub fn take_prompt_unavailable(&self) -> Option<String> {
        Self::lock(&self.prompt_unavailable).take()
    }

    pub fn prompt_unavailable_is_set(&self) -> bool {
        Self::lock(&self.prompt_unavailable).is_some()
    }

    /// Whether a decision needs a human that is not there and the policy says to fail; if
    /// so, marks the turn (it fails with `PERMISSION_PROMPT_UNAVAILABLE`).
    fn fail_without_prompter(&self, what: &str) -> bool {
        self.fail_without_prompter_if(what, self.permission_mode() == PermissionMode::ApproveReads)
    }

    /// [`Self::fail_without_prompter`] for a decision that needs a human when `needs_human`
    /// (an `escalate` rule needs one whatever the mode).
    fn fail_without_prompter_if(&self, what: &str, needs_human: bool) -> bool {
        // The turn's policy when its caller chose one (a queue owner's task), else the
        // session's.
        let unavailable = needs_human
            && self.prompter().is_none()
            && self.non_interactive() == NonInteractivePermissions::Fail;
        if unavailable {
            self.mark_prompt_unavailable(what);
        }
        unavailable
    }

    /// Fails the turn in progress, if any, for want of a human (`what` needed one).
    fn mark_prompt_unavailable(&self, what: &str) {
        if Self::lock(&self.turn).is_some() {
            let mut slot = Self::lock(&self.prompt_unavailable);
            if slot.is_none() {
                *slot = Some(format!(
                    "the agent needed a permission decision ({what}) and there is no terminal to ask (--non-interactive-permissions fail)"
                ));
            }
            drop(slot);
            self.prompt_unavailable_notify.notify_one();
        }
    }

    /// Counts a decision of acpx's own write and terminal gates in the turn's permission
    /// stats: it asked (or refused) on the user's behalf, as a permission request would.
    fn count_gate(&self, approved: bool) {
        if let Some(t) = Self::lock(&self.turn).as_mut() {
            t.stats.requested += 1;
            if approved {
                t.stats.approved += 1;
            } else {
                t.stats.denied += 1;
            }
        }
    }

    /// Cancels the turn's pending permission requests. Returns whether a turn was running.
    pub fn cancel_turn(&self) -> bool {
        match Self::lock(&self.turn).as_ref() {
            Some(t) => {
                let _ = t.cancel.send(true);
                true
            }
            None => false,
        }
    }

    /// Records an event; a failure stops the turn in progress (see [`SessionCore::fatal`]).
    pub async fn record(&self, draft: EventDraft) -> Option<EventEnvelope> {
        match self.try_record(draft).await {
            Ok(e) => e,
            Err(e) => {
                self.set_fatal(e.to_string());
                None
            }
        }
    }

    /// Records an event, returning a failure to the caller. `Ok(None)` before the session's
    /// record exists.
    pub async fn try_record(&self, draft: EventDraft) -> RuntimeResult<Option<EventEnvelope>> {
        let mut guard = self.recorder.lock().await;
        let Some(rec) = guard.as_mut() else {
            tracing::debug!(
                "event before the session record exists: {:?}",
                draft.payload
            );
            return Ok(None);
        };
        self.record_pending(rec).await?;
        let e = rec.record(draft).await?;
        if rec.is_dirty() {
            self.dirty_notify.notify_one();
        }
        Ok(Some(e))
    }

    /// Records the updates buffered during setup, then lets later ones through live. The
    /// recorder lock is held across the switch so that no live update overtakes them.
    pub async fn go_live(&self) -> RuntimeResult<()> {
        let mut guard = self.recorder.lock().await;
        let buffered = match self.set_phase(Phase::Live) {
            Phase::Buffering(b) => b,
            _ => Vec::new(),
        };
        if let Some(rec) = guard.as_mut() {
            for params in buffered {
                rec.record(update_draft(None, params)).await?;
            }
        }
        Ok(())
    }

    // -----------------------------------------------------------------------------------------
    // Handlers
    // -----------------------------------------------------------------------------------------

    async fn log_operation(
        &self,
        method: &str,
        ok: bool,
        summary: String,
        details: Option<String>,
        extra: Map<String, Value>,
    ) {
        let status = if ok { "completed" } else { "failed" };
        self.log_operation_as(method, status, summary, details, extra)
            .await
    }

    /// [`Self::log_operation`] with any status (`running` for a question still open).
    async fn log_operation_as(
        &self,
        method: &str,
        status: &str,
        summary: String,
        details: Option<String>,
        extra: Map<String, Value>,
    ) {
        let request_id = self.turn_request_id();
        let payload = ClientOperationPayload {
            method: method.to_owned(),
            status: status.into(),
            summary,
            details,
            timestamp: Timestamp::now(),
            extra,
        };
        let Ok(value) = serde_json::to_value(&payload) else {
            return;
        };
        let Ok(payload) = EventPayload::from_parts("client_operation", &value) else {
            return;
        };
        let stream = if request_id.is_some() {
            EventStream::Prompt
        } else {
            EventStream::Lifecycle
        };
        self.record(EventDraft::new(
            request_id.as_deref(),
            stream,
            EventSource::Client,
            payload,
        ))
        .await;
    }

    /// One request from the agent. Returns the response (or error) to send.
    pub async fn on_request(&self, method: &str, params: &Value) -> Result<Value, SdkError> {
        let str_param = |k: &str| params.get(k).and_then(Value::as_str);
        match method {
            "session/request_permission" => Ok(self.request_permission(params).await),
            elicitation::CREATE => Ok(self.elicitation_create(params).await),
            "fs/read_text_file" if self.policy.fs => {
                let path = str_param("path").unwrap_or("");
                if self.permission_mode() == PermissionMode::DenyAll {
                    let e = permission_denied(&format!("reading {path}"), PermissionMode::DenyAll);
                    self.log_operation(
                        method,
                        false,
                        format!("Refused read of {path}"),
                        Some(e.message.clone()),
                        path_extra(path),
                    )
                    .await;
                    return Err(e);
                }
                let line = params.get("line").and_then(Value::as_u64);
                let limit = params.get("limit").and_then(Value::as_u64);
                match self.fs_root.read(path, line, limit).await {
                    Ok(content) => {
                        let mut extra = path_extra(path);
                        extra.insert("bytes".into(), json!(content.len()));
                        self.log_operation(
                            method,
                            true,
                            format!("Read {path} ({} bytes)", content.len()),
                            None,
                            extra,
                        )
                        .await;
                        Ok(json!({"content": content}))
                    }
                    Err(e) => {
                        self.log_operation(
                            method,
                            false,
                            format!("Could not read {path}"),
                            Some(e.message().to_owned()),
                            path_extra(path),
                        )
                        .await;
                        Err(e.to_sdk())
                    }
                }
            }
            "fs/write_text_file" if self.policy.fs => {
                let path = str_param("path").unwrap_or("");
                let content = str_param("content").unwrap_or("");
                let question = PermissionQuestion {
                    method: method.into(),
                    title: format!("Write {path}"),
                    kind: Some("edit".into()),
                    details: json!({"path": path, "bytes": content.len()}),
                };
                let gated = self.gate(question).await;
                let path_extra = |path: &str| {
                    let mut m = path_extra(path);
                    m.extend(gated.extra.clone());
                    m
                };
                if !gated.ok {
                    let e = permission_denied(&format!("writing {path}"), self.permission_mode());
                    self.log_operation(
                        method,
                        false,
                        format!("Refused write of {path}"),
                        Some(e.message.clone()),
                        path_extra(path),
                    )
                    .await;
                    return Err(e);
                }
                match self.fs_root.write(path, content).await {
                    Ok(_) => {
                        let mut extra = path_extra(path);
                        extra.insert("bytes".into(), json!(content.len()));
                        self.log_operation(
                            method,
                            true,
                            format!("Wrote {path} ({} bytes)", content.len()),
                            None,
                            extra,
                        )
                        .await;
                        Ok(json!({}))
                    }
                    Err(e) => {
                        self.log_operation(
                            method,
                            false,
                            format!("Could not write {path}"),
                            Some(e.message().to_owned()),
                            path_extra(path),
                        )
                        .await;
                        Err(e.to_sdk())
                    }
                }
            }
            m if m.starts_with("terminal/") && self.policy.terminal => {
                self.terminal(m, params).await
            }
            // Switched off (`--no-fs`, `--no-terminal`): not advertised in `initialize`
            // either; an agent that calls anyway is told why, not just "method not found".
            m if m.starts_with("fs/") || m.starts_with("terminal/") => {
                let flag = if m.starts_with("fs/") {
                    "--no-fs"
                } else {
                    "--no-terminal"
                };
                Err(SdkError::new(
                    -32601,
                    format!("acpx refused {m}: this client does not offer it ({flag})"),
                )
                .data(json!({"acpxCode": "CAPABILITY_DISABLED", "method": m})))
            }
            other => Err(not_offered(other)),
        }
    }

    /// Whether a write or terminal may proceed. Allowed without asking under `approve-all`
    /// or when an approved tool call names it ([`grants`]; neither counted); otherwise the
    /// decision (a remembered "always" / "never", a refusal, or a human's answer) counts in
    /// the turn's permission stats.
    async fn gate(&self, question: PermissionQuestion) -> Gated {
        let mut extra = Map::new();
        if self.permission_mode() == PermissionMode::ApproveAll {
            return Gated { ok: true, extra };
        }
        // Under `deny-all` nothing is covered: the mode refuses every write and terminal.
        if self.permission_mode() != PermissionMode::DenyAll {
            if let Some(id) = self.covering_grant(&question.method, &question.details) {
                extra.insert("coveredBy".into(), json!(id));
                return Gated { ok: true, extra };
            }
        }
        let key = grants::always_key(question.kind.as_deref(), &question.title);
        if self.permission_mode() == PermissionMode::ApproveReads {
            if let Some(ok) = self.remembered(&key).await {
                self.count_gate(ok);
                extra.insert("fromAlways".into(), json!(key));
                return Gated { ok, extra };
            }
        }
        if self.fail_without_prompter(&question.title) {
            self.count_gate(false);
            return Gated { ok: false, extra };
        }
        let (ok, always) = self.ask_gate(question).await;
        self.count_gate(ok);
        if always {
            extra.insert("always".into(), json!(grants::always_word(ok)));
            extra.insert("alwaysKey".into(), json!(key));
        }
        Gated { ok, extra }
    }

    /// Asks the gate's question; returns the decision and whether the human's answer was
    /// for the rest of the session.
    async fn ask_gate(&self, question: PermissionQuestion) -> (bool, bool) {
        let cancel = Self::lock(&self.turn)
            .as_ref()
            .map(|t| t.cancel.subscribe());
        let catcher = self.prompter().map(grants::AnswerCatcher::new);
        let ask = gate(
            self.permission_mode(),
            catcher.as_ref().map(|c| c as &dyn PermissionPrompter),
            question,
        );
        let ok = match cancel {
            Some(mut c) => {
                let ok = tokio::select! {
                    biased;
                    _ = c.wait_for(|v| *v) => false,
                    ok = ask => ok,
                };
                ok && !*c.borrow()
            }
            None => ask.await,
        };
        let always = catcher
            .and_then(|c| c.last())
            .is_some_and(|a| a.always && a.approved == ok);
        (ok, always)
    }

    async fn terminal(&self, method: &str, params: &Value) -> Result<Value, SdkError> {
        let id = params
            .get("terminalId")
            .and_then(Value::as_str)
            .unwrap_or("");
        let unknown = || refusal(&format!("unknown terminal id {id:?}"));
        let mut extra = Map::new();
        extra.insert("terminalId".into(), json!(id));
        match method {
            "terminal/create" => {
                let command = params
                    .get("command")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned();
                let args: Vec<String> = params
                    .get("args")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(Value::as_str)
                            .map(str::to_owned)
                            .collect()
                    })
                    .unwrap_or_default();
                let shown = std::iter::once(command.clone())
                    .chain(args.iter().cloned())
                    .collect::<Vec<_>>()
                    .join(" ");
                let mut extra = Map::new();
                extra.insert("command".into(), json!(command));
                extra.insert("args".into(), json!(args));
                if command.is_empty() {
                    let e = refusal("terminal/create: the command is empty");
                    self.log_operation(
                        method,
                        false,
                        "Refused an empty command".into(),
                        None,
                        extra,
                    )
                    .await;
                    return Err(e);
                }
                let question = PermissionQuestion {
                    method: method.into(),
                    title: format!("Run {shown}"),
                    kind: Some("execute".into()),
                    details: params.clone(),
                };
                let gated = self.gate(question).await;
                extra.extend(gated.extra);
                if !gated.ok {
                    let e =
                        permission_denied(&format!("running `{shown}`"), self.permission_mode());
                    self.log_operation(
                        method,
                        false,
                        format!("Refused to run `{shown}`"),
                        Some(e.message.clone()),
                        extra,
                    )
                    .await;
                    return Err(e);
                }
                let cwd = match params.get("cwd").and_then(Value::as_str) {
                    Some(c) => match self.fs_root.resolve_existing(c) {
                        Ok(p) => p,
                        Err(e) => {
                            self.log_operation(
                                method,
                                false,
                                format!("Refused cwd {c}"),
                                Some(e.message().to_owned()),
                                extra,
                            )
                            .await;
                            return Err(e.to_sdk());
                        }
                    },
                    None => self.cwd.clone(),
                };
                let env = params
                    .get("env")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(|e| {
                                Some((
                                    e.get("name")?.as_str()?.to_owned(),
                                    e.get("value")?.as_str()?.to_owned(),
                                ))
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                let requested = params
                    .get("outputByteLimit")
                    .and_then(Value::as_u64)
                    .map(|l| usize::try_from(l).unwrap_or(usize::MAX))
                    .unwrap_or(self.policy.terminal_output_limit);
                let limit = requested.min(self.policy.terminal_output_ceiling);
                extra.insert("outputByteLimit".into(), json!(limit));
                match self.terminals.create(TerminalSpec {
                    command,
                    args,
                    env,
                    cwd,
                    output_limit: limit,
                }) {
                    Ok(created) => {
                        let tid = created.id;
                        extra.insert("terminalId".into(), json!(tid));
                        if let Some(forgotten) = created.forgotten {
                            extra.insert("forgotTerminalId".into(), json!(forgotten));
                        }
                        self.log_operation(method, true, format!("Started `{shown}`"), None, extra)
                            .await;
                        Ok(json!({"terminalId": tid}))
                    }
                    Err(e) => {
                        self.log_operation(
                            method,
                            false,
                            format!("Could not start `{shown}`"),
                            Some(e.to_string()),
                            extra,
                        )
                        .await;
                        Err(SdkError::new(
                            -32603,
                            format!("cannot start `{shown}`: {e}"),
                        ))
                    }
                }
            }
            "terminal/output" => {
                let t = self.terminals.get(id).ok_or_else(unknown)?;
                let out = t.output_to_log(true).unwrap_or_else(|| t.output());
                extra.insert("truncated".into(), out["truncated"].clone());
                // The whole output goes to the log; the thread keeps its end (mapping).
                extra.insert("output".into(), out["output"].clone());
                if let Some(status) = out.get("exitStatus") {
                    extra.insert("exitStatus".into(), status.clone());
                }
                let bytes = out["output"].as_str().map_or(0, str::len);
                self.log_operation(
                    method,
                    true,
                    format!("Output of {id} ({bytes} bytes)"),
                    None,
                    extra,
                )
                .await;
                Ok(out)
            }
            "terminal/wait_for_exit" => {
                let t = self.terminals.get(id).ok_or_else(unknown)?;
                let status = t.wait().await;
                extra.insert("exitStatus".into(), status.to_json());
                self.log_operation(
                    method,
                    true,
                    format!("{id} {}", status.describe()),
                    None,
                    extra,
                )
                .await;
                Ok(status.to_json())
            }
            "terminal/kill" => {
                let t = self.terminals.get(id).ok_or_else(unknown)?;
                t.kill().await;
                self.log_operation(method, true, format!("Killed {id}"), None, extra)
                    .await;
                Ok(json!({}))
            }
            "terminal/release" => {
                let t = self.terminals.remove(id).ok_or_else(unknown)?;
                t.kill().await;
                // What the command wrote since the agent last asked (or all of it, when it
                // never did) goes to the log with the release, so the thread and every
                // reader still show a terminal whose output the agent never read.
                if let Some(out) = t.output_to_log(false) {
                    for key in ["output", "truncated", "exitStatus"] {
                        if let Some(v) = out.get(key) {
                            extra.insert(key.into(), v.clone());
                        }
                    }
                }
                self.log_operation(method, true, format!("Released {id}"), None, extra)
                    .await;
                Ok(json!({}))
            }
            other => Err(not_offered(other)),
        }
    }
}

/// How acpx's own gate decided a write or terminal, and what its event records about that
/// (`coveredBy`, `always` and `alwaysKey`, or `fromAlways`).
struct Gated {
    ok: bool,
    extra: Map<String, Value>,
}

fn path_extra(path: &str) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("path".into(), json!(path));
    m
}

/// A `session_update` event holding the notification params exactly as received. Params that
/// do not even have the notification's shape are still logged as they are.
pub(crate) fn update_draft(request_id: Option<&str>, params: Value) -> EventDraft {
    let payload =
        EventPayload::from_parts("session_update", &params).unwrap_or(EventPayload::Unknown {
            event_type: "session_update".into(),
            payload: params,
        });
    EventDraft::new(request_id, EventStream::Prompt, EventSource::Acp, payload)
}

/// Builds the SDK client with acpx's handlers bound to `core`.
pub(crate) fn client_builder(
    core: Arc<SessionCore>,
) -> agent_client_protocol::v1::Builder<
    agent_client_protocol::Client,
    impl agent_client_protocol::HandleDispatchFrom<Agent> + 'static,
> {
    let for_notifications = core.clone();
    let for_completions = core.clone();
    let for_requests = core;
    agent_client_protocol::Client
        .v1()
        .name("acpx")
        .on_receive_notification(
            async move |n: UntypedMessage, cx: ConnectionTo<Agent>| {
                if n.method == "session/update" {
                    for_notifications.on_session_update(n.params);
                    return Ok(Handled::Yes);
                }
                if n.method == elicitation::COMPLETE {
                    let core = for_completions.clone();
                    cx.spawn(async move {
                        core.elicitation_complete(&n.params).await;
                        Ok(())
                    })?;
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
            async move |req: UntypedMessage, responder: Responder, cx: ConnectionTo<Agent>| {
                let handled = matches!(
                    req.method.as_str(),
                    "session/request_permission"
                        | "fs/read_text_file"
                        | "fs/write_text_file"
                        | elicitation::CREATE
                ) || req.method.starts_with("terminal/");
                if !handled {
                    return Ok(Handled::No {
                        message: (req, responder),
                        retry: false,
                    });
                }
                let core = for_requests.clone();
                // Off the dispatch loop: permissions may wait for a human, terminals for
                // their command. A failed response only means the agent is gone.
                cx.spawn(async move {
                    let result = core.on_request(&req.method, &req.params).await;
                    if let Err(e) = responder.respond_with_result(result) {
                        tracing::debug!("could not answer {}: {e}", req.method);
                    }
                    Ok(())
                })?;
                Ok(Handled::Yes)
            },
            agent_client_protocol::on_receive_request!(),
        )
}

/// A short id with a prefix, for requests and controls (`req_…`, `ctl_…`).
pub(crate) fn new_request_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::new_v4().simple())
}
