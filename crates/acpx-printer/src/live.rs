//! A turn's live output as text, below any terminal: [`LiveRenderer`] turns the recorded
//! events of one turn, as they arrive (from [`acpx_runtime::Observer`] or a queue owner's stream),
//! into [`Piece`]s the caller writes out.
//!
//! - text ([`LiveFormat::Text`]): the agent's reply is stdout text as it streams; thoughts, tool
//!   calls, plans, mode changes, client operations and permission decisions are short
//!   stderr lines (lifecycle, control and unknown updates only when verbose).
//! - JSON ([`LiveFormat::Json`]): every event envelope, one per line, exactly as in the log, up to
//!   and including the turn's `prompt_done` / `prompt_error`.
//! - quiet ([`LiveFormat::Quiet`]): nothing.
//! - ACP ([`LiveFormat::Acp`]): the JSON-RPC frames the events stand for, rebuilt
//!   ([`acpx_runtime::acp_frames::rebuild`]), for a turn whose raw frames are not at hand (followed
//!   through the log of an owner on another host); a failure without the agent's answer is
//!   left to the caller's error line.
//!
//! Events recorded before the turn's `prompt_started` (attaching, recovering an earlier
//! interrupted turn) are not the turn's, nor are those after its end (shutdown); a
//! `prompt_started` after a `prompt_error` is a retry and is followed again.

use std::collections::HashMap;

use acpx_model::usage::{cost_from, money, thousands, token_total, Cost};
use acpx_model::{EventEnvelope, EventType};
use serde_json::Value;

use acpx_runtime::mapping::token_usage_from;
use acpx_runtime::text::clip;

/// How a turn is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LiveFormat {
    /// Human text: the reply on stdout, notes on stderr.
    Text,
    /// One event envelope per stdout line.
    Json,
    /// Nothing while streaming.
    Quiet,
    /// The JSON-RPC frames rebuilt from the events, one per stdout line.
    Acp,
}

/// The colour a [`Span`] is meant to be shown in, where the terminal has colours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tone {
    /// No colour.
    Plain,
    /// Bold (table headers and ids; not used by the live output).
    Bold,
    /// Faint.
    Dim,
    /// Red.
    Red,
    /// Green.
    Green,
    /// Yellow.
    Yellow,
    /// Blue.
    Blue,
    /// Magenta.
    Magenta,
    /// Cyan.
    Cyan,
}

/// A piece of text in one tone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Span {
    /// Its colour.
    pub tone: Tone,
    /// The text.
    pub text: String,
}

fn span(tone: Tone, text: impl Into<String>) -> Span {
    Span {
        tone,
        text: text.into(),
    }
}

fn plain(text: impl Into<String>) -> Span {
    span(Tone::Plain, text)
}

/// What to write, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// Text for stdout, as is (reply text, a newline that ends it, or a JSON line).
    Out(String),
    /// A line for stderr (its newline is the writer's).
    ErrLine(Vec<Span>),
    /// Text for stderr with no newline (a thought as it streams).
    ErrText(Vec<Span>),
}

/// What was written last, to place newlines between stdout text and stderr notes.
#[derive(Debug, Default, PartialEq, Eq, Clone, Copy)]
enum Last {
    #[default]
    Nothing,
    Reply,
    Thought,
    Note,
}

/// Follows one turn and renders its events (see the module docs).
#[derive(Debug)]
pub struct LiveRenderer {
    format: LiveFormat,
    verbose: bool,
    last: Last,
    /// Whether the reply text on stdout ends without a newline.
    reply_open: bool,
    tool_titles: HashMap<String, String>,
    /// The request id of the followed turn, from its `prompt_started`.
    turn: Option<String>,
    /// Set once the turn's terminal event was rendered.
    done: bool,
    /// The turn ended with `prompt_error`: a `prompt_started` after it is a retry.
    failed: bool,
    /// The session's cost from the turn's latest `usage_update` that carried one.
    cost: Option<Cost>,
    /// Tool calls whose content was previewed, with how many of its items were shown.
    previewed: HashMap<String, usize>,
    /// Terminals whose output was previewed, with how many of its lines were shown.
    terminal_lines: HashMap<String, usize>,
    /// What is happening now, in a few words ([`LiveRenderer::activity`]).
    activity: Option<String>,
    /// Tool calls started and not finished, with their titles, in start order.
    running_tools: Vec<(String, String)>,
}

