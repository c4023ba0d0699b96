//! The viewer's fold of the event log: events, in seq order, become the items of a turn
//! (messages with their chunks joined, tool calls with their updates, permission questions
//! and answers, terminals, plans, notes). A turn is held until it ends, then written and
//! dropped; the page never holds more than one turn.

use std::collections::HashMap;

use acpx_model::EventEnvelope;
use serde_json::Value;

pub use super::items::{
    exit_text, str_of, At, Capped, Cost, Item, NoteKind, Permission, Terminal, ToolCall, Turn,
    TurnEnd, TEXT_CAP,
};

impl Turn {
    /// An empty turn.
    pub fn new(number: u32, at: Option<At>, request_id: Option<String>) -> Self {
        Turn {
            number,
            at,
            request_id,
            prompt: String::new(),
            attachments: Vec::new(),
            items: Vec::new(),
            tools: HashMap::new(),
            written: 0,
            head_written: false,
            late_updates: 0,
            terminals: HashMap::new(),
            end: None,
            usage: None,
            cost: None,
            context: None,
        }
    }

    /// Takes `prompt_started`'s prompt blocks.
    pub fn set_prompt(&mut self, payload: &Value) {
        match payload.get("prompt").and_then(Value::as_array) {
            Some(blocks) => {
                for b in blocks {
                    match str_of(b, "type") {
                        Some("text") => {
                            if !self.prompt.is_empty() {
                                self.prompt.push('\n');
                            }
                            self.prompt.push_str(str_of(b, "text").unwrap_or(""));
                        }
                        _ => self.attachments.push(describe_block(b)),
                    }
                }
            }
            None => self.prompt = str_of(payload, "message_preview").unwrap_or("").to_owned(),
        }
    }

    /// Applies one event of the turn.
    pub fn apply(&mut self, e: &EventEnvelope) {
        match e.event_type.as_str() {
            "session_update" => self.session_update(e),
            "client_operation" => self.client_operation(e),
            "prompt_done" => {
                self.usage = e.payload.get("usage").filter(|u| u.is_object()).cloned();
                self.end = Some(TurnEnd {
                    at: At::of(e),
                    reason: str_of(&e.payload, "stopReason")
                        .unwrap_or("done")
                        .to_owned(),
                    failed: false,
                    message: None,
                });
            }
            "prompt_error" => {
                let p = &e.payload;
                let reason = str_of(p, "outcome")
                    .or_else(|| str_of(p, "stopReason"))
                    .unwrap_or("failed");
                self.end = Some(TurnEnd {
                    at: At::of(e),
                    reason: reason.to_owned(),
                    failed: true,
                    message: str_of(p, "message").map(str::to_owned),
                });
            }
            "queue_event" | "control_started" => {}
            _ => super::notes::note_of(e, &mut self.items),
        }
    }

