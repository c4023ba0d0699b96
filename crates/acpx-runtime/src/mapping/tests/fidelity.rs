//! Thread fidelity: ACP kind/title/status on the ToolUse, diffs and terminal output on the
//! result (capped), why an unfinished call ended, and every token field.

use super::*;
use crate::mapping::tool_content::{DIFFS_KEY, TERMINALS_KEY, UNFINISHED_KEY};

fn client_op(l: &mut Log, method: &str, extra: Value) {
    let mut body = json!({"method": method, "status": "completed", "summary": "s",
                          "timestamp": "2026-01-01T00:00:00.000Z"});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    let p = EventPayload::from_parts("client_operation", &body).unwrap();
    l.push(Some("req_1"), p);
}

fn error(l: &mut Log, body: Value) {
    let p = EventPayload::from_parts("prompt_error", &body).unwrap();
    l.push(Some("req_1"), p);
}

fn tool_use(a: &AgentMessage, ix: usize) -> &acpx_model::ToolUse {
    match &a.content[ix] {
        AgentContent::ToolUse(t) => t,
        other => panic!("not a tool use: {other:?}"),
    }
}

#[test]
fn tool_use_keeps_kind_title_status_and_a_meta_tool_name() {
    let mut l = Log::new();
    l.start("edit");
    l.update(
        json!({"sessionUpdate": "tool_call", "toolCallId": "e", "title": "Edit main.rs",
                    "kind": "edit", "status": "in_progress",
                    "_meta": {"claudeCode": {"toolName": "Edit"}}}),
    );
    let t = tool_use(l.agent(1), 0);
    assert_eq!(t.name, "Edit");
    assert_eq!(t.extra["title"], "Edit main.rs");
    assert_eq!(t.extra["kind"], "edit");
    assert_eq!(t.extra["status"], "in_progress");
    l.update(json!({"sessionUpdate": "tool_call_update", "toolCallId": "e", "status": "failed"}));
    let a = l.agent(1);
    assert_eq!(tool_use(a, 0).extra["status"], "failed");
    assert!(a.tool_results["e"].is_error);
}

#[test]
fn diffs_and_terminal_output_reach_the_result_capped() {
    let mut l = Log::new();
    l.start("build");
    let big_new = "n".repeat(TOOL_OUTPUT_CAP_BYTES + 500);
    l.update(
        json!({"sessionUpdate": "tool_call", "toolCallId": "w", "title": "Write", "kind": "edit",
        "status": "completed",
        "content": [{"type": "diff", "path": "/repo/a.rs", "oldText": "old", "newText": big_new}]}),
    );
    let r = &l.agent(1).tool_results["w"];
    let d = &r.extra[DIFFS_KEY][0];
    assert_eq!(d["path"], "/repo/a.rs");
    assert_eq!(d["old_text"], "old");
    assert_eq!(
        d["new_text"].as_str().unwrap().len(),
        TOOL_OUTPUT_CAP_BYTES - 3
    );
    assert_eq!(d["truncated"], true);
    assert_eq!(d["bytes"], 3 + big_new.len());
    assert_eq!(r.extra["truncated"], true);

    l.update(
        json!({"sessionUpdate": "tool_call", "toolCallId": "t", "title": "cargo test",
        "kind": "execute", "status": "in_progress",
        "content": [{"type": "terminal", "terminalId": "term-1"}]}),
    );
    let long = format!("{}END", "x".repeat(TOOL_OUTPUT_CAP_BYTES));
    client_op(
        &mut l,
        "terminal/output",
        json!({"terminalId": "term-1", "output": long, "truncated": false}),
    );
    client_op(
        &mut l,
        "terminal/wait_for_exit",
        json!({"terminalId": "term-1", "exitStatus": {"exitCode": 0, "signal": null}}),
    );
    l.update(
        json!({"sessionUpdate": "tool_call_update", "toolCallId": "t", "status": "completed"}),
    );
    let a = l.agent(1);
    let term = &a.tool_results["t"].extra[TERMINALS_KEY][0];
    assert_eq!(term["terminal_id"], "term-1");
    let out = term["output"].as_str().unwrap();
    assert!(out.ends_with("END"), "a terminal keeps its end");
    assert_eq!(out.len(), TOOL_OUTPUT_CAP_BYTES);
    assert_eq!(term["truncated"], true);
    assert_eq!(term["output_bytes"], long.len());
    assert_eq!(term["exit_status"]["exitCode"], 0);
    assert!(
        !l.record
            .acpx
            .extra
            .contains_key(tool_content::TERMINAL_OUTPUTS_KEY),
        "a result takes its terminal's output"
    );
}

