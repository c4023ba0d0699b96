//! What the controls of a session print: `cancel`, `set-mode`, `set` (and `set model`), and a
//! prompt that was queued behind others (`prompt --no-wait`). Quiet prints nothing for a
//! control: its exit status is the answer.

use acpx_model::{RecordId, SessionRecord};
use acpx_owner::drive::Cancelled;
use serde_json::{json, Value};

use super::Printed;
use crate::results;

/// A result for JSON and text only.
fn said(json: Value, line: String) -> Printed {
    Printed::new(json, vec![line], Vec::new())
}

/// `cancel` of `record`: what its queue owner answered, or which one-process prompt was asked
/// to cancel (none: nothing ran).
pub fn cancelled(record: &SessionRecord, cancelled: &Cancelled) -> Printed {
    match cancelled {
        Cancelled::Owner(answer) => {
            let rid = answer.request_id.as_deref();
            let mut result = results::cancel_result(record, answer.cancelled, rid, None);
            if answer.withdrawn {
                result["withdrawn"] = json!(true);
            }
            let line = match (answer.cancelled, answer.withdrawn) {
                (true, true) => format!(
                    "withdrew prompt {} before its turn started (its agent was starting); \
                     nothing of it was sent to the agent",
                    answer.request_id.as_deref().unwrap_or("?")
                ),
                (true, false) => {
                    "cancel requested (the turn ends with stopReason cancelled)".into()
                }
                (false, _) => "nothing to cancel".into(),
            };
            said(result, line)
        }
        Cancelled::Run(sent) => {
            let rid = sent.as_ref().map(|i| i.request_id.as_str());
            let pid = sent.as_ref().map(|i| i.pid);
            let line = match sent {
                Some(i) => format!(
                    "cancel requested (prompt of pid {}: its turn ends with stopReason cancelled, or, while its agent is still starting, the prompt is withdrawn)",
                    i.pid
                ),
                None => "nothing to cancel".to_owned(),
            };
            said(
                results::cancel_result(record, sent.is_some(), rid, pid),
                line,
            )
        }
    }
}

/// `set-mode`: `resumed` says whether the session was reattached to set it.
pub fn mode_set(record: &SessionRecord, mode: &str, resumed: bool) -> Printed {
    said(
        results::mode_set(record, mode, resumed),
        format!("mode set to {mode}"),
    )
}

/// `set KEY VALUE`, with the agent's config options as it answered them.
pub fn config_set(
    record: &SessionRecord,
    key: &str,
    value: Value,
    resumed: bool,
    options: Vec<Value>,
) -> Printed {
    let shown = value
        .as_str()
        .map_or_else(|| value.to_string(), str::to_owned);
    said(
        results::config_set(record, key, value, resumed, options),
        format!("{key} set to {shown}"),
    )
}

/// `set model ID` through `session/set_model` (through the agent's model config option it
/// is a [`config_set`]).
pub fn model_set(record: &SessionRecord, model: &str, resumed: bool) -> Printed {
    said(
        results::model_set(record, model, resumed),
        format!("model set to {model}"),
    )
}

/// A prompt the queue owner queued as `request_id`, behind `queue_depth` tasks.
pub fn prompt_queued(id: &RecordId, request_id: &str, queue_depth: usize) -> Printed {
    let position = queue_depth + 1;
    Printed::new(
        results::prompt_queued(id, request_id, position),
        vec![format!(
            "queued {request_id} as #{position} (see `acpx status`)"
        )],
        vec![request_id.to_owned()],
    )
}
