//! The one walk over a session's log that both exports share: it folds the events of each
//! turn (`prompt_started` … `prompt_done` / `prompt_error`) into a [`Turn`] and keeps the
//! facts of the whole session ([`SessionFacts`]: the agent's name and version from
//! `initialize`, the model in use, the cumulative cost) as it goes. A turn is handed back as
//! soon as it ends, so an export holds one turn at a time, never the whole log.

use acpx_model::{EventEnvelope, EventType, Timestamp};
use serde_json::{Map, Value};

/// What the walk knows of the session as a whole, so far.
#[derive(Debug, Clone, Default)]
pub struct SessionFacts {
    /// `agentInfo.name` of the latest `initialized` lifecycle event.
    pub agent_name: Option<String>,
    /// `agentInfo.version` of the latest `initialized` lifecycle event.
    pub agent_version: Option<String>,
    /// Every distinct `name version` the agent reported, oldest first (an agent upgraded
    /// between turns reports another).
    pub agent_versions: Vec<String>,
    /// The model in use: the current value of the agent's model config option, or the
    /// unstable `models.currentModelId`, as the latest session event or control set it.
    pub model: Option<String>,
    /// The latest cumulative cost the agent reported (`usage_update.cost`).
    pub cost: Option<Cost>,
    /// The latest context window report (`usage_update.used` / `size`).
    pub context: Option<(u64, u64)>,
    /// The first and the last event's timestamps.
    pub first_at: Option<Timestamp>,
    /// See `first_at`.
    pub last_at: Option<Timestamp>,
    /// How many turns the walk handed back.
    pub turns: usize,
    model_option_id: Option<String>,
}

/// A cost the agent reported.
#[derive(Debug, Clone, PartialEq)]
pub struct Cost {
    /// The amount, in `currency`.
    pub amount: f64,
    /// ISO 4217 code, as the agent sent it (`USD`, …).
    pub currency: String,
}

/// The token counts of a turn's `usage` (the `session/prompt` response), as reported.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TurnUsage {
    /// `inputTokens`.
    pub input: Option<u64>,
    /// `outputTokens`.
    pub output: Option<u64>,
    /// `cachedReadTokens`.
    pub cached_read: Option<u64>,
    /// `cachedWriteTokens`.
    pub cached_write: Option<u64>,
    /// `thoughtTokens`.
    pub thought: Option<u64>,
    /// `totalTokens`.
    pub total: Option<u64>,
}

/// One piece of what the agent did in a turn, in the order it happened.
#[derive(Debug, Clone)]
pub enum Item {
    /// Text of the agent's reply (consecutive chunks joined), and its first chunk's time.
    Message(String, Timestamp),
    /// The agent's reasoning (consecutive thought chunks joined), and its first chunk's time.
    Thought(String, Timestamp),
    /// A tool call, by its index in [`Turn::tool_calls`].
    ToolCall(usize),
}

/// A tool call of a turn, with every update of it folded in.
#[derive(Debug, Clone)]
pub struct ToolCall {
    /// The ACP `toolCallId`.
    pub id: String,
    /// The ACP `title`.
    pub title: Option<String>,
    /// The ACP `kind` (`read`, `edit`, `execute`, …).
    pub kind: Option<String>,
    /// A tool name the agent put in `_meta` (`{"<agent>": {"toolName": …}}`).
    pub meta_tool_name: Option<String>,
    /// The latest `rawInput`.
    pub raw_input: Option<Value>,
    /// The latest `rawOutput`.
    pub raw_output: Option<Value>,
    /// The latest `status`.
    pub status: Option<String>,
    /// The text of its latest `content` list's `content` items.
    pub text: Vec<String>,
    /// Its `diff` content items, the latest per path: `(path, oldText, newText)`.
    pub diffs: Vec<(String, Option<String>, String)>,
    /// The terminal ids its content named.
    pub terminal_ids: Vec<String>,
    /// When it was first seen, and when last updated.
    pub started_at: Timestamp,
    /// See `started_at`.
    pub updated_at: Timestamp,
}

impl ToolCall {
    /// The name an export gives the tool: the agent's own tool name when it sent one in
    /// `_meta`, else the ACP `kind`, else the `title`, else `tool`.
    pub fn function_name(&self) -> &str {
        self.meta_tool_name
            .as_deref()
            .or(self.kind.as_deref())
            .or(self.title.as_deref())
            .unwrap_or("tool")
    }
}

