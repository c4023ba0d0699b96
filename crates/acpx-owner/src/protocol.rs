//! The owner's wire protocol: JSON lines over its Unix socket (see `docs/format.md`,
//! § Queue owner).
//!
//! Each connection carries one [`Request`] line from the client; the owner answers with
//! [`Response`] lines on the same connection. A prompt is answered `accepted` (queued),
//! then `started` (it reached the head of the queue), then one `event` per recorded event of
//! the turn (each sent after its append returned), then `result` or `error`. A client that set
//! [`TaskOptions::reply_in_parts`] gets the reply as `reply_part` lines between the turn's end
//! and its `result` (see [`Response::ReplyPart`]). Controls are answered with one
//! `control_result`, `cancel_result`, `status` or `closed` line, or `error`.
//!
//! Both directions stay compatible across versions: no message denies unknown fields, every
//! field added later is optional, and an owner sends a new kind of line only to a client that
//! asked for it.

use acpx_model::{EventEnvelope, PermissionStats, Timestamp, TokenUsage, TurnError, TurnState};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use acpx_runtime::error::{AcpError, RuntimeError};
use acpx_runtime::session::Invocation;
use acpx_runtime::session::{FailedAttempt, Notice};
use acpx_runtime::PermissionQuestion;
use acpx_runtime::TurnOutcome;

/// The options one task runs with: each command's own, never another command's
/// (`docs/format.md`, § Queue owner). The permission rules and timeout apply to the task's
/// turn; the resume policy applies when the task makes the owner (re)attach; the MCP servers
/// and the model are the session's choices: the owner reattaches when the servers differ from
/// those its agent was given, and selects the model before the task runs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskOptions {
    /// The command's own options ([`Invocation`]): the same ones the one-process path
    /// applies to its runtime, read back strictly (an unknown permission mode or a malformed
    /// MCP server list fails the request).
    #[serde(flatten)]
    pub invocation: Invocation,
    /// Whether the client's user can answer permission questions (it would ask at its
    /// terminal on the one-process path): the owner then sends it `permission_request` lines
    /// and reads [`ClientLine::PermissionAnswer`] lines from the same connection.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub interactive: bool,
    /// The interactive client answers elicitations too: the owner sends it
    /// [`Response::ElicitationRequest`] lines. An owner that predates the flag ignores it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub elicitations: bool,
    /// The client renders none of the turn's events (`--format quiet`): the owner sends it
    /// only the answer, so a streamed turn costs no socket traffic per event.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_events: bool,
    /// The client does not print the reply (every format but quiet shows it from the
    /// events): the answer then carries an empty `agentText`, which after a long turn saves
    /// the owner a copy of megabytes and the socket their transfer.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_agent_text: bool,
    /// The client prints the reply (`--format quiet`) and takes it in parts: the owner sends
    /// it as [`Response::ReplyPart`] lines, read from the session's thread (a long reply from
    /// its spill file) at the pace the client reads them, and the `result` then carries an
    /// empty `agentText`. Neither side holds the reply whole (a 1M-chunk turn's is 8 MB).
    /// An owner that predates the flag ignores it and sends `agentText` whole (unless
    /// `no_agent_text`), which the client prints as before.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reply_in_parts: bool,
    /// The client prints the raw ACP frames of its turn (`--format acp`): the owner sends
    /// it, as [`Response::Frame`] lines, every JSON-RPC line its agent connection carries
    /// while the task runs, and while the agent starts or reattaches when this task caused
    /// it, in order, and no other task's. (It then sets `no_events` too; the frames count in
    /// the connection's backlog as events do.) An owner that predates the flag ignores it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub acp_frames: bool,
    /// The client runs with `--verbose`: the owner sends it the lines its agent writes on
    /// stderr while the task runs (and while the agent starts or reattaches for it), as
    /// [`Response::Frame`] lines of direction `stderr`, which the client shows as the
    /// one-process path shows them. An owner that predates the flag ignores it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub verbose: bool,
    /// The owner's idle time-to-live in seconds (`0`: until the session is closed), when the
    /// command was given one (`--ttl`, or `ttl` in a config file): a warm owner takes it from
    /// then on. Absent, the owner keeps the one it has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds: Option<u64>,
}

