//! The pure reducer: folds one logged event into a [`SessionRecord`].
//!
//! Everything that changes `session.json` during a session goes through [`apply_event`]: the
//! live runtime records an event and then applies it, and [`roll_forward`] applies the logged
//! events that a snapshot has not seen yet (after a crash, or from `acpx fsck --repair`). The
//! reducer reads nothing but the record and the event (the event's own timestamp is the clock),
//! so replaying a log always rebuilds the same snapshot.
//!
//! # Mapping of ACP `session/update` kinds (`docs/format.md`, § `session.json`)
//!
//! | update | effect |
//! |---|---|
//! | `agent_message_chunk` (text) | merged into the last `Text` of the current Agent message |
//! | `agent_thought_chunk` (text) | merged into the last `Thinking` of the current Agent message |
//! | `tool_call` / `tool_call_update` | upsert a `ToolUse`; on `completed`/`failed` write `tool_results[id]` |
//! | `plan` | `acpx.plan` |
//! | `available_commands_update` | `acpx.available_commands` (names) |
//! | `current_mode_update` | `acpx.current_mode_id` |
//! | `config_option_update` | `acpx.config_options` |
//! | `session_info_update` | `thread.title` (`null` clears), `thread.updated_at` |
//! | `usage_update` | `acpx.context_usage` (`used`, `size`, `cost`); token counts found in its `_meta` go to the turn's `request_token_usage` (thought and total tokens included) |
//! | `user_message_chunk` | a `User` message while an adopted session's replayed history is recorded ([`adopt`]); otherwise nothing (the prompt is recorded as sent) |
//! | non-text chunks, unknown kinds | nothing (the event log keeps them) |
//!
//! A `client_operation` of `session/request_permission` with status `running` (recorded when
//! the agent asks, before anyone decides) carries the request's `toolCall`, an ACP
//! `ToolCallUpdate`: it is applied exactly like a `tool_call_update` (creating the tool call
//! when the agent never announced it, as Zed does), so a write whose path, input and diff an
//! agent sends only in the permission request keeps them in the thread.
//!
//! The "current Agent message" is the last message of the thread when it is an Agent message,
//! except that a new one starts when a chunk carries a `messageId` different from the one the
//! message was started with (kept as `acp_message_id` on the Agent message), and when text or
//! thinking arrives after a tool use of that message has finished (a new model round).
//!
//! Chunks and tool calls change the thread only while a turn is running (`acpx.last_turn` has
//! outcome `running`) or an adopted session's replayed history is recorded ([`adopt`]);
//! updates that arrive after the turn ended are logged as late and do not reopen it.
//! Session-level updates (mode, commands, config, plan, title, usage) apply at any time.
//!
//! # Tool calls (`docs/format.md`, § Keys the runtime adds)
//!
//! - Status moves `pending → in_progress → completed | failed`. `completed` and `failed` are
//!   final: a later `tool_call` or `tool_call_update` for that id is logged and ignored.
//! - While a call is open its ACP state (title, kind, status, content, locations, rawOutput) is
//!   kept under `acpx.open_tool_calls[<id>]`; it is removed when the call ends.
//! - The result text comes from the `content` items of the call; `output` is the `rawOutput`.
//!   Both are capped at [`TOOL_OUTPUT_CAP_BYTES`] in the snapshot. When something was cut, the
//!   result carries `"truncated": true`, `"content_bytes"` (full text size) and
//!   `"output_bytes"` (full size of the `rawOutput` JSON text); a cut `rawOutput` becomes a
//!   string holding the first bytes of its JSON text. An oversized `rawInput` is cut the same
//!   way (`ToolUse.raw_input` holds the first bytes, `input` a string preview, and the ToolUse
//!   carries `"input_truncated": true` and `"input_bytes"`). The event log keeps everything.
//! - The ToolUse keeps the ACP `kind`, `title` and `status` as extra keys; its `name` is ACP
//!   `name`, else a `toolName` in the update's `_meta`, else the title. A finished result keeps
//!   the call's `diffs` (path, old and new text) and `terminals` (output, exit status), within
//!   the same cap (see [`tool_content`]); terminal output comes from the `client_operation`
//!   events of `terminal/output` and `terminal/wait_for_exit`.
//! - When a turn ends (`prompt_done` / `prompt_error`), every tool use still without a result
//!   gets an error result whose text says why ([`ToolCallEnd`]: "Tool canceled by user" for a
//!   cancel, else the failed turn, the agent's exit, the timeout or the interruption), with the
//!   reason under `unfinished`, and `is_input_complete: true`.
//!
//! # Other events
//!
//! `prompt_started` pushes the `User` message (from its `userMessageId` and `prompt` keys) and
//! opens `last_turn`; `prompt_done` / `prompt_error` close it and store the prompt response's
//! usage; `control_done` / `control_error` set `last_control_update`; `lifecycle_event`s carry
//! identity and agent-process facts (see [`lifecycle`]); `session_forked` carries everything a
//! fork starts from (see [`fork`]). Every event bumps `acpx.audit_seq` and pushes a compact
//! summary into the `acpx.audit_events` ring.

