//! A task queued for the owner's worker ([`Job`]) and what it asks for ([`JobKind`]), as the
//! dispatcher makes them from a request and the worker runs them, one at a time.

use std::sync::Arc;

use acpx_model::RecordId;
use serde_json::Value;

use acpx_runtime::output_backlog::OutputBacklog;
use acpx_runtime::session::NewSessionSpec;

use super::outgoing::ReplyTx;
use super::permissions::ForwardingPrompter;
use super::protocol::TaskOptions;

pub(super) enum JobKind {
    Prompt {
        prompt: Vec<Value>,
        options: TaskOptions,
        /// Asks the client's user (an interactive client only).
        prompter: Option<Arc<ForwardingPrompter>>,
        /// The event lines handed to the client's connection and not written yet.
        backlog: Arc<OutputBacklog>,
    },
    SetMode(String, TaskOptions),
    SetConfigOption(String, Value, TaskOptions),
    SetModel(String, TaskOptions),
    /// Create the session (see [`Request::CreateSession`](crate::protocol::Request::CreateSession)).
    Create(NewSessionSpec, TaskOptions),
    /// Make the session a fork of another one, keeping the agent that forked (see
    /// [`Request::ForkSession`](crate::protocol::Request::ForkSession)): the parent's id and the new session's name.
    Fork(RecordId, Option<String>, TaskOptions),
    Close,
    Release,
}

impl JobKind {
    /// The command's own options (`None` for close and release).
    pub(super) fn options(&self) -> Option<&TaskOptions> {
        match self {
            JobKind::Prompt { options, .. }
            | JobKind::SetMode(_, options)
            | JobKind::SetConfigOption(_, _, options)
            | JobKind::SetModel(_, options)
            | JobKind::Create(_, options)
            | JobKind::Fork(_, _, options) => Some(options),
            JobKind::Close | JobKind::Release => None,
        }
    }

    pub(super) fn name(&self) -> &'static str {
        match self {
            JobKind::Prompt { .. } => "prompt",
            JobKind::SetMode(..) => "set_mode",
            JobKind::SetConfigOption(..) => "set_config_option",
            JobKind::SetModel(..) => "set_model",
            JobKind::Create(..) => "create",
            JobKind::Fork(..) => "fork",
            JobKind::Close => "close",
            JobKind::Release => "release",
        }
    }
}

/// A task in the worker's queue.
pub(super) struct Job {
    /// Its arrival number (`arrival`): the worker runs tasks in this order.
    pub(super) arrival: u64,
    pub(super) request_id: String,
    pub(super) kind: JobKind,
    /// Response lines for the client; a client that went away leaves sends failing, and the
    /// task still runs and is recorded. Unbounded, so the worker never waits for a client:
    /// what travels on it is small (events, one at a time as recorded) except a reply, which
    /// travels as [`Outgoing::Reply`](crate::outgoing::Outgoing::Reply), by reference to the thread's texts.
    pub(super) reply: ReplyTx,
    /// Whether `accepted` reached the log already (the session may not be open yet).
    pub(super) accepted_logged: bool,
}
