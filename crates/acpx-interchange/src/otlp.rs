//! OpenTelemetry traces: one session as one trace in OTLP/JSON (an
//! `ExportTraceServiceRequest`), with the GenAI semantic conventions' attributes.
//!
//! Shape: a root span for the session; under it a span per turn (`invoke_agent`, its usage,
//! cost and model; its stop reason as status); under a turn a span per tool call
//! (`execute_tool`), per permission question (under its tool call) and per fs or terminal
//! operation the agent asked of acpx (under the tool call it served, when one can be told).
//! Times come from the log. The trace id is the record id's 128 bits (another id is hashed),
//! every span id a hash of the record id and what the span is: exporting a session twice,
//! or a turn live and then the whole session, gives the same ids.
//!
//! No conversation content goes into a trace (prompts, replies, reasoning, tool inputs and
//! outputs: the GenAI conventions make content opt-in); `--as atif` carries it. What does go
//! in, and may still be sensitive: tool call titles (often a command line or a file name),
//! the paths of fs operations, terminal ids and exit codes, the model, the agent's name and
//! version (from `initialize`), a failed turn's error message, the ACP session id and, in
//! the root span of a whole export, the session's name. The agent command is not sent (it
//! may hold keys; a stray `OTEL_EXPORTER_OTLP_ENDPOINT` turns the live export on for every
//! prompt): the agent is named by `gen_ai.agent.name`.
//!
//! OTLP/JSON rules kept here: ids are lowercase hex (not base64), 64-bit integers
//! (`intValue`, `*UnixNano`) are strings, enums are their integer values.

use std::io::{self, Write};

use acpx_model::{SessionRecord, Timestamp};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::walk::{Outcome, SessionFacts, ToolCall, Turn};

/// `SPAN_KIND_INTERNAL`.
const KIND_INTERNAL: u8 = 1;
/// `SPAN_KIND_CLIENT`: the turn is a call into the agent, another process.
const KIND_CLIENT: u8 = 3;
/// `STATUS_CODE_UNSET`, `STATUS_CODE_OK`, `STATUS_CODE_ERROR`.
const STATUS_UNSET: u8 = 0;
const STATUS_OK: u8 = 1;
const STATUS_ERROR: u8 = 2;

/// The ids of one session's trace.
#[derive(Debug, Clone)]
pub struct TraceIds {
    record_id: String,
    trace_id: String,
}

impl TraceIds {
    /// The ids of `record_id`'s trace.
    pub fn new(record_id: &str) -> Self {
        let hex: String = record_id.chars().filter(|c| *c != '-').collect();
        let trace_id = if hex.len() == 32
            && hex.chars().all(|c| c.is_ascii_hexdigit())
            && hex.chars().any(|c| c != '0')
        {
            hex.to_ascii_lowercase()
        } else {
            hash_hex(&format!("acpx trace\0{record_id}"), 16)
        };
        Self {
            record_id: record_id.to_owned(),
            trace_id,
        }
    }

    /// The 32 hex digits of the trace id.
    pub fn trace_id(&self) -> &str {
        &self.trace_id
    }

    /// The session's root span id.
    pub fn root_span(&self) -> String {
        self.span("session")
    }

    /// The span id of the thing `key` names within the session.
    fn span(&self, key: &str) -> String {
        hash_hex(&format!("acpx span\0{}\0{key}", self.record_id), 8)
    }
}

/// The first `bytes` bytes of the SHA-256 of `s`, in hex; never all zeros (an invalid id).
fn hash_hex(s: &str, bytes: usize) -> String {
    let digest = Sha256::digest(s.as_bytes());
    let mut out: String = digest[..bytes].iter().map(|b| format!("{b:02x}")).collect();
    if out.chars().all(|c| c == '0') {
        out.replace_range(out.len() - 1.., "1");
    }
    out
}

fn nanos(t: Timestamp) -> String {
    (t.millis().max(0) as u128 * 1_000_000).to_string()
}

