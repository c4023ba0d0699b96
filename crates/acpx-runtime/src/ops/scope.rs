//! Sessions of a scope: an agent command, a working directory and an optional name.
//!
//! `acpx sessions new` closes the other open sessions of its exact scope after creating the
//! new one ([`open_in_exact_scope`], [`close_with_retry`]); `--resume-session` attaches a new
//! record to an ACP session the agent already has ([`create_resume_record`], then the caller
//! opens it with [`crate::Runtime::open_existing`] and keeps it only if the agent reattached).

use std::time::Duration;

use acpx_model::{
    ClosedFilter, ListQuery, NewSession, RecordId, SessionRecord, Store, StoreError, Timestamp,
};

use super::{OpsError, OpsResult};
use crate::error::RuntimeError;
use crate::session::Runtime;

/// How often [`close_with_retry`] tries, and how long it waits in between.
const CLOSE_ATTEMPTS: u32 = 10;
const CLOSE_RETRY_WAIT: Duration = Duration::from_millis(200);

/// The open sessions of exactly this scope (no directory walk): same agent command, same
/// directory, and the same name (without a name: the unnamed sessions only).
pub async fn open_in_exact_scope(
    store: &dyn Store,
    agent_command: &str,
    cwd: &str,
    name: Option<&str>,
) -> OpsResult<Vec<SessionRecord>> {
    let page = store
        .list(&ListQuery {
            cwd: Some(cwd.to_owned()),
            agent_command: Some(agent_command.to_owned()),
            name: name.map(str::to_owned),
            closed: ClosedFilter::Open,
            ..ListQuery::default()
        })
        .await?;
    // Nobody else reports these here: a damaged open session of the scope is neither closed
    // nor replaced, and comes back beside the new one once repaired. (The file store cannot
    // tell a damaged session's scope, and hands back every one it skipped.)
    for s in &page.skipped {
        tracing::warn!(location = %s.location, reason = %s.reason, "a stored session cannot be read, and may belong to this scope (run `acpx fsck`)");
    }
    let mut out = Vec::new();
    for s in page
        .sessions
        .into_iter()
        .filter(|s| name.is_some() || s.name.is_none())
    {
        out.push(store.load(&s.acpx_record_id).await?);
    }
    Ok(out)
}

/// Closes a session that no queue owner holds ([`Runtime::close_stored`]: `session_closed`
/// recorded, the record marked closed), retrying for a while when another process holds or
/// changes it at the same time (a prompt that was just cancelled is still saving its end;
/// each attempt waits for the writer lock up to the runtime's lock timeout).
pub async fn close_with_retry(runtime: &Runtime, id: &RecordId) -> OpsResult<SessionRecord> {
    let mut attempts = 0;
    loop {
        match runtime.close_stored(id).await {
            Ok(c) => return Ok(c),
            Err(RuntimeError::Store(StoreError::Conflict { .. })) if attempts < CLOSE_ATTEMPTS => {
                attempts += 1;
                tokio::time::sleep(CLOSE_RETRY_WAIT).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Creates a new record for the ACP session `acp_session_id` that the agent already has. The
/// record id is that id when it is a valid record id and free (as Node acpx does), else a
/// fresh one. The record is not attached yet: open it with [`crate::Runtime::open_existing`],
/// and delete it again if the agent did not reattach. An empty id is [`OpsError::Invalid`].
pub async fn create_resume_record(
    store: &dyn Store,
    acp_session_id: &str,
    agent_command: &str,
    cwd: &str,
    name: Option<&str>,
) -> OpsResult<SessionRecord> {
    if acp_session_id.trim().is_empty() {
        return Err(OpsError::Invalid(
            "the ACP session id to resume is empty".into(),
        ));
    }
    let mut record = SessionRecord::new(
        NewSession {
            acpx_record_id: RecordId::from_untrusted_or_generate(acp_session_id),
            acp_session_id: acp_session_id.to_owned(),
            agent_session_id: None,
            agent_command: agent_command.to_owned(),
            cwd: cwd.to_owned(),
            name: name.map(str::to_owned),
        },
        Timestamp::now(),
    );
    if let Err(StoreError::AlreadyExists(_)) = store.create(&mut record).await {
        record.acpx_record_id = RecordId::generate();
        store.create(&mut record).await?;
    }
    Ok(record)
}
