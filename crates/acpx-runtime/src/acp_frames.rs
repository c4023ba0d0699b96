//! `--format acp`: a command's ACP traffic as raw JSON-RPC frames, one per line, as Node acpx
//! 0.19 prints it in `--format json` (`docs/format.md`, § The frames of `--format acp`).
//!
//! - [`FrameFilter`] takes the lines of an agent connection as they cross the wire (the
//!   runtime's [`crate::WireObserver`], here or in a queue owner) and says which to print:
//!   every JSON-RPC frame in both directions, in order, exactly as written or read, except
//!   the history the agent replays during `session/load` and the `session/load` /
//!   `session/resume` attempts that failed and were recovered by a later attempt or a
//!   fallback to `session/new` (Node filters both out of stdout too). A line that is not a
//!   JSON object (agent stdout noise, stderr) is not a frame.
//! - [`rebuild`] makes frames again from the recorded events, for a session followed from
//!   its log (`sessions watch --format acp`, a turn followed through an owner on another
//!   host): a `session_update` payload is exactly the `session/update` notification's
//!   params; `session/prompt` and its answer and `session/cancel` are rebuilt from the turn's
//!   events; client operations, controls and the attach requests are not (the log keeps what
//!   they did, not their JSON-RPC ids and params).

use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::agent::WireDirection;
use crate::error_kind::ErrorKind;
use acpx_model::{EventEnvelope, EventType};

/// What [`FrameFilter`] reads of a frame: enough to tell requests, notifications and
/// responses apart (the params are skipped, not built).
#[derive(Deserialize)]
struct Head<'a> {
    #[serde(default)]
    id: Option<Value>,
    #[serde(default, borrow)]
    method: Option<std::borrow::Cow<'a, str>>,
    #[serde(default)]
    error: Option<serde::de::IgnoredAny>,
}

/// Which frames of a connection are printed (see the module docs). One per command's
/// output: feed it every wire line in order ([`FrameFilter::push`]) and print what it gives
/// back, then what [`FrameFilter::finish`] gives back.
#[derive(Debug, Default)]
pub struct FrameFilter {
    /// The id of the `session/load` or `session/resume` request in flight: the agent's
    /// `session/update`s until its answer are replayed history.
    attaching: Option<Value>,
    /// Lines held back: failed attempts (request and error answer), then the attempt in
    /// flight, whose answer says whether they are printed.
    held: Vec<String>,
    /// Where the attempt in flight starts in `held`, while it is held.
    attempt_at: Option<usize>,
}

impl FrameFilter {
    /// A filter for one command's output.
    pub fn new() -> Self {
        FrameFilter::default()
    }

    /// One line that crossed the agent connection; the frames to print now (each without
    /// its newline) are added to `out`.
    pub fn push(&mut self, direction: WireDirection, line: &str, out: &mut Vec<String>) {
        if direction == WireDirection::Stderr {
            return;
        }
        let line = line.trim_end_matches(['\r', '\n']);
        let Ok(head) = serde_json::from_str::<Head<'_>>(line) else {
            return;
        };
        if !line.trim_start().starts_with('{') {
            return;
        }
        let to_agent = direction == WireDirection::ToAgent;
        match (&head.id, head.method.as_deref()) {
            (Some(id), Some("session/load" | "session/resume")) if to_agent => {
                // A failed attempt before this one stays held: this one may recover it.
                if self.attempt_at.is_some() {
                    self.flush(out);
                }
                self.attempt_at = Some(self.held.len());
                self.held.push(line.to_owned());
                self.attaching = Some(id.clone());
            }
            (None, Some("session/update")) if !to_agent && self.attaching.is_some() => {}
            (Some(id), None) if !to_agent && self.attaching.as_ref() == Some(id) => {
                self.attaching = None;
                match self.attempt_at.take() {
                    Some(_) if head.error.is_some() => self.held.push(line.to_owned()),
                    Some(at) => {
                        // It worked: the failed attempts before it were recovered.
                        out.extend(self.held.drain(at..));
                        self.held.clear();
                        out.push(line.to_owned());
                    }
                    None => out.push(line.to_owned()),
                }
            }
            (Some(_), Some("session/new")) if to_agent && self.attempt_at.is_none() => {
                // The fallback after failed attempts: they are not printed.
                self.held.clear();
                out.push(line.to_owned());
            }
            _ => {
                self.flush(out);
                out.push(line.to_owned());
            }
        }
    }

    /// The lines still held when the command's traffic ends (attempts that failed and were
    /// not recovered).
    pub fn finish(&mut self, out: &mut Vec<String>) {
        self.flush(out);
    }

    fn flush(&mut self, out: &mut Vec<String>) {
        out.append(&mut self.held);
        self.attempt_at = None;
    }
}

