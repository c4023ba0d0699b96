//! Writing the batches of a migration and verifying them, the one overlapping the other:
//! a batch is written ([`Store::create_sessions`]) while the batch written before it is read
//! back and compared with its source ([`write_and_verify`]).

use futures::StreamExt;

use super::{
    report_cleanup_failure, verify_group, CopyReport, Side, SourceSession, GROUPS_AT_ONCE,
    READ_GROUP,
};
use crate::{ManyLocks, NewSessionData, RecordId, Store, StoreResult};

/// The last batch of a chunk, written while the next chunk is read, with the source locks of
/// its chunk (released once it is verified).
pub(super) struct WriteBehind {
    pub(super) batch: Vec<SourceSession>,
    pub(super) locks: ManyLocks,
}

/// A batch written to the target and not verified yet, with the source locks of its chunk.
pub(super) struct Unverified {
    ids: Vec<RecordId>,
    sides: Vec<Side>,
    locks: Option<ManyLocks>,
}

/// Writes `behind` while `unverified` (the batch written before it) is verified: the batch
/// now written, to be verified next. When the verification fails, the batch written meanwhile
/// is removed again too, so nothing after the failure stays.
pub(super) async fn write_and_verify(
    from: &dyn Store,
    to: &dyn Store,
    behind: Option<WriteBehind>,
    unverified: Option<Unverified>,
    report: &mut CopyReport,
    progress: &dyn crate::progress::Progress,
) -> StoreResult<Option<Unverified>> {
    let write = async {
        match behind {
            Some(w) => write_unverified(to, w.batch, Some(w.locks)).await,
            None => Ok(None),
        }
    };
    let verify = verify_batch(from, to, unverified, report, progress);
    match futures::future::join(verify, write).await {
        (Ok(()), written) => written,
        (Err(e), Ok(Some(written))) => {
            remove_batch(to, &written.ids).await;
            Err(e)
        }
        (Err(e), _) => Err(e),
    }
}

/// Writes `batch` with one [`Store::create_sessions`] call (nothing for an empty batch).
async fn write_unverified(
    to: &dyn Store,
    batch: Vec<SourceSession>,
    locks: Option<ManyLocks>,
) -> StoreResult<Option<Unverified>> {
    if batch.is_empty() {
        return Ok(None);
    }
    let (sides, data): (Vec<Side>, Vec<NewSessionData>) =
        batch.into_iter().map(|s| (s.side, s.data)).unzip();
    let ids: Vec<RecordId> = data
        .iter()
        .map(|d| d.record.acpx_record_id.clone())
        .collect();
    to.create_sessions(data).await?;
    Ok(Some(Unverified { ids, sides, locks }))
}

/// Reads every copy of `batch` back and compares it with its source; on any difference every
/// session of the batch is removed from `to` again and the error returned. Releases the
/// batch's source locks either way.
pub(super) async fn verify_batch(
    from: &dyn Store,
    to: &dyn Store,
    batch: Option<Unverified>,
    report: &mut CopyReport,
    progress: &dyn crate::progress::Progress,
) -> StoreResult<()> {
    let Some(Unverified { ids, sides, locks }) = batch else {
        return Ok(());
    };
    let mut checks = futures::stream::iter(ids.chunks(READ_GROUP).zip(sides.chunks(READ_GROUP)))
        .map(|(group, sources)| verify_group(from, to, group, sources))
        .buffered(GROUPS_AT_ONCE);
    let mut failed = None;
    while let Some(checked) = checks.next().await {
        if let Err(e) = checked {
            failed = Some(e);
            break;
        }
    }
    drop(checks);
    if let Some(e) = failed {
        remove_batch(to, &ids).await;
        return Err(e);
    }
    drop(locks);
    for (id, source) in ids.into_iter().zip(sides) {
        progress.advance(id.as_str());
        report.sessions.push(source.copy_of(id));
    }
    Ok(())
}

/// Removes the sessions `ids` from `to` after a failed copy, reporting what cannot be removed.
async fn remove_batch(to: &dyn Store, ids: &[RecordId]) {
    for id in ids {
        if let Err(cleanup) = to.delete(id).await {
            report_cleanup_failure(id, &cleanup);
        }
    }
}

/// Writes `batch` with one [`Store::create_sessions`] call and verifies it
/// ([`verify_batch`]).
pub(super) async fn write_batch(
    from: &dyn Store,
    to: &dyn Store,
    batch: Vec<SourceSession>,
    report: &mut CopyReport,
    progress: &dyn crate::progress::Progress,
) -> StoreResult<()> {
    let written = write_unverified(to, batch, None).await?;
    verify_batch(from, to, written, report, progress).await
}