/// What a client may send after its request, on the same connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    tag = "type",
    rename_all = "snake_case",
    rename_all_fields = "camelCase"
)]
pub enum ClientLine {
    /// The user's answer to a `permission_request`.
    PermissionAnswer {
        /// The question's id.
        id: u64,
        /// `true` to allow.
        approved: bool,
        /// The answer holds for the rest of the session ("always" / "never"; absent from
        /// older clients: this question only).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        always: bool,
    },
    /// The user's answer to an `elicitation_request`: the ACP response (`action`, `content`),
    /// or null when the client could not ask.
    ElicitationAnswer {
        /// The question's id.
        id: u64,
        /// The answer.
        answer: Option<Value>,
    },
}

/// A permission question on the wire ([`PermissionQuestion`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WireQuestion {
    /// See [`PermissionQuestion::method`].
    pub method: String,
    /// See [`PermissionQuestion::title`].
    pub title: String,
    /// See [`PermissionQuestion::kind`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// See [`PermissionQuestion::details`].
    #[serde(default)]
    pub details: Value,
}

impl From<&PermissionQuestion> for WireQuestion {
    fn from(q: &PermissionQuestion) -> Self {
        WireQuestion {
            method: q.method.clone(),
            title: q.title.clone(),
            kind: q.kind.clone(),
            details: q.details.clone(),
        }
    }
}

impl From<WireQuestion> for PermissionQuestion {
    fn from(q: WireQuestion) -> Self {
        PermissionQuestion {
            method: q.method,
            title: q.title,
            kind: q.kind,
            details: q.details,
        }
    }
}

/// What a client asks the owner (one line per connection).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(
    tag = "type",
    rename_all = "snake_case",
    rename_all_fields = "camelCase"
)]
pub enum Request {
    /// Queue a prompt turn.
    SubmitPrompt {
        /// The turn's `requestId` in the log (chosen by the client, so `--no-wait` can report
        /// it).
        request_id: String,
        /// ACP content blocks.
        prompt: Vec<Value>,
        /// The command's own options.
        options: TaskOptions,
        /// `false` (`prompt --no-wait`): the owner closes the connection after `accepted`.
        wait: bool,
    },
    /// Queue `session/set_mode`.
    SetMode {
        /// The mode.
        mode_id: String,
        /// The command's own options.
        #[serde(default)]
        options: TaskOptions,
    },
    /// Queue `session/set_config_option`.
    SetConfigOption {
        /// The option.
        config_id: String,
        /// Its value (a JSON boolean is sent as a boolean option).
        value: Value,
        /// The command's own options.
        #[serde(default)]
        options: TaskOptions,
    },
    /// Queue a model selection (`set model`): the agent's model config option, else the
    /// unstable `session/set_model`; kept as the session's desired model. The control
    /// result's value is `{"configOptions": [...], "viaConfigOption": bool}`.
    SetModel {
        /// The model id.
        model_id: String,
        /// The command's own options.
        #[serde(default)]
        options: TaskOptions,
    },
    /// Create the session this owner was started for (a record id the store does not hold
    /// yet): start the agent, `session/new`, record it, and keep the agent warm for the
    /// session's first turn (`sessions new`, and `sessions ensure` when it creates). Answered
    /// with `started` (the notices of opening) and a `control_result` whose value is
    /// `{"created": true}`.
    CreateSession {
        /// The agent command line.
        agent_command: String,
        /// The session's working directory (absolute).
        cwd: String,
        /// The session's name.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        /// The command's own options (MCP servers, model, auth policy, timeout…).
        #[serde(default)]
        options: TaskOptions,
    },
    /// Make the session this owner was started for (a record id the store does not hold
    /// yet) a fork of the stored session `parent_record_id`: attach the parent in an agent
    /// process, fork it there (`session/fork`, else a fresh session with a copy of the
    /// conversation), and keep that process for the fork's first turns (`sessions fork`:
    /// some agents keep a fork only in the process that made it until its first turn).
    /// Answered with `started` and a `control_result` whose value is `{"forked": true}`.
    ForkSession {
        /// The session to fork.
        parent_record_id: String,
        /// The fork's name.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        /// The command's own options (MCP servers, model, auth policy, timeout…).
        #[serde(default)]
        options: TaskOptions,
    },
    /// Cancel the turn in progress (answered at once).
    Cancel,
    /// The owner's state (answered at once).
    Status,
    /// Close the session: cancel the turn in progress, refuse what is queued, send ACP
    /// `session/close` when advertised, mark the record closed and exit.
    Close,
    /// Stop the owner and its agent, leaving the session open (for a one-process writer).
    Release,
    /// [`Request::Release`] when the owner is idle (no task running or waiting); else
    /// answered at once with a `SESSION_BUSY` error naming the task it runs, and nothing
    /// changes. What commands that need the session whole and must not wait on a turn send
    /// (`sessions delete`, `migrate`, `fsck --repair`).
    ReleaseIdle,
    /// Drop the queued prompt `request_id`, not started yet: its client gave up (Ctrl-C
    /// while it waited its turn). Answered at once with `cancel_result` (`cancelled`: whether
    /// it was still queued); a prompt already running is left alone (only its own client
    /// cancels it, with `cancel`).
    Withdraw {
        /// The prompt's request id.
        request_id: String,
    },
}

