//! Where output goes: the reply and command results on stdout, everything else on stderr.
//!
//! - `text`: human-readable; notes (thoughts, tool calls, permission decisions, client
//!   operations) on stderr, coloured when stderr is a terminal and `NO_COLOR` is not set.
//! - `json`: exactly one JSON value per line on stdout; nothing else on stdout.
//! - `quiet`: only the final reply text (or the essential result of a command) on stdout.
//! - `acp`: a turn's raw ACP JSON-RPC frames on stdout, one per line (`crate::live`); every
//!   other command prints what `json` prints. Errors are Node acpx's synthetic lines in both.

pub mod spinner;

use std::io::{IsTerminal, Write};

use serde_json::Value;

use crate::config::Format;
use crate::error::CliError;

/// ANSI styles used on stderr.
#[derive(Debug, Clone, Copy)]
pub enum Style {
    Dim,
    Bold,
    Red,
    Green,
    Yellow,
    Blue,
    Magenta,
    Cyan,
}

impl Style {
    fn code(self) -> &'static str {
        match self {
            Style::Dim => "2",
            Style::Bold => "1",
            Style::Red => "31",
            Style::Green => "32",
            Style::Yellow => "33",
            Style::Blue => "34",
            Style::Magenta => "35",
            Style::Cyan => "36",
        }
    }
}

/// The output sink of one invocation.
#[derive(Debug, Clone)]
pub struct Out {
    pub format: Format,
    color_err: bool,
    color_out: bool,
    pub verbose: bool,
    /// Keys added to the next `{"action": …}` object printed (JSON mode): what opening the
    /// session changed, e.g. `sessionFallback`.
    pending: std::sync::Arc<std::sync::Mutex<serde_json::Map<String, Value>>>,
}

fn no_color() -> bool {
    std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty())
}

impl Out {
    pub fn new(format: Format, verbose: bool) -> Self {
        let nc = no_color();
        Out {
            format,
            color_err: !nc && std::io::stderr().is_terminal(),
            color_out: !nc && std::io::stdout().is_terminal(),
            verbose,
            pending: Default::default(),
        }
    }

    /// Whether stdout carries JSON lines only (`json` and `acp`).
    pub fn is_json(&self) -> bool {
        self.format.is_json()
    }

    /// Whether a turn prints its raw ACP frames (`acp`).
    pub fn is_acp(&self) -> bool {
        self.format == Format::Acp
    }

    pub fn is_text(&self) -> bool {
        self.format == Format::Text
    }

    /// `s` in `style` when stderr is coloured.
    pub fn paint_err(&self, style: Style, s: &str) -> String {
        paint(self.color_err, style, s)
    }

    /// `s` in `style` when stdout is coloured.
    pub fn paint_out(&self, style: Style, s: &str) -> String {
        paint(self.color_out, style, s)
    }

