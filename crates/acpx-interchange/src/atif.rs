//! ATIF: one session as one trajectory of Harbor's Agent Trajectory Interchange Format,
//! v1.8 (RFC 0001; the `harbor` package's `Trajectory` model and `TrajectoryValidator`).
//!
//! Per turn: a `user` step with the prompt, then one or more `agent` steps. An agent step is
//! what the agent said and thought and the tool calls that followed; a reply or thought that
//! comes after tool calls starts the next step (ACP does not say where one model call ends,
//! so this is the closest cut). Each tool call's result is an `observation.results` entry of
//! its step (its text, diffs and terminal output). The agent reports tokens per turn (the
//! prompt response's `usage`) and cost per session (`usage_update.cost`, cumulative): both go
//! on the turn's last agent step, and `final_metrics` sums them. `docs/format.md` maps every
//! event to its place.
//!
//! The trajectory is written as it is walked, a turn at a time: the keys after `steps`
//! (`agent`, `final_metrics`, `extra`) are written last, which JSON allows.

use std::io::{self, Write};

use acpx_model::SessionRecord;
use serde_json::{json, Map, Value};

use crate::walk::{Item, Outcome, SessionFacts, ToolCall, Turn};

/// The ATIF version written.
pub const ATIF_VERSION: &str = "ATIF-v1.8";

/// Writes one trajectory: [`AtifWriter::turn`] for every turn of the walk, then
/// [`AtifWriter::finish`].
#[derive(Debug)]
pub struct AtifWriter {
    record_id: String,
    acp_session_id: String,
    agent_command: String,
    cwd: String,
    name: Option<String>,
    title: Option<String>,
    created_at: String,
    steps: usize,
    totals: Totals,
}

#[derive(Debug, Default)]
struct Totals {
    prompt: Option<u64>,
    completion: Option<u64>,
    cached: Option<u64>,
    cached_write: Option<u64>,
    thought: Option<u64>,
}

fn add(total: &mut Option<u64>, n: Option<u64>) {
    if let Some(n) = n {
        *total = Some(total.unwrap_or(0).saturating_add(n));
    }
}

/// A cost in US dollars, the only currency ATIF's `cost_usd` can hold.
fn usd(c: &crate::walk::Cost) -> Option<f64> {
    c.currency.eq_ignore_ascii_case("USD").then_some(c.amount)
}

impl AtifWriter {
    /// A writer for `record`'s trajectory.
    pub fn new(record: &SessionRecord) -> Self {
        let title = record.thread.title.to_string();
        Self {
            record_id: record.acpx_record_id.to_string(),
            acp_session_id: record.acp_session_id.clone(),
            agent_command: record.agent_command.clone(),
            cwd: record.cwd.clone(),
            name: record.name.clone(),
            title: (!title.is_empty()).then_some(title),
            created_at: record.created_at.to_rfc3339(),
            steps: 0,
            totals: Totals::default(),
        }
    }

    fn write_step(&mut self, step: &Value, out: &mut dyn Write) -> io::Result<()> {
        if self.steps == 0 {
            writeln!(
                out,
                "{{\"schema_version\":{},\"session_id\":{},\"trajectory_id\":{},\"steps\":[",
                json!(ATIF_VERSION),
                json!(self.record_id),
                json!(self.record_id)
            )?;
        } else {
            out.write_all(b",\n")?;
        }
        serde_json::to_writer(&mut *out, step)?;
        self.steps += 1;
        Ok(())
    }

    /// Writes a fork's starting conversation as steps marked `is_copied_context`.
    pub fn copied(&mut self, thread: &Value, out: &mut dyn Write) -> io::Result<()> {
        for step in crate::copied::steps(thread, self.steps + 1) {
            self.write_step(&step, out)?;
        }
        Ok(())
    }

    /// Writes the steps of one turn.
    pub fn turn(&mut self, turn: &Turn, out: &mut dyn Write) -> io::Result<()> {
        let mut steps = vec![self.user_step(turn)];
        steps.extend(self.agent_steps(turn));
        for step in steps {
            self.write_step(&step, out)?;
        }
        if let Some(u) = &turn.usage {
            add(&mut self.totals.prompt, u.input);
            add(&mut self.totals.completion, u.output);
            add(&mut self.totals.cached, u.cached_read);
            add(&mut self.totals.cached_write, u.cached_write);
            add(&mut self.totals.thought, u.thought);
        }
        Ok(())
    }

