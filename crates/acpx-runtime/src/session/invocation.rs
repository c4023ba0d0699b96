//! [`Invocation`]: the options of one command (`prompt`, `set-mode`, `sessions new`, …),
//! decided once and applied the same way whether the command runs its agent in its own
//! process or hands the work to the session's queue owner.
//!
//! The in-process path applies an invocation to the runtime it builds
//! ([`Invocation::apply`]); a queue owner receives it inside each task's options (it is
//! serde-able, and its JSON is the task options' decision fields on the owner's wire), applies
//! it to the runtime it (re)attaches with, and takes each turn's part of it as
//! [`TurnOptions`] ([`Invocation::turn_options`]). The MCP servers of a
//! reattach are chosen by one function, [`effective_mcp_servers`], on both paths.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use acpx_model::SessionRecord;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::auth::AuthPolicy;
use super::options::{NonInteractivePermissions, ResumePolicy, RuntimeOptions};
use super::prompt::TurnOptions;
use crate::client_ops::PermissionMode;
use crate::error::{RuntimeError, RuntimeResult};
use crate::mapping::MCP_SERVERS_KEY;
use crate::mcp_servers::{parse_mcp_servers, McpServers};
use crate::permission_rules::PermissionRules;

/// The shortest bound a command's timeout puts on the agent's other requests: a `--timeout`
/// below it still lets `initialize` and `session/load` answer.
const SHORTEST_REQUEST_TIMEOUT: Duration = Duration::from_secs(1);

/// What one command asks of the session engine: its permission decisions, its timeout, what
/// reattaching may do, the session's choices it makes (MCP servers, model, additional
/// directories) and the capabilities it offers the agent. Options a command leaves unset
/// (`None`, empty) keep what the runtime it is applied to has.
///
/// On the queue owner's wire it travels inside each task's options, with these JSON names
/// (camelCase; absent fields are their defaults, unknown fields are ignored). A bad value (an
/// unknown permission mode, a malformed MCP server list) is an error when read, never a
/// silent default.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Invocation {
    /// How the command's permission requests, writes and terminals are decided.
    pub permission_mode: PermissionMode,
    /// The turn's timeout (`--timeout`); it also bounds the agent's start and every request
    /// other than the prompt ([`Invocation::apply`]). On the wire: `timeoutMs`.
    #[serde(
        default,
        rename = "timeoutMs",
        with = "timeout_ms",
        skip_serializing_if = "Option::is_none"
    )]
    pub timeout: Option<Duration>,
    /// `--non-interactive-permissions`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub non_interactive: Option<NonInteractivePermissions>,
    /// `--elicitation-answers`: answers to form elicitations, by field name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elicitation_answers: Option<Map<String, Value>>,
    /// `--resume-policy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_policy: Option<ResumePolicy>,
    /// `--mcp-config`: the MCP servers this command chooses for the session (stored in its
    /// record). On the wire in ACP's array form.
    #[serde(default, with = "mcp_list", skip_serializing_if = "Option::is_none")]
    pub mcp_servers: Option<McpServers>,
    /// The configuration's `mcpServers`: used when neither the command nor the record names
    /// any.
    #[serde(default, with = "mcp_list", skip_serializing_if = "Option::is_none")]
    pub default_mcp_servers: Option<McpServers>,
    /// `--add-dir`, absolute (empty: the record's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub additional_directories: Vec<PathBuf>,
    /// `--model`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// `--prompt-retries`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_retries: Option<u32>,
    /// `--permission-policy` rules for this command's permission requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_policy: Option<PermissionRules>,
    /// `--auth-policy`, for the attach this command causes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_policy: Option<AuthPolicy>,
    /// `--no-fs`: the agent is neither offered nor served `fs/*`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_fs: bool,
    /// `--no-terminal`: the agent is neither offered nor served `terminal/*`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_terminal: bool,
}

impl Invocation {
    /// Applies this command's options to `options`, the runtime it opens or reattaches its
    /// session with: its choices replace the runtime's, its unset options keep them, and its
    /// timeout also bounds every request other than the prompt (at least 1 s), as
    /// `docs/format.md` § Durations says: an agent that never answers `initialize` must not
    /// hold the user longer than they asked to wait.
    pub fn apply(&self, options: &mut RuntimeOptions) {
        options.permission_mode = self.permission_mode;
        options.prompt_timeout = self.timeout;
        if let Some(t) = self.timeout {
            options.request_timeout = options.request_timeout.min(t.max(SHORTEST_REQUEST_TIMEOUT));
        }
        if let Some(n) = self.non_interactive {
            options.non_interactive = n;
        }
        if let Some(answers) = &self.elicitation_answers {
            options.elicitation_answers = Some(Arc::new(answers.clone()));
        }
        if let Some(p) = self.resume_policy {
            options.resume_policy = p;
        }
        options.mcp_servers = self.mcp_servers.clone();
        if self.default_mcp_servers.is_some() {
            options.default_mcp_servers = self.default_mcp_servers.clone();
        }
        options.additional_directories = self.additional_directories.clone();
        options.model = self.model.clone();
        if let Some(r) = self.prompt_retries {
            options.prompt_retries = r;
        }
        if self.permission_policy.is_some() {
            options.permission_rules = self.permission_policy.clone();
        }
        if let Some(a) = self.auth_policy {
            options.auth_policy = a;
        }
        options.fs = !self.no_fs;
        options.terminal = !self.no_terminal;
    }

