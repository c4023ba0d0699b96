//! A session's conversation as readable text: the plain transcript of `sessions history` /
//! `sessions read`, the Markdown export, a record's facts ([`record_facts`], `sessions
//! show`) and one short line per event ([`event_line`], the `sessions events` text). Pure
//! functions of the record, so every front end shows the same thing.
//!
//! Tool calls show their ACP kind and status, the diffs of the files they wrote (a line diff
//! of the changed region) and the output of the terminals they ran, as kept in the thread
//! (`docs/format.md`, § Tool calls, diffs, terminals and tokens in the thread); a part the
//! thread cut says so.

use std::fmt::Write as _;

use acpx_model::{
    AgentContent, AgentMessage, EventEnvelope, Message, ResultContent, SessionRecord, ToolResult,
    ToolUse, UserContent,
};
use serde_json::Value;

use acpx_owner::runs::Probe;
use acpx_runtime::mapping::tool_content::{DIFFS_KEY, TERMINALS_KEY};
use acpx_runtime::text::{clip, printable};

/// Lines of a terminal's output shown by the short transcript (the full one shows all).
const SHORT_TERMINAL_LINES: usize = 5;

/// The text of a user message.
pub fn user_text(content: &[UserContent]) -> String {
    content
        .iter()
        .map(|c| match c {
            UserContent::Text(t) => t.clone(),
            UserContent::Mention(m) => {
                if m.content.is_empty() {
                    format!("@{}", mention_label(&m.uri))
                } else {
                    format!("@{}\n{}", mention_label(&m.uri), m.content)
                }
            }
            UserContent::Image(_) => "[image]".to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn mention_label(uri: &Value) -> String {
    // Zed's MentionUri is externally tagged: {"File": {"abs_path": ...}} and the like.
    if let Some((tag, inner)) = uri.as_object().and_then(|o| o.iter().next()) {
        let path = inner
            .get("abs_path")
            .or_else(|| inner.get("path"))
            .or_else(|| inner.get("url"))
            .and_then(Value::as_str);
        return path.map_or_else(|| tag.clone(), str::to_owned);
    }
    uri.as_str().map_or_else(|| uri.to_string(), str::to_owned)
}

fn result_text(content: &[ResultContent]) -> String {
    content
        .iter()
        .map(|c| match c {
            ResultContent::Text(t) => t.to_text_lossy().into_owned(),
            ResultContent::Image(_) => "[image]".to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A unified diff of `old` → `new` (`None` for `old` is a new file): `---` / `+++` lines,
/// then standard hunks (`@@ -a,b +c,d @@`, three lines of context) as `diff -u` prints them
/// ([`acpx_render::diff`]).
pub fn line_diff(path: &str, old: Option<&str>, new: &str) -> String {
    let mut s = format!(
        "--- {}\n+++ {path}\n",
        if old.is_some() { path } else { "/dev/null" }
    );
    for hunk in acpx_render::diff::unified(old, new) {
        s.push_str(&hunk.header);
        s.push('\n');
        for (kind, line) in &hunk.lines {
            s.push(kind.prefix());
            s.push_str(line);
            s.push('\n');
        }
    }
    s
}

/// Whether a result's text says nothing the tool line does not: empty, the call's title, or
/// the `<title> (<status>)` the thread writes for a call that returned no content.
fn is_filler_output(text: &str, t: &ToolUse) -> bool {
    let text = text.trim();
    let title = tool_label(t).trim();
    text.is_empty()
        || text == title
        || text.strip_prefix(title).map(str::trim).is_some_and(|rest| {
            rest.starts_with('(') && rest.ends_with(')') && !rest.contains('\n')
        })
}

/// The plan kept on an agent message (`plan`, docs/format.md): (status, content) per entry.
fn plan_entries(a: &AgentMessage) -> Vec<(&str, &str)> {
    a.extra
        .get(acpx_runtime::mapping::PLAN_KEY)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|e| {
            let field = |k| e.get(k).and_then(Value::as_str).unwrap_or("");
            (field("status"), field("content"))
        })
        .collect()
}

/// `[x]`, `[>]` or `[ ]` for a plan entry's status.
fn plan_mark(status: &str) -> &'static str {
    match status {
        "completed" => "[x]",
        "in_progress" => "[>]",
        _ => "[ ]",
    }
}

/// Whether a call's raw input says nothing: `{}`, `null`, `""` or `[]`.
fn is_empty_input(t: &ToolUse) -> bool {
    matches!(
        t.raw_input.to_text_lossy().trim(),
        "" | "{}" | "null" | "\"\"" | "[]"
    )
}

/// One diff kept on a tool result.
struct Diff<'a> {
    path: &'a str,
    old: Option<&'a str>,
    new: &'a str,
    truncated: bool,
}

/// One terminal kept on a tool result.
struct Terminal<'a> {
    id: &'a str,
    output: &'a str,
    exit: String,
    truncated: bool,
}

fn diffs(r: &ToolResult) -> Vec<Diff<'_>> {
    let Some(items) = r.extra.get(DIFFS_KEY).and_then(Value::as_array) else {
        return Vec::new();
    };
    items
        .iter()
        .map(|d| Diff {
            path: d.get("path").and_then(Value::as_str).unwrap_or("?"),
            old: d.get("old_text").and_then(Value::as_str),
            new: d.get("new_text").and_then(Value::as_str).unwrap_or(""),
            truncated: d.get("truncated").and_then(Value::as_bool) == Some(true),
        })
        .collect()
}

fn terminals(r: &ToolResult) -> Vec<Terminal<'_>> {
    let Some(items) = r.extra.get(TERMINALS_KEY).and_then(Value::as_array) else {
        return Vec::new();
    };
    items
        .iter()
        .map(|t| {
            let status = t.get("exit_status");
            let code = status
                .and_then(|s| s.get("exitCode"))
                .and_then(Value::as_i64);
            let signal = status.and_then(|s| s.get("signal")).and_then(Value::as_str);
            Terminal {
                id: t.get("terminal_id").and_then(Value::as_str).unwrap_or("?"),
                output: t.get("output").and_then(Value::as_str).unwrap_or(""),
                exit: match (code, signal) {
                    (Some(c), _) => format!("exit code {c}"),
                    (None, Some(s)) => format!("signal {s}"),
                    (None, None) => "no exit status".into(),
                },
                truncated: t.get("truncated").and_then(Value::as_bool) == Some(true),
            }
        })
        .collect()
}

