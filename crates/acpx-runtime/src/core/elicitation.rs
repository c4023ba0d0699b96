//! `elicitation/create` and `elicitation/complete`: an agent asking the user for structured
//! input (a form, or a visit to a URL). A form is answered from `--elicitation-answers`
//! (checked against its schema, [`super::elicitation_form`]); anything else, or answers that do
//! not fit, is declined, or, under `--non-interactive-permissions fail`, cancelled and the turn
//! failed as a permission question with nobody to ask would be (docs/format.md § Elicitations).
//! Asking a person at a terminal is not built yet.

use serde_json::{json, Map, Value};

use super::{elicitation_form, SessionCore};
use crate::ElicitationAnswers;

/// The method of an agent's question to the user.
pub(crate) const CREATE: &str = "elicitation/create";
/// The notification that a URL elicitation finished out of band.
pub(crate) const COMPLETE: &str = "elicitation/complete";

impl SessionCore {
    /// Records the elicitation as the agent sent it, answers it, and records the answer.
    pub(super) async fn elicitation_create(&self, params: &Value) -> Value {
        let mode = params
            .get("mode")
            .and_then(Value::as_str)
            .unwrap_or("form")
            .to_owned();
        let message = params
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let mut asked = Map::new();
        asked.insert("params".into(), params.clone());
        self.log_operation_as(
            CREATE,
            "running",
            format!("Elicitation ({mode}): {message}"),
            None,
            asked,
        )
        .await;
        let schema = params.get("requestedSchema").unwrap_or(&Value::Null);
        let filled = match (mode.as_str(), self.elicitation_answers()) {
            ("form", Some(answers)) => Some(elicitation_form::fill(schema, &answers)),
            _ => None,
        };
        let nobody = || "no answers and no terminal to ask".to_owned();
        let (response, why) = match filled {
            Some(Ok(content)) => (json!({"action": "accept", "content": content}), None),
            Some(Err(why)) => {
                tracing::warn!("declined the agent's form ({message}): {why}");
                (json!({"action": "decline"}), Some(why))
            }
            // Nobody to ask: under `fail` the turn fails (exit 5), as for a permission
            // question.
            None if self.fail_without_prompter_if(&format!("an elicitation: {message}"), true) => {
                (json!({"action": "cancel"}), Some(nobody()))
            }
            None => (json!({"action": "decline"}), Some(nobody())),
        };
        let action = response["action"].as_str().unwrap_or("decline").to_owned();
        let mut extra = Map::new();
        extra.insert("action".into(), json!(action));
        extra.insert("mode".into(), json!(mode));
        if let Some(content) = response.get("content") {
            extra.insert("content".into(), content.clone());
        }
        self.log_operation(
            CREATE,
            true,
            format!("Elicitation {action}: {message}"),
            why,
            extra,
        )
        .await;
        response
    }

    /// The answers to form elicitations now: the turn's, else the session's.
    fn elicitation_answers(&self) -> Option<ElicitationAnswers> {
        match Self::lock(&self.turn_policy).as_ref() {
            Some(p) => p.elicitation_answers.clone(),
            None => self.policy.elicitation_answers.clone(),
        }
    }

    /// Records that a URL elicitation finished (its `elicitationId`).
    pub(super) async fn elicitation_complete(&self, params: &Value) {
        let id = params
            .get("elicitationId")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let mut extra = Map::new();
        extra.insert("params".into(), params.clone());
        self.log_operation(
            COMPLETE,
            true,
            format!("Elicitation {id} complete"),
            None,
            extra,
        )
        .await;
    }
}
