//! Unit tests of the walk and both writers on logs written by hand (the end-to-end tests
//! with a real agent and the formats' own checkers are `acpx-cli`'s `interchange` tests).

use acpx_model::{EventEnvelope, NewSession, RecordId, SessionRecord, Timestamp};
use serde_json::{json, Value};

use crate::{Export, Format, TurnTrace};

const ID: &str = "0b6f3a52-8d3c-4c4e-9a57-1f2e3d4c5b6a";

fn record() -> SessionRecord {
    SessionRecord::new(
        NewSession {
            acpx_record_id: RecordId::parse(ID).unwrap(),
            acp_session_id: "s1".into(),
            agent_session_id: None,
            agent_command: "/usr/bin/agent --acp".into(),
            cwd: "/repo".into(),
            name: Some("demo".into()),
        },
        Timestamp::parse("2026-01-01T00:00:00.000Z").unwrap(),
    )
}

/// A log: each entry is (request id or "", type, payload); a second apart.
fn log(entries: &[(&str, &str, Value)]) -> Vec<EventEnvelope> {
    entries
        .iter()
        .enumerate()
        .map(|(i, (req, kind, payload))| {
            let mut e = json!({"eventVersion": 1, "seq": i + 1,
                "timestamp": format!("2026-01-01T00:00:{:02}.000Z", i + 1),
                "acpxRecordId": ID, "acpSessionId": "s1", "stream": "prompt",
                "source": "runtime", "type": kind, "payload": payload});
            if !req.is_empty() {
                e["requestId"] = json!(req);
            }
            serde_json::from_value(e).unwrap()
        })
        .collect()
}

fn update(u: Value) -> Value {
    json!({"sessionId": "s1", "update": u})
}

fn export(format: Format, events: &[EventEnvelope]) -> std::io::Result<Value> {
    let mut out = Vec::new();
    let mut x = Export::new(format, &record());
    for e in events {
        x.push(e, &mut out)?;
    }
    x.finish(&mut out)?;
    Ok(serde_json::from_slice(&out).expect("valid JSON"))
}

fn sample() -> Vec<EventEnvelope> {
    log(&[
        (
            "",
            "lifecycle_event",
            json!({"phase": "initialized",
            "agentInfo": {"name": "agent-x", "version": "2.1"}}),
        ),
        (
            "",
            "lifecycle_event",
            json!({"phase": "session_created", "configOptions": [
            {"id": "m", "category": "model", "type": "select", "currentValue": "big"}]}),
        ),
        (
            "r1",
            "prompt_started",
            json!({"prompt": [{"type": "text", "text": "fix it"},
            {"type": "image", "data": "…", "mimeType": "image/png"}]}),
        ),
        (
            "r1",
            "session_update",
            update(json!({"sessionUpdate": "agent_thought_chunk",
            "content": {"type": "text", "text": "hmm"}})),
        ),
        (
            "r1",
            "session_update",
            update(json!({"sessionUpdate": "agent_message_chunk",
            "content": {"type": "text", "text": "Running "}})),
        ),
        (
            "r1",
            "session_update",
            update(json!({"sessionUpdate": "agent_message_chunk",
            "content": {"type": "text", "text": "it."}})),
        ),
        (
            "r1",
            "session_update",
            update(json!({"sessionUpdate": "tool_call", "toolCallId": "t1",
            "title": "Run make", "kind": "execute", "status": "pending",
            "rawInput": {"command": "make"}})),
        ),
        (
            "r1",
            "client_operation",
            json!({"method": "session/request_permission",
            "status": "running", "toolCall": {"toolCallId": "t1", "title": "Run make"}}),
        ),
        (
            "r1",
            "client_operation",
            json!({"method": "session/request_permission",
            "status": "completed", "decision": "approved", "optionId": "allow",
            "toolCallId": "t1", "policy": "approve-all"}),
        ),
        (
            "r1",
            "client_operation",
            json!({"method": "terminal/create", "status": "completed",
            "command": "sh", "args": ["-c", "make"], "terminalId": "term1"}),
        ),
        (
            "r1",
            "session_update",
            update(json!({"sessionUpdate": "tool_call_update",
            "toolCallId": "t1", "status": "in_progress",
            "content": [{"type": "terminal", "terminalId": "term1"}]})),
        ),
        (
            "r1",
            "client_operation",
            json!({"method": "terminal/output", "status": "completed",
            "terminalId": "term1", "output": "ok\n", "exitStatus": {"exitCode": 0}}),
        ),
        (
            "r1",
            "session_update",
            update(json!({"sessionUpdate": "tool_call_update",
            "toolCallId": "t1", "status": "completed"})),
        ),
        (
            "r1",
            "session_update",
            update(json!({"sessionUpdate": "usage_update", "used": 10,
            "size": 100, "cost": {"amount": 0.5, "currency": "USD"}})),
        ),
        (
            "r1",
            "session_update",
            update(json!({"sessionUpdate": "agent_message_chunk",
            "content": {"type": "text", "text": "Done."}})),
        ),
        (
            "r1",
            "prompt_done",
            json!({"stopReason": "end_turn", "usage": {"inputTokens": 100,
            "outputTokens": 20, "cachedReadTokens": 30, "totalTokens": 120}}),
        ),
        (
            "c1",
            "control_done",
            json!({"action": "set_config_option",
            "input": {"configId": "m", "value": "small"}}),
        ),
        (
            "r2",
            "prompt_started",
            json!({"prompt": [{"type": "text", "text": "again"}]}),
        ),
        (
            "r2",
            "session_update",
            update(json!({"sessionUpdate": "usage_update", "used": 20,
            "size": 100, "cost": {"amount": 0.75, "currency": "USD"}})),
        ),
        (
            "r2",
            "prompt_error",
            json!({"outcome": "failed", "message": "agent crashed"}),
        ),
    ])
}