/// `read, completed` and the like: the ACP kind (when known) and the status.
fn tool_state(t: &ToolUse, result: Option<&ToolResult>) -> String {
    let status = t
        .extra
        .get("status")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| {
            match result {
                Some(r) if r.is_error => "failed",
                Some(_) => "completed",
                None => "no result",
            }
            .to_owned()
        });
    match t.extra.get("kind").and_then(Value::as_str) {
        Some(k) => format!("{k}, {status}"),
        None => status,
    }
}

fn tool_label(t: &ToolUse) -> &str {
    t.extra
        .get("title")
        .and_then(Value::as_str)
        .filter(|title| *title != t.name)
        .unwrap_or(&t.name)
}

/// The places a tool call named (its ACP `locations`: `path` or `path:line`), joined.
fn tool_locations(t: &ToolUse) -> Option<String> {
    let shown: Vec<String> = t
        .extra
        .get("locations")
        .and_then(Value::as_array)?
        .iter()
        .filter_map(|l| {
            let path = printable(l.get("path")?.as_str()?).into_owned();
            Some(match l.get("line").and_then(Value::as_u64) {
                Some(line) => format!("{path}:{line}"),
                None => path,
            })
        })
        .collect();
    (!shown.is_empty()).then(|| shown.join(", "))
}

fn indent(text: &str, by: &str) -> String {
    text.lines().map(|l| format!("{by}{l}\n")).collect()
}

