//! The spinner of a turn a person watches: one line on stderr saying what is happening
//! (`starting the agent`, `waiting for the first update`, `running Edit main.py`, …), drawn
//! with indicatif and replaced by the turn's output as it comes.
//!
//! Only on a terminal: stderr must be one, the format text, and `--verbose` off (its
//! diagnostics write their own lines). Never with `--format json` or `quiet`, never on a
//! pipe. The spinner is process-wide, because everything that writes to the terminal must
//! clear it first: `output::write_stdout` and `output::stderr_bytes` call [`hide`], so no
//! line of acpx's is ever drawn over. It is not drawn while a stdout line is open on the same
//! terminal (a reply streaming without its newline yet), which its clearing would erase, nor
//! while a permission question waits for an answer ([`pause`]).

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::Out;

/// Whether this process may draw a spinner at all ([`enable`]).
static ENABLED: AtomicBool = AtomicBool::new(false);
/// Set while a question is asked on the terminal: nothing is drawn meanwhile.
static PAUSED: AtomicBool = AtomicBool::new(false);
/// The spinner on screen, if any.
static BAR: Mutex<Option<ProgressBar>> = Mutex::new(None);

/// How often the spinner turns.
const TICK: Duration = Duration::from_millis(100);

/// Allows spinners in this process when `out` and the terminal allow them (see the module
/// docs); returns whether they are allowed.
pub fn enable(out: &Out) -> bool {
    let on = out.is_text() && !out.verbose && std::io::stderr().is_terminal();
    ENABLED.store(on, Ordering::SeqCst);
    on
}

/// Shows `what` on the spinner line (starting the spinner when none is drawn), unless
/// spinners are off, paused, or a stdout line is open on the terminal (`stdout_mid_line`).
pub fn show(what: &str, stdout_mid_line: bool) {
    if !ENABLED.load(Ordering::SeqCst) || PAUSED.load(Ordering::SeqCst) {
        return;
    }
    if stdout_mid_line && std::io::stdout().is_terminal() {
        return;
    }
    let mut bar = BAR.lock().unwrap_or_else(|p| p.into_inner());
    match bar.as_ref() {
        Some(b) => b.set_message(format!("{what}…")),
        None => {
            let b = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            let style = ProgressStyle::with_template("{spinner:.cyan} {msg:.dim} {elapsed:.dim}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner());
            b.set_style(style);
            b.set_message(format!("{what}…"));
            b.enable_steady_tick(TICK);
            *bar = Some(b);
        }
    }
}

/// Clears the spinner line, if one is drawn. Cheap when none is.
pub fn hide() {
    if !ENABLED.load(Ordering::SeqCst) {
        return;
    }
    // `try_lock`: a write made while the spinner is being set up (by this thread) must not
    // wait for itself; indicatif draws through its own handle, never through these writers.
    let Ok(mut bar) = BAR.try_lock() else {
        return;
    };
    if let Some(b) = bar.take() {
        b.finish_and_clear();
    }
}

/// Clears the spinner and keeps it off while `paused` (a question on the terminal).
pub fn pause(paused: bool) {
    PAUSED.store(paused, Ordering::SeqCst);
    if paused {
        hide();
    }
}
