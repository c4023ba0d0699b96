//! One decision per action (docs/format.md § One decision per action).
//!
//! - An approved `session/request_permission` (by a human, a `--permission-policy` rule or
//!   the mode) covers acpx's own gate for the client operations of that tool call: a
//!   `fs/write_text_file` or `terminal/create` that arrives while the approved tool call is
//!   open (approved in this turn, no `completed`/`failed` update yet) is not asked about
//!   again — but only when it is the call's own: a write to a path the call names (its
//!   `locations`, the paths of its diffs, a string of its `rawInput`), a terminal running the
//!   command its `rawInput` names (as given, or as the script of `sh -c`). ACP does not say
//!   which tool call a write belongs to, so anything else is asked about as before. Under
//!   `deny-all` nothing is covered. The operation still has to stay inside the session
//!   directory.
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
    /// What the permission request's `toolCall` named ([`targets_of`]).
    pub targets: Vec<String>,
}

/// Whether an approved tool call of `kind` may cover the client operation `method` at all:
/// writes come from edits (and moves, deletes, other or unknown kinds), terminals only from
/// executions. A read or a search never covers either.
pub(crate) fn covers(kind: Option<&str>, method: &str) -> bool {
    match method {
        "fs/write_text_file" => matches!(kind, None | Some("edit" | "delete" | "move" | "other")),
        "terminal/create" => kind == Some("execute"),
        _ => false,
    }
}

/// The most strings kept of one tool call's `rawInput` (a call naming more is unusual).
const MAX_TARGETS: usize = 64;

/// The longest `rawInput` string kept as a target: longer ones are contents, not names.
const MAX_TARGET_BYTES: usize = 4096;

