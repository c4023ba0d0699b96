//! Tests of the whole page: a session with every kind of item, and one whose agent writes
//! hostile strings everywhere it can.

use acpx_model::EventEnvelope;
use serde_json::{json, Value};

use super::HtmlExport;

const RID: &str = "0b4a4c9e-5a3a-4d0e-9a1a-2b2f3c4d5e6f";

/// Events from (type, requestId, payload) triples, numbered from 1, a second apart.
fn log(events: &[(&str, Option<&str>, Value)]) -> Vec<EventEnvelope> {
    events
        .iter()
        .enumerate()
        .map(|(i, (kind, req, payload))| {
            let mut line = json!({
                "eventVersion": 1,
                "seq": i + 1,
                "timestamp": format!("2026-12-07T10:00:{:02}.000Z", i % 60),
                "acpxRecordId": RID,
                "acpSessionId": "sess-1",
                "stream": "prompt",
                "source": "acp",
                "type": kind,
                "payload": payload,
            });
            if let Some(r) = req {
                line["requestId"] = json!(r);
            }
            EventEnvelope::from_ndjson_line(line.to_string().as_bytes()).expect("test event")
        })
        .collect()
}

fn update(u: Value) -> Value {
    json!({"sessionId": "sess-1", "update": u})
}

fn render(events: &[EventEnvelope]) -> String {
    let mut page = HtmlExport::begin(Vec::new(), "t", &[]).expect("begin");
    for e in events {
        page.event(e).expect("event");
    }
    String::from_utf8(page.finish().expect("finish")).expect("utf-8")
}

fn rich_session() -> Vec<EventEnvelope> {
    let r = Some("req_1");
    log(&[
        (
            "lifecycle_event",
            None,
            json!({"phase": "agent_started", "pid": 7, "command": "agent"}),
        ),
        (
            "prompt_started",
            r,
            json!({"prompt": [{"type": "text", "text": "Fix main.py please"}]}),
        ),
        (
            "session_update",
            r,
            update(
                json!({"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "Let me look."}}),
            ),
        ),
        (
            "session_update",
            r,
            update(
                json!({"sessionUpdate": "plan", "entries": [{"content": "Read", "status": "completed", "priority": "high"}, {"content": "Edit", "status": "in_progress", "priority": "high"}]}),
            ),
        ),
        (
            "session_update",
            r,
            update(
                json!({"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "Edit main.py", "kind": "edit", "status": "pending", "rawInput": {}}),
            ),
        ),
        (
            "client_operation",
            r,
            json!({"method": "session/request_permission", "status": "running", "summary": "Permission requested: Edit main.py", "toolCall": {"toolCallId": "c1", "title": "Edit main.py"}, "options": [{"optionId": "allow", "name": "Allow", "kind": "allow_once"}, {"optionId": "reject", "name": "Reject", "kind": "reject_once"}]}),
        ),
        (
            "client_operation",
            r,
            json!({"method": "session/request_permission", "status": "completed", "summary": "Permission approved: Edit main.py", "decision": "approved", "optionId": "allow", "toolCallId": "c1", "kind": "edit", "policy": "approve-reads", "rule": "approve"}),
        ),
        (
            "session_update",
            r,
            update(
                json!({"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "completed", "content": [{"type": "diff", "path": "/w/main.py", "oldText": "a\nb\nc\n", "newText": "a\nB\nc\n"}, {"type": "content", "content": {"type": "text", "text": "Edit main.py"}}]}),
            ),
        ),
        (
            "session_update",
            r,
            update(
                json!({"sessionUpdate": "tool_call", "toolCallId": "c2", "title": "Run tests", "kind": "execute", "status": "in_progress"}),
            ),
        ),
        (
            "client_operation",
            r,
            json!({"method": "terminal/create", "status": "completed", "summary": "Started", "command": "sh", "args": ["-c", "pytest"], "terminalId": "term_1"}),
        ),
        (
            "session_update",
            r,
            update(
                json!({"sessionUpdate": "tool_call_update", "toolCallId": "c2", "content": [{"type": "terminal", "terminalId": "term_1"}]}),
            ),
        ),
        (
            "client_operation",
            r,
            json!({"method": "terminal/release", "status": "completed", "summary": "Released term_1", "terminalId": "term_1", "output": "3 passed\n", "truncated": false, "exitStatus": {"exitCode": 0, "signal": null}}),
        ),
        (
            "session_update",
            r,
            update(
                json!({"sessionUpdate": "tool_call_update", "toolCallId": "c2", "status": "completed"}),
            ),
        ),
        (
            "session_update",
            r,
            update(json!({"sessionUpdate": "current_mode_update", "currentModeId": "code"})),
        ),
        (
            "session_update",
            r,
            update(
                json!({"sessionUpdate": "usage_update", "used": 1200, "size": 200000, "cost": {"amount": 0.25, "currency": "USD"}}),
            ),
        ),
        (
            "session_update",
            r,
            update(
                json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "# Done\n\n- fixed "}}),
            ),
        ),
        (
            "session_update",
            r,
            update(
                json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "the bug\n\n```python\nprint('ok')\n```\n"}}),
            ),
        ),
        (
            "prompt_done",
            r,
            json!({"stopReason": "end_turn", "usage": {"inputTokens": 100, "outputTokens": 50, "totalTokens": 150}}),
        ),
        (
            "lifecycle_event",
            None,
            json!({"phase": "session_fallback", "reason": "unsupported", "acpSessionId": "sess-2", "previousAcpSessionId": "sess-1"}),
        ),
        (
            "prompt_started",
            Some("req_2"),
            json!({"prompt": [{"type": "text", "text": "again"}]}),
        ),
        (
            "session_update",
            Some("req_2"),
            update(
                json!({"sessionUpdate": "usage_update", "used": 1500, "size": 200000, "cost": {"amount": 0.40, "currency": "USD"}}),
            ),
        ),
        (
            "prompt_error",
            Some("req_2"),
            json!({"outcome": "failed", "message": "agent crashed", "usage": null}),
        ),
    ])
}

