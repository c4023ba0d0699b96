//! An `event_rows` row read back: its columns taken as text while the statement runs, and
//! parsed into an [`EventEnvelope`] after, without the connection.
//!
//! Parsing a page's payloads is most of a read's CPU. Done while the rows are stepped, it
//! holds the connection (one per store) that long, and every other call waits: a migration
//! writing the next batch while it verifies the last one did, as does a save of a live
//! session while a `watch` reads its log. So a strict
//! [`read_events`](crate::Inner::read_events) takes each row's text under the connection
//! ([`take_event_row`]) and parses it once the connection is released
//! ([`EventColumns::into_event`]). (A lenient read parses each row as it steps: a damaged row
//! must not fill a place of the page's events, and only parsing tells it is damaged.)

use acpx_model::{EventEnvelope, RecordId};
use acpx_store_sql::EventColumns;
use rusqlite::Row;

/// The columns `read_events` selects, in this order.
pub(crate) const EVENT_COLUMNS: &str = EventColumns::SELECT;

/// Takes the columns of a row selected with [`EVENT_COLUMNS`], as stored (parsed later by
/// [`EventColumns::into_event`]); errors name the column.
pub(crate) fn take_event_row(row: &Row<'_>) -> Result<EventColumns, String> {
    EventColumns::from_columns(
        row.get(0).map_err(|e| format!("column `seq`: {e}"))?,
        row.get(1)
            .map_err(|e| format!("column `event_version`: {e}"))?,
        |i, name| {
            row.get::<_, Option<String>>(i)
                .map_err(|e| format!("column `{name}`: {e}"))
        },
    )
}

/// Rebuilds an envelope from a row selected with [`EVENT_COLUMNS`] (both steps at once, for
/// a caller that checks rows as it steps them); errors name the column.
pub(crate) fn event_from_row(row: &Row<'_>, id: &RecordId) -> Result<EventEnvelope, String> {
    take_event_row(row)?.into_event(id)
}