/// One attribute; `None` values are left out by [`attrs`].
fn attr(key: &str, v: impl Into<AttrValue>) -> Option<Value> {
    let value = match v.into() {
        AttrValue::None => return None,
        AttrValue::Str(s) => json!({"stringValue": s}),
        AttrValue::Int(i) => json!({"intValue": i.to_string()}),
        AttrValue::Double(d) => json!({"doubleValue": d}),
        AttrValue::StrArray(a) => {
            json!({"arrayValue": {"values": a.into_iter().map(|s| json!({"stringValue": s})).collect::<Vec<_>>()}})
        }
    };
    Some(json!({"key": key, "value": value}))
}

fn attrs(list: Vec<Option<Value>>) -> Value {
    Value::Array(list.into_iter().flatten().collect())
}

/// An attribute's value.
enum AttrValue {
    None,
    Str(String),
    Int(i64),
    Double(f64),
    StrArray(Vec<String>),
}

impl From<&str> for AttrValue {
    fn from(s: &str) -> Self {
        AttrValue::Str(s.to_owned())
    }
}
impl From<String> for AttrValue {
    fn from(s: String) -> Self {
        AttrValue::Str(s)
    }
}
impl From<Option<&str>> for AttrValue {
    fn from(s: Option<&str>) -> Self {
        s.map_or(AttrValue::None, |s| AttrValue::Str(s.to_owned()))
    }
}
impl From<Option<u64>> for AttrValue {
    fn from(n: Option<u64>) -> Self {
        n.map_or(AttrValue::None, |n| {
            AttrValue::Int(i64::try_from(n).unwrap_or(i64::MAX))
        })
    }
}
impl From<i64> for AttrValue {
    fn from(n: i64) -> Self {
        AttrValue::Int(n)
    }
}
impl From<Option<f64>> for AttrValue {
    fn from(d: Option<f64>) -> Self {
        d.map_or(AttrValue::None, AttrValue::Double)
    }
}
impl From<Vec<String>> for AttrValue {
    fn from(a: Vec<String>) -> Self {
        AttrValue::StrArray(a)
    }
}

#[allow(clippy::too_many_arguments)]
fn span(
    ids: &TraceIds,
    span_id: String,
    parent: Option<String>,
    name: String,
    kind: u8,
    start: Timestamp,
    end: Timestamp,
    attributes: Value,
    status: (u8, Option<String>),
) -> Value {
    let end = end.max(start);
    let mut s = json!({"traceId": ids.trace_id, "spanId": span_id});
    if let Some(p) = parent {
        s["parentSpanId"] = json!(p);
    }
    s["name"] = json!(name);
    s["kind"] = json!(kind);
    s["startTimeUnixNano"] = json!(nanos(start));
    s["endTimeUnixNano"] = json!(nanos(end));
    s["attributes"] = attributes;
    let mut st = json!({"code": status.0});
    if let Some(m) = status.1 {
        st["message"] = json!(m);
    }
    s["status"] = st;
    s
}

/// The resource and scope that hold a session's spans, as the head of an
/// `ExportTraceServiceRequest` up to its `spans` array.
fn request_head(record: &SessionRecord) -> String {
    let resource = attrs(vec![
        attr("service.name", "acpx"),
        attr("service.version", env!("CARGO_PKG_VERSION")),
        attr("acpx.record_id", record.acpx_record_id.to_string()),
    ]);
    format!(
        "{{\"resourceSpans\":[{{\"resource\":{{\"attributes\":{resource}}},\"scopeSpans\":[{{\"scope\":{{\"name\":\"acpx\",\"version\":{}}},\"spans\":[\n",
        json!(env!("CARGO_PKG_VERSION"))
    )
}

const REQUEST_TAIL: &str = "\n]}]}]}\n";

/// The spans of one turn: the turn's own, then its tool calls', permission questions' and
/// client operations'.
pub fn turn_spans(ids: &TraceIds, facts: &SessionFacts, turn: &Turn) -> Vec<Value> {
    let turn_span = ids.span(&format!("turn\0{}", turn.request_id));
    let mut spans = vec![own_span(ids, facts, turn, &turn_span)];
    let call_span = |c: &ToolCall| ids.span(&format!("tool\0{}\0{}", turn.request_id, c.id));
    tool_spans(ids, turn, &turn_span, &call_span, &mut spans);
    question_spans(ids, turn, &turn_span, &call_span, &mut spans);
    client_op_spans(ids, turn, &turn_span, &call_span, &mut spans);
    spans
}