/// What a tool call (a `tool_call`, a `tool_call_update` or a permission request's
/// `toolCall`) names as its objects: its `locations`' paths, its diffs' paths and the strings
/// of its `rawInput` (nested a few levels; an array of strings also joined with spaces, the
/// way a command and its arguments are given).
pub(crate) fn targets_of(call: &Value) -> Vec<String> {
    fn strings(v: &Value, depth: usize, out: &mut Vec<String>) {
        if out.len() >= MAX_TARGETS || depth > 3 {
            return;
        }
        match v {
            // Paths and command lines are short; a file's content in `rawInput` is not kept
            // (this runs on every tool call update of a turn).
            Value::String(s) if s.len() <= MAX_TARGET_BYTES => out.push(s.clone()),
            Value::Array(items) => {
                let words: Vec<&str> = items.iter().filter_map(Value::as_str).collect();
                let bytes: usize = words.iter().map(|w| w.len() + 1).sum();
                if words.len() == items.len() && words.len() > 1 && bytes <= MAX_TARGET_BYTES {
                    out.push(words.join(" "));
                }
                for i in items {
                    strings(i, depth + 1, out);
                }
            }
            Value::Object(m) => {
                for v in m.values() {
                    strings(v, depth + 1, out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    let paths = |key: &str| {
        call.get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|item| {
                key == "locations" || item.get("type").and_then(Value::as_str) == Some("diff")
            })
            .filter_map(|item| item.get("path").and_then(Value::as_str).map(str::to_owned))
            .collect::<Vec<_>>()
    };
    out.extend(paths("locations"));
    out.extend(paths("content"));
    if let Some(raw) = call.get("rawInput") {
        strings(raw, 0, &mut out);
    }
    out.truncate(MAX_TARGETS);
    out
}

/// Whether the client operation asked about (`method` with the agent's `details`: a write's
/// `path`, a terminal's `command` and `args`) is one the approved call named in `targets`.
pub(crate) fn names_operation(targets: &[String], method: &str, details: &Value) -> bool {
    let named = |want: &str| targets.iter().any(|t| t.trim() == want.trim());
    match method {
        "fs/write_text_file" => details
            .get("path")
            .and_then(Value::as_str)
            .is_some_and(|p| !p.is_empty() && named(p)),
        "terminal/create" => {
            let Some(command) = details.get("command").and_then(Value::as_str) else {
                return false;
            };
            let args: Vec<&str> = details
                .get("args")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let line = std::iter::once(command)
                .chain(args.iter().copied())
                .collect::<Vec<_>>()
                .join(" ");
            // `sh -c SCRIPT` (bash, zsh, `-lc`): the script is the command the call named.
            let shell = matches!(
                command.rsplit('/').next(),
                Some("sh" | "bash" | "zsh" | "dash")
            );
            let script = match args.as_slice() {
                [flag, script] if shell && matches!(*flag, "-c" | "-lc") => Some(*script),
                _ => None,
            };
            !line.trim().is_empty() && (named(&line) || script.is_some_and(named))
        }
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

    async fn elicit(
        &self,
        question: &crate::ElicitationQuestion,
    ) -> Option<crate::ElicitationReply> {
        self.inner.elicit(question).await
    }

    fn answerer(&self) -> &'static str {
        self.inner.answerer()
    }
}

impl SessionCore {
    /// Notes an approved tool call of the turn, with what its request's `toolCall` names
    /// (see the module docs).
    pub(crate) fn grant(&self, tool_call_id: &str, kind: Option<String>, tool_call: &Value) {
        if let Some(t) = Self::lock(&self.turn).as_mut() {
            let mut targets = targets_of(tool_call);
            if let Some(seen) = t.tool_targets.get(tool_call_id) {
                targets.extend(seen.iter().cloned());
            }
            t.grants.push(Grant {
                tool_call_id: tool_call_id.to_owned(),
                kind,
                targets,
            });
        }
    }

    /// The approved, open tool call of the turn that covers the client operation `method`
    /// with the agent's `details`, if any (the latest): one of a kind that may cover it and
    /// that named it.
    pub(crate) fn covering_grant(&self, method: &str, details: &Value) -> Option<String> {
        Self::lock(&self.turn).as_ref().and_then(|t| {
            t.grants
                .iter()
                .rev()
                .find(|g| {
                    covers(g.kind.as_deref(), method)
                        && names_operation(&g.targets, method, details)
                })
                .map(|g| g.tool_call_id.clone())
        })
    }

    /// Notes what a tool call names ([`targets_of`]), and ends the grant of a tool call the
    /// agent reports `completed` or `failed` (called with every `session/update`, in arrival
    /// order).
    pub(crate) fn end_grant_if_finished(&self, params: &Value) {
        let Some(update) = params.get("update") else {
            return;
        };
        let is_call = matches!(
            update.get("sessionUpdate").and_then(Value::as_str),
            Some("tool_call" | "tool_call_update")
        );
        if let (true, Some(id)) = (is_call, update.get("toolCallId").and_then(Value::as_str)) {
            let named = targets_of(update);
            if !named.is_empty() {
                if let Some(t) = Self::lock(&self.turn).as_mut() {
                    let seen = t.tool_targets.entry(id.to_owned()).or_default();
                    if seen.len() < MAX_TARGETS {
                        seen.extend(named);
                    }
                }
            }
        }
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
        assert!(!covers(None, "terminal/create"));
        assert!(!covers(Some("other"), "terminal/create"));
        assert!(!covers(Some("edit"), "terminal/create"));
        assert!(!covers(Some("search"), "terminal/create"));
        assert!(!covers(Some("edit"), "fs/read_text_file"));
    }

    #[test]
    fn only_what_the_call_named_is_covered() {
        use serde_json::json;
        let edit = targets_of(&json!({
            "toolCallId": "c1", "kind": "edit",
            "locations": [{"path": "/r/README.md"}],
            "content": [{"type": "diff", "path": "/r/b.md", "oldText": "", "newText": "x"}],
            "rawInput": {"file_path": "/r/c.md", "nested": {"more": ["/r/d.md"]}}
        }));
        let write = |p: &str| json!({"path": p, "bytes": 1});
        for p in ["/r/README.md", "/r/b.md", "/r/c.md", "/r/d.md"] {
            assert!(
                names_operation(&edit, "fs/write_text_file", &write(p)),
                "{p}"
            );
        }
        assert!(!names_operation(
            &edit,
            "fs/write_text_file",
            &write("/r/.git/hooks/pre-commit")
        ));
        assert!(!names_operation(&edit, "fs/write_text_file", &json!({})));

        let run = targets_of(&json!({"kind": "execute", "rawInput": {"command": "cargo test"}}));
        let term = |c: &str, a: &[&str]| json!({"command": c, "args": a});
        assert!(names_operation(
            &run,
            "terminal/create",
            &term("cargo", &["test"])
        ));
        assert!(names_operation(
            &run,
            "terminal/create",
            &term("bash", &["-c", "cargo test"])
        ));
        assert!(names_operation(
            &run,
            "terminal/create",
            &term("/bin/sh", &["-lc", "cargo test"])
        ));
        assert!(!names_operation(
            &run,
            "terminal/create",
            &term("cargo", &["test", "&&", "rm", "-rf", "/"])
        ));
        assert!(!names_operation(
            &run,
            "terminal/create",
            &term("rm", &["-rf", "/"])
        ));
        let argv = targets_of(&json!({"kind": "execute", "rawInput": {"command": ["ls", "-la"]}}));
        assert!(names_operation(
            &argv,
            "terminal/create",
            &term("ls", &["-la"])
        ));
    }

    #[test]
    fn answers_are_remembered_by_kind_else_title() {
        assert_eq!(always_key(Some("edit"), "Write a"), "kind:edit");
        assert_eq!(always_key(None, "Dangerous"), "title:Dangerous");
    }
}