/// A failure as the client reports it (`docs/format.md`, § Queue owner, error codes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WireError {
    /// `RUNTIME`, `TIMEOUT`, `NO_SESSION`, `STORE` or `USAGE`.
    pub code: String,
    /// A finer reason (`QUEUE_OWNER_OVERLOADED`, `AGENT_SPAWN_FAILED`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail_code: Option<String>,
    /// What went wrong.
    pub message: String,
    /// Whether trying again may succeed.
    #[serde(default)]
    pub retryable: bool,
}

impl WireError {
    /// A `RUNTIME` error with a detail code.
    pub fn runtime(detail: &str, message: impl Into<String>, retryable: bool) -> Self {
        WireError {
            code: "RUNTIME".into(),
            detail_code: Some(detail.into()),
            message: message.into(),
            retryable,
        }
    }

    /// A runtime error as a client should see it.
    pub fn from_runtime(e: &RuntimeError) -> Self {
        let (code, detail) = match e {
            RuntimeError::Store(_) => ("STORE", None),
            RuntimeError::Spawn { .. } => ("RUNTIME", Some("AGENT_SPAWN_FAILED")),
            RuntimeError::Timeout { .. } => ("TIMEOUT", Some("AGENT_TIMEOUT")),
            RuntimeError::ModeNotRestored { .. } => ("RUNTIME", Some("MODE_NOT_RESTORED")),
            RuntimeError::UnknownMode { .. } => ("USAGE", Some("UNKNOWN_MODE")),
            RuntimeError::NotOffered { .. } => ("USAGE", Some("NOT_OFFERED")),
            RuntimeError::ResumeRequired { .. } => ("RUNTIME", Some("SESSION_RESUME_REQUIRED")),
            RuntimeError::AuthRequired { .. } => ("RUNTIME", Some("AUTH_REQUIRED")),
            RuntimeError::Agent { error, .. } if error.is_not_found() => ("NO_SESSION", None),
            _ => ("RUNTIME", None),
        };
        WireError {
            code: code.into(),
            detail_code: detail.map(str::to_owned),
            message: e.to_string(),
            retryable: false,
        }
    }

    /// The error of a client whose owner went away before the answer.
    pub fn disconnected() -> Self {
        WireError::runtime(
            "QUEUE_RUNTIME_PROMPT_FAILED",
            "queue owner disconnected; outcome unknown",
            true,
        )
    }
}

/// A JSON-RPC error object on the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireAcpError {
    /// The JSON-RPC code.
    pub code: i64,
    /// The message.
    pub message: String,
    /// Free-form details.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl From<&AcpError> for WireAcpError {
    fn from(a: &AcpError) -> Self {
        WireAcpError {
            code: a.code,
            message: a.message.clone(),
            data: a.data.clone(),
        }
    }
}