fn last_lines(text: &str, n: usize) -> (String, usize) {
    let lines: Vec<&str> = text.lines().collect();
    let skip = lines.len().saturating_sub(n);
    (lines[skip..].join("\n"), skip)
}

fn text_tool(s: &mut String, a: &AgentMessage, t: &ToolUse, full: bool) {
    let result = a.tool_results.get(&t.id);
    s.push_str(&format!(
        "[tool] {} ({})\n",
        tool_label(t),
        tool_state(t, result)
    ));
    if let Some(at) = tool_locations(t) {
        s.push_str(&format!("  at: {at}\n"));
    }
    if full && !is_empty_input(t) {
        s.push_str(&format!("  input: {}\n", t.raw_input));
    }
    let Some(r) = result else { return };
    let output = result_text(&r.content);
    if (full || r.is_error) && !is_filler_output(&output, t) {
        s.push_str(&indent(&output, "  output: "));
    }
    for d in diffs(r) {
        if full {
            s.push_str(&indent(&line_diff(d.path, d.old, d.new), "  "));
        } else {
            let added = d.new.lines().count();
            let removed = d.old.map_or(0, |o| o.lines().count());
            s.push_str(&format!(
                "  edited {} (-{removed} +{added} lines)\n",
                d.path
            ));
        }
        if d.truncated {
            s.push_str("  (diff cut in the thread; the event log has all of it)\n");
        }
    }
    for term in terminals(r) {
        s.push_str(&format!("  terminal {} ({}):\n", term.id, term.exit));
        let (shown, hidden) = if full {
            (term.output.to_owned(), 0)
        } else {
            last_lines(term.output, SHORT_TERMINAL_LINES)
        };
        if hidden > 0 {
            s.push_str(&format!("    … {hidden} earlier lines\n"));
        }
        s.push_str(&indent(&shown, "    "));
        if term.truncated {
            s.push_str("    (output cut in the thread; the event log has all of it)\n");
        }
    }
}

/// Size of the pieces a transcript is handed out in: a long conversation is never one
/// string.
const PIECE: usize = 64 << 10;

/// Calls `each` with the conversation's messages from index `skip` on, the settled ones read
/// back one at a time, never all at once, until `each` says to stop (`false`). When settled
/// messages cannot be read back, a note in `s` says so, and the ones in memory go on.
fn each_message_from(
    r: &SessionRecord,
    skip: usize,
    s: &mut String,
    mut each: impl FnMut(&mut String, &Message) -> bool,
) {
    let settled = r.thread.settled.len();
    if skip < settled {
        let read = r.thread.settled.try_for_each(|i, m| {
            if i >= skip && !each(s, &m) {
                return Err(());
            }
            Ok(())
        });
        match read {
            Ok(Ok(())) => {}
            Ok(Err(())) => return,
            Err(e) => s.push_str(&format!(
                "[acpx: earlier messages could not be read back: {e}]\n\n"
            )),
        }
    }
    let tail = &r.thread.messages;
    for m in &tail[skip.saturating_sub(settled).min(tail.len())..] {
        if !each(s, m) {
            return;
        }
    }
}

/// Hands `s` to `emit` and empties it once it holds a [`PIECE`]; whether to go on.
fn flush_piece(s: &mut String, emit: &mut dyn FnMut(&str) -> bool) -> bool {
    if s.len() < PIECE {
        return true;
    }
    let go_on = emit(s);
    s.clear();
    go_on
}

/// The conversation as readable text: the last `limit` messages, thinking and tool input in
/// full when `full`.
pub fn history_text(r: &SessionRecord, limit: Option<usize>, full: bool) -> String {
    let mut out = String::new();
    write_history(r, limit, full, &mut |piece| {
        out.push_str(piece);
        true
    });
    out
}