fn open_call_then(end: impl FnOnce(&mut Log)) -> acpx_model::ToolResult {
    let mut l = Log::new();
    l.start("x");
    l.update(
        json!({"sessionUpdate": "tool_call", "toolCallId": "c", "title": "Run", "kind": "execute",
                    "status": "in_progress"}),
    );
    end(&mut l);
    let a = l.agent(1);
    assert!(tool_use(a, 0).is_input_complete);
    a.tool_results["c"].clone()
}

#[test]
fn an_unfinished_call_says_why_it_ended() {
    let cancelled = open_call_then(|l| l.done("cancelled", None));
    assert_eq!(cancelled.extra[UNFINISHED_KEY], "cancelled");
    assert_eq!(
        cancelled.content,
        vec![ResultContent::Text(CANCELED_TOOL_TEXT.into())]
    );

    let exited = open_call_then(|l| {
        error(
            l,
            json!({"code": "RUNTIME", "detailCode": "AGENT_DISCONNECTED",
            "message": "the agent process exited with code 1 during the turn", "retryable": true,
            "acp": null, "outcome": "failed", "agentExit": {"exitCode": 1, "signal": null}}),
        )
    });
    assert_eq!(exited.extra[UNFINISHED_KEY], "agent_exited");
    let ResultContent::Text(t) = &exited.content[0] else {
        panic!()
    };
    let t = t.to_text().unwrap();
    assert!(
        t.contains("agent process ended") && t.contains("code 1"),
        "{t}"
    );

    let failed = open_call_then(|l| {
        error(
            l,
            json!({"code": "RUNTIME", "detailCode": "ACP_ERROR", "message": "model overloaded",
            "retryable": false, "acp": null, "outcome": "failed"}),
        )
    });
    assert_eq!(failed.extra[UNFINISHED_KEY], "turn_failed");
    assert!(failed.is_error);

    let interrupted = open_call_then(|l| l.start("next"));
    assert_eq!(interrupted.extra[UNFINISHED_KEY], "interrupted");

    let ended = open_call_then(|l| l.done("end_turn", None));
    assert_eq!(ended.extra[UNFINISHED_KEY], "turn_ended");
}

#[test]
fn every_token_field_is_kept_per_request_and_summed() {
    let mut l = Log::new();
    l.start("one");
    let u1 = l.record.thread.last_user_message_id().unwrap().to_owned();
    l.done(
        "end_turn",
        Some(
            json!({"inputTokens": 10, "outputTokens": 4, "thoughtTokens": 3,
                    "cachedReadTokens": 2, "cachedWriteTokens": 1, "totalTokens": 20}),
        ),
    );
    l.start("two");
    l.done(
        "end_turn",
        Some(json!({"inputTokens": 1, "outputTokens": 1, "thoughtTokens": 1, "totalTokens": 3})),
    );
    let t = &l.record.thread;
    let u = t.request_token_usage[&u1];
    assert_eq!(
        (
            u.input_tokens,
            u.output_tokens,
            u.thought_tokens,
            u.cache_read_input_tokens,
            u.cache_creation_input_tokens,
            u.total_tokens
        ),
        (10, 4, Some(3), 2, 1, Some(20))
    );
    assert_eq!(t.cumulative_token_usage.thought_tokens, Some(4));
    assert_eq!(t.cumulative_token_usage.total_tokens, Some(23));
    let written = serde_json::to_value(t).unwrap();
    assert_eq!(written["request_token_usage"][&u1]["thought_tokens"], 3);
}

#[test]
fn a_terminal_released_unread_keeps_its_output() {
    // The agent waits and releases without `terminal/output`: the release carries what acpx
    // captured (issue 46), and the result shows it.
    let mut l = Log::new();
    l.start("run");
    l.update(
        json!({"sessionUpdate": "tool_call", "toolCallId": "t", "title": "Run", "kind": "execute",
        "status": "in_progress", "content": [{"type": "terminal", "terminalId": "term-9"}]}),
    );
    client_op(
        &mut l,
        "terminal/wait_for_exit",
        json!({"terminalId": "term-9", "exitStatus": {"exitCode": 0, "signal": null}}),
    );
    client_op(
        &mut l,
        "terminal/release",
        json!({"terminalId": "term-9", "output": "TERMINAL-OUTPUT-42\n", "truncated": false,
               "exitStatus": {"exitCode": 0, "signal": null}}),
    );
    l.update(
        json!({"sessionUpdate": "tool_call_update", "toolCallId": "t", "status": "completed"}),
    );
    let term = &l.agent(1).tool_results["t"].extra[TERMINALS_KEY][0];
    assert_eq!(term["output"], "TERMINAL-OUTPUT-42\n");
    assert_eq!(term["exit_status"]["exitCode"], 0);
}
