//! The errors of the flows that drive a session, as the user is told them: a prompt or a
//! control through the queue owner ([`submit_failure`]) or in this process
//! ([`local_failure`]), either way ([`drive_failure`]), `sessions new` / `ensure`
//! ([`ensure_failure`]), `sessions adopt`, `sessions close` and `delete`.

use std::time::Duration;

use acpx_owner::adopt::AdoptError;
use acpx_owner::closing::{CloseError, DeleteError};
use acpx_owner::drive::DriveError;
use acpx_owner::ensure::EnsureError;
use acpx_owner::local::LocalError;
use acpx_owner::status::StatusError;
use acpx_owner::submit::SubmitError;
use acpx_runtime::error_kind::ErrorKind;

use super::{runtime_failure, wire_failure, Cause, Failure};

/// A second Ctrl-C stopped the agent of a one-process command.
pub fn interrupted() -> Failure {
    Failure::new(
        ErrorKind::Interrupted,
        "interrupted: the agent was stopped; what it did so far is in the event log",
    )
    .hint("the next prompt records the unfinished turn as interrupted")
}

/// The agent did not start within `--timeout` (`t`).
pub fn start_timeout(t: Duration) -> Failure {
    Failure::new(
        ErrorKind::Timeout,
        format!(
            "the agent did not start within {} s (--timeout)",
            t.as_secs_f64()
        ),
    )
}

/// A one-process command's failure (`agent_command`: the agent it ran).
pub fn local_failure(e: LocalError, agent_command: &str) -> Failure {
    match e {
        LocalError::Interrupted => interrupted(),
        e @ LocalError::Withdrawn => Failure {
            detail_code: Some("QUEUE_TASK_WITHDRAWN".into()),
            ..Failure::new(ErrorKind::Interrupted, e.to_string())
        },
        LocalError::StartTimeout(t) => start_timeout(t),
        LocalError::Runtime(e) => runtime_failure(e, agent_command),
        LocalError::Runs(e) => Failure::caused_by(Cause::Runs(e)),
        LocalError::Ops(e) => Failure::caused_by(Cause::Ops(e)),
    }
}

/// A failure to talk to the queue owner, or one it answered with.
pub fn submit_failure(e: SubmitError) -> Failure {
    match e {
        SubmitError::Wire(e) => wire_failure(e),
        SubmitError::Interrupted => Failure::new(
            ErrorKind::Interrupted,
            "interrupted: the turn goes on in the session's queue owner (`acpx cancel` stops it)",
        ),
        SubmitError::Runs(e) => Failure::caused_by(Cause::Runs(e)),
        other => Failure::new(ErrorKind::Runtime, other.to_string()),
    }
}

/// A prompt's, a control's or a fork's failure, through the owner or in this process.
pub fn drive_failure(e: DriveError, agent_command: &str) -> Failure {
    match e {
        DriveError::Owner(e) => submit_failure(e),
        DriveError::Local(e) => local_failure(e, agent_command),
        DriveError::Runs(e) => Failure::caused_by(Cause::Runs(e)),
        DriveError::Store(e) => Failure::caused_by(Cause::Store(e)),
        e @ DriveError::CancelTask(_) => Failure::new(ErrorKind::Runtime, e.to_string()),
    }
}

/// `sessions close`'s failure (and that of the close `sessions new` makes).
pub fn close_failure(e: CloseError) -> Failure {
    match e {
        CloseError::Owner(e) => submit_failure(e),
        CloseError::Runs(e) => Failure::caused_by(Cause::Runs(e)),
        CloseError::Ops(e) => Failure::caused_by(Cause::Ops(e)),
        CloseError::Store(e) => Failure::caused_by(Cause::Store(e)),
        e @ CloseError::StillRunning(_) => Failure::new(ErrorKind::Runtime, e.to_string())
            .hint("try again, or stop that acpx process (Ctrl-C twice in its terminal)"),
    }
}