/// [`history_text`] handed to `emit` in pieces of about 64 KiB as it is rendered: a long
/// conversation is never whole in memory, in the record or in its text. `emit` says whether
/// to go on (`false`: the reader went away, nothing more is read back). Nothing is emitted
/// for a conversation without messages.
pub fn write_history(
    r: &SessionRecord,
    limit: Option<usize>,
    full: bool,
    emit: &mut dyn FnMut(&str) -> bool,
) {
    let skip = limit.map_or(0, |l| r.thread.message_count().saturating_sub(l));
    let mut s = String::new();
    if skip > 0 {
        s.push_str(&format!("… {skip} earlier messages not shown\n\n"));
    }
    each_message_from(r, skip, &mut s, |s, m| {
        history_message(s, m, full);
        flush_piece(s, emit)
    });
    if !s.is_empty() {
        emit(&s);
    }
}

/// One message of [`history_text`].
fn history_message(s: &mut String, m: &Message, full: bool) {
    match m {
        Message::User(u) => {
            s.push_str("## user\n");
            s.push_str(&user_text(&u.content));
            s.push_str("\n\n");
        }
        Message::Agent(a) => {
            s.push_str("## agent\n");
            for (status, content) in plan_entries(a) {
                s.push_str(&format!("[plan] {} {content}\n", plan_mark(status)));
            }
            for c in &a.content {
                match c {
                    AgentContent::Text(t) => {
                        // Written straight in: a spilled reply is not copied whole first.
                        let before = s.len();
                        let _ = write!(s, "{t}");
                        if s.len() == before || !s.ends_with('\n') {
                            s.push('\n');
                        }
                    }
                    AgentContent::Thinking(t) => {
                        // Clipped, only the head of a spilled reasoning text is read.
                        let text = if full {
                            t.text.to_text_lossy().into_owned()
                        } else {
                            clip(&t.text.head_lossy(100), 100)
                        };
                        s.push_str(&format!("[thinking] {text}\n"));
                    }
                    AgentContent::RedactedThinking(_) => s.push_str("[thinking redacted]\n"),
                    AgentContent::ToolUse(t) => text_tool(s, a, t, full),
                }
            }
            s.push('\n');
        }
        Message::Resume => s.push_str("[resumed]\n\n"),
    }
}

/// A fence longer than any backtick run in `text`, so the text cannot close it.
fn fence(text: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in text.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    "`".repeat((longest + 1).max(3))
}

fn fenced(s: &mut String, lang: &str, text: &str) {
    let f = fence(text);
    s.push_str(&format!("{f}{lang}\n{text}"));
    if !text.ends_with('\n') {
        s.push('\n');
    }
    s.push_str(&format!("{f}\n\n"));
}

fn markdown_tool(s: &mut String, a: &AgentMessage, t: &ToolUse) {
    let result = a.tool_results.get(&t.id);
    s.push_str(&format!(
        "**Tool: {}** ({})\n\n",
        tool_label(t),
        tool_state(t, result)
    ));
    if let Some(at) = tool_locations(t) {
        s.push_str(&format!("At: `{at}`\n\n"));
    }
    if !is_empty_input(t) {
        fenced(s, "json", &t.raw_input.to_text_lossy());
    }
    let Some(r) = result else { return };
    let output = result_text(&r.content);
    if !is_filler_output(&output, t) {
        let label = if r.is_error { "Error" } else { "Result" };
        s.push_str(&format!("{label}:\n\n"));
        fenced(s, "", &output);
    }
    for d in diffs(r) {
        s.push_str(&format!("Diff of `{}`:\n\n", d.path));
        fenced(s, "diff", &line_diff(d.path, d.old, d.new));
        if d.truncated {
            s.push_str("*(diff cut in the thread; the event log has all of it)*\n\n");
        }
    }
    for term in terminals(r) {
        s.push_str(&format!("Terminal `{}` ({}):\n\n", term.id, term.exit));
        fenced(s, "console", term.output);
        if term.truncated {
            s.push_str("*(output cut in the thread; the event log has all of it)*\n\n");
        }
    }
}

/// A Markdown transcript: a header with the session's identity, then every message.
pub fn markdown(r: &SessionRecord) -> String {
    let mut out = String::new();
    write_markdown(r, &mut |piece| {
        out.push_str(piece);
        true
    });
    out
}