/// Lines of a tool's text output or of a diff shown under its `[tool]` line.
const PREVIEW_LINES: usize = 6;

fn field(v: &Value, k: &str) -> String {
    v.get(k).and_then(Value::as_str).unwrap_or("").to_owned()
}

/// What a permission request's `toolCall` says the call will touch, as indented lines under
/// the request: its locations and, per diff, the lines it removes and adds, so the person
/// deciding sees what the call will change.
fn permission_details(tool_call: Option<&Value>) -> String {
    let Some(tc) = tool_call else {
        return String::new();
    };
    let mut out = String::new();
    for l in tc
        .get("locations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let path = field(l, "path");
        match l.get("line").and_then(Value::as_u64) {
            Some(line) => out.push_str(&format!("\n  at {}:{line}", clip(&path, 200))),
            None if !path.is_empty() => out.push_str(&format!("\n  at {}", clip(&path, 200))),
            None => {}
        }
    }
    for d in tc
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|c| field(c, "type") == "diff")
    {
        let lines = |k: &str| {
            d.get(k)
                .and_then(Value::as_str)
                .map_or(0, |t| t.lines().count())
        };
        out.push_str(&format!(
            "\n  edits {} (-{} +{} lines)",
            clip(&field(d, "path"), 200),
            lines("oldText"),
            lines("newText")
        ));
    }
    out
}

impl LiveRenderer {
    /// A renderer for one turn; `verbose` adds lifecycle, control and unknown update lines
    /// in text format.
    pub fn new(format: LiveFormat, verbose: bool) -> Self {
        LiveRenderer {
            format,
            verbose,
            last: Last::Nothing,
            reply_open: false,
            tool_titles: HashMap::new(),
            turn: None,
            done: false,
            failed: false,
            cost: None,
            previewed: HashMap::new(),
            terminal_lines: HashMap::new(),
            activity: None,
            running_tools: Vec::new(),
        }
    }

    /// What the turn is doing now, for a spinner (`starting the agent`, `reattaching the
    /// session`, `waiting for the first update`, `running Edit main.py`, `thinking`); `None`
    /// once the turn is over. Follows the events [`LiveRenderer::render`] was given.
    pub fn activity(&self) -> Option<&str> {
        if self.done {
            return None;
        }
        if let Some((_, title)) = self.running_tools.last() {
            return Some(title);
        }
        self.activity.as_deref()
    }

    /// Updates [`LiveRenderer::activity`] for one event.
    fn follow_activity(&mut self, e: &EventEnvelope) {
        let p = &e.payload;
        let next = match e.kind() {
            EventType::LifecycleEvent => match field(p, "phase").as_str() {
                "agent_started" => "initializing the agent",
                "initialized" | "authenticated" | "authentication_skipped" => "opening the session",
                "session_created" | "session_attached" | "session_fallback" => {
                    "setting up the session"
                }
                _ => return,
            },
            EventType::PromptStarted => "waiting for the first update",
            EventType::SessionUpdate => {
                let u = p.get("update").unwrap_or(&Value::Null);
                let kind = field(u, "sessionUpdate");
                match kind.as_str() {
                    "tool_call" | "tool_call_update" => {
                        let id = field(u, "toolCallId");
                        let status = field(u, "status");
                        self.running_tools.retain(|(t, _)| *t != id);
                        if !matches!(status.as_str(), "completed" | "failed") {
                            let title = u
                                .get("title")
                                .and_then(Value::as_str)
                                .map(str::to_owned)
                                .or_else(|| self.tool_titles.get(&id).cloned())
                                .unwrap_or_else(|| id.clone());
                            self.running_tools
                                .push((id, format!("running {}", clip(&title, 60))));
                        }
                        "working"
                    }
                    "agent_thought_chunk" => "thinking",
                    "agent_message_chunk" => "writing",
                    _ => "working",
                }
            }
            _ => return,
        };
        self.activity = Some(next.to_owned());
    }

