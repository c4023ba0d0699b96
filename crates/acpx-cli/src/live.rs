//! Live output of a turn, fed by the runtime's event observer, and the terminal permission
//! prompt. What is shown is `acpx_printer::live`'s ([`LiveRenderer`]); this module writes its
//! pieces to stdout and stderr, in colour where the terminal has it.
//!
//! - `text`: the agent's reply streams to stdout as it arrives; thoughts, tool calls, plans,
//!   mode changes, client operations and permission decisions go to stderr as short lines;
//!   on a terminal, a spinner says what happens meanwhile (`crate::output::spinner`).
//! - `json`: every recorded event envelope, one per line, exactly as in the log, up to and
//!   including the turn's `prompt_done` / `prompt_error`.
//! - `quiet`: nothing while streaming (the caller prints the final text).
//! - `acp`: the raw JSON-RPC frames of the command's agent connection, one per line, as they
//!   cross ([`LiveOutput::wire_observer`] in one process, [`LiveOutput::on_frame`] from the
//!   queue owner), through `acpx_runtime::acp_frames::FrameFilter`; recorded events print
//!   nothing, except those of a turn followed through the log of an owner on another host,
//!   whose frames are rebuilt from them.

use std::io::{BufRead, IsTerminal};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use acpx_model::EventEnvelope;
use acpx_printer::live::{LiveFormat, LiveRenderer, Piece, Span, Tone};
use acpx_runtime::acp_frames::FrameFilter;
use acpx_runtime::{
    ElicitationQuestion, ElicitationReply, Observer, PermissionAnswer, PermissionPrompter,
    PermissionQuestion, WireDirection, WireObserver,
};

use crate::config::Format;
use crate::output::{stderr_line, stderr_text, Out, Style};

/// Renders recorded events as they arrive.
#[derive(Debug, Clone)]
pub struct LiveOutput {
    out: Out,
    renderer: Arc<Mutex<LiveRenderer>>,
    /// `--format acp`: which frames are printed.
    frames: Option<Arc<Mutex<FrameFilter>>>,
    /// Whether the last thing written left a stderr line open (a thought streaming): the
    /// spinner waits for it to end.
    stderr_mid_line: Arc<AtomicBool>,
}

impl LiveOutput {
    pub fn new(out: Out) -> Self {
        let format = match out.format {
            Format::Text => LiveFormat::Text,
            Format::Json => LiveFormat::Json,
            Format::Quiet => LiveFormat::Quiet,
            Format::Acp => LiveFormat::Acp,
        };
        let renderer = LiveRenderer::new(format, out.verbose);
        let frames = out
            .is_acp()
            .then(|| Arc::new(Mutex::new(FrameFilter::new())));
        crate::output::spinner::enable(&out);
        LiveOutput {
            out,
            renderer: Arc::new(Mutex::new(renderer)),
            frames,
            stderr_mid_line: Arc::default(),
        }
    }

    /// Says on the spinner what happens before the turn's first event (`starting the
    /// agent`); the turn's events say the rest ([`LiveRenderer::activity`]).
    pub fn activity(&self, what: &str) {
        if !self.stderr_mid_line.load(Ordering::SeqCst) {
            crate::output::spinner::show(what, crate::output::stdout_mid_line());
        }
    }

    /// The observer to give the runtime. In the `acp` format the runtime's frames are
    /// printed ([`LiveOutput::wire_observer`]), not its events.
    pub fn observer(&self) -> Observer {
        let me = self.clone();
        Arc::new(move |e: &EventEnvelope| {
            if me.frames.is_none() {
                me.on_event(e)
            }
        })
    }

    /// The wire observer to give the runtime in the `acp` format (none otherwise).
    pub fn wire_observer(&self) -> Option<WireObserver> {
        self.frames.as_ref()?;
        let me = self.clone();
        Some(Arc::new(move |d: WireDirection, line: &str| {
            me.on_frame(d, line)
        }))
    }

