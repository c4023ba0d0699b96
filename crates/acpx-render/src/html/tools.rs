//! A tool call as HTML: kind, title, status and duration in its head; its locations,
//! permission questions with their answers, diffs (coloured unified hunks), terminals with
//! their output and exit, text content, and raw input and output below, long parts collapsed.

use serde_json::Value;

use super::blocks::{duration, push_item_open, push_pre};
use super::escape::{class_token, push_escaped};
use super::items::{Permission, ToolCall, Turn};
use crate::diff::{self, LineKind};

/// Diffs with more lines than this are collapsed.
const DIFF_COLLAPSE_LINES: usize = 60;
/// At most this many `#seq` links are listed under a call.
const SEQ_LINKS: usize = 40;

/// One tool call.
pub fn push_tool(out: &mut String, t: &ToolCall, turn: &Turn) {
    let status = t.status.as_deref().unwrap_or("pending");
    push_item_open(out, &format!("tool {}", class_token(status)), &t.at);
    out.push_str("<div class=\"head\"><span class=\"label\">");
    push_escaped(out, t.kind.as_deref().unwrap_or("tool"));
    out.push_str("</span>");
    push_escaped(out, t.title.as_deref().unwrap_or(&t.id));
    out.push_str("<span class=\"badge ");
    out.push_str(&class_token(status));
    out.push_str("\">");
    push_escaped(out, status);
    out.push_str("</span>");
    if let Some(ended) = t.ended {
        out.push_str("<span class=\"badge\">");
        out.push_str(&duration(ended.millis() - t.at.time.millis()));
        out.push_str("</span>");
    }
    out.push_str("</div>");
    if !t.locations.is_empty() {
        out.push_str("<div class=\"locations\">");
        push_escaped(out, &t.locations.join("  "));
        out.push_str("</div>");
    }
    for p in &t.permissions {
        out.push_str("<div class=\"permission\"><span class=\"label\">permission</span>");
        push_permission(out, p);
        out.push_str("</div>");
    }
    for (path, old, new) in &t.diffs {
        push_diff(out, path, old.as_deref(), new);
    }
    for tid in &t.terminals {
        push_terminal(out, tid, turn);
    }
    let title = t.title.as_deref().unwrap_or("");
    for text in &t.texts {
        // A text that repeats the call's title, or a terminal's output shown above, is
        // filler.
        if text.trim() == title.trim() || terminal_repeats(text, t, turn) {
            continue;
        }
        push_pre(out, "output", text);
    }
    if let Some(input) = t.raw_input.as_ref().filter(|v| !is_empty_json(v)) {
        out.push_str("<details><summary>input</summary>");
        push_pre(out, "input", &pretty(input));
        out.push_str("</details>");
    }
    if let Some(output) = t.raw_output.as_ref().filter(|v| !is_empty_json(v)) {
        out.push_str("<details><summary>raw output</summary>");
        push_pre(out, "raw output", &pretty(output));
        out.push_str("</details>");
    }
    if t.seqs.len() > 1 {
        out.push_str("<div class=\"more\">events");
        for seq in t.seqs.iter().take(SEQ_LINKS) {
            out.push_str(&format!(" <a class=\"seq\" href=\"#seq-{seq}\">#{seq}</a>"));
        }
        if t.seqs.len() > SEQ_LINKS {
            out.push_str(&format!(" … {} more", t.seqs.len() - SEQ_LINKS));
        }
        out.push_str("</div>");
    }
    // Every event of the call is an anchor, so a `#seq` link to any of them lands here.
    for seq in t.seqs.iter().skip(1) {
        if *seq != t.at.seq {
            out.push_str(&format!("<span id=\"seq-{seq}\"></span>"));
        }
    }
    out.push_str("</div>\n");
}