pub mod adopt;
mod agent_message;
mod controls;
pub mod fork;
pub mod imports;
mod messages;
mod prompt;
mod summary;
mod tool_calls;
pub mod tool_content;
mod usage;
mod user_content;

use acpx_model::session::DEFAULT_AUDIT_RING_CAPACITY;
use acpx_model::{AuditEvent, EventEnvelope, EventPayload, SessionRecord};

use controls::{apply_control_done, apply_control_error, apply_lifecycle};
pub use fork::{session_forked_payload, FORKED_FROM_KEY};
use messages::apply_session_update;
use prompt::{apply_prompt_done, apply_prompt_error, apply_prompt_started};
pub use summary::summarize;
pub use tool_calls::flush_open_tool_uses;
pub use tool_content::ToolCallEnd;
pub use usage::token_usage_from;
pub use user_content::user_content_from_acp;

/// Most bytes of tool output (result text, and separately the `rawOutput` JSON) and tool input
/// kept in the thread for one tool call.
pub const TOOL_OUTPUT_CAP_BYTES: usize = 10 * 1024;

/// The result text given to tool uses left open when a turn ends.
pub const CANCELED_TOOL_TEXT: &str = "Tool canceled by user";

/// `acpx` key holding the ACP state of tool calls that have not finished.
pub const OPEN_TOOL_CALLS_KEY: &str = "open_tool_calls";
/// `acpx` key holding the latest `usage_update` (context window, cost).
pub const CONTEXT_USAGE_KEY: &str = acpx_model::usage::CONTEXT_USAGE_KEY;
/// `acpx` key holding config values the user set (`{configId: value}`), re-applied after a
/// fallback to a fresh ACP session.
pub const DESIRED_CONFIG_KEY: &str = "desired_config_options";
/// `acpx` key holding the mode the user chose with `set_mode`.
pub const DESIRED_MODE_KEY: &str = "desired_mode_id";
/// `acpx` key holding the model the user chose (`--model`, `set model`), re-applied after
/// every attach.
pub const DESIRED_MODEL_KEY: &str = "desired_model_id";
/// `acpx` key holding the session's MCP servers in ACP's array form, sent on every
/// new/load/resume/fork.
pub const MCP_SERVERS_KEY: &str = "mcp_servers";
/// `acpx` key holding the session's additional workspace roots (`--add-dir`, absolute paths),
/// sent as `additionalDirectories` on every new/load/resume/fork.
pub const ADDITIONAL_DIRECTORIES_KEY: &str = "additional_directories";
/// `acpx` key holding the session's "always" / "never" permission answers (`{"kind:edit":
/// "allow"}`), folded from the `always` and `alwaysKey` of `client_operation` events.
pub const PERMISSION_ALWAYS_KEY: &str = "permission_always";
/// Agent-message key holding the ACP `messageId` its chunks carried.
pub const MESSAGE_ID_KEY: &str = "acp_message_id";
/// Agent-message key holding the latest `plan` entries the agent sent during the message
/// (`[{content, priority, status}]`, as ACP sends them).
pub const PLAN_KEY: &str = "plan";