    /// Writes the rest of the trajectory (agent, final metrics). Fails with
    /// [`io::ErrorKind::InvalidData`] when the session had no turn: a trajectory needs at
    /// least one step.
    pub fn finish(self, facts: &SessionFacts, out: &mut dyn Write) -> io::Result<()> {
        if self.steps == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "session {} has no prompt turn yet, and an ATIF trajectory needs at least \
                     one step",
                    self.record_id
                ),
            ));
        }
        let fallback_name = self
            .agent_command
            .split_whitespace()
            .next()
            .and_then(|c| c.rsplit('/').next())
            .unwrap_or("agent")
            .to_string();
        let mut agent = json!({
            "name": facts.agent_name.clone().unwrap_or(fallback_name),
            "version": facts.agent_version.clone().unwrap_or_else(|| "unknown".into()),
        });
        if let Some(m) = &facts.model {
            agent["model_name"] = json!(m);
        }
        let mut agent_extra = json!({"agentCommand": self.agent_command});
        if facts.agent_versions.len() > 1 {
            agent_extra["reportedVersions"] = json!(facts.agent_versions);
        }
        agent["extra"] = agent_extra;

        let mut fm = Map::new();
        let t = &self.totals;
        put(&mut fm, "total_prompt_tokens", t.prompt.map(Value::from));
        put(
            &mut fm,
            "total_completion_tokens",
            t.completion.map(Value::from),
        );
        put(&mut fm, "total_cached_tokens", t.cached.map(Value::from));
        put(
            &mut fm,
            "total_cost_usd",
            facts.cost.as_ref().and_then(usd).map(Value::from),
        );
        fm.insert("total_steps".into(), json!(self.steps));
        let mut fm_extra = Map::new();
        put(
            &mut fm_extra,
            "totalCachedWriteTokens",
            t.cached_write.map(Value::from),
        );
        put(
            &mut fm_extra,
            "totalThoughtTokens",
            t.thought.map(Value::from),
        );
        if let Some(c) = facts.cost.as_ref().filter(|c| usd(c).is_none()) {
            fm_extra.insert(
                "cost".into(),
                json!({"amount": c.amount, "currency": c.currency}),
            );
        }
        if let Some((used, size)) = facts.context {
            fm_extra.insert("contextUsedTokens".into(), json!(used));
            fm_extra.insert("contextSizeTokens".into(), json!(size));
        }
        if !fm_extra.is_empty() {
            fm.insert("extra".into(), Value::Object(fm_extra));
        }

        let mut extra = json!({
            "producer": format!("acpx {}", env!("CARGO_PKG_VERSION")),
            "acpxRecordId": self.record_id,
            "acpSessionId": self.acp_session_id,
            "cwd": self.cwd,
            "createdAt": self.created_at,
        });
        if let Some(n) = &self.name {
            extra["name"] = json!(n);
        }
        if let Some(t) = &self.title {
            extra["title"] = json!(t);
        }
        let notes = "Exported by acpx from an ACP session log. Token counts are the agent's \
                     per-turn report (ACP prompt response `usage`) and sit on the last agent \
                     step of each turn; cost is the rise of the agent's cumulative \
                     `usage_update.cost` during the turn. Agent steps are cut where the agent \
                     speaks again after tool calls: ACP does not mark model calls.";
        write!(
            out,
            "\n],\"agent\":{},\"notes\":{},\"final_metrics\":{},\"extra\":{}}}\n",
            agent,
            json!(notes),
            Value::Object(fm),
            extra
        )?;
        out.flush()
    }

    fn user_step(&self, turn: &Turn) -> Value {
        json!({
            "step_id": self.steps + 1,
            "timestamp": turn.started_at.to_rfc3339(),
            "source": "user",
            "message": turn.prompt_text(),
            "extra": {"requestId": turn.request_id},
        })
    }

    /// The agent steps of a turn (at least one: a turn that failed before the agent said
    /// anything still gets a step that says how it ended).
    fn agent_steps(&self, turn: &Turn) -> Vec<Value> {
        struct Draft<'a> {
            at: String,
            message: String,
            reasoning: Option<String>,
            calls: Vec<&'a ToolCall>,
        }
        let mut drafts: Vec<Draft> = Vec::new();
        let new_draft = |at: String| Draft {
            at,
            message: String::new(),
            reasoning: None,
            calls: Vec::new(),
        };
        for item in &turn.items {
            let (at, starts_new) = match item {
                Item::Message(_, at) => (
                    at,
                    drafts
                        .last()
                        .is_none_or(|d| !d.calls.is_empty() || !d.message.is_empty()),
                ),
                Item::Thought(_, at) => (
                    at,
                    drafts.last().is_none_or(|d| {
                        !d.calls.is_empty() || !d.message.is_empty() || d.reasoning.is_some()
                    }),
                ),
                Item::ToolCall(i) => (&turn.tool_calls[*i].started_at, drafts.is_empty()),
            };
            if starts_new {
                drafts.push(new_draft(at.to_rfc3339()));
            }
            let Some(d) = drafts.last_mut() else { continue };
            match item {
                Item::Message(text, _) => d.message.push_str(text),
                Item::Thought(text, _) => d.reasoning = Some(text.clone()),
                Item::ToolCall(i) => d.calls.push(&turn.tool_calls[*i]),
            }
        }
        if drafts.is_empty() {
            drafts.push(new_draft(turn.ended_at.to_rfc3339()));
        }
        let last = drafts.len() - 1;
        drafts
            .into_iter()
            .enumerate()
            .map(|(k, d)| {
                let mut step = Map::new();
                step.insert("step_id".into(), json!(self.steps + 2 + k));
                step.insert("timestamp".into(), json!(d.at));
                step.insert("source".into(), json!("agent"));
                put(&mut step, "model_name", turn.model.clone().map(Value::from));
                step.insert("message".into(), json!(d.message));
                put(&mut step, "reasoning_content", d.reasoning.map(Value::from));
                if !d.calls.is_empty() {
                    step.insert(
                        "tool_calls".into(),
                        Value::Array(d.calls.iter().map(|c| tool_call(turn, c)).collect()),
                    );
                    step.insert(
                        "observation".into(),
                        json!({"results": d.calls.iter().map(|c| observation(turn, c)).collect::<Vec<_>>()}),
                    );
                }
                if k == last {
                    put(&mut step, "metrics", metrics(turn));
                    step.insert("extra".into(), ending(turn));
                }
                Value::Object(step)
            })
            .collect()
    }
}