/// A permission question of a turn.
#[derive(Debug, Clone)]
pub struct Permission {
    /// The tool call it was about.
    pub tool_call_id: Option<String>,
    /// The request's tool call title.
    pub title: Option<String>,
    /// When the agent asked (the decision's time for a log that kept only the decision).
    pub asked_at: Timestamp,
    /// When it was decided; `None` when the turn ended first.
    pub decided_at: Option<Timestamp>,
    /// `approved`, `denied`, `cancelled`, … as logged.
    pub decision: Option<String>,
    /// The option chosen.
    pub option_id: Option<String>,
    /// The policy that decided (`approve-all`, …).
    pub policy: Option<String>,
}

/// A request the agent made of the client (fs, terminal), other than permission questions.
#[derive(Debug, Clone)]
pub struct ClientOp {
    /// The ACP method (`fs/read_text_file`, `terminal/create`, …).
    pub method: String,
    /// `completed`, `failed`, … as logged.
    pub status: Option<String>,
    /// When acpx began to serve it (the payload's `timestamp`), and when it was logged.
    pub started_at: Timestamp,
    /// See `started_at`.
    pub ended_at: Timestamp,
    /// Its logged payload (path, bytes, terminal id, exit status, …).
    pub payload: Map<String, Value>,
}

/// How a turn ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The agent answered with this stop reason (`end_turn`, `cancelled`, `refusal`, …).
    Stopped(String),
    /// The turn failed (`prompt_error`): its `outcome` (`failed`, `timeout`, `cancelled`,
    /// `interrupted`), message, and the stop reason if the agent gave one.
    Failed {
        /// `failed`, `timeout`, `cancelled`, `interrupted`.
        outcome: String,
        /// What went wrong.
        message: Option<String>,
        /// The agent's stop reason, if it answered.
        stop_reason: Option<String>,
    },
    /// The log ends inside the turn (acpx stopped mid-turn, or the turn still runs).
    Unfinished,
}

/// One prompt turn, folded from its events.
#[derive(Debug, Clone)]
pub struct Turn {
    /// The turn's `requestId`.
    pub request_id: String,
    /// 1 for the first turn of the log.
    pub index: usize,
    /// `prompt_started`'s time, and the time of the event that ended the turn.
    pub started_at: Timestamp,
    /// See `started_at`.
    pub ended_at: Timestamp,
    /// The ACP session id the turn ran in.
    pub acp_session_id: String,
    /// The prompt's ACP content blocks.
    pub prompt: Vec<Value>,
    /// The model in use when the turn started.
    pub model: Option<String>,
    /// What the agent did, in order.
    pub items: Vec<Item>,
    /// The turn's tool calls.
    pub tool_calls: Vec<ToolCall>,
    /// The turn's permission questions.
    pub permissions: Vec<Permission>,
    /// The turn's fs and terminal operations.
    pub client_ops: Vec<ClientOp>,
    /// The turn's token usage, when the agent reported it.
    pub usage: Option<TurnUsage>,
    /// What the turn cost: the rise of the cumulative cost during the turn (in the currency
    /// of the latest report), when the agent reported one.
    pub cost: Option<Cost>,
    /// How it ended.
    pub outcome: Outcome,
}

impl Turn {
    /// The prompt's text: its text blocks joined by blank lines, and a `[kind]` mark for each
    /// other block (an image, a resource link, …).
    pub fn prompt_text(&self) -> String {
        let parts: Vec<String> = self
            .prompt
            .iter()
            .map(
                |b| match (b.get("type").and_then(Value::as_str), b.get("text")) {
                    (Some("text"), Some(Value::String(t))) => t.clone(),
                    (Some("resource_link"), _) => format!(
                        "[resource_link {}]",
                        b.get("uri").and_then(Value::as_str).unwrap_or("")
                    ),
                    (Some(kind), _) => format!("[{kind}]"),
                    (None, _) => "[content]".to_string(),
                },
            )
            .collect();
        parts.join("\n\n")
    }

    /// The stop reason, when the agent gave one.
    pub fn stop_reason(&self) -> Option<&str> {
        match &self.outcome {
            Outcome::Stopped(r) => Some(r),
            Outcome::Failed { stop_reason, .. } => stop_reason.as_deref(),
            Outcome::Unfinished => None,
        }
    }
}

/// The walk: feed it every event of the log, oldest first ([`Walk::push`]), then
/// [`Walk::finish`].
#[derive(Debug, Default)]
pub struct Walk {
    facts: SessionFacts,
    turn: Option<Turn>,
    cost_at_turn_start: Option<Cost>,
    cost_reported_in_turn: bool,
    copied: Option<Value>,
}

fn str_of(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_owned)
}

fn ts_of(v: &Value, key: &str) -> Option<Timestamp> {
    v.get(key)
        .and_then(Value::as_str)
        .and_then(|s| Timestamp::parse(s).ok())
}

