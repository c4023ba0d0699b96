//! Session operations below any user interface: what a program that depends on this crate
//! needs to find, fork, follow, prune, check and repair, export and import sessions, and to
//! bring in sessions of the Node acpx. The `acpx` binary only parses arguments, renders
//! these results and maps [`OpsError`] to exit codes.
//!
//! Every operation that writes a record goes through the same paths as live sessions: new
//! events through the [`crate::Recorder`] (so seqs, `acpx.event_log` and the snapshot come
//! from one place, and the reducer [`crate::mapping::apply_event`] folds them in), whole
//! sessions from elsewhere (imports) through a stage ([`acpx_model::Store::stage_session`]:
//! written where no reader sees them, committed in one step).
//!
//! | module | job |
//! |---|---|
//! | [`fork`] | record-level fork: a new record that starts from a parent's conversation and state |
//! | [`repair`] | `fsck`: the checks of every stored session, and their repair, as a typed report |
//! | [`import_files`] | the files of `sessions import` (an archive, or a `session.json` and its log) opened for reading as they are stored |
//! | [`transfer`] | export archives, reading them back, storing an imported session |
//! | [`node_import`] | converting a Node acpx 0.19 home (records and journals) into sessions |
//! | [`scope`] | sessions of a scope (agent, directory, name): create, attach an existing ACP session |
//! | [`lookup`] | finding a session: the directory walk of a scope, resolving a typed id |
//! | [`log_pages`] | a log read a page at a time for a command that prints it (`sessions events`) |
//! | [`watch`] | following a session's log as it grows (`sessions events --follow`) |
//! | [`prune`] | choosing closed sessions past a cutoff and deleting them, keeping their logs |
//! | [`usage`] | `sessions usage`: the agents' reports of tokens and cost, summed over sessions from their summaries |

pub mod fork;
pub mod import_files;
pub mod import_trust;
pub mod log_pages;
pub mod lookup;
pub mod node_import;
pub mod otlp_live;
pub mod prune;
pub mod repair;
pub mod scope;
pub mod transfer;
pub mod usage;
pub mod watch;

use std::path::PathBuf;

use acpx_model::{RecordId, StoreError};

use crate::error::RuntimeError;

/// Errors of the session operations.
#[derive(Debug, thiserror::Error)]
pub enum OpsError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The runtime (an agent process, a recording) failed.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// The input is not what the operation needs (a malformed archive, a log with gaps, a
    /// directory that cannot be read); the message says what and where.
    #[error("{0}")]
    Invalid(String),
    /// A file the operation needed could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file the operation writes could not be written.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A directory the operation writes into could not be created.
    #[error("cannot create {}: {source}", path.display())]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A typed id matches several sessions ([`lookup::resolve_id`]).
    #[error("{text:?} matches {} sessions: {}", matches.len(), join_ids(matches))]
    AmbiguousId {
        /// What was typed.
        text: String,
        /// The record ids of the sessions it matches.
        matches: Vec<RecordId>,
    },
}

fn join_ids(ids: &[RecordId]) -> String {
    ids.iter()
        .map(RecordId::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The result of a session operation.
pub type OpsResult<T> = Result<T, OpsError>;
