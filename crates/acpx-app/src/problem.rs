//! A failure as the person running acpx is told it: its kind (which sets the exit code), one
//! sentence naming what is wrong, and what to do about it. The settings, the config files and
//! the stores fail with these, so the remedy is written next to the code that knows the
//! failure; a front end adds only how it shows them (the `acpx` binary: text or a JSON line).

use std::fmt;

use acpx_model::StoreError;
use acpx_owner::private_socket::PrivateDirError;
use acpx_owner::runs::RunsError;
pub use acpx_runtime::error_kind::ErrorKind;
use acpx_runtime::ops::OpsError;
use acpx_runtime::RuntimeError;

/// A failure with its remedy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The kind of failure (its exit code).
    pub kind: ErrorKind,
    /// What went wrong (one sentence, naming the file, id or value).
    pub message: String,
    /// What to do about it, when there is something useful to say.
    pub hint: Option<String>,
    /// A finer machine-readable code (`STORE_CORRUPT`, `CONFIG_INVALID`, …).
    pub detail_code: Option<String>,
}

impl Problem {
    /// A problem of `kind`, without hint or detail code.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Problem {
            kind,
            message: message.into(),
            hint: None,
            detail_code: None,
        }
    }

    /// Something on the command line (or in a file it names) is wrong: exit 2.
    pub fn usage(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Usage, message)
    }

    /// Anything at run time: exit 1.
    pub fn runtime(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Runtime, message)
    }

    /// The same problem, with what to do about it.
    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// The same problem, with a finer machine-readable code.
    pub fn with_detail(mut self, code: &str) -> Self {
        self.detail_code = Some(code.to_owned());
        self
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        if let Some(h) = &self.hint {
            write!(f, "\n  hint: {h}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Problem {}

impl From<StoreError> for Problem {
    /// A store's error with its kind (a missing session is [`ErrorKind::NoSession`], a bad
    /// cursor or id a usage error), its `STORE_<KIND>` detail code, and what to do about it.
    fn from(e: StoreError) -> Self {
        let (kind, hint) = match &e {
            StoreError::NotFound(_) => (
                ErrorKind::NoSession,
                Some("list the stored sessions with `acpx sessions list`"),
            ),
            StoreError::Locked { .. } => (
                ErrorKind::Runtime,
                Some(
                    "another acpx process is writing this session; wait for it to finish (see `acpx status`)",
                ),
            ),
            StoreError::Corrupt { .. } | StoreError::Invalid(_) => (
                ErrorKind::Runtime,
                Some("run `acpx fsck` to check the store, and `acpx fsck --repair` to fix what can be fixed"),
            ),
            StoreError::InvalidCursor(_) => (
                ErrorKind::Usage,
                Some("pass a cursor exactly as printed by the previous page, or start again without --cursor"),
            ),
            StoreError::InvalidArgument(_) | StoreError::InvalidId(_) => (ErrorKind::Usage, None),
            StoreError::TooNew(_) => (ErrorKind::Runtime, None),
            StoreError::Conflict { .. } => (
                ErrorKind::Runtime,
                Some("another process changed the session at the same time; run the command again"),
            ),
            _ => (ErrorKind::Runtime, None),
        };
        let mut problem = Problem::new(kind, e.to_string())
            .with_detail(&format!("STORE_{}", e.kind().to_ascii_uppercase()));
        problem.hint = hint.map(str::to_owned);
        problem
    }
}

impl From<OpsError> for Problem {
    /// A session operation's error: a store's as [`From<StoreError>`] says, a bad argument or
    /// an ambiguous id a usage error, anything else at run time.
    fn from(e: OpsError) -> Self {
        match e {
            OpsError::Store(s) => s.into(),
            OpsError::Runtime(RuntimeError::Store(s)) => s.into(),
            OpsError::Invalid(m) => Problem::usage(m),
            e @ OpsError::AmbiguousId { .. } => Problem::usage(e.to_string())
                .with_hint("type more of the id, or the full record id")
                .with_detail("AMBIGUOUS_ID"),
            other => Problem::runtime(other.to_string()),
        }
    }
}

impl From<RunsError> for Problem {
    /// The run registry's error; a socket directory that is not private says what to do.
    fn from(e: RunsError) -> Self {
        let private_dir = matches!(e, RunsError::PrivateDir(PrivateDirError::NotPrivate(_)));
        let problem = Problem::runtime(e.to_string());
        if private_dir {
            problem.with_hint(
                "remove it, or use a shorter --home so the socket fits under <home>/runs/",
            )
        } else {
            problem
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_cursor_is_a_usage_error_with_a_remedy() {
        let p = Problem::from(StoreError::InvalidCursor("x".into()));
        assert_eq!(p.kind, ErrorKind::Usage);
        assert_eq!(p.detail_code.as_deref(), Some("STORE_INVALID_CURSOR"));
        assert!(p.hint.is_some_and(|h| h.contains("--cursor")));
    }

    #[test]
    fn shown_with_its_hint() {
        let p = Problem::usage("bad").with_hint("do this");
        assert_eq!(p.to_string(), "bad\n  hint: do this");
    }
}