impl Walk {
    /// A walk that has seen nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// What the walk knows of the session so far.
    pub fn facts(&self) -> &SessionFacts {
        &self.facts
    }

    /// The conversation a fork starts from (`session_forked`'s `thread`), once, as soon as
    /// the walk has seen it.
    pub fn take_copied(&mut self) -> Option<Value> {
        self.copied.take()
    }

    /// Folds one event in; returns the turn it ended, if any. An event outside any turn
    /// only updates the session's facts.
    pub fn push(&mut self, e: &EventEnvelope) -> Option<Turn> {
        if self.facts.first_at.is_none() {
            self.facts.first_at = Some(e.timestamp);
        }
        self.facts.last_at = Some(e.timestamp);
        let p = &e.payload;
        match &e.event_type {
            EventType::LifecycleEvent => {
                self.lifecycle(p);
                None
            }
            EventType::PromptStarted => {
                // A turn the log never closed (acpx stopped mid-turn) ends where the next begins.
                let unfinished = self.turn.take().map(|t| self.close(t, e.timestamp));
                self.cost_at_turn_start = self.facts.cost.clone();
                self.cost_reported_in_turn = false;
                self.turn = Some(Turn {
                    request_id: e.request_id.clone().unwrap_or_default(),
                    index: self.facts.turns + 1,
                    started_at: e.timestamp,
                    ended_at: e.timestamp,
                    acp_session_id: e.acp_session_id.clone(),
                    prompt: p
                        .get("prompt")
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_else(|| {
                            // Older logs keep only the preview.
                            vec![serde_json::json!({"type": "text",
                                "text": str_of(p, "message_preview").unwrap_or_default()})]
                        }),
                    model: self.facts.model.clone(),
                    items: Vec::new(),
                    tool_calls: Vec::new(),
                    permissions: Vec::new(),
                    client_ops: Vec::new(),
                    usage: None,
                    cost: None,
                    outcome: Outcome::Unfinished,
                });
                unfinished
            }
            EventType::SessionUpdate => {
                self.update(e);
                None
            }
            EventType::ClientOperation => {
                if let Some(t) = self.turn_of(e) {
                    client_operation(t, e);
                }
                None
            }
            EventType::ControlDone => {
                self.control(p);
                None
            }
            EventType::PromptDone | EventType::PromptError => {
                self.turn_of(e)?;
                let mut turn = self.turn.take()?;
                if let Some(u) = p.get("usage").filter(|u| u.is_object()) {
                    turn.usage = Some(usage_of(u));
                }
                turn.outcome = if e.event_type == EventType::PromptDone {
                    Outcome::Stopped(str_of(p, "stopReason").unwrap_or_else(|| "end_turn".into()))
                } else {
                    Outcome::Failed {
                        outcome: str_of(p, "outcome").unwrap_or_else(|| "failed".into()),
                        message: str_of(p, "message")
                            .or_else(|| p.get("acp").and_then(|a| str_of(a, "message"))),
                        stop_reason: str_of(p, "stopReason"),
                    }
                };
                Some(self.close(turn, e.timestamp))
            }
            _ => None,
        }
    }

    /// Ends the walk: the last turn if the log ends inside it ([`Outcome::Unfinished`]).
    pub fn finish(&mut self) -> Option<Turn> {
        let t = self.turn.take()?;
        let at = self.facts.last_at.unwrap_or(t.started_at);
        Some(self.close(t, at))
    }

    fn close(&mut self, mut t: Turn, at: Timestamp) -> Turn {
        t.ended_at = at;
        // `usage_update.cost` is the session's cumulative cost: a turn's is its rise.
        t.cost = match (&self.cost_at_turn_start, &self.facts.cost) {
            _ if !self.cost_reported_in_turn => None,
            (Some(a), Some(b)) if a.currency == b.currency => Some(Cost {
                amount: (b.amount - a.amount).max(0.0),
                currency: b.currency.clone(),
            }),
            (None, Some(b)) => Some(b.clone()),
            _ => None,
        };
        self.cost_reported_in_turn = false;
        self.cost_at_turn_start = self.facts.cost.clone();
        self.facts.turns += 1;
        t.index = self.facts.turns;
        t
    }

    /// The running turn, when `e` belongs to it.
    fn turn_of(&mut self, e: &EventEnvelope) -> Option<&mut Turn> {
        self.turn
            .as_mut()
            .filter(|t| e.request_id.as_deref().is_none_or(|r| r == t.request_id))
    }