#[test]
fn atif_steps_follow_the_turns() {
    let doc = export(Format::Atif, &sample()).unwrap();
    assert_eq!(doc["schema_version"], "ATIF-v1.8");
    assert_eq!(doc["session_id"], ID);
    assert_eq!(doc["agent"]["name"], "agent-x");
    assert_eq!(doc["agent"]["version"], "2.1");
    assert_eq!(doc["agent"]["model_name"], "small");
    let steps = doc["steps"].as_array().unwrap();
    let sources: Vec<&str> = steps
        .iter()
        .map(|s| s["source"].as_str().unwrap())
        .collect();
    assert_eq!(sources, ["user", "agent", "agent", "user", "agent"]);
    for (i, s) in steps.iter().enumerate() {
        assert_eq!(s["step_id"], i + 1);
    }
    assert_eq!(steps[0]["message"], "fix it\n\n[image]");
    // Thought and reply, then the tool call: one step; the reply after it: the next.
    assert_eq!(steps[1]["reasoning_content"], "hmm");
    assert_eq!(steps[1]["message"], "Running it.");
    assert_eq!(steps[1]["model_name"], "big");
    let call = &steps[1]["tool_calls"][0];
    assert_eq!(call["tool_call_id"], "t1");
    assert_eq!(call["function_name"], "execute");
    assert_eq!(call["arguments"], json!({"command": "make"}));
    assert_eq!(call["extra"]["permissions"][0]["decision"], "approved");
    let result = &steps[1]["observation"]["results"][0];
    assert_eq!(result["source_call_id"], "t1");
    assert_eq!(result["content"], "ok\n");
    assert_eq!(result["extra"]["terminals"][0]["command"], "sh -c make");
    assert_eq!(steps[2]["message"], "Done.");
    assert_eq!(
        steps[2]["metrics"],
        json!({"prompt_tokens": 100, "completion_tokens": 20, "cached_tokens": 30,
               "cost_usd": 0.5, "extra": {"totalTokens": 120}})
    );
    assert_eq!(steps[2]["extra"]["stopReason"], "end_turn");
    // The failed turn: an empty agent step that says how it ended; its cost is the rise.
    assert_eq!(steps[4]["message"], "");
    assert_eq!(steps[4]["model_name"], "small");
    assert_eq!(steps[4]["extra"]["outcome"], "failed");
    assert_eq!(steps[4]["extra"]["error"], "agent crashed");
    assert_eq!(steps[4]["metrics"]["cost_usd"], 0.25);
    let fm = &doc["final_metrics"];
    assert_eq!(fm["total_prompt_tokens"], 100);
    assert_eq!(fm["total_cost_usd"], 0.75);
    assert_eq!(fm["total_steps"], 5);
    assert_eq!(fm["extra"]["contextSizeTokens"], 100);
}

