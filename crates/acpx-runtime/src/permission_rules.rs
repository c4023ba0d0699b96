//! Permission rules (`--permission-policy`, alias `--policy`): which tool calls an agent asks
//! about are approved, denied or escalated to a human before the permission mode decides.
//!
//! ```json
//! {"autoApprove": ["read", "search", "git"], "autoDeny": ["rm"], "escalate": ["execute"],
//!  "defaultAction": "deny"}
//! ```
//!
//! A rule is a word. It matches a tool call when it is `*`, or equals (ignoring case) the tool
//! call's kind (`toolCall.kind`, else inferred from the title as the permission modes do), its
//! whole title, or one token of its title (the title split at whitespace and punctuation other
//! than `-`, `_`, `.`). `autoDeny` wins over `escalate`, which wins over `autoApprove`; when no
//! rule matches, `defaultAction` decides, and without one the permission mode does. This
//! module is pure: the runtime applies its answer to `session/request_permission`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What a matching rule does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RuleAction {
    /// Allow (the allow option, else the first option).
    Approve,
    /// Reject (the reject option, else cancel).
    Deny,
    /// Ask the human (the terminal prompter); without one, reject as the non-interactive
    /// rule says.
    Escalate,
}

/// The rules of `--permission-policy`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PermissionRules {
    /// Words whose tool calls are approved.
    #[serde(default)]
    pub auto_approve: Vec<String>,
    /// Words whose tool calls are denied.
    #[serde(default)]
    pub auto_deny: Vec<String>,
    /// Words whose tool calls are always asked about.
    #[serde(default)]
    pub escalate: Vec<String>,
    /// What happens when no rule matches (`None`: the permission mode decides).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_action: Option<RuleAction>,
}

impl PermissionRules {
    /// Reads the rules from acpx's `--permission-policy` argument: the JSON text itself when
    /// it starts with `{`, else the path of a file holding it. The error says what is wrong.
    pub fn from_arg(arg: &str) -> Result<PermissionRules, String> {
        let text = if arg.trim_start().starts_with('{') {
            arg.to_owned()
        } else {
            std::fs::read_to_string(arg).map_err(|e| format!("cannot read {arg}: {e}"))?
        };
        let value: Value = serde_json::from_str(&text).map_err(|e| format!("invalid JSON: {e}"))?;
        PermissionRules::from_json(&value)
    }

    /// Reads the rules from their JSON form; the error says what is wrong.
    pub fn from_json(v: &Value) -> Result<PermissionRules, String> {
        if !v.is_object() {
            return Err("the rules must be a JSON object".into());
        }
        serde_json::from_value(v.clone()).map_err(|e| {
            format!("{e} (expected {{\"autoApprove\": [...], \"autoDeny\": [...], \"escalate\": [...], \"defaultAction\": \"approve|deny|escalate\"}})")
        })
    }

    /// What the rules say about a tool call (the `toolCall` of a permission request, or the
    /// title and kind of acpx's own write and terminal gates); `None` leaves it to the mode.
    pub fn decide(&self, tool_call: &Value) -> Option<RuleAction> {
        let kind = tool_kind(tool_call);
        let title = tool_call.get("title").and_then(Value::as_str).unwrap_or("");
        let matches = |rule: &String| {
            let rule = rule.trim();
            rule == "*"
                || kind
                    .as_deref()
                    .is_some_and(|k| k.eq_ignore_ascii_case(rule))
                || (!title.is_empty() && title.eq_ignore_ascii_case(rule))
                || tokens(title).any(|t| t.eq_ignore_ascii_case(rule))
        };
        if self.auto_deny.iter().any(matches) {
            Some(RuleAction::Deny)
        } else if self.escalate.iter().any(matches) {
            Some(RuleAction::Escalate)
        } else if self.auto_approve.iter().any(matches) {
            Some(RuleAction::Approve)
        } else {
            self.default_action
        }
    }
}

/// The words of a title: split at whitespace and punctuation, keeping `-`, `_` and `.` inside
/// words (`README.md`, `git-log`).
fn tokens(title: &str) -> impl Iterator<Item = &str> {
    title
        .split(|c: char| !(c.is_alphanumeric() || matches!(c, '-' | '_' | '.')))
        .filter(|t| !t.is_empty())
}

