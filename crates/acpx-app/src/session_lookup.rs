//! A session that cannot be found, as the user is told it: where acpx looked, and how to
//! create one or reach a closed one of that name. The directory walk of a scope and id
//! resolution are [`acpx_runtime::ops::lookup`]'s.

use std::path::Path;

use acpx_model::{ClosedFilter, ListQuery, SessionSummary, Store};

use acpx_runtime::ops::lookup::walk_dirs;

use crate::agents::AgentChoice;
use crate::problem::{ErrorKind, Problem};

/// The "no session" error, saying where acpx looked and how to create one.
pub fn no_session_error(agent: &AgentChoice, cwd: &Path, name: Option<&str>) -> Problem {
    let agent_label = agent.label();
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
    Problem::new(
        ErrorKind::NoSession,
        format!(
            "No acpx session{named} found for agent {} in {} (searched up to {top}).",
            agent.display(),
            cwd.display()
        ),
    )
    .with_hint(format!(
        "create one with `{create}` (or `sessions ensure`), then prompt again"
    ))
}

/// The most recently used closed session of this agent named `name` in one of the scope's
/// directories: a named session is found by its name only while it is open, so when a
/// lookup by name fails, this is what the user most likely meant. `None` when there is none
/// or the store cannot say.
pub async fn closed_named(
    store: &dyn Store,
    agent_command: &str,
    cwd: &Path,
    name: &str,
) -> Option<SessionSummary> {
    let dirs: Vec<String> = walk_dirs(cwd)
        .iter()
        .map(|d| d.to_string_lossy().into_owned())
        .collect();
    let query = ListQuery {
        name: Some(name.to_owned()),
        agent_command: Some(agent_command.to_owned()),
        closed: ClosedFilter::Closed,
        ..ListQuery::default()
    };
    let page = store.list(&query).await.ok()?;
    page.sessions.into_iter().find(|s| {
        dirs.iter()
            .any(|d| d == s.cwd.trim_end_matches('/') || *d == s.cwd)
    })
}

/// [`no_session_error`], pointing at a closed session of that name when there is one.
pub async fn no_session_error_named(
    store: &dyn Store,
    agent: &AgentChoice,
    cwd: &Path,
    name: Option<&str>,
) -> Problem {
    let command = &agent.command;
    let label = agent.label();
    let err = no_session_error(agent, cwd, name);
    let Some(n) = name else {
        return err;
    };
    match closed_named(store, command, cwd, n).await {
        Some(s) => {
            let id = s.acpx_record_id;
            err.with_hint(format!(
                "a closed session is named {n:?}: {id}; closed sessions are found by id (`acpx \
                 sessions show {id}`), and `acpx {label} sessions new --name {}` starts a new one",
                shell_words::quote(n)
            ))
        }
        None => err,
    }
}
