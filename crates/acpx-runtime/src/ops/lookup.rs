//! Finding a session: by scope (agent command, directory, name) with a directory walk, or by
//! an id a user typed. These are the rules of Node acpx 0.19, so both find the same session
//! in the same store layout.
//!
//! Scope lookup ([`find_in_scope`]): the directories from the working directory up to the git
//! root ([`walk_dirs`]) are tried nearest first; in each, the open sessions of exactly this
//! agent command and name (no name matches only unnamed sessions) are candidates and the
//! newest `lastUsedAt` wins. The nearest directory with a candidate wins over a newer session
//! further up. When none is readable, a session of the scope whose snapshot is damaged (its
//! log says it belongs here) is an error naming it, not "no session".
//!
//! Id resolution ([`resolve_id`]): the exact record id, then the exact ACP session id, then a
//! unique suffix of either. Several matches are [`OpsError::AmbiguousId`].

use std::path::{Path, PathBuf};

use acpx_model::{
    ClosedFilter, ListQuery, RecordId, SessionRecord, SessionSummary, Store, StoreError,
};

use super::repair::rebuild_from_log;
use super::{OpsError, OpsResult};

/// The nearest ancestor of `dir` (itself included) that holds a `.git` directory or file.
pub fn git_root(dir: &Path) -> Option<PathBuf> {
    dir.ancestors()
        .find(|d| d.join(".git").exists())
        .map(Path::to_path_buf)
}

/// The directories a scope lookup walks: `dir`, then its parents up to the git root
/// (inclusive); only `dir` when there is no git root.
pub fn walk_dirs(dir: &Path) -> Vec<PathBuf> {
    match git_root(dir) {
        Some(root) => dir
            .ancestors()
            .take_while(|d| d.starts_with(&root))
            .map(Path::to_path_buf)
            .collect(),
        None => vec![dir.to_path_buf()],
    }
}

/// The open session of `(agent_command, name)` nearest to `cwd`, walking up to the git root
/// (see the module docs). `Ok(None)` when there is none.
pub async fn find_in_scope(
    store: &dyn Store,
    agent_command: &str,
    cwd: &Path,
    name: Option<&str>,
) -> OpsResult<Option<SessionSummary>> {
    let dirs = walk_dirs(cwd);
    let mut damaged: Vec<(RecordId, String)> = Vec::new();
    for dir in &dirs {
        let query = ListQuery {
            cwd: Some(dir.to_string_lossy().into_owned()),
            agent_command: Some(agent_command.to_owned()),
            name: name.map(str::to_owned),
            closed: ClosedFilter::Open,
            limit: None,
            cursor: None,
        };
        let page = store.list(&query).await?;
        for skipped in page.skipped {
            if let Some(id) = skipped.acpx_record_id {
                if !damaged.iter().any(|(d, _)| *d == id) {
                    damaged.push((id, format!("{}: {}", skipped.location, skipped.reason)));
                }
            }
        }
        // `list` is newest first; an absent name matches only unnamed sessions.
        if let Some(found) = page
            .sessions
            .into_iter()
            .find(|s| name.is_some() || s.name.is_none())
        {
            return Ok(Some(found));
        }
    }
    // None readable: a session of this scope whose snapshot is damaged but whose log says
    // it belongs here is reported as damaged, not as absent (`docs/format.md` § Damaged
    // snapshots).
    for (id, why) in damaged {
        let Ok(r) = rebuild_from_log(store, &id).await else {
            continue;
        };
        let in_scope = r.agent_command == agent_command
            && dirs.iter().any(|d| d.to_string_lossy() == r.cwd)
            && r.name.as_deref() == name
            && !r.closed;
        if in_scope {
            return Err(StoreError::Corrupt {
                location: why,
                line: None,
                reason: format!(
                    "session {id} of this agent and directory has a damaged snapshot; its event \
                     log is intact: run `acpx fsck --repair` to rebuild the snapshot from it"
                ),
            }
            .into());
        }
    }
    Ok(None)
}

/// Like [`find_in_scope`], but loads the session found.
pub async fn load_in_scope(
    store: &dyn Store,
    agent_command: &str,
    cwd: &Path,
    name: Option<&str>,
) -> OpsResult<Option<SessionRecord>> {
    match find_in_scope(store, agent_command, cwd, name).await? {
        Some(s) => Ok(Some(store.load(&s.acpx_record_id).await?)),
        None => Ok(None),
    }
}

/// What a user's `SESSION` word designates: a typed id ([`resolve_id`]), failing that the
/// open session of this agent and directory scope named so ([`load_in_scope`]).
pub async fn resolve_id_or_name(
    store: &dyn Store,
    text: &str,
    agent_command: &str,
    cwd: &Path,
) -> OpsResult<Option<SessionRecord>> {
    if let Some(r) = resolve_id(store, text).await? {
        return Ok(Some(r));
    }
    load_in_scope(store, agent_command, cwd, Some(text)).await
}

/// Every stored session (open and closed), in list order.
pub async fn all_sessions(store: &dyn Store) -> OpsResult<Vec<SessionSummary>> {
    let page = store
        .list(&ListQuery {
            closed: ClosedFilter::Any,
            ..ListQuery::default()
        })
        .await?;
    Ok(page.sessions)
}

/// Resolves a typed id: the exact record id, the exact ACP session id, then a unique suffix
/// of either. `Ok(None)` when nothing matches; several matches are
/// [`OpsError::AmbiguousId`].
pub async fn resolve_id(store: &dyn Store, text: &str) -> OpsResult<Option<SessionRecord>> {
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
        many => Err(OpsError::AmbiguousId {
            text: text.to_owned(),
            matches: many.iter().map(|s| s.acpx_record_id.clone()).collect(),
        }),
    }
}
