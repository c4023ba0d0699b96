//! Errors of the runtime.

use acpx_model::{RecordId, StoreError};
use serde_json::Value;

/// A JSON-RPC error object received from (or sent to) the agent.
#[derive(Debug, Clone, PartialEq)]
pub struct AcpError {
    /// The JSON-RPC error code (-32603, -32002, …).
    pub code: i64,
    /// The error message.
    pub message: String,
    /// Free-form details, often holding the real reason.
    pub data: Option<Value>,
}

impl AcpError {
    pub(crate) fn from_sdk(e: &agent_client_protocol::Error) -> Self {
        AcpError {
            code: i64::from(i32::from(e.code)),
            message: e.message.clone(),
            data: e.data.clone(),
        }
    }

    /// The error as the JSON object logged in events (`{code, message, data?}`).
    pub fn to_json(&self) -> Value {
        let mut o = serde_json::json!({"code": self.code, "message": self.message});
        if let Some(d) = &self.data {
            o["data"] = d.clone();
        }
        o
    }

    /// Whether the agent said the session does not exist: codes -32001/-32002, or a message
    /// or data naming a missing session (`acp-protocol-notes.md` §12).
    pub fn is_not_found(&self) -> bool {
        if matches!(self.code, -32001 | -32002) {
            return true;
        }
        let mut text = self.message.to_ascii_lowercase();
        if let Some(d) = &self.data {
            text.push(' ');
            text.push_str(&d.to_string().to_ascii_lowercase());
        }
        [
            "resource_not_found",
            "resource not found",
            "session not found",
            "unknown session",
            "invalid session identifier",
        ]
        .iter()
        .any(|needle| text.contains(needle))
            || (text.contains("session ") && text.contains(" not found"))
    }

    /// Whether the agent does not implement the method (-32601), or rejected its parameters
    /// (-32602, which several agents use for an unknown session).
    pub fn is_unsupported(&self) -> bool {
        matches!(self.code, -32601 | -32602)
    }
}

impl std::fmt::Display for AcpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (JSON-RPC {})", self.message, self.code)?;
        if let Some(d) = &self.data {
            write!(f, ": {d}")?;
        }
        Ok(())
    }
}