    fn session_update(&mut self, e: &EventEnvelope) {
        let Some(update) = e.payload.get("update") else {
            return;
        };
        let tag = str_of(update, "sessionUpdate").unwrap_or("");
        let text = || content_text(update.get("content"));
        match tag {
            "agent_message_chunk" => match self.items.last_mut() {
                Some(Item::Message(_, t)) => t.push(&text()),
                _ => self.items.push(Item::Message(At::of(e), capped(&text()))),
            },
            "agent_thought_chunk" => match self.items.last_mut() {
                Some(Item::Thought(_, t)) => t.push(&text()),
                _ => self.items.push(Item::Thought(At::of(e), capped(&text()))),
            },
            "user_message_chunk" => match self.items.last_mut() {
                Some(Item::User(_, t)) => t.push(&text()),
                _ => self.items.push(Item::User(At::of(e), capped(&text()))),
            },
            "tool_call" | "tool_call_update" => self.tool_update(e, update),
            "plan" => {
                let entries = update
                    .get("entries")
                    .and_then(Value::as_array)
                    .map(|es| {
                        es.iter()
                            .map(|x| {
                                let f = |k| str_of(x, k).unwrap_or("").to_owned();
                                (f("content"), f("status"), f("priority"))
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                self.items.push(Item::Plan(At::of(e), entries));
            }
            "usage_update" => {
                if let (Some(used), Some(size)) = (
                    update.get("used").and_then(Value::as_u64),
                    update.get("size").and_then(Value::as_u64),
                ) {
                    self.context = Some((used, size));
                }
                if let Some(cost) = update.get("cost").and_then(cost_of) {
                    self.cost = Some(cost);
                }
            }
            _ => super::notes::update_note(e, tag, update, &mut self.items),
        }
    }

    /// The tool call `id`, created (at `e`) when the turn has not seen it.
    fn tool(&mut self, id: &str, e: &EventEnvelope) -> Option<&mut ToolCall> {
        let index = match self.tools.get(id) {
            Some(&i) if i < self.written => {
                self.late_updates += 1;
                return None;
            }
            Some(&i) => i - self.written,
            None => {
                self.items.push(Item::Tool(Box::new(ToolCall {
                    at: At::of(e),
                    id: id.to_owned(),
                    kind: None,
                    title: None,
                    status: None,
                    ended: None,
                    locations: Vec::new(),
                    raw_input: None,
                    raw_output: None,
                    texts: Vec::new(),
                    diffs: Vec::new(),
                    terminals: Vec::new(),
                    permissions: Vec::new(),
                    seqs: Vec::new(),
                })));
                self.tools
                    .insert(id.to_owned(), self.written + self.items.len() - 1);
                self.items.len() - 1
            }
        };
        match &mut self.items[index] {
            Item::Tool(t) => {
                if t.seqs.last() != Some(&e.seq) {
                    t.seqs.push(e.seq);
                }
                Some(t)
            }
            // `tools` indexes tool items only.
            _ => None,
        }
    }

    /// Applies a `tool_call`, a `tool_call_update`, or a permission request's `toolCall`.
    fn tool_update(&mut self, e: &EventEnvelope, update: &Value) {
        let Some(id) = str_of(update, "toolCallId") else {
            return;
        };
        let Some(t) = self.tool(id, e) else {
            return;
        };
        let set = |slot: &mut Option<String>, key: &str| {
            if let Some(v) = str_of(update, key) {
                *slot = Some(v.to_owned());
            }
        };
        set(&mut t.kind, "kind");
        set(&mut t.title, "title");
        if let Some(status) = str_of(update, "status") {
            if matches!(status, "completed" | "failed") && t.ended.is_none() {
                t.ended = Some(e.timestamp);
            }
            t.status = Some(status.to_owned());
        }
        if let Some(locations) = update.get("locations").and_then(Value::as_array) {
            t.locations = locations
                .iter()
                .filter_map(|l| {
                    let path = str_of(l, "path")?;
                    Some(match l.get("line").and_then(Value::as_u64) {
                        Some(line) => format!("{path}:{line}"),
                        None => path.to_owned(),
                    })
                })
                .collect();
        }
        if let Some(v) = update.get("rawInput").filter(|v| !v.is_null()) {
            t.raw_input = Some(v.clone());
        }
        if let Some(v) = update.get("rawOutput").filter(|v| !v.is_null()) {
            t.raw_output = Some(v.clone());
        }
        if let Some(content) = update.get("content").and_then(Value::as_array) {
            t.texts.clear();
            for c in content {
                match str_of(c, "type") {
                    Some("diff") => {
                        let path = str_of(c, "path").unwrap_or("").to_owned();
                        let old = str_of(c, "oldText").map(str::to_owned);
                        let new = str_of(c, "newText").unwrap_or("").to_owned();
                        match t.diffs.iter_mut().find(|d| d.0 == path) {
                            Some(d) => *d = (path, old, new),
                            None => t.diffs.push((path, old, new)),
                        }
                    }
                    Some("terminal") => {
                        if let Some(tid) = str_of(c, "terminalId") {
                            if !t.terminals.iter().any(|x| x == tid) {
                                t.terminals.push(tid.to_owned());
                            }
                        }
                    }
                    _ => {
                        let text = content_text(c.get("content"));
                        if !text.is_empty() {
                            t.texts.push(text);
                        }
                    }
                }
            }
        }
    }

    fn client_operation(&mut self, e: &EventEnvelope) {
        let p = &e.payload;
        let method = str_of(p, "method").unwrap_or("");
        let status = str_of(p, "status").unwrap_or("");
        if method == "session/request_permission" {
            return self.permission(e, status);
        }
        if method.starts_with("elicitation/") {
            return super::notes::elicitation_note(e, method, status, &mut self.items);
        }
        if let Some(tid) = str_of(p, "terminalId") {
            let term = self.terminals.entry(tid.to_owned()).or_default();
            if method == "terminal/create" {
                term.created = Some(At::of(e));
                let mut cmd = str_of(p, "command").unwrap_or("").to_owned();
                for a in p
                    .get("args")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    cmd.push(' ');
                    cmd.push_str(a.as_str().unwrap_or(""));
                }
                term.command = Some(cmd);
            }
            if let Some(out) = str_of(p, "output") {
                term.output = Some(out.to_owned());
                term.truncated = p.get("truncated").and_then(Value::as_bool).unwrap_or(false);
            }
            if let Some(exit) = p.get("exitStatus").filter(|x| x.is_object()) {
                term.exit = Some(exit_text(exit));
            }
        }
        super::notes::client_note(e, method, status, &mut self.items);
    }

    fn permission(&mut self, e: &EventEnvelope, status: &str) {
        let p = &e.payload;
        let asked = status == "running";
        let call = if asked {
            p.get("toolCall")
                .and_then(|c| str_of(c, "toolCallId"))
                .map(str::to_owned)
        } else {
            str_of(p, "toolCallId").map(str::to_owned)
        };
        let mut perm = Permission::default();
        if asked {
            perm.asked = Some(At::of(e));
            perm.options = p
                .get("options")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|o| {
                    let f = |k| str_of(o, k).unwrap_or("").to_owned();
                    (f("optionId"), f("name"), f("kind"))
                })
                .collect();
            // The question carries the call as the agent described it then (the only place
            // some agents put a call's title, input and diff): applied as an update.
            if let Some(tool_call) = p.get("toolCall") {
                self.tool_update(e, tool_call);
            }
        } else {
            perm.answered = Some(At::of(e));
            perm.decision = str_of(p, "decision").map(str::to_owned);
            perm.option_id = str_of(p, "optionId").map(str::to_owned);
            perm.policy = str_of(p, "policy").map(str::to_owned);
            perm.rule = str_of(p, "rule").map(str::to_owned);
            perm.summary = str_of(p, "summary").map(str::to_owned);
        }
        let written = self.written;
        match call
            .as_deref()
            .and_then(|id| self.tools.get(id).copied())
            .and_then(|i| i.checked_sub(written))
        {
            Some(i) => {
                if let Item::Tool(t) = &mut self.items[i] {
                    if !t.seqs.contains(&e.seq) {
                        t.seqs.push(e.seq);
                    }
                    merge_permission(&mut t.permissions, perm, asked);
                }
            }
            None => {
                let title = str_of(p, "summary").unwrap_or("permission").to_owned();
                // An answer joins the question above it that has none yet.
                if !asked {
                    if let Some(Item::Permission(_, q)) = self
                        .items
                        .iter_mut()
                        .rev()
                        .find(|i| matches!(i, Item::Permission(_, q) if q.answered.is_none()))
                    {
                        let asked_at = q.asked.take();
                        let options = std::mem::take(&mut q.options);
                        *q = Permission {
                            asked: asked_at,
                            options,
                            ..perm
                        };
                        return;
                    }
                }
                self.items.push(Item::Permission(title, perm));
            }
        }
    }
}

impl Turn {
    /// Takes the items at the start of the turn that nothing later can change, to be written
    /// now: every item but the last, up to the first tool call still running or permission
    /// question still unanswered. A long turn is so written as it goes, not held whole.
    pub fn take_settled(&mut self) -> Vec<Item> {
        let last = self.items.len().saturating_sub(1);
        let n = self.items[..last]
            .iter()
            .position(|item| match item {
                Item::Tool(t) => !matches!(
                    t.status.as_deref(),
                    Some("completed" | "failed" | "cancelled")
                ),
                Item::Permission(_, p) => p.answered.is_none(),
                _ => false,
            })
            .unwrap_or(last);
        self.written += n;
        self.items.drain(..n).collect()
    }
}

/// Adds a question, or joins an answer to the last question without one.
fn merge_permission(list: &mut Vec<Permission>, perm: Permission, asked: bool) {
    if !asked {
        if let Some(q) = list.iter_mut().rev().find(|q| q.answered.is_none()) {
            q.answered = perm.answered;
            q.decision = perm.decision;
            q.option_id = perm.option_id;
            q.policy = perm.policy;
            q.rule = perm.rule;
            q.summary = perm.summary;
            return;
        }
    }
    list.push(perm);
}

fn capped(s: &str) -> Capped {
    let mut c = Capped::default();
    c.push(s);
    c
}

/// A cost `{amount, currency}`.
pub fn cost_of(v: &Value) -> Option<Cost> {
    Some(Cost {
        amount: v.get("amount").and_then(Value::as_f64)?,
        currency: str_of(v, "currency").unwrap_or("").to_owned(),
    })
}

/// The text of an ACP content block; other blocks described in brackets.
pub fn content_text(block: Option<&Value>) -> String {
    match block {
        Some(b) if str_of(b, "type") == Some("text") => str_of(b, "text").unwrap_or("").to_owned(),
        Some(b) if b.is_object() => describe_block(b),
        _ => String::new(),
    }
}

/// A non-text content block in words: `[image image/png]`, `[resource file:///x]`.
fn describe_block(b: &Value) -> String {
    let kind = str_of(b, "type").unwrap_or("content");
    let name = str_of(b, "uri")
        .or_else(|| b.get("resource").and_then(|r| str_of(r, "uri")))
        .or_else(|| str_of(b, "mimeType"))
        .unwrap_or("");
    if name.is_empty() {
        format!("[{kind}]")
    } else {
        format!("[{kind} {name}]")
    }
}
