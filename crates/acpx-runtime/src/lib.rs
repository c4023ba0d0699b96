//! # acpx-runtime
//!
//! Drives a real ACP agent process over stdio (with the `agent-client-protocol` 5.0.0 SDK) and
//! records everything it does through an [`acpx_model::Store`]: every `session/update`, client
//! operation, prompt and control becomes an event in the session's append-only log, and one
//! pure reducer ([`mapping`]) folds each event into the session's Zed-shaped `thread` and its
//! `acpx` namespace.
//!
//! ```no_run
//! use std::sync::Arc;
//! use acpx_runtime::{text_prompt, NewSessionSpec, Runtime, RuntimeOptions};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let store = Arc::new(acpx_model::MemoryStore::new()); // or a file / SQLite store
//! let runtime = Runtime::new(store, RuntimeOptions::default());
//! let mut session = runtime
//!     .open_new(NewSessionSpec {
//!         agent_command: "npx @zed-industries/codex-acp".into(),
//!         cwd: "/repo".into(),
//!         name: None,
//!     })
//!     .await?;
//! let outcome = session.prompt(text_prompt("fix the build")).await?;
//! println!("{}: {}", outcome.outcome, outcome.agent_text);
//! let id = session.id().clone();
//! session.shutdown().await?; // the record stays open; reopen it later:
//! let mut again = runtime.open_existing(&id).await?;
//! again.prompt(text_prompt("and now the tests")).await?;
//! again.close().await?;
//! # Ok(()) }
//! ```
//!
//! `cargo run -p acpx-runtime --example quickstart -- "hello"` runs one real prompt against
//! the scripted test agent into a file store and prints where it was stored.
//!
//! ## The pieces
//!
//! This crate is the session engine. Which process runs it (a warm queue owner or the
//! invoking command, under the run registry) is `acpx-owner`; what a command prints is
//! `acpx-printer`; config files, the agent registry and allocator settings are `acpx-app`.
//!
//! | module | job |
//! |---|---|
//! | [`mapping`] | the pure reducer: [`mapping::apply_event`], [`mapping::roll_forward`] |
//! | [`recorder`] | the write path of every event: log first, then snapshot |
//! | `agent` (internal) | the agent process (pid, exit, process group) and the ACP connection |
//! | [`session`] | [`Runtime`] (open new / existing, recover, exec) and [`Session`] (prompt, controls, cancel, shutdown/close) |
//! | `client_ops` (internal) | what the agent may ask of acpx: fs confined to the cwd, terminals, permission policies ([`PermissionMode`], [`PermissionPrompter`]) |
//! | [`elicitation_question`] | an agent's elicitation as a person is asked it: a form's fields (typed answers checked against the schema) or a URL; asked through [`PermissionPrompter::elicit`] |
//! | [`ops`] | session operations without a UI: [`ops::lookup`] (directory walk, id resolution), [`ops::fork`], [`ops::watch`] (follow a log), [`ops::prune`], [`ops::repair`] (fsck), [`ops::transfer`] (archive, import), [`ops::node_import`], [`ops::scope`] |
//! | [`record_json`] | the JSON objects that name and describe a session (identity triple, listed session, record without its conversation) |
//! | [`mcp_servers`] | MCP server lists: the common `mcpServers` file and ACP's array form |
//! | [`durations`] | seconds from a user, bounded |
//! | [`text`] | text an agent chose, made safe to print (control characters escaped, clipped) |
//! | [`capped_lines`] | lines read with a bound on their length (an agent's messages, an owner's requests) |
//! | [`text_spill`] | a streamed reply past 256 KiB moved to the session's unlinked temp file, so a long turn does not hold it in memory (docs/format.md decision 16) |
//!
//! ## What a session records
//!
//! - Opening: `lifecycle_event`s `agent_started` (pid), `initialized` (protocol version,
//!   capabilities), then `session_created`, `session_attached` (load/resume) or
//!   `session_fallback` (see [`mapping::lifecycle`]). While a session is being set up, the
//!   agent's updates are held back and recorded right after, so they carry the right ACP
//!   session id.
//! - A turn: `prompt_started` (its payload also carries `userMessageId` and the `prompt`
//!   blocks, so the log alone rebuilds the `User` message), one `session_update` per
//!   notification with the params exactly as received (unknown kinds and fields included),
//!   `client_operation`s, then `prompt_done` (`stopReason`, `permissionStats`, `usage`) or
//!   `prompt_error` (`code`, `detailCode`, `message`, `retryable`, `acp`, plus `outcome` and
//!   `permissionStats`). A cancel is recorded as a `cancel` control.
//! - Controls: `control_started` and `control_done` / `control_error` (with the `input`).
//! - The end: `agent_exit` (exit code or signal, `reason`: `process_exit` or
//!   `acpx_shutdown`), and `session_closed` for [`Session::close`].
//!
//! ## Keys this crate adds to the stored shapes
//!
//! See also `docs/format.md`, § Keys the runtime adds.
//!
//! All are optional for readers; unknown keys are kept by every acpx version.
//!
//! | where | key | meaning |
//! |---|---|---|
//! | `prompt_started` payload | `userMessageId`, `prompt` | the `User` message's id and the ACP blocks sent |
//! | `prompt_done` payload | `usage` | the prompt response's `usage`, as sent |
//! | `prompt_error` payload | `outcome`, `permissionStats`, `stopReason`, `agentExit` | `failed` / `timeout` / `cancelled` / `interrupted`; the turn's stats; the agent's stop reason if it answered; how the agent ended |
//! | `control_done` / `control_error` payload | `input` | what was asked (`{modeId}`, `{configId, value}`, `{requestId, reason}` for `cancel`) |
//! | `client_operation` payload | `path`, `bytes`, `terminalId`, `command`, `args`, `outputByteLimit`, `exitStatus`, `decision`, `optionId`, `toolCallId`, `kind`, `policy` | details of the operation |
//! | `lifecycle_event` payload | see [`mapping::lifecycle`] | per phase |
//! | `acpx` | `open_tool_calls`, `context_usage`, `desired_mode_id`, `desired_config_options`, `desired_model_id`, `mcp_servers`, `additional_directories` | see [`mapping`] |
//! | Agent message | `acp_message_id` | the ACP `messageId` its chunks carried |
//! | ToolUse / ToolResult | `input_truncated`, `input_bytes` / `truncated`, `content_bytes`, `output_bytes` | the 10 KB caps of [`mapping`] |
//!
//! Turn error codes (`prompt_error.code` and [`TurnOutcome::error`]): `RUNTIME` (detail
//! `AGENT_PROMPT_FAILED`, `AGENT_DISCONNECTED`, `CANCEL_UNANSWERED`, `TURN_INTERRUPTED`,
//! `INVALID_PROMPT_RESPONSE`), `NO_SESSION` (the agent said the session is unknown),
//! `TIMEOUT` (`PROMPT_TIMEOUT`), `STORE` (`RECORDING_FAILED`).
//!
//! ## Decisions
//!
//! - **Replay during `session/load` is not logged.** The thread is canonical and already holds
//!   that history; the replayed updates are counted (`replayedUpdates` of `session_attached`)
//!   and dropped. Updates after the load answer are live again (the switch happens on the
//!   SDK's dispatch loop together with the answer).
//! - **Snapshots** are saved at the end of each turn and control, when the session finishes, and while
//!   events stream only under the debounce budget of `docs/format.md` § Write ordering (at
//!   most every [`recorder::DEFAULT_SNAPSHOT_INTERVAL`], and only once the events since the
//!   last save at least equal the events before it, or when the stream pauses); opening
//!   rolls a snapshot that is behind forward from the log. With [`acpx_model::Durability::Flush`]
//!   (the default) every recorded event survives a `kill -9`; an unfinished turn is recorded
//!   as `interrupted` when the session is next opened (or by [`Runtime::recover`]).
//! - **The agent is spawned by acpx**, not by the SDK's `AcpAgent`, because the record needs
//!   the pid and exit status; it runs in its own process group so stopping it reaches
//!   everything a wrapper launcher started.
//! - **Reattach** tries resume, then load, then falls back to `session/new` when every step
//!   failed as unsupported (-32601/-32602), not found (-32001/-32002 or a not-found message),
//!   or -32603 on a record without agent messages; never for Node imports or under
//!   [`ResumePolicy::SameSessionOnly`]. The record id stays, and the fallback is a [`Notice`].
//!   After every attach the user's mode, config values and model are set again; a mode that
//!   cannot be is an error ([`RuntimeError::ModeNotRestored`]). `docs/format.md`, "Reattach
//!   and the user's choices".
//! - **Permission stats** count `session/request_permission` decisions and the decisions of
//!   the write and terminal gates (nothing is counted under `approve-all`).

