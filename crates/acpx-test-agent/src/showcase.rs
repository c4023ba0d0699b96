//! Two scripts for the session viewer (`acpx sessions export --as html`): `showcase`, a turn
//! of a coding agent with every kind of item (a thought, a plan, a read, an edit with a real
//! diff asked for and approved, the cost so far, a Markdown reply), and `hostile`, an agent
//! whose every string tries to run or load something in a page that shows it.

use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::{Client, Error};
use serde_json::{json, Value};

use crate::permission::ask_permission_for;
use crate::send;

/// What a hostile agent writes: a script, an image with a handler, script links, a style
/// loading a URL, an image to load, a frame.
pub(crate) const HOSTILE: &str = "<script>alert('xss-script')</script>\
<img src=x onerror=alert('xss-onerror')> [click me](javascript:alert('xss-link')) \
<a href=\"javascript:alert('xss-anchor')\">anchor</a> \
<style>body{background:url(http://127.0.0.1:9/xss-css)}</style> \
![pixel](http://127.0.0.1:9/xss-image.png) <iframe src=\"http://127.0.0.1:9/xss-frame\"></iframe> \
[data](data:text/html,<script>alert('xss-data')</script>)";

const OLD_CALC: &str =
    "def add(a, b):\n    return a + b + 1\n\n\ndef sub(a, b):\n    return a - b\n";
const NEW_CALC: &str = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n";

/// The usage a `showcase` prompt response reports.
pub(crate) fn showcase_usage() -> Value {
    json!({"totalTokens": 4210, "inputTokens": 3800, "outputTokens": 410, "cachedReadTokens": 2048, "thoughtTokens": 96})
}

/// Plays the showcase turn up to its reply, which it returns.
pub(crate) async fn showcase(
    cx: &ConnectionTo<Client>,
    sid: &str,
    cwd: &str,
) -> Result<String, Error> {
    let path = format!("{cwd}/src/calc.py");
    send(
        cx,
        sid,
        json!({"sessionUpdate": "agent_thought_chunk", "content": {"type": "text",
        "text": "The test says `add(2, 2)` returns 5: look at `add` first."}}),
    )?;
    send(
        cx,
        sid,
        json!({"sessionUpdate": "plan", "entries": [
        {"content": "Read src/calc.py", "priority": "high", "status": "completed"},
        {"content": "Fix add()", "priority": "high", "status": "in_progress"},
        {"content": "Run the tests", "priority": "medium", "status": "pending"}]}),
    )?;
    send(
        cx,
        sid,
        json!({"sessionUpdate": "tool_call", "toolCallId": "call_sc_read", "title": "Read src/calc.py",
        "kind": "read", "status": "completed", "locations": [{"path": path, "line": 1}],
        "rawInput": {"path": path},
        "content": [{"type": "content", "content": {"type": "text", "text": OLD_CALC}}]}),
    )?;
    let diff = json!([{"type": "diff", "path": path, "oldText": OLD_CALC, "newText": NEW_CALC}]);
    send(
        cx,
        sid,
        json!({"sessionUpdate": "tool_call", "toolCallId": "call_sc_edit", "title": "Edit src/calc.py",
        "kind": "edit", "status": "pending", "locations": [{"path": path, "line": 2}],
        "rawInput": {"path": path, "old": "a + b + 1", "new": "a + b"}}),
    )?;
    let answer = ask_permission_for(
        cx,
        sid,
        json!({"toolCallId": "call_sc_edit", "title": "Edit src/calc.py", "kind": "edit", "content": diff}),
    )
    .await?;
    let approved = answer.as_deref().is_some_and(|a| a != "reject");
    send(
        cx,
        sid,
        json!({"sessionUpdate": "tool_call_update", "toolCallId": "call_sc_edit",
        "status": if approved { "completed" } else { "failed" }, "content": diff}),
    )?;
    send(
        cx,
        sid,
        json!({"sessionUpdate": "usage_update", "used": 4210, "size": 200000,
        "cost": {"amount": 0.042, "currency": "USD"}}),
    )?;
    Ok(if approved {
        "## Fixed the off-by-one\n\n`add()` added 1 to every sum:\n\n- removed the `+ 1`\n- `sub()` was right\n\n```python\ndef add(a, b):\n    return a + b\n```\n".to_owned()
    } else {
        "The edit was not allowed.".to_owned()
    })
}

/// Sends hostile strings in every slot an update has; returns the hostile reply.
pub(crate) fn hostile(cx: &ConnectionTo<Client>, sid: &str) -> Result<String, Error> {
    send(
        cx,
        sid,
        json!({"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": HOSTILE}}),
    )?;
    send(
        cx,
        sid,
        json!({"sessionUpdate": "plan", "entries": [{"content": HOSTILE, "priority": HOSTILE, "status": HOSTILE}]}),
    )?;
    send(
        cx,
        sid,
        json!({"sessionUpdate": "tool_call", "toolCallId": HOSTILE, "title": HOSTILE, "kind": HOSTILE,
        "status": "completed", "locations": [{"path": HOSTILE}], "rawInput": {"command": HOSTILE},
        "rawOutput": {"stdout": HOSTILE},
        "content": [{"type": "diff", "path": HOSTILE, "oldText": HOSTILE, "newText": "safe\n"},
                    {"type": "content", "content": {"type": "text", "text": HOSTILE}}]}),
    )?;
    send(
        cx,
        sid,
        json!({"sessionUpdate": "session_info_update", "title": HOSTILE}),
    )?;
    Ok(format!(
        "# HOSTILE-START\n\n{HOSTILE}\n\n```{HOSTILE}\n{HOSTILE}\n```\n\nHOSTILE-END"
    ))
}
