//! The conformance suite against `MemoryStore`. Checks that need raw bytes, files or a second
//! process are reported as ignored, with what the backend lacks.

acpx_tests::conformance_tests!(acpx_tests::MemoryBackend::new());
