use super::*;
use acpx_model::{
    AgentContent, AgentMessage, EventContext, EventSource, EventStream, Message, NewSession,
    RecordId, ResultContent, Thinking, Timestamp, TokenUsage,
};
use serde_json::{json, Value};

const ACP: &str = "acp-1";

struct Log {
    record: SessionRecord,
    events: Vec<EventEnvelope>,
    t: i64,
}

impl Log {
    fn new() -> Self {
        let record = SessionRecord::new(
            NewSession {
                acpx_record_id: RecordId::parse("rec-1").unwrap(),
                acp_session_id: ACP.into(),
                agent_session_id: None,
                agent_command: "agent".into(),
                cwd: "/repo".into(),
                name: None,
            },
            Timestamp::from_millis(1_000_000).unwrap(),
        );
        Log {
            record,
            events: Vec::new(),
            t: 1_000_000,
        }
    }

    fn push(&mut self, request_id: Option<&str>, payload: EventPayload) -> Effect {
        self.t += 10;
        let id = self.record.acpx_record_id.clone();
        let ctx = EventContext {
            acpx_record_id: &id,
            acp_session_id: ACP,
            request_id,
            stream: EventStream::Prompt,
            source: EventSource::Acp,
        };
        let e = EventEnvelope::new(
            &ctx,
            self.record.acpx.audit_seq + 1,
            Timestamp::from_millis(self.t).unwrap(),
            payload,
        );
        self.events.push(e.clone());
        apply_event(&mut self.record, &e)
    }

    fn update(&mut self, update: Value) -> Effect {
        let p = EventPayload::from_parts(
            "session_update",
            &json!({"sessionId": ACP, "update": update}),
        )
        .unwrap();
        self.push(Some("req_1"), p)
    }

    fn start(&mut self, text: &str) {
        let p = EventPayload::from_parts(
            "prompt_started",
            &json!({"message_preview": text, "resumed": false, "userMessageId": format!("u-{}", self.t),
                    "prompt": [{"type": "text", "text": text}]}),
        )
        .unwrap();
        assert_eq!(self.push(Some("req_1"), p), Effect::Applied);
    }

    fn done(&mut self, stop: &str, usage: Option<Value>) {
        let mut body = json!({"stopReason": stop, "permissionStats": {"requested": 1, "approved": 1, "denied": 0, "cancelled": 0}});
        if let Some(u) = usage {
            body["usage"] = u;
        }
        let p = EventPayload::from_parts("prompt_done", &body).unwrap();
        self.push(Some("req_1"), p);
    }

    fn agent(&self, ix: usize) -> &AgentMessage {
        match &self.record.thread.messages[ix] {
            Message::Agent(a) => a,
            other => panic!("message {ix} is not Agent: {other:?}"),
        }
    }
}

fn text(t: &str) -> Value {
    json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": t}})
}

