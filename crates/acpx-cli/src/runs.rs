//! The run registry of `--no-owner` turns is [`acpx_runtime::runs`]'s; the commands use it
//! through this module, whose errors are [`CliError`]s (see `impl From<RunsError>` in
//! [`crate::error`]).

pub use acpx_runtime::runs::{cancel_and_wait, local_turn, request_cancel, CancelOutcome, Probe};

use std::path::Path;

use acpx_model::RecordId;

use crate::error::{CliError, CliResult};

/// Whether a prompt is running in session `id` ([`acpx_runtime::runs::probe`]).
pub fn probe(home: &Path, id: &RecordId) -> CliResult<Probe> {
    acpx_runtime::runs::probe(home, id).map_err(CliError::from)
}
