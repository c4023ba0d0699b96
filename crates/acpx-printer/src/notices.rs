//! What the user is told about opening a session, as text and JSON: a fallback to a new ACP
//! session, choices that could not be set again, MCP servers left out, and how the session got
//! its ACP session. Pure renderers of [`Notice`] and [`Attachment`], so every front end says
//! the same; where the text goes (stderr, a warning, `--verbose`) is the caller's.

use serde_json::{json, Value};

use acpx_owner::drive::DriveEvent;
use acpx_owner::local::LocalEvent;
use acpx_owner::submit::SubmitEvent;
use acpx_runtime::session::{Attachment, FailedAttempt, Notice, Recovery};

/// What a person is told of the notices of opening a session: a fallback to a new ACP
/// session as a note (`[acpx] …`; a command's JSON action carries it instead, as
/// [`fallback_json`]), choices that could not be set again and MCP servers the agent cannot
/// take as warnings.
pub fn said(notices: &[Notice]) -> impl Iterator<Item = crate::reports::Said> + '_ {
    use crate::reports::Said;
    notices.iter().map(|notice| match notice {
        Notice::Fallback { .. } => Said::Note(format!("[acpx] {}", notice_text(notice))),
        _ => Said::Warning(notice_text(notice)),
    })
}

/// What a person is told while a prompt (`prompt`), a control or a fork runs in this
/// process, beside its live output: waiting for another process's prompt, a fork by copy.
/// (Cancelling, the turn's output and what opening the session changed are the caller's.)
pub fn local_said(event: &LocalEvent<'_>, prompt: bool) -> Option<crate::reports::Said> {
    use crate::reports::Said;
    Some(match event {
        LocalEvent::Waiting(info) if prompt => Said::Note(format!(
            "[acpx] another prompt is running in this session{}; waiting for it to finish",
            info.map(|i| format!(" (pid {})", i.pid))
                .unwrap_or_default()
        )),
        LocalEvent::Waiting(_) => Said::Note(
            "[acpx] a prompt is running in this session; waiting for it to finish".into(),
        ),
        LocalEvent::ForkByCopy => Said::Warning(
            "the agent does not support session/fork: the new session has a copy of the \
             conversation, which its first prompt sends to the agent before the prompt"
                .into(),
        ),
        _ => return None,
    })
}

/// [`local_said`] for a prompt, a control or a fork driven through the queue owner or in
/// this process: also waiting for the owner's queue and, for a prompt, its place in the
/// queue and a permission answer the owner did not get.
pub fn drive_said(event: &DriveEvent<'_>, prompt: bool) -> Option<crate::reports::Said> {
    use crate::reports::Said;
    Some(match event {
        DriveEvent::WaitingForOwner { why, limit } => Said::Note(format!(
            "[acpx] {why}; waiting for its queue to finish{}",
            match limit {
                Some(t) => format!(" (up to {} s, --timeout)", t.as_secs()),
                None => " (Ctrl-C to stop waiting)".to_owned(),
            }
        )),
        DriveEvent::Local(e) => return local_said(e, prompt),
        DriveEvent::Owner(SubmitEvent::Queued(depth)) if prompt => Said::Note(format!(
            "[acpx] queued behind {depth} task(s) of this session"
        )),
        DriveEvent::Owner(SubmitEvent::PermissionAnswerFailed(e)) if prompt => Said::Warning(
            format!("could not send the permission answer to the queue owner: {e}"),
        ),
        _ => return None,
    })
}

/// The line the queue owner process `pid` logs as it ends: not started when another host's
/// owner holds the session, else why it stopped.
pub fn owner_exit_line(exit: &acpx_owner::OwnerExit, pid: u32) -> String {
    match exit {
        acpx_owner::OwnerExit::HeldElsewhere(_) => {
            format!("acpx queue owner {pid}: not started: {}", exit.describe())
        }
        other => format!("acpx queue owner {pid}: stopped ({})", other.describe()),
    }
}

