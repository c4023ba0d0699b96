//! `session/request_permission`: the request recorded as the agent sent it (its `toolCall`
//! folds into the thread's tool call before anyone decides), then decided by a
//! `--permission-policy` rule, the permission mode or a human, and the decision recorded.

use serde_json::{json, Map, Value};

use super::grants::{always_key, always_word, AnswerCatcher};
use super::SessionCore;
use crate::client_ops::{
    decide_with_rules, PermissionDecision, PermissionMode, PermissionPrompter,
};
use crate::permission_rules::RuleAction;

impl SessionCore {
    pub(super) async fn request_permission(&self, params: &Value) -> Value {
        let cancel = Self::lock(&self.turn)
            .as_ref()
            .map(|t| t.cancel.subscribe());
        let already_cancelled = cancel.as_ref().is_some_and(|c| *c.borrow());
        let has_options = params
            .get("options")
            .and_then(Value::as_array)
            .is_some_and(|o| !o.is_empty());
        let tool = params.get("toolCall").cloned().unwrap_or(Value::Null);
        let is_read = matches!(
            crate::permission_rules::tool_kind(&tool).as_deref(),
            Some("read" | "search")
        );
        let title = tool
            .get("title")
            .and_then(Value::as_str)
            .unwrap_or("a tool call")
            .to_owned();
        // The request as the agent sent it, recorded before anyone decides: its `toolCall` is a
        // tool call update (some agents put a write's path, input and diff only there), which
        // the reducer folds into the thread's tool call like a `tool_call_update`, and which the
        // person asked sees rendered before the question (docs/format.md § Permission requests).
        let mut asked = Map::new();
        for key in ["toolCall", "options", "_meta"] {
            if let Some(v) = params.get(key).filter(|v| !v.is_null()) {
                asked.insert(key.into(), v.clone());
            }
        }
        self.log_operation_as(
            "session/request_permission",
            "running",
            format!("Permission requested: {title}"),
            None,
            asked,
        )
        .await;
        // A `--permission-policy` rule decides before the mode; `escalate` needs a human.
        let rules = self.permission_rules();
        let rule = rules.as_ref().and_then(|r| r.decide(&tool));
        let needs_human = match rule {
            Some(RuleAction::Escalate) => true,
            Some(_) => false,
            None => !is_read && self.permission_mode() == PermissionMode::ApproveReads,
        };
        // A question that would go to a human is answered by the session's "always" /
        // "never" for its kind, if there is one (core::grants).
        let kind = crate::permission_rules::tool_kind(&tool);
        let key = always_key(kind.as_deref(), &title);
        let remembered = match needs_human && has_options {
            true => self.remembered(&key).await,
            false => None,
        };
        // An answer recorded for the same tool call in a replayed session stands in for the
        // human, as "always" does: never for a rule or the mode (`deny-all` still refuses).
        let recorded = match &self.policy.recorded_permissions {
            Some(r) if !already_cancelled && needs_human && has_options => r.answer(params),
            _ => None,
        };
        let catcher = self.prompter().map(AnswerCatcher::new);
        // Cancelled: the turn was, or nobody can answer under `--non-interactive-permissions
        // fail` (which also fails the turn).
        let decision = if already_cancelled {
            PermissionDecision::Cancelled
        } else if let Some(d) = recorded.clone() {
            d
        } else if let Some(allow) = remembered {
            choose(params, allow, true)
        } else if has_options && self.fail_without_prompter_if(&title, needs_human) {
            PermissionDecision::Cancelled
        } else {
            let ask = decide_with_rules(
                self.permission_mode(),
                rules.as_ref(),
                catcher.as_ref().map(|c| c as &dyn PermissionPrompter),
                params,
            );
            match cancel {
                // A cancel wins over an answer that arrives with or after it: the human's
                // Ctrl-C and the prompter's reply (a forwarded question's client sends its
                // refusal right after asking the owner to cancel) can be ready at once, and the
                // turn is cancelled either way (ACP: pending requests end as `cancelled`).
                Some(mut c) => {
                    let d = tokio::select! {
                        biased;
                        _ = c.wait_for(|v| *v) => PermissionDecision::Cancelled,
                        d = ask => d,
                    };
                    if *c.borrow() {
                        PermissionDecision::Cancelled
                    } else {
                        d
                    }
                }
                None => ask.await,
            }
        };
        // An "always" / "never" answer selects the agent's `*_always` option when it has one.
        let always = catcher.and_then(|c| c.last()).filter(|a| a.always);
        let decision = match (&decision, always) {
            (PermissionDecision::Approved(_), Some(a)) if a.approved => choose(params, true, true),
            (PermissionDecision::Denied(_), Some(a)) if !a.approved => choose(params, false, true),
            _ => decision,
        };
        if let PermissionDecision::Approved(_) = decision {
            let id = tool.get("toolCallId").and_then(Value::as_str).unwrap_or("");
            self.grant(id, kind.clone(), &tool);
        }
        if let Some(t) = Self::lock(&self.turn).as_mut() {
            t.stats.requested += 1;
            match decision {
                PermissionDecision::Approved(_) => t.stats.approved += 1,
                PermissionDecision::Denied(_) => t.stats.denied += 1,
                PermissionDecision::Cancelled => t.stats.cancelled += 1,
            }
        }
        let tool_call = params.get("toolCall").cloned().unwrap_or(Value::Null);
        let title = tool_call
            .get("title")
            .and_then(Value::as_str)
            .unwrap_or("(untitled)");
        let (word, option) = match &decision {
            PermissionDecision::Approved(id) => ("approved", Some(id.clone())),
            PermissionDecision::Denied(id) => ("denied", Some(id.clone())),
            PermissionDecision::Cancelled => ("cancelled", None),
        };
        let mut extra = Map::new();
        extra.insert("decision".into(), json!(word));
        extra.insert("optionId".into(), json!(option));
        extra.insert(
            "toolCallId".into(),
            tool_call.get("toolCallId").cloned().unwrap_or(Value::Null),
        );
        extra.insert(
            "kind".into(),
            json!(crate::permission_rules::tool_kind(&tool_call)),
        );
        extra.insert("policy".into(), json!(self.permission_mode().as_str()));
        if recorded.is_some() {
            extra.insert("recorded".into(), json!(true));
        } else if let Some(r) = rule {
            extra.insert("rule".into(), json!(r));
        }
        if let Some(a) = always {
            extra.insert("always".into(), json!(always_word(a.approved)));
            extra.insert("alwaysKey".into(), json!(key));
        } else if remembered.is_some() {
            extra.insert("fromAlways".into(), json!(key));
        }
        self.log_operation(
            "session/request_permission",
            true,
            format!("Permission {word}: {title}"),
            None,
            extra,
        )
        .await;
        json!({"outcome": decision.outcome()})
    }
}

