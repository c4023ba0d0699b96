//! The integration tests of `acpx-lock`, one binary (rust-analyzer's `tests/it` shape): the
//! workspace is linked once per crate, not once per test file. Each module is one former
//! test file; run one with `cargo test -p acpx-lock --test it <module>::`.

mod cross_process;
