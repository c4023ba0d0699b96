//! The JSON objects that name and describe a session in command output: the identity triple
//! (`docs/format.md`, § Identity), a listed session, and a stored record without its
//! conversation. Pure functions of the model's types, so every front end emits the same shape.

use acpx_model::{SessionRecord, SessionSummary, SettledMessages};
use serde_json::{json, Map, Value};

/// `{"action": <action>}` followed by `fields`, as one object (action first): the shape of
/// every command result in JSON output.
pub fn action(action: &str, fields: Map<String, Value>) -> Value {
    let mut m = Map::new();
    m.insert("action".into(), json!(action));
    m.extend(fields);
    Value::Object(m)
}

/// The identity triple (`docs/format.md`, "Identity"): `acpxRecordId`, `acpxSessionId` (the ACP session id), and
/// `agentSessionId` only when known.
pub fn identity(
    record_id: &str,
    acp_session_id: &str,
    agent_session_id: Option<&str>,
) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("acpxRecordId".into(), json!(record_id));
    m.insert("acpxSessionId".into(), json!(acp_session_id));
    if let Some(a) = agent_session_id.filter(|a| !a.is_empty()) {
        m.insert("agentSessionId".into(), json!(a));
    }
    m
}

/// The identity of a record.
pub fn record_identity(r: &SessionRecord) -> Map<String, Value> {
    identity(
        r.acpx_record_id.as_str(),
        &r.acp_session_id,
        r.agent_session_id.as_deref(),
    )
}

fn put_opt<T: serde::Serialize>(m: &mut Map<String, Value>, key: &str, v: Option<T>) {
    if let Some(v) = v {
        m.insert(key.into(), json!(v));
    }
}

/// A listed session, with the canonical identity names and no null placeholders.
pub fn summary_json(s: &SessionSummary) -> Value {
    let mut m = identity(
        s.acpx_record_id.as_str(),
        &s.acp_session_id,
        s.agent_session_id.as_deref(),
    );
    m.insert("agentCommand".into(), json!(s.agent_command));
    m.insert("cwd".into(), json!(s.cwd));
    put_opt(&mut m, "name", s.name.as_ref());
    put_opt(&mut m, "title", s.title.as_ref());
    m.insert("createdAt".into(), json!(s.created_at));
    m.insert("lastUsedAt".into(), json!(s.last_used_at));
    m.insert("closed".into(), json!(s.closed));
    put_opt(&mut m, "closedAt", s.closed_at);
    put_opt(&mut m, "lastPromptAt", s.last_prompt_at);
    m.insert("messageCount".into(), json!(s.message_count));
    Value::Object(m)
}

/// A record for `sessions show`: the stored document with the canonical identity names, the
/// conversation replaced by its size (use `sessions history` or `export` for it).
pub fn record_show_json(mut r: SessionRecord) -> Value {
    let count = r.thread.message_count();
    // Never serialized: a long conversation would be copied whole into the value (its
    // settled turns read back from their spill files) only to be dropped.
    r.thread.messages = Vec::new();
    r.thread.settled = SettledMessages::default();
    r.thread.request_token_usage.clear();
    let r = &r;
    let mut m = record_identity(r);
    let Ok(Value::Object(doc)) = serde_json::to_value(r) else {
        return Value::Object(m);
    };
    for (k, v) in doc {
        match k.as_str() {
            "acpxRecordId" | "acpSessionId" | "agentSessionId" => {}
            "thread" => {
                let mut t = Map::new();
                t.insert(
                    "title".into(),
                    v.get("title").cloned().unwrap_or(Value::Null),
                );
                t.insert("messageCount".into(), json!(count));
                t.insert(
                    "updated_at".into(),
                    v.get("updated_at").cloned().unwrap_or(Value::Null),
                );
                t.insert(
                    "cumulative_token_usage".into(),
                    v.get("cumulative_token_usage")
                        .cloned()
                        .unwrap_or(Value::Null),
                );
                m.insert("thread".into(), Value::Object(t));
            }
            _ => {
                m.insert(k, v);
            }
        }
    }
    Value::Object(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_leaves_out_unknown_agent_session_id() {
        let m = identity("r", "a", None);
        assert_eq!(m.len(), 2);
        let m = identity("r", "a", Some(""));
        assert!(m.get("agentSessionId").is_none());
        let m = identity("r", "a", Some("n"));
        assert_eq!(m["agentSessionId"], "n");
    }
}