    fn lifecycle(&mut self, p: &Value) {
        if p.get("phase").and_then(Value::as_str) == Some("session_forked") {
            self.copied = p.get("thread").filter(|t| t.is_object()).cloned();
        }
        if let Some(info) = p.get("agentInfo").filter(|i| i.is_object()) {
            let name = str_of(info, "name");
            let version = str_of(info, "version");
            if name.is_some() {
                let both = format!(
                    "{} {}",
                    name.as_deref().unwrap_or(""),
                    version.as_deref().unwrap_or("")
                );
                if !self.facts.agent_versions.contains(&both) {
                    self.facts.agent_versions.push(both);
                }
                self.facts.agent_name = name;
                self.facts.agent_version = version;
            }
        }
        if let Some(opts) = p.get("configOptions").and_then(Value::as_array) {
            self.config_options(opts);
        }
        if let Some(m) = p.get("models").and_then(|m| str_of(m, "currentModelId")) {
            self.facts.model = Some(m);
        }
        // A fork starts from its parent's state.
        if let Some(state) = p.get("state") {
            if let Some(opts) = state.get("configOptions").and_then(Value::as_array) {
                self.config_options(opts);
            }
            if let Some(m) = str_of(state, "desiredModelId") {
                self.facts.model = Some(m);
            }
        }
    }

    fn config_options(&mut self, opts: &[Value]) {
        for o in opts {
            let is_model = o.get("category").and_then(Value::as_str) == Some("model")
                || o.get("id").and_then(Value::as_str) == Some("model");
            if is_model {
                self.facts.model_option_id = str_of(o, "id");
                if let Some(v) = o.get("currentValue").and_then(Value::as_str) {
                    self.facts.model = Some(v.to_owned());
                }
            }
        }
    }

    fn control(&mut self, p: &Value) {
        let Some(input) = p.get("input") else { return };
        if let Some(m) = str_of(input, "modelId") {
            self.facts.model = Some(m);
        } else if let (Some(id), Some(v)) = (str_of(input, "configId"), str_of(input, "value")) {
            if self.facts.model_option_id.as_deref() == Some(id.as_str()) {
                self.facts.model = Some(v);
            }
        }
    }

    fn update(&mut self, e: &EventEnvelope) {
        let Some(u) = e.payload.get("update") else {
            return;
        };
        let kind = u.get("sessionUpdate").and_then(Value::as_str).unwrap_or("");
        match kind {
            "usage_update" => {
                if let (Some(used), Some(size)) = (
                    u.get("used").and_then(Value::as_u64),
                    u.get("size").and_then(Value::as_u64),
                ) {
                    self.facts.context = Some((used, size));
                }
                if let Some(c) = u.get("cost").filter(|c| c.is_object()) {
                    if let (Some(amount), Some(currency)) = (
                        c.get("amount").and_then(Value::as_f64),
                        str_of(c, "currency"),
                    ) {
                        self.facts.cost = Some(Cost { amount, currency });
                        self.cost_reported_in_turn |= self.turn.is_some();
                    }
                }
                return;
            }
            "config_option_update" => {
                if let Some(opts) = u.get("configOptions").and_then(Value::as_array) {
                    self.config_options(opts);
                }
                return;
            }
            _ => {}
        }
        let at = e.timestamp;
        let Some(t) = self.turn_of(e) else { return };
        match kind {
            "agent_message_chunk" | "agent_thought_chunk" => {
                let text = content_text(u.get("content"));
                let thought = kind == "agent_thought_chunk";
                match (t.items.last_mut(), thought) {
                    (Some(Item::Message(s, _)), false) | (Some(Item::Thought(s, _)), true) => {
                        s.push_str(&text)
                    }
                    _ if thought => t.items.push(Item::Thought(text, at)),
                    _ => t.items.push(Item::Message(text, at)),
                }
            }
            "tool_call" | "tool_call_update" => tool_call_update(t, u, at),
            _ => {}
        }
    }
}

fn usage_of(u: &Value) -> TurnUsage {
    let n = |k: &str| u.get(k).and_then(Value::as_u64);
    TurnUsage {
        input: n("inputTokens"),
        output: n("outputTokens"),
        cached_read: n("cachedReadTokens"),
        cached_write: n("cachedWriteTokens"),
        thought: n("thoughtTokens"),
        total: n("totalTokens"),
    }
}

/// The text of an ACP content block (`[kind]` for a block without text).
fn content_text(c: Option<&Value>) -> String {
    match c {
        Some(c) => match c.get("text").and_then(Value::as_str) {
            Some(t) => t.to_owned(),
            None => format!(
                "[{}]",
                c.get("type").and_then(Value::as_str).unwrap_or("content")
            ),
        },
        None => String::new(),
    }
}

