//! What a [`Runtime`](super::Runtime) drives agents with, what a new session is made from,
//! and what opening one reports.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use acpx_model::Durability;
use serde::{Deserialize, Serialize};

use crate::agent::WireObserver;
use crate::client_ops::{
    PermissionMode, PermissionPrompter, DEFAULT_TERMINAL_OUTPUT_CEILING,
    DEFAULT_TERMINAL_OUTPUT_LIMIT,
};
use crate::mapping::RollForward;
use crate::mcp_servers::McpServers;
use crate::permission_rules::PermissionRules;
use crate::recorder::{Observer, DEFAULT_SNAPSHOT_INTERVAL};

/// The protocol version acpx speaks.
pub const PROTOCOL_VERSION: u64 = 1;

/// How a [`Runtime`](super::Runtime) drives agents and records sessions.
#[derive(Clone)]
pub struct RuntimeOptions {
    /// How permission requests, writes and terminals are decided.
    pub permission_mode: PermissionMode,
    /// Who to ask under [`PermissionMode::ApproveReads`]; without one, such requests are
    /// denied.
    pub prompter: Option<Arc<dyn PermissionPrompter>>,
    /// How far each event-log append is pushed to disk. [`Durability::Flush`] (the default)
    /// is what makes a `kill -9` lose nothing that was recorded.
    pub durability: Durability,
    /// At most how often `session.json` is rewritten while events stream.
    pub snapshot_interval: Duration,
    /// How long to wait for another process holding the session's writer lock.
    pub lock_timeout: Duration,
    /// How long setup and control requests (initialize, new/load/resume, set_mode, …) may take.
    pub request_timeout: Duration,
    /// A prompt turn still running after this long is cancelled and recorded as `timeout`.
    pub prompt_timeout: Option<Duration>,
    /// After `session/cancel`, how long to wait for the agent's answer before giving up.
    pub cancel_grace: Duration,
    /// Advertise and serve `fs/read_text_file` and `fs/write_text_file`.
    pub fs: bool,
    /// Advertise and serve `terminal/*`.
    pub terminal: bool,
    /// Output kept per terminal when the agent sets no `outputByteLimit`.
    pub terminal_output_limit: usize,
    /// The most output kept per terminal.
    pub terminal_output_ceiling: usize,
    /// Extra environment for agent processes.
    pub agent_env: Vec<(String, String)>,
    /// Sees every recorded event of every session.
    pub observer: Option<Observer>,
    /// Sees every raw JSON-RPC line (and the agent's stderr lines).
    pub wire_observer: Option<WireObserver>,
    /// What reattaching may do when the agent cannot restore the ACP session.
    pub resume_policy: ResumePolicy,
    /// What happens when a decision needs a human and there is no prompter.
    pub non_interactive: NonInteractivePermissions,
    /// `--elicitation-answers`: answers to the agent's form elicitations, by field name.
    pub elicitation_answers: Option<crate::ElicitationAnswers>,
    /// MCP servers chosen for this invocation (`--mcp-config`): sent to the agent and stored
    /// in the record, replacing the stored list.
    pub mcp_servers: Option<McpServers>,
    /// MCP servers of the configuration: used when neither this invocation nor the record
    /// names any (and stored in a new record).
    pub default_mcp_servers: Option<McpServers>,
    /// `--add-dir`: additional workspace roots for this invocation, sent as
    /// `additionalDirectories` and stored in the record, replacing the stored list (empty:
    /// the record's are sent again).
    pub additional_directories: Vec<PathBuf>,
    /// A model chosen for this invocation (`--model`): applied after attaching and stored as
    /// the session's desired model.
    pub model: Option<String>,
    /// `--permission-policy` rules: they decide permission requests before the mode.
    pub permission_rules: Option<PermissionRules>,
    /// Answers a recording holds for permission questions (`acpx replay`): asked before the
    /// rules and the mode; a question they do not answer goes the usual way.
    pub recorded_permissions: Option<Arc<dyn crate::client_ops::RecordedPermissions>>,
    /// `--prompt-retries`: how many times a transient prompt failure before any side effect
    /// is retried ([`crate::session::TRANSIENT_PROMPT_ERRORS`]).
    pub prompt_retries: u32,
    /// `--auth-policy`: what happens when the agent advertises auth methods and no credential
    /// matches ([`super::auth`]).
    pub auth_policy: super::AuthPolicy,
    /// The configuration's `auth`: credentials by auth method id.
    pub auth_credentials: std::collections::BTreeMap<String, String>,
    /// Whether the session lives on between turns in this process (a queue owner): opening
    /// it then settles the conversation's finished turns into spill files while reading it
    /// ([`acpx_model::Store::load_settling`]), so that a long session is never whole in its
    /// memory (docs/format.md decision 17).
    pub lives_on: bool,
}

/// What reattaching may do when the agent cannot restore the record's ACP session
/// (`docs/format.md`, "Reattach and the user's choices").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ResumePolicy {
    /// Fall back to a fresh ACP session under the same record id (said on stderr and logged).
    #[default]
    AllowNew,
    /// Fail instead: the conversation must continue in the same ACP session or not at all.
    SameSessionOnly,
}

impl ResumePolicy {
    /// The CLI and config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ResumePolicy::AllowNew => "allow-new",
            ResumePolicy::SameSessionOnly => "same-session-only",
        }
    }
}

/// What happens when a permission decision needs a human and there is no prompter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NonInteractivePermissions {
    /// Refuse the operation (the turn goes on).
    #[default]
    Deny,
    /// Refuse it and fail the turn with `PERMISSION_PROMPT_UNAVAILABLE`.
    Fail,
}

