//! # acpx-owner
//!
//! Who drives a stored session, and how a command reaches it: the warm **queue owner** (one
//! agent process per session shared by separate `acpx` invocations, `docs/format.md`,
//! § Queue owner), the **run registry** of turns run in the invoking process instead
//! ([`runs`], [`local`]), and the **authority directory** where both meet on one host
//! ([`authority`]). The session engine itself (ACP connection, turn, mapping, recorder) is
//! `acpx-runtime`; this crate decides which process runs it.
//!
//! The first command that needs the agent of a stored session starts an owner (a detached
//! process; the `acpx` binary runs [`run_owner`] in a hidden subcommand). The owner holds the
//! agent process, the ACP connection and the session's writer lock, and runs the tasks
//! later commands submit over its Unix socket one at a time, in the order they arrived.
//!
//! | module | job |
//! |---|---|
//! | [`protocol`] | the JSON-lines requests and responses |
//! | [`lease`] | where an owner is found on this host; its lock is the liveness truth |
//! | [`store_lease`] | the owner's lease in the store: acquired, renewed, fencing its writes, released |
//! | `server` | the owner: local lease, accept loop, TTL, signals, shutdown |
//! | `config`, `exit` | what an owner is started with ([`OwnerConfig`]) and why it stopped ([`OwnerExit`]) |
//! | `shared` | the state the owner's tasks share: status, stop, withdrawable prompts, TTL |
//! | `job` | a task queued for the worker and what it asks for |
//! | `outgoing` | what the owner sends one client: response lines, event lines, a reply in parts |
//! | `connections` | the bound on an owner's connections, and the refusal past it |
//! | `arrival` | queue order is arrival order: connections numbered as accepted |
//! | `host`, `mutex` | this host's name as leases show it; a mutex taken whatever a panicked holder left |
//! | `dispatch` | a request answered at once (status, cancel) or queued as a job, from a socket or another host |
//! | `remote_inbox` | the tasks other hosts queue in a shared store (PostgreSQL), served like socket requests |
//! | [`remote_client`] | a task queued for another host's owner, followed (answers, and events from the log) |
//! | `worker` | the one task holding the [`acpx_runtime::Session`]: (re)attach with the task's options, run jobs in order, agent restart |
//! | `reply_parts` | a reply in parts and the bounded writes every answer line goes through |
//! | `permissions` | permission questions and elicitations forwarded to the submitting client's user |
//! | `forwarded_questions` | the client side of forwarded permission questions and elicitations (an elicitation asked while the owner's lines are read) |
//! | `frames` | a task's raw ACP frames, for the client that asked for them (`--format acp`) |
//! | [`client`] | connect-or-spawn, streamed answers, answering forwarded questions, release |
//! | [`submit`] | a prompt or control submitted and followed (events, questions, interrupts), cancel, status, close, release |
//! | [`runs`] | the run registry of turns run without an owner (run lock, cancel socket) and the scope locks |
//! | [`drive`] | one call that runs a prompt, control or cancel through the owner or in this process, the same options either way |
//! | [`local`] | a turn, control or fork in this process under the run registry, with Ctrl-C and remote cancel |
//! | [`interrupts`] | Ctrl-C, SIGTERM and SIGHUP counted for a turn run here or followed at an owner |
//! | [`ensure`] | `sessions ensure` / `sessions new`: the scope's session found or made, atomically across processes |
//! | [`adopt`] | `sessions adopt`: a record for an ACP session the agent has, under the scope lock, refused when one holds it |
//! | [`closing`] | `sessions close`: a running turn cancelled, the owner released, the record closed |
//! | [`status`] | what `acpx status` reports: the owner or local run driving a session, and its record |
//! | [`authority`] | where the processes driving one store's sessions meet: a directory per store under the user's runtime directory |
//! | [`private_socket`] | where a control socket lives when its natural path is too long |
//!
//! What a task runs with is its own command's: permission rules and timeout travel with it
//! ([`protocol::TaskOptions`]) and apply to its turn only ([`acpx_runtime::TurnOptions`]); the resume
//! policy, MCP servers and model act when the task makes the owner (re)attach.
//!
//! Events reach a waiting client only after their append returned (the turn observer fires
//! after the append), so a client never shows what the log does not have. A client that goes
//! away while it waits changes nothing: the task runs to its end and is recorded.

#![warn(missing_docs)]

pub mod adopt;
pub mod authority;
pub mod closing;
pub mod drive;
pub mod ensure;
pub mod interrupts;
pub mod local;
pub mod private_socket;
pub mod runs;
pub mod status;

mod arrival;
pub mod client;
mod config;
mod connections;
mod dispatch;
mod exit;
mod forwarded_questions;
mod frames;
mod frozen;
mod host;
mod job;
pub mod lease;
mod mutex;
mod outgoing;
mod permissions;
pub mod protocol;
pub mod remote_client;
mod remote_inbox;
mod reply_parts;
mod server;
mod shared;
pub mod store_lease;
pub mod submit;
mod worker;

pub use config::{OwnerConfig, DEFAULT_QUEUE_MAX_DEPTH, DEFAULT_TTL};
pub use exit::OwnerExit;
pub use server::run_owner;

/// The README's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExamples;
