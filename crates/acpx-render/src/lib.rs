//! # acpx-render
//!
//! Readable forms of a recorded acpx session, built from its snapshot and its event log:
//!
//! - [`html`]: the self-contained HTML viewer of `acpx sessions export --as html` (one file, no
//!   network, every recorded string escaped);
//! - [`diff`]: line diffs as standard unified hunks (`@@ -a,b +c,d @@`), shared by the viewer
//!   and the text transcripts of `acpx-runtime`.
//!
//! The crate is pure: no I/O but the [`std::io::Write`] it is given, no async runtime. It is
//! where the other renderers of acpx (live output, transcripts, results) are meant to move
//! (issue 44).

#![warn(missing_docs)]

pub mod diff;
pub mod html;

// The README's examples are compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
