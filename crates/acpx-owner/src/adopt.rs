//! `sessions adopt`: a new record for an ACP session the agent already has, its replayed
//! history recorded (`acpx_runtime::Runtime::adopt`), made under the scope's lock as
//! `sessions new` makes one, and refused when a record holds that ACP session already or the
//! scope has an open session by that name. Also: which record holds each ACP session
//! ([`records_by_acp_id`], for `sessions list --from-agent`).

use std::path::Path;

use acpx_model::{ClosedFilter, ListQuery, RecordId, SessionRecord, Store, StoreError};
use acpx_runtime::ops::OpsError;
use acpx_runtime::session::{AdoptSpec, Adopted};
use acpx_runtime::{Runtime, RuntimeError, Session};

use crate::runs::{self, RunsError};

/// Why an adoption did not happen.
#[derive(Debug, thiserror::Error)]
pub enum AdoptError {
    /// A record holds that ACP session already.
    #[error("the ACP session {acp_session_id} already has a record: {record}")]
    AlreadyRecorded {
        /// The ACP session asked for.
        acp_session_id: String,
        /// The record that holds it.
        record: String,
    },
    /// The scope (agent, directory, name) has an open session already.
    #[error("agent {agent} already has {} in {cwd}: {record}", which(name.as_deref()))]
    ScopeTaken {
        /// The agent, as the user named it.
        agent: String,
        /// The directory.
        cwd: String,
        /// The name asked for.
        name: Option<String>,
        /// The open session.
        record: RecordId,
    },
    /// The agent did not give the session (`session/load` or `session/resume` failed).
    #[error(transparent)]
    Attach(RuntimeError),
    /// The adopted session could not be saved and its agent stopped.
    #[error(transparent)]
    Shutdown(RuntimeError),
    /// The scope's lock.
    #[error(transparent)]
    Runs(#[from] RunsError),
    /// Looking at the scope.
    #[error(transparent)]
    Ops(#[from] OpsError),
    /// Reading the store.
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn which(name: Option<&str>) -> String {
    name.map_or("an unnamed open session".to_owned(), |n| {
        format!("an open session named {n:?}")
    })
}

/// The record of each stored session by its ACP session id (any agent, open or closed), as
/// `(acp session id, record id)`.
pub async fn records_by_acp_id(store: &dyn Store) -> Result<Vec<(String, String)>, StoreError> {
    let mut out = Vec::new();
    let mut cursor = None;
    loop {
        let page = store
            .list(&ListQuery {
                closed: ClosedFilter::Any,
                cursor: cursor.clone(),
                ..ListQuery::default()
            })
            .await?;
        out.extend(page.sessions.iter().map(|s| {
            (
                s.acp_session_id.clone(),
                s.acpx_record_id.as_str().to_owned(),
            )
        }));
        match page.next_cursor {
            Some(c) if !page.sessions.is_empty() => cursor = Some(c),
            _ => return Ok(out),
        }
    }
}

/// Adopts `spec.acp_session_id` into a new record of `runtime`'s store, under the scope lock
/// of `authority` (`agent`: the agent as the user named it, for the refusals). `opened` sees
/// the session once attached (what attaching changed), before it is saved and its agent
/// stopped. Returns the saved record and how the adoption went.
pub async fn adopt(
    runtime: &Runtime,
    authority: &Path,
    agent: &str,
    spec: AdoptSpec,
    opened: impl FnOnce(&Session),
) -> Result<(SessionRecord, Adopted), AdoptError> {
    let store = runtime.store();
    let cwd = spec.cwd.to_string_lossy().into_owned();
    let name = spec.name.as_deref();
    // As `sessions new` does: one creation at a time in a scope.
    let _scope_lock = runs::lock_scope(authority, &spec.agent_command, &cwd, name).await?;
    if let Some((_, record)) = records_by_acp_id(&**store)
        .await?
        .into_iter()
        .find(|(acp, _)| *acp == spec.acp_session_id)
    {
        return Err(AdoptError::AlreadyRecorded {
            acp_session_id: spec.acp_session_id,
            record,
        });
    }
    let open =
        acpx_runtime::ops::scope::open_in_exact_scope(&**store, &spec.agent_command, &cwd, name)
            .await?;
    if let Some(other) = open.first() {
        return Err(AdoptError::ScopeTaken {
            agent: agent.to_owned(),
            cwd,
            name: spec.name,
            record: other.acpx_record_id.clone(),
        });
    }
    let (session, adopted) = runtime.adopt(spec).await.map_err(AdoptError::Attach)?;
    opened(&session);
    let record = session.shutdown().await.map_err(AdoptError::Shutdown)?;
    Ok((record, adopted))
}