    /// This command's part of one turn on a session that lives on between commands (a queue
    /// owner's): its permission decisions, answers, retries and timeout, for that turn only.
    /// The caller adds the turn's observer, prompter and request id.
    pub fn turn_options(&self) -> TurnOptions {
        TurnOptions {
            permission_mode: Some(self.permission_mode),
            non_interactive: self.non_interactive,
            permission_rules: self.permission_policy.clone(),
            elicitation_answers: self.elicitation_answers.clone().map(Arc::new),
            prompt_retries: self.prompt_retries,
            prompt_timeout: Some(self.timeout),
            ..TurnOptions::default()
        }
    }

    /// The MCP servers a reattach of `record` gives the agent under this command
    /// ([`effective_mcp_servers`]).
    pub fn mcp_servers_for(&self, record: &SessionRecord) -> RuntimeResult<Option<McpServers>> {
        effective_mcp_servers(
            self.mcp_servers.as_ref(),
            record,
            self.default_mcp_servers.as_ref(),
        )
    }
}

/// The MCP servers of a reattach: the command's own (`chosen`, `--mcp-config`), else the
/// record's, else the configuration's (`default`) — the order of `docs/format.md`, "Reattach
/// and the user's choices". A stored list that is not a valid MCP server list is an error
/// naming the session, on every path.
pub fn effective_mcp_servers(
    chosen: Option<&McpServers>,
    record: &SessionRecord,
    default: Option<&McpServers>,
) -> RuntimeResult<Option<McpServers>> {
    if let Some(m) = chosen {
        return Ok(Some(m.clone()));
    }
    if let Some(stored) = record.acpx.extra.get(MCP_SERVERS_KEY) {
        return McpServers::from_stored(stored).map(Some).map_err(|e| {
            RuntimeError::InvalidInput(format!(
                "session {}: acpx.{MCP_SERVERS_KEY} is not a valid MCP server list: {e}",
                record.acpx_record_id
            ))
        });
    }
    Ok(default.cloned())
}

/// `timeoutMs`: a duration as whole milliseconds (saturating).
mod timeout_ms {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(t: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match t {
            Some(t) => s.serialize_some(&u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<u64>::deserialize(d)?.map(Duration::from_millis))
    }
}

/// An MCP server list in ACP's array form; a malformed one is an error naming what is wrong.
mod mcp_list {
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use serde_json::Value;

    use super::{parse_mcp_servers, McpServers};

    pub fn serialize<S: Serializer>(m: &Option<McpServers>, s: S) -> Result<S::Ok, S::Error> {
        m.as_ref().map(McpServers::to_json).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<McpServers>, D::Error> {
        Option::<Value>::deserialize(d)?
            .map(|v| {
                parse_mcp_servers(&v)
                    .map_err(|e| D::Error::custom(format!("bad MCP server list: {e}")))
            })
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wire_form_reads_back_and_names_its_fields() {
        let inv = Invocation {
            permission_mode: PermissionMode::DenyAll,
            timeout: Some(Duration::from_millis(1500)),
            model: Some("m".into()),
            no_fs: true,
            ..Invocation::default()
        };
        let json = serde_json::to_string(&inv).unwrap();
        assert_eq!(
            json,
            r#"{"permissionMode":"deny-all","timeoutMs":1500,"model":"m","noFs":true}"#
        );
        assert_eq!(serde_json::from_str::<Invocation>(&json).unwrap(), inv);
    }

    #[test]
    fn a_bad_permission_mode_or_mcp_list_is_an_error() {
        let e = serde_json::from_str::<Invocation>(r#"{"permissionMode":"yes"}"#).unwrap_err();
        assert!(e.to_string().contains("yes"), "{e}");
        let e = serde_json::from_str::<Invocation>(
            r#"{"permissionMode":"deny-all","mcpServers":[{"name":1}]}"#,
        )
        .unwrap_err();
        assert!(e.to_string().contains("bad MCP server list"), "{e}");
    }

    #[test]
    fn the_timeout_bounds_other_requests_but_not_below_a_second() {
        let mut o = RuntimeOptions::default();
        let before = o.request_timeout;
        Invocation {
            timeout: Some(Duration::from_millis(10)),
            ..Invocation::default()
        }
        .apply(&mut o);
        assert_eq!(o.request_timeout, Duration::from_secs(1).min(before));
        assert_eq!(o.prompt_timeout, Some(Duration::from_millis(10)));
    }
}
