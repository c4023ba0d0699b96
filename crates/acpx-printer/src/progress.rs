//! Progress bars of the commands that go through many sessions (`migrate`, `fsck`,
//! `sessions prune`, `sessions import --from-node-acpx`): the operation reports
//! ([`acpx_model::progress::Progress`], or a count of files), this draws, on stderr, only when
//! the front end allows it (a text format) and stderr is a terminal (never with `--format
//! json` or `quiet`, so never with `--json-strict`).

use std::io::{IsTerminal, Write};

use acpx_model::progress::Progress;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A bar, or nothing when it must not be drawn; drawn once there is at least one session.
/// Finished (left on screen at its final count) when dropped.
pub struct Bar(Option<ProgressBar>);

impl Bar {
    /// A bar labelled `what` (`migrating`, `checking`, …) when `allowed` (the output is text)
    /// and stderr is a terminal.
    pub fn new(allowed: bool, what: &str) -> Bar {
        if !allowed || !std::io::stderr().is_terminal() {
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

/// The plain bar of a count of files (`sessions import --from-node-acpx`), drawn on a
/// terminal once there are at least `min` of them, and cleared when dropped.
pub struct FileBar {
    bar: Option<ProgressBar>,
    min: usize,
}

impl FileBar {
    /// A bar for at least `min` files, when stderr is a terminal.
    pub fn new(min: usize) -> FileBar {
        let bar = std::io::stderr().is_terminal().then(ProgressBar::hidden);
        FileBar { bar, min }
    }

    /// `done` of `total` files are through.
    pub fn update(&self, done: usize, total: usize) {
        if let Some(bar) = self.bar.as_ref().filter(|_| total >= self.min) {
            if bar.is_hidden() {
                bar.set_draw_target(ProgressDrawTarget::stderr());
                bar.set_length(total as u64);
            }
            bar.set_position(done as u64);
        }
    }
}

impl Drop for FileBar {
    fn drop(&mut self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bar_that_is_not_allowed_draws_nothing_and_counts_nothing() {
        let bar = Bar::new(false, "checking");
        assert!(bar.0.is_none());
        bar.begin(3);
        bar.advance("a");
    }

    #[test]
    fn a_file_bar_below_its_minimum_stays_hidden() {
        let bar = FileBar::new(20);
        bar.update(1, 5);
        assert!(bar.bar.as_ref().is_none_or(|b| b.is_hidden()));
    }
}
