//! `acpx sessions diff A B`: two sessions compared turn by turn.
//!
//! Turns are paired by their place (the first prompt of A with the first of B, …), which is
//! what a replay produces. For each pair it lists what differs among the prompt, the reply
//! text, the tool calls (title, kind, final status and the files they name, in order; ids are
//! left out, they differ between runs), the stop reason, the tokens and the cost. Wall time is
//! shown for both but never makes a turn differ: no two runs take the same time.

use serde_json::{json, Value};

use crate::recording::{Cost, RecordedTurn, Recording};

/// A tool call as a diff compares it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCallFacts {
    /// The latest title.
    pub title: String,
    /// The latest kind.
    pub kind: Option<String>,
    /// The latest status.
    pub status: Option<String>,
    /// The paths of its locations and diffs, sorted, once each.
    pub files: Vec<String>,
}

/// What a diff compares of one turn.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnFacts {
    /// The prompt's text.
    pub prompt: String,
    /// The agent's reply text, chunks joined.
    pub reply: String,
    /// The tool calls, in the order they were opened.
    pub tool_calls: Vec<ToolCallFacts>,
    /// The stop reason (`error`, `unfinished` when there is none).
    pub stop_reason: String,
    /// The turn's tokens, when reported.
    pub tokens: Option<u64>,
    /// The turn's cost, when reported.
    pub cost: Option<Cost>,
    /// Milliseconds from prompt to end.
    pub wall_ms: Option<i64>,
}

impl TurnFacts {
    /// The facts of a recorded turn.
    pub fn of(turn: &RecordedTurn) -> TurnFacts {
        let mut reply = String::new();
        let mut calls: Vec<(String, ToolCallFacts)> = Vec::new();
        for u in turn.updates() {
            match u.get("sessionUpdate").and_then(Value::as_str) {
                Some("agent_message_chunk") => {
                    if let Some(t) = u.get("content").and_then(|c| c.get("text")) {
                        reply.push_str(t.as_str().unwrap_or(""));
                    }
                }
                Some(kind @ ("tool_call" | "tool_call_update")) => {
                    let id = u.get("toolCallId").and_then(Value::as_str).unwrap_or("");
                    let at = match calls.iter().position(|(i, _)| i == id) {
                        Some(at) => at,
                        None if kind == "tool_call" || !id.is_empty() => {
                            calls.push((
                                id.to_owned(),
                                ToolCallFacts {
                                    title: String::new(),
                                    kind: None,
                                    status: None,
                                    files: Vec::new(),
                                },
                            ));
                            calls.len() - 1
                        }
                        None => continue,
                    };
                    fold_tool_call(&mut calls[at].1, u);
                }
                _ => {}
            }
        }
        TurnFacts {
            prompt: turn.prompt_text(),
            reply,
            tool_calls: calls.into_iter().map(|(_, c)| c).collect(),
            stop_reason: turn.outcome().to_owned(),
            tokens: turn.tokens(),
            cost: turn.cost.clone(),
            wall_ms: turn.wall_ms(),
        }
    }

    fn to_json(&self) -> Value {
        json!({
            "prompt": self.prompt,
            "reply": self.reply,
            "toolCalls": self.tool_calls.iter().map(|c| json!({
                "title": c.title, "kind": c.kind, "status": c.status, "files": c.files,
            })).collect::<Vec<_>>(),
            "stopReason": self.stop_reason,
            "tokens": self.tokens,
            "cost": self.cost.as_ref().map(|c| json!({"amount": c.amount, "currency": c.currency})),
            "wallMs": self.wall_ms,
        })
    }
}

fn fold_tool_call(call: &mut ToolCallFacts, u: &Value) {
    if let Some(t) = u.get("title").and_then(Value::as_str) {
        call.title = t.to_owned();
    }
    if let Some(k) = u.get("kind").and_then(Value::as_str) {
        call.kind = Some(k.to_owned());
    }
    if let Some(s) = u.get("status").and_then(Value::as_str) {
        call.status = Some(s.to_owned());
    }
    let located = u
        .get("locations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|l| l.get("path").and_then(Value::as_str));
    let diffed = u
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|c| c.get("type").and_then(Value::as_str) == Some("diff"))
        .filter_map(|c| c.get("path").and_then(Value::as_str));
    for path in located.chain(diffed) {
        if !call.files.iter().any(|f| f == path) {
            call.files.push(path.to_owned());
        }
    }
    call.files.sort();
}

/// One pair of turns.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnDiff {
    /// 0-based.
    pub index: usize,
    /// A's turn, if A has one at this place.
    pub a: Option<TurnFacts>,
    /// B's turn, if B has one at this place.
    pub b: Option<TurnFacts>,
    /// What differs: `prompt`, `reply`, `toolCalls`, `stopReason`, `tokens`, `cost`, or
    /// `missing` when one side has no turn here.
    pub differences: Vec<&'static str>,
}

impl TurnDiff {
    /// Whether anything but wall time differs.
    pub fn differs(&self) -> bool {
        !self.differences.is_empty()
    }
}