    /// Prints one line of the agent connection, if it is a frame to print (`acp` format).
    pub fn on_frame(&self, direction: WireDirection, line: &str) {
        let Some(frames) = &self.frames else {
            return;
        };
        let mut out = Vec::new();
        // Held while writing, so the frames of both directions keep their order.
        let mut filter = frames.lock().unwrap_or_else(|p| p.into_inner());
        filter.push(direction, line, &mut out);
        self.write_frames(out);
    }

    fn write_frames(&self, lines: Vec<String>) {
        if lines.is_empty() {
            return;
        }
        let mut text = String::with_capacity(lines.iter().map(|l| l.len() + 1).sum());
        for l in lines {
            text.push_str(&l);
            text.push('\n');
        }
        self.out.raw(&text);
    }

    /// Ends the reply line on stdout if it is open (text format), or prints the frames held
    /// back while it was not known whether they would be (`acp` format).
    pub fn finish(&self) {
        crate::output::spinner::hide();
        let piece = self.lock().finish();
        if let Some(piece) = piece {
            self.write(&piece);
        }
        if let Some(frames) = &self.frames {
            let mut out = Vec::new();
            let mut filter = frames.lock().unwrap_or_else(|p| p.into_inner());
            filter.finish(&mut out);
            self.write_frames(out);
        }
    }

    /// Prints a line of acpx's own between the turn's output (see
    /// [`LiveRenderer::interject`]).
    pub fn interject(&self, text: &str) {
        let mut renderer = self.lock();
        for piece in renderer.interject(text) {
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
        let pieces = renderer.render(e);
        if let Some(last) = pieces.last() {
            self.stderr_mid_line
                .store(matches!(last, Piece::ErrText(_)), Ordering::SeqCst);
        }
        for piece in &pieces {
            self.write(piece);
        }
        if let Some(what) = renderer.activity() {
            self.activity(what);
        }
    }

    fn paint(&self, spans: &[Span]) -> String {
        spans
            .iter()
            .map(|s| match style_of(s.tone) {
                Some(style) => self.out.paint_err(style, &s.text),
                None => s.text.clone(),
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

/// Asks on the terminal under `--approve-reads`:
/// `[permission] Allow <title> [<kind>]? (y/N, a = always, v = never) `. `a` and `v` answer for
/// the rest of the session (docs/format.md § One decision per action). The answer is read from
/// `/dev/tty`, so a prompt piped on stdin does not interfere.
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
        // The agent's words, with no control character reaching the terminal (a `\r` or an
        // escape sequence could rewrite the question).
        let title = acpx_runtime::text::printable(&q.title).into_owned();
        let kind = q
            .kind
            .as_deref()
            .map(|k| format!(" [{}]", acpx_runtime::text::printable(k)))
            .unwrap_or_default();
        // What "always" covers: every call of this kind (or with this title) in the session.
        let scope = match q.kind.as_deref() {
            Some(k) => format!("every [{}] call", acpx_runtime::text::printable(k)),
            None => "this title".to_owned(),
        };
        // No spinner over the question while it waits for its answer.
        crate::output::spinner::pause(true);
        let answer = tokio::task::spawn_blocking(move || {
            stderr_text(&format!(
                "\n[permission] Allow {title}{kind}? (y/N; a = always, v = never: {scope} \
                 for the rest of this session) "
            ));
            let Ok(tty) = std::fs::File::open("/dev/tty") else {
                return PermissionAnswer::once(false);
            };
            let mut line = String::new();
            if std::io::BufReader::new(tty).read_line(&mut line).is_err() {
                return PermissionAnswer::once(false);
            }
            match line.trim().to_ascii_lowercase().as_str() {
                "y" | "yes" => PermissionAnswer::once(true),
                "a" | "always" => PermissionAnswer {
                    approved: true,
                    always: true,
                },
                "v" | "never" => PermissionAnswer {
                    approved: false,
                    always: true,
                },
                _ => PermissionAnswer::once(false),
            }
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
