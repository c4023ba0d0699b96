//! Turning records, summaries and events into JSON objects (their shapes are
//! `acpx_runtime::record_json`'s, their readable text `acpx_printer::transcript`'s).

/// The readable text of records and events is `acpx_printer::transcript`'s.
pub use acpx_printer::transcript::event_line;
/// The JSON shapes of records and summaries are `acpx_runtime::record_json`'s.
pub use acpx_runtime::record_json::{action, record_show_json};