/// Two sessions compared.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionDiff {
    /// A's record id and agent command.
    pub a: (String, String),
    /// B's record id and agent command.
    pub b: (String, String),
    /// The turns, paired by place.
    pub turns: Vec<TurnDiff>,
}

impl SessionDiff {
    /// Whether any turn differs.
    pub fn differs(&self) -> bool {
        self.turns.iter().any(TurnDiff::differs)
    }

    /// The JSON form: `{"a": {…}, "b": {…}, "differs", "turns": [{"index", "differs",
    /// "differences", "a", "b"}]}`.
    pub fn to_json(&self) -> Value {
        let side = |(id, agent): &(String, String), n: usize| json!({"acpxRecordId": id, "agentCommand": agent, "turns": n});
        let count = |f: fn(&TurnDiff) -> bool| self.turns.iter().filter(|t| f(t)).count();
        json!({
            "a": side(&self.a, count(|t| t.a.is_some())),
            "b": side(&self.b, count(|t| t.b.is_some())),
            "differs": self.differs(),
            "turns": self.turns.iter().map(|t| json!({
                "index": t.index,
                "differs": t.differs(),
                "differences": t.differences,
                "a": t.a.as_ref().map(TurnFacts::to_json),
                "b": t.b.as_ref().map(TurnFacts::to_json),
            })).collect::<Vec<_>>(),
        })
    }
}

/// Compares `a` and `b` turn by turn.
pub fn diff(a: &Recording, b: &Recording) -> SessionDiff {
    let n = a.turns.len().max(b.turns.len());
    let turns = (0..n)
        .map(|i| {
            let fa = a.turns.get(i).map(TurnFacts::of);
            let fb = b.turns.get(i).map(TurnFacts::of);
            let differences = match (&fa, &fb) {
                (Some(x), Some(y)) => differences(x, y),
                _ => vec!["missing"],
            };
            TurnDiff {
                index: i,
                a: fa,
                b: fb,
                differences,
            }
        })
        .collect();
    SessionDiff {
        a: (a.record_id.to_string(), a.agent_command.clone()),
        b: (b.record_id.to_string(), b.agent_command.clone()),
        turns,
    }
}

fn differences(a: &TurnFacts, b: &TurnFacts) -> Vec<&'static str> {
    let mut d = Vec::new();
    if a.prompt != b.prompt {
        d.push("prompt");
    }
    if a.reply != b.reply {
        d.push("reply");
    }
    if a.tool_calls != b.tool_calls {
        d.push("toolCalls");
    }
    if a.stop_reason != b.stop_reason {
        d.push("stopReason");
    }
    if a.tokens != b.tokens {
        d.push("tokens");
    }
    if a.cost != b.cost {
        d.push("cost");
    }
    d
}

/// ANSI colours for a terminal, or none.
#[derive(Debug, Clone, Copy)]
struct Paint(bool);