/// The readable sentence of a notice.
pub fn notice_text(notice: &Notice) -> String {
    match notice {
        Notice::Fallback {
            previous_acp_session_id,
            acp_session_id,
            failed_attempts,
        } => format!(
            "the agent could not restore ACP session {previous_acp_session_id} ({}); continuing in new ACP session {acp_session_id}: the agent does not remember earlier turns",
            describe_attempts(failed_attempts)
        ),
        Notice::ChoiceNotRestored {
            kind,
            id,
            value,
            error,
        } => {
            let what = if kind == "model" {
                format!("the model {value}")
            } else {
                format!("config option {id} = {value}")
            };
            format!("could not set {what} again ({error}); the agent uses its own value")
        }
        Notice::McpServersLeftOut(names) => format!(
            "the agent does not take these MCP servers' transport, so they were not sent: {}",
            names.join(", ")
        ),
        Notice::ForkNotStored { acp_session_id } => format!(
            "this fork's ACP session {acp_session_id} was never stored by the agent (some agents \
             store a fork only after its first turn, in the process that made it; `sessions fork` \
             without --no-owner keeps that process): the agent starts without the parent's \
             conversation, which the record still holds"
        ),
    }
}

/// The `sessionFallback` object of a fallback notice (what a command's JSON result carries;
/// a prompt streams the `session_fallback` lifecycle event instead); `None` for the others.
pub fn fallback_json(notice: &Notice) -> Option<Value> {
    match notice {
        Notice::Fallback {
            previous_acp_session_id,
            acp_session_id,
            failed_attempts,
        } => Some(json!({
            "previousAcpSessionId": previous_acp_session_id,
            "acpxSessionId": acp_session_id,
            "failedAttempts": failed_attempts.iter().map(FailedAttempt::to_json).collect::<Vec<_>>(),
        })),
        _ => None,
    }
}

/// The failed reattach steps in one phrase.
fn describe_attempts(attempts: &[FailedAttempt]) -> String {
    if attempts.is_empty() {
        return "the agent supports neither session/resume nor session/load".into();
    }
    attempts
        .iter()
        .map(|a| format!("{}: {}", a.method, a.reason.replace('_', " ")))
        .collect::<Vec<_>>()
        .join("; ")
}

/// How an opened session got its ACP session, and whether an unfinished turn was recorded as
/// interrupted: the lines worth showing with `--verbose` (none for a plain new session).
pub fn attachment_lines(attachment: &Attachment, recovery: &Recovery) -> Vec<String> {
    let mut lines = Vec::new();
    match attachment {
        Attachment::Fallback {
            reason,
            previous_acp_session_id,
        } => lines.push(format!(
            "the agent could not reattach ACP session {previous_acp_session_id} ({reason}); started a fresh one under the same record"
        )),
        Attachment::Reattached { method, .. } => lines.push(format!("reattached with {method}")),
        Attachment::Created => {}
    }
    if let Some(t) = &recovery.interrupted_turn {
        lines.push(format!("recorded the unfinished turn {t} as interrupted"));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reports::Said;

    #[test]
    fn the_owner_says_why_it_stopped() {
        assert_eq!(
            owner_exit_line(&acpx_owner::OwnerExit::Idle, 7),
            "acpx queue owner 7: stopped (idle for its ttl)"
        );
    }

    #[test]
    fn a_prompt_names_the_pid_it_waits_for_and_a_control_does_not_hear_of_the_queue() {
        let waiting = LocalEvent::Waiting(None);
        let Some(Said::Note(n)) = local_said(&waiting, true) else {
            panic!("a note")
        };
        assert!(n.starts_with("[acpx] another prompt is running"), "{n}");
        let Some(Said::Note(n)) = local_said(&waiting, false) else {
            panic!("a note")
        };
        assert!(n.starts_with("[acpx] a prompt is running"), "{n}");
        assert_eq!(local_said(&LocalEvent::TurnOver, true), None);
        let queued = DriveEvent::Owner(SubmitEvent::Queued(2));
        assert_eq!(
            drive_said(&queued, true),
            Some(Said::Note(
                "[acpx] queued behind 2 task(s) of this session".into()
            ))
        );
        assert_eq!(drive_said(&queued, false), None);
        let owner = DriveEvent::WaitingForOwner {
            why: "a prompt runs",
            limit: Some(std::time::Duration::from_secs(5)),
        };
        let Some(Said::Note(n)) = drive_said(&owner, false) else {
            panic!("a note")
        };
        assert!(n.ends_with("(up to 5 s, --timeout)"), "{n}");
    }

    #[test]
    fn a_fallback_names_each_failed_step() {
        let n = Notice::Fallback {
            previous_acp_session_id: "old".into(),
            acp_session_id: "new".into(),
            failed_attempts: vec![],
        };
        assert!(notice_text(&n).contains("neither session/resume nor session/load"));
        assert_eq!(fallback_json(&n).unwrap()["acpxSessionId"], "new");
        assert!(fallback_json(&Notice::McpServersLeftOut(vec!["a".into()])).is_none());
    }
}