    /// Whether the turn's terminal event was rendered.
    pub fn saw_end(&self) -> bool {
        self.done
    }

    /// A line of acpx's own between the turn's output (a cancel's notice): the reply line is
    /// ended first, on stdout, as before any note, so the lines that follow start where they
    /// should (no line left open, no blank line doubled). Text format only.
    pub fn interject(&mut self, text: &str) -> Vec<Piece> {
        let mut out = Vec::new();
        if self.format == LiveFormat::Text {
            self.note(&mut out, vec![span(Tone::Dim, text)]);
        }
        out
    }

    /// Ends the reply line on stdout if it is open (text format).
    pub fn finish(&mut self) -> Option<Piece> {
        std::mem::take(&mut self.reply_open).then(|| Piece::Out("\n".into()))
    }

    /// Renders one recorded event.
    pub fn render(&mut self, e: &EventEnvelope) -> Vec<Piece> {
        let mut out = Vec::new();
        if self.done && self.failed && e.kind() == EventType::PromptStarted {
            self.done = false;
            self.turn = None;
        }
        if self.done {
            return out;
        }
        if self.turn.is_none() && e.kind() == EventType::PromptStarted {
            self.turn = Some(e.request_id.clone().unwrap_or_default());
        }
        if self.turn.is_some() || e.kind() == EventType::LifecycleEvent {
            self.follow_activity(e);
        }
        let in_turn = self.turn.is_some();
        let terminal = in_turn
            && matches!(e.kind(), EventType::PromptDone | EventType::PromptError)
            && e.request_id.as_deref().unwrap_or_default()
                == self.turn.as_deref().unwrap_or_default();
        match self.format {
            LiveFormat::Json => out.push(Piece::Out(format!("{}\n", e.to_ndjson()))),
            LiveFormat::Acp if in_turn => out.extend(
                acpx_runtime::acp_frames::rebuild(e, false)
                    .into_iter()
                    .map(|l| Piece::Out(l + "\n")),
            ),
            LiveFormat::Acp => {}
            LiveFormat::Quiet => {}
            // Before the turn only lifecycle notes (when verbose) are of interest.
            LiveFormat::Text if in_turn || e.kind() == EventType::LifecycleEvent => {
                self.text(&mut out, e)
            }
            LiveFormat::Text => {}
        }
        if terminal {
            self.done = true;
            self.failed = e.kind() == EventType::PromptError;
            self.running_tools.clear();
        }
        out
    }

    fn note(&mut self, out: &mut Vec<Piece>, line: Vec<Span>) {
        if self.reply_open {
            out.push(Piece::Out("\n".into()));
            self.reply_open = false;
        }
        if self.last == Last::Thought {
            out.push(Piece::ErrLine(Vec::new()));
        }
        out.push(Piece::ErrLine(line));
        self.last = Last::Note;
    }

