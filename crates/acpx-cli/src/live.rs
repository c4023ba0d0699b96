//! Live output of a turn and the terminal permission prompt. What is shown, and how it is fed
//! (the runtime's event observer, a queue owner's stream, the raw frames in `--format acp`),
//! is `acpx_printer::live_output`'s ([`LiveOutput`]); this module gives it stdout and stderr,
//! in colour where the terminal has it, and the spinner (`crate::output::spinner`) as its
//! activity line.

use std::io::{BufRead, IsTerminal};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use acpx_printer::live::{LiveFormat, Tone};
pub use acpx_printer::live_output::LiveOutput;
use acpx_printer::live_output::LiveTerminal;
use acpx_runtime::{
    ElicitationQuestion, ElicitationReply, PermissionAnswer, PermissionPrompter, PermissionQuestion,
};

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

/// Asks on the terminal under `--approve-reads` (the question and the meaning of its answer
/// are `acpx_printer::ask`'s). The answer is read from `/dev/tty`, so a prompt piped on stdin
/// does not interfere.
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
        self.answer(q).await.approved
    }

    async fn answer(&self, q: &PermissionQuestion) -> PermissionAnswer {
        let question = acpx_printer::ask::permission_question(q);
        // No spinner over the question while it waits for its answer.
        crate::output::spinner::pause(true);
        let answer = tokio::task::spawn_blocking(move || {
            stderr_text(&question);
            let Ok(tty) = std::fs::File::open("/dev/tty") else {
                return PermissionAnswer::once(false);
            };
            let mut line = String::new();
            if std::io::BufReader::new(tty).read_line(&mut line).is_err() {
                return PermissionAnswer::once(false);
            }
            acpx_printer::ask::permission_answer(&line)
        })
        .await
        .unwrap_or(PermissionAnswer::once(false));
        crate::output::spinner::pause(false);
        answer
    }

    async fn elicit(&self, q: &ElicitationQuestion) -> Option<ElicitationReply> {
        /// Stops the dialog, and brings the spinner back, when the answer is no longer
        /// needed (this future dropped) or given. A stopped dialog is given a moment to say
        /// so before what ended it is shown.
        struct Done(Arc<AtomicBool>, std::sync::mpsc::Receiver<()>);
        impl Drop for Done {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
                let _ = self.1.recv_timeout(std::time::Duration::from_millis(500));
                crate::output::spinner::pause(false);
            }
        }
        let stop = Arc::new(AtomicBool::new(false));
        let (ended, ended_rx) = std::sync::mpsc::channel();
        let _done = Done(stop.clone(), ended_rx);
        crate::output::spinner::pause(true);
        let q = q.clone();
        tokio::task::spawn_blocking(move || {
            let reply = crate::elicit_tty::ask(&q, &stop);
            let _ = ended.send(());
            reply
        })
        .await
        .ok()
        .flatten()
    }
}
