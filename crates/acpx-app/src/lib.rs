//! # acpx-app
//!
//! What the `acpx` program needs around the session engine, and a library user driving
//! sessions from their own program usually does not: the config files a person writes,
//! the registry of agent names, the settings of one invocation and what to say when they
//! are wrong, the diagnostics on stderr, and the process-wide allocator settings. Kept out of
//! `acpx-runtime` so the engine reads no file of the user's and sets nothing process-wide.
//!
//! | module | job |
//! |---|---|
//! | [`config_file`] | the global and project config files, read and checked (unknown keys named, with a suggestion) |
//! | [`agents`] | the agent registry: built-in names → command lines, plus the config file's own |
//! | [`paths`] | the acpx home and the working directory, each resolved to one path whatever its spelling |
//! | [`allocator`] | the allocation settings of a program that records long turns (the only `unsafe` here) |
//! | [`settings`] | one invocation's settings: flags over environment over config over defaults, with their sources |
//! | [`problem`] | a failure as the user is told it: kind (exit code), message, what to do |
//! | [`session_lookup`] | a session that cannot be found, with where acpx looked and what to do |
//! | [`store_open`] | opening the store of `--store`, each failure with its remedy |
//! | [`diagnostics`] | the `tracing` subscriber that prints the runtime's and the stores' diagnostics on stderr |
//! | [`terminal_elicitation`] | an agent's elicitation (a form, a URL) asked of a person at the terminal |
//!
//! ```no_run
//! let agents = acpx_app::agents::AgentRegistry::new(&Default::default());
//! println!("codex runs as {:?}", agents.command("codex"));
//! ```

#![warn(missing_docs)]

pub mod agents;
pub mod allocator;
pub mod config_file;
pub mod diagnostics;
pub mod paths;
pub mod problem;
pub mod session_lookup;
pub mod settings;
pub mod store_open;
pub mod terminal_elicitation;

/// The README's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExamples;
