//! The client side of an elicitation the queue owner forwards (docs/format.md § Queue owner,
//! "Permission questions"): asked through the client's prompter, as the one-process path asks
//! it, while the owner's lines are still read. An `elicitation_ended` line for it ends the
//! asking unanswered (the agent completed the URL visit, the turn was cancelled); other lines
//! that arrive meanwhile are kept, in order, for the caller's loop.

use serde_json::Value;

use super::protocol::Response;
use super::remote_client::Following;
use crate::local::Presses;
use acpx_runtime::elicitation_question::ElicitationQuestion;
use acpx_runtime::PermissionPrompter;

/// How asking ended.
pub(super) enum Asked {
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
pub(super) async fn answer(
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