/// The kind of a tool call: `toolCall.kind`, else inferred from the title's first word
/// (read/cat → read; search/find/grep → search).
pub fn tool_kind(tool_call: &Value) -> Option<String> {
    if let Some(k) = tool_call.get("kind").and_then(Value::as_str) {
        return Some(k.to_owned());
    }
    let title = tool_call.get("title").and_then(Value::as_str)?;
    let first = title.split_whitespace().next()?.to_ascii_lowercase();
    match first.as_str() {
        "read" | "cat" => Some("read".into()),
        "search" | "find" | "grep" => Some("search".into()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rules(v: Value) -> PermissionRules {
        PermissionRules::from_json(&v).unwrap()
    }

    #[test]
    fn the_argument_is_json_text_or_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("policy.json");
        std::fs::write(&file, r#"{"autoDeny": ["rm"]}"#).unwrap();
        let from_file = PermissionRules::from_arg(file.to_str().unwrap()).unwrap();
        let inline = PermissionRules::from_arg(r#" {"autoDeny": ["rm"]}"#).unwrap();
        assert_eq!(from_file, inline);
        let missing = dir.path().join("missing.json");
        let e = PermissionRules::from_arg(missing.to_str().unwrap()).unwrap_err();
        assert!(e.starts_with("cannot read "), "{e}");
        let e = PermissionRules::from_arg("{autoDeny").unwrap_err();
        assert!(e.starts_with("invalid JSON: "), "{e}");
    }

    #[test]
    fn kind_title_and_tokens_match() {
        let r = rules(json!({"autoApprove": ["read", "git"], "autoDeny": ["rm"]}));
        assert_eq!(
            r.decide(&json!({"kind": "read", "title": "Open x"})),
            Some(RuleAction::Approve)
        );
        // Kind inferred from the title's first word.
        assert_eq!(
            r.decide(&json!({"title": "cat README.md"})),
            Some(RuleAction::Approve)
        );
        assert_eq!(
            r.decide(&json!({"kind": "execute", "title": "Run `git log`"})),
            Some(RuleAction::Approve)
        );
        assert_eq!(
            r.decide(&json!({"kind": "execute", "title": "Run: rm -rf build"})),
            Some(RuleAction::Deny)
        );
        assert_eq!(
            r.decide(&json!({"kind": "edit", "title": "Edit a.rs"})),
            None
        );
        // Case is ignored; a part of a word is not a token.
        assert_eq!(
            r.decide(&json!({"kind": "execute", "title": "GIT status"})),
            Some(RuleAction::Approve)
        );
        assert_eq!(r.decide(&json!({"kind": "execute", "title": "gitk"})), None);
        assert_eq!(
            r.decide(&json!({"kind": "edit", "title": "Edit README.md"})),
            None
        );
        let r = rules(json!({"autoApprove": ["README.md"]}));
        assert_eq!(
            r.decide(&json!({"kind": "edit", "title": "Edit README.md"})),
            Some(RuleAction::Approve)
        );
    }

    #[test]
    fn deny_beats_escalate_beats_approve_then_default() {
        let r = rules(json!({
            "autoApprove": ["*"], "escalate": ["execute"], "autoDeny": ["curl"],
            "defaultAction": "deny"
        }));
        let run = |t: &str| json!({"kind": "execute", "title": t});
        assert_eq!(r.decide(&run("curl x")), Some(RuleAction::Deny));
        assert_eq!(r.decide(&run("ls")), Some(RuleAction::Escalate));
        assert_eq!(
            r.decide(&json!({"kind": "edit", "title": "x"})),
            Some(RuleAction::Approve)
        );
        let r = rules(json!({"autoApprove": ["read"], "defaultAction": "escalate"}));
        assert_eq!(
            r.decide(&json!({"kind": "edit", "title": "x"})),
            Some(RuleAction::Escalate)
        );
        assert_eq!(PermissionRules::default().decide(&run("ls")), None);
    }

    #[test]
    fn bad_rules_say_what_is_wrong() {
        let e = PermissionRules::from_json(&json!({"autoAprove": ["x"]})).unwrap_err();
        assert!(e.contains("autoAprove"), "{e}");
        let e = PermissionRules::from_json(&json!({"defaultAction": "maybe"})).unwrap_err();
        assert!(e.contains("maybe"), "{e}");
        assert!(PermissionRules::from_json(&json!([])).is_err());
    }
}
