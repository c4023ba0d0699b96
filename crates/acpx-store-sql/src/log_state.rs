//! A session's `event_logs` row and the [`EventLogState`] a store reports for it, and the
//! errors of failed appends that it reports until the next append succeeds.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use acpx_model::{EventLogState, RecordId, StoreError, StoreResult, Timestamp};

/// A session's key and the columns of its `event_logs` row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRow {
    /// `session_key`.
    pub key: i64,
    /// `last_seq`.
    pub last_seq: i64,
    /// `retained_bytes`.
    pub retained: i64,
    /// `last_write_at`, as text.
    pub last_write_at: Option<String>,
}

/// The segment budget of a store's logs: a database keeps no segment files, and reports its
/// retained bytes in units of `max_segment_bytes`, how many file segments the same events
/// would fill (docs/format.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogShape {
    /// The size of one (virtual) segment.
    pub max_segment_bytes: u64,
    /// Segments kept.
    pub max_segments: u32,
}

impl LogShape {
    /// The state of a log at `active_path` holding `retained` bytes of events, without its seq
    /// and write time.
    pub fn state_of(&self, active_path: String, retained: i64) -> EventLogState {
        let max = self.max_segment_bytes;
        let retained = u64::try_from(retained).unwrap_or(0);
        EventLogState {
            format_version: 1,
            active_path,
            segment_count: u32::try_from(retained.div_ceil(max))
                .unwrap_or(u32::MAX)
                .min(self.max_segments),
            max_segment_bytes: max,
            max_segments: self.max_segments,
            last_seq: 0,
            last_write_at: None,
            last_write_error: None,
        }
    }

    /// The state of session `id`'s log `log`, at `active_path` in the database at `db`;
    /// a `last_write_at` that is no timestamp is a corrupt row.
    pub fn state(
        &self,
        id: &RecordId,
        log: LogRow,
        last_write_error: Option<String>,
        active_path: String,
        db: &str,
    ) -> StoreResult<EventLogState> {
        Ok(EventLogState {
            last_seq: u64::try_from(log.last_seq).unwrap_or(0),
            last_write_at: log
                .last_write_at
                .map(|t| {
                    Timestamp::parse(&t).map_err(|e| {
                        StoreError::corrupt(
                            format!("{db} event_logs row {:?}", id.as_str()),
                            None,
                            format!("column `last_write_at`: {e}"),
                        )
                    })
                })
                .transpose()?,
            last_write_error,
            ..self.state_of(active_path, log.retained)
        })
    }
}

/// The error of the last append per session, while that session's last append through a store
/// (or a clone) failed; reported as `last_write_error` (docs/format.md § Write ordering: never
/// silent). Only failing sessions have an entry.
#[derive(Debug, Default)]
pub struct WriteErrors(Mutex<HashMap<RecordId, String>>);

impl WriteErrors {
    fn map(&self) -> MutexGuard<'_, HashMap<RecordId, String>> {
        // The map stays consistent even if a holder panicked.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The error of `id`'s last append, if it failed.
    pub fn get(&self, id: &RecordId) -> Option<String> {
        self.map().get(id).cloned()
    }

    /// Records the outcome of an append of `id`: its error, or `None` when it succeeded.
    pub fn note(&self, id: &RecordId, error: Option<String>) {
        let mut errors = self.map();
        match error {
            Some(e) => {
                errors.insert(id.clone(), e);
            }
            None => {
                // Most appends succeed: look before cloning the id.
                if !errors.is_empty() {
                    errors.remove(id);
                }
            }
        }
    }

    /// Forgets `id` (a session deleted).
    pub fn forget(&self, id: &RecordId) {
        self.map().remove(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retained_bytes_count_as_segments_up_to_the_budget() {
        let shape = LogShape {
            max_segment_bytes: 100,
            max_segments: 3,
        };
        assert_eq!(shape.state_of("p".into(), 0).segment_count, 0);
        assert_eq!(shape.state_of("p".into(), 101).segment_count, 2);
        assert_eq!(shape.state_of("p".into(), 10_000).segment_count, 3);
        let id = RecordId::parse("s").unwrap();
        let row = |t: &str| LogRow {
            key: 1,
            last_seq: 4,
            retained: 50,
            last_write_at: Some(t.into()),
        };
        let state = shape
            .state(&id, row("2026-02-27T12:00:00.000Z"), None, "p".into(), "db")
            .unwrap();
        assert_eq!((state.last_seq, state.segment_count), (4, 1));
        let err = shape
            .state(&id, row("later"), None, "p".into(), "db")
            .unwrap_err();
        assert!(err.to_string().contains("last_write_at"), "{err}");
    }

    #[test]
    fn a_write_error_lasts_until_the_next_append_succeeds() {
        let errors = WriteErrors::default();
        let id = RecordId::parse("s").unwrap();
        errors.note(&id, Some("disk full".into()));
        assert_eq!(errors.get(&id).as_deref(), Some("disk full"));
        errors.note(&id, None);
        assert_eq!(errors.get(&id), None);
    }
}
