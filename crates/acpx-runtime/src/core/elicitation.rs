//! `elicitation/create` and `elicitation/complete`: an agent asking the user for structured
//! input (a form, or a visit to a URL), docs/format.md § Elicitations.
//!
//! A form is answered from `--elicitation-answers` when given (checked against its schema,
//! [`super::elicitation_form`]); otherwise, and for a URL, the person at the terminal is asked
//! through the prompter ([`crate::PermissionPrompter::elicit`]; a queue owner's forwards it to
//! the submitting client's terminal). With nobody to ask it is declined, or, under
//! `--non-interactive-permissions fail`, cancelled and the turn failed as a permission
//! question with nobody to ask would be. A URL other than `http`/`https` is declined unasked.
//! A person's wait on a URL ends when the agent sends `elicitation/complete` for it (accepted)
//! or the turn is cancelled (cancelled). Each question and its answer are recorded, the answer
//! with who gave it (`answeredBy`).

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::{json, Map, Value};
use tokio::sync::{oneshot, watch};

use super::SessionCore;
use crate::client_ops::PermissionPrompter;
use crate::elicitation_question::{ElicitationAsk, ElicitationQuestion, ElicitationReply};
use crate::session::NonInteractivePermissions;
use crate::ElicitationAnswers;

/// The method of an agent's question to the user.
pub(crate) const CREATE: &str = "elicitation/create";
/// The notification that a URL elicitation finished out of band.
pub(crate) const COMPLETE: &str = "elicitation/complete";

/// `answeredBy`: the `--elicitation-answers` file.
const ANSWERS_FILE: &str = "answers-file";
/// `answeredBy`: nobody could be asked (the non-interactive rule).
const NOBODY: &str = "non-interactive";
/// `answeredBy`: the agent's `elicitation/complete` ended the wait.
const AGENT_COMPLETE: &str = "agent-complete";
/// `answeredBy`: acpx itself (a URL it does not show, a mode it does not know).
const ACPX: &str = "acpx";
/// `answeredBy`: the turn was cancelled while the person was asked.
const CANCELLED_TURN: &str = "cancelled-turn";

/// An answer, who gave it, and why when it is not what a person chose.
type Answered = (ElicitationReply, &'static str, Option<String>);

/// The URL elicitations a person is being asked about, by `elicitationId`.
#[derive(Default)]
pub(crate) struct UrlWaits(Mutex<HashMap<String, oneshot::Sender<()>>>);

/// One entry of [`UrlWaits`], removed when the wait ends however it ends.
struct UrlWait<'a> {
    waits: &'a UrlWaits,
    id: String,
}

impl UrlWaits {
    fn start(&self, id: &str) -> (UrlWait<'_>, oneshot::Receiver<()>) {
        let (tx, rx) = oneshot::channel();
        SessionCore::lock(&self.0).insert(id.to_owned(), tx);
        let wait = UrlWait {
            waits: self,
            id: id.to_owned(),
        };
        (wait, rx)
    }

    /// Ends the wait for `id`; whether one was waiting.
    fn complete(&self, id: &str) -> bool {
        SessionCore::lock(&self.0)
            .remove(id)
            .is_some_and(|tx| tx.send(()).is_ok())
    }
}

