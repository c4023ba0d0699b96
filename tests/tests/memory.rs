//! The conformance suite against `MemoryStore`. Checks that need raw bytes, files or a second
//! process print "skipped: …" and return (run with `--nocapture` to see them).

acpx_tests::conformance_tests!(acpx_tests::MemoryBackend::new());
