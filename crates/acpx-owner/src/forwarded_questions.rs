//! The client side of the questions the queue owner forwards to its user (docs/format.md §
//! Queue owner, "Permission questions" and "Elicitations"), asked through the client's
//! prompter as the one-process path asks them. An interrupt while asked cancels the turn
//! through the owner, which answers the open question `cancelled` / `cancel`.
//!
//! An elicitation is asked while the owner's lines are still read: an `elicitation_ended`
//! line for it ends the asking unanswered (the agent completed the URL visit, the turn was
//! cancelled); other lines that arrive meanwhile are kept, in order, for the caller's loop.

use serde_json::Value;

use super::protocol::{Response, WireQuestion};
use super::remote_client::Following;
use crate::local::Presses;
use acpx_runtime::elicitation_question::ElicitationQuestion;
use acpx_runtime::PermissionPrompter;

/// What the prompt a question belongs to does for it.
#[async_trait::async_trait(?Send)]
pub(super) trait ForPrompt {
    /// The user interrupted while asked: tell the caller and cancel the turn through its
    /// owner.
    async fn cancel_turn(&mut self);
    /// The answer could not be sent to the owner.
    fn answer_failed(&mut self, e: &std::io::Error);
}

/// What asking a forwarded question uses of the prompt it belongs to.
pub(super) struct Asking<'a> {
    answer: &'a mut Following,
    prompter: Option<&'a dyn PermissionPrompter>,
    presses: &'a mut Presses,
    prompt: &'a mut dyn ForPrompt,
}

impl<'a> Asking<'a> {
    pub(super) fn new(
        answer: &'a mut Following,
        prompter: Option<&'a dyn PermissionPrompter>,
        presses: &'a mut Presses,
        prompt: &'a mut dyn ForPrompt,
    ) -> Self {
        Asking {
            answer,
            prompter,
            presses,
            prompt,
        }
    }

    /// Asks the owner's permission question `id` and sends the answer (a refusal without a
    /// prompter: only an interactive request is asked). Returns the presses that came.
    pub(super) async fn permission(self, id: u64, question: WireQuestion) -> u32 {
        let mut presses = 0;
        let answered = match self.prompter {
            Some(p) => {
                let asked = tokio::select! {
                    a = self.answer.answer_with(id, question, p) => Some(a),
                    new = self.presses.next() => { presses += new; None }
                };
                match asked {
                    Some(a) => a,
                    None => {
                        // The owner answers the open question as cancelled when the turn is;
                        // the refusal sent after it only closes ours.
                        self.prompt.cancel_turn().await;
                        self.answer
                            .answer_permission(id, false)
                            .await
                            .map(|_| false)
                    }
                }
            }
            None => self
                .answer
                .answer_permission(id, false)
                .await
                .map(|_| false),
        };
        if let Err(e) = answered {
            self.prompt.answer_failed(&e);
        }
        presses
    }

    /// Asks the owner's elicitation `id` (its `request` params) and sends the answer.
    /// Returns the presses that came.
    pub(super) async fn elicitation(self, id: u64, request: &Value) -> u32 {
        let (prompter, presses) = (self.prompter, &mut *self.presses);
        match ask_elicitation(self.answer, id, request, prompter, presses).await {
            Ok(Asked::Interrupted(new)) => {
                self.prompt.cancel_turn().await;
                new
            }
            Ok(Asked::Sent | Asked::Ended) => 0,
            Err(e) => {
                self.prompt.answer_failed(&e);
                0
            }
        }
    }
}

/// How asking ended.
enum Asked {
    /// The answer went to the owner.
    Sent,
    /// The owner no longer waits for one (or the connection ended: the next read says so).
    Ended,
    /// The user interrupted (this many presses): the caller cancels the turn, which ends the
    /// question in the owner.
    Interrupted(u32),
}

/// Asks the owner's elicitation `id` (its `request` params) through `prompter` and sends the
/// answer; without a prompter, says nobody could be asked.
async fn ask_elicitation(
    answer: &mut Following,
    id: u64,
    request: &Value,
    prompter: Option<&dyn PermissionPrompter>,
    presses: &mut Presses,
) -> std::io::Result<Asked> {
    // A task queued for another host's owner is never interactive: nothing is forwarded.
    let Following::Local(local) = answer else {
        return Ok(Asked::Ended);
    };
    let (Some(p), Ok(question)) = (prompter, ElicitationQuestion::from_params(request)) else {
        local.answer_elicitation(id, None).await?;
        return Ok(Asked::Sent);
    };
    let ask = p.elicit(&question);
    tokio::pin!(ask);
    let mut kept = Vec::new();
    let asked = loop {
        tokio::select! {
            reply = &mut ask => {
                break local
                    .answer_elicitation(id, reply.map(|r| r.to_response()))
                    .await
                    .map(|()| Asked::Sent);
            }
            next = local.next() => match next {
                Ok(Some(Response::ElicitationEnded { id: ended })) if ended == id => {
                    break Ok(Asked::Ended);
                }
                Ok(Some(r)) => {
                    let last = r.is_final();
                    kept.push(r);
                    if last {
                        break Ok(Asked::Ended);
                    }
                }
                Ok(None) | Err(_) => break Ok(Asked::Ended),
            },
            n = presses.next() => break Ok(Asked::Interrupted(n)),
        }
    };
    local.put_back(kept);
    asked
}