    /// Adds `key` to the next `{"action": …}` object [`Out::json`] prints.
    pub fn attach_to_next_action(&self, key: &str, value: Value) {
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.to_owned(), value);
    }

    /// One JSON value on its own line on stdout (an action object also gets the keys of
    /// [`Out::attach_to_next_action`]).
    pub fn json(&self, v: &Value) {
        let pending = match v {
            Value::Object(o) if o.contains_key("action") => {
                std::mem::take(&mut *self.pending.lock().unwrap_or_else(|p| p.into_inner()))
            }
            _ => serde_json::Map::new(),
        };
        // The attached keys are merged while serializing: cloning a large result (10k listed
        // sessions) to add them cost more than printing it.
        let mut line = match v {
            Value::Object(base) if !pending.is_empty() => serde_json::to_string(&MergedObject {
                base,
                extra: &pending,
            }),
            _ => serde_json::to_string(v),
        }
        .unwrap_or_default();
        line.push('\n');
        write_stdout(line.as_bytes());
    }

    /// Like [`Out::json`] for an action object that serializes itself with the attached keys
    /// (`to_json` receives them), for a result too large to build as a tree first.
    pub fn json_action(
        &self,
        to_json: impl FnOnce(&serde_json::Map<String, Value>) -> serde_json::Result<String>,
    ) {
        let pending = std::mem::take(&mut *self.pending.lock().unwrap_or_else(|p| p.into_inner()));
        let mut line = to_json(&pending).unwrap_or_default();
        line.push('\n');
        write_stdout(line.as_bytes());
    }

    /// Like [`Out::json_action`], written to stdout as `write` serializes it, 64 KiB at a
    /// time: for a result too large to hold as text (a long conversation). After a closed
    /// pipe the writes fail, which ends the serializing. Fails with `write`'s own error
    /// (the result could not be serialized; stdout holds part of it); stdout's failures
    /// are reported at exit, as for every other result.
    pub fn json_action_streamed(
        &self,
        write: impl FnOnce(&serde_json::Map<String, Value>, &mut dyn Write) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        let pending = std::mem::take(&mut *self.pending.lock().unwrap_or_else(|p| p.into_inner()));
        let mut out = std::io::BufWriter::with_capacity(64 << 10, StdoutPieces);
        let written = write(&pending, &mut out)
            .and_then(|()| out.write_all(b"\n"))
            .and_then(|()| out.flush());
        match written {
            Err(e) if stdout_failure().is_none() => Err(e),
            _ => Ok(()),
        }
    }

    /// Lines on stdout in one write (a long listing; `lines` end without their newline).
    pub fn lines<I: IntoIterator<Item = String>>(&self, lines: I) {
        let mut all = String::new();
        for l in lines {
            all.push_str(&l);
            all.push('\n');
        }
        if !all.is_empty() {
            write_stdout(all.as_bytes());
        }
    }

    /// A line on stdout (text and quiet formats).
    pub fn line(&self, s: &str) {
        let mut line = s.to_owned();
        line.push('\n');
        write_stdout(line.as_bytes());
    }

    /// Raw text on stdout, flushed at once (streamed replies).
    pub fn raw(&self, s: &str) {
        write_stdout(s.as_bytes());
    }

    /// A note on stderr, in text format only.
    pub fn note(&self, s: &str) {
        if self.is_text() {
            stderr_line(s);
        }
    }

    /// A warning on stderr in every format except quiet (JSON consumers read stdout only).
    pub fn warn(&self, s: &str) {
        if self.format != Format::Quiet {
            stderr_line(&format!(
                "{} {s}",
                self.paint_err(Style::Yellow, "warning:")
            ));
        }
    }

    /// A note shown with `--verbose`.
    pub fn verbose(&self, s: &str) {
        if self.verbose {
            stderr_line(&format!("{} {s}", self.paint_err(Style::Dim, "[acpx]")));
        }
    }

    /// Reports an error: a JSON error line on stdout in JSON format, text on stderr otherwise.
    pub fn error(&self, e: &CliError) {
        if self.is_acp() {
            self.json(&e.to_node_json());
        } else if self.is_json() {
            self.json(&e.to_json());
        } else {
            end_stdout_line();
            stderr_line(&format!(
                "{} {}",
                self.paint_err(Style::Red, "acpx: error:"),
                e.message
            ));
            if let Some(h) = &e.hint {
                stderr_line(&format!("  {} {h}", self.paint_err(Style::Dim, "hint:")));
            }
        }
    }
}

fn paint(on: bool, style: Style, s: &str) -> String {
    if on {
        format!("\x1b[{}m{s}\x1b[0m", style.code())
    } else {
        s.to_owned()
    }
}

/// What became of stdout: 0 fine, 1 closed by its reader (EPIPE), 2 failing otherwise.
static STDOUT_STATE: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);
static STDOUT_ERROR: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// How stdout failed during this invocation, if it did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StdoutFailure {
    /// The reader went away (`acpx … | head -c 10`): it wanted no more, nothing to report.
    Closed,
    /// Writing failed (`> /dev/full`): what was printed is incomplete.
    Failed(String),
}