#![warn(missing_docs)]

pub mod acp_frames;
mod agent;
pub mod capped_lines;
#[cfg(feature = "clap")]
mod clap_values;
mod client_ops;
mod core;
pub mod durations;
pub mod elicitation_question;
pub mod error;
pub mod error_kind;
pub(crate) mod flow;
mod fork_context;
pub mod mapping;
pub mod mcp_servers;
pub mod ops;
pub mod output_backlog;
pub mod permission_rules;
pub mod prompt_input;
pub mod record_json;
pub mod recorder;
pub mod session;
pub mod text;
pub mod text_spill;
mod turn;

pub use agent::{AgentExit, WireDirection, WireObserver};
pub use client_ops::{
    signal_group, ElicitationAnswers, PermissionAnswer, PermissionDecision, PermissionMode,
    PermissionPrompter, PermissionQuestion, RecordedPermissions,
};
pub use elicitation_question::{
    ElicitationAsk, ElicitationForm, ElicitationQuestion, ElicitationReply, FormField,
};
pub use error::{AcpError, RuntimeError, RuntimeResult};
pub use output_backlog::OutputBacklog;
pub use recorder::{EventDraft, Observer, Recorder};
pub use session::{
    agent_text_after, agent_text_parts_after, load_rolled_forward, text_prompt, Attachment,
    AuthPolicy, CancelHandle, FailedAttempt, Invocation, NewSessionSpec, NonInteractivePermissions,
    Notice, Recovery, ResumePolicy, Runtime, RuntimeOptions, Session, TurnOptions, TurnOutcome,
};
pub use turn::reply_texts_after;