#[test]
fn chunks_merge_and_repeated_chunks_are_kept() {
    let mut l = Log::new();
    l.start("hi");
    l.update(json!({"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "let me "}}));
    l.update(json!({"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "think"}}));
    l.update(text("ha"));
    l.update(text("ha"));
    l.update(text(" "));
    assert_eq!(l.record.thread.messages.len(), 2);
    let a = l.agent(1);
    assert_eq!(
        a.content,
        vec![
            AgentContent::Thinking(Thinking {
                text: "let me think".into(),
                signature: None
            }),
            AgentContent::Text("haha ".into()),
        ]
    );
}

#[test]
fn message_id_change_and_text_after_finished_tool_start_new_agent_messages() {
    let mut l = Log::new();
    l.start("go");
    l.update(json!({"sessionUpdate": "agent_message_chunk", "messageId": "m1", "content": {"type": "text", "text": "a"}}));
    l.update(json!({"sessionUpdate": "agent_message_chunk", "messageId": "m1", "content": {"type": "text", "text": "b"}}));
    l.update(json!({"sessionUpdate": "agent_message_chunk", "messageId": "m2", "content": {"type": "text", "text": "c"}}));
    assert_eq!(l.record.thread.messages.len(), 3);
    assert_eq!(l.agent(1).content, vec![AgentContent::Text("ab".into())]);
    assert_eq!(l.agent(2).content, vec![AgentContent::Text("c".into())]);

    l.update(json!({"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "Read x", "status": "in_progress"}));
    l.update(text("still same round"));
    assert_eq!(
        l.record.thread.messages.len(),
        3,
        "text after an unfinished tool stays"
    );
    l.update(
        json!({"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "completed"}),
    );
    l.update(text("next round"));
    assert_eq!(l.record.thread.messages.len(), 4);
    assert!(l.agent(2).tool_results.contains_key("t1"));
    assert_eq!(
        l.agent(3).content,
        vec![AgentContent::Text("next round".into())]
    );
}

mod adopted;
mod fidelity;

#[test]
fn tool_call_lifecycle_upserts_and_builds_the_result() {
    let mut l = Log::new();
    l.start("read");
    l.update(json!({"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "Read foo", "kind": "read",
                    "rawInput": {"path": "/repo/foo"}}));
    {
        let a = l.agent(1);
        let AgentContent::ToolUse(t) = &a.content[0] else {
            panic!()
        };
        assert_eq!(t.name, "Read foo");
        assert_eq!(t.input, json!({"path": "/repo/foo"}));
        assert_eq!(t.raw_input, r#"{"path":"/repo/foo"}"#);
        assert!(!t.is_input_complete, "pending input is not complete");
    }
    assert!(l.record.acpx.extra.contains_key(OPEN_TOOL_CALLS_KEY));
    // A second tool_call with the same id updates, never duplicates.
    l.update(json!({"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "Read foo.rs", "status": "in_progress",
                    "content": [{"type": "content", "content": {"type": "text", "text": "one"}},
                                {"type": "content", "content": {"type": "text", "text": "two"}}]}));
    // Replace semantics: a shorter list really shortens; absent fields keep their value.
    l.update(
        json!({"sessionUpdate": "tool_call_update", "toolCallId": "c1",
                    "content": [{"type": "content", "content": {"type": "text", "text": "only"}},
                                {"type": "diff", "path": "/repo/foo", "newText": "x"}]}),
    );
    l.update(json!({"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "completed", "rawOutput": {"ok": true}, "title": null}));
    let a = l.agent(1);
    assert_eq!(a.content.len(), 1);
    let AgentContent::ToolUse(t) = &a.content[0] else {
        panic!()
    };
    assert_eq!(t.name, "Read foo.rs");
    assert!(t.is_input_complete);
    let r = &a.tool_results["c1"];
    assert_eq!(r.tool_use_id, "c1");
    assert_eq!(r.tool_name, "Read foo.rs");
    assert!(!r.is_error);
    assert_eq!(r.content, vec![ResultContent::Text("only".into())]);
    assert_eq!(r.output, Some(json!({"ok": true}).into()));
    assert!(!r.extra.contains_key("truncated"), "nothing was truncated");
    assert_eq!(
        r.extra["diffs"],
        json!([{"path": "/repo/foo", "old_text": null, "new_text": "x"}])
    );
    assert_eq!(t.extra["kind"], "read");
    assert_eq!(t.extra["status"], "completed");
    assert!(
        !l.record.acpx.extra.contains_key(OPEN_TOOL_CALLS_KEY),
        "finished calls leave the open map"
    );
}

#[test]
fn acp_name_wins_over_title() {
    let mut l = Log::new();
    l.start("x");
    l.update(json!({"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "Run ls", "name": "run_command"}));
    l.update(json!({"sessionUpdate": "tool_call_update", "toolCallId": "c1", "title": "Run ls -la", "status": "failed"}));
    let a = l.agent(1);
    let AgentContent::ToolUse(t) = &a.content[0] else {
        panic!()
    };
    assert_eq!(t.name, "run_command");
    assert!(a.tool_results["c1"].is_error);
    assert_eq!(
        a.tool_results["c1"].content,
        vec![ResultContent::Text("Run ls -la (failed)".into())]
    );
}

/// A `tool_call` names a call of the running turn, a `tool_call_update` one of the two latest
/// turns: an agent that numbers its calls afresh each turn gets each turn's calls, an update
/// of a finished call of the turn before stays ignored, and an update of an older id starts a
/// new call; whatever the process holds in memory.
#[test]
fn a_tool_call_id_is_looked_up_in_the_latest_turns() {
    let mut l = Log::new();
    let call = |kind: &str, id: &str| json!({"sessionUpdate": kind, "toolCallId": id, "title": "T", "status": "completed"});
    let tool_messages = |l: &Log| {
        l.record
            .thread
            .messages
            .iter()
            .filter(|m| matches!(m, Message::Agent(a) if !a.tool_results.is_empty()))
            .count()
    };
    l.start("one");
    l.update(call("tool_call", "c1"));
    l.done("end_turn", None);
    l.start("two");
    let e = l.update(call("tool_call_update", "c1"));
    assert!(
        matches!(e, Effect::Ignored(ref why) if why.contains("already finished")),
        "{e:?}"
    );
    assert_eq!(l.update(call("tool_call", "c1")), Effect::Applied);
    assert_eq!(tool_messages(&l), 2, "turn two has its own c1");
    l.done("end_turn", None);
    l.start("three");
    l.start("four");
    assert_eq!(l.update(call("tool_call_update", "c1")), Effect::Applied);
    assert_eq!(tool_messages(&l), 3);
}

#[test]
fn terminal_states_are_absorbing() {
    let mut l = Log::new();
    l.start("x");
    l.update(json!({"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "T", "status": "completed",
                    "content": [{"type": "content", "content": {"type": "text", "text": "done"}}]}));
    let before = l.record.thread.clone();
    let e = l.update(json!({"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "in_progress",
                            "content": [{"type": "content", "content": {"type": "text", "text": "again"}}]}));
    assert!(
        matches!(e, Effect::Ignored(ref why) if why.contains("already finished")),
        "{e:?}"
    );
    let e = l.update(json!({"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "T2", "status": "pending"}));
    assert!(matches!(e, Effect::Ignored(_)));
    assert_eq!(l.record.thread.messages, before.messages);
    assert!(!l.record.acpx.extra.contains_key(OPEN_TOOL_CALLS_KEY));
    // Still visible in the audit ring.
    let last = l.record.acpx.audit_events.last().unwrap();
    assert!(last.summary.contains("not mapped"), "{}", last.summary);
}

#[test]
fn update_for_an_unknown_id_creates_a_placeholder() {
    let mut l = Log::new();
    l.start("x");
    assert_eq!(
        l.update(json!({"sessionUpdate": "tool_call_update", "toolCallId": "ghost", "status": "in_progress"})),
        Effect::Applied
    );
    let AgentContent::ToolUse(t) = &l.agent(1).content[0] else {
        panic!()
    };
    assert_eq!(t.id, "ghost");
    assert_eq!(t.name, "ghost");
    assert!(t.is_input_complete);
}

#[test]
fn oversized_output_and_input_are_capped_with_markers() {
    let mut l = Log::new();
    l.start("x");
    let big = "é".repeat(TOOL_OUTPUT_CAP_BYTES); // 2 bytes per char
    let big_input = json!({"data": "x".repeat(TOOL_OUTPUT_CAP_BYTES + 5)});
    let big_output = json!({"blob": "y".repeat(TOOL_OUTPUT_CAP_BYTES * 2)});
    l.update(json!({"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "Big", "status": "in_progress", "rawInput": big_input}));
    l.update(
        json!({"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "completed",
                    "content": [{"type": "content", "content": {"type": "text", "text": big}}],
                    "rawOutput": big_output}),
    );
    let a = l.agent(1);
    let r = &a.tool_results["c1"];
    let ResultContent::Text(t) = &r.content[0] else {
        panic!()
    };
    assert!(t.len() <= TOOL_OUTPUT_CAP_BYTES && t.len() >= TOOL_OUTPUT_CAP_BYTES - 1);
    assert_eq!(r.extra["truncated"], json!(true));
    assert_eq!(r.extra["content_bytes"], json!(big.len()));
    let out_len = serde_json::to_string(&big_output).unwrap().len();
    assert_eq!(r.extra["output_bytes"], json!(out_len));
    let output = r.output.as_ref().and_then(|o| o.as_value());
    assert!(matches!(output, Some(Value::String(s)) if s.len() == TOOL_OUTPUT_CAP_BYTES));
    let AgentContent::ToolUse(u) = &a.content[0] else {
        panic!()
    };
    assert_eq!(u.extra["input_truncated"], json!(true));
    assert_eq!(u.raw_input.len(), TOOL_OUTPUT_CAP_BYTES);
    // The log keeps everything.
    let logged = &l.events.last().unwrap().payload["update"]["content"][0]["content"]["text"];
    assert_eq!(logged.as_str().unwrap().len(), big.len());
}

#[test]
fn turn_end_closes_open_tool_uses() {
    let mut l = Log::new();
    l.start("x");
    l.update(
        json!({"sessionUpdate": "tool_call", "toolCallId": "a", "title": "A", "status": "pending"}),
    );
    l.update(json!({"sessionUpdate": "tool_call", "toolCallId": "b", "title": "B", "status": "in_progress"}));
    l.update(
        json!({"sessionUpdate": "tool_call_update", "toolCallId": "b", "status": "completed"}),
    );
    l.done("cancelled", None);
    let a = l.agent(1);
    for c in &a.content {
        let AgentContent::ToolUse(t) = c else {
            panic!()
        };
        assert!(t.is_input_complete);
        assert!(a.tool_results.contains_key(&t.id));
    }
    assert!(a.tool_results["a"].is_error);
    assert_eq!(
        a.tool_results["a"].content,
        vec![ResultContent::Text(CANCELED_TOOL_TEXT.into())]
    );
    assert!(!a.tool_results["b"].is_error);
    let turn = l.record.acpx.last_turn.as_ref().unwrap();
    assert_eq!(turn.outcome, "cancelled");
    assert_eq!(turn.stop_reason.as_deref(), Some("cancelled"));
    assert_eq!(turn.permission_stats.approved, 1);
    assert!(!l.record.acpx.extra.contains_key(OPEN_TOOL_CALLS_KEY));
}

#[test]
fn late_updates_do_not_reopen_the_turn_but_session_updates_apply() {
    let mut l = Log::new();
    l.start("x");
    l.update(text("hello"));
    l.done("end_turn", None);
    let thread = l.record.thread.messages.clone();
    assert!(matches!(l.update(text("late")), Effect::Ignored(ref w) if w.contains("late")));
    assert!(matches!(
        l.update(json!({"sessionUpdate": "tool_call", "toolCallId": "z", "title": "Z"})),
        Effect::Ignored(_)
    ));
    assert_eq!(l.record.thread.messages, thread);
    assert_eq!(
        l.update(json!({"sessionUpdate": "current_mode_update", "currentModeId": "plan"})),
        Effect::Applied
    );
    assert_eq!(l.record.acpx.current_mode_id.as_deref(), Some("plan"));
}

#[test]
fn session_level_updates_fill_acpx_and_title() {
    let mut l = Log::new();
    l.update(json!({"sessionUpdate": "available_commands_update", "availableCommands": [
        {"name": "create_plan", "description": "d"}, {"name": "run", "description": "r", "input": {"hint": "x"}}]}));
    assert_eq!(l.record.acpx.available_commands, vec!["create_plan", "run"]);
    let opts = json!([{"id": "model", "name": "Model", "type": "select", "currentValue": "a", "options": []}]);
    l.update(json!({"sessionUpdate": "config_option_update", "configOptions": opts}));
    assert_eq!(Value::Array(l.record.acpx.config_options.clone()), opts);
    l.update(json!({"sessionUpdate": "plan", "entries": [{"content": "a", "priority": "high", "status": "pending"}]}));
    assert_eq!(l.record.acpx.plan.as_ref().unwrap().entries.len(), 1);
    l.update(json!({"sessionUpdate": "session_info_update", "title": "Fix it", "updatedAt": "2030-01-01T00:00:00Z"}));
    assert_eq!(l.record.thread.title, "Fix it");
    assert_eq!(
        l.record.thread.updated_at,
        Timestamp::parse("2030-01-01T00:00:00Z").unwrap()
    );
    l.update(json!({"sessionUpdate": "session_info_update"}));
    assert_eq!(
        l.record.thread.title, "Fix it",
        "an absent title is unchanged"
    );
    l.update(json!({"sessionUpdate": "session_info_update", "title": null}));
    assert_eq!(l.record.thread.title, "", "null clears");
    l.update(json!({"sessionUpdate": "usage_update", "used": 100, "size": 1000, "cost": {"amount": 0.5, "currency": "USD"}}));
    let u = &l.record.acpx.extra[CONTEXT_USAGE_KEY];
    assert_eq!(u["used"], json!(100));
    assert_eq!(u["cost"]["currency"], json!("USD"));
}

#[test]
fn unknown_kinds_and_foreign_sessions_are_logged_not_mapped() {
    let mut l = Log::new();
    l.start("x");
    let before = l.record.thread.clone();
    let e = l.update(json!({"sessionUpdate": "hologram_update", "beam": 1}));
    assert!(
        matches!(e, Effect::Ignored(ref w) if w.contains("hologram_update")),
        "{e:?}"
    );
    assert_eq!(l.record.thread.messages, before.messages);
    assert!(l
        .record
        .acpx
        .audit_events
        .last()
        .unwrap()
        .summary
        .contains("hologram_update"));
    let p = EventPayload::from_parts(
        "session_update",
        &json!({"sessionId": "other", "update": text("x")}),
    )
    .unwrap();
    assert!(matches!(l.push(Some("req_1"), p), Effect::Ignored(_)));
    assert_eq!(l.record.thread.messages, before.messages);
}

#[test]
fn usage_goes_to_the_turns_user_message_and_sums() {
    let mut l = Log::new();
    l.start("one");
    let u1 = l.record.thread.last_user_message_id().unwrap().to_owned();
    l.done(
        "end_turn",
        Some(
            json!({"totalTokens": 15, "inputTokens": 10, "outputTokens": 5, "cachedReadTokens": 2}),
        ),
    );
    l.start("two");
    let u2 = l.record.thread.last_user_message_id().unwrap().to_owned();
    l.update(json!({"sessionUpdate": "usage_update", "used": 5, "size": 10, "_meta": {"inputTokens": 1, "outputTokens": 1}}));
    assert_eq!(l.record.thread.request_token_usage[&u2].input_tokens, 1);
    l.done(
        "end_turn",
        Some(
            json!({"totalTokens": 7, "inputTokens": 4, "outputTokens": 3, "cachedWriteTokens": 1}),
        ),
    );
    let t = &l.record.thread;
    assert_eq!(
        t.request_token_usage[&u1],
        TokenUsage {
            input_tokens: 10,
            output_tokens: 5,
            cache_creation_input_tokens: 0,
            cache_read_input_tokens: 2,
            thought_tokens: None,
            total_tokens: Some(15),
        }
    );
    assert_eq!(
        t.request_token_usage[&u2].input_tokens, 4,
        "the response's usage overwrites"
    );
    assert_eq!(
        t.cumulative_token_usage,
        TokenUsage {
            input_tokens: 14,
            output_tokens: 8,
            cache_creation_input_tokens: 1,
            cache_read_input_tokens: 2,
            thought_tokens: None,
            total_tokens: Some(22),
        }
    );
}

#[test]
fn roll_forward_rebuilds_the_same_snapshot_from_any_prefix() {
    let mut l = Log::new();
    l.update(json!({"sessionUpdate": "available_commands_update", "availableCommands": [{"name": "a", "description": ""}]}));
    l.start("please");
    l.update(
        json!({"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "hm"}}),
    );
    l.update(json!({"sessionUpdate": "tool_call", "toolCallId": "c", "title": "T", "status": "in_progress"}));
    l.update(text("mid"));
    l.update(
        json!({"sessionUpdate": "tool_call_update", "toolCallId": "c", "status": "completed"}),
    );
    l.update(text("after"));
    l.update(json!({"sessionUpdate": "weird"}));
    l.done(
        "end_turn",
        Some(json!({"inputTokens": 3, "outputTokens": 4})),
    );
    let full = serde_json::to_value(&l.record).unwrap();
    for k in 0..=l.events.len() {
        let mut fresh = Log::new().record;
        roll_forward(&mut fresh, &l.events[..k]);
        // A saved snapshot goes through JSON.
        let mut reloaded: SessionRecord =
            serde_json::from_value(serde_json::to_value(&fresh).unwrap()).unwrap();
        let report = roll_forward(&mut reloaded, &l.events);
        assert_eq!(report.already_applied, k as u64);
        assert_eq!(report.applied, (l.events.len() - k) as u64);
        assert_eq!(serde_json::to_value(&reloaded).unwrap(), full, "prefix {k}");
    }
}

#[test]
fn a_new_prompt_over_a_running_turn_marks_it_interrupted() {
    let mut l = Log::new();
    l.start("one");
    l.update(json!({"sessionUpdate": "tool_call", "toolCallId": "c", "title": "T", "status": "in_progress"}));
    l.start("two");
    let a = l.agent(1);
    assert!(a.tool_results["c"].is_error);
    assert_eq!(l.record.acpx.last_turn.as_ref().unwrap().outcome, "running");
    assert_eq!(l.record.thread.messages.len(), 3);
}

#[test]
fn prompt_error_closes_the_turn_with_its_outcome() {
    let mut l = Log::new();
    l.start("x");
    l.update(json!({"sessionUpdate": "tool_call", "toolCallId": "c", "title": "T"}));
    let p = EventPayload::from_parts("prompt_error", &json!({
        "code": "RUNTIME", "detailCode": "TURN_INTERRUPTED", "message": "acpx died", "retryable": true,
        "acp": null, "outcome": "interrupted"})).unwrap();
    l.push(Some("req_1"), p);
    let t = l.record.acpx.last_turn.as_ref().unwrap();
    assert_eq!(t.outcome, "interrupted");
    assert_eq!(
        t.error.as_ref().unwrap().detail_code.as_deref(),
        Some("TURN_INTERRUPTED")
    );
    assert!(t.ended_at.is_some());
    assert!(l.agent(1).tool_results["c"].is_error);
    assert!(!turn_is_running(&l.record));
}

#[test]
fn controls_set_last_control_update_and_desired_values() {
    let mut l = Log::new();
    let p = EventPayload::from_parts(
        "control_done",
        &json!({"action": "set_mode", "ok": true, "result": {}, "input": {"modeId": "code"}}),
    )
    .unwrap();
    l.push(Some("ctl_1"), p);
    let c = l.record.acpx.last_control_update.clone().unwrap();
    assert_eq!(
        (c.action.as_str(), c.request_id.as_str(), c.ok),
        ("set_mode", "ctl_1", true)
    );
    assert_eq!(c.payload, json!({"mode_id": "code"}));
    assert_eq!(l.record.acpx.current_mode_id.as_deref(), Some("code"));
    let p = EventPayload::from_parts("control_done", &json!({"action": "set_config_option", "ok": true,
        "result": {"configOptions": [{"id": "model", "currentValue": "b"}]}, "input": {"configId": "model", "value": "b"}})).unwrap();
    l.push(Some("ctl_2"), p);
    assert_eq!(
        l.record.acpx.extra[DESIRED_CONFIG_KEY],
        json!({"model": "b"})
    );
    assert_eq!(l.record.acpx.config_options[0]["currentValue"], json!("b"));
    let p = EventPayload::from_parts("control_error", &json!({"action": "set_mode", "ok": false,
        "error": {"code": "RUNTIME", "detailCode": "ACP_ERROR", "message": "nope"}, "input": {"modeId": "zzz"}})).unwrap();
    l.push(Some("ctl_3"), p);
    let c = l.record.acpx.last_control_update.clone().unwrap();
    assert!(!c.ok);
    assert_eq!(c.error.unwrap()["message"], json!("nope"));
    assert_eq!(
        l.record.acpx.current_mode_id.as_deref(),
        Some("code"),
        "a failed control changes nothing else"
    );
}

#[test]
fn lifecycle_identity_rules() {
    let mut l = Log::new();
    let life = |v: Value| EventPayload::from_parts("lifecycle_event", &v).unwrap();
    l.push(None, life(json!({"phase": "session_created", "acpSessionId": "acp-1", "agentSessionId": "native-1"})));
    assert_eq!(l.record.agent_session_id.as_deref(), Some("native-1"));
    l.push(
        None,
        life(json!({"phase": "session_attached", "acpSessionId": "acp-1", "agentSessionId": ""})),
    );
    assert_eq!(
        l.record.agent_session_id.as_deref(),
        Some("native-1"),
        "empty never replaces"
    );
    l.push(
        None,
        life(json!({"phase": "session_fallback", "acpSessionId": "acp-2"})),
    );
    assert_eq!(l.record.acp_session_id, "acp-2");
    assert_eq!(l.record.agent_session_id.as_deref(), Some("native-1"));
    l.push(None, life(json!({"phase": "agent_started", "pid": 4242})));
    assert_eq!(l.record.pid, Some(4242));
    l.push(
        None,
        life(
            json!({"phase": "agent_exit", "exitCode": 3, "signal": null, "reason": "process_exit"}),
        ),
    );
    assert_eq!(
        (l.record.pid, l.record.last_agent_exit_code),
        (None, Some(3))
    );
    assert_eq!(
        l.record.last_agent_disconnect_reason.as_deref(),
        Some("process_exit")
    );
}

#[test]
fn audit_ring_is_capped_and_counts_drops() {
    let mut l = Log::new();
    for _ in 0..(DEFAULT_AUDIT_RING_CAPACITY + 7) {
        l.update(json!({"sessionUpdate": "current_mode_update", "currentModeId": "m"}));
    }
    assert_eq!(
        l.record.acpx.audit_events.len(),
        DEFAULT_AUDIT_RING_CAPACITY
    );
    assert_eq!(l.record.acpx.audit_dropped_count, 7);
    assert_eq!(
        l.record.acpx.audit_seq,
        (DEFAULT_AUDIT_RING_CAPACITY + 7) as u64
    );
}

#[test]
fn prompt_blocks_become_zed_user_content() {
    // 1x1 PNG
    let png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";
    let c = user_content_from_acp(&[
        json!({"type": "text", "text": "hi"}),
        json!({"type": "image", "data": png, "mimeType": "image/png"}),
        json!({"type": "audio", "data": "AA==", "mimeType": "audio/wav"}),
        json!({"type": "resource_link", "uri": "file:///repo/a%20b.rs", "name": "a b.rs"}),
        json!({"type": "resource_link", "uri": "zed://x", "name": "x"}),
        json!({"type": "resource", "resource": {"uri": "https://e.com/p", "text": "page"}}),
        json!({"type": "resource", "resource": {"uri": "file:///b", "blob": "AA=="}}),
        json!({"type": "mystery"}),
    ]);
    assert_eq!(
        serde_json::to_value(&c).unwrap(),
        json!([
            {"Text": "hi"},
            {"Image": {"source": png, "size": {"width": 1, "height": 1}}},
            {"Text": "[audio]"},
            {"Mention": {"uri": {"File": {"abs_path": "/repo/a b.rs"}}, "content": ""}},
            {"Text": "[x](zed://x)"},
            {"Mention": {"uri": {"Fetch": {"url": "https://e.com/p"}}, "content": "page"}},
            {"Text": "[blob]"},
            {"Text": "[unknown]"},
        ])
    );
}

#[test]
fn a_plan_is_kept_on_the_turn_s_agent_message() {
    let mut l = Log::new();
    l.start("do it");
    let entries = json!([{"content": "Read", "priority": "high", "status": "completed"}]);
    l.update(json!({"sessionUpdate": "plan", "entries": entries}));
    l.update(
        json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "ok"}}),
    );
    let Some(Message::Agent(a)) = l.record.thread.messages.last() else {
        panic!("an agent message");
    };
    assert_eq!(a.extra.get(PLAN_KEY), Some(&entries));
    assert_eq!(
        a.content.len(),
        1,
        "the reply joins the message holding the plan"
    );
}
