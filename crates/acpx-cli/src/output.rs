//! Where output goes: the reply and command results on stdout, everything else on stderr.
//!
//! - `text`: human-readable; notes (thoughts, tool calls, permission decisions, client
//!   operations) on stderr, coloured when stderr is a terminal and `NO_COLOR` is not set.
//! - `json`: exactly one JSON value per line on stdout; nothing else on stdout.
//! - `quiet`: only the final reply text (or the essential result of a command) on stdout.

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

    pub fn is_json(&self) -> bool {
        self.format == Format::Json
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
        let mut v = std::borrow::Cow::Borrowed(v);
        if v.get("action").is_some() {
            let pending =
                std::mem::take(&mut *self.pending.lock().unwrap_or_else(|p| p.into_inner()));
            if let (false, Some(o)) = (pending.is_empty(), v.to_mut().as_object_mut()) {
                o.extend(pending);
            }
        }
        let mut line = serde_json::to_string(&*v).unwrap_or_default();
        line.push('\n');
        write_stdout(line.as_bytes());
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
            eprintln!("{s}");
        }
    }

    /// A warning on stderr in every format except quiet (JSON consumers read stdout only).
    pub fn warn(&self, s: &str) {
        if self.format != Format::Quiet {
            eprintln!("{} {s}", self.paint_err(Style::Yellow, "warning:"));
        }
    }

    /// A note shown with `--verbose`.
    pub fn verbose(&self, s: &str) {
        if self.verbose {
            eprintln!("{} {s}", self.paint_err(Style::Dim, "[acpx]"));
        }
    }

    /// Reports an error: a JSON error line on stdout in JSON format, text on stderr otherwise.
    pub fn error(&self, e: &CliError) {
        if self.is_json() {
            self.json(&e.to_json());
        } else {
            eprintln!(
                "{} {}",
                self.paint_err(Style::Red, "acpx: error:"),
                e.message
            );
            if let Some(h) = &e.hint {
                eprintln!("  {} {h}", self.paint_err(Style::Dim, "hint:"));
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

/// Writes to stdout and flushes. A closed pipe (`acpx … | head`) ends the process quietly
/// instead of panicking like `print!` would.
fn write_stdout(bytes: &[u8]) {
    let mut out = std::io::stdout().lock();
    if out.write_all(bytes).and_then(|_| out.flush()).is_err() {
        std::process::exit(0);
    }
}