    fn text(&mut self, out: &mut Vec<Piece>, e: &EventEnvelope) {
        let p = &e.payload;
        let line = match e.kind() {
            EventType::SessionUpdate => {
                let u = p.get("update").cloned().unwrap_or(Value::Null);
                self.update(out, &u)
            }
            EventType::ClientOperation => {
                let summary = field(p, "summary");
                if field(p, "method") == "session/request_permission" {
                    let mut rest = format!(" {}", clip(&summary, 120));
                    if field(p, "status") == "running" {
                        rest.push_str(&permission_details(p.get("toolCall")));
                    }
                    Some(vec![span(Tone::Yellow, "[permission]"), plain(rest)])
                } else {
                    let status = field(p, "status");
                    let colour = if status == "failed" {
                        Tone::Red
                    } else {
                        Tone::Dim
                    };
                    let mut line = vec![
                        span(Tone::Dim, "[client]"),
                        plain(format!(" {} (", clip(&summary, 120))),
                        span(colour, status),
                        plain(")"),
                    ];
                    line.extend(self.terminal_preview(p));
                    Some(line)
                }
            }
            EventType::PromptDone => {
                let mut line = vec![
                    span(Tone::Green, "[done]"),
                    plain(format!(" {}", field(p, "stopReason"))),
                ];
                line.extend(self.turn_usage(p.get("usage")));
                Some(line)
            }
            EventType::PromptError => Some(vec![
                span(Tone::Red, "[error]"),
                plain(format!(" {}", field(p, "message"))),
            ]),
            EventType::ControlDone | EventType::ControlError | EventType::ControlStarted
                if self.verbose =>
            {
                Some(vec![
                    span(Tone::Dim, "[control]"),
                    plain(format!(" {} {}", field(p, "action"), e.event_type)),
                ])
            }
            EventType::LifecycleEvent if self.verbose => {
                let reason = field(p, "reason");
                let reason = if reason.is_empty() {
                    String::new()
                } else {
                    format!(" ({reason})")
                };
                Some(vec![
                    span(Tone::Dim, "[acpx]"),
                    plain(format!(" {}{reason}", field(p, "phase"))),
                ])
            }
            _ => None,
        };
        if let Some(line) = line {
            self.note(out, line);
        }
    }

    /// What the end-of-turn line adds: the turn's tokens (from the prompt response's `usage`)
    /// and the session's cost as the agent last reported it in the turn (ACP's cost is the
    /// session's running total). Nothing when the agent reported neither.
    fn turn_usage(&self, usage: Option<&Value>) -> Vec<Span> {
        let mut out = Vec::new();
        if let Some(t) = usage.and_then(token_usage_from) {
            out.push(span(
                Tone::Dim,
                format!(
                    " · {} tokens (in {}, out {})",
                    thousands(token_total(&t)),
                    thousands(t.input_tokens),
                    thousands(t.output_tokens)
                ),
            ));
        }
        if let Some(c) = &self.cost {
            out.push(span(
                Tone::Dim,
                format!(" · session cost {}", money(c.amount, &c.currency)),
            ));
        }
        out
    }

    /// The end of a terminal's output that a `terminal/output` (all of it so far) or a
    /// `terminal/release` (what came since the agent last asked) just logged: the lines not
    /// shown before, the last [`PREVIEW_LINES`] of them, indented under the `[client]` line.
    fn terminal_preview(&mut self, p: &Value) -> Vec<Span> {
        let Some(output) = p.get("output").and_then(Value::as_str) else {
            return Vec::new();
        };
        let lines: Vec<&str> = output.lines().collect();
        let seen = self
            .terminal_lines
            .entry(field(p, "terminalId"))
            .or_insert(0);
        let new = if field(p, "method") == "terminal/output" {
            let from = (*seen).min(lines.len());
            *seen = lines.len();
            &lines[from..]
        } else {
            *seen += lines.len();
            &lines[..]
        };
        let earlier = new.len().saturating_sub(PREVIEW_LINES);
        let mut out = Vec::new();
        if earlier > 0 {
            out.push(span(
                Tone::Dim,
                format!("\n  │ … {earlier} earlier line(s)"),
            ));
        }
        for l in &new[earlier..] {
            out.push(span(Tone::Dim, format!("\n  │ {}", clip(l, 200))));
        }
        out
    }