/// A permission question and its answer, on one line.
pub fn push_permission(out: &mut String, p: &Permission) {
    if !p.options.is_empty() {
        out.push_str(" asked: ");
        let names: Vec<&str> = p.options.iter().map(|o| o.1.as_str()).collect();
        push_escaped(out, &names.join(" / "));
    }
    match &p.decision {
        Some(decision) => {
            out.push_str(" → <span class=\"answer ");
            out.push_str(&class_token(decision));
            out.push_str("\">");
            push_escaped(out, decision);
            out.push_str("</span>");
            if let Some(option) = &p.option_id {
                let name = p
                    .options
                    .iter()
                    .find(|o| &o.0 == option)
                    .map_or(option.as_str(), |o| o.1.as_str());
                out.push_str(" (");
                push_escaped(out, name);
                out.push(')');
            }
            let by = match (&p.rule, &p.policy) {
                (Some(rule), _) => format!("decided by permission rule: {rule}"),
                (None, Some(policy)) => format!("decided by mode {policy}"),
                (None, None) => String::new(),
            };
            if !by.is_empty() {
                out.push_str(" <span class=\"more\">");
                push_escaped(out, &by);
                out.push_str("</span>");
            }
        }
        None if p.answered.is_none() => {
            out.push_str(" → <span class=\"more\">no answer logged</span>")
        }
        None => {}
    }
    for at in [&p.asked, &p.answered].into_iter().flatten() {
        out.push_str(&format!(
            " <a class=\"seq\" href=\"#seq-{0}\">#{0}</a>",
            at.seq
        ));
    }
}

/// A diff of `path` as coloured unified hunks.
fn push_diff(out: &mut String, path: &str, old: Option<&str>, new: &str) {
    let hunks = diff::unified(old, new);
    let (added, removed) = diff::stat(&hunks);
    let lines: usize = hunks.iter().map(|h| h.lines.len() + 1).sum();
    let collapse = lines > DIFF_COLLAPSE_LINES;
    if collapse {
        out.push_str("<details><summary>");
        push_escaped(out, path);
        out.push_str(&format!(" (+{added} −{removed})</summary>"));
    }
    out.push_str("<div class=\"diff\"><div class=\"file\">");
    push_escaped(out, path);
    out.push_str(&format!(
        " <span class=\"more\">{}+{added} −{removed}</span></div>",
        if old.is_none() { "new file " } else { "" }
    ));
    if hunks.is_empty() {
        out.push_str("<div class=\"l more\">no change</div>");
    }
    for hunk in &hunks {
        out.push_str("<div class=\"l dh\">");
        push_escaped(out, &hunk.header);
        out.push_str("</div>");
        for (kind, text) in &hunk.lines {
            out.push_str(match kind {
                LineKind::Context => "<div class=\"l\">",
                LineKind::Added => "<div class=\"l da\">",
                LineKind::Removed => "<div class=\"l dr\">",
            });
            out.push(kind.prefix());
            push_escaped(out, text);
            out.push_str("</div>");
        }
    }
    out.push_str("</div>");
    if collapse {
        out.push_str("</details>");
    }
}

/// A terminal embedded in a call: its command, output and exit.
fn push_terminal(out: &mut String, tid: &str, turn: &Turn) {
    let term = turn.terminals.get(tid);
    out.push_str("<div class=\"terminal\"><span class=\"label\">terminal</span>");
    match term.and_then(|t| t.command.as_deref()) {
        Some(cmd) => {
            out.push_str("<code>$ ");
            push_escaped(out, cmd);
            out.push_str("</code>");
        }
        None => push_escaped(out, tid),
    }
    if let Some(exit) = term.and_then(|t| t.exit.as_deref()) {
        out.push_str(" <span class=\"badge\">");
        push_escaped(out, exit);
        out.push_str("</span>");
    }
    match term.and_then(|t| t.output.as_deref()) {
        Some(output) => {
            if term.is_some_and(|t| t.truncated) {
                out.push_str(" <span class=\"more\">(output cut at the agent's byte limit)</span>");
            }
            push_pre(out, "terminal output", output);
        }
        None => out.push_str(" <span class=\"more\">(no output logged)</span>"),
    }
    out.push_str("</div>");
}

/// Whether `text` is only a terminal's output the call shows already.
fn terminal_repeats(text: &str, t: &ToolCall, turn: &Turn) -> bool {
    t.terminals.iter().any(|tid| {
        turn.terminals
            .get(tid)
            .and_then(|term| term.output.as_deref())
            .is_some_and(|o| o.trim_end() == text.trim_end())
    })
}

fn is_empty_json(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::String(s) => s.is_empty(),
        _ => false,
    }
}

/// A JSON value indented for reading.
fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
}