/// Lifecycle phases this crate writes, and what each does to the record.
pub mod lifecycle {
    /// The agent process was spawned: `pid`, `command`, `startedAt`. Sets `pid` and
    /// `agentStartedAt` (from `startedAt`, else the event's time).
    pub const AGENT_STARTED: &str = "agent_started";
    /// `initialize` answered: `protocolVersion`, `agentCapabilities`, `agentInfo`.
    pub const INITIALIZED: &str = "initialized";
    /// `authenticate` succeeded: `methodId` and `source` (`env` or `config`; never the
    /// credential). Does not change the record.
    pub const AUTHENTICATED: &str = "authenticated";
    /// The agent advertised auth methods but no credential matched and the auth policy is
    /// `skip`: `authMethods` (the ids), `reason` (`no_credentials`). Does not change the record.
    pub const AUTHENTICATION_SKIPPED: &str = "authentication_skipped";
    /// `session/new` answered: `acpSessionId`, `agentSessionId`, `modes`, `configOptions`,
    /// `mcpServers` (the same keys on the next two phases set the ACP session id, the agent
    /// session id when non-empty, the current mode, the config options and the stored MCP
    /// servers).
    pub const SESSION_CREATED: &str = "session_created";
    /// `session/load` or `session/resume` succeeded: `method`, `acpSessionId`,
    /// `agentSessionId`, `replayedUpdates`, and `failedAttempts` (`[{method, reason,
    /// error?}]`, the steps that failed before this one) when there were any.
    pub const SESSION_ATTACHED: &str = "session_attached";
    /// Load/resume failed (or is unsupported) and a fresh ACP session replaced the old one:
    /// `reason`, `previousAcpSessionId`, `acpSessionId`, `agentSessionId`, `failedAttempts`,
    /// and `failedMethod` / `error` of the last failed step.
    pub const SESSION_FALLBACK: &str = "session_fallback";
    /// A config option or the model the user chose could not be set again after attaching:
    /// `kind` (`config_option` / `model`), `id`, `value`, `error`. Logged only.
    pub const CHOICE_NOT_RESTORED: &str = "choice_not_restored";
    /// The agent process ended: `exitCode`, `signal`, `reason`. Clears `pid`.
    pub const AGENT_EXIT: &str = "agent_exit";
    /// The agent process went on serving another session (`toRecordId`, `pid`): the fork it
    /// made (`sessions fork` hands it to the fork's queue owner). Clears `pid`; sets
    /// `lastAgentDisconnectReason` to `handed_over`. The other session's log has
    /// `agent_started` with `handedOverFrom`.
    pub const AGENT_HANDED_OVER: &str = "agent_handed_over";
    /// On open, the record named an agent process of an earlier acpx process that did not
    /// shut down cleanly: `pid`. Clears `pid`.
    pub const STALE_AGENT: &str = "stale_agent";
    /// A line on the agent's stdout that is not JSON-RPC: `stream`, `line`, `count` (and
    /// `bytes`, `truncated` when cut). No snapshot effect.
    pub const AGENT_OUTPUT: &str = "agent_output";
    /// Events the snapshot had folded in never reached the log: `fromSeq`, `toSeq`.
    pub const LOG_GAP: &str = "log_gap";
    /// An archive's session was imported as information only (`sessions import` without
    /// `--trust`): `agentCommand`, `mcpServers` as it named them. Shows the agent command as
    /// `untrusted-import: <command>`, moves both under `acpx.untrusted_import` and drops the
    /// MCP servers (`ops::import_trust`).
    pub const SESSION_IMPORTED: &str = "session_imported";
    /// The user accepted an untrusted import (`sessions trust`): `agentCommand` (the user's
    /// agent, or what the archive named), `mcpServers` (`null`: none). Sets both and clears
    /// `acpx.untrusted_import`.
    pub const IMPORT_TRUSTED: &str = "import_trusted";
    /// The session was closed: sets `closed` and `closedAt`.
    pub const SESSION_CLOSED: &str = "session_closed";
    /// The session was made a fork of another one: `forkedFrom`, `thread`, `state` (see
    /// [`super::fork`]). Sets `acpx.forked_from`, the thread and the session state the child
    /// starts from.
    pub const SESSION_FORKED: &str = "session_forked";
    /// A session the agent made elsewhere was attached (`acpx sessions adopt`): the keys of
    /// [`SESSION_CREATED`] and `method`; opens the recording of its replayed history
    /// (see [`super::adopt`]).
    pub const SESSION_ADOPTED: &str = "session_adopted";
    /// The replayed history of an adopted session ends: `replayedUpdates`. See
    /// [`super::adopt`].
    pub const ADOPTION_REPLAYED: &str = "adoption_replayed";
    /// acpx gave up on a request it sent and told the agent with `$/cancel_request`:
    /// `method`, `rpcId` (the JSON-RPC id), `reason` (`timeout`, `cancel_unanswered`,
    /// `recording_failed`), `cancelRequestSent`, `error`. No snapshot effect.
    pub const REQUEST_ABANDONED: &str = "request_abandoned";
    /// The session replays another one's prompts (`acpx replay`): `replayOf` (the source's
    /// record id). Sets `acpx.replayOf`.
    pub const SESSION_REPLAY_OF: &str = "session_replay_of";
}

/// `acpx` key of a session made by `acpx replay`: the record id of the session whose prompts it
/// sends again (docs/format.md § Replays).
pub const REPLAY_OF_KEY: &str = "replayOf";

/// What [`apply_event`] did with one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// The snapshot changed (beyond the audit bookkeeping).
    Applied,
    /// Logged only; the reason says why the snapshot was not changed.
    Ignored(String),
    /// The event's seq is not newer than `acpx.audit_seq`: already folded into the snapshot.
    AlreadyApplied,
}

