//! A failure as one JSON line on stdout: `--format json` prints Node acpx's synthetic
//! JSON-RPC error (`{"jsonrpc": "2.0", "id": null, "error": {code, message, data}}`, with
//! acpx's `acpxCode`, `detailCode`, `origin` and `hint` in `data`); `--format acp` prints the
//! same, except that a failure the agent answered with keeps the agent's own `code` and
//! `message` (behaviour notes §6).

use acpx_runtime::error_kind::ErrorKind;
use serde_json::{json, Map, Value};

/// What an error line says: the failure's kind, its message and hint, its finer code, and
/// extra fields for `error.data` (`acp`: the agent's own error, when it answered with one).
#[derive(Debug, Clone, Copy)]
pub struct ErrorFields<'a> {
    /// The kind (its `acpxCode` and JSON-RPC `code`).
    pub kind: ErrorKind,
    /// What went wrong.
    pub message: &'a str,
    /// What to do about it.
    pub hint: Option<&'a str>,
    /// A finer machine-readable code (`STORE_CORRUPT`, `AMBIGUOUS_ID`, …).
    pub detail_code: Option<&'a str>,
    /// Extra fields for `error.data`.
    pub data: Option<&'a Map<String, Value>>,
}

/// The error line of `--format json` (Node acpx's shape).
pub fn json_error_line(e: &ErrorFields) -> Value {
    let mut data = Map::new();
    data.insert("acpxCode".into(), json!(e.kind.acpx_code()));
    if let Some(d) = e.detail_code {
        data.insert("detailCode".into(), json!(d));
    }
    data.insert("origin".into(), json!("cli"));
    if let Some(h) = e.hint {
        data.insert("hint".into(), json!(h));
    }
    for (k, v) in e.data.iter().flat_map(|d| d.iter()) {
        data.insert(k.clone(), v.clone());
    }
    json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {
            "code": e.kind.rpc_code(),
            "message": e.message,
            "data": Value::Object(data),
        }
    })
}

/// The error line of `--format acp`: [`json_error_line`], except that a failure the agent
/// answered with (an `acp` entry in `data` with an integer `code`) keeps the agent's own
/// `code` and `message`, acpx's fields merged into its `data` (Node acpx's rule, behaviour
/// notes §6).
pub fn acp_error_line(e: &ErrorFields) -> Value {
    let mut v = json_error_line(e);
    let agent = e
        .data
        .and_then(|d| d.get("acp"))
        .filter(|a| a.get("code").is_some_and(Value::is_i64))
        .cloned();
    let Some(agent) = agent else {
        return v;
    };
    let mut data = match agent.get("data") {
        Some(Value::Object(d)) => d.clone(),
        _ => Map::new(),
    };
    if let Some(Value::Object(ours)) = v["error"].get_mut("data").map(std::mem::take) {
        for (k, val) in ours {
            if k != "acp" {
                data.insert(k, val);
            }
        }
    }
    data.insert("origin".into(), json!("acp"));
    v["error"] = json!({
        "code": agent["code"],
        "message": agent.get("message").cloned().unwrap_or_else(|| json!(e.message)),
        "data": data,
    });
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_errors_have_the_node_shape() {
        let e = ErrorFields {
            kind: ErrorKind::NoSession,
            message: "No acpx session found (searched up to /repo).",
            hint: Some("create one with `acpx sessions new`"),
            detail_code: None,
            data: None,
        };
        let v = json_error_line(&e);
        assert_eq!(v["error"]["code"], -32002);
        assert_eq!(v["error"]["data"]["acpxCode"], "NO_SESSION");
        assert_eq!(v["error"]["data"]["origin"], "cli");
        assert!(v["id"].is_null());
        assert!(v["error"]["data"].get("detailCode").is_none());
        assert_eq!(acp_error_line(&e), v, "acpx's own error: the same line");
    }

    #[test]
    fn an_agent_error_keeps_its_code_and_message_in_the_acp_format() {
        let mut data = Map::new();
        data.insert(
            "acp".into(),
            json!({"code": -32000, "message": "boom", "data": {"why": "x"}}),
        );
        let e = ErrorFields {
            kind: ErrorKind::Runtime,
            message: "the agent failed the prompt: boom",
            hint: None,
            detail_code: Some("AGENT_ERROR"),
            data: Some(&data),
        };
        let v = acp_error_line(&e);
        assert_eq!(v["error"]["code"], -32000);
        assert_eq!(v["error"]["message"], "boom");
        assert_eq!(v["error"]["data"]["why"], "x");
        assert_eq!(v["error"]["data"]["acpxCode"], "RUNTIME");
        assert_eq!(v["error"]["data"]["detailCode"], "AGENT_ERROR");
        assert_eq!(v["error"]["data"]["origin"], "acp");
        assert!(v["error"]["data"].get("acp").is_none());
        assert!(v["id"].is_null());
    }
}
