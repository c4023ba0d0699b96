//! A turn as HTML: its header, the prompt, each item in log order (replies as Markdown,
//! thoughts collapsed, plans as checklists, notes), and how it ended with its tokens and cost.

use super::blocks::{duration, push_item_open, push_where};
use super::escape::{class_token, human_bytes, push_escaped};
use super::items::{At, Capped, Item, NoteKind, Turn};
use super::markdown::push_markdown;
use super::tools::{push_permission, push_tool};
use super::usage::{push_turn_usage, Totals};

/// The note that text was cut for the page.
fn push_dropped(out: &mut String, c: &Capped, at: &At) {
    if c.dropped > 0 {
        out.push_str(&format!(
            "<div class=\"more\">… {} more in the log (from event #{})</div>",
            human_bytes(c.dropped),
            at.seq
        ));
    }
}

/// The rest of a turn (or, for turn number 0, the events between turns) as HTML: its head
/// unless written already, its items not written yet, and how it ended.
pub fn push_turn(out: &mut String, turn: &Turn, totals: &mut Totals) {
    if turn.at.is_none() {
        if !turn.items.is_empty() {
            out.push_str("<div class=\"between\">\n");
            push_items(out, &turn.items, turn, totals);
            out.push_str("</div>\n");
        }
        return;
    }
    if !turn.head_written {
        push_turn_head(out, turn);
    }
    push_items(out, &turn.items, turn, totals);
    push_end(out, turn, totals);
    out.push_str("</section>\n");
}

/// The opening of a turn's section: its header and its prompt.
pub fn push_turn_head(out: &mut String, turn: &Turn) {
    let Some(at) = &turn.at else {
        return;
    };
    out.push_str(&format!(
        "<section class=\"turn\" id=\"turn-{}\">\n<header><h2>Turn {}</h2>",
        turn.number, turn.number
    ));
    let full = at.time.to_rfc3339();
    out.push_str("<span class=\"time\">");
    push_escaped(out, &full.get(..19).unwrap_or(&full).replace('T', " "));
    out.push_str(" UTC</span></header>\n");
    push_item_open(out, "prompt", at);
    out.push_str("<span class=\"label\">prompt</span><div class=\"text\">");
    push_escaped(out, &turn.prompt);
    out.push_str("</div>");
    for a in &turn.attachments {
        out.push_str("<div class=\"more\">");
        push_escaped(out, a);
        out.push_str("</div>");
    }
    out.push_str("</div>\n");
}

/// Items of `turn` as HTML, counted in `totals`.
pub fn push_items(out: &mut String, items: &[Item], turn: &Turn, totals: &mut Totals) {
    for item in items {
        match item {
            Item::Tool(t) => {
                totals.tool_calls += 1;
                totals.permissions += t.permissions.len() as u64;
            }
            Item::Permission(..) => totals.permissions += 1,
            _ => {}
        }
        push_item(out, item, turn);
    }
}

fn push_item(out: &mut String, item: &Item, turn: &Turn) {
    match item {
        Item::Message(at, text) => {
            push_item_open(out, "message", at);
            out.push_str("<div class=\"md\">");
            push_markdown(out, &text.text);
            out.push_str("</div>");
            push_dropped(out, text, at);
            out.push_str("</div>\n");
        }
        Item::Thought(at, text) => {
            push_item_open(out, "thought", at);
            let lines = text.text.lines().count();
            out.push_str(&format!(
                "<details><summary><span class=\"label\">thought</span>{lines} line{}</summary><div class=\"md\">",
                if lines == 1 { "" } else { "s" }
            ));
            push_markdown(out, &text.text);
            out.push_str("</div></details>");
            push_dropped(out, text, at);
            out.push_str("</div>\n");
        }
        Item::User(at, text) => {
            push_item_open(out, "prompt", at);
            out.push_str("<span class=\"label\">user</span><div class=\"text\">");
            push_escaped(out, &text.text);
            out.push_str("</div>");
            push_dropped(out, text, at);
            out.push_str("</div>\n");
        }
        Item::Tool(tool) => push_tool(out, tool, turn),
        Item::Plan(at, entries) => {
            push_item_open(out, "plan", at);
            out.push_str("<span class=\"label\">plan</span><ul>");
            for (content, status, priority) in entries {
                out.push_str("<li class=\"");
                out.push_str(&class_token(status));
                out.push_str("\">");
                out.push_str(match status.as_str() {
                    "completed" => "☑ ",
                    "in_progress" => "▶ ",
                    _ => "☐ ",
                });
                push_escaped(out, content);
                if !priority.is_empty() {
                    out.push_str(" <span class=\"badge\">");
                    push_escaped(out, priority);
                    out.push_str("</span>");
                }
                out.push_str("</li>");
            }
            out.push_str("</ul></div>\n");
        }
        Item::Permission(title, perm) => {
            let Some(at) = perm.asked.as_ref().or(perm.answered.as_ref()) else {
                return;
            };
            push_item_open(out, "permission", at);
            out.push_str("<span class=\"label\">permission</span>");
            push_escaped(out, title);
            push_permission(out, perm);
            out.push_str("</div>\n");
        }
        Item::Note {
            at,
            kind,
            label,
            text,
        } => {
            let class = match kind {
                NoteKind::Change => "note change",
                NoteKind::Warning => "note warning",
                NoteKind::Error => "note error",
                NoteKind::Internal => "note internal",
            };
            push_item_open(out, class, at);
            out.push_str("<span class=\"label\">");
            push_escaped(out, label);
            out.push_str("</span>");
            push_escaped(out, text);
            out.push_str("</div>\n");
        }
    }
}

/// The turn's last line: how it ended, when, its tokens and cost.
fn push_end(out: &mut String, turn: &Turn, totals: &mut Totals) {
    match &turn.end {
        Some(end) => {
            out.push_str(if end.failed {
                "<div class=\"item end failed\""
            } else {
                "<div class=\"item end\""
            });
            out.push_str(&format!(" id=\"seq-{}\">", end.at.seq));
            push_where(out, &end.at);
            out.push_str("<span><span class=\"label\">stop reason</span><span class=\"reason\">");
            push_escaped(out, &end.reason);
            out.push_str("</span></span>");
            if let Some(at) = &turn.at {
                out.push_str(&format!(
                    "<span><span class=\"label\">took</span>{}</span>",
                    duration(end.at.time.millis() - at.time.millis())
                ));
            }
            if let Some(m) = &end.message {
                out.push_str("<span>");
                push_escaped(out, m);
                out.push_str("</span>");
            }
        }
        None => out.push_str(
            "<div class=\"item end failed\"><span><span class=\"label\">stop reason</span>\
             <span class=\"reason\">unfinished</span> (the log has no end of this turn)</span>",
        ),
    }
    push_turn_usage(out, turn, totals);
    if turn.late_updates > 0 {
        out.push_str(&format!(
            "<span class=\"more\">{} late updates of tool calls shown above are in the log only</span>",
            turn.late_updates
        ));
    }
    out.push_str("</div>\n");
}