/// Whether (and how) stdout failed; see `docs/format.md` and `acpx --help` (exit codes).
pub fn stdout_failure() -> Option<StdoutFailure> {
    use std::sync::atomic::Ordering;
    match STDOUT_STATE.load(Ordering::SeqCst) {
        0 => None,
        1 => Some(StdoutFailure::Closed),
        _ => Some(StdoutFailure::Failed(
            STDOUT_ERROR
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone()
                .unwrap_or_default(),
        )),
    }
}

/// Whether stdout's last write left a line open (a streamed reply without its newline yet).
pub fn stdout_mid_line() -> bool {
    STDOUT_MID_LINE.load(std::sync::atomic::Ordering::SeqCst)
}

/// See [`stdout_mid_line`].
static STDOUT_MID_LINE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Ends a line a streamed reply left open, so that an error after partial output starts on a
/// line of its own (`chunk 19.` then `acpx: error: …`, not both on one line).
pub fn end_stdout_line() {
    if STDOUT_MID_LINE.load(std::sync::atomic::Ordering::SeqCst) {
        write_stdout(b"\n");
    }
}

/// Writes to stdout and flushes. A closed or failing stdout is remembered and later output is
/// dropped: the turn goes on and is recorded to its end (the log is the record, stdout only a
/// view of it), and `main` picks the exit status from [`stdout_failure`]. Never panics, unlike
/// `print!`.
fn write_stdout(bytes: &[u8]) {
    use std::sync::atomic::Ordering;
    if STDOUT_STATE.load(Ordering::SeqCst) != 0 {
        return;
    }
    // The output replaces the spinner's line (crate::output::spinner).
    crate::output::spinner::hide();
    if let Some(last) = bytes.last() {
        STDOUT_MID_LINE.store(*last != b'\n', Ordering::SeqCst);
    }
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(bytes).and_then(|_| out.flush()) {
        let state = if e.kind() == std::io::ErrorKind::BrokenPipe {
            1
        } else {
            *STDOUT_ERROR.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
            2
        };
        STDOUT_STATE.store(state, Ordering::SeqCst);
    }
}

/// Stdout through [`write_stdout`] as an `io::Write`, failing once stdout failed (so that a
/// serializer stops instead of rendering the rest for nobody).
struct StdoutPieces;

impl Write for StdoutPieces {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        write_stdout(buf);
        if STDOUT_STATE.load(std::sync::atomic::Ordering::SeqCst) != 0 {
            return Err(std::io::ErrorKind::BrokenPipe.into());
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// An object printed as `base` with the keys of `extra` added, an `extra` value replacing
/// `base`'s of the same key in place (what `Map::extend` would give, without the copy).
struct MergedObject<'a> {
    base: &'a serde_json::Map<String, Value>,
    extra: &'a serde_json::Map<String, Value>,
}

impl serde::Serialize for MergedObject<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let added = self
            .extra
            .keys()
            .filter(|k| !self.base.contains_key(*k))
            .count();
        let mut m = s.serialize_map(Some(self.base.len() + added))?;
        for (k, v) in self.base {
            m.serialize_entry(k, self.extra.get(k).unwrap_or(v))?;
        }
        for (k, v) in self.extra {
            if !self.base.contains_key(k) {
                m.serialize_entry(k, v)?;
            }
        }
        m.end()
    }
}

/// Set by `--json-strict`: nothing but JSON anywhere, so stderr stays silent.
static STDERR_SILENT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// `--json-strict`: from now on nothing is written to stderr (notes, warnings, diagnostics).
pub fn silence_stderr() {
    STDERR_SILENT.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// Bytes on stderr, flushed; a closed or failing stderr loses them silently (`eprint!` would
/// panic on EPIPE, e.g. `acpx --verbose prompt hi 2>&1 | head -1`).
pub fn stderr_bytes(b: &[u8]) {
    if STDERR_SILENT.load(std::sync::atomic::Ordering::SeqCst) {
        return;
    }
    crate::output::spinner::hide();
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(b).and_then(|_| err.flush());
}

/// Text on stderr ([`stderr_bytes`]).
pub fn stderr_text(s: &str) {
    stderr_bytes(s.as_bytes());
}

/// A line on stderr that never panics ([`stderr_text`]).
pub fn stderr_line(s: &str) {
    stderr_text(&format!("{s}\n"));
}
