//! The integration tests of `acpx-store-postgres`, one binary (rust-analyzer's `tests/it` shape): the
//! workspace is linked once per crate, not once per test file. Each module is one former
//! test file; run one with `cargo test -p acpx-store-postgres --test it <module>::`.

mod common;
mod faults;
mod mirror;
mod retained;
mod usage_column;
