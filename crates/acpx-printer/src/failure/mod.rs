//! Failures of a turn, of the runtime and of the queue owner, as the person who ran the
//! command is told them: the kind (the exit status; a turn's is
//! [`acpx_runtime::error_kind::turn_failure`]'s, Node acpx's rules), the message, what to do
//! about it, and the machine-readable details of the error line. The front end writes the
//! line ([`Failure`]). The errors of the flows that drive a session (the owner's, the
//! one-process path's, `sessions new`, closing) are [`flows`]'s.

pub mod flows;

use acpx_model::StoreError;
use acpx_owner::protocol::WireError;
use acpx_owner::runs::RunsError;
use acpx_runtime::error_kind::{turn_failure, ErrorKind};
use acpx_runtime::ops::OpsError;
use acpx_runtime::{PermissionMode, RuntimeError, TurnOutcome};
use serde_json::Value;

/// An error the front end maps itself, as it maps it for every command: the store's, an
/// operation's, the run registry's.
#[derive(Debug)]
pub enum Cause {
    /// The store's.
    Store(StoreError),
    /// A session operation's.
    Ops(OpsError),
    /// The run registry's.
    Runs(RunsError),
}

/// A failure, for the front end's error line.
#[derive(Debug)]
pub struct Failure {
    /// The kind (the exit status).
    pub kind: ErrorKind,
    /// What went wrong.
    pub message: String,
    /// What to do about it.
    pub hint: Option<String>,
    /// The finer code (`AGENT_ERROR`, `AGENT_TIMEOUT`, …).
    pub detail_code: Option<String>,
    /// The agent's own JSON-RPC error, when it answered with one (`error.data.acp`).
    pub acp: Option<Value>,
    /// The queue owner said trying again may work (`error.data.retryable`).
    pub retryable: bool,
    /// Whether what was printed already said it: the error line is left out.
    pub shown: bool,
    /// An error the front end maps itself ([`Cause`]): its kind, message and hint are the
    /// front end's; a [`Failure::hint`] set here replaces that hint.
    pub cause: Option<Cause>,
}

impl Failure {
    /// A failure of `kind`, with nothing but its message.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Failure {
        Failure {
            kind,
            message: message.into(),
            hint: None,
            detail_code: None,
            acp: None,
            retryable: false,
            shown: false,
            cause: None,
        }
    }

    /// An error the front end maps itself.
    pub fn caused_by(cause: Cause) -> Failure {
        Failure {
            cause: Some(cause),
            ..Failure::new(ErrorKind::Runtime, String::new())
        }
    }

    /// The same failure, with what to do about it.
    pub fn hint(mut self, hint: &str) -> Failure {
        self.hint = Some(hint.to_owned());
        self
    }

    fn detail(mut self, code: &str) -> Failure {
        self.detail_code = Some(code.to_owned());
        self
    }
}

/// Said with `AGENT_TIMEOUT` for a request other than the prompt.
const REQUEST_TIMEOUT_HINT: &str = "ACP requests other than the prompt wait 120 s by default; set `requestTimeout` (seconds) in config.json to wait longer";
/// Said with `MODE_NOT_RESTORED`, on either path.
const MODE_NOT_RESTORED_HINT: &str = "the prompt was not sent; check the mode with the agent, or choose another with `acpx set-mode`";
/// Said with `SESSION_RESUME_REQUIRED`, on either path.
const RESUME_REQUIRED_HINT: &str = "start a new session with `acpx sessions new`, or allow a new ACP session with --resume-policy allow-new";
/// Said with `AUTH_REQUIRED`.
const AUTH_REQUIRED_HINT: &str = "run `acpx config show` to locate the active config, then add the credential under `auth`, or set the ACPX_AUTH_ variable named above, and retry; --auth-policy skip goes on without authenticating";
/// Said with `AUTH_REQUIRED` when the agent itself refused a session request (`--auth-policy
/// skip`, the default, went on without a credential).
const AUTH_REFUSED_HINT: &str = "run `acpx config show` to locate the active config, then add the credential under `auth`, or set the ACPX_AUTH_ variable named above, and retry; --auth-policy fail stops before any session request when no credential is found";

