//! The pieces every item of the page is written with: its opening `<div>` with its time and
//! `#seq` link, preformatted text collapsed when long, a duration for people.

use super::escape::{human_bytes, push_escaped};
use super::items::At;

/// Outputs longer than this many lines are collapsed.
const COLLAPSE_LINES: usize = 25;
/// Outputs longer than this many bytes are collapsed.
const COLLAPSE_BYTES: usize = 3000;

/// `<span class="where">` with the time and the `#seq` link of an item.
pub fn push_where(out: &mut String, at: &At) {
    let full = at.time.to_rfc3339();
    out.push_str("<span class=\"where\"><span class=\"time\" title=\"");
    out.push_str(&full);
    out.push_str("\">");
    out.push_str(full.get(11..19).unwrap_or(&full));
    out.push_str("</span> <a class=\"seq\" href=\"#seq-");
    out.push_str(&at.seq.to_string());
    out.push_str("\" title=\"event ");
    out.push_str(&at.seq.to_string());
    out.push_str(" of the log\">#");
    out.push_str(&at.seq.to_string());
    out.push_str("</a></span>");
}

/// The opening `<div>` of an item: its classes and its `seq-N` anchor.
pub fn push_item_open(out: &mut String, classes: &str, at: &At) {
    out.push_str("<div class=\"item ");
    out.push_str(classes);
    out.push_str("\" id=\"seq-");
    out.push_str(&at.seq.to_string());
    out.push_str("\">");
    push_where(out, at);
}

/// Preformatted text, collapsed under `label` when it is long.
pub fn push_pre(out: &mut String, label: &str, text: &str) {
    let lines = text.lines().count();
    let long = lines > COLLAPSE_LINES || text.len() > COLLAPSE_BYTES;
    if long {
        out.push_str("<details><summary>");
        push_escaped(out, label);
        out.push_str(&format!(
            " ({lines} lines, {})",
            human_bytes(text.len() as u64)
        ));
        out.push_str("</summary>");
    }
    out.push_str("<pre class=\"pre\">");
    push_escaped(out, text);
    out.push_str("</pre>");
    if long {
        out.push_str("</details>");
    }
}

/// Milliseconds for people: `850 ms`, `4.2 s`, `3 min 5 s`.
pub fn duration(ms: i64) -> String {
    let ms = ms.max(0);
    if ms < 1000 {
        format!("{ms} ms")
    } else if ms < 60_000 {
        format!("{:.1} s", ms as f64 / 1000.0)
    } else {
        format!("{} min {} s", ms / 60_000, (ms % 60_000) / 1000)
    }
}
