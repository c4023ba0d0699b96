//! The integration tests of `acpx-store-fs`, one binary (rust-analyzer's `tests/it` shape): the
//! workspace is linked once per crate, not once per test file. Each module is one former
//! test file; run one with `cargo test -p acpx-store-fs --test it <module>::`.

mod append_failure;
mod common;
mod compressed;
mod create_sessions;
mod events;
mod events_damaged;
mod failpoints;
mod filtered_list;
mod fuzz_segments;
mod locking;
mod snapshots;
mod turn_end_rotation;
mod writers;
