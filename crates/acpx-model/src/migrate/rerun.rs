//! A migration run again: what the target already holds of a source session, decided under
//! the source's writer lock before anything is written.

use sha2::{Digest, Sha256};

use super::{
    hash_events, page_query, verify_side, verify_side_and_record, SessionCopy, SOURCE_LOCK_WAIT,
};
use crate::{RecordId, Store, StoreError, StoreResult};

/// What the target holds of a source session.
pub(super) enum Held {
    /// An identical, finished copy: kept.
    Copied(SessionCopy),
    /// An unfinished copy: to be removed ([`remove_unfinished`]) and copied again.
    Unfinished(RecordId),
}

/// Compares the target's session `id` with the source's (under the source's writer lock, so a
/// live writer cannot change it meanwhile). A finished identical copy is kept. An unfinished
/// one — its last save missing (its snapshot still at revision 1, or its recorded log state
/// short of the source's last seq: every way of copying ends with a save that records the
/// whole log), its snapshot equal to the source's, and its log the source's first events — is what a
/// migration stopped half-way leaves (a kill between `create` and the last save): it holds
/// nothing the source does not, and is to be removed and copied again. Anything else is
/// refused with [`StoreError::AlreadyExistsDiffering`]. The target's writer lock is held too:
/// a writer still at work on the copy (another migration) makes this wait, then fail.
pub(super) async fn held(from: &dyn Store, to: &dyn Store, id: &RecordId) -> StoreResult<Held> {
    let _lock = from.lock(id, SOURCE_LOCK_WAIT).await?;
    let _target_lock = to.lock(id, SOURCE_LOCK_WAIT).await?;
    let source = verify_side(from, id).await?;
    let unreadable = |e: StoreError| StoreError::AlreadyExistsDiffering {
        id: id.clone(),
        what: format!("the copy cannot be read back ({e})"),
    };
    let (target, record) = match verify_side_and_record(to, id).await {
        Ok(read) => read,
        Err(e @ (StoreError::Corrupt { .. } | StoreError::Invalid(_))) => {
            return Err(unreadable(e))
        }
        Err(e) => return Err(e),
    };
    let difference = source.difference(&target);
    if record.revision >= 2 && difference.is_none() {
        return Ok(Held::Copied(source.copy_of(id.clone())));
    }
    // The copy's last save never ran: a snapshot still at revision 1 (`create`, then the
    // appends), or, for a log retention trimmed (created through `create_sessions` with its
    // first event, which saves revision 2, then appended to), one whose recorded log state
    // stops before the source's last seq (the last save records the whole log).
    let last_save_missing =
        record.revision <= 1 || record.acpx.event_log.last_seq < source.last_seq;
    let prefix = last_save_missing
        && target.snapshot_digest == source.snapshot_digest
        && target.events <= source.events
        && (target.events == 0 || target.first_seq == source.first_seq)
        && prefix_digest(from, id, source.first_seq, target.events).await? == target.events_digest;
    if prefix {
        return Ok(Held::Unfinished(id.clone()));
    }
    Err(StoreError::AlreadyExistsDiffering {
        id: id.clone(),
        what: match difference {
            Some(what) => format!("{what} differs"),
            None => "the copy's snapshot revision (1: a copy whose last save never ran)".into(),
        },
    })
}

/// Removes the unfinished copies [`held`] found, once every session the target holds passed
/// its check (a refusal leaves the target untouched). Each is checked again under both
/// writer locks first: what changed since is refused, not removed.
pub(super) async fn remove_unfinished(
    from: &dyn Store,
    to: &dyn Store,
    ids: &[RecordId],
) -> StoreResult<()> {
    for id in ids {
        match held(from, to, id).await? {
            Held::Unfinished(_) => {
                to.delete(id).await?;
            }
            Held::Copied(_) => {
                return Err(StoreError::AlreadyExistsDiffering {
                    id: id.clone(),
                    what: "the copy, finished by another writer while this run checked it".into(),
                })
            }
        }
    }
    Ok(())
}

/// SHA-256 of the first `count` events of `store`'s log of `id`, from `first_seq` on, as
/// [`verify_side`] computes it over a whole log.
async fn prefix_digest(
    store: &dyn Store,
    id: &RecordId,
    first_seq: u64,
    count: u64,
) -> StoreResult<[u8; 32]> {
    let mut hasher = Sha256::new();
    let mut left = count;
    let mut query = page_query(first_seq.max(1));
    while left > 0 {
        let page = store.read_events(id, &query).await?;
        let take = page
            .events
            .len()
            .min(usize::try_from(left).unwrap_or(usize::MAX));
        hash_events(&mut hasher, &page.events[..take]);
        left -= take as u64;
        match page.next_seq {
            Some(next) if left > 0 => query.from_seq = next,
            _ => break,
        }
    }
    Ok(hasher.finalize().into())
}