/// Errors returned by [`crate::Runtime`] and [`crate::Session`].
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The store failed. A failed `session.json` write ends the operation that needed it.
    #[error(transparent)]
    Store(#[from] StoreError),

    /// The agent command could not be started.
    #[error("could not start the agent `{command}`: {reason}; check the command and that it is installed")]
    Spawn {
        /// The command line as configured.
        command: String,
        /// What the operating system said.
        reason: String,
    },

    /// The agent answered a request with a JSON-RPC error.
    #[error("the agent failed `{method}`: {error}")]
    Agent {
        /// The ACP method that failed.
        method: String,
        /// The agent's error object.
        error: Box<AcpError>,
    },

    /// The agent process went away (exited, or closed its stdout) before answering.
    #[error("the agent disconnected during `{method}`: {detail}")]
    Disconnected {
        /// The ACP method that was waiting.
        method: String,
        /// How the agent ended, and the end of its stderr.
        detail: String,
    },

    /// The agent sent something that is not valid ACP.
    #[error("the agent sent an invalid `{method}` response: {detail}")]
    Protocol {
        /// The ACP method whose answer was wrong.
        method: String,
        /// What was wrong.
        detail: String,
    },

    /// The agent did not answer in time (the request timeout, `RuntimeOptions::request_timeout`).
    #[error("the agent `{agent}` did not answer `{method}` within {seconds} s")]
    Timeout {
        /// The agent's command line.
        agent: String,
        /// The ACP method that timed out.
        method: String,
        /// The limit.
        seconds: u64,
    },

    /// The caller passed something unusable.
    #[error("{0}")]
    InvalidInput(String),

    /// `set-mode` with a mode id the agent's session answer does not list.
    #[error("the agent offers no mode {mode:?} in this session; its modes are: {}", available.join(", "))]
    UnknownMode {
        /// The mode asked for.
        mode: String,
        /// The ids of the agent's `availableModes`.
        available: Vec<String>,
    },

    /// `set` or `set model` with a config option, a value or a model the session does not
    /// offer: known from the session's advertised options, or the agent refused it as invalid
    /// params (`detail`: its own message). A usage error, like [`RuntimeError::UnknownMode`].
    #[error("the agent offers no {what} {asked:?} in this session{}{}", if available.is_empty() { "; it lists none to choose from".to_owned() } else { format!("; it offers: {}", available.join(", ")) }, detail.as_ref().map(|d| format!(" (the agent said: {d})")).unwrap_or_default())]
    NotOffered {
        /// `config option`, `value of config option <id>` or `model`.
        what: String,
        /// What was asked for.
        asked: String,
        /// What the session offers (empty when it did not say).
        available: Vec<String>,
        /// The agent's own message, when it refused.
        detail: Option<String>,
        /// The agent's error, when it refused (kept in JSON output).
        acp: Option<Box<crate::error::AcpError>>,
    },

    /// The event log could not be written for too long; the turn was stopped rather than
    /// continue without an audit trail.
    #[error("session {id}: the event log cannot be written ({detail}); the session was stopped")]
    LogUnwritable {
        /// The session.
        id: RecordId,
        /// The last append error.
        detail: String,
    },

    /// The mode the user chose could not be set again after attaching, so the prompt was not
    /// sent: a user who chose a restrictive mode never gets a turn in a more permissive one.
    #[error("the agent did not accept the session's mode {mode:?} again ({detail}); nothing was sent to it, so nothing ran in another mode")]
    ModeNotRestored {
        /// The mode the user chose.
        mode: String,
        /// The agent's error.
        detail: String,
    },

    /// The agent could not restore the ACP session and the session may not continue in a new
    /// one (the `same-session-only` resume policy, or a record imported from Node acpx).
    #[error("the agent could not restore ACP session {acp_session_id} ({detail}), and {why}; no new ACP session was started")]
    ResumeRequired {
        /// The ACP session that could not be restored.
        acp_session_id: String,
        /// The failed steps (`session/load: not found`, …).
        detail: String,
        /// Why a fallback is not allowed.
        why: String,
    },

    /// The agent advertises auth methods, no credential matches any of them, and the auth
    /// policy is `fail` (`docs/format.md`, § Authentication). Nothing was asked of the agent
    /// after `initialize`.
    /// Also what the agent's own `auth_required` (-32000) answer to a session request becomes
    /// under the `skip` policy (`agent_said` then holds the agent's error).
    #[error("{}the agent requires authentication (auth methods: {}) and no credential was found; set {} in the environment, or add {} to the configuration", agent_said.as_ref().map(|s| format!("{s}: ")).unwrap_or_default(), methods.join(", "), env_vars.join(" or "), methods.iter().map(|m| format!("auth.{m}")).collect::<Vec<_>>().join(" or "))]
    AuthRequired {
        /// The advertised method ids.
        methods: Vec<String>,
        /// The environment variables that would hold their credentials.
        env_vars: Vec<String>,
        /// The agent's refusal (`session/new` answered `Authentication required (JSON-RPC
        /// -32000)`), when it came from the agent rather than from the `fail` policy.
        agent_said: Option<String>,
    },

    /// The session is not usable any more (closed, or its agent is gone).
    #[error("session {id} is not connected to an agent any more: {detail}")]
    NotConnected {
        /// The session.
        id: RecordId,
        /// Why it is not usable.
        detail: String,
    },
}

/// Result type of this crate.
pub type RuntimeResult<T> = Result<T, RuntimeError>;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn err(code: i64, message: &str, data: Option<Value>) -> AcpError {
        AcpError {
            code,
            message: message.into(),
            data,
        }
    }

    #[test]
    fn not_found_matches_codes_and_texts() {
        assert!(err(-32002, "x", None).is_not_found());
        assert!(err(-32001, "x", None).is_not_found());
        assert!(err(-32603, "Session not found", None).is_not_found());
        assert!(err(
            -32603,
            "boom",
            Some(json!({"reason": "unknown session abc"}))
        )
        .is_not_found());
        assert!(err(-32603, "session abc not found", None).is_not_found());
        assert!(err(-32603, "Invalid session identifier", None).is_not_found());
        assert!(!err(-32603, "Query closed before response received", None).is_not_found());
        assert!(!err(-32603, "file not found", None).is_not_found());
        assert!(err(-32601, "Method not found", None).is_unsupported());
        assert!(!err(-32603, "x", None).is_unsupported());
    }
}
