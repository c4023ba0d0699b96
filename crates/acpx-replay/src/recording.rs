//! A session's event log read back as what happened, turn by turn: the prompts, the agent's
//! updates and permission questions with their times and answers, and how each turn ended.
//!
//! Everything in this crate starts here: `replay` sends the prompts again and answers the
//! questions as they were answered, `diff` compares two sessions' turns, `compare` sums up one
//! turn per agent, and `serve_agent` plays the updates back to a client. The log is the
//! truth (ARCHITECTURE.md), so this reads the log, not the snapshot.

use acpx_model::{EventEnvelope, EventQuery, RecordId, Store, Timestamp, PAGE_BYTES};
use serde_json::{Map, Value};

use crate::ReplayResult;

/// What a permission question was answered with in the recording.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedAnswer {
    /// `approved`, `denied` or `cancelled`, as the log says.
    pub decision: String,
    /// The option selected, if one was.
    pub option_id: Option<String>,
    /// That option's `kind` (`allow_once`, `reject_always`, …), from the question's options.
    pub option_kind: Option<String>,
}

/// One thing the agent did during a turn.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// A `session/update`'s `update` object, as the agent sent it.
    Update(Value),
    /// A `session/request_permission`: its `toolCall` and `options` (as the agent sent them),
    /// and the answer it got (`None` when the log holds no answer: the turn ended first).
    Permission {
        /// `{"toolCall": …, "options": […]}`.
        request: Value,
        /// The recorded answer.
        answer: Option<RecordedAnswer>,
    },
}

/// An [`Action`] with the time it was recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// When the event was recorded.
    pub at: Timestamp,
    /// What happened.
    pub action: Action,
}

/// A cost as the agent reported it (`usage_update.cost`).
#[derive(Debug, Clone, PartialEq)]
pub struct Cost {
    /// The amount, in `currency`.
    pub amount: f64,
    /// The currency code the agent gave.
    pub currency: String,
}

/// One prompt turn of the recording.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedTurn {
    /// 0-based, in log order.
    pub index: usize,
    /// The turn's `requestId` in the log.
    pub request_id: Option<String>,
    /// The prompt's ACP content blocks.
    pub prompt: Vec<Value>,
    /// When the prompt was sent.
    pub started_at: Timestamp,
    /// When the turn ended (`prompt_done` or `prompt_error`), if it did.
    pub ended_at: Option<Timestamp>,
    /// The agent's updates and questions, in order.
    pub steps: Vec<Step>,
    /// The stop reason of `prompt_done`.
    pub stop_reason: Option<String>,
    /// The `prompt_error` payload of a turn that failed.
    pub error: Option<Value>,
    /// The prompt response's `usage`, as logged.
    pub usage: Option<Value>,
    /// What this turn cost: the growth of the session's cumulative cost (ACP's `usage_update`
    /// reports the session's total) over the turn, when the agent reported one.
    pub cost: Option<Cost>,
}