impl Paint {
    fn wrap(self, code: &str, text: &str) -> String {
        if self.0 {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }
    fn side_a(self, t: &str) -> String {
        self.wrap("31", t)
    }
    fn side_b(self, t: &str) -> String {
        self.wrap("32", t)
    }
    fn bold(self, t: &str) -> String {
        self.wrap("1", t)
    }
}

/// The text form, one block per turn; `colour` marks A's side red and B's green (for a
/// terminal only).
pub fn render_text(d: &SessionDiff, colour: bool) -> String {
    let p = Paint(colour);
    let mut out = format!(
        "{} {} ({})\n{} {} ({})\n",
        p.side_a("A"),
        d.a.0,
        d.a.1,
        p.side_b("B"),
        d.b.0,
        d.b.1
    );
    for t in &d.turns {
        let prompt =
            t.a.as_ref()
                .or(t.b.as_ref())
                .map(|f| one_line(&f.prompt, 60))
                .unwrap_or_default();
        let verdict = if t.differs() {
            p.bold("differs")
        } else {
            "same".to_owned()
        };
        out.push_str(&format!("turn {}  {verdict}  {prompt:?}\n", t.index + 1));
        let (Some(a), Some(b)) = (&t.a, &t.b) else {
            let side = if t.a.is_none() { "A" } else { "B" };
            out.push_str(&format!("  {side} has no turn {}\n", t.index + 1));
            continue;
        };
        for what in &t.differences {
            match *what {
                "prompt" => pair(
                    &mut out,
                    p,
                    "prompt",
                    &one_line(&a.prompt, 70),
                    &one_line(&b.prompt, 70),
                ),
                "reply" => pair(
                    &mut out,
                    p,
                    "reply",
                    &one_line(&a.reply, 70),
                    &one_line(&b.reply, 70),
                ),
                "toolCalls" => pair(
                    &mut out,
                    p,
                    "tool calls",
                    &tools_line(&a.tool_calls),
                    &tools_line(&b.tool_calls),
                ),
                "stopReason" => pair(&mut out, p, "stop reason", &a.stop_reason, &b.stop_reason),
                "tokens" => pair(&mut out, p, "tokens", &opt(a.tokens), &opt(b.tokens)),
                "cost" => pair(
                    &mut out,
                    p,
                    "cost",
                    &cost_text(a.cost.as_ref()),
                    &cost_text(b.cost.as_ref()),
                ),
                _ => {}
            }
        }
        out.push_str(&format!(
            "  wall time    {} → {}\n",
            ms_text(a.wall_ms),
            ms_text(b.wall_ms)
        ));
    }
    let differing = d.turns.iter().filter(|t| t.differs()).count();
    out.push_str(&format!("{differing} of {} turns differ\n", d.turns.len()));
    out
}

fn pair(out: &mut String, p: Paint, label: &str, a: &str, b: &str) {
    out.push_str(&format!(
        "  {label:<12} {} {}\n",
        p.side_a("A"),
        p.side_a(a)
    ));
    out.push_str(&format!("  {:<12} {} {}\n", "", p.side_b("B"), p.side_b(b)));
}

fn tools_line(calls: &[ToolCallFacts]) -> String {
    if calls.is_empty() {
        return "(none)".into();
    }
    calls
        .iter()
        .map(|c| {
            let mut s = format!("{} [{}]", c.title, c.status.as_deref().unwrap_or("?"));
            if !c.files.is_empty() {
                s.push_str(&format!(" {}", c.files.join(",")));
            }
            s
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn opt(v: Option<u64>) -> String {
    v.map_or_else(|| "-".into(), |v| v.to_string())
}

/// A cost as a person reads it (`0.0100 USD`), or `-`.
pub fn cost_text(c: Option<&Cost>) -> String {
    c.map_or_else(|| "-".into(), |c| format!("{:.4} {}", c.amount, c.currency))
}

/// Milliseconds as a person reads them (`850 ms`, `2.4 s`), or `-`.
pub fn ms_text(ms: Option<i64>) -> String {
    match ms {
        None => "-".into(),
        Some(ms) if ms < 1000 => format!("{ms} ms"),
        Some(ms) => format!("{:.1} s", ms as f64 / 1000.0),
    }
}

/// The first `max` characters of `text` on one line (control characters shown as spaces).
fn one_line(text: &str, max: usize) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let mut cut: String = flat.chars().take(max).collect();
    if flat.chars().count() > max {
        cut.push('…');
    }
    cut
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recording::{Action, Step};
    use acpx_model::{RecordId, Timestamp};
    use serde_json::json;

    fn turn(index: usize, reply: &str, path: &str, stop: &str) -> RecordedTurn {
        let at = Timestamp::from_millis(1000).expect("a time");
        let update = |u: Value| Step {
            at,
            action: Action::Update(u),
        };
        RecordedTurn {
            index,
            request_id: None,
            prompt: vec![json!({"type": "text", "text": "go"})],
            started_at: at,
            ended_at: Timestamp::from_millis(1500),
            steps: vec![
                update(
                    json!({"sessionUpdate": "tool_call", "toolCallId": format!("id-{reply}"), "title": "Edit", "kind": "edit", "status": "pending", "locations": [{"path": path}]}),
                ),
                update(
                    json!({"sessionUpdate": "tool_call_update", "toolCallId": format!("id-{reply}"), "status": "completed"}),
                ),
                update(
                    json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": reply}}),
                ),
            ],
            stop_reason: Some(stop.into()),
            error: None,
            usage: Some(json!({"totalTokens": 10})),
            cost: None,
        }
    }

    fn recording(turns: Vec<RecordedTurn>) -> Recording {
        Recording {
            record_id: RecordId::generate(),
            agent_command: "agent".into(),
            cwd: "/".into(),
            initialized: None,
            session_setup: None,
            turns,
        }
    }

    #[test]
    fn same_turns_with_other_ids_do_not_differ() {
        let a = recording(vec![turn(0, "ok", "/a", "end_turn")]);
        let mut t = turn(0, "ok", "/a", "end_turn");
        t.ended_at = Timestamp::from_millis(9000);
        let b = recording(vec![t]);
        let d = diff(&a, &b);
        assert!(!d.differs());
        let j = d.to_json();
        assert_eq!(j["turns"][0]["differs"], json!(false));
        assert_eq!(j["turns"][0]["b"]["wallMs"], json!(8000));
    }

    #[test]
    fn reply_files_stop_reason_and_missing_turns_differ() {
        let a = recording(vec![
            turn(0, "ok", "/a", "end_turn"),
            turn(1, "x", "/a", "end_turn"),
        ]);
        let b = recording(vec![turn(0, "no", "/b", "cancelled")]);
        let d = diff(&a, &b);
        assert_eq!(
            d.turns[0].differences,
            vec!["reply", "toolCalls", "stopReason"]
        );
        assert_eq!(d.turns[1].differences, vec!["missing"]);
        let text = render_text(&d, false);
        assert!(text.contains("turn 1  differs"), "{text}");
        assert!(text.contains("B has no turn 2"), "{text}");
        assert!(!text.contains('\x1b'));
        assert!(render_text(&d, true).contains("\x1b[31m"));
    }
}
