//! `--stall <method>`: a request the agent never answers until the client gives up on it with
//! `$/cancel_request`, which it then answers with -32800 (Cancelled), as the schema asks.
//! `--cancel-log <file>` appends one JSON line per stalled request (`{"event": "stalled",
//! "method", "id"}`) and per `$/cancel_request` received (`{"event": "cancel_request",
//! "requestId"}`), so a test can check that the client cancelled the request it gave up on,
//! by its id.

use std::io::Write;

use agent_client_protocol::v1::{ConnectionTo, Responder};
use agent_client_protocol::{Client, Error, Handled, UntypedMessage};
use serde_json::{json, Value};

use crate::sessions::AgentState;

impl AgentState {
    /// Appends `line` to `--cancel-log`, when one is given.
    pub(crate) fn log_cancel_event(&self, line: Value) {
        let Some(path) = &self.flags.cancel_log else {
            return;
        };
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut f| writeln!(f, "{line}"));
        if let Err(e) = written {
            eprintln!("acpx-test-agent: cannot write {}: {e}", path.display());
        }
    }

    /// Whether `method` is the one `--stall` names.
    pub(crate) fn stalls(&self, method: &str) -> bool {
        self.flags.stall.as_deref() == Some(method)
    }
}

/// Takes `req` without answering; answers -32800 once the client cancels it.
pub(crate) fn stall(
    state: &AgentState,
    req: &UntypedMessage,
    responder: Responder,
    cx: &ConnectionTo<Client>,
) -> Result<Handled<(UntypedMessage, Responder)>, Error> {
    let id = serde_json::to_value(responder.raw_id()).unwrap_or(Value::Null);
    eprintln!("acpx-test-agent: stalling {} (id {id})", req.method);
    state.log_cancel_event(json!({"event": "stalled", "method": req.method, "id": id}));
    let cancelled = responder.cancellation();
    cx.spawn(async move {
        cancelled.cancelled().await;
        responder.respond_with_error(Error::request_cancelled())
    })?;
    Ok(Handled::Yes)
}

/// Notes a `$/cancel_request` notification (the SDK has already marked the request).
pub(crate) fn note_cancel_request(state: &AgentState, params: &Value) {
    let id = params.get("requestId").cloned().unwrap_or(Value::Null);
    eprintln!("acpx-test-agent: $/cancel_request for id {id}");
    state.log_cancel_event(json!({"event": "cancel_request", "requestId": id}));
}
