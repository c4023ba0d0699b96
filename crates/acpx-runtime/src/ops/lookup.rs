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
//! unique suffix of either. Several matches are [`OpsError::AmbiguousId`]. A word a user
//! types for a session ([`resolve_id_or_name`]) is also tried as a session name in scope,
//! after the exact ids and before the suffix: a short name (`a`) is very often also the
//! suffix of some random record id, and must not designate that other session. When nothing
//! readable matches, the suffix of a damaged session's record id is an error naming it.

use std::path::{Path, PathBuf};

use acpx_model::{
    ClosedFilter, ListPage, ListQuery, RecordId, SessionRecord, SessionSummary, SkippedEntry,
    Store, StoreError,
};

use super::repair::scope_from_log;
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
///
/// A store whose `list` reads every session anyway ([`Store::lists_by_scanning`], the file
/// store) is listed once for the whole walk instead of once per directory, and each
/// directory's list is cut from that one by [`ListQuery::paginate`], the very filter the
/// store's own `list` applies: the same answer for a tenth of the work or less.
pub async fn find_in_scope(
    store: &dyn Store,
    agent_command: &str,
    cwd: &Path,
    name: Option<&str>,
) -> OpsResult<Option<SessionSummary>> {
    let scope = Scope::new(agent_command, cwd, name);
    if store.lists_by_scanning() {
        let page = store.list(&scope.query(None)).await?;
        return scope.pick(store, page).await;
    }
    let mut skipped = Vec::new();
    for dir in &scope.dirs {
        let page = store.list(&scope.query(Some(dir))).await?;
        skipped.extend(page.skipped);
        if let Some(found) = scope.first_candidate(page.sessions) {
            return Ok(Some(found));
        }
    }
    scope.damaged_error(store, skipped).await
}

/// What a scope lookup looks for: the agent command, the directories of the walk (nearest
/// first) and the name.
struct Scope<'a> {
    agent_command: &'a str,
    dirs: Vec<PathBuf>,
    name: Option<&'a str>,
}

impl<'a> Scope<'a> {
    fn new(agent_command: &'a str, cwd: &Path, name: Option<&'a str>) -> Self {
        Scope {
            agent_command,
            dirs: walk_dirs(cwd),
            name,
        }
    }

    /// The open sessions of this agent and name in `dir` (every directory when `None`).
    fn query(&self, dir: Option<&Path>) -> ListQuery {
        ListQuery {
            cwd: dir.map(|d| d.to_string_lossy().into_owned()),
            agent_command: Some(self.agent_command.to_owned()),
            name: self.name.map(str::to_owned),
            closed: ClosedFilter::Open,
            limit: None,
            cursor: None,
        }
    }

    /// The first of a directory's list (newest first) that is a candidate: an absent name
    /// matches only unnamed sessions.
    fn first_candidate(
        &self,
        sessions: impl IntoIterator<Item = SessionSummary>,
    ) -> Option<SessionSummary> {
        sessions
            .into_iter()
            .find(|s| self.name.is_some() || s.name.is_none())
    }

    /// The scope's session from `page`, a list of any sessions at all that holds every
    /// session of the scope (in any directory): each directory of the walk in turn gets what
    /// its own `list` would have returned, by the same [`ListQuery::paginate`].
    async fn pick(&self, store: &dyn Store, page: ListPage) -> OpsResult<Option<SessionSummary>> {
        // Only the scope's open sessions are carried through the walk, however many the
        // page holds.
        let scoped = self.query(None).paginate(page.sessions, Vec::new())?;
        for dir in &self.dirs {
            let here = self
                .query(Some(dir))
                .paginate(scoped.sessions.iter().cloned(), Vec::new())?;
            if let Some(found) = self.first_candidate(here.sessions) {
                return Ok(Some(found));
            }
        }
        self.damaged_error(store, page.skipped).await
    }