impl RecordedTurn {
    /// The prompt's text blocks joined with newlines (other blocks are left out).
    pub fn prompt_text(&self) -> String {
        self.prompt
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The turn's tokens: the response's `totalTokens`, else input + output.
    pub fn tokens(&self) -> Option<u64> {
        let usage = self.usage.as_ref()?;
        let field = |k: &str| usage.get(k).and_then(Value::as_u64);
        field("totalTokens").or_else(|| {
            let (i, o) = (field("inputTokens"), field("outputTokens"));
            (i.is_some() || o.is_some()).then(|| i.unwrap_or(0) + o.unwrap_or(0))
        })
    }

    /// Milliseconds from the prompt to the end of the turn.
    pub fn wall_ms(&self) -> Option<i64> {
        self.ended_at
            .map(|e| (e.millis() - self.started_at.millis()).max(0))
    }

    /// The stop reason, or `error` for a turn that failed, or `unfinished`.
    pub fn outcome(&self) -> &str {
        match (&self.stop_reason, &self.error) {
            (Some(s), _) => s,
            (None, Some(_)) => "error",
            (None, None) => "unfinished",
        }
    }

    /// The updates of the turn, in order.
    pub fn updates(&self) -> impl Iterator<Item = &Value> {
        self.steps.iter().filter_map(|s| match &s.action {
            Action::Update(u) => Some(u),
            Action::Permission { .. } => None,
        })
    }
}

/// A session as its log recorded it.
#[derive(Debug, Clone, PartialEq)]
pub struct Recording {
    /// The session's record id.
    pub record_id: RecordId,
    /// The agent command the session ran.
    pub agent_command: String,
    /// The session's directory.
    pub cwd: String,
    /// The first `initialized` event's payload: `protocolVersion`, `agentCapabilities`,
    /// `agentInfo` (what the agent answered to `initialize`).
    pub initialized: Option<Map<String, Value>>,
    /// The first `session_created` payload: `modes`, `configOptions`, … (what the agent
    /// answered to `session/new`).
    pub session_setup: Option<Map<String, Value>>,
    /// The prompt turns, in order.
    pub turns: Vec<RecordedTurn>,
}

/// Reads the whole log of `id` (page by page) into a [`Recording`]. Of the snapshot only the
/// summary is read (agent command and directory): a long conversation is not loaded twice.
pub async fn read_recording(store: &dyn Store, id: &RecordId) -> ReplayResult<Recording> {
    let record = store.summary(id).await?;
    let mut events = Vec::new();
    let mut from = 1;
    loop {
        let mut query = EventQuery::from_seq(from);
        query.max_bytes = Some(PAGE_BYTES);
        let page = store.read_events(id, &query).await?;
        events.extend(page.events);
        match page.next_seq {
            Some(next) => from = next,
            None => break,
        }
    }
    let mut recording = from_events(&events);
    recording.record_id = record.acpx_record_id.clone();
    recording.agent_command = record.agent_command.clone();
    recording.cwd = record.cwd.clone();
    Ok(recording)
}

/// Folds a log's events into a [`Recording`] (identity fields left empty: the caller knows
/// them from the record).
pub fn from_events(events: &[EventEnvelope]) -> Recording {
    let mut r = Recording {
        record_id: events
            .first()
            .map(|e| e.acpx_record_id.clone())
            .unwrap_or_else(RecordId::generate),
        agent_command: String::new(),
        cwd: String::new(),
        initialized: None,
        session_setup: None,
        turns: Vec::new(),
    };
    // The session's cumulative cost before the turn being read, per currency.
    let mut cost_before: Option<Cost> = None;
    let mut cost_now: Option<Cost> = None;
    for e in events {
        let p = &e.payload;
        match e.event_type.as_str() {
            "lifecycle_event" => {
                let phase = p.get("phase").and_then(Value::as_str).unwrap_or("");
                let slot = match phase {
                    "initialized" => &mut r.initialized,
                    "session_created" => &mut r.session_setup,
                    _ => continue,
                };
                if slot.is_none() {
                    *slot = p.as_object().cloned();
                }
            }
            "prompt_started" => {
                cost_before = cost_now.clone();
                r.turns.push(RecordedTurn {
                    index: r.turns.len(),
                    request_id: e.request_id.clone(),
                    prompt: p
                        .get("prompt")
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default(),
                    started_at: e.timestamp,
                    ended_at: None,
                    steps: Vec::new(),
                    stop_reason: None,
                    error: None,
                    usage: None,
                    cost: None,
                });
            }
            _ => {
                let Some(turn) = current_turn(&mut r.turns, e) else {
                    continue;
                };
                match e.event_type.as_str() {
                    "session_update" => {
                        let Some(update) = p.get("update") else {
                            continue;
                        };
                        if let Some(c) = update.get("cost").and_then(cost_of) {
                            turn.cost = Some(turn_cost(cost_before.as_ref(), &c));
                            cost_now = Some(c);
                        }
                        turn.steps.push(Step {
                            at: e.timestamp,
                            action: Action::Update(update.clone()),
                        });
                    }
                    "client_operation" => permission_step(turn, e),
                    "prompt_done" => {
                        turn.stop_reason = p
                            .get("stopReason")
                            .and_then(Value::as_str)
                            .map(str::to_owned);
                        turn.usage = p.get("usage").cloned();
                        turn.ended_at = Some(e.timestamp);
                    }
                    "prompt_error" => {
                        turn.error = Some(p.clone());
                        turn.ended_at = Some(e.timestamp);
                    }
                    _ => {}
                }
            }
        }
    }
    r
}

/// The turn an event of a prompt belongs to: the last one, when the event carries its
/// `requestId` (or none) and the turn has not ended.
fn current_turn<'a>(
    turns: &'a mut [RecordedTurn],
    e: &EventEnvelope,
) -> Option<&'a mut RecordedTurn> {
    let turn = turns.last_mut()?;
    let same = match (&e.request_id, &turn.request_id) {
        (Some(a), Some(b)) => a == b,
        _ => true,
    };
    (same && turn.ended_at.is_none()).then_some(turn)
}

/// A `session/request_permission` client operation: the question (`running`) opens a step,
/// the decision (`completed`) answers the last open one with its tool call id.
fn permission_step(turn: &mut RecordedTurn, e: &EventEnvelope) {
    let p = &e.payload;
    if p.get("method").and_then(Value::as_str) != Some("session/request_permission") {
        return;
    }
    if p.get("status").and_then(Value::as_str) == Some("running") {
        let mut request = Map::new();
        for key in ["toolCall", "options"] {
            if let Some(v) = p.get(key) {
                request.insert(key.into(), v.clone());
            }
        }
        turn.steps.push(Step {
            at: e.timestamp,
            action: Action::Permission {
                request: Value::Object(request),
                answer: None,
            },
        });
        return;
    }
    let Some(decision) = p.get("decision").and_then(Value::as_str) else {
        return;
    };
    let call_id = p.get("toolCallId").cloned().unwrap_or(Value::Null);
    let option_id = p.get("optionId").and_then(Value::as_str).map(str::to_owned);
    let open = turn
        .steps
        .iter_mut()
        .rev()
        .find_map(|s| match &mut s.action {
            Action::Permission { request, answer }
                if answer.is_none()
                    && request
                        .get("toolCall")
                        .and_then(|t| t.get("toolCallId"))
                        .map_or(call_id.is_null(), |id| *id == call_id) =>
            {
                Some((request.clone(), answer))
            }
            _ => None,
        });
    if let Some((request, answer)) = open {
        let option_kind = option_id
            .as_deref()
            .and_then(|id| option_kind(&request, id));
        *answer = Some(RecordedAnswer {
            decision: decision.to_owned(),
            option_id,
            option_kind,
        });
    }
}

