//! Finding a session: the directory walk of a scope and id resolution are
//! [`acpx_runtime::ops::lookup`]'s, the error the user sees when nothing is found
//! [`acpx_app::session_lookup`]'s.

use std::path::Path;

use acpx_app::agents::AgentChoice;
use acpx_app::session_lookup;
use acpx_model::Store;

pub use acpx_runtime::ops::lookup::{
    find_in_scope, load_in_scope, resolve_id_or_name, resolve_summary_id_or_name,
};

use crate::error::CliError;

/// The "no session" error ([`session_lookup::no_session_error`]).
pub fn no_session_error(agent: &AgentChoice, cwd: &Path, name: Option<&str>) -> CliError {
    session_lookup::no_session_error(agent, cwd, name).into()
}

/// The "no session" error pointing at a closed session of that name when there is one
/// ([`session_lookup::no_session_error_named`]).
pub async fn no_session_error_named(
    store: &dyn Store,
    agent: &AgentChoice,
    cwd: &Path,
    name: Option<&str>,
) -> CliError {
    session_lookup::no_session_error_named(store, agent, cwd, name)
        .await
        .into()
}