impl From<WireAcpError> for AcpError {
    fn from(a: WireAcpError) -> Self {
        AcpError {
            code: a.code,
            message: a.message,
            data: a.data,
        }
    }
}

/// A reattach step that failed ([`FailedAttempt`] on the wire).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WireFailedAttempt {
    /// `session/resume` or `session/load`.
    pub method: String,
    /// `unsupported`, `not_found` or `failed_without_history`.
    pub reason: String,
    /// The agent's error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<WireAcpError>,
}

/// What opening the session told the user ([`Notice`] on the wire).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(
    tag = "notice",
    rename_all = "snake_case",
    rename_all_fields = "camelCase"
)]
pub enum WireNotice {
    /// See [`Notice::Fallback`].
    Fallback {
        /// The ACP session that could not be restored.
        previous_acp_session_id: String,
        /// The new one.
        acp_session_id: String,
        /// The steps that failed.
        failed_attempts: Vec<WireFailedAttempt>,
    },
    /// See [`Notice::ChoiceNotRestored`].
    ChoiceNotRestored {
        /// `config_option` or `model`.
        kind: String,
        /// The option id (or `model`).
        id: String,
        /// The value asked for.
        value: Value,
        /// Why it failed.
        error: String,
    },
    /// See [`Notice::McpServersLeftOut`].
    McpServersLeftOut {
        /// The servers' names and transports.
        names: Vec<String>,
    },
    /// See [`Notice::ForkNotStored`].
    ForkNotStored {
        /// The fork's ACP session the agent does not know.
        acp_session_id: String,
    },
}

impl From<&Notice> for WireNotice {
    fn from(n: &Notice) -> Self {
        match n {
            Notice::Fallback {
                previous_acp_session_id,
                acp_session_id,
                failed_attempts,
            } => WireNotice::Fallback {
                previous_acp_session_id: previous_acp_session_id.clone(),
                acp_session_id: acp_session_id.clone(),
                failed_attempts: failed_attempts
                    .iter()
                    .map(|a| WireFailedAttempt {
                        method: a.method.clone(),
                        reason: a.reason.clone(),
                        error: a.error.as_ref().map(WireAcpError::from),
                    })
                    .collect(),
            },
            Notice::ChoiceNotRestored {
                kind,
                id,
                value,
                error,
            } => WireNotice::ChoiceNotRestored {
                kind: kind.clone(),
                id: id.clone(),
                value: value.clone(),
                error: error.clone(),
            },
            Notice::McpServersLeftOut(names) => WireNotice::McpServersLeftOut {
                names: names.clone(),
            },
            Notice::ForkNotStored { acp_session_id } => WireNotice::ForkNotStored {
                acp_session_id: acp_session_id.clone(),
            },
        }
    }
}

impl From<WireNotice> for Notice {
    fn from(n: WireNotice) -> Self {
        match n {
            WireNotice::Fallback {
                previous_acp_session_id,
                acp_session_id,
                failed_attempts,
            } => Notice::Fallback {
                previous_acp_session_id,
                acp_session_id,
                failed_attempts: failed_attempts
                    .into_iter()
                    .map(|a| FailedAttempt {
                        method: a.method,
                        reason: a.reason,
                        error: a.error.map(AcpError::from),
                    })
                    .collect(),
            },
            WireNotice::ChoiceNotRestored {
                kind,
                id,
                value,
                error,
            } => Notice::ChoiceNotRestored {
                kind,
                id,
                value,
                error,
            },
            WireNotice::McpServersLeftOut { names } => Notice::McpServersLeftOut(names),
            WireNotice::ForkNotStored { acp_session_id } => {
                Notice::ForkNotStored { acp_session_id }
            }
        }
    }
}