impl Drop for UrlWait<'_> {
    fn drop(&mut self) {
        SessionCore::lock(&self.waits.0).remove(&self.id);
    }
}

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
        let (reply, by, why) = self.elicitation_answer(params, &message).await;
        if let Some(why) = &why {
            tracing::warn!("elicitation ({message}) answered {reply:?} by {by}: {why}");
        }
        let response = reply.to_response();
        let action = response["action"].as_str().unwrap_or("decline").to_owned();
        let mut extra = Map::new();
        extra.insert("action".into(), json!(action));
        extra.insert("mode".into(), json!(mode));
        extra.insert("answeredBy".into(), json!(by));
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

    async fn elicitation_answer(&self, params: &Value, message: &str) -> Answered {
        let question = match ElicitationQuestion::from_params(params) {
            Ok(q) => q,
            Err(why) => return (ElicitationReply::Decline, ACPX, Some(why)),
        };
        if let (ElicitationAsk::Form(form), Some(answers)) =
            (&question.ask, self.elicitation_answers())
        {
            return match form.finish(&answers) {
                Ok(content) => (ElicitationReply::Accept(content), ANSWERS_FILE, None),
                Err(why) => (ElicitationReply::Decline, ANSWERS_FILE, Some(why)),
            };
        }
        let cancel = Self::lock(&self.turn)
            .as_ref()
            .map(|t| t.cancel.subscribe());
        if cancel.as_ref().is_some_and(|c| *c.borrow()) {
            return (ElicitationReply::Cancel, CANCELLED_TURN, None);
        }
        if let Some(p) = self.prompter() {
            if let Some(answered) = self.ask_person(&*p, &question, cancel).await {
                return answered;
            }
        }
        // Nobody to ask: under `fail` the turn fails (exit 5), as for a permission question.
        let nobody = Some("nobody to ask: no terminal (and, for a form, no answers)".to_owned());
        if self.non_interactive() == NonInteractivePermissions::Fail {
            self.mark_prompt_unavailable(&format!("an elicitation: {message}"));
            (ElicitationReply::Cancel, NOBODY, nobody)
        } else {
            (ElicitationReply::Decline, NOBODY, nobody)
        }
    }

    /// Asks the person through `p`; `None` when `p` cannot ask. A URL's wait also ends with
    /// the agent's `elicitation/complete`, and any wait with the turn's cancel.
    async fn ask_person(
        &self,
        p: &dyn PermissionPrompter,
        question: &ElicitationQuestion,
        cancel: Option<watch::Receiver<bool>>,
    ) -> Option<Answered> {
        let (_wait, completed) = match &question.ask {
            ElicitationAsk::Url { elicitation_id, .. } => {
                let (wait, rx) = self.url_waits.start(elicitation_id);
                (Some(wait), Some(rx))
            }
            ElicitationAsk::Form(_) => (None, None),
        };
        let completed = async {
            let done = match completed {
                Some(rx) => rx.await.is_ok(),
                None => false,
            };
            if !done {
                std::future::pending::<()>().await;
            }
        };
        let cancelled = async {
            let cancelled = match cancel {
                Some(mut c) => c.wait_for(|v| *v).await.is_ok(),
                None => false,
            };
            if !cancelled {
                std::future::pending::<()>().await;
            }
        };
        let by = p.answerer();
        tokio::select! {
            biased;
            () = cancelled => Some((ElicitationReply::Cancel, CANCELLED_TURN, None)),
            () = completed => Some((ElicitationReply::Accept(Map::new()), AGENT_COMPLETE, None)),
            reply = p.elicit(question) => match (reply?, &question.ask) {
                // What came back is checked again: a forwarded answer crossed a socket.
                (ElicitationReply::Accept(content), ElicitationAsk::Form(form)) => {
                    Some(match form.finish(&content) {
                        Ok(c) => (ElicitationReply::Accept(c), by, None),
                        Err(why) => (ElicitationReply::Decline, by, Some(why)),
                    })
                }
                (ElicitationReply::Accept(_), ElicitationAsk::Url { .. }) => {
                    Some((ElicitationReply::Accept(Map::new()), by, None))
                }
                (other, _) => Some((other, by, None)),
            },
        }
    }

    /// The answers to form elicitations now: the turn's, else the session's.
    fn elicitation_answers(&self) -> Option<ElicitationAnswers> {
        match Self::lock(&self.turn_policy).as_ref() {
            Some(p) => p.elicitation_answers.clone(),
            None => self.policy.elicitation_answers.clone(),
        }
    }

    /// Records that a URL elicitation finished (its `elicitationId`), ending a person's wait
    /// on it if one is still asked.
    pub(super) async fn elicitation_complete(&self, params: &Value) {
        let id = params
            .get("elicitationId")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let ended = self.url_waits.complete(&id);
        let mut extra = Map::new();
        extra.insert("params".into(), params.clone());
        extra.insert("endedWait".into(), json!(ended));
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