    /// The first lines of a tool call's new content, indented under its `[tool]` line: a
    /// diff's changed lines (`-` old, `+` new, the unchanged lines around them left out) and
    /// the start of text output, [`PREVIEW_LINES`] at most per item; items already shown for
    /// this call are not shown again.
    fn tool_preview(&mut self, id: &str, content: Option<&Value>) -> Vec<Span> {
        let Some(items) = content.and_then(Value::as_array) else {
            return Vec::new();
        };
        let shown = self.previewed.get(id).copied().unwrap_or(0);
        let mut out = Vec::new();
        for item in items.iter().skip(shown) {
            match field(item, "type").as_str() {
                "diff" => {
                    let old = item.get("oldText").and_then(Value::as_str).unwrap_or("");
                    let new = item.get("newText").and_then(Value::as_str).unwrap_or("");
                    out.push(span(
                        Tone::Dim,
                        format!("\n  {}", clip(&field(item, "path"), 200)),
                    ));
                    out.extend(diff_preview(old, new));
                }
                "content" => {
                    let text = item
                        .get("content")
                        .and_then(|c| c.get("text"))
                        .and_then(Value::as_str)
                        .unwrap_or("");
                    let lines: Vec<&str> = text.lines().collect();
                    for l in lines.iter().take(PREVIEW_LINES) {
                        out.push(span(Tone::Dim, format!("\n  │ {}", clip(l, 200))));
                    }
                    if lines.len() > PREVIEW_LINES {
                        out.push(span(
                            Tone::Dim,
                            format!("\n  │ … {} more line(s)", lines.len() - PREVIEW_LINES),
                        ));
                    }
                }
                _ => {}
            }
        }
        self.previewed.insert(id.to_owned(), items.len().max(shown));
        out
    }

    /// A `session_update`: reply and thought text is written here; a note line is returned.
    fn update(&mut self, out: &mut Vec<Piece>, u: &Value) -> Option<Vec<Span>> {
        let kind = field(u, "sessionUpdate");
        let chunk = || {
            u.get("content")
                .and_then(|c| c.get("text"))
                .and_then(Value::as_str)
        };
        match kind.as_str() {
            "agent_message_chunk" => {
                if let Some(t) = chunk() {
                    if self.last == Last::Thought {
                        out.push(Piece::ErrLine(Vec::new()));
                    }
                    out.push(Piece::Out(t.to_owned()));
                    self.reply_open = !t.ends_with('\n');
                    self.last = Last::Reply;
                }
                None
            }
            "agent_thought_chunk" => {
                if let Some(t) = chunk() {
                    if self.last != Last::Thought {
                        if self.reply_open {
                            out.push(Piece::Out("\n".into()));
                            self.reply_open = false;
                        }
                        out.push(Piece::ErrText(vec![
                            span(Tone::Magenta, "[thinking]"),
                            plain(" "),
                        ]));
                    }
                    out.push(Piece::ErrText(vec![span(Tone::Dim, t)]));
                    self.last = Last::Thought;
                }
                None
            }
            "tool_call" | "tool_call_update" => {
                let id = field(u, "toolCallId");
                let title = u.get("title").and_then(Value::as_str).map(str::to_owned);
                if let Some(t) = &title {
                    self.tool_titles.insert(id.clone(), t.clone());
                }
                let status = field(u, "status");
                // Updates without a status change (streamed content) stay quiet.
                if kind != "tool_call" && status.is_empty() {
                    return None;
                }
                let name = title
                    .or_else(|| self.tool_titles.get(&id).cloned())
                    .unwrap_or_else(|| id.clone());
                let status = if status.is_empty() {
                    "pending".to_owned()
                } else {
                    status
                };
                let colour = match status.as_str() {
                    "completed" => Tone::Green,
                    "failed" => Tone::Red,
                    _ => Tone::Cyan,
                };
                let mut line = vec![
                    span(Tone::Cyan, "[tool]"),
                    plain(format!(" {} (", clip(&name, 100))),
                    span(colour, status),
                    plain(")"),
                ];
                line.extend(self.tool_preview(&id, u.get("content")));
                Some(line)
            }
            "plan" => {
                let entries = u
                    .get("entries")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                let mut rest = format!(" {} step(s)", entries.len());
                for en in entries.iter().take(10) {
                    rest.push_str(&format!(
                        "\n  - {} ({})",
                        clip(&field(en, "content"), 100),
                        field(en, "status")
                    ));
                }
                Some(vec![span(Tone::Blue, "[plan]"), plain(rest)])
            }
            "usage_update" => {
                if let Some(c) = u.get("cost").and_then(cost_from) {
                    self.cost = Some(c);
                }
                self.verbose
                    .then(|| vec![span(Tone::Dim, "[update]"), plain(" usage_update")])
            }
            "current_mode_update" => Some(vec![
                span(Tone::Blue, "[mode]"),
                plain(format!(" {}", field(u, "currentModeId"))),
            ]),
            "session_info_update" => u.get("title").and_then(Value::as_str).map(|t| {
                vec![
                    span(Tone::Blue, "[title]"),
                    plain(format!(" {}", clip(t, 100))),
                ]
            }),
            _ if self.verbose => Some(vec![span(Tone::Dim, "[update]"), plain(format!(" {kind}"))]),
            _ => None,
        }
    }
}

