//! A turn's live output written as it happens: [`LiveOutput`] feeds the recorded events of
//! one turn (the runtime's observer, or a queue owner's stream) or the raw frames of its agent
//! connection through the [`LiveRenderer`] and writes the pieces to a [`LiveTerminal`], the
//! front end's stdout and stderr (in colour where it has it, with an activity line).
//!
//! - text: the agent's reply streams to stdout as it arrives; thoughts, tool calls, plans,
//!   mode changes, client operations and permission decisions go to stderr as short lines;
//!   meanwhile the activity line says what happens ([`LiveTerminal::show_activity`]).
//! - JSON: every recorded event envelope, one per line, exactly as in the log, up to and
//!   including the turn's `prompt_done` / `prompt_error`.
//! - quiet: nothing while streaming (the caller prints the final text).
//! - ACP: the raw JSON-RPC frames of the command's agent connection, one per line, as they
//!   cross ([`LiveOutput::wire_observer`] in one process, [`LiveOutput::on_frame`] from the
//!   queue owner), through `acpx_runtime::acp_frames::FrameFilter`; recorded events print
//!   nothing, except those of a turn followed through the log of an owner on another host,
//!   whose frames are rebuilt from them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use acpx_model::EventEnvelope;
use acpx_runtime::acp_frames::FrameFilter;
use acpx_runtime::{Observer, WireDirection, WireObserver};

use crate::live::{LiveFormat, LiveRenderer, Piece, Span, Tone};

/// Where a turn's live output goes: the front end's terminal (or pipes).
pub trait LiveTerminal: Send + Sync + std::fmt::Debug {
    /// Writes text to stdout as it is (the reply, JSON lines, frames).
    fn out(&self, text: &str);
    /// Writes `text` and a newline to stderr.
    fn err_line(&self, text: &str);
    /// Writes `text` to stderr, leaving the line open (a thought streaming).
    fn err_text(&self, text: &str);
    /// `text` in `tone` for stderr (as it is when stderr takes no colour).
    fn paint_err(&self, tone: Tone, text: &str) -> String;
    /// Shows `what` on the activity line (a spinner), where there is one.
    fn show_activity(&self, what: &str);
    /// Clears the activity line.
    fn hide_activity(&self);
}

/// Renders a turn's recorded events (or frames) as they arrive, to a [`LiveTerminal`].
#[derive(Debug, Clone)]
pub struct LiveOutput {
    term: Arc<dyn LiveTerminal>,
    renderer: Arc<Mutex<LiveRenderer>>,
    /// The ACP format: which frames are printed.
    frames: Option<Arc<Mutex<FrameFilter>>>,
    /// Whether the last thing written left a stderr line open (a thought streaming): the
    /// activity line waits for it to end.
    stderr_mid_line: Arc<AtomicBool>,
    /// The reply in the quiet format: whether its last non-empty piece ended with a newline
    /// (`None`: nothing printed).
    reply_ends_with_newline: Arc<Mutex<Option<bool>>>,
}

impl LiveOutput {
    /// The live output of a turn in `format` (`verbose`: also lifecycle, control and unknown
    /// updates), written to `term`.
    pub fn new(format: LiveFormat, verbose: bool, term: Arc<dyn LiveTerminal>) -> Self {
        let frames = (format == LiveFormat::Acp).then(|| Arc::new(Mutex::new(FrameFilter::new())));
        LiveOutput {
            term,
            renderer: Arc::new(Mutex::new(LiveRenderer::new(format, verbose))),
            frames,
            stderr_mid_line: Arc::default(),
            reply_ends_with_newline: Arc::default(),
        }
    }

    /// Prints one piece of the reply in the quiet format. The reply is written piece by piece
    /// as the thread holds it (a long one read from its spill file) or as the queue owner
    /// sends it (`reply_part` lines), never joined or copied: a long reply (8 MB after a
    /// 1M-chunk turn) would otherwise be held whole.
    pub fn reply_piece(&self, piece: &str) {
        if !piece.is_empty() {
            self.term.out(piece);
            *self
                .reply_ends_with_newline
                .lock()
                .unwrap_or_else(|p| p.into_inner()) = Some(piece.ends_with('\n'));
        }
    }