/// The turn's own span (`invoke_agent`): usage, cost, model; its stop reason as status.
fn own_span(ids: &TraceIds, facts: &SessionFacts, turn: &Turn, turn_span: &str) -> Value {
    let agent = facts.agent_name.clone().unwrap_or_else(|| "agent".into());
    let usage = turn.usage.clone().unwrap_or_default();
    let (status, error_type) = match &turn.outcome {
        Outcome::Stopped(r) if r == "end_turn" => ((STATUS_OK, None), None),
        // The user stopped it: not an error of the agent's.
        Outcome::Stopped(r) if r == "cancelled" => ((STATUS_UNSET, None), None),
        Outcome::Stopped(r) => (
            (STATUS_ERROR, Some(format!("stop reason {r}"))),
            Some(r.clone()),
        ),
        Outcome::Failed {
            outcome, message, ..
        } => (
            (
                STATUS_ERROR,
                Some(message.clone().unwrap_or_else(|| outcome.clone())),
            ),
            Some(outcome.clone()),
        ),
        Outcome::Unfinished => (
            (
                STATUS_ERROR,
                Some("the log ends inside this turn".to_string()),
            ),
            Some("unfinished".to_string()),
        ),
    };
    span(
        ids,
        turn_span.to_owned(),
        Some(ids.root_span()),
        format!("invoke_agent {agent}"),
        KIND_CLIENT,
        turn.started_at,
        turn.ended_at,
        attrs(vec![
            attr("gen_ai.operation.name", "invoke_agent"),
            attr("gen_ai.agent.name", agent.as_str()),
            attr("gen_ai.agent.version", facts.agent_version.as_deref()),
            attr("gen_ai.conversation.id", turn.acp_session_id.as_str()),
            attr("gen_ai.request.model", turn.model.as_deref()),
            attr("gen_ai.usage.input_tokens", usage.input),
            attr("gen_ai.usage.output_tokens", usage.output),
            attr("gen_ai.usage.cache_read.input_tokens", usage.cached_read),
            attr(
                "gen_ai.usage.cache_creation.input_tokens",
                usage.cached_write,
            ),
            attr("gen_ai.usage.reasoning.output_tokens", usage.thought),
            attr("gen_ai.usage.total_tokens", usage.total),
            attr(
                "gen_ai.response.finish_reasons",
                turn.stop_reason()
                    .map_or(AttrValue::None, |r| vec![r.to_owned()].into()),
            ),
            attr("gen_ai.cost.amount", turn.cost.as_ref().map(|c| c.amount)),
            attr(
                "gen_ai.cost.currency",
                turn.cost.as_ref().map(|c| c.currency.as_str()),
            ),
            attr("error.type", error_type.as_deref()),
            attr("acpx.request_id", turn.request_id.as_str()),
            attr("acpx.turn.index", turn.index as i64),
            attr("acpx.stop_reason", turn.stop_reason()),
        ]),
        status,
    )
}

/// An `execute_tool` span per tool call.
fn tool_spans(
    ids: &TraceIds,
    turn: &Turn,
    turn_span: &str,
    call_span: &dyn Fn(&ToolCall) -> String,
    spans: &mut Vec<Value>,
) {
    for c in &turn.tool_calls {
        let status = match c.status.as_deref() {
            Some("completed") => (STATUS_OK, None),
            Some("failed") => (STATUS_ERROR, Some("the tool call failed".to_string())),
            Some("pending") | Some("in_progress") | None => (
                STATUS_ERROR,
                Some("the tool call was left unfinished when its turn ended".to_string()),
            ),
            Some(other) => (STATUS_UNSET, Some(other.to_owned())),
        };
        let open = matches!(c.status.as_deref(), Some("pending" | "in_progress") | None);
        spans.push(span(
            ids,
            call_span(c),
            Some(turn_span.to_owned()),
            format!("execute_tool {}", c.function_name()),
            KIND_INTERNAL,
            c.started_at,
            if open { turn.ended_at } else { c.updated_at },
            attrs(vec![
                attr("gen_ai.operation.name", "execute_tool"),
                attr("gen_ai.tool.name", c.function_name()),
                attr("gen_ai.tool.call.id", c.id.as_str()),
                attr("acpx.tool.kind", c.kind.as_deref()),
                attr("acpx.tool.title", c.title.as_deref()),
                attr("acpx.tool.status", c.status.as_deref()),
            ]),
            status,
        ));
    }
}