/// How a turn ended ([`TurnOutcome`] on the wire).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WireOutcome {
    /// See [`TurnOutcome::request_id`].
    pub request_id: String,
    /// See [`TurnOutcome::user_message_id`].
    pub user_message_id: String,
    /// See [`TurnOutcome::outcome`].
    pub outcome: TurnState,
    /// See [`TurnOutcome::stop_reason`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    /// See [`TurnOutcome::error`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<TurnError>,
    /// See [`TurnOutcome::acp_error`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acp_error: Option<WireAcpError>,
    /// See [`TurnOutcome::permission_stats`].
    pub permission_stats: PermissionStats,
    /// See [`TurnOutcome::usage`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<TokenUsage>,
    /// See [`TurnOutcome::agent_text`]; empty after [`Response::ReplyPart`] lines.
    pub agent_text: String,
    /// See [`TurnOutcome::agent_text_error`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_text_error: Option<String>,
    /// See [`TurnOutcome::log_write_error`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_write_error: Option<String>,
    /// See [`TurnOutcome::cancel_requested`].
    #[serde(default)]
    pub cancel_requested: bool,
}

/// By value: the reply moves into the wire form instead of being copied (it is megabytes
/// after a long turn, and the owner would hold it twice).
impl From<TurnOutcome> for WireOutcome {
    fn from(o: TurnOutcome) -> Self {
        WireOutcome {
            request_id: o.request_id,
            user_message_id: o.user_message_id,
            outcome: o.outcome,
            stop_reason: o.stop_reason,
            error: o.error,
            acp_error: o.acp_error.as_ref().map(WireAcpError::from),
            permission_stats: o.permission_stats,
            usage: o.usage,
            agent_text: o.agent_text,
            agent_text_error: o.agent_text_error,
            log_write_error: o.log_write_error,
            cancel_requested: o.cancel_requested,
        }
    }
}

impl From<WireOutcome> for TurnOutcome {
    fn from(o: WireOutcome) -> Self {
        TurnOutcome {
            request_id: o.request_id,
            user_message_id: o.user_message_id,
            outcome: o.outcome,
            stop_reason: o.stop_reason,
            error: o.error,
            acp_error: o.acp_error.map(AcpError::from),
            permission_stats: o.permission_stats,
            usage: o.usage,
            agent_text: o.agent_text,
            agent_text_error: o.agent_text_error,
            log_write_error: o.log_write_error,
            cancel_requested: o.cancel_requested,
        }
    }
}

/// What the owner reports about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnerStatus {
    /// The owner's process id.
    pub pid: u32,
    /// When the owner started.
    pub started_at: Timestamp,
    /// Seconds since then.
    pub uptime_seconds: u64,
    /// The agent's process id, while an agent runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_pid: Option<u32>,
    /// The attached agent exited while the owner was idle (the next task attaches a new one).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub agent_exited: bool,
    /// Tasks waiting behind the one in progress.
    pub queue_depth: usize,
    /// The `requestId` of the turn in progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<String>,
    /// The `requestId` of the prompt taken up while its agent starts or attaches (its turn
    /// has not started; `cancel` withdraws it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub starting: Option<String>,
    /// When the task in progress was taken up (its agent may still be starting).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running_since: Option<Timestamp>,
    /// The lease generation (a new one per owner).
    pub generation: u64,
    /// The idle time-to-live in seconds (0: until closed).
    pub ttl_seconds: u64,
    /// Connections the owner failed to accept (out of file descriptors, …); it backs off
    /// and goes on accepting.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub accept_errors: u64,
    /// The last of those errors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_accept_error: Option<String>,
    /// Connections served now, the one asking included (0 from an older owner).
    #[serde(default, skip_serializing_if = "is_zero_usize")]
    pub connections: usize,
    /// The most connections the owner serves at once for any request
    /// (`ACPX_OWNER_MAX_CONNECTIONS`; 0 from an older owner, which has no limit).
    #[serde(default, skip_serializing_if = "is_zero_usize")]
    pub max_connections: usize,
    /// Connections refused because that limit was reached (`QUEUE_OWNER_BUSY`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub refused_connections: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_zero_usize(n: &usize) -> bool {
    *n == 0
}