/// Applies a `tool_call` / `tool_call_update` (or a permission request's `toolCall`) to the
/// turn's call of that id, creating it when new.
fn tool_call_update(t: &mut Turn, u: &Value, at: Timestamp) {
    let Some(id) = str_of(u, "toolCallId") else {
        return;
    };
    let i = match t.tool_calls.iter().position(|c| c.id == id) {
        Some(i) => i,
        None => {
            t.tool_calls.push(ToolCall {
                id,
                title: None,
                kind: None,
                meta_tool_name: None,
                raw_input: None,
                raw_output: None,
                status: None,
                text: Vec::new(),
                diffs: Vec::new(),
                terminal_ids: Vec::new(),
                started_at: at,
                updated_at: at,
            });
            t.items.push(Item::ToolCall(t.tool_calls.len() - 1));
            t.tool_calls.len() - 1
        }
    };
    let c = &mut t.tool_calls[i];
    c.updated_at = at;
    let set = |slot: &mut Option<String>, key: &str| {
        if let Some(v) = str_of(u, key).filter(|v| !v.is_empty()) {
            *slot = Some(v);
        }
    };
    set(&mut c.title, "title");
    set(&mut c.kind, "kind");
    set(&mut c.status, "status");
    if let Some(meta) = u.get("_meta").and_then(Value::as_object) {
        if let Some(name) = meta.values().find_map(|m| str_of(m, "toolName")) {
            c.meta_tool_name = Some(name);
        }
    }
    if let Some(v) = u.get("rawInput").filter(|v| !is_empty(v)) {
        c.raw_input = Some(v.clone());
    }
    if let Some(v) = u.get("rawOutput").filter(|v| !v.is_null()) {
        c.raw_output = Some(v.clone());
    }
    if let Some(items) = u.get("content").and_then(Value::as_array) {
        c.text.clear();
        for item in items {
            match item.get("type").and_then(Value::as_str) {
                Some("content") => c.text.push(content_text(item.get("content"))),
                Some("diff") => {
                    let path = str_of(item, "path").unwrap_or_default();
                    let old = str_of(item, "oldText");
                    let new = str_of(item, "newText").unwrap_or_default();
                    match c.diffs.iter_mut().find(|d| d.0 == path) {
                        Some(d) => *d = (path, old, new),
                        None => c.diffs.push((path, old, new)),
                    }
                }
                Some("terminal") => {
                    if let Some(tid) = str_of(item, "terminalId") {
                        if !c.terminal_ids.contains(&tid) {
                            c.terminal_ids.push(tid);
                        }
                    }
                }
                _ => {}
            }
        }
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        Value::String(s) => s.is_empty(),
        _ => false,
    }
}

fn client_operation(t: &mut Turn, e: &EventEnvelope) {
    let p = &e.payload;
    let method = str_of(p, "method").unwrap_or_default();
    let status = str_of(p, "status");
    let started_at = ts_of(p, "timestamp")
        .filter(|s| *s <= e.timestamp)
        .unwrap_or(e.timestamp);
    if method == "session/request_permission" {
        if status.as_deref() == Some("running") {
            let call = p.get("toolCall").cloned().unwrap_or(Value::Null);
            if call.is_object() {
                tool_call_update(t, &call, e.timestamp);
            }
            t.permissions.push(Permission {
                tool_call_id: str_of(&call, "toolCallId"),
                title: str_of(&call, "title"),
                asked_at: started_at,
                decided_at: None,
                decision: None,
                option_id: None,
                policy: None,
            });
            return;
        }
        let call_id = str_of(p, "toolCallId");
        let open = t
            .permissions
            .iter()
            .rposition(|q| q.decided_at.is_none() && q.tool_call_id == call_id);
        let i = match open {
            Some(i) => i,
            None => {
                // A log written before requests were recorded has only the decision.
                t.permissions.push(Permission {
                    tool_call_id: call_id,
                    title: None,
                    asked_at: started_at,
                    decided_at: None,
                    decision: None,
                    option_id: None,
                    policy: None,
                });
                t.permissions.len() - 1
            }
        };
        let q = &mut t.permissions[i];
        q.decided_at = Some(e.timestamp);
        q.decision = str_of(p, "decision").or(status);
        q.option_id = str_of(p, "optionId");
        q.policy = str_of(p, "policy");
        return;
    }
    let mut payload = p.as_object().cloned().unwrap_or_default();
    for k in ["method", "status", "summary", "details", "timestamp"] {
        payload.remove(k);
    }
    t.client_ops.push(ClientOp {
        method,
        status,
        started_at,
        ended_at: e.timestamp,
        payload,
    });
}
