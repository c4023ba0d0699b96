//! `session/request_permission` as the scripts ask it: allow once, always allow, or reject.

use agent_client_protocol::v1::schema as acp;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::{Client, Error};
use serde_json::{json, Value};

use crate::{parse, request};

/// Asks for permission; returns the selected option id, or `None` when cancelled. A kind of
/// `-` leaves `kind` out (the client then infers it from the title).
pub(crate) async fn ask_permission(
    cx: &ConnectionTo<Client>,
    session: &str,
    call_id: &str,
    title: &str,
    kind: &str,
) -> Result<Option<String>, Error> {
    let mut tool_call = json!({"toolCallId": call_id, "title": title});
    if kind != "-" {
        tool_call["kind"] = json!(kind);
    }
    ask_permission_for(cx, session, tool_call).await
}

/// [`ask_permission`] with the whole `toolCall` (an ACP `ToolCallUpdate`) as given.
pub(crate) async fn ask_permission_for(
    cx: &ConnectionTo<Client>,
    session: &str,
    tool_call: Value,
) -> Result<Option<String>, Error> {
    let resp = request(
        cx,
        "session/request_permission",
        json!({
            "sessionId": session,
            "toolCall": tool_call,
            "options": [
                {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
                {"optionId": "always", "name": "Always allow", "kind": "allow_always"},
                {"optionId": "reject", "name": "Reject", "kind": "reject_once"}
            ]
        }),
    )
    .await?;
    let typed: acp::RequestPermissionResponse = parse(&resp)?;
    Ok(match typed.outcome {
        acp::RequestPermissionOutcome::Selected(s) => Some(s.option_id.to_string()),
        _ => None,
    })
}
