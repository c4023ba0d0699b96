//! The conformance suite against `FsStore`, plus the checks only a file store has.

use std::time::Duration;

use acpx_store_fs::FsStoreOptions;
use acpx_tests::FsBackend;

acpx_tests::conformance_tests!(FsBackend::new());

/// 4 KiB × 3 segments: a dozen events rotate the log.
fn tiny_segments() -> FsBackend {
    FsBackend::with_options(FsStoreOptions {
        max_segment_bytes: 4096,
        max_segments: 3,
        lock_timeout: Duration::from_secs(60),
    })
}

mod retention {
    acpx_tests::retention_tests!(super::tiny_segments());
}
