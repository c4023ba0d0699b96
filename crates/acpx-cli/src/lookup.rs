//! Finding a session: by scope (agent command, directory, name) with a directory walk, or by
//! an id the user typed.
//!
//! Scope lookup (Node acpx §10): the directories from the working directory up to the git root
//! are tried nearest first; in each, the open sessions of exactly this agent command and name
//! (no name matches only unnamed sessions) are candidates and the newest `lastUsedAt` wins. The
//! nearest directory with a candidate wins over a newer session further up.
//!
//! Id resolution: the exact record id, then the exact ACP session id, then a unique suffix of
//! either. Several matches are an error that lists them.

use std::path::Path;

use acpx_model::{
    ClosedFilter, ListQuery, RecordId, SessionRecord, SessionSummary, Store, StoreError,
};

use crate::config::walk_dirs;
use crate::error::{CliError, CliResult};

/// The open session of `(agent_command, name)` nearest to `cwd`, walking up to the git root.
pub async fn find_in_scope(
    store: &dyn Store,
    agent_command: &str,
    cwd: &Path,
    name: Option<&str>,
) -> CliResult<Option<SessionSummary>> {
    for dir in walk_dirs(cwd) {
        let query = ListQuery {
            cwd: Some(dir.to_string_lossy().into_owned()),
            agent_command: Some(agent_command.to_owned()),
            name: name.map(str::to_owned),
            closed: ClosedFilter::Open,
            limit: None,
            cursor: None,
        };
        let page = store.list(&query).await?;
        // `list` is newest first; an absent name matches only unnamed sessions.
        if let Some(found) = page
            .sessions
            .into_iter()
            .find(|s| name.is_some() || s.name.is_none())
        {
            return Ok(Some(found));
        }
    }
    Ok(None)
}

/// Every stored session (open and closed), in list order.
pub async fn all_sessions(store: &dyn Store) -> CliResult<Vec<SessionSummary>> {
    let page = store
        .list(&ListQuery {
            closed: ClosedFilter::Any,
            ..ListQuery::default()
        })
        .await?;
    Ok(page.sessions)
}

/// Resolves a typed id: exact record id, exact ACP session id, then a unique suffix of either.
/// `Ok(None)` when nothing matches.
pub async fn resolve_id(store: &dyn Store, text: &str) -> CliResult<Option<SessionRecord>> {
    if let Ok(id) = RecordId::parse(text) {
        match store.load(&id).await {
            Ok(r) => return Ok(Some(r)),
            Err(StoreError::NotFound(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let all = all_sessions(store).await?;
    let exact_acp: Vec<&SessionSummary> = all.iter().filter(|s| s.acp_session_id == text).collect();
    let candidates = if exact_acp.is_empty() {
        all.iter()
            .filter(|s| {
                s.acpx_record_id.as_str().ends_with(text) || s.acp_session_id.ends_with(text)
            })
            .collect()
    } else {
        exact_acp
    };
    match candidates.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some(store.load(&one.acpx_record_id).await?)),
        many => Err(CliError::usage(format!(
            "{text:?} matches {} sessions: {}",
            many.len(),
            many.iter()
                .map(|s| s.acpx_record_id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))
        .with_hint("type more of the id, or the full record id")
        .with_detail("AMBIGUOUS_ID")),
    }
}

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
