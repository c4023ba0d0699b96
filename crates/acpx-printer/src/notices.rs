//! What the user is told about opening a session, as text and JSON: a fallback to a new ACP
//! session, choices that could not be set again, MCP servers left out, and how the session got
//! its ACP session. Pure renderers of [`Notice`] and [`Attachment`], so every front end says
//! the same; where the text goes (stderr, a warning, `--verbose`) is the caller's.

use serde_json::{json, Value};

use acpx_runtime::session::{Attachment, FailedAttempt, Notice, Recovery};

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