/// The frames an event stands for (see the module docs), each a line without its newline.
/// `turn_errors`: a turn that ended without the agent's answer (a timeout, an agent that
/// exited, an interrupted turn) gives Node's synthetic error line (`"id": null`, `acpxCode`,
/// and here also the turn's `requestId`); without it, such a turn gives nothing (the caller
/// reports the failure itself).
pub fn rebuild(e: &EventEnvelope, turn_errors: bool) -> Vec<String> {
    let p = &e.payload;
    let rid = e.request_id.as_deref();
    let frame = |v: Value| vec![v.to_string()];
    match e.kind() {
        EventType::SessionUpdate => vec![format!(
            r#"{{"jsonrpc":"2.0","method":"session/update","params":{}}}"#,
            p
        )],
        EventType::PromptStarted => match (rid, p.get("prompt")) {
            (Some(rid), Some(prompt)) => frame(json!({
                "jsonrpc": "2.0",
                "id": rid,
                "method": "session/prompt",
                "params": {"sessionId": e.acp_session_id, "prompt": prompt},
            })),
            _ => Vec::new(),
        },
        EventType::PromptDone => {
            let mut result = Map::new();
            result.insert("stopReason".into(), p.get("stopReason").cloned().into());
            if let Some(u) = p.get("usage") {
                result.insert("usage".into(), u.clone());
            }
            frame(json!({"jsonrpc": "2.0", "id": rid, "result": result}))
        }
        EventType::PromptError => {
            if let Some(acp) = p.get("acp").filter(|a| a.is_object()) {
                return frame(json!({"jsonrpc": "2.0", "id": rid, "error": acp}));
            }
            if let Some(stop) = p.get("stopReason").filter(|s| s.is_string()) {
                return frame(json!({"jsonrpc": "2.0", "id": rid, "result": {"stopReason": stop}}));
            }
            if !turn_errors {
                return Vec::new();
            }
            let code = p.get("code").and_then(Value::as_str).unwrap_or("RUNTIME");
            let mut data = Map::new();
            data.insert("acpxCode".into(), json!(code));
            if let Some(d) = p.get("detailCode").filter(|d| d.is_string()) {
                data.insert("detailCode".into(), d.clone());
            }
            data.insert("origin".into(), json!("runtime"));
            if let Some(rid) = rid {
                data.insert("requestId".into(), json!(rid));
            }
            frame(json!({
                "jsonrpc": "2.0",
                "id": null,
                "error": {
                    "code": ErrorKind::from_acpx_code(code).rpc_code(),
                    "message": p.get("message").cloned().unwrap_or_else(|| json!("the turn failed")),
                    "data": data,
                },
            }))
        }
        EventType::ControlDone if p.get("action").and_then(Value::as_str) == Some("cancel") => {
            frame(json!({
                "jsonrpc": "2.0",
                "method": "session/cancel",
                "params": {"sessionId": e.acp_session_id},
            }))
        }
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use WireDirection::{FromAgent, Stderr, ToAgent};

    fn run(lines: &[(WireDirection, &str)]) -> Vec<String> {
        let mut f = FrameFilter::new();
        let mut out = Vec::new();
        for (d, l) in lines {
            f.push(*d, l, &mut out);
        }
        f.finish(&mut out);
        out
    }

    #[test]
    fn every_frame_passes_as_it_was_and_noise_does_not() {
        let req = r#"{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"s","prompt":[]}}"#;
        let upd =
            r#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{}}}"#;
        let res = r#"{"jsonrpc":"2.0","id":3,"result":{"stopReason":"end_turn"}}"#;
        let out = run(&[
            (ToAgent, req),
            (FromAgent, "booting the model..."),
            (Stderr, r#"{"looks":"like json"}"#),
            (FromAgent, upd),
            (FromAgent, ""),
            (FromAgent, res),
        ]);
        assert_eq!(out, vec![req, upd, res]);
    }

    #[test]
    fn replayed_history_is_not_printed() {
        let load = r#"{"jsonrpc":"2.0","id":1,"method":"session/load","params":{}}"#;
        let replay = r#"{"jsonrpc":"2.0","method":"session/update","params":{"update":{"sessionUpdate":"user_message_chunk"}}}"#;
        let loaded = r#"{"jsonrpc":"2.0","id":1,"result":null}"#;
        let prompt = r#"{"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{}}"#;
        let upd = r#"{"jsonrpc":"2.0","method":"session/update","params":{"n":1}}"#;
        let out = run(&[
            (ToAgent, load),
            (FromAgent, replay),
            (FromAgent, replay),
            (FromAgent, loaded),
            (ToAgent, prompt),
            (FromAgent, upd),
        ]);
        assert_eq!(out, vec![load, loaded, prompt, upd]);
    }

    #[test]
    fn failed_attempts_are_dropped_when_recovered_and_printed_when_not() {
        let resume = r#"{"jsonrpc":"2.0","id":1,"method":"session/resume","params":{}}"#;
        let gone = r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32002,"message":"not found"}}"#;
        let load = r#"{"jsonrpc":"2.0","id":2,"method":"session/load","params":{}}"#;
        let gone2 = r#"{"jsonrpc":"2.0","id":2,"error":{"code":-32002,"message":"not found"}}"#;
        let new = r#"{"jsonrpc":"2.0","id":3,"method":"session/new","params":{}}"#;
        let made = r#"{"jsonrpc":"2.0","id":3,"result":{"sessionId":"b"}}"#;
        assert_eq!(
            run(&[
                (ToAgent, resume),
                (FromAgent, gone),
                (ToAgent, load),
                (FromAgent, gone2),
                (ToAgent, new),
                (FromAgent, made)
            ]),
            vec![new, made],
            "a fallback recovers both"
        );
        let loaded = r#"{"jsonrpc":"2.0","id":2,"result":{}}"#;
        assert_eq!(
            run(&[
                (ToAgent, resume),
                (FromAgent, gone),
                (ToAgent, load),
                (FromAgent, loaded)
            ]),
            vec![load, loaded],
            "the load recovers the resume"
        );
        assert_eq!(
            run(&[(ToAgent, load), (FromAgent, gone2)]),
            vec![load, gone2],
            "nothing recovered it: printed at the end"
        );
        let other = r#"{"jsonrpc":"2.0","id":9,"method":"session/set_mode","params":{}}"#;
        assert_eq!(
            run(&[(ToAgent, load), (FromAgent, gone2), (ToAgent, other)]),
            vec![load, gone2, other],
            "printed, in order, before what follows"
        );
    }

    fn event(kind: &str, payload: Value) -> EventEnvelope {
        let line = json!({
            "eventVersion": 1, "seq": 1, "timestamp": "2026-02-27T12:10:00.000Z",
            "acpxRecordId": "rec-1", "acpSessionId": "acp-1", "requestId": "req-1",
            "stream": "prompt", "source": "runtime", "type": kind, "payload": payload,
        });
        EventEnvelope::from_ndjson_line(line.to_string().as_bytes()).expect("an envelope")
    }

    #[test]
    fn a_turn_is_rebuilt_from_its_events() {
        let update = json!({"sessionId": "acp-1", "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"}}});
        let e = event("session_update", update.clone());
        let line = rebuild(&e, true).pop().unwrap();
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["method"], "session/update");
        assert_eq!(v["params"], update, "the payload is the params");
        let started = rebuild(
            &event(
                "prompt_started",
                json!({"messagePreview": "x", "resumed": false, "prompt": [{"type": "text", "text": "x"}]}),
            ),
            true,
        );
        let v: Value = serde_json::from_str(&started[0]).unwrap();
        assert_eq!(v["id"], "req-1");
        assert_eq!(v["params"]["sessionId"], "acp-1");
        let done = rebuild(
            &event(
                "prompt_done",
                json!({"stopReason": "end_turn", "permissionStats": {}}),
            ),
            true,
        );
        assert_eq!(
            done,
            vec![r#"{"jsonrpc":"2.0","id":"req-1","result":{"stopReason":"end_turn"}}"#]
        );
        let timeout = json!({"code": "TIMEOUT", "message": "timed out", "retryable": false});
        let err = rebuild(&event("prompt_error", timeout.clone()), true);
        let v: Value = serde_json::from_str(&err[0]).unwrap();
        assert_eq!(v["error"]["code"], -32070);
        assert_eq!(v["error"]["data"]["acpxCode"], "TIMEOUT");
        assert!(v["id"].is_null());
        assert!(rebuild(&event("prompt_error", timeout), false).is_empty());
        assert!(rebuild(
            &event("lifecycle_event", json!({"phase": "agent_started"})),
            true
        )
        .is_empty());
    }
}