fn put(m: &mut Map<String, Value>, key: &str, v: Option<Value>) {
    if let Some(v) = v {
        m.insert(key.into(), v);
    }
}

fn tool_call(turn: &Turn, c: &ToolCall) -> Value {
    let arguments = match &c.raw_input {
        Some(Value::Object(m)) => Value::Object(m.clone()),
        Some(other) => json!({"input": other}),
        None => json!({}),
    };
    let mut extra = Map::new();
    put(&mut extra, "title", c.title.clone().map(Value::from));
    put(&mut extra, "kind", c.kind.clone().map(Value::from));
    put(&mut extra, "status", c.status.clone().map(Value::from));
    let asked: Vec<Value> = turn
        .permissions
        .iter()
        .filter(|q| q.tool_call_id.as_deref() == Some(c.id.as_str()))
        .map(|q| {
            json!({"decision": q.decision, "optionId": q.option_id, "policy": q.policy,
                   "askedAt": q.asked_at.to_rfc3339(),
                   "decidedAt": q.decided_at.map(|t| t.to_rfc3339())})
        })
        .collect();
    if !asked.is_empty() {
        extra.insert("permissions".into(), Value::Array(asked));
    }
    json!({
        "tool_call_id": c.id,
        "function_name": c.function_name(),
        "arguments": arguments,
        "extra": extra,
    })
}

