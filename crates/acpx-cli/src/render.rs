//! Turning records, summaries and events into JSON objects (their shapes are
//! `acpx_runtime::record_json`'s, their readable text `acpx_runtime::transcript`'s).

/// The JSON shapes of records and summaries are `acpx_runtime::record_json`'s.
pub use acpx_runtime::record_json::{action, record_show_json};
/// The readable text of records and events is `acpx_runtime::transcript`'s.
pub use acpx_runtime::transcript::{clip, event_line};
