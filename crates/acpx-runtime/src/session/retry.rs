//! `--prompt-retries`: which failed turns may be tried again.
//!
//! A turn is retried only when its failure is **transient** and happened **before any side
//! effect**:
//! - transient: the agent answered `session/prompt` with JSON-RPC -32603 (internal error) or
//!   -32700 (parse error), as Node acpx does; not a timeout, not a cancel, not a dead agent,
//!   not any other agent error (those say something about the request or the session);
//! - before any side effect: the log holds no `session_update` and no `client_operation` of
//!   that turn, so the agent neither said anything nor read, wrote or ran anything for it.
//!
//! The failed attempt stays in the log as its own turn (`prompt_started` … `prompt_error`);
//! each retry is a new turn with a fresh request id.

use acpx_model::{EventQuery, EventType, ReadMode};

use super::Session;
use crate::TurnOutcome;

/// The JSON-RPC codes of a transient prompt failure. `--prompt-retries` retries a turn that
/// failed with one of them only when the log holds no `session_update` and no
/// `client_operation` of that turn (nothing was said or done yet); each attempt is a turn of
/// its own.
pub const TRANSIENT_PROMPT_ERRORS: &[i64] = &[-32603, -32700];

impl Session {
    /// Whether `outcome` may be retried (see the module docs).
    pub(super) async fn retryable(&self, outcome: &TurnOutcome) -> bool {
        if outcome.outcome.as_str() != "failed" || outcome.cancel_requested {
            return false;
        }
        let Some(e) = &outcome.acp_error else {
            return false;
        };
        if !TRANSIENT_PROMPT_ERRORS.contains(&e.code) {
            return false;
        }
        let query = EventQuery {
            types: vec![EventType::SessionUpdate, EventType::ClientOperation],
            request_id: Some(outcome.request_id.clone()),
            limit: Some(1),
            mode: ReadMode::Lenient,
            ..EventQuery::default()
        };
        // A log that cannot be read proves nothing: do not retry.
        match self.store.read_events(&self.id, &query).await {
            Ok(page) => page.events.is_empty(),
            Err(_) => false,
        }
    }
}