#[test]
fn atif_needs_a_turn() {
    let e = export(Format::Atif, &sample()[..2]).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
    assert!(e.to_string().contains("no prompt turn"), "{e}");
}

#[test]
fn a_turn_the_log_ends_inside_is_unfinished() {
    let events = &sample()[..8];
    let doc = export(Format::Atif, events).unwrap();
    let last = doc["steps"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["extra"]["outcome"], "unfinished");
    let trace = export(Format::Otlp, events).unwrap();
    let spans = trace["resourceSpans"][0]["scopeSpans"][0]["spans"]
        .as_array()
        .unwrap();
    let turn = spans
        .iter()
        .find(|s| s["name"] == "invoke_agent agent-x")
        .unwrap();
    assert_eq!(turn["status"]["code"], 2);
    // An open permission question is an error too.
    let q = spans
        .iter()
        .find(|s| s["name"] == "request_permission")
        .unwrap();
    assert_eq!(q["status"]["code"], 2);
}

fn attr<'a>(span: &'a Value, key: &str) -> Option<&'a Value> {
    span["attributes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["key"] == key)
        .map(|a| &a["value"])
}

#[test]
fn otlp_spans_nest_and_carry_the_conventions() {
    let trace = export(Format::Otlp, &sample()).unwrap();
    let spans = trace["resourceSpans"][0]["scopeSpans"][0]["spans"]
        .as_array()
        .unwrap();
    let names: Vec<&str> = spans.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "invoke_agent agent-x",
            "execute_tool execute",
            "request_permission",
            "terminal/create",
            "terminal/output",
            "invoke_agent agent-x",
            "session demo"
        ]
    );
    let id = |s: &Value, k: &str| s[k].as_str().map(str::to_owned);
    let root = &spans[6];
    assert_eq!(root["traceId"], ID.replace('-', ""));
    assert!(root.get("parentSpanId").is_none());
    assert_eq!(id(&spans[0], "parentSpanId"), id(root, "spanId"));
    assert_eq!(id(&spans[1], "parentSpanId"), id(&spans[0], "spanId"));
    for child in &spans[2..5] {
        assert_eq!(id(child, "parentSpanId"), id(&spans[1], "spanId"));
    }
    for s in spans {
        assert_eq!(s["spanId"].as_str().unwrap().len(), 16);
        assert!(s["startTimeUnixNano"].is_string());
    }
    let turn = &spans[0];
    assert_eq!(
        attr(turn, "gen_ai.operation.name").unwrap()["stringValue"],
        "invoke_agent"
    );
    assert_eq!(
        attr(turn, "gen_ai.request.model").unwrap()["stringValue"],
        "big"
    );
    assert_eq!(
        attr(turn, "gen_ai.usage.input_tokens").unwrap()["intValue"],
        "100"
    );
    assert_eq!(
        attr(turn, "gen_ai.usage.cache_read.input_tokens").unwrap()["intValue"],
        "30"
    );
    assert_eq!(
        attr(turn, "gen_ai.cost.amount").unwrap()["doubleValue"],
        0.5
    );
    assert_eq!(turn["status"]["code"], 1);
    assert_eq!(turn["startTimeUnixNano"], "1767225603000000000");
    assert_eq!(
        attr(&spans[1], "gen_ai.tool.call.id").unwrap()["stringValue"],
        "t1"
    );
    assert_eq!(
        attr(&spans[4], "acpx.terminal.exit_code").unwrap()["intValue"],
        "0"
    );
    // The failed turn.
    assert_eq!(spans[5]["status"]["code"], 2);
    assert_eq!(spans[5]["status"]["message"], "agent crashed");
    assert_eq!(
        attr(&spans[5], "error.type").unwrap()["stringValue"],
        "failed"
    );
    // No conversation content anywhere.
    let text = trace.to_string();
    assert!(!text.contains("Running it.") && !text.contains("fix it") && !text.contains("hmm"));
    // Nor the agent command (it may hold keys): the agent is named by gen_ai.agent.name.
    assert!(attr(root, "acpx.agent.command").is_none());
    assert!(!text.contains("--acp"), "{text}");
    assert!(attr(root, "gen_ai.agent.name").is_some());
    assert_eq!(
        attr(root, "acpx.session.name").unwrap()["stringValue"],
        "demo"
    );
}

