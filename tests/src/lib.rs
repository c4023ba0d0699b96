//! # acpx-tests: one conformance suite for every `Store` backend
//!
//! In the spirit of `object_store`'s `integration` module: the checks in [`conformance`] are
//! async functions that take a [`Backend`] and assert behaviour through the `Store` trait.
//! Each backend gets a test binary of a few lines under `tests/tests/` (declared with
//! `harness = false` in `Cargo.toml`) whose `main` runs the [`Suite`]; for most backends
//! [`conformance_tests!`] writes that `main`:
//!
//! ```text
//! acpx_tests::conformance_tests!(acpx_tests::MemoryBackend::new());
//! // a backend with bounded retention also runs the retention checks on a tiny budget:
//! acpx_tests::conformance_tests!(backend(), retention = tiny_budget());
//! ```
//!
//! Each check runs on a fresh backend and a fresh tokio runtime, as one libtest-compatible
//! trial (`cargo test -p acpx-tests -- <filter>` works as usual). Every backend declares its
//! [`Capabilities`] (a worker process, raw snapshot or log bytes, failpoints, …) and every
//! check what it needs; a check the backend cannot run is reported as `ignored (backend has
//! no …)`, never as passed.
//!
//! Cross-process checks run the `acpx-store-worker` binary of this package (see
//! [`worker`]); a backend opts in by returning its argv from [`Backend::worker_args`] and
//! declaring [`Capabilities::worker`].

#![warn(missing_docs)]

pub mod backend;
pub mod conformance;
pub mod fixtures;
pub mod ops;
pub mod suite;
pub mod worker;

pub use backend::{argv, Backend, Capabilities, DirBackend, FsBackend, MemoryBackend};
pub use suite::Suite;

/// Expands to the `main` of a `harness = false` test binary that runs every conformance
/// check on fresh backends made by evaluating `$make` (an expression of a type implementing
/// [`Backend`]) and, with `retention = $tiny`, the retention checks on backends made by
/// `$tiny` (configured with a small event budget, such as 4 KiB × 3 segments).
#[macro_export]
macro_rules! conformance_tests {
    ($make:expr $(, retention = $tiny:expr)? $(,)?) => {
        fn main() -> ::std::process::ExitCode {
            $crate::suite!()
                .conformance(|| $make)
                $(.retention(|| $tiny))?
                .run()
        }
    };
}

/// A [`Suite`] that knows where the `acpx-store-worker` binary is. Use it in an integration
/// test of this package, the only place Cargo tells that path (`CARGO_BIN_EXE_…`); add
/// backends and tests of your own, then `.run()` it from `main`.
#[macro_export]
macro_rules! suite {
    () => {
        $crate::Suite::new(option_env!("CARGO_BIN_EXE_acpx-store-worker"))
    };
}