#[test]
fn every_kind_of_item_is_on_the_page() {
    let html = render(&rich_session());
    for needle in [
        "Fix main.py please",
        "<h1>Done</h1>",
        "<li>fixed the bug</li>",
        "data-lang=\"python\"",
        "Let me look.",
        "☑ Read",
        "Edit main.py",
        "@@ -1,3 +1,3 @@",
        "<div class=\"l dr\">-b</div>",
        "<div class=\"l da\">+B</div>",
        "$ sh -c pytest",
        "3 passed",
        "exit code 0",
        "class=\"answer approved\"",
        "decided by permission rule: approve",
        "<span class=\"label\">mode</span>code",
        "new ACP session sess-2",
        "<span class=\"reason\">end_turn</span>",
        "100 input · 50 output · 150 total · cost 0.2500 USD",
        "cost 0.1500 USD",
        "<span class=\"reason\">failed</span>",
        "agent crashed",
        "id=\"seq-16\"",
        "href=\"#seq-5\"",
        "Content-Security-Policy",
    ] {
        assert!(html.contains(needle), "missing {needle:?} in\n{html}");
    }
    // The tool's text that only repeats its title, and its empty input, are filler.
    assert!(!html.contains("<summary>input</summary>"), "{html}");
    assert_eq!(
        html.matches("<pre class=\"pre\">Edit main.py</pre>")
            .count(),
        0
    );
}

