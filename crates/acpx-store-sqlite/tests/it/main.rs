//! The integration tests of `acpx-store-sqlite`, one binary (rust-analyzer's `tests/it` shape): the
//! workspace is linked once per crate, not once per test file. Each module is one former
//! test file; run one with `cargo test -p acpx-store-sqlite --test it <module>::`.

mod buffered;
mod common;
mod crash;
mod create_sessions;
mod docs_queries;
mod locks;
mod migrate;
mod mirror;
mod search;
mod search_parts;
mod spilled_reply;
mod store;
mod streamed_save;
mod support;
mod wal_reclaim;