/// A `request_permission` span per question, under the tool call it was about.
fn question_spans(
    ids: &TraceIds,
    turn: &Turn,
    turn_span: &str,
    call_span: &dyn Fn(&ToolCall) -> String,
    spans: &mut Vec<Value>,
) {
    let parent_of_call = |id: Option<&str>| {
        id.and_then(|id| turn.tool_calls.iter().find(|c| c.id == id))
            .map_or_else(|| turn_span.to_owned(), call_span)
    };
    for (k, q) in turn.permissions.iter().enumerate() {
        spans.push(span(
            ids,
            ids.span(&format!("permission\0{}\0{k}", turn.request_id)),
            Some(parent_of_call(q.tool_call_id.as_deref())),
            "request_permission".to_string(),
            KIND_INTERNAL,
            q.asked_at,
            q.decided_at.unwrap_or(turn.ended_at),
            attrs(vec![
                attr("acpx.operation.name", "session/request_permission"),
                attr("gen_ai.tool.call.id", q.tool_call_id.as_deref()),
                attr("acpx.permission.decision", q.decision.as_deref()),
                attr("acpx.permission.option_id", q.option_id.as_deref()),
                attr("acpx.permission.policy", q.policy.as_deref()),
            ]),
            match q.decided_at {
                Some(_) => (STATUS_UNSET, None),
                None => (
                    STATUS_ERROR,
                    Some("no answer before the turn ended".to_string()),
                ),
            },
        ));
    }
}

/// A span per fs or terminal operation, under the tool call it served.
fn client_op_spans(
    ids: &TraceIds,
    turn: &Turn,
    turn_span: &str,
    call_span: &dyn Fn(&ToolCall) -> String,
    spans: &mut Vec<Value>,
) {
    for (k, o) in turn.client_ops.iter().enumerate() {
        let text = |key: &str| o.payload.get(key).and_then(Value::as_str);
        let terminal = text("terminalId");
        let path = text("path");
        // The tool call this operation served: the one showing its terminal, or the one
        // whose input or diff names its path.
        let served = turn.tool_calls.iter().find(|c| {
            terminal.is_some_and(|t| c.terminal_ids.iter().any(|x| x == t))
                || path.is_some_and(|p| {
                    c.diffs.iter().any(|d| d.0 == p)
                        || c.raw_input
                            .as_ref()
                            .and_then(|i| i.get("path"))
                            .and_then(Value::as_str)
                            == Some(p)
                })
        });
        let exit = o
            .payload
            .get("exitStatus")
            .and_then(|x| x.get("exitCode"))
            .and_then(Value::as_i64);
        spans.push(span(
            ids,
            ids.span(&format!("client_op\0{}\0{k}", turn.request_id)),
            Some(served.map_or_else(|| turn_span.to_owned(), call_span)),
            o.method.clone(),
            KIND_INTERNAL,
            o.started_at,
            o.ended_at,
            attrs(vec![
                attr("acpx.operation.name", o.method.as_str()),
                attr("acpx.operation.status", o.status.as_deref()),
                attr("gen_ai.tool.call.id", served.map(|c| c.id.as_str())),
                attr("acpx.fs.path", path),
                attr(
                    "acpx.fs.bytes",
                    o.payload.get("bytes").and_then(Value::as_u64),
                ),
                attr("acpx.terminal.id", terminal),
                attr(
                    "acpx.terminal.exit_code",
                    exit.map_or(AttrValue::None, AttrValue::Int),
                ),
            ]),
            match o.status.as_deref() {
                Some("failed") => (STATUS_ERROR, text("summary").map(str::to_owned)),
                _ => (STATUS_UNSET, None),
            },
        ));
    }
}

