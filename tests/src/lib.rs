//! Conformance suites.