    /// Prints the pieces of a reply in the quiet format ([`LiveOutput::reply_piece`]). A
    /// piece that cannot be read back ends it with that error: what was printed stays as it
    /// is, and the reply is not ended ([`LiveOutput::end_reply`]).
    pub fn write_reply<'a>(
        &self,
        reply: impl Iterator<Item = std::io::Result<std::borrow::Cow<'a, str>>>,
    ) -> std::io::Result<()> {
        for piece in reply {
            self.reply_piece(&piece?);
        }
        Ok(())
    }

    /// Ends a whole reply in the quiet format with a newline unless it has one (or is empty).
    pub fn end_reply(&self) {
        let ends = *self
            .reply_ends_with_newline
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if ends == Some(false) {
            self.term.out("\n");
        }
    }

    /// Says on the activity line what happens before the turn's first event (`starting the
    /// agent`); the turn's events say the rest ([`LiveRenderer::activity`]).
    pub fn activity(&self, what: &str) {
        if !self.stderr_mid_line.load(Ordering::SeqCst) {
            self.term.show_activity(what);
        }
    }

    /// The observer to give the runtime. In the ACP format the runtime's frames are printed
    /// ([`LiveOutput::wire_observer`]), not its events.
    pub fn observer(&self) -> Observer {
        let me = self.clone();
        Arc::new(move |e: &EventEnvelope| {
            if me.frames.is_none() {
                me.on_event(e)
            }
        })
    }

    /// The wire observer to give the runtime in the ACP format (none otherwise).
    pub fn wire_observer(&self) -> Option<WireObserver> {
        self.frames.as_ref()?;
        let me = self.clone();
        Some(Arc::new(move |d: WireDirection, line: &str| {
            me.on_frame(d, line)
        }))
    }

    /// Prints one line of the agent connection, if it is a frame to print (ACP format).
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
        self.term.out(&text);
    }

    /// Ends the reply line on stdout if it is open (text format), or prints the frames held
    /// back while it was not known whether they would be (ACP format).
    pub fn finish(&self) {
        self.term.hide_activity();
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

    /// Prints a line of the front end's own between the turn's output (see
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

    fn lock(&self) -> MutexGuard<'_, LiveRenderer> {
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
            .map(|s| match s.tone {
                Tone::Plain => s.text.clone(),
                tone => self.term.paint_err(tone, &s.text),
            })
            .collect()
    }

    fn write(&self, piece: &Piece) {
        match piece {
            Piece::Out(s) => self.term.out(s),
            Piece::ErrLine(spans) => self.term.err_line(&self.paint(spans)),
            Piece::ErrText(spans) => self.term.err_text(&self.paint(spans)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A terminal that keeps what it is given.
    #[derive(Debug, Default)]
    struct Recorded(Mutex<Vec<String>>);

    impl Recorded {
        fn push(&self, s: String) {
            self.0.lock().unwrap().push(s);
        }
    }

    impl LiveTerminal for Recorded {
        fn out(&self, text: &str) {
            self.push(format!("out:{text}"));
        }
        fn err_line(&self, text: &str) {
            self.push(format!("line:{text}"));
        }
        fn err_text(&self, text: &str) {
            self.push(format!("text:{text}"));
        }
        fn paint_err(&self, tone: Tone, text: &str) -> String {
            format!("<{tone:?}>{text}")
        }
        fn show_activity(&self, what: &str) {
            self.push(format!("activity:{what}"));
        }
        fn hide_activity(&self) {
            self.push("hide".into());
        }
    }

    #[test]
    fn interjections_are_painted_lines_and_finish_clears_the_activity() {
        let term = Arc::new(Recorded::default());
        let live = LiveOutput::new(LiveFormat::Text, false, term.clone());
        live.activity("starting the agent");
        live.interject("[acpx] cancelling");
        live.finish();
        let got = term.0.lock().unwrap().clone();
        assert_eq!(got[0], "activity:starting the agent");
        assert!(got
            .iter()
            .any(|l| l.starts_with("line:") && l.contains("cancelling")));
        assert_eq!(got.last().map(String::as_str), Some("hide"));
        assert!(!live.saw_end());
    }

    #[test]
    fn a_quiet_reply_ends_with_one_newline_and_stops_at_an_unreadable_piece() {
        let term = Arc::new(Recorded::default());
        let live = LiveOutput::new(LiveFormat::Quiet, false, term.clone());
        live.reply_piece("");
        live.end_reply();
        assert!(
            term.0.lock().unwrap().is_empty(),
            "an empty reply prints nothing"
        );
        let pieces = vec![Ok("a".into()), Ok("b".into())];
        live.write_reply(pieces.into_iter()).unwrap();
        live.end_reply();
        assert_eq!(*term.0.lock().unwrap(), ["out:a", "out:b", "out:\n"]);
        let broken = vec![Ok("c\n".into()), Err(std::io::Error::other("gone"))];
        assert!(live.write_reply(broken.into_iter()).is_err());
    }

    #[test]
    fn only_the_acp_format_has_a_wire_observer() {
        let term: Arc<dyn LiveTerminal> = Arc::new(Recorded::default());
        assert!(LiveOutput::new(LiveFormat::Text, false, term.clone())
            .wire_observer()
            .is_none());
        assert!(LiveOutput::new(LiveFormat::Acp, false, term)
            .wire_observer()
            .is_some());
    }
}
