//! The rule every append batch keeps, in every backend and in a stage: its events belong to
//! the session and continue its log's seqs exactly.

use crate::error::{StoreError, StoreResult};
use crate::event::EventEnvelope;
use crate::id::RecordId;

/// Checks an append batch against the log's last seq and the session id. Shared by every
/// backend so that they refuse exactly the same batches.
pub fn check_append_batch(
    id: &RecordId,
    last_seq: u64,
    events: &[EventEnvelope],
) -> StoreResult<()> {
    for (i, e) in events.iter().enumerate() {
        if e.acpx_record_id != *id {
            return Err(StoreError::InvalidArgument(format!(
                "event seq {} belongs to session {}, not {id}",
                e.seq, e.acpx_record_id
            )));
        }
        // Checked: a log ending at u64::MAX (or a hostile seq) must be refused, not overflow.
        let previous = last_seq.checked_add(i as u64);
        let expected = previous.and_then(|p| p.checked_add(1));
        if expected != Some(e.seq) {
            return Err(StoreError::SeqMismatch {
                id: id.clone(),
                last: previous.unwrap_or(u64::MAX),
                got: e.seq,
            });
        }
    }
    Ok(())
}