/// The changed lines of `old` → `new`: the lines both share at the start and at the end are
/// left out, then up to [`PREVIEW_LINES`] removed (`-`, red) and added (`+`, green) lines.
fn diff_preview(old: &str, new: &str) -> Vec<Span> {
    let a: Vec<&str> = old.lines().collect();
    let b: Vec<&str> = new.lines().collect();
    let head = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let tail = a[head..]
        .iter()
        .rev()
        .zip(b[head..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let removed = &a[head..a.len() - tail];
    let added = &b[head..b.len() - tail];
    let mut out = Vec::new();
    let changed = removed
        .iter()
        .map(|l| (Tone::Red, '-', *l))
        .chain(added.iter().map(|l| (Tone::Green, '+', *l)));
    for (tone, sign, l) in changed.clone().take(PREVIEW_LINES) {
        out.push(span(tone, format!("\n  {sign} {}", clip(l, 200))));
    }
    let total = removed.len() + added.len();
    if total > PREVIEW_LINES {
        out.push(span(
            Tone::Dim,
            format!("\n  … {} more changed line(s)", total - PREVIEW_LINES),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_done_line_has_the_turns_tokens_and_the_session_cost() {
        let mut r = LiveRenderer::new(LiveFormat::Text, false);
        r.render(&event("prompt_started", Some("t"), json!({})));
        let u = json!({"update": {"sessionUpdate": "usage_update", "used": 5, "size": 10,
            "cost": {"amount": 0.25, "currency": "EUR"}}});
        assert!(r.render(&event("session_update", Some("t"), u)).is_empty());
        let done = r.render(&event(
            "prompt_done",
            Some("t"),
            json!({"stopReason": "end_turn", "usage": {"inputTokens": 1000, "outputTokens": 234}}),
        ));
        let Piece::ErrLine(spans) = &done[0] else {
            panic!("{done:?}")
        };
        let text: String = spans.iter().map(|s| s.text.as_str()).collect();
        assert_eq!(
            text,
            "[done] end_turn · 1,234 tokens (in 1,000, out 234) · session cost 0.25 EUR"
        );
    }

    #[test]
    fn a_tool_shows_its_changed_lines_and_the_start_of_its_output_once() {
        let mut r = LiveRenderer::new(LiveFormat::Text, false);
        r.render(&event("prompt_started", Some("t"), json!({})));
        let content = json!([
            {"type": "diff", "path": "/r/a.py", "oldText": "a\nb\nc\n", "newText": "a\nB\nc\n"},
            {"type": "content", "content": {"type": "text", "text": "line1\nline2"}}
        ]);
        let call = |status: &str| {
            event(
                "session_update",
                Some("t"),
                json!({"update": {"sessionUpdate": "tool_call_update", "toolCallId": "c1",
                    "title": "Edit a.py", "status": status, "content": content}}),
            )
        };
        let text = |pieces: Vec<Piece>| -> String {
            pieces
                .iter()
                .map(|p| match p {
                    Piece::ErrLine(s) => s.iter().map(|s| s.text.as_str()).collect(),
                    _ => String::new(),
                })
                .collect()
        };
        assert_eq!(
            text(r.render(&call("in_progress"))),
            "[tool] Edit a.py (in_progress)\n  /r/a.py\n  - b\n  + B\n  │ line1\n  │ line2"
        );
        assert_eq!(
            text(r.render(&call("completed"))),
            "[tool] Edit a.py (completed)",
            "content already shown is not shown again"
        );
    }

    #[test]
    fn a_terminal_shows_the_end_of_its_new_output_once() {
        let mut r = LiveRenderer::new(LiveFormat::Text, false);
        r.render(&event("prompt_started", Some("t"), json!({})));
        let op = |method: &str, output: &str| {
            event(
                "client_operation",
                Some("t"),
                json!({"method": method, "status": "completed", "summary": "s",
                    "terminalId": "term-1", "output": output}),
            )
        };
        let text = |pieces: Vec<Piece>| -> String {
            pieces
                .iter()
                .map(|p| match p {
                    Piece::ErrLine(s) => s.iter().map(|s| s.text.as_str()).collect(),
                    _ => String::new(),
                })
                .collect()
        };
        let nine: String = (1..=9).map(|i| format!("l{i}\n")).collect();
        assert_eq!(
            text(r.render(&op("terminal/output", &nine))),
            "[client] s (completed)\n  │ … 3 earlier line(s)\n  │ l4\n  │ l5\n  │ l6\n  │ l7\n  │ l8\n  │ l9"
        );
        assert_eq!(
            text(r.render(&op("terminal/output", &format!("{nine}l10\n")))),
            "[client] s (completed)\n  │ l10",
            "only what is new"
        );
        assert_eq!(
            text(r.render(&op("terminal/release", "TERMINAL-OUTPUT-42\n"))),
            "[client] s (completed)\n  │ TERMINAL-OUTPUT-42",
            "a release logs what came since"
        );
    }

    fn event(kind: &str, request_id: Option<&str>, payload: Value) -> EventEnvelope {
        let mut line = json!({
            "eventVersion": 1, "seq": 1, "timestamp": "2026-02-27T12:10:00.000Z",
            "acpxRecordId": "rec-1", "acpSessionId": "acp-1", "stream": "prompt",
            "source": "runtime", "type": kind, "payload": payload,
        });
        if let Some(r) = request_id {
            line["requestId"] = json!(r);
        }
        EventEnvelope::from_ndjson_line(line.to_string().as_bytes()).expect("an envelope")
    }

    fn chunk(text: &str) -> EventEnvelope {
        event(
            "session_update",
            Some("t"),
            json!({"update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}}),
        )
    }

    #[test]
    fn a_turn_streams_its_reply_and_ends_with_a_note() {
        let mut r = LiveRenderer::new(LiveFormat::Text, false);
        assert!(r.render(&chunk("before")).is_empty(), "not the turn's yet");
        r.render(&event("prompt_started", Some("t"), json!({})));
        assert_eq!(r.render(&chunk("hello")), vec![Piece::Out("hello".into())]);
        let done = r.render(&event(
            "prompt_done",
            Some("t"),
            json!({"stopReason": "end_turn"}),
        ));
        assert_eq!(
            done[0],
            Piece::Out("\n".into()),
            "the open reply line is ended"
        );
        assert_eq!(
            done[1],
            Piece::ErrLine(vec![span(Tone::Green, "[done]"), plain(" end_turn")])
        );
        assert!(r.saw_end());
        assert!(r.render(&chunk("after")).is_empty(), "after the end");
        assert_eq!(r.finish(), None);
    }

    #[test]
    fn json_writes_every_event_of_the_turn_as_a_line() {
        let mut r = LiveRenderer::new(LiveFormat::Json, false);
        let e = event("prompt_started", Some("t"), json!({}));
        assert_eq!(
            r.render(&e),
            vec![Piece::Out(format!("{}\n", e.to_ndjson()))]
        );
    }
}