/// The option that allows (`allow`) or rejects, preferring the `*_always` kind when `always`:
/// allow falls back to `allow_once`, then the first option; reject to `reject_once`, then
/// `cancelled`.
fn choose(params: &Value, allow: bool, always: bool) -> PermissionDecision {
    let options: &[Value] = params
        .get("options")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice);
    let kinds: &[&str] = match (allow, always) {
        (true, true) => &["allow_always", "allow_once"],
        (true, false) => &["allow_once", "allow_always"],
        (false, true) => &["reject_always", "reject_once"],
        (false, false) => &["reject_once", "reject_always"],
    };
    let id_of = |o: &Value| {
        o.get("optionId")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let found = kinds.iter().find_map(|k| {
        options
            .iter()
            .find(|o| o.get("kind").and_then(Value::as_str) == Some(k))
            .map(id_of)
    });
    match (found, allow) {
        (Some(id), true) => PermissionDecision::Approved(id),
        (Some(id), false) => PermissionDecision::Denied(id),
        // No allow option by kind: the first option that is not a rejection (an agent's own
        // kind), never a reject option under an "approved" decision.
        (None, true) => options
            .iter()
            .find(|o| {
                !matches!(
                    o.get("kind").and_then(Value::as_str),
                    Some("reject_once" | "reject_always")
                )
            })
            .map_or(PermissionDecision::Cancelled, |o| {
                PermissionDecision::Approved(id_of(o))
            }),
        (None, false) => PermissionDecision::Cancelled,
    }
}