/// `sessions delete`'s failure.
pub fn delete_failure(e: DeleteError) -> Failure {
    match e {
        DeleteError::Owner(e) => submit_failure(e),
        DeleteError::Runs(e) => Failure::caused_by(Cause::Runs(e)),
        DeleteError::Store(e) => Failure::caused_by(Cause::Store(e)),
        e @ DeleteError::Running(_) => Failure::new(ErrorKind::Runtime, e.to_string())
            .hint("cancel it first with `acpx cancel`, or wait for it to finish"),
        DeleteError::Open(ref id) => {
            // By id both times: once closed, the session is no longer found by its name or
            // scope, so repeating the command's `-s NAME` would answer "no session".
            let hint = format!(
                "close it, then delete it by id: `acpx sessions close {id} && acpx sessions \
                 delete {id}`; or pass --force"
            );
            Failure::new(ErrorKind::Usage, e.to_string()).hint(&hint)
        }
    }
}

/// `sessions new`'s and `sessions ensure`'s failure (`agent_command`: the agent it ran).
pub fn ensure_failure(e: EnsureError, agent_command: &str) -> Failure {
    match e {
        EnsureError::Interrupted => interrupted(),
        EnsureError::StartTimeout(t) => start_timeout(t),
        EnsureError::Runtime(e) => runtime_failure(e, agent_command),
        EnsureError::Ops(e) => Failure::caused_by(Cause::Ops(e)),
        EnsureError::Runs(e) => Failure::caused_by(Cause::Runs(e)),
        EnsureError::Owner(e) => submit_failure(e),
        EnsureError::Close(e) => close_failure(e).hint(
            "the new session was created; close the old one with `acpx sessions close <id>`",
        ),
        e @ EnsureError::ResumeFellBack { .. } => {
            Failure::new(ErrorKind::NoSession, e.to_string())
        }
        e @ EnsureError::ResumeNotAttached { .. } => Failure::new(ErrorKind::Runtime, e.to_string()),
        EnsureError::Resume(inner) => ensure_failure(*inner, agent_command).hint(
            "check the id (the agent's own session list), and that the agent supports session/resume or session/load",
        ),
    }
}

/// `status`'s failure.
pub fn status_failure(e: StatusError) -> Failure {
    match e {
        StatusError::Store(e) => Failure::caused_by(Cause::Store(e)),
        StatusError::Owner(e) => submit_failure(e),
        StatusError::Runs(e) => Failure::caused_by(Cause::Runs(e)),
    }
}

/// `sessions adopt`'s failure (`agent_command`: the agent it ran).
pub fn adopt_failure(e: AdoptError, agent_command: &str) -> Failure {
    match e {
        AdoptError::AlreadyRecorded { ref record, .. } => {
            let hint = format!(
                "continue it with `acpx prompt` in its scope, or see it with `acpx sessions show {record}`"
            );
            Failure::new(ErrorKind::Usage, e.to_string()).hint(&hint)
        }
        e @ AdoptError::ScopeTaken { .. } => Failure::new(ErrorKind::Usage, e.to_string())
            .hint("give the adopted session another name with --name, or close that one first"),
        AdoptError::Attach(e) => runtime_failure(e, agent_command).hint(
            "`acpx sessions list --from-agent` lists the agent's sessions (run it in the session's directory, or pass --cwd)",
        ),
        AdoptError::Shutdown(e) => runtime_failure(e, agent_command),
        AdoptError::Runs(e) => Failure::caused_by(Cause::Runs(e)),
        AdoptError::Ops(e) => Failure::caused_by(Cause::Ops(e)),
        AdoptError::Store(e) => Failure::caused_by(Cause::Store(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interrupt_says_where_the_work_is() {
        let f = local_failure(LocalError::Interrupted, "agent");
        assert_eq!(f.kind, ErrorKind::Interrupted);
        assert!(f.message.contains("event log"));
        let f = submit_failure(SubmitError::Interrupted);
        assert!(f.message.contains("queue owner"));
    }

    #[test]
    fn a_start_timeout_names_the_flag() {
        let f = ensure_failure(EnsureError::StartTimeout(Duration::from_secs(2)), "a");
        assert_eq!(f.kind, ErrorKind::Timeout);
        assert_eq!(f.message, "the agent did not start within 2 s (--timeout)");
    }
}