    /// None readable: a session of this scope whose snapshot is damaged but whose log says
    /// it belongs here is reported as damaged, not as absent (`docs/format.md` § Damaged
    /// snapshots). `skipped` is what the lists skipped.
    async fn damaged_error(
        &self,
        store: &dyn Store,
        skipped: Vec<SkippedEntry>,
    ) -> OpsResult<Option<SessionSummary>> {
        let mut damaged: Vec<(RecordId, String)> = Vec::new();
        for entry in skipped {
            if let Some(id) = entry.acpx_record_id {
                if !damaged.iter().any(|(d, _)| *d == id) {
                    damaged.push((id, format!("{}: {}", entry.location, entry.reason)));
                }
            }
        }
        for (id, why) in damaged {
            // The log's identity only: a rebuild would hold the whole conversation.
            let Ok(r) = scope_from_log(store, &id).await else {
                continue;
            };
            let in_scope = r.agent_command == self.agent_command
                && self.dirs.iter().any(|d| d.to_string_lossy() == r.cwd)
                && r.name.as_deref() == self.name
                && !r.closed;
            if in_scope {
                return Err(StoreError::Corrupt {
                    location: why,
                    line: None,
                    reason: format!(
                        "session {id} of this agent and directory has a damaged snapshot; its \
                         event log is intact: run `acpx fsck --repair` to rebuild the snapshot \
                         from it"
                    ),
                }
                .into());
            }
        }
        Ok(None)
    }
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

/// What a lookup gives for the session it found: the record, loaded
/// ([`resolve_id_or_name`]), or only its summary ([`resolve_summary_id_or_name`], for a
/// command that needs the id and not the conversation: reading a long session to find its
/// id cost `sessions events` 30–110 ms on an 11 MB session).
pub(crate) trait Found: Sized {
    /// Reads it for `id`; [`StoreError::NotFound`] when there is no such session.
    fn fetch(
        store: &dyn Store,
        id: &RecordId,
    ) -> impl std::future::Future<Output = Result<Self, StoreError>> + Send;

    /// It for a session a list gave as `listed` (the summary in hand is all a summary needs).
    fn from_listed(
        store: &dyn Store,
        listed: &SessionSummary,
    ) -> impl std::future::Future<Output = Result<Self, StoreError>> + Send;
}

impl Found for SessionRecord {
    async fn fetch(store: &dyn Store, id: &RecordId) -> Result<Self, StoreError> {
        store.load(id).await
    }

    async fn from_listed(store: &dyn Store, listed: &SessionSummary) -> Result<Self, StoreError> {
        store.load(&listed.acpx_record_id).await
    }
}

impl Found for SessionSummary {
    /// The store's summary; for a session whose summary a store refuses while its record
    /// loads (SQLite or PostgreSQL columns that disagree with the document), the loaded
    /// record's, so that a command finds every session that `load` finds.
    async fn fetch(store: &dyn Store, id: &RecordId) -> Result<Self, StoreError> {
        match store.summary(id).await {
            Err(StoreError::Corrupt { .. }) => store.load(id).await.map(|r| r.summary()),
            other => other,
        }
    }