#[test]
fn a_live_turn_has_the_ids_of_the_whole_export() {
    let events = sample();
    let whole = export(Format::Otlp, &events).unwrap();
    let mut live = TurnTrace::new(record(), "r1");
    for e in &events {
        live.push(e);
    }
    let body: Value = serde_json::from_slice(&live.finish().unwrap()).unwrap();
    let spans = body["resourceSpans"][0]["scopeSpans"][0]["spans"]
        .as_array()
        .unwrap();
    let all = whole["resourceSpans"][0]["scopeSpans"][0]["spans"]
        .as_array()
        .unwrap();
    assert_eq!(spans.len(), 5);
    assert_eq!(spans[..], all[..5]);
    // What a live export sends never holds the agent command or the session's name.
    let text = body.to_string();
    assert!(!text.contains("--acp") && !text.contains("acpx.session.name"));
    let mut missing = TurnTrace::new(record(), "nope");
    for e in &events {
        missing.push(e);
    }
    assert!(missing.finish().is_none());
}

#[test]
fn trace_ids_of_ids_that_are_not_uuids_are_hashed() {
    let a = crate::otlp::TraceIds::new("my-session");
    assert_eq!(a.trace_id().len(), 32);
    assert_eq!(
        a.trace_id(),
        crate::otlp::TraceIds::new("my-session").trace_id()
    );
    assert_ne!(
        a.trace_id(),
        crate::otlp::TraceIds::new("my-session2").trace_id()
    );
}

#[test]
fn a_fork_starts_with_its_parents_conversation_as_copied_context() {
    let thread = json!({"version": "0.3.0", "title": "", "updated_at": "2026-01-01T00:00:00Z",
        "messages": [
        {"User": {"id": "u1", "content": [{"Text": "look"}, {"Image": {"source": "…"}}]}},
        {"Agent": {"content": [
            {"Thinking": {"text": "plan", "signature": null}},
            {"ToolUse": {"id": "c1", "name": "Read a", "kind": "read", "input": {"path": "a"},
                         "raw_input": "{}", "is_input_complete": true}},
            {"Text": "Seen."}],
         "tool_results": {"c1": {"tool_use_id": "c1", "tool_name": "Read a", "is_error": false,
                                 "content": [{"Text": "A"}], "output": null}}}},
        "Resume"]});
    let mut events = log(&[(
        "",
        "lifecycle_event",
        json!({"phase": "session_forked", "thread": thread, "state": {}}),
    )]);
    events.extend(sample()[2..16].iter().cloned());
    let doc = export(Format::Atif, &events).unwrap();
    let steps = doc["steps"].as_array().unwrap();
    assert_eq!(steps[0]["message"], "look\n\n[image]");
    assert_eq!(steps[0]["is_copied_context"], true);
    assert_eq!(steps[1]["reasoning_content"], "plan");
    assert_eq!(steps[1]["tool_calls"][0]["function_name"], "read");
    assert_eq!(steps[1]["observation"]["results"][0]["content"], "A");
    assert_eq!(steps[2]["message"], "Seen.");
    assert_eq!(steps[2]["is_copied_context"], true);
    // Then the fork's own turns, numbered on.
    assert_eq!(steps[3]["step_id"], 4);
    assert_eq!(steps[3]["message"], "fix it\n\n[image]");
    assert!(steps[3].get("is_copied_context").is_none());
    // A trace has the fork's own turns only.
    let trace = export(Format::Otlp, &events).unwrap();
    let spans = trace["resourceSpans"][0]["scopeSpans"][0]["spans"]
        .as_array()
        .unwrap();
    assert_eq!(
        spans
            .iter()
            .filter(|s| s["name"] == "invoke_agent agent")
            .count(),
        1
    );
}
