//! The HTML viewer of a recorded session (`acpx sessions export --as html`): one
//! self-contained file that opens from `file://` or as a mail attachment, with no network
//! access, showing every turn (prompt, reply as Markdown, thoughts, plans, tool calls with
//! their diffs, terminals and permission answers, mode and config changes, fallbacks and
//! errors, how the turn ended, tokens and cost), the session's totals, an in-page search,
//! and a `#seq` link from every item to its event in the log.
//!
//! Written as the log is read: [`HtmlExport::event`] takes events one at a time, in seq
//! order, and a turn is written and dropped when it ends, so a log of any length is never in
//! memory; one turn's text is (capped at [`items::TEXT_CAP`] per message or output).
//!
//! # Safety of the page
//!
//! Everything recorded (prompts, replies, tool titles and output, paths, ids, error texts) is
//! escaped ([`escape`]) or rendered through the sanitizing Markdown writer ([`markdown`]:
//! raw HTML shown as text, links only to `http`, `https`, `mailto`, images never loaded).
//! The page's own style sheet and script are allowed by hash in a Content-Security-Policy
//! that allows nothing else ([`page::policy`]).
//!
//! ```
//! use acpx_render::html::HtmlExport;
//! # fn main() -> std::io::Result<()> {
//! let mut page = HtmlExport::begin(Vec::new(), "demo", &[("agent", "my-agent".into())])?;
//! // page.event(&envelope)? for every event of the log, in seq order …
//! let bytes = page.finish()?;
//! assert!(String::from_utf8_lossy(&bytes).contains("<title>demo · acpx session</title>"));
//! # Ok(()) }
//! ```

mod blocks;
pub mod escape;
pub mod fold;
mod highlight;
pub mod items;
pub mod markdown;
mod notes;
pub mod page;
mod tools;
mod turns;
mod usage;

use std::io::Write;

use acpx_model::EventEnvelope;

use items::{At, Turn};
use usage::Totals;

/// Every element the page is made of (besides its `<!DOCTYPE html>`): nothing recorded adds
/// an element, so a page with any other tag has let recorded markup through. The tests of
/// the viewer and of the `sessions export --as html` command check pages against it.
pub const PAGE_ELEMENTS: &[&str] = &[
    "html",
    "head",
    "meta",
    "title",
    "style",
    "body",
    "header",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "dl",
    "dt",
    "dd",
    "div",
    "span",
    "input",
    "label",
    "button",
    "main",
    "section",
    "details",
    "summary",
    "pre",
    "code",
    "a",
    "p",
    "ul",
    "ol",
    "li",
    "em",
    "strong",
    "del",
    "table",
    "thead",
    "tbody",
    "tr",
    "th",
    "td",
    "blockquote",
    "hr",
    "br",
    "script",
];

/// Page text is handed to the writer once it is this long.
const FLUSH_AT: usize = 256 * 1024;

/// A running turn with this many items writes those that are settled.
const SETTLE_AT: usize = 64;

/// A page being written: [`begin`](Self::begin), then [`event`](Self::event) for each event
/// of the log in seq order, then [`finish`](Self::finish).
pub struct HtmlExport<W: Write> {
    out: W,
    buf: String,
    /// The turn being read, or the events between turns (turn number 0).
    turn: Turn,
    totals: Totals,
}

impl<W: Write> HtmlExport<W> {
    /// Starts the page of the session titled `title`, with `meta` (label, value) pairs under
    /// the title (agent, directory, ids, dates). Both are recorded text and are escaped.
    pub fn begin(out: W, title: &str, meta: &[(&str, String)]) -> std::io::Result<Self> {
        let mut buf = String::with_capacity(FLUSH_AT + 64 * 1024);
        page::push_head(&mut buf, title, meta);
        Ok(HtmlExport {
            out,
            buf,
            turn: Turn::new(0, None, None),
            totals: Totals::default(),
        })
    }

    /// Adds the next event of the log.
    pub fn event(&mut self, e: &EventEnvelope) -> std::io::Result<()> {
        self.totals.events += 1;
        if e.event_type.as_str() == "prompt_started" {
            self.close_turn();
            let number = self.totals.turns + 1;
            self.totals.turns = number;
            self.turn = Turn::new(
                number,
                Some(At {
                    seq: e.seq,
                    time: e.timestamp,
                }),
                e.request_id.clone(),
            );
            self.turn.set_prompt(&e.payload);
        } else {
            self.turn.apply(e);
            if self.turn.at.is_none() || self.turn.end.is_some() {
                // Between turns nothing waits for an end: written at once.
                self.close_turn();
            } else if self.turn.items.len() >= SETTLE_AT {
                // A long turn is written as it goes: what can no longer change.
                let settled = self.turn.take_settled();
                if !settled.is_empty() {
                    if !self.turn.head_written {
                        turns::push_turn_head(&mut self.buf, &self.turn);
                        self.turn.head_written = true;
                    }
                    turns::push_items(&mut self.buf, &settled, &self.turn, &mut self.totals);
                }
            }
        }
        if self.buf.len() >= FLUSH_AT {
            self.out.write_all(self.buf.as_bytes())?;
            self.buf.clear();
        }
        Ok(())
    }

    /// Writes the turn being read (ended or not) and starts the between-turns part.
    fn close_turn(&mut self) {
        let turn = std::mem::replace(&mut self.turn, Turn::new(0, None, None));
        if turn.end.as_ref().is_some_and(|e| e.failed) {
            self.totals.failed_turns += 1;
        }
        if turn.at.is_none() {
            if let Some(cost) = &turn.cost {
                self.totals.cost = Some(cost.clone());
            }
            if turn.context.is_some() {
                self.totals.context = turn.context;
            }
        }
        turns::push_turn(&mut self.buf, &turn, &mut self.totals);
    }

    /// Writes the last turn, the totals and the end of the page; returns the writer, flushed.
    pub fn finish(mut self) -> std::io::Result<W> {
        self.close_turn();
        if self.totals.turns == 0 {
            self.buf
                .push_str("<p class=\"more\">This session has no turns yet.</p>\n");
        }
        usage::push_summary(&mut self.buf, &self.totals);
        page::push_tail(&mut self.buf);
        self.out.write_all(self.buf.as_bytes())?;
        self.out.flush()?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests;