/// A tool call's result: its text, its diffs (the old text's lines marked `-`, the new
/// one's `+`) and its terminals' output, with the structured forms in `extra`.
fn observation(turn: &Turn, c: &ToolCall) -> Value {
    let mut text: Vec<String> = c.text.iter().filter(|t| !t.is_empty()).cloned().collect();
    let mut diffs = Vec::new();
    for (path, old, new) in &c.diffs {
        let mut d = format!("--- {path}\n+++ {path}\n");
        for line in old.as_deref().unwrap_or("").lines() {
            d.push_str(&format!("-{line}\n"));
        }
        for line in new.lines() {
            d.push_str(&format!("+{line}\n"));
        }
        text.push(d);
        diffs.push(json!({"path": path, "oldText": old, "newText": new}));
    }
    let mut terminals = Vec::new();
    for tid in &c.terminal_ids {
        let ops = turn
            .client_ops
            .iter()
            .filter(|o| o.payload.get("terminalId").and_then(Value::as_str) == Some(tid));
        let (mut output, mut exit, mut command) = (None, None, None);
        for o in ops {
            match o.method.as_str() {
                "terminal/output" => {
                    output = o.payload.get("output").cloned().or(output);
                    exit = o.payload.get("exitStatus").cloned().or(exit);
                }
                "terminal/wait_for_exit" => exit = o.payload.get("exitStatus").cloned().or(exit),
                "terminal/create" => {
                    let args: Vec<&str> = o
                        .payload
                        .get("args")
                        .and_then(Value::as_array)
                        .map(|a| a.iter().filter_map(Value::as_str).collect())
                        .unwrap_or_default();
                    command = o
                        .payload
                        .get("command")
                        .and_then(Value::as_str)
                        .map(|c| std::iter::once(c).chain(args).collect::<Vec<_>>().join(" "));
                }
                _ => {}
            }
        }
        if let Some(out) = output.as_ref().and_then(Value::as_str) {
            if !text.iter().any(|t| t == out) {
                text.push(out.to_owned());
            }
        }
        terminals.push(
            json!({"terminalId": tid, "command": command, "output": output,
                              "exitStatus": exit}),
        );
    }
    let mut extra = Map::new();
    put(&mut extra, "status", c.status.clone().map(Value::from));
    if !diffs.is_empty() {
        extra.insert("diffs".into(), Value::Array(diffs));
    }
    if !terminals.is_empty() {
        extra.insert("terminals".into(), Value::Array(terminals));
    }
    put(&mut extra, "rawOutput", c.raw_output.clone());
    let mut r = Map::new();
    r.insert("source_call_id".into(), json!(c.id));
    if !text.is_empty() {
        r.insert("content".into(), json!(text.join("\n")));
    }
    if !extra.is_empty() {
        r.insert("extra".into(), Value::Object(extra));
    }
    Value::Object(r)
}

fn metrics(turn: &Turn) -> Option<Value> {
    let mut m = Map::new();
    let mut extra = Map::new();
    if let Some(u) = &turn.usage {
        put(&mut m, "prompt_tokens", u.input.map(Value::from));
        put(&mut m, "completion_tokens", u.output.map(Value::from));
        put(&mut m, "cached_tokens", u.cached_read.map(Value::from));
        put(
            &mut extra,
            "cachedWriteTokens",
            u.cached_write.map(Value::from),
        );
        put(&mut extra, "thoughtTokens", u.thought.map(Value::from));
        put(&mut extra, "totalTokens", u.total.map(Value::from));
    }
    if let Some(c) = &turn.cost {
        match usd(c) {
            Some(a) => {
                m.insert("cost_usd".into(), json!(a));
            }
            None => {
                extra.insert(
                    "cost".into(),
                    json!({"amount": c.amount, "currency": c.currency}),
                );
            }
        }
    }
    if !extra.is_empty() {
        m.insert("extra".into(), Value::Object(extra));
    }
    (!m.is_empty()).then_some(Value::Object(m))
}

/// How the turn ended, for the `extra` of its last agent step.
fn ending(turn: &Turn) -> Value {
    let mut e = Map::new();
    e.insert("requestId".into(), json!(turn.request_id));
    e.insert("endedAt".into(), json!(turn.ended_at.to_rfc3339()));
    match &turn.outcome {
        Outcome::Stopped(r) => {
            e.insert("stopReason".into(), json!(r));
        }
        Outcome::Failed {
            outcome,
            message,
            stop_reason,
        } => {
            e.insert("outcome".into(), json!(outcome));
            put(&mut e, "error", message.clone().map(Value::from));
            put(&mut e, "stopReason", stop_reason.clone().map(Value::from));
        }
        Outcome::Unfinished => {
            e.insert("outcome".into(), json!("unfinished"));
        }
    }
    Value::Object(e)
}
