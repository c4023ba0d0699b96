//! Live output of a turn, fed by the runtime's event observer, and the terminal permission
//! prompt. What is shown is `acpx_runtime::live`'s ([`LiveRenderer`]); this module writes its
//! pieces to stdout and stderr, in colour where the terminal has it.
//!
//! - `text`: the agent's reply streams to stdout as it arrives; thoughts, tool calls, plans,
//!   mode changes, client operations and permission decisions go to stderr as short lines.
//! - `json`: every recorded event envelope, one per line, exactly as in the log, up to and
//!   including the turn's `prompt_done` / `prompt_error`.
//! - `quiet`: nothing while streaming (the caller prints the final text).

use std::io::{BufRead, IsTerminal};
use std::sync::{Arc, Mutex};

use acpx_model::EventEnvelope;
use acpx_runtime::live::{LiveFormat, LiveRenderer, Piece, Span, Tone};
use acpx_runtime::{Observer, PermissionPrompter, PermissionQuestion};

use crate::config::Format;
use crate::output::{stderr_line, stderr_text, Out, Style};

/// Renders recorded events as they arrive.
#[derive(Debug, Clone)]
pub struct LiveOutput {
    out: Out,
    renderer: Arc<Mutex<LiveRenderer>>,
}

impl LiveOutput {
    pub fn new(out: Out) -> Self {
        let format = match out.format {
            Format::Text => LiveFormat::Text,
            Format::Json => LiveFormat::Json,
            Format::Quiet => LiveFormat::Quiet,
        };
        let renderer = LiveRenderer::new(format, out.verbose);
        LiveOutput {
            out,
            renderer: Arc::new(Mutex::new(renderer)),
        }
    }

    /// The observer to give the runtime.
    pub fn observer(&self) -> Observer {
        let me = self.clone();
        Arc::new(move |e: &EventEnvelope| me.on_event(e))
    }

    /// Ends the reply line on stdout if it is open (text format).
    pub fn finish(&self) {
        let piece = self.lock().finish();
        if let Some(piece) = piece {
            self.write(&piece);
        }
    }

    /// Whether the turn's terminal event was printed.
    pub fn saw_end(&self) -> bool {
        self.lock().saw_end()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LiveRenderer> {
        self.renderer.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Renders one recorded event (as the observer does).
    pub fn on_event(&self, e: &EventEnvelope) {
        // Held while writing, so the pieces of two events never interleave.
        let mut renderer = self.lock();
        for piece in renderer.render(e) {
            self.write(&piece);
        }
    }

    fn paint(&self, spans: &[Span]) -> String {
        spans
            .iter()
            .map(|s| {
                let style = match s.tone {
                    Tone::Plain => return s.text.clone(),
                    Tone::Dim => Style::Dim,
                    Tone::Red => Style::Red,
                    Tone::Green => Style::Green,
                    Tone::Yellow => Style::Yellow,
                    Tone::Blue => Style::Blue,
                    Tone::Magenta => Style::Magenta,
                    Tone::Cyan => Style::Cyan,
                };
                self.out.paint_err(style, &s.text)
            })
            .collect()
    }

    fn write(&self, piece: &Piece) {
        match piece {
            Piece::Out(s) => self.out.raw(s),
            Piece::ErrLine(spans) => stderr_line(&self.paint(spans)),
            Piece::ErrText(spans) => stderr_text(&self.paint(spans)),
        }
    }
}

/// Asks on the terminal under `--approve-reads`: `[permission] Allow <title> [<kind>]? (y/N)`.
/// The answer is read from `/dev/tty`, so a prompt piped on stdin does not interfere.
#[derive(Debug)]
pub struct TtyPrompter;

impl TtyPrompter {
    /// A prompter when stderr is a terminal and `/dev/tty` can be opened; otherwise none (and
    /// the runtime denies what it would have asked).
    pub fn available() -> Option<Arc<dyn PermissionPrompter>> {
        if !std::io::stderr().is_terminal() {
            return None;
        }
        std::fs::File::open("/dev/tty").ok()?;
        Some(Arc::new(TtyPrompter))
    }
}

#[async_trait::async_trait]
impl PermissionPrompter for TtyPrompter {
    async fn ask(&self, q: &PermissionQuestion) -> bool {
        let title = q.title.clone();
        let kind = q
            .kind
            .clone()
            .map(|k| format!(" [{k}]"))
            .unwrap_or_default();
        tokio::task::spawn_blocking(move || {
            stderr_text(&format!("\n[permission] Allow {title}{kind}? (y/N) "));
            let Ok(tty) = std::fs::File::open("/dev/tty") else {
                return false;
            };
            let mut line = String::new();
            if std::io::BufReader::new(tty).read_line(&mut line).is_err() {
                return false;
            }
            matches!(line.trim().to_ascii_lowercase().as_str(), "y" | "yes")
        })
        .await
        .unwrap_or(false)
    }
}
