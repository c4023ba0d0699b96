//! The source session's permission answers, given again in a replay.
//!
//! Tool call ids differ between runs, so a question is matched to a recorded one by what it
//! asks about: the `toolCall`'s title, kind and `rawInput`. Each recorded answer is given at
//! most once, in the order the source asked: the second identical question gets the second
//! recorded answer. The answer is the recorded option's kind (`allow_once`, `reject_always`, …)
//! among this question's options, else the recorded option id, else the first option of the
//! same family (allow or reject); a question with no recorded match goes to the usual policy.

use std::sync::Mutex;

use acpx_runtime::{PermissionDecision, RecordedPermissions};
use serde_json::Value;

use crate::recording::{Action, RecordedAnswer, Recording};

/// What a permission question is about, without its id.
#[derive(Debug, Clone, PartialEq)]
pub struct Signature {
    /// `toolCall.title`.
    pub title: Option<String>,
    /// `toolCall.kind`.
    pub kind: Option<String>,
    /// `toolCall.rawInput`.
    pub raw_input: Option<Value>,
}

impl Signature {
    /// The signature of a `session/request_permission`'s params (or of the recorded
    /// `{"toolCall", "options"}`).
    pub fn of(request: &Value) -> Signature {
        let tool = request.get("toolCall").unwrap_or(&Value::Null);
        Signature {
            title: tool.get("title").and_then(Value::as_str).map(str::to_owned),
            kind: tool.get("kind").and_then(Value::as_str).map(str::to_owned),
            raw_input: tool.get("rawInput").filter(|v| !v.is_null()).cloned(),
        }
    }
}

/// The recorded answers of a session's first `until` turns, not yet given.
#[derive(Debug)]
pub struct RecordedAnswers {
    left: Mutex<Vec<(Signature, RecordedAnswer)>>,
    given: Mutex<usize>,
}

impl RecordedAnswers {
    /// The answered questions of `recording`'s turns (the first `until`, when given), in order.
    pub fn from_recording(recording: &Recording, until: Option<usize>) -> RecordedAnswers {
        let turns = recording.turns.iter().take(until.unwrap_or(usize::MAX));
        let left = turns
            .flat_map(|t| t.steps.iter())
            .filter_map(|s| match &s.action {
                Action::Permission {
                    request,
                    answer: Some(a),
                } => Some((Signature::of(request), a.clone())),
                _ => None,
            })
            .collect();
        RecordedAnswers {
            left: Mutex::new(left),
            given: Mutex::new(0),
        }
    }

    /// How many questions were answered from the recording so far.
    pub fn given(&self) -> usize {
        *self.given.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl RecordedPermissions for RecordedAnswers {
    fn answer(&self, params: &Value) -> Option<PermissionDecision> {
        let signature = Signature::of(params);
        let answer = {
            let mut left = self.left.lock().unwrap_or_else(|p| p.into_inner());
            let at = left.iter().position(|(s, _)| *s == signature)?;
            left.remove(at).1
        };
        let decision = decide(params, &answer);
        if decision.is_some() {
            *self.given.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        }
        decision
    }
}

/// `answer` as a decision among the options of `params`.
pub fn decide(params: &Value, answer: &RecordedAnswer) -> Option<PermissionDecision> {
    let approve = match answer.decision.as_str() {
        "approved" => true,
        "denied" => false,
        "cancelled" => return Some(PermissionDecision::Cancelled),
        _ => return None,
    };
    let options: Vec<(&str, &str)> = params
        .get("options")
        .and_then(Value::as_array)
        .map(|o| {
            o.iter()
                .filter_map(|o| {
                    Some((
                        o.get("optionId")?.as_str()?,
                        o.get("kind").and_then(Value::as_str).unwrap_or(""),
                    ))
                })
                .collect()
        })
        .unwrap_or_default();
    let family = if approve { "allow" } else { "reject" };
    let chosen = answer
        .option_kind
        .as_deref()
        .and_then(|k| options.iter().find(|(_, kind)| *kind == k))
        .or_else(|| {
            answer
                .option_id
                .as_deref()
                // The same id, but never one of the other family (an approval must not
                // pick a reject option that happens to carry the recorded id).
                .and_then(|id| {
                    options.iter().find(|(o, kind)| {
                        *o == id && !kind.starts_with(if approve { "reject" } else { "allow" })
                    })
                })
        })
        .or_else(|| options.iter().find(|(_, kind)| kind.starts_with(family)))
        .map(|(id, _)| (*id).to_owned());
    Some(match (chosen, approve) {
        (Some(id), true) => PermissionDecision::Approved(id),
        (Some(id), false) => PermissionDecision::Denied(id),
        // Nothing to refuse with: the refusal ACP has for every question.
        (None, false) => PermissionDecision::Cancelled,
        (None, true) => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn question(id: &str, title: &str) -> Value {
        json!({
            "toolCall": {"toolCallId": id, "title": title, "kind": "execute", "rawInput": {"cmd": "ls"}},
            "options": [
                {"optionId": "yes", "kind": "allow_once"},
                {"optionId": "no", "kind": "reject_once"}
            ]
        })
    }

    fn answers(list: Vec<(Value, &str, &str)>) -> RecordedAnswers {
        RecordedAnswers {
            left: Mutex::new(
                list.into_iter()
                    .map(|(q, decision, kind)| {
                        (
                            Signature::of(&q),
                            RecordedAnswer {
                                decision: decision.into(),
                                option_id: Some("old-id".into()),
                                option_kind: Some(kind.into()),
                            },
                        )
                    })
                    .collect(),
            ),
            given: Mutex::new(0),
        }
    }

    #[test]
    fn same_call_other_id_gets_the_recorded_answer_once_in_order() {
        let a = answers(vec![
            (question("a", "Run ls"), "denied", "reject_once"),
            (question("b", "Run ls"), "approved", "allow_once"),
        ]);
        assert_eq!(
            a.answer(&question("x", "Run ls")),
            Some(PermissionDecision::Denied("no".into()))
        );
        assert_eq!(
            a.answer(&question("y", "Run ls")),
            Some(PermissionDecision::Approved("yes".into()))
        );
        // Used up: the usual policy decides.
        assert_eq!(a.answer(&question("z", "Run ls")), None);
        assert_eq!(a.given(), 2);
    }

    #[test]
    fn another_call_is_left_to_the_policy() {
        let a = answers(vec![(question("a", "Run ls"), "approved", "allow_once")]);
        assert_eq!(a.answer(&question("a", "Run rm")), None);
        let mut other_input = question("a", "Run ls");
        other_input["toolCall"]["rawInput"] = json!({"cmd": "rm -rf /"});
        assert_eq!(a.answer(&other_input), None);
    }

    #[test]
    fn a_refusal_without_reject_option_cancels() {
        let q = json!({"toolCall": {"title": "t"}, "options": [{"optionId": "y", "kind": "allow_once"}]});
        let a = RecordedAnswer {
            decision: "denied".into(),
            option_id: None,
            option_kind: Some("reject_once".into()),
        };
        assert_eq!(decide(&q, &a), Some(PermissionDecision::Cancelled));
    }
}
