//! Test helpers: the record, event and store helpers are the SQLite store's (the two database
//! stores are tested with the same shapes), plus the PostgreSQL test server.
#![allow(dead_code)]

#[path = "../../../acpx-store-sqlite/tests/common/mod.rs"]
mod shared;

pub use shared::*;

pub mod server;