#[test]
fn hostile_strings_stay_text() {
    let evil = "<script>alert(1)</script><img src=x onerror=alert(2)>\
                [x](javascript:alert(3)) <a href=\"javascript:alert(4)\">a</a>\
                <style>body{background:url(http://evil.example/x)}</style>\
                <iframe src=\"http://evil.example\"></iframe>";
    let r = Some("req_1");
    let events = log(&[
        (
            "prompt_started",
            r,
            json!({"prompt": [{"type": "text", "text": evil}]}),
        ),
        (
            "session_update",
            r,
            update(
                json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": evil}}),
            ),
        ),
        (
            "session_update",
            r,
            update(
                json!({"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": evil}}),
            ),
        ),
        (
            "session_update",
            r,
            update(
                json!({"sessionUpdate": "tool_call", "toolCallId": evil, "title": evil, "kind": evil, "status": evil, "locations": [{"path": evil}], "rawInput": {"x": evil}, "content": [{"type": "diff", "path": evil, "oldText": evil, "newText": "x"}, {"type": "content", "content": {"type": "text", "text": evil}}]}),
            ),
        ),
        (
            "session_update",
            r,
            update(
                json!({"sessionUpdate": "plan", "entries": [{"content": evil, "status": evil, "priority": evil}]}),
            ),
        ),
        (
            "session_update",
            r,
            update(json!({"sessionUpdate": "current_mode_update", "currentModeId": evil})),
        ),
        ("session_update", r, update(json!({"sessionUpdate": evil}))),
        (
            "client_operation",
            r,
            json!({"method": "session/request_permission", "status": "running", "summary": evil, "toolCall": {"toolCallId": "zz", "title": evil}, "options": [{"optionId": evil, "name": evil, "kind": evil}]}),
        ),
        (
            "client_operation",
            r,
            json!({"method": evil, "status": evil, "summary": evil, "details": evil}),
        ),
        ("prompt_done", r, json!({"stopReason": evil})),
        (evil, None, json!({"x": evil})),
    ]);
    let mut page = HtmlExport::begin(Vec::new(), evil, &[("cwd", evil.to_owned())]).expect("begin");
    for e in &events {
        page.event(e).expect("event");
    }
    let html = String::from_utf8(page.finish().expect("finish")).expect("utf-8");
    // The page's own script is the only one.
    assert_eq!(html.matches("<script").count(), 1, "{html}");
    // Escaped text has no `<`: every `<` opens a tag of the viewer. None of them is one the
    // viewer does not write, and none carries a handler, a script URL or a style.
    for (i, _) in html.match_indices('<') {
        let tag = &html[i + 1..i + 1 + html[i..].find('>').expect("tag ends") - 1];
        let name = tag
            .trim_start_matches('/')
            .split([' ', '>'])
            .next()
            .unwrap_or("");
        assert!(
            name == "!DOCTYPE" || super::PAGE_ELEMENTS.contains(&name),
            "tag {tag:?} in the page"
        );
        let lower = tag.to_ascii_lowercase();
        for bad in [" on", "javascript:", "url(", "style=", "src="] {
            assert!(!lower.contains(bad), "{bad:?} in tag {tag:?}");
        }
    }
    assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
}

