//! Finding a session: the directory walk of a scope and id resolution are
//! [`acpx_runtime::ops::lookup`]'s; this adds the error the user sees when nothing is found.

use std::path::Path;

pub use acpx_runtime::ops::lookup::{find_in_scope, load_in_scope, resolve_id_or_name, walk_dirs};

use crate::error::CliError;

/// The "no session" error, saying where acpx looked and how to create one.
pub fn no_session_error(agent_label: &str, cwd: &Path, name: Option<&str>) -> CliError {
    let dirs = walk_dirs(cwd);
    let top = dirs
        .last()
        .map(|d| d.display().to_string())
        .unwrap_or_default();
    let named = name.map(|n| format!(" named {n:?}")).unwrap_or_default();
    let create = match name {
        Some(n) => format!(
            "acpx {agent_label} sessions new --name {}",
            shell_words::quote(n)
        ),
        None => format!("acpx {agent_label} sessions new"),
    };
    CliError::no_session(format!(
        "No acpx session{named} found for agent {agent_label} in {} (searched up to {top}).",
        cwd.display()
    ))
    .with_hint(format!(
        "create one with `{create}` (or `sessions ensure`), then prompt again"
    ))
}
