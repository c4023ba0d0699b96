//! Reading sessions for a migration a group at a time: the sources (under their writer
//! locks) and the copies read back to verify them, [`READ_GROUP`] sessions per
//! [`Store::load_many_with_events`] call.

use futures::StreamExt;
use sha2::{Digest, Sha256};

use super::{
    differs, hash_events, page_query, snapshot_digest, verify_side, Read, Side, SourceSession,
};
use crate::{EventPage, NewSessionData, RecordId, SessionRecord, Store, StoreError, StoreResult};

/// Sessions read (or read back to verify) per [`Store::load_many_with_events`] call: one
/// hand-off to the store's blocking thread for many small sessions instead of one each. A
/// group holds at most this many first pages of [`EVENT_PAGE`](super::EVENT_PAGE) events
/// and [`crate::PAGE_BYTES`] of lines each (plus the event that crosses it); a session whose
/// log is longer is copied alone, a page at a time ([`Read::Large`]).
pub(super) const READ_GROUP: usize = 16;
/// Groups read at the same time (a store that serves calls in parallel reads two at once).
/// With the group being taken apart, at most three groups of first pages are in memory
/// besides the batches: 48 pages, each of at most about 1 MiB of lines, which take about
/// twice that parsed (the bound is for a home of large events; small sessions' pages are
/// far smaller).
pub(super) const GROUPS_AT_ONCE: usize = 2;

/// Reads the sessions `ids` of `from` with their figures, in order (the caller holds their
/// writer locks), [`READ_GROUP`] per call. A read that fails ends the stream with its error.
pub(super) fn read_sources<'a>(
    from: &'a dyn Store,
    ids: &'a [RecordId],
) -> impl futures::Stream<Item = StoreResult<Read>> + 'a {
    futures::stream::iter(ids.chunks(READ_GROUP))
        .map(move |group| async move {
            match read_group(from, group).await {
                Ok(read) => group
                    .iter()
                    .zip(read)
                    .map(|(id, (record, page))| source_read(id, record, page))
                    .collect(),
                Err(e) => vec![Err(e)],
            }
        })
        .buffered(GROUPS_AT_ONCE)
        .flat_map(futures::stream::iter)
}

/// [`Store::load_many_with_events`] of `ids`, first pages, refusing an answer that does not
/// hold one read per id (results are matched to ids by position).
async fn read_group(
    store: &dyn Store,
    ids: &[RecordId],
) -> StoreResult<Vec<(SessionRecord, EventPage)>> {
    let read = store.load_many_with_events(ids, &page_query(1)).await?;
    if read.len() != ids.len() {
        return Err(StoreError::Backend {
            backend: store.backend_name(),
            message: format!(
                "load_many_with_events returned {} sessions for {} ids",
                read.len(),
                ids.len()
            ),
        });
    }
    Ok(read)
}

/// What the first page of session `id` makes of it: the whole session with its figures, or
/// (a log longer than one page) a session to copy alone.
fn source_read(id: &RecordId, mut record: SessionRecord, page: EventPage) -> StoreResult<Read> {
    if page.next_seq.is_some() {
        return Ok(Read::Large(id.clone()));
    }
    let last_seq = page.events.last().map_or(page.last_seq, |e| e.seq);
    let side = page_side(&mut record, &page, last_seq)?;
    Ok(Read::Small(Box::new(SourceSession {
        side,
        data: NewSessionData {
            record,
            events: page.events,
        },
    })))
}

/// The figures of a session whose whole retained log is `page`, with `last_seq` as its last.
fn page_side(record: &mut SessionRecord, page: &EventPage, last_seq: u64) -> StoreResult<Side> {
    let mut hasher = Sha256::new();
    hash_events(&mut hasher, &page.events);
    Ok(Side {
        events: page.events.len() as u64,
        first_seq: page.events.first().map_or(0, |e| e.seq),
        last_seq,
        events_digest: hasher.finalize().into(),
        snapshot_digest: snapshot_digest(record)?,
    })
}

/// Reads the copies of `ids` back from `to` ([`READ_GROUP`] per call) and compares each with
/// its source figures in `sources`.
pub(super) async fn verify_group(
    from: &dyn Store,
    to: &dyn Store,
    ids: &[RecordId],
    sources: &[Side],
) -> StoreResult<()> {
    let read = read_group(to, ids).await?;
    for ((id, source), (mut record, page)) in ids.iter().zip(sources).zip(read) {
        let target = match page.next_seq {
            // The copy's log reads back longer than one page: walk it whole.
            Some(_) => verify_side(to, id).await?,
            None => page_side(&mut record, &page, page.last_seq)?,
        };
        if let Some(what) = source.difference(&target) {
            return Err(differs(from, to, id, &what));
        }
    }
    Ok(())
}