/// A runtime error as the user sees it (`agent_command`: the command that was run).
pub fn runtime_failure(e: RuntimeError, agent_command: &str) -> Failure {
    match e {
        RuntimeError::Store(s) => Failure::caused_by(Cause::Store(s)),
        RuntimeError::Spawn { .. } => Failure::new(ErrorKind::Runtime, e.to_string())
            .hint(&format!(
                "the agent command is `{agent_command}`; `acpx config show` lists the agents, and --agent \"<command>\" runs any ACP agent"
            ))
            .detail("AGENT_SPAWN_FAILED"),
        RuntimeError::Timeout { .. } => Failure::new(ErrorKind::Timeout, e.to_string())
            .detail("AGENT_TIMEOUT")
            .hint(REQUEST_TIMEOUT_HINT),
        RuntimeError::UnknownMode { .. } => {
            Failure::new(ErrorKind::Usage, e.to_string()).detail("UNKNOWN_MODE")
        }
        RuntimeError::NotOffered { ref acp, .. } => Failure {
            acp: acp.as_ref().map(|a| a.to_json()),
            ..Failure::new(ErrorKind::Usage, e.to_string()).detail("NOT_OFFERED")
        },
        RuntimeError::ModeNotRestored { .. } => Failure::new(ErrorKind::Runtime, e.to_string())
            .detail("MODE_NOT_RESTORED")
            .hint(MODE_NOT_RESTORED_HINT),
        RuntimeError::ResumeRequired { .. } => Failure::new(ErrorKind::Runtime, e.to_string())
            .detail("SESSION_RESUME_REQUIRED")
            .hint(RESUME_REQUIRED_HINT),
        RuntimeError::AuthRequired { ref agent_said, .. } => {
            let hint = match agent_said {
                None => AUTH_REQUIRED_HINT,
                Some(_) => AUTH_REFUSED_HINT,
            };
            Failure::new(ErrorKind::Runtime, e.to_string())
                .detail("AUTH_REQUIRED")
                .hint(hint)
        }
        RuntimeError::Agent { ref error, .. } if error.is_not_found() => {
            Failure::new(ErrorKind::NoSession, e.to_string()).hint(
                "the agent no longer knows this session; start a new one with `acpx sessions new`",
            )
        }
        other => Failure::new(ErrorKind::Runtime, other.to_string()),
    }
}

/// An error the queue owner sent, as the user sees it: its kind and detail code as sent,
/// with what to do about the ones that have a remedy.
pub fn wire_failure(e: WireError) -> Failure {
    let mut f = Failure::new(ErrorKind::from_acpx_code(&e.code), e.message);
    f.retryable = e.retryable;
    let Some(d) = e.detail_code else {
        return f;
    };
    let hint = match d.as_str() {
        "QUEUE_OWNER_START_FAILED" => {
            Some("see <home>/owners/<record id>.log, or run this command with --no-owner")
        }
        "MODE_NOT_RESTORED" => Some(MODE_NOT_RESTORED_HINT),
        "SESSION_BUSY" => Some(
            "cancel it with `acpx cancel` (naming the session as here), or run this again once it ends",
        ),
        "SESSION_RESUME_REQUIRED" => Some(RESUME_REQUIRED_HINT),
        "AUTH_REQUIRED" if f.message.starts_with("the agent refused") => Some(AUTH_REFUSED_HINT),
        "AUTH_REQUIRED" => Some(AUTH_REQUIRED_HINT),
        _ => None,
    };
    f.hint = hint.map(str::to_owned);
    f.detail_code = Some(d);
    f
}

/// Who decided on permissions in the turn: whether `--permission-policy` rules were set, and
/// the permission mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PermissionSetup {
    /// `--permission-policy` (or config) rules were set: they decide before the mode.
    pub rules: bool,
    /// The permission mode.
    pub mode: PermissionMode,
}

/// A reply that could not be read back whole (from its spill file, here or in the queue
/// owner) for the quiet format.
pub fn unreadable_reply(e: std::io::Error) -> Failure {
    Failure::new(
        ErrorKind::Runtime,
        format!("the reply could not be read back whole from its spill file: {e}"),
    )
    .hint(
        "its chunks are in the session's event log, as far as retention keeps them: \
         `acpx sessions events`",
    )
}

/// `fsck`'s failure when problems remain (`None`: none does). Its lines said them already:
/// the error line is only its exit status and, once, the hint (on the error, not also as a
/// note before it).
pub fn fsck_failure(report: &acpx_runtime::ops::repair::FsckReport) -> Option<Failure> {
    let remaining = report.remaining();
    if remaining == 0 {
        return None;
    }
    let mut f = Failure::new(
        ErrorKind::Runtime,
        format!("fsck: {remaining} problem(s) remain"),
    );
    f.shown = true;
    Some(match report.repairable_left() {
        true => f.hint("run `acpx fsck --repair` to fix the problems marked repairable"),
        false => f,
    })
}

