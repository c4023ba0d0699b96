//! CLI errors: what went wrong, what to do about it, and the exit code that says which kind.

use std::fmt;

use acpx_app::problem::Problem;
use acpx_model::StoreError;
use acpx_owner::runs::RunsError;
use acpx_runtime::ops::OpsError;
use serde_json::{json, Map, Value};

/// The kinds of failure and their exit codes are `acpx_runtime::error_kind`'s.
pub use acpx_runtime::error_kind::ErrorKind;

/// An error the CLI reports to the user.
#[derive(Debug, Clone)]
pub struct CliError {
    pub kind: ErrorKind,
    /// What went wrong (one sentence, naming the file, id or value).
    pub message: String,
    /// What to do about it, when there is something useful to say.
    pub hint: Option<String>,
    /// A finer machine-readable code (`STORE_CORRUPT`, `AMBIGUOUS_ID`, …).
    pub detail_code: Option<String>,
    /// Extra JSON fields for `error.data` in JSON mode (boxed: errors travel in every
    /// `Result`, so they are kept small).
    pub data: Option<Box<Map<String, Value>>>,
    /// Set when the error was already shown to the user (for example as a `prompt_error`
    /// event in JSON mode), so main only sets the exit code.
    pub already_reported: bool,
}

impl CliError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        CliError {
            kind,
            message: message.into(),
            hint: None,
            detail_code: None,
            data: None,
            already_reported: false,
        }
    }

    pub fn usage(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Usage, message)
    }

    pub fn runtime(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Runtime, message)
    }

    pub fn no_session(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NoSession, message)
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    pub fn with_detail(mut self, code: &str) -> Self {
        self.detail_code = Some(code.to_owned());
        self
    }

    pub fn with_data(mut self, key: &str, value: Value) -> Self {
        self.data
            .get_or_insert_with(Default::default)
            .insert(key.to_owned(), value);
        self
    }

    pub fn reported(mut self) -> Self {
        self.already_reported = true;
        self
    }

    /// The synthetic JSON-RPC error line printed in `--format json` (Node acpx's shape).
    pub fn to_json(&self) -> Value {
        let mut data = Map::new();
        data.insert("acpxCode".into(), json!(self.kind.acpx_code()));
        if let Some(d) = &self.detail_code {
            data.insert("detailCode".into(), json!(d));
        }
        data.insert("origin".into(), json!("cli"));
        if let Some(h) = &self.hint {
            data.insert("hint".into(), json!(h));
        }
        for (k, v) in self.data.iter().flat_map(|d| d.iter()) {
            data.insert(k.clone(), v.clone());
        }
        json!({
            "jsonrpc": "2.0",
            "id": null,
            "error": {
                "code": self.kind.rpc_code(),
                "message": self.message,
                "data": Value::Object(data),
            }
        })
    }
}

impl CliError {
    /// The error line of `--format acp`: [`CliError::to_json`], except that a failure the
    /// agent answered with keeps the agent's own `code` and `message`, acpx's fields merged
    /// into its `data` (Node acpx's rule, behaviour notes §6).
    pub fn to_node_json(&self) -> Value {
        let mut v = self.to_json();
        let agent = self
            .data
            .as_ref()
            .and_then(|d| d.get("acp"))
            .filter(|a| a.get("code").is_some_and(Value::is_i64))
            .cloned();
        let Some(agent) = agent else {
            return v;
        };
        let mut data = match agent.get("data") {
            Some(Value::Object(d)) => d.clone(),
            _ => Map::new(),
        };
        if let Some(Value::Object(ours)) = v["error"].get_mut("data").map(std::mem::take) {
            for (k, val) in ours {
                if k != "acp" {
                    data.insert(k, val);
                }
            }
        }
        data.insert("origin".into(), json!("acp"));
        v["error"] = json!({
            "code": agent["code"],
            "message": agent.get("message").cloned().unwrap_or_else(|| json!(self.message)),
            "data": data,
        });
        v
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        if let Some(h) = &self.hint {
            write!(f, "\n  hint: {h}")?;
        }
        Ok(())
    }
}

impl std::error::Error for CliError {}

impl From<Problem> for CliError {
    fn from(p: Problem) -> Self {
        let mut err = CliError::new(p.kind, p.message);
        err.hint = p.hint;
        err.detail_code = p.detail_code;
        err
    }
}

/// A store's error with its kind and remedy ([`Problem`]'s).
impl From<StoreError> for CliError {
    fn from(e: StoreError) -> Self {
        Problem::from(e).into()
    }
}

/// A session operation's error with its kind and remedy ([`Problem`]'s).
impl From<OpsError> for CliError {
    fn from(e: OpsError) -> Self {
        Problem::from(e).into()
    }
}

/// The run registry's error with its remedy ([`Problem`]'s).
impl From<RunsError> for CliError {
    fn from(e: RunsError) -> Self {
        Problem::from(e).into()
    }
}

impl From<std::io::Error> for CliError {
    fn from(e: std::io::Error) -> Self {
        CliError::runtime(format!("I/O error: {e}"))
    }
}

/// The result type of every command.
pub type CliResult<T> = Result<T, CliError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_errors_have_the_node_shape() {
        let e = CliError::no_session("No acpx session found (searched up to /repo).")
            .with_hint("create one with `acpx sessions new`");
        let v = e.to_json();
        assert_eq!(v["error"]["code"], -32002);
        assert_eq!(v["error"]["data"]["acpxCode"], "NO_SESSION");
        assert_eq!(v["error"]["data"]["origin"], "cli");
        assert!(v["id"].is_null());
        assert!(v["error"]["data"].get("detailCode").is_none());
        assert_eq!(e.to_node_json(), v, "acpx's own error: the same line");
    }

    #[test]
    fn an_agent_error_keeps_its_code_and_message_in_the_acp_format() {
        let e = CliError::runtime("the agent failed the prompt: boom")
            .with_detail("AGENT_ERROR")
            .with_data(
                "acp",
                json!({"code": -32000, "message": "boom", "data": {"why": "x"}}),
            );
        let v = e.to_node_json();
        assert_eq!(v["error"]["code"], -32000);
        assert_eq!(v["error"]["message"], "boom");
        assert_eq!(v["error"]["data"]["why"], "x");
        assert_eq!(v["error"]["data"]["acpxCode"], "RUNTIME");
        assert_eq!(v["error"]["data"]["detailCode"], "AGENT_ERROR");
        assert_eq!(v["error"]["data"]["origin"], "acp");
        assert!(v["error"]["data"].get("acp").is_none());
        assert!(v["id"].is_null());
    }
}