/// [`markdown`] handed to `emit` in pieces of about 64 KiB as it is rendered, until `emit`
/// says to stop (see [`write_history`]).
pub fn write_markdown(r: &SessionRecord, emit: &mut dyn FnMut(&str) -> bool) {
    let mut s = String::new();
    // Everything an agent or an archive chose is escaped (`printable`).
    let title = if r.thread.title.is_empty() {
        format!("Session {}", r.acpx_record_id)
    } else {
        printable(&r.thread.title).into_owned()
    };
    s.push_str(&format!("# {title}\n\n"));
    s.push_str(&format!("- record id: `{}`\n", r.acpx_record_id));
    s.push_str(&format!(
        "- ACP session id: `{}`\n",
        printable(&r.acp_session_id)
    ));
    if let Some(a) = &r.agent_session_id {
        s.push_str(&format!("- agent session id: `{}`\n", printable(a)));
    }
    s.push_str(&format!("- agent: `{}`\n", printable(&r.agent_command)));
    s.push_str(&format!("- directory: `{}`\n", printable(&r.cwd)));
    if let Some(n) = &r.name {
        s.push_str(&format!("- name: {}\n", printable(n)));
    }
    s.push_str(&format!("- created: {}\n\n", r.created_at));
    each_message_from(r, 0, &mut s, |s, m| {
        markdown_message(s, m);
        flush_piece(s, emit)
    });
    if !s.is_empty() {
        emit(&s);
    }
}

/// One message of [`markdown`].
fn markdown_message(s: &mut String, m: &Message) {
    match m {
        Message::User(u) => {
            s.push_str("## User\n\n");
            s.push_str(&user_text(&u.content));
            s.push_str("\n\n");
        }
        Message::Agent(a) => {
            s.push_str("## Agent\n\n");
            let plan = plan_entries(a);
            if !plan.is_empty() {
                s.push_str("Plan:\n\n");
                for (status, content) in plan {
                    let done = if status == "completed" { "x" } else { " " };
                    s.push_str(&format!("- [{done}] {content} ({status})\n"));
                }
                s.push('\n');
            }
            for c in &a.content {
                match c {
                    AgentContent::Text(t) => {
                        let _ = write!(s, "{t}");
                        s.push_str("\n\n");
                    }
                    AgentContent::Thinking(t) => {
                        for line in t.text.to_text_lossy().lines() {
                            s.push_str(&format!("> {line}\n"));
                        }
                        s.push('\n');
                    }
                    AgentContent::RedactedThinking(_) => s.push_str("> (thinking redacted)\n\n"),
                    AgentContent::ToolUse(t) => markdown_tool(s, a, t),
                }
            }
        }
        Message::Resume => s.push_str("*(resumed)*\n\n"),
    }
}

/// A record's facts as labelled values, in the order `acpx sessions show` lists them: its
/// ids, agent, directory, name and title, times, state (closed, or open with `run`, what
/// [`acpx_owner::runs::probe`] found), messages, mode, last turn and event log.
pub fn record_facts(r: &SessionRecord, run: &Probe) -> Vec<(&'static str, String)> {
    record_facts_raw(r, run)
        .into_iter()
        // Ids, the mode, a turn's error: an agent or an archive chose them.
        .map(|(k, v)| (k, printable(&v).into_owned()))
        .collect()
}

