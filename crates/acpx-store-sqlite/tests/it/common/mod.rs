//! Test helpers: the record, event and store helpers shared with the PostgreSQL store's tests
//! (`acpx-test-support`).

pub use acpx_test_support::records::*;