impl Effect {
    fn ignored(reason: impl Into<String>) -> Self {
        Effect::Ignored(reason.into())
    }
}

/// Folds one logged event into the record: the snapshot changes of its type, then
/// `acpx.audit_seq`, the audit ring and `lastUsedAt`. Events with a seq not newer than
/// `acpx.audit_seq` are skipped ([`Effect::AlreadyApplied`]), so applying a log twice is
/// harmless.
pub fn apply_event(record: &mut SessionRecord, event: &EventEnvelope) -> Effect {
    if event.seq <= record.acpx.audit_seq {
        return Effect::AlreadyApplied;
    }
    let at = event.timestamp;
    // The most frequent event is read in place: a typed copy of every chunk would cost more
    // than applying it.
    let update_in_place = (event.event_type.as_str() == "session_update")
        .then(|| session_update_parts(&event.payload))
        .flatten();
    let effect = match update_in_place {
        Some((session_id, update)) => apply_session_update(record, session_id, update, event, at),
        None => apply_typed(record, event, at),
    };
    record.acpx.audit_seq = event.seq;
    if at > record.last_used_at {
        record.last_used_at = at;
    }
    record.acpx.push_audit_event(
        AuditEvent {
            seq: event.seq,
            timestamp: at,
            event_type: event.kind(),
            summary: summarize(event, &effect),
        },
        DEFAULT_AUDIT_RING_CAPACITY,
    );
    effect
}

/// `sessionId` and `update` of a `session_update` payload that has the shape of
/// [`acpx_model::event::SessionUpdatePayload`]; `None` sends it down the typed path.
fn session_update_parts(payload: &serde_json::Value) -> Option<(&str, &serde_json::Value)> {
    let session_id = payload.get("sessionId")?.as_str()?;
    let update = payload.get("update")?;
    Some((session_id, update))
}

/// Every event but a well-formed `session_update`, through its typed payload.
fn apply_typed(
    record: &mut SessionRecord,
    event: &EventEnvelope,
    at: acpx_model::Timestamp,
) -> Effect {
    match event.payload_typed() {
        Ok(EventPayload::SessionUpdate(p)) => {
            apply_session_update(record, &p.session_id, &p.update, event, at)
        }
        Ok(EventPayload::PromptStarted(p)) => apply_prompt_started(record, &p, event, at),
        Ok(EventPayload::PromptDone(p)) => apply_prompt_done(record, &p, at),
        Ok(EventPayload::PromptError(p)) => apply_prompt_error(record, &p, event, at),
        Ok(EventPayload::ControlDone(p)) => apply_control_done(record, &p, event, at),
        Ok(EventPayload::ControlError(p)) => apply_control_error(record, &p, event, at),
        Ok(EventPayload::LifecycleEvent(p)) => apply_lifecycle(record, &p, at),
        Ok(EventPayload::ClientOperation(p)) if p.method == "session/request_permission" => {
            if tool_content::remember_always(record, &p) {
                return Effect::Applied;
            }
            tool_calls::apply_permission_request(record, &p)
        }
        Ok(EventPayload::ClientOperation(p)) => tool_content::apply_client_operation(record, &p),
        Ok(EventPayload::ControlStarted(_)) | Ok(EventPayload::QueueEvent(_)) => {
            Effect::ignored("audit only")
        }
        Ok(EventPayload::Unknown { event_type, .. }) => {
            Effect::ignored(format!("unknown event type {event_type:?}"))
        }
        Err(e) => Effect::ignored(format!("payload does not fit its type: {e}")),
    }
}

/// The result of [`roll_forward`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RollForward {
    /// Events folded into the snapshot.
    pub applied: u64,
    /// Events the snapshot already contained.
    pub already_applied: u64,
    /// Seq of the last event folded in, if any.
    pub last_seq: Option<u64>,
}

/// Applies, in order, the events the snapshot has not folded in yet (seq greater than
/// `acpx.audit_seq`). Used on open to bring a snapshot that was saved before a crash up to
/// date with its log.
pub fn roll_forward<'a>(
    record: &mut SessionRecord,
    events: impl IntoIterator<Item = &'a EventEnvelope>,
) -> RollForward {
    let mut report = RollForward::default();
    for event in events {
        match apply_event(record, event) {
            Effect::AlreadyApplied => report.already_applied += 1,
            _ => {
                report.applied += 1;
                report.last_seq = Some(event.seq);
            }
        }
    }
    report
}

/// Whether the record has a turn that started and never ended.
pub fn turn_is_running(record: &SessionRecord) -> bool {
    record
        .acpx
        .last_turn
        .as_ref()
        .is_some_and(|t| t.outcome == "running")
}

#[cfg(test)]
mod tests;