/// `migrate`'s failure to copy to the backend `to`. Only a session found differing before
/// the copy began means nothing was written (a plain `AlreadyExists` can come from a batch
/// after earlier ones were written), and the source's session is never to be removed: the
/// target's may be a copy that an interrupted run cut short, and the source's then the only
/// whole one.
pub fn migrate_failure(e: StoreError, to: &str) -> Failure {
    let differing = matches!(e, StoreError::AlreadyExistsDiffering { .. });
    let f = Failure::caused_by(Cause::Store(e));
    if !differing {
        return f;
    }
    f.hint(&format!(
        "the {to} store already holds that session and it is not an identical copy (a copy an \
         interrupted run cut short, or a different session with the same id); nothing was \
         written. Compare the two (`acpx --store {to} sessions show <id>`), remove the {to} \
         store's copy once it is not needed, and run migrate again"
    ))
}

/// How `outcome` failed, `None` when it did not. `shown` says the turn's terminal event was
/// printed and `json` that it was printed as JSON: in JSON mode that line is the last one and
/// carries the outcome, so no error line follows it; in text mode its `[error]` line said
/// what went wrong, except for a refused permission, said again with what to do about it.
pub fn turn_failed(
    outcome: &TurnOutcome,
    permissions: PermissionSetup,
    shown: bool,
    json: bool,
) -> Option<Failure> {
    let kind = turn_failure(outcome)?;
    let message = outcome.error.as_ref().map(|e| e.message.clone());
    let failure = |message: String, hint: Option<&str>| Failure {
        hint: hint.map(str::to_owned),
        shown,
        ..Failure::new(kind, message)
    };
    Some(match kind {
        ErrorKind::PermissionPromptUnavailable => failure(
            message.unwrap_or_default(),
            Some(
                "run on a terminal, pass --approve-all, or use --non-interactive-permissions deny",
            ),
        ),
        ErrorKind::PermissionDenied => Failure {
            shown: shown && json,
            ..failure(
                format!(
                    "the agent asked for permission {} time(s) and was refused",
                    outcome.permission_stats.requested
                ),
                Some(refused_hint(permissions)),
            )
        },
        ErrorKind::Timeout => {
            let stuck = outcome
                .error
                .as_ref()
                .and_then(|e| e.detail_code.as_deref())
                == Some("CANCEL_UNANSWERED");
            let hint = if stuck {
                "the agent answered neither the prompt nor its cancel: it is stuck, and the \
                 session's next prompt starts a new agent process (raise --timeout if the turn \
                 only needs longer)"
            } else {
                "raise --timeout, or leave it out"
            };
            failure(
                message.unwrap_or_else(|| "the turn timed out".into()),
                Some(hint),
            )
        }
        _ => Failure {
            detail_code: outcome.error.as_ref().and_then(|e| e.detail_code.clone()),
            acp: outcome.acp_error.as_ref().map(|a| a.to_json()),
            ..failure(message.unwrap_or_else(|| "the turn failed".into()), None)
        },
    })
}

/// What to do about a refused permission: rules decide before the mode, so a mode flag alone
/// may change nothing.
fn refused_hint(permissions: PermissionSetup) -> &'static str {
    match (permissions.rules, permissions.mode) {
        (true, _) => {
            "a --permission-policy rule or the permission mode refused it: change the \
             rule (autoApprove), or re-run with --approve-all"
        }
        (false, PermissionMode::ApproveReads) => {
            "answer on a terminal, or re-run with --approve-all"
        }
        // --approve-reads would refuse anything but reads and searches again.
        (false, _) => {
            "re-run with --approve-all (--approve-reads approves reads and searches only)"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refusal_hint_follows_who_decided() {
        let setup = |rules, mode| PermissionSetup { rules, mode };
        assert!(refused_hint(setup(true, PermissionMode::ApproveAll)).contains("rule"));
        assert!(refused_hint(setup(false, PermissionMode::ApproveReads)).contains("terminal"));
        assert!(refused_hint(setup(false, PermissionMode::DenyAll)).contains("--approve-reads"));
    }

    #[test]
    fn owner_errors_keep_their_kind_and_get_their_remedy() {
        let e = WireError {
            code: "TIMEOUT".into(),
            detail_code: Some("SESSION_BUSY".into()),
            message: "busy".into(),
            retryable: true,
        };
        let f = wire_failure(e);
        assert_eq!(f.kind, ErrorKind::Timeout);
        assert_eq!(f.detail_code.as_deref(), Some("SESSION_BUSY"));
        assert!(f.hint.unwrap().contains("acpx cancel"));
        assert!(f.retryable);
        let refused = WireError {
            code: "RUNTIME".into(),
            detail_code: Some("AUTH_REQUIRED".into()),
            message: "the agent refused session/new".into(),
            retryable: false,
        };
        assert_eq!(
            wire_failure(refused).hint.as_deref(),
            Some(AUTH_REFUSED_HINT)
        );
    }
}