impl NonInteractivePermissions {
    /// The CLI and config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            NonInteractivePermissions::Deny => "deny",
            NonInteractivePermissions::Fail => "fail",
        }
    }
}

impl Default for RuntimeOptions {
    fn default() -> Self {
        RuntimeOptions {
            permission_mode: PermissionMode::default(),
            prompter: None,
            durability: Durability::Flush,
            snapshot_interval: DEFAULT_SNAPSHOT_INTERVAL,
            lock_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(120),
            prompt_timeout: None,
            cancel_grace: Duration::from_secs(10),
            fs: true,
            terminal: true,
            terminal_output_limit: DEFAULT_TERMINAL_OUTPUT_LIMIT,
            terminal_output_ceiling: DEFAULT_TERMINAL_OUTPUT_CEILING,
            agent_env: Vec::new(),
            observer: None,
            wire_observer: None,
            resume_policy: ResumePolicy::default(),
            non_interactive: NonInteractivePermissions::default(),
            elicitation_answers: None,
            mcp_servers: None,
            default_mcp_servers: None,
            additional_directories: Vec::new(),
            model: None,
            permission_rules: None,
            prompt_retries: 0,
            auth_policy: super::AuthPolicy::default(),
            auth_credentials: std::collections::BTreeMap::new(),
            lives_on: false,
            recorded_permissions: None,
        }
    }
}

impl std::fmt::Debug for RuntimeOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeOptions")
            .field("permission_mode", &self.permission_mode)
            .field("prompter", &self.prompter.is_some())
            .field("recorded_permissions", &self.recorded_permissions.is_some())
            .field("durability", &self.durability)
            .field("snapshot_interval", &self.snapshot_interval)
            .field("prompt_timeout", &self.prompt_timeout)
            .field("fs", &self.fs)
            .field("terminal", &self.terminal)
            .finish_non_exhaustive()
    }
}

/// What a new session is made from.
#[derive(Debug, Clone)]
pub struct NewSessionSpec {
    /// The agent command line (shell-like words; leading `NAME=value` words set environment).
    pub agent_command: String,
    /// The session's working directory: absolute and existing.
    pub cwd: PathBuf,
    /// An optional name.
    pub name: Option<String>,
}

/// How a session got its ACP session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attachment {
    /// `session/new` for a new record.
    Created,
    /// `session/resume` or `session/load` of the record's ACP session.
    Reattached {
        /// `session/resume` or `session/load`.
        method: String,
        /// History updates the agent replayed during the load (counted, not recorded).
        replayed_updates: u64,
    },
    /// Load/resume was impossible, so a fresh ACP session replaced the old one.
    Fallback {
        /// `not_found`, `unsupported` or `failed_without_history`.
        reason: String,
        /// The ACP session id that could not be restored.
        previous_acp_session_id: String,
    },
}

/// A reattach step that failed before the one that worked (or before the fallback).
#[derive(Debug, Clone, PartialEq)]
pub struct FailedAttempt {
    /// `session/resume` or `session/load`.
    pub method: String,
    /// `unsupported`, `not_found` or `failed_without_history`.
    pub reason: String,
    /// The agent's error, when it answered with one.
    pub error: Option<crate::AcpError>,
}

impl FailedAttempt {
    /// `{method, reason, error?}`, as in the `session_attached` and `session_fallback`
    /// payloads.
    pub fn to_json(&self) -> serde_json::Value {
        let mut m = serde_json::Map::new();
        m.insert("method".into(), self.method.clone().into());
        m.insert("reason".into(), self.reason.clone().into());
        if let Some(e) = &self.error {
            m.insert("error".into(), e.to_json());
        }
        serde_json::Value::Object(m)
    }
}

/// Something the user must be told about opening a session (the CLI prints it on stderr, or
/// as a JSON line).
#[derive(Debug, Clone, PartialEq)]
pub enum Notice {
    /// The agent could not restore the ACP session; a fresh one replaced it and the agent
    /// does not remember earlier turns.
    Fallback {
        /// The ACP session that could not be restored.
        previous_acp_session_id: String,
        /// The new ACP session.
        acp_session_id: String,
        /// The steps that failed, in order (empty when the agent offers neither).
        failed_attempts: Vec<FailedAttempt>,
    },
    /// A config option or the model the user chose could not be set again; the session goes
    /// on with the agent's value.
    ChoiceNotRestored {
        /// `config_option` or `model`.
        kind: String,
        /// The config option id (or `model`).
        id: String,
        /// The value that was asked for.
        value: serde_json::Value,
        /// Why it failed.
        error: String,
    },
    /// MCP servers left out because the agent does not take their transport.
    McpServersLeftOut(Vec<String>),
    /// Beside a [`Notice::Fallback`]: the session is a fork that had no turn yet, and the
    /// agent has no record of its ACP session, so the agent never stored the fork (some
    /// store one only after its first turn, in the process that made it). The record keeps
    /// the parent's conversation; the agent starts without it.
    ForkNotStored {
        /// The fork's ACP session that the agent does not know.
        acp_session_id: String,
    },
}

/// What opening an existing record found and repaired.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Logged events folded into a snapshot that was saved before them.
    pub rolled_forward: RollForward,
    /// The request id of a turn that never ended, now recorded as interrupted.
    pub interrupted_turn: Option<String>,
    /// The pid of an agent an earlier acpx process left behind.
    pub stale_agent_pid: Option<u32>,
    /// Seqs the snapshot had folded in that the log does not have (`from..=to`).
    pub log_gap: Option<(u64, u64)>,
    /// Damaged log lines skipped while rolling forward: those before the log's last sound
    /// event (with nothing sound after the snapshot's events there is no roll-forward, and
    /// damage at the end of the log is `fsck`'s to report).
    pub damaged_lines: usize,
}
