//! Progress bars of the commands that go through many sessions (`migrate`, `fsck`,
//! `sessions prune`): the runtime reports ([`acpx_model::progress::Progress`]), this draws, on
//! stderr, only when stderr is a terminal and the output is text (never with `--format json`
//! or `quiet`, so never with `--json-strict`).

use std::io::{IsTerminal, Write};

use acpx_model::progress::Progress;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::output::Out;

/// A bar, or nothing when it must not be drawn; drawn once there is at least one session.
/// Finished (left on screen at its final count) when dropped.
pub struct Bar(Option<ProgressBar>);

impl Bar {
    /// A bar labelled `what` (`migrating`, `checking`, …) when `out` and stderr allow one.
    pub fn new(out: &Out, what: &str) -> Bar {
        if !out.is_text() || !std::io::stderr().is_terminal() {
            return Bar(None);
        }
        // Hidden until the operation says it has sessions to go through.
        let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::hidden());
        let style = ProgressStyle::with_template(&format!(
            "{what} {{bar:30}} {{pos}}/{{len}} sessions {{wide_msg}}"
        ))
        .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        Bar(Some(bar))
    }
}

impl Progress for Bar {
    fn begin(&self, total: u64) {
        if let (Some(b), true) = (&self.0, total > 0) {
            b.set_length(total);
            b.set_draw_target(ProgressDrawTarget::stderr());
        }
    }

    fn advance(&self, id: &str) {
        if let Some(b) = &self.0 {
            b.set_message(id.to_owned());
            b.inc(1);
        }
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        if let Some(b) = self.0.as_ref().filter(|b| !b.is_hidden()) {
            b.set_message("");
            b.finish();
            // The finished bar stays on its line; what acpx prints next starts below it.
            let _ = writeln!(std::io::stderr());
        }
    }
}