#[test]
fn a_long_log_streams_and_collapses_long_output() {
    let r = Some("req_1");
    let mut events = vec![(
        "prompt_started",
        r,
        json!({"prompt": [{"type": "text", "text": "go"}]}),
    )];
    for i in 0..2000 {
        events.push(("session_update", r, update(json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": format!("line {i}\n\n")}}))));
    }
    let long: String = (0..100).map(|i| format!("out {i}\n")).collect();
    events.push(("session_update", r, update(json!({"sessionUpdate": "tool_call", "toolCallId": "c", "title": "t", "status": "completed", "content": [{"type": "content", "content": {"type": "text", "text": long}}]}))));
    events.push(("prompt_done", r, json!({"stopReason": "end_turn"})));
    let html = render(&log(&events));
    assert!(html.contains("line 1999"));
    assert!(
        html.contains("<details><summary>output (100 lines"),
        "long output collapsed"
    );
    assert!(html.contains("<td>2,003</td>"), "events counted");
}

#[test]
fn an_unfinished_turn_and_an_empty_session_still_make_a_page() {
    let html = render(&log(&[(
        "prompt_started",
        Some("r"),
        json!({"prompt": []}),
    )]));
    assert!(html.contains("unfinished"));
    let html = render(&[]);
    assert!(html.contains("no turns yet") && html.ends_with("</html>\n"));
}

#[test]
fn a_long_turn_is_written_as_it_goes_in_order() {
    let r = Some("req_1");
    let mut events = vec![(
        "prompt_started",
        r,
        json!({"prompt": [{"type": "text", "text": "go"}]}),
    )];
    for i in 0..300 {
        events.push(("session_update", r, update(json!({"sessionUpdate": "tool_call", "toolCallId": format!("c{i}"), "title": format!("call {i}"), "status": "completed"}))));
        events.push(("session_update", r, update(json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": format!("step {i}")}}))));
    }
    // An update of a call written long ago: the log has it, the page says so.
    events.push((
        "session_update",
        r,
        update(
            json!({"sessionUpdate": "tool_call_update", "toolCallId": "c0", "status": "failed"}),
        ),
    ));
    events.push(("prompt_done", r, json!({"stopReason": "end_turn"})));
    let html = render(&log(&events));
    let first = html.find("call 0<").expect("call 0");
    let last = html.find("step 299").expect("step 299");
    assert!(first < last);
    assert_eq!(html.matches("<section class=\"turn\"").count(), 1);
    assert!(html.contains("1 late updates"), "{html}");
    assert!(html.contains("<th>tool calls</th><td>300</td>"), "{html}");
    let pos: Vec<usize> = (0..300)
        .map(|i| html.find(&format!("step {i}<")).expect("step"))
        .collect();
    assert!(pos.windows(2).all(|w| w[0] < w[1]), "items in log order");
}

/// An elicitation and its answer are on the page with the turn: the question's message and
/// fields (or URL), the answer's action, who gave it and what was sent; agent text escaped.
#[test]
fn elicitations_and_their_answers_are_shown() {
    let r = Some("req_1");
    let op = |p: Value| ("client_operation", r, p);
    let page = render(&log(&[
        (
            "prompt_started",
            r,
            json!({"prompt": [{"type": "text", "text": "sign me up"}]}),
        ),
        op(json!({"method": "elicitation/create", "status": "running",
            "summary": "Elicitation (form): Who <b>are</b> you?",
            "params": {"mode": "form", "message": "Who <b>are</b> you?", "requestedSchema": {
                "type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
                "required": ["name"]}}})),
        op(
            json!({"method": "elicitation/create", "status": "completed",
            "summary": "Elicitation accept: Who are you?", "action": "accept", "mode": "form",
            "answeredBy": "terminal", "content": {"name": "Ada"}}),
        ),
        op(json!({"method": "elicitation/create", "status": "running",
            "summary": "Elicitation (url): Sign in",
            "params": {"mode": "url", "message": "Sign in", "elicitationId": "url-1",
                       "url": "https://example.com/auth"}})),
        op(
            json!({"method": "elicitation/complete", "status": "completed",
            "summary": "Elicitation url-1 complete", "params": {"elicitationId": "url-1"},
            "endedWait": true}),
        ),
        op(
            json!({"method": "elicitation/create", "status": "completed",
            "summary": "Elicitation accept: Sign in", "action": "accept", "mode": "url",
            "answeredBy": "agent-complete"}),
        ),
        op(
            json!({"method": "elicitation/create", "status": "completed",
            "summary": "Elicitation decline: x", "action": "decline", "mode": "form",
            "answeredBy": "non-interactive", "details": "nobody to ask"}),
        ),
        ("prompt_done", r, json!({"stopReason": "end_turn"})),
    ]));
    for shown in [
        "Who &lt;b&gt;are&lt;/b&gt; you? — form: name*, age",
        "accept by terminal {&quot;name&quot;:&quot;Ada&quot;}",
        "Sign in — URL https://example.com/auth",
        "url-1 (ended the wait for the person)",
        "accept by agent-complete",
        "decline by non-interactive: nobody to ask",
    ] {
        assert!(page.contains(shown), "{shown} is not on the page");
    }
    assert!(!page.contains("<b>are</b>"), "agent text is escaped");
}