    async fn from_listed(_: &dyn Store, listed: &SessionSummary) -> Result<Self, StoreError> {
        Ok(listed.clone())
    }
}

/// The session `id` of `listed` (which holds it: a match found among them), as `T`.
async fn from_list<T: Found>(
    store: &dyn Store,
    listed: &[SessionSummary],
    id: &RecordId,
) -> OpsResult<T> {
    match listed.iter().find(|s| s.acpx_record_id == *id) {
        Some(s) => Ok(T::from_listed(store, s).await?),
        None => Ok(T::fetch(store, id).await?),
    }
}

/// What a user's `SESSION` word designates: the exact record id, the exact ACP session id,
/// the open session of this agent and directory scope named so ([`find_in_scope`]), else a
/// unique suffix of a record id or ACP id (see the module docs for why the name comes before
/// the suffix). The session found is loaded.
///
/// On a store that lists by scanning ([`Store::lists_by_scanning`]) one list of every
/// session serves every step, as it holds everything each of them would have listed.
pub async fn resolve_id_or_name(
    store: &dyn Store,
    text: &str,
    agent_command: &str,
    cwd: &Path,
) -> OpsResult<Option<SessionRecord>> {
    resolve_found(store, text, agent_command, cwd).await
}

/// [`resolve_id_or_name`], giving the session's summary instead of loading it.
pub async fn resolve_summary_id_or_name(
    store: &dyn Store,
    text: &str,
    agent_command: &str,
    cwd: &Path,
) -> OpsResult<Option<SessionSummary>> {
    resolve_found(store, text, agent_command, cwd).await
}

async fn resolve_found<T: Found>(
    store: &dyn Store,
    text: &str,
    agent_command: &str,
    cwd: &Path,
) -> OpsResult<Option<T>> {
    if let Some(r) = fetch_exact_id(store, text).await? {
        return Ok(Some(r));
    }
    if !store.lists_by_scanning() {
        let candidates = store.sessions_matching_id(text).await?;
        if let Some(id) = exact_acp_id(&candidates, text)? {
            return Ok(Some(from_list(store, &candidates, &id).await?));
        }
        if let Some(s) = find_in_scope(store, agent_command, cwd, Some(text)).await? {
            return Ok(Some(T::from_listed(store, &s).await?));
        }
        return match suffix_then_prefix(&candidates, text)? {
            Some(id) => Ok(Some(from_list(store, &candidates, &id).await?)),
            None => damaged_suffix(store, text, None).await,
        };
    }
    let page = store.list(&every_session()).await?;
    if let Some(id) = exact_acp_id(&page.sessions, text)? {
        return Ok(Some(from_list(store, &page.sessions, &id).await?));
    }
    // Decided before the scope takes the list; used only when no session has that name.
    let by_suffix = suffix_then_prefix(&page.sessions, text).map(|id| {
        id.and_then(|id| {
            page.sessions
                .iter()
                .find(|s| s.acpx_record_id == id)
                .cloned()
        })
    });
    let skipped = page.skipped.clone();
    let scope = Scope::new(agent_command, cwd, Some(text));
    if let Some(s) = scope.pick(store, page).await? {
        return Ok(Some(T::from_listed(store, &s).await?));
    }
    match by_suffix? {
        Some(s) => Ok(Some(T::from_listed(store, &s).await?)),
        None => damaged_suffix(store, text, Some(skipped)).await,
    }
}

/// The query of every stored session (open and closed), in list order.
fn every_session() -> ListQuery {
    ListQuery {
        closed: ClosedFilter::Any,
        ..ListQuery::default()
    }
}

/// Every stored session (open and closed), in list order.
pub async fn all_sessions(store: &dyn Store) -> OpsResult<Vec<SessionSummary>> {
    Ok(store.list(&every_session()).await?.sessions)
}

/// Resolves a typed id: the exact record id, the exact ACP session id, then a unique suffix
/// of either, then a unique prefix of either. `Ok(None)` when nothing matches; several matches are
/// [`OpsError::AmbiguousId`].
pub async fn resolve_id(store: &dyn Store, text: &str) -> OpsResult<Option<SessionRecord>> {
    if let Some(r) = fetch_exact_id(store, text).await? {
        return Ok(Some(r));
    }
    if store.lists_by_scanning() {
        // One list serves the match and, on a miss, the damaged sessions it had to skip (a
        // second scan of 10,000 sessions would double the miss's cost).
        let page = store.list(&every_session()).await?;
        return match match_typed_id(&page.sessions, text)? {
            Some(id) => Ok(Some(store.load(&id).await?)),
            None => damaged_suffix(store, text, Some(page.skipped)).await,
        };
    }
    // Only the sessions the text could designate: a query with the suffix test on SQLite.
    let candidates = store.sessions_matching_id(text).await?;
    match match_typed_id(&candidates, text)? {
        Some(id) => Ok(Some(store.load(&id).await?)),
        None => damaged_suffix(store, text, None).await,
    }
}

/// When no readable session matches `text`: a session that `list` had to skip (damaged) and
/// whose record id ends with `text` is answered with an error naming it, its file and what
/// is wrong (`fsck` rebuilds it), not with "no session". Several such sessions are
/// [`OpsError::AmbiguousId`]. `skipped` is what a list of every session already skipped,
/// when the caller has one; otherwise one is made (on a miss only). The session is not
/// loaded: what `list` skips is never designated by a part of its id (on SQLite a row whose
/// columns disagree with its document loads, but is hidden from the list all the same).
async fn damaged_suffix<T>(
    store: &dyn Store,
    text: &str,
    skipped: Option<Vec<SkippedEntry>>,
) -> OpsResult<Option<T>> {
    if text.is_empty() {
        return Ok(None);
    }
    let skipped = match skipped {
        Some(s) => s,
        None => store.list(&every_session()).await?.skipped,
    };
    let mut hits: Vec<(RecordId, SkippedEntry)> = Vec::new();
    for entry in skipped {
        if let Some(id) = entry.acpx_record_id.clone() {
            let matches = id.as_str().ends_with(text) || id.as_str().starts_with(text);
            if matches && !hits.iter().any(|(d, _)| *d == id) {
                hits.push((id, entry));
            }
        }
    }
    match hits.as_slice() {
        [] => Ok(None),
        [(id, entry)] => Err(StoreError::Corrupt {
            location: entry.location.clone(),
            line: None,
            reason: format!(
                "{} ({text:?} matches no readable session; it is the end or the beginning of \
                 the id of session {id}, which cannot be read)",
                entry.reason
            ),
        }
        .into()),
        _ => Err(OpsError::AmbiguousId {
            text: text.to_owned(),
            matches: hits.into_iter().map(|(id, _)| id).collect(),
        }),
    }
}

/// The session whose record id is exactly `text`, if any.
async fn fetch_exact_id<T: Found>(store: &dyn Store, text: &str) -> OpsResult<Option<T>> {
    if let Ok(id) = RecordId::parse(text) {
        match T::fetch(store, &id).await {
            Ok(r) => return Ok(Some(r)),
            Err(StoreError::NotFound(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(None)
}

/// Among `all` (every stored session, or at least every one [`id_text_matches`] accepts),
/// the one `text` designates when it is not an exact record id: the exact ACP session id,
/// else a unique suffix of a record id or ACP id, else a unique prefix of one.
///
/// [`id_text_matches`]: acpx_model::id_text_matches
fn match_typed_id(all: &[SessionSummary], text: &str) -> OpsResult<Option<RecordId>> {
    match exact_acp_id(all, text)? {
        Some(id) => Ok(Some(id)),
        None => suffix_then_prefix(all, text),
    }
}

/// A unique suffix of a record id or ACP id among `all`, else a unique prefix of one: the
/// beginning people copy (`8e1a7338` of a record id) works as well as its end.
fn suffix_then_prefix(all: &[SessionSummary], text: &str) -> OpsResult<Option<RecordId>> {
    match unique_suffix(all, text)? {
        Some(id) => Ok(Some(id)),
        None => unique_prefix(all, text),
    }
}

/// The session among `all` whose record id or ACP id starts with `text`, if only one does.
fn unique_prefix(all: &[SessionSummary], text: &str) -> OpsResult<Option<RecordId>> {
    one_of(
        all.iter()
            .filter(|s| {
                s.acpx_record_id.as_str().starts_with(text) || s.acp_session_id.starts_with(text)
            })
            .collect(),
        text,
    )
}

/// The session among `all` whose ACP session id is exactly `text`.
fn exact_acp_id(all: &[SessionSummary], text: &str) -> OpsResult<Option<RecordId>> {
    one_of(
        all.iter().filter(|s| s.acp_session_id == text).collect(),
        text,
    )
}

/// The session among `all` whose record id or ACP id ends with `text`, if only one does.
fn unique_suffix(all: &[SessionSummary], text: &str) -> OpsResult<Option<RecordId>> {
    one_of(
        all.iter()
            .filter(|s| {
                s.acpx_record_id.as_str().ends_with(text) || s.acp_session_id.ends_with(text)
            })
            .collect(),
        text,
    )
}

/// The one session of `candidates`, none, or [`OpsError::AmbiguousId`].
fn one_of(candidates: Vec<&SessionSummary>, text: &str) -> OpsResult<Option<RecordId>> {
    match candidates.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some(one.acpx_record_id.clone())),
        many => Err(OpsError::AmbiguousId {
            text: text.to_owned(),
            matches: many.iter().map(|s| s.acpx_record_id.clone()).collect(),
        }),
    }
}
