//! Runtime and store diagnostics (`tracing` events) on stderr.
//!
//! The runtime and the store backends report what the user cannot see otherwise through
//! `tracing`: a failed event-log append or snapshot save, a damaged log line that a read
//! skipped, a lock file left behind. This module installs the subscriber that prints them.
//!
//! - Without `RUST_LOG` and without `-v`: warnings and errors of the acpx crates (targets
//!   starting with `acpx`), as `LEVEL message key=value…` lines; errors only in the `quiet`
//!   format, which promises silence unless something went wrong.
//! - `-v`/`--verbose`: debug events of the acpx crates too (including the agent's own stderr,
//!   target `acpx::agent_stderr`), with their target.
//! - `RUST_LOG` (when set and not empty) replaces these defaults entirely, with the usual
//!   `EnvFilter` syntax (`RUST_LOG=acpx_store_fs=debug`); invalid directives are ignored.
//!
//! The front end hands [`install`] its way of writing to stderr, so a diagnostic shares the
//! terminal with its other output (a spinner cleared first, `--json-strict` silence).
//!
//! Diagnostics go to stderr only: stdout carries the reply or, with `--format json`, JSON
//! lines and nothing else. A closed or broken stderr silences them rather than failing the
//! command.

use std::io::{self, IsTerminal, Write};

use tracing_subscriber::filter::{EnvFilter, LevelFilter};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::util::SubscriberInitExt;

use crate::config_file::OutputFormat as Format;

/// The filter when `RUST_LOG` is not set: acpx's own targets only (`acpx` matches every
/// target that starts with it: `acpx_runtime`, `acpx_store_fs`, `acpx::agent_stderr`, …).
fn default_directives(format: Format, verbose: bool) -> &'static str {
    match (verbose, format) {
        (true, _) => "acpx=debug",
        (false, Format::Quiet) => "acpx=error",
        (false, _) => "acpx=warn",
    }
}

/// Installs the stderr subscriber for this process, writing with `write_stderr` (which must
/// not fail or panic). Called once, after the command line is parsed (the level depends on
/// `-v` and on the output format).
pub fn install(format: Format, verbose: bool, write_stderr: fn(&[u8])) {
    let rust_log = std::env::var("RUST_LOG")
        .ok()
        .filter(|v| !v.trim().is_empty());
    let directives = rust_log
        .as_deref()
        .unwrap_or_else(|| default_directives(format, verbose));
    let filter = EnvFilter::builder()
        .with_default_directive(LevelFilter::OFF.into())
        .parse_lossy(directives);
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(QuietStderr(write_stderr))
        .with_ansi(!no_color && io::stderr().is_terminal())
        .without_time()
        // The target (the crate and module) helps when debugging, and is noise otherwise.
        .with_target(verbose || rust_log.is_some())
        // A failed write would otherwise be reported with `eprintln!`, which panics on EPIPE.
        .log_internal_errors(false)
        .finish();
    // Fails only when a subscriber is already set, and then that one stays in charge.
    let _ = subscriber.try_init();
}

/// Makes [`StderrIgnoringErrors`] writers for the subscriber, writing with its function.
struct QuietStderr(fn(&[u8]));

impl<'a> MakeWriter<'a> for QuietStderr {
    type Writer = StderrIgnoringErrors;

    fn make_writer(&'a self) -> Self::Writer {
        StderrIgnoringErrors(self.0)
    }
}

/// Stderr, where a failed write (a closed pipe, a full disk behind a redirect) counts as
/// written: a diagnostic that cannot be shown must not end or disturb the command.
struct StderrIgnoringErrors(fn(&[u8]));

impl Write for StderrIgnoringErrors {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        (self.0)(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        let _ = io::stderr().flush();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_verbose_and_format() {
        assert_eq!(default_directives(Format::Text, false), "acpx=warn");
        assert_eq!(default_directives(Format::Json, false), "acpx=warn");
        assert_eq!(default_directives(Format::Quiet, false), "acpx=error");
        assert_eq!(default_directives(Format::Quiet, true), "acpx=debug");
    }

    #[test]
    fn writes_never_fail() {
        let mut w = StderrIgnoringErrors(|_| {});
        assert_eq!(w.write(b"").ok(), Some(0));
        assert!(w.flush().is_ok());
    }
}
