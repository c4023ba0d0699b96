//! Live output of a turn and the terminal permission prompt. What is shown, and how it is fed
//! (the runtime's event observer, a queue owner's stream, the raw frames in `--format acp`),
//! is `acpx_printer::live_output`'s ([`LiveOutput`]), and what is asked and how it is read
//! `acpx_printer::ask`'s; this module gives them stdout and stderr, in colour where the
//! terminal has it, and the spinner (`crate::output::spinner`) as their activity line.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use acpx_printer::ask::{TtyHooks, TtyPrompter};
use acpx_printer::live::{LiveFormat, Tone};
pub use acpx_printer::live_output::LiveOutput;
use acpx_printer::live_output::LiveTerminal;
use acpx_runtime::{ElicitationQuestion, ElicitationReply, PermissionPrompter};

use crate::config::Format;
use crate::output::{stderr_line, stderr_text, Out, Style};

/// The live output of a turn printed in `out`'s format (and spinners allowed when `out` and
/// the terminal allow them).
pub fn live_output(out: &Out) -> LiveOutput {
    let format = match out.format {
        Format::Text => LiveFormat::Text,
        Format::Json => LiveFormat::Json,
        Format::Quiet => LiveFormat::Quiet,
        Format::Acp => LiveFormat::Acp,
    };
    crate::output::spinner::enable(out);
    LiveOutput::new(format, out.verbose, Arc::new(Terminal(out.clone())))
}

/// This process's stdout and stderr, and its spinner.
#[derive(Debug)]
struct Terminal(Out);

impl LiveTerminal for Terminal {
    fn out(&self, text: &str) {
        self.0.raw(text);
    }

    fn err_line(&self, text: &str) {
        stderr_line(text);
    }

    fn err_text(&self, text: &str) {
        stderr_text(text);
    }

    fn paint_err(&self, tone: Tone, text: &str) -> String {
        match style_of(tone) {
            Some(style) => self.0.paint_err(style, text),
            None => text.to_owned(),
        }
    }

    fn show_activity(&self, what: &str) {
        crate::output::spinner::show(what, crate::output::stdout_mid_line());
    }

    fn hide_activity(&self) {
        crate::output::spinner::hide();
    }
}

/// The terminal style of a printer's tone (none: plain).
pub fn style_of(tone: Tone) -> Option<Style> {
    Some(match tone {
        Tone::Plain => return None,
        Tone::Bold => Style::Bold,
        Tone::Dim => Style::Dim,
        Tone::Red => Style::Red,
        Tone::Green => Style::Green,
        Tone::Yellow => Style::Yellow,
        Tone::Blue => Style::Blue,
        Tone::Magenta => Style::Magenta,
        Tone::Cyan => Style::Cyan,
    })
}

/// The terminal prompter of `--approve-reads` (`acpx_printer::ask::TtyPrompter`), when
/// stderr is a terminal and `/dev/tty` opens.
pub fn tty_prompter() -> Option<Arc<dyn PermissionPrompter>> {
    TtyPrompter::available(Arc::new(TtyAsk))
}

/// How this process asks on its terminal: the question on stderr, the spinner paused while
/// it waits, elicitations as `acpx_app::terminal_elicitation`'s dialogs.
#[derive(Debug)]
struct TtyAsk;

impl TtyHooks for TtyAsk {
    fn write_question(&self, text: &str) {
        stderr_text(text);
    }

    fn pause_activity(&self, paused: bool) {
        crate::output::spinner::pause(paused);
    }

    fn elicit(&self, q: &ElicitationQuestion, stop: &AtomicBool) -> Option<ElicitationReply> {
        acpx_app::terminal_elicitation::ask(q, stop, crate::output::stderr_bytes)
    }
}
