//! One decision per action (docs/format.md § One decision per action).
//!
//! - An approved `session/request_permission` (by a human, a `--permission-policy` rule or
//!   the mode) covers acpx's own gate for the client operations of that tool call: a
//!   `fs/write_text_file` or `terminal/create` that arrives while the approved tool call is
//!   open (approved in this turn, no `completed`/`failed` update yet) is not asked about
//!   again. The operation still has to stay inside the session directory.
//! - A human's "always" / "never" answer (the agent's `allow_always` / `reject_always`
//!   options, or acpx's own gate) is remembered for the session per tool kind: it is recorded
//!   in the decision's `client_operation` event (`always`, `alwaysKey`), which the reducer
//!   folds into the record ([`PERMISSION_ALWAYS_KEY`]), so it survives a reattach and an owner
//!   restart. It answers later questions that would ask a human; it never overrides a rule or
//!   the `deny-all` mode.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::Value;

use super::SessionCore;
use crate::client_ops::{PermissionAnswer, PermissionPrompter, PermissionQuestion};
use crate::mapping::PERMISSION_ALWAYS_KEY;

/// An approved tool call of the turn that has not finished.
#[derive(Debug, Clone)]
pub(crate) struct Grant {
    /// Its `toolCallId` (empty when the request had none).
    pub tool_call_id: String,
    /// Its kind (`toolCall.kind`, else inferred from the title).
    pub kind: Option<String>,
}

/// Whether an approved tool call of `kind` covers the client operation `method`: writes come
/// from edits (and moves, deletes, other or unknown kinds), terminals from executions (and
/// other or unknown kinds). A read or a search never covers either.
pub(crate) fn covers(kind: Option<&str>, method: &str) -> bool {
    match method {
        "fs/write_text_file" => matches!(kind, None | Some("edit" | "delete" | "move" | "other")),
        "terminal/create" => matches!(kind, None | Some("execute" | "other")),
        _ => false,
    }
}

/// What an "always" answer is remembered under: the tool kind (`kind:edit`), else the title
/// (`title:Dangerous thing`). acpx's write gate asks about kind `edit`, its terminal gate
/// about `execute`, so one answer serves the agent's requests and acpx's gates alike.
pub(crate) fn always_key(kind: Option<&str>, title: &str) -> String {
    match kind {
        Some(k) => format!("kind:{k}"),
        None => format!("title:{title}"),
    }
}

/// The spelling of a remembered answer in events and the record.
pub(crate) fn always_word(approved: bool) -> &'static str {
    if approved {
        "allow"
    } else {
        "reject"
    }
}

/// A prompter that keeps the last full answer of the one it wraps, so that code asking
/// through [`PermissionPrompter::ask`] can learn afterwards whether it was "always".
pub(crate) struct AnswerCatcher {
    inner: Arc<dyn PermissionPrompter>,
    last: Mutex<Option<PermissionAnswer>>,
}

impl AnswerCatcher {
    pub(crate) fn new(inner: Arc<dyn PermissionPrompter>) -> Self {
        AnswerCatcher {
            inner,
            last: Mutex::new(None),
        }
    }

    /// The answer given, if the human was asked.
    pub(crate) fn last(&self) -> Option<PermissionAnswer> {
        *SessionCore::lock(&self.last)
    }
}

#[async_trait]
impl PermissionPrompter for AnswerCatcher {
    async fn ask(&self, question: &PermissionQuestion) -> bool {
        self.answer(question).await.approved
    }

    async fn answer(&self, question: &PermissionQuestion) -> PermissionAnswer {
        let a = self.inner.answer(question).await;
        *SessionCore::lock(&self.last) = Some(a);
        a
    }
}

impl SessionCore {
    /// Notes an approved tool call of the turn (see the module docs).
    pub(crate) fn grant(&self, tool_call_id: &str, kind: Option<String>) {
        if let Some(t) = Self::lock(&self.turn).as_mut() {
            t.grants.push(Grant {
                tool_call_id: tool_call_id.to_owned(),
                kind,
            });
        }
    }

    /// The approved, open tool call of the turn that covers `method`, if any (the latest).
    pub(crate) fn covering_grant(&self, method: &str) -> Option<String> {
        Self::lock(&self.turn).as_ref().and_then(|t| {
            t.grants
                .iter()
                .rev()
                .find(|g| covers(g.kind.as_deref(), method))
                .map(|g| g.tool_call_id.clone())
        })
    }

    /// Ends the grant of a tool call the agent reports `completed` or `failed` (called with
    /// every `session/update`, in arrival order).
    pub(crate) fn end_grant_if_finished(&self, params: &Value) {
        let Some(update) = params.get("update") else {
            return;
        };
        let finished = update.get("sessionUpdate").and_then(Value::as_str)
            == Some("tool_call_update")
            && matches!(
                update.get("status").and_then(Value::as_str),
                Some("completed" | "failed")
            );
        let Some(id) = update.get("toolCallId").and_then(Value::as_str) else {
            return;
        };
        if finished {
            if let Some(t) = Self::lock(&self.turn).as_mut() {
                t.grants.retain(|g| g.tool_call_id != id);
            }
        }
    }

    /// The session's remembered answer under `key` (see [`always_key`]): `Some(true)` for
    /// "always allow", `Some(false)` for "never".
    pub(crate) async fn remembered(&self, key: &str) -> Option<bool> {
        let guard = self.recorder.lock().await;
        let word = guard
            .as_ref()?
            .snapshot()
            .acpx
            .extra
            .get(PERMISSION_ALWAYS_KEY)?
            .get(key)?
            .as_str()?
            .to_owned();
        Some(word == "allow")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_come_from_edits_and_terminals_from_executions() {
        assert!(covers(Some("edit"), "fs/write_text_file"));
        assert!(covers(None, "fs/write_text_file"));
        assert!(!covers(Some("read"), "fs/write_text_file"));
        assert!(!covers(Some("execute"), "fs/write_text_file"));
        assert!(covers(Some("execute"), "terminal/create"));
        assert!(!covers(Some("edit"), "terminal/create"));
        assert!(!covers(Some("search"), "terminal/create"));
        assert!(!covers(Some("edit"), "fs/read_text_file"));
    }

    #[test]
    fn answers_are_remembered_by_kind_else_title() {
        assert_eq!(always_key(Some("edit"), "Write a"), "kind:edit");
        assert_eq!(always_key(None, "Dangerous"), "title:Dangerous");
    }
}