/// What the owner sends back (one JSON object per line).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(
    tag = "type",
    rename_all = "snake_case",
    rename_all_fields = "camelCase"
)]
pub enum Response {
    /// The task is queued.
    Accepted {
        /// The task's request id (prompts) or a control id.
        request_id: String,
        /// Tasks ahead of it, including the one in progress.
        queue_depth: usize,
    },
    /// The task reached the head of the queue.
    Started {
        /// The task's request id.
        request_id: String,
        /// What the user must be told about the (re)attach this task caused (a fallback to
        /// a new ACP session, choices not set again, MCP servers left out).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        notices: Vec<WireNotice>,
    },
    /// A permission question for the client's user (only to a client whose task is
    /// `interactive`); answered with [`ClientLine::PermissionAnswer`].
    PermissionRequest {
        /// The question's id within the connection.
        id: u64,
        /// The question.
        question: WireQuestion,
    },
    /// An agent's elicitation for the client's user (only to a client whose task is
    /// `interactive` and takes `elicitations`): the `elicitation/create` params as the agent
    /// sent them; answered with [`ClientLine::ElicitationAnswer`].
    ElicitationRequest {
        /// The question's id within the connection.
        id: u64,
        /// The request.
        request: Value,
    },
    /// The elicitation `id` needs no answer any more (the agent completed the URL visit, the
    /// turn was cancelled): the client stops asking.
    ElicitationEnded {
        /// The question's id.
        id: u64,
    },
    /// One recorded event of the turn, after its append returned.
    Event {
        /// The event exactly as in the log.
        envelope: EventEnvelope,
    },
    /// A piece of the turn's reply (at most 64 KiB of text), only to a client whose task set
    /// [`TaskOptions::reply_in_parts`]: after the turn ended and before its `result`, in
    /// order, never split inside a character. Their concatenation is the reply the `result`
    /// would otherwise carry in `agentText`. When a piece cannot be read back (from the spill
    /// file), the pieces sent before stay sent and the `result` says so in `agentTextError`.
    ReplyPart {
        /// The text.
        text: String,
    },
    /// One raw JSON-RPC line of the agent connection, only to a client whose task set
    /// [`TaskOptions::acp_frames`]: exactly as written to the agent (`outbound`) or read
    /// from it (`inbound`), in the order they crossed, before the task's final line; or,
    /// to a client whose task set [`TaskOptions::verbose`], a line the agent wrote on its
    /// stderr (`stderr`).
    Frame {
        /// `outbound` (to the agent) or `inbound` (from it), Node acpx's words; `stderr`.
        direction: String,
        /// The line, without its newline.
        line: String,
    },
    /// The turn ended (whatever its outcome).
    Result {
        /// How.
        outcome: WireOutcome,
    },
    /// The task failed or was refused.
    Error {
        /// Why.
        error: WireError,
    },
    /// A control (set_mode, set_config_option) succeeded.
    ControlResult {
        /// Whether the ACP session was reattached rather than created afresh.
        resumed: bool,
        /// The agent's answer (`configOptions` for set_config_option; null for set_mode).
        value: Value,
    },
    /// The answer to `cancel` (and `withdraw`).
    CancelResult {
        /// Whether a turn was running and was asked to cancel, or a prompt not started yet
        /// was withdrawn.
        cancelled: bool,
        /// The prompt had not started (its agent was starting): it was withdrawn, never
        /// sent to the agent, and its client told so.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        withdrawn: bool,
        /// The cancelled turn's request id.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request_id: Option<String>,
    },
    /// The answer to `status`.
    Status {
        /// The owner's state.
        status: OwnerStatus,
    },
    /// The session was closed (or, for `release`, the owner stopped).
    Closed {
        /// Whether ACP `session/close` was sent (the agent advertises it).
        closed: bool,
    },
}

impl Response {
    /// Whether this line ends the answer to a request.
    pub fn is_final(&self) -> bool {
        !matches!(
            self,
            Response::Accepted { .. }
                | Response::Started { .. }
                | Response::Event { .. }
                | Response::PermissionRequest { .. }
                | Response::ElicitationRequest { .. }
                | Response::ElicitationEnded { .. }
                | Response::ReplyPart { .. }
                | Response::Frame { .. }
        )
    }
}

