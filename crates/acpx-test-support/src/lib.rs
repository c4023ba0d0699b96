//! What the workspace's tests share, as a dev-dependency instead of `#[path]` includes across
//! crates: [`fuzz`], the structure-aware input mutator of every crate's fuzz targets
//! (docs/RELIABILITY.md § Fuzzing), and [`records`], the fixed records and events the
//! SQLite and PostgreSQL stores are both tested with. Not published; no library depends on it.

pub mod fuzz;
pub mod records;

// The README's example is compiled and run as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