fn record_facts_raw(r: &SessionRecord, run: &Probe) -> Vec<(&'static str, String)> {
    let mut l = vec![
        ("record id", r.acpx_record_id.to_string()),
        ("ACP session id", r.acp_session_id.clone()),
    ];
    if let Some(a) = &r.agent_session_id {
        l.push(("agent session id", a.clone()));
    }
    l.push(("agent", printable(&r.agent_command).into_owned()));
    l.push(("directory", printable(&r.cwd).into_owned()));
    if let Some(n) = &r.name {
        l.push(("name", printable(n).into_owned()));
    }
    if !r.thread.title.is_empty() {
        l.push(("title", printable(&r.thread.title).into_owned()));
    }
    l.push(("created", r.created_at.to_string()));
    l.push(("last used", r.last_used_at.to_string()));
    if let Some(t) = r.last_prompt_at {
        l.push(("last prompt", t.to_string()));
    }
    let state = match (r.closed, run) {
        (true, _) => format!(
            "closed {}",
            r.closed_at.map(|t| t.to_string()).unwrap_or_default()
        ),
        (false, Probe::Running(Some(i))) => format!("open, prompt running (pid {})", i.pid),
        (false, Probe::Running(None)) => "open, prompt running".to_owned(),
        (false, Probe::Dead(_)) => "open, its last prompt process died mid-turn".to_owned(),
        (false, Probe::Idle) => "open".to_owned(),
    };
    l.push(("state", state));
    l.push(("messages", r.thread.message_count().to_string()));
    if let Some(m) = &r.acpx.current_mode_id {
        l.push(("mode", m.clone()));
    }
    if let Some(t) = &r.acpx.last_turn {
        let mut s = format!("{} at {}", t.outcome, t.started_at);
        if let Some(sr) = &t.stop_reason {
            s.push_str(&format!(", stopReason {sr}"));
        }
        if let Some(e) = &t.error {
            s.push_str(&format!(", {}: {}", e.code, e.message));
        }
        l.push(("last turn", s));
    }
    let el = &r.acpx.event_log;
    // The last seq, not a count: retention removes the oldest events and never lowers it.
    l.push((
        "event log",
        format!(
            "last seq {}, {} segment(s){}",
            el.last_seq,
            el.segment_count,
            if el.active_path.is_empty() {
                String::new()
            } else {
                format!(", {}", el.active_path)
            }
        ),
    ));
    if let Some(e) = &el.last_write_error {
        l.push(("last write error", e.clone()));
    }
    l
}

/// One short line describing an event (the `sessions events` text format).
pub fn event_line(e: &EventEnvelope) -> String {
    let ts = e.timestamp.to_rfc3339();
    let req = e
        .request_id
        .as_deref()
        .map(|r| format!(" [{}]", clip(r, 12)))
        .unwrap_or_default();
    format!(
        "#{} {ts} {}/{} {}{req} {}",
        e.seq,
        e.stream,
        e.source,
        e.event_type,
        event_detail(e)
    )
}

/// The interesting part of an event's payload, short.
pub fn event_detail(e: &EventEnvelope) -> String {
    let p = &e.payload;
    let s = |k: &str| p.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
    match e.event_type.as_str() {
        "session_update" => {
            let u = p.get("update").cloned().unwrap_or(Value::Null);
            let kind = u
                .get("sessionUpdate")
                .and_then(Value::as_str)
                .unwrap_or("?");
            let text = u
                .get("content")
                .and_then(|c| c.get("text"))
                .and_then(Value::as_str)
                .map(|t| format!(" {:?}", clip(t, 60)));
            let title = u
                .get("title")
                .and_then(Value::as_str)
                .map(|t| format!(" {:?}", clip(t, 60)));
            let status = u
                .get("status")
                .and_then(Value::as_str)
                .map(|t| format!(" ({t})"));
            format!(
                "{kind}{}{}",
                text.or(title).unwrap_or_default(),
                status.unwrap_or_default()
            )
        }
        "prompt_started" => format!("{:?}", clip(&s("message_preview"), 60)),
        "prompt_done" => format!("stopReason={}", s("stopReason")),
        "prompt_error" => format!("{}: {}", s("code"), clip(&s("message"), 80)),
        "client_operation" => format!(
            "{} {} {}",
            s("method"),
            s("status"),
            clip(&s("summary"), 60)
        ),
        "control_started" | "control_done" | "control_error" => s("action"),
        "lifecycle_event" | "queue_event" => {
            let reason = s("reason");
            if reason.is_empty() {
                s("phase")
            } else {
                format!("{} ({})", s("phase"), clip(&reason, 60))
            }
        }
        _ => clip(&p.to_string(), 80),
    }
}

#[cfg(test)]
mod tests;