/// One JSON line (with its newline).
pub fn line<T: Serialize>(v: &T) -> String {
    let mut s = serde_json::to_string(v).unwrap_or_default();
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a client from before `replyInParts` sends: it must still parse, as a task that
    /// takes the reply whole.
    #[test]
    fn task_options_without_the_flag_parse_as_a_whole_reply() {
        let old = r#"{"type":"submit_prompt","requestId":"r","prompt":[],"wait":true,
            "options":{"permissionMode":"deny-all","noEvents":true}}"#;
        let Request::SubmitPrompt { options, .. } = serde_json::from_str(old).unwrap() else {
            panic!("not a prompt")
        };
        assert!(!options.reply_in_parts && options.no_events && !options.no_agent_text);
    }

    #[test]
    fn the_flag_is_sent_only_when_set_and_reads_back() {
        let mut options = TaskOptions::default();
        assert!(!line(&options).contains("replyInParts"));
        options.reply_in_parts = true;
        let l = line(&options);
        assert!(l.contains(r#""replyInParts":true"#), "{l}");
        assert_eq!(serde_json::from_str::<TaskOptions>(&l).unwrap(), options);
    }

    /// An owner that predates the flag reads it as an unknown field and ignores it (this
    /// version's reading stands in for the old one: neither denies unknown fields).
    #[test]
    fn unknown_option_fields_are_ignored() {
        let newer = r#"{"permissionMode":"approve-all","replyInParts":true,"fromTheFuture":1}"#;
        let o: TaskOptions = serde_json::from_str(newer).unwrap();
        assert_eq!(
            o.invocation.permission_mode,
            acpx_runtime::PermissionMode::ApproveAll
        );
    }

    #[test]
    fn a_reply_part_is_a_snake_case_line_that_does_not_end_the_answer() {
        let part = Response::ReplyPart {
            text: "caf\u{e9}\n".into(),
        };
        let l = line(&part);
        assert_eq!(l, "{\"type\":\"reply_part\",\"text\":\"caf\u{e9}\\n\"}\n");
        assert!(!part.is_final());
        assert_eq!(
            serde_json::from_str::<Response>(l.trim_end()).unwrap(),
            part
        );
    }

    #[test]
    fn a_frame_is_a_line_that_does_not_end_the_answer_and_asked_for_only() {
        let frame = Response::Frame {
            direction: "inbound".into(),
            line: r#"{"jsonrpc":"2.0","method":"session/update","params":{}}"#.into(),
        };
        let l = line(&frame);
        assert!(
            l.starts_with(r#"{"type":"frame","direction":"inbound","line":"{\"jsonrpc"#),
            "{l}"
        );
        assert!(!frame.is_final());
        assert_eq!(
            serde_json::from_str::<Response>(l.trim_end()).unwrap(),
            frame
        );
        assert!(!line(&TaskOptions::default()).contains("acpFrames"));
    }

    /// A result from an owner that predates `agentTextError` (or that had nothing to report)
    /// parses, and an empty `agentText` is still sent (clients of every version read it).
    #[test]
    fn a_result_with_an_empty_reply_round_trips() {
        let old = r#"{"type":"result","outcome":{"requestId":"r","userMessageId":"u",
            "outcome":"completed","permissionStats":{"requested":0,"approved":0,"denied":0,
            "cancelled":0},"agentText":"whole"}}"#;
        let Response::Result { outcome } = serde_json::from_str(old).unwrap() else {
            panic!("not a result")
        };
        assert_eq!(outcome.agent_text, "whole");
        assert_eq!(outcome.agent_text_error, None);
        let empty = WireOutcome {
            agent_text: String::new(),
            agent_text_error: Some("gone".into()),
            ..outcome
        };
        let l = line(&Response::Result {
            outcome: empty.clone(),
        });
        assert!(l.contains(r#""agentText":"""#), "{l}");
        assert!(l.contains(r#""agentTextError":"gone""#), "{l}");
        assert_eq!(
            serde_json::from_str::<Response>(l.trim_end()).unwrap(),
            Response::Result { outcome: empty }
        );
    }
}
