//! # acpx-replay
//!
//! Recorded sessions used again (issue 47, items 3 and 4):
//!
//! | module | what it does |
//! |---|---|
//! | [`recording`] | a session's event log read back turn by turn: prompts, updates, permission questions and their answers, stop reasons, usage, cost, times |
//! | [`answers`] | the source session's permission answers, given again when the same tool call comes up (matched by title, kind and `rawInput`, never by id) |
//! | [`replay`] | a new session that sends a recorded session's prompts, in order, to an agent, linked to its source (`acpx.replayOf`) |
//! | [`diff`] | two sessions compared turn by turn: replies, tool calls and their files, stop reasons, tokens, cost, wall time |
//! | [`compare`] | one prompt sent to several agents at once, each run a stored session, summed up in one row per agent |
//! | [`serve_agent`] | a recording served as an ACP agent on stdio: its `initialize` answer, its updates and questions with their pacing, its stop reasons |
//!
//! It sits above `acpx-runtime` (agents are driven through [`acpx_runtime::Runtime`] and
//! [`acpx_runtime::Session`], so every run is recorded like any other) and below the `acpx`
//! binary, which only parses the commands and prints what these modules return.

#![warn(missing_docs)]

pub mod answers;
pub mod compare;
pub mod diff;
pub mod recording;
pub mod replay;
pub mod serve_agent;

pub use recording::{read_recording, RecordedTurn, Recording};

/// What can go wrong here.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] acpx_model::StoreError),
    /// Driving an agent failed.
    #[error(transparent)]
    Runtime(#[from] acpx_runtime::RuntimeError),
    /// A request that cannot be carried out (the message says why).
    #[error("{0}")]
    Invalid(String),
    /// Serving ACP on stdio failed.
    #[error("serving ACP: {0}")]
    Serve(String),
}

/// A result of this crate.
pub type ReplayResult<T> = Result<T, ReplayError>;

// The README's examples are compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
