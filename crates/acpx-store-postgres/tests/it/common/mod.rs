//! Test helpers: the record, event and store helpers shared with the SQLite store's tests
//! (the two database stores are tested with the same shapes, from `acpx-test-support`), plus
//! the PostgreSQL test server.
#![allow(dead_code)]

pub use acpx_test_support::records::*;

pub mod server;
