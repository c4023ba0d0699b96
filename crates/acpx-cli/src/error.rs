//! CLI errors: what went wrong, what to do about it, and the exit code that says which kind.

use std::fmt;

use acpx_app::problem::Problem;
use acpx_model::StoreError;
use acpx_owner::runs::RunsError;
use acpx_printer::error_line::{acp_error_line, json_error_line, ErrorFields};
use acpx_runtime::ops::OpsError;
use serde_json::{Map, Value};

/// The kinds of failure and their exit codes are `acpx_runtime::error_kind`'s.
pub use acpx_runtime::error_kind::ErrorKind;

/// An error the CLI reports to the user: a [`Problem`] (kind, message, hint, detail code; its
/// fields read through `Deref`) and what only the binary knows of it.
#[derive(Debug, Clone)]
pub struct CliError {
    problem: Problem,
    /// Extra JSON fields for `error.data` in JSON mode (boxed: errors travel in every
    /// `Result`, so they are kept small).
    pub data: Option<Box<Map<String, Value>>>,
    /// Set when the error was already shown to the user (for example as a `prompt_error`
    /// event in JSON mode), so main only sets the exit code.
    pub already_reported: bool,
}

impl std::ops::Deref for CliError {
    type Target = Problem;
    fn deref(&self) -> &Problem {
        &self.problem
    }
}

impl std::ops::DerefMut for CliError {
    fn deref_mut(&mut self) -> &mut Problem {
        &mut self.problem
    }
}

impl CliError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Problem::new(kind, message).into()
    }

    pub fn usage(message: impl Into<String>) -> Self {
        Problem::usage(message).into()
    }

    pub fn runtime(message: impl Into<String>) -> Self {
        Problem::runtime(message).into()
    }

    pub fn no_session(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NoSession, message)
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.problem.hint = Some(hint.into());
        self
    }

    pub fn with_detail(mut self, code: &str) -> Self {
        self.problem.detail_code = Some(code.to_owned());
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

    /// The fields of its JSON error line ([`acpx_printer::error_line`]).
    fn fields(&self) -> ErrorFields<'_> {
        ErrorFields {
            kind: self.kind,
            message: &self.message,
            hint: self.hint.as_deref(),
            detail_code: self.detail_code.as_deref(),
            data: self.data.as_deref(),
        }
    }

    /// The synthetic JSON-RPC error line printed in `--format json` (Node acpx's shape).
    pub fn to_json(&self) -> Value {
        json_error_line(&self.fields())
    }

    /// The error line of `--format acp`: [`CliError::to_json`], except that a failure the
    /// agent answered with keeps the agent's own `code` and `message`
    /// ([`acp_error_line`]).
    pub fn to_node_json(&self) -> Value {
        acp_error_line(&self.fields())
    }
}

/// As its [`Problem`]: the message, then its hint on a line of its own.
impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.problem.fmt(f)
    }
}

impl std::error::Error for CliError {}

impl From<Problem> for CliError {
    fn from(problem: Problem) -> Self {
        CliError {
            problem,
            data: None,
            already_reported: false,
        }
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