/// One turn's spans as a whole `ExportTraceServiceRequest`, for a live export after the
/// turn: its parent is the session's root span, which `sessions export --as otlp` writes.
pub fn turn_request(record: &SessionRecord, facts: &SessionFacts, turn: &Turn) -> Vec<u8> {
    let ids = TraceIds::new(record.acpx_record_id.as_str());
    let mut out = request_head(record).into_bytes();
    let spans = turn_spans(&ids, facts, turn);
    for (i, s) in spans.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(b",\n");
        }
        out.extend_from_slice(s.to_string().as_bytes());
    }
    out.extend_from_slice(REQUEST_TAIL.as_bytes());
    out
}

/// Writes one session's whole trace: [`OtlpWriter::turn`] for every turn of the walk, then
/// [`OtlpWriter::finish`] (the root span, whose times need the whole log).
#[derive(Debug)]
pub struct OtlpWriter {
    ids: TraceIds,
    head: Option<String>,
    record_id: String,
    name: Option<String>,
    acp_session_id: String,
    created_at: Timestamp,
    spans: usize,
    tokens: (Option<u64>, Option<u64>),
}

impl OtlpWriter {
    /// A writer for `record`'s trace.
    pub fn new(record: &SessionRecord) -> Self {
        Self {
            ids: TraceIds::new(record.acpx_record_id.as_str()),
            head: Some(request_head(record)),
            record_id: record.acpx_record_id.to_string(),
            name: record.name.clone(),
            acp_session_id: record.acp_session_id.clone(),
            created_at: record.created_at,
            spans: 0,
            tokens: (None, None),
        }
    }

    fn write_span(&mut self, s: &Value, out: &mut dyn Write) -> io::Result<()> {
        if let Some(head) = self.head.take() {
            out.write_all(head.as_bytes())?;
        }
        if self.spans > 0 {
            out.write_all(b",\n")?;
        }
        serde_json::to_writer(&mut *out, s)?;
        self.spans += 1;
        Ok(())
    }

    /// Writes the spans of one turn.
    pub fn turn(
        &mut self,
        facts: &SessionFacts,
        turn: &Turn,
        out: &mut dyn Write,
    ) -> io::Result<()> {
        if let Some(u) = &turn.usage {
            let add = |t: &mut Option<u64>, n: Option<u64>| {
                if let Some(n) = n {
                    *t = Some(t.unwrap_or(0).saturating_add(n));
                }
            };
            add(&mut self.tokens.0, u.input);
            add(&mut self.tokens.1, u.output);
        }
        for s in turn_spans(&self.ids, facts, turn) {
            self.write_span(&s, out)?;
        }
        Ok(())
    }

    /// Writes the session's root span and closes the request.
    pub fn finish(mut self, facts: &SessionFacts, out: &mut dyn Write) -> io::Result<()> {
        let start = facts.first_at.unwrap_or(self.created_at);
        let end = facts.last_at.unwrap_or(start);
        let root = span(
            &self.ids,
            self.ids.root_span(),
            None,
            format!(
                "session {}",
                self.name.clone().unwrap_or_else(|| self.record_id.clone())
            ),
            KIND_INTERNAL,
            start,
            end,
            attrs(vec![
                attr("gen_ai.conversation.id", self.acp_session_id.as_str()),
                attr("gen_ai.agent.name", facts.agent_name.as_deref()),
                attr("gen_ai.agent.version", facts.agent_version.as_deref()),
                attr("gen_ai.request.model", facts.model.as_deref()),
                attr("gen_ai.usage.input_tokens", self.tokens.0),
                attr("gen_ai.usage.output_tokens", self.tokens.1),
                attr("gen_ai.cost.amount", facts.cost.as_ref().map(|c| c.amount)),
                attr(
                    "gen_ai.cost.currency",
                    facts.cost.as_ref().map(|c| c.currency.as_str()),
                ),
                attr("acpx.record_id", self.record_id.as_str()),
                attr("acpx.session.name", self.name.as_deref()),
                attr("acpx.turns", facts.turns as i64),
            ]),
            (STATUS_UNSET, None),
        );
        self.write_span(&root, out)?;
        out.write_all(REQUEST_TAIL.as_bytes())?;
        out.flush()
    }
}
