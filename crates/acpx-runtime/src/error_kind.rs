//! The kinds of failure acpx reports, with their exit codes and the codes of JSON errors
//! (Node acpx 0.19.1's: `acpxCode` and the JSON-RPC `code`). The queue owner sends them over
//! its socket and the log's `prompt_error` / `control_error` events carry them (`code`), so
//! every front end maps them the same way ([`ErrorKind::from_acpx_code`]).

/// The kinds of failure, each with its exit code (Node acpx's codes, §6 of the behaviour notes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Exit 1: an agent error, an I/O error, corrupt data, anything at run time.
    Runtime,
    /// Exit 2: bad flags, arguments or configuration.
    Usage,
    /// Exit 3: `--timeout` was exceeded.
    Timeout,
    /// Exit 4: no session matched.
    NoSession,
    /// Exit 5: a permission was denied.
    PermissionDenied,
    /// Exit 5: a decision needed a human and there was none (`--non-interactive-permissions
    /// fail`).
    PermissionPromptUnavailable,
    /// Exit 130: interrupted (a second Ctrl-C).
    Interrupted,
}

impl ErrorKind {
    /// The process exit code.
    pub fn exit_code(self) -> i32 {
        match self {
            ErrorKind::Runtime => 1,
            ErrorKind::Usage => 2,
            ErrorKind::Timeout => 3,
            ErrorKind::NoSession => 4,
            ErrorKind::PermissionDenied | ErrorKind::PermissionPromptUnavailable => 5,
            ErrorKind::Interrupted => 130,
        }
    }

    /// The `acpxCode` of JSON errors.
    pub fn acpx_code(self) -> &'static str {
        match self {
            ErrorKind::Runtime => "RUNTIME",
            ErrorKind::Usage => "USAGE",
            ErrorKind::Timeout => "TIMEOUT",
            ErrorKind::NoSession => "NO_SESSION",
            ErrorKind::PermissionDenied => "PERMISSION_DENIED",
            ErrorKind::PermissionPromptUnavailable => "PERMISSION_PROMPT_UNAVAILABLE",
            ErrorKind::Interrupted => "INTERRUPTED",
        }
    }

    /// The JSON-RPC `code` of JSON errors.
    pub fn rpc_code(self) -> i64 {
        match self {
            ErrorKind::Runtime => -32603,
            ErrorKind::Usage => -32602,
            ErrorKind::Timeout => -32070,
            ErrorKind::NoSession => -32002,
            ErrorKind::PermissionDenied => -32071,
            ErrorKind::PermissionPromptUnavailable => -32072,
            ErrorKind::Interrupted => -32603,
        }
    }
}

impl ErrorKind {
    /// The kind of an `acpxCode` (what the owner sends and events carry); an unknown code is
    /// [`ErrorKind::Runtime`].
    pub fn from_acpx_code(code: &str) -> ErrorKind {
        [
            ErrorKind::Usage,
            ErrorKind::Timeout,
            ErrorKind::NoSession,
            ErrorKind::PermissionDenied,
            ErrorKind::PermissionPromptUnavailable,
            ErrorKind::Interrupted,
        ]
        .into_iter()
        .find(|k| k.acpx_code() == code)
        .unwrap_or(ErrorKind::Runtime)
    }
}

/// How a finished turn fails by Node acpx's exit-code rules, or `None` for a turn that
/// succeeded (completed, or cancelled on request):
/// - a permission question nobody could answer (`--non-interactive-permissions fail`):
///   [`ErrorKind::PermissionPromptUnavailable`];
/// - a turn that asked for permission, got no approval and had something denied or cancelled,
///   whatever its stop reason (codex answers a refusal with `cancelled`), unless the user
///   cancelled it or it timed out: [`ErrorKind::PermissionDenied`];
/// - a timeout: [`ErrorKind::Timeout`];
/// - any other failure: its code's kind (`NO_SESSION` when the agent lost the session).
pub fn turn_failure(outcome: &crate::TurnOutcome) -> Option<ErrorKind> {
    let code = outcome.error.as_ref().map(|e| e.code.as_str());
    if code == Some(ErrorKind::PermissionPromptUnavailable.acpx_code()) {
        return Some(ErrorKind::PermissionPromptUnavailable);
    }
    let s = outcome.permission_stats;
    if !outcome.cancel_requested
        && outcome.outcome.as_str() != "timeout"
        && s.requested > 0
        && s.approved == 0
        && s.denied + s.cancelled > 0
    {
        return Some(ErrorKind::PermissionDenied);
    }
    match outcome.outcome.as_str() {
        "completed" | "cancelled" => None,
        "timeout" => Some(ErrorKind::Timeout),
        _ if code == Some(ErrorKind::NoSession.acpx_code()) => Some(ErrorKind::NoSession),
        _ => Some(ErrorKind::Runtime),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes() {
        assert_eq!(ErrorKind::Runtime.exit_code(), 1);
        assert_eq!(ErrorKind::Usage.exit_code(), 2);
        assert_eq!(ErrorKind::Timeout.exit_code(), 3);
        assert_eq!(ErrorKind::NoSession.exit_code(), 4);
        assert_eq!(ErrorKind::PermissionDenied.exit_code(), 5);
        assert_eq!(ErrorKind::Interrupted.exit_code(), 130);
    }

    #[test]
    fn acpx_codes_map_back_to_their_kind() {
        for k in [ErrorKind::Timeout, ErrorKind::NoSession, ErrorKind::Usage] {
            assert_eq!(ErrorKind::from_acpx_code(k.acpx_code()), k);
        }
        assert_eq!(
            ErrorKind::from_acpx_code("SOMETHING_NEW"),
            ErrorKind::Runtime
        );
    }
}
