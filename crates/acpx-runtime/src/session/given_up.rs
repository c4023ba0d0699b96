//! Requests acpx gives up on: the ACP `$/cancel_request` notification, and its record.
//!
//! When acpx stops waiting for the answer to a request it sent (the request timeout, a turn
//! whose agent did not answer after `session/cancel`, a recording failure), it tells the agent
//! with `$/cancel_request {requestId}` (the request's JSON-RPC id), so an agent that can stop
//! the work does; the agent is free to ignore it. The log gets a `lifecycle_event` of phase
//! `request_abandoned` (audit only: `method`, `rpcId`, `reason`, `cancelRequestSent`, and
//! `error` when the notification could not be queued), under the turn's request id when a
//! turn is running (docs/format.md § Requests acpx gives up on).
//!
//! A request dropped unanswered anywhere else (a command interrupted while it attaches) gets
//! the notification too ([`crate::agent::Pending`]'s drop), without a record: the session
//! that would hold it is being abandoned with it.

use acpx_model::{EventSource, EventStream};
use serde_json::{json, Map, Value};

use crate::agent::Pending;
use crate::core::SessionCore;
use crate::mapping::lifecycle;
use crate::recorder::EventDraft;

/// Sends `$/cancel_request` for `pending` (the request `method`) and records that acpx gave
/// up on it, and why (`timeout`, `cancel_unanswered`, `recording_failed`). A failure to
/// record is left to the caller's own error, which is the one to report.
pub(crate) async fn give_up(core: &SessionCore, pending: &Pending, method: &str, reason: &str) {
    let sent = pending.give_up();
    if pending.rpc_id().is_null() {
        // Never sent: nothing to cancel, nothing to record.
        return;
    }
    let mut facts = Map::new();
    facts.insert("method".into(), json!(method));
    facts.insert("rpcId".into(), pending.rpc_id().clone());
    facts.insert("reason".into(), json!(reason));
    facts.insert("cancelRequestSent".into(), json!(sent.is_ok()));
    if let Err(e) = sent {
        facts.insert("error".into(), json!(e));
    }
    let request_id = core.turn_request_id();
    let draft = EventDraft::new(
        request_id.as_deref(),
        EventStream::Lifecycle,
        EventSource::Runtime,
        super::lifecycle_payload(lifecycle::REQUEST_ABANDONED, Value::Object(facts)),
    );
    if let Err(e) = core.try_record(draft).await {
        tracing::warn!("cannot record that {method} was given up: {e}");
    }
}