/// The `kind` of the option `id` among a question's options.
pub(crate) fn option_kind(request: &Value, id: &str) -> Option<String> {
    request
        .get("options")?
        .as_array()?
        .iter()
        .find(|o| o.get("optionId").and_then(Value::as_str) == Some(id))?
        .get("kind")?
        .as_str()
        .map(str::to_owned)
}

fn cost_of(v: &Value) -> Option<Cost> {
    Some(Cost {
        amount: v.get("amount")?.as_f64()?,
        currency: v.get("currency")?.as_str()?.to_owned(),
    })
}

/// The part of the cumulative cost `now` that the turn added to `before`.
fn turn_cost(before: Option<&Cost>, now: &Cost) -> Cost {
    match before {
        Some(b) if b.currency == now.currency => Cost {
            amount: (now.amount - b.amount).max(0.0),
            currency: now.currency.clone(),
        },
        _ => now.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use acpx_model::{EventSource, EventStream, EventType};
    use serde_json::json;

    fn event(
        seq: u64,
        ms: i64,
        kind: &str,
        request: Option<&str>,
        payload: Value,
    ) -> EventEnvelope {
        EventEnvelope {
            event_version: 1,
            seq,
            timestamp: Timestamp::from_millis(ms).expect("a valid time"),
            acpx_record_id: RecordId::generate(),
            acp_session_id: "s".into(),
            request_id: request.map(str::to_owned),
            stream: EventStream::Prompt,
            source: EventSource::Runtime,
            event_type: EventType::from(kind.to_owned()),
            payload,
            extra: Map::new(),
        }
    }

    #[test]
    fn turns_with_updates_answers_usage_and_cost() {
        let events = vec![
            event(
                1,
                1000,
                "lifecycle_event",
                None,
                json!({"phase": "initialized", "protocolVersion": 1}),
            ),
            event(
                2,
                2000,
                "prompt_started",
                Some("r1"),
                json!({"prompt": [{"type": "text", "text": "hi"}]}),
            ),
            event(
                3,
                2100,
                "session_update",
                Some("r1"),
                json!({"sessionId": "s", "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "yo"}}}),
            ),
            event(
                4,
                2200,
                "client_operation",
                Some("r1"),
                json!({"method": "session/request_permission", "status": "running", "toolCall": {"toolCallId": "c1", "title": "Run ls", "kind": "execute"}, "options": [{"optionId": "ok", "kind": "allow_once"}]}),
            ),
            event(
                5,
                2300,
                "client_operation",
                Some("r1"),
                json!({"method": "session/request_permission", "status": "completed", "decision": "approved", "optionId": "ok", "toolCallId": "c1"}),
            ),
            event(
                6,
                2400,
                "session_update",
                Some("r1"),
                json!({"sessionId": "s", "update": {"sessionUpdate": "usage_update", "used": 1, "size": 2, "cost": {"amount": 0.5, "currency": "USD"}}}),
            ),
            event(
                7,
                2500,
                "prompt_done",
                Some("r1"),
                json!({"stopReason": "end_turn", "usage": {"inputTokens": 10, "outputTokens": 5}}),
            ),
            event(
                8,
                3000,
                "prompt_started",
                Some("r2"),
                json!({"prompt": [{"type": "text", "text": "again"}]}),
            ),
            event(
                9,
                3100,
                "session_update",
                Some("r2"),
                json!({"sessionId": "s", "update": {"sessionUpdate": "usage_update", "used": 1, "size": 2, "cost": {"amount": 0.75, "currency": "USD"}}}),
            ),
            event(
                10,
                3200,
                "prompt_error",
                Some("r2"),
                json!({"code": "RUNTIME", "message": "boom"}),
            ),
        ];
        let r = from_events(&events);
        assert_eq!(r.turns.len(), 2);
        let t = &r.turns[0];
        assert_eq!(t.prompt_text(), "hi");
        assert_eq!(t.outcome(), "end_turn");
        assert_eq!(t.tokens(), Some(15));
        assert_eq!(t.wall_ms(), Some(500));
        assert_eq!(t.cost.as_ref().map(|c| c.amount), Some(0.5));
        let Action::Permission { answer, .. } = &t.steps[1].action else {
            panic!("the second step is the question");
        };
        let answer = answer.as_ref().expect("answered");
        assert_eq!(answer.option_kind.as_deref(), Some("allow_once"));
        assert_eq!(r.turns[1].outcome(), "error");
        assert_eq!(r.turns[1].cost.as_ref().map(|c| c.amount), Some(0.25));
        assert!(r.initialized.is_some());
    }
}
