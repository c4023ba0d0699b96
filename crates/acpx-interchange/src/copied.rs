//! The conversation a fork starts from, as ATIF steps marked `is_copied_context`: a fork's
//! log begins with `session_forked`, whose `thread` is the parent's conversation at the fork
//! point (Zed's thread shape, `docs/format.md` § Lifecycle phases). ATIF keeps such steps for
//! context and tells trainers to leave them out. They carry no timestamps or metrics: the
//! thread keeps neither per message, nor which model wrote each.

use serde_json::{json, Map, Value};

/// The text of one Zed content item (`{"Text": …}`, `{"Mention": {content}}`, `{"Image": …}`).
fn item_text(item: &Value) -> Option<String> {
    let (kind, body) = item.as_object()?.iter().next()?;
    Some(match (kind.as_str(), body) {
        ("Text", Value::String(t)) => t.clone(),
        ("Mention", m) => m
            .get("content")
            .and_then(Value::as_str)
            .map_or_else(|| "[mention]".to_string(), str::to_owned),
        (other, _) => format!("[{}]", other.to_ascii_lowercase()),
    })
}

/// A step draft: what an agent said, thought and called before it spoke again.
#[derive(Default)]
struct Draft {
    message: String,
    reasoning: Option<String>,
    calls: Vec<Value>,
    results: Vec<Value>,
}

/// The steps of `thread`'s messages, numbered from `first_id`.
pub fn steps(thread: &Value, first_id: usize) -> Vec<Value> {
    let mut out = Vec::new();
    let messages = thread.get("messages").and_then(Value::as_array);
    for m in messages.into_iter().flatten() {
        if let Some(u) = m.get("User") {
            let texts: Vec<String> = u
                .get("content")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(item_text)
                .collect();
            out.push(json!({"source": "user", "message": texts.join("\n\n")}));
        } else if let Some(a) = m.get("Agent") {
            for d in agent_drafts(a) {
                let mut step = Map::new();
                step.insert("source".into(), json!("agent"));
                step.insert("message".into(), json!(d.message));
                if let Some(r) = d.reasoning {
                    step.insert("reasoning_content".into(), json!(r));
                }
                if !d.calls.is_empty() {
                    step.insert("tool_calls".into(), Value::Array(d.calls));
                    step.insert("observation".into(), json!({"results": d.results}));
                }
                out.push(Value::Object(step));
            }
        }
    }
    for (i, step) in out.iter_mut().enumerate() {
        if let Value::Object(s) = step {
            // step_id first, as in the other steps.
            let mut numbered = Map::new();
            numbered.insert("step_id".into(), json!(first_id + i));
            numbered.append(s);
            numbered.insert("is_copied_context".into(), json!(true));
            *s = numbered;
        }
    }
    out
}

/// An Agent message's drafts, cut as a turn's agent steps are (`atif.rs`).
fn agent_drafts(a: &Value) -> Vec<Draft> {
    let results = a.get("tool_results").and_then(Value::as_object);
    let mut drafts: Vec<Draft> = Vec::new();
    for item in a
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let Some((kind, body)) = item.as_object().and_then(|o| o.iter().next()) else {
            continue;
        };
        let speaks = matches!(kind.as_str(), "Text" | "Thinking");
        let starts_new = drafts.last().is_none_or(|d| {
            speaks && (!d.calls.is_empty() || (kind == "Thinking" && !d.message.is_empty()))
        });
        if starts_new {
            drafts.push(Draft::default());
        }
        let Some(d) = drafts.last_mut() else { continue };
        match kind.as_str() {
            "Text" => d.message.push_str(body.as_str().unwrap_or_default()),
            "Thinking" => {
                let text = body.get("text").and_then(Value::as_str).unwrap_or_default();
                d.reasoning.get_or_insert_with(String::new).push_str(text);
            }
            "ToolUse" => {
                let id = body.get("id").and_then(Value::as_str).unwrap_or_default();
                let name = body
                    .get("kind")
                    .or_else(|| body.get("name"))
                    .and_then(Value::as_str)
                    .unwrap_or("tool");
                let arguments = match body.get("input") {
                    Some(Value::Object(o)) => Value::Object(o.clone()),
                    Some(Value::Null) | None => json!({}),
                    Some(other) => json!({"input": other}),
                };
                d.calls
                    .push(json!({"tool_call_id": id, "function_name": name,
                    "arguments": arguments}));
                let mut r = Map::new();
                r.insert("source_call_id".into(), json!(id));
                if let Some(res) = results.and_then(|rs| rs.get(id)) {
                    let texts: Vec<String> = res
                        .get("content")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(item_text)
                        .collect();
                    if !texts.is_empty() {
                        r.insert("content".into(), json!(texts.join("\n")));
                    }
                    r.insert(
                        "extra".into(),
                        json!({"isError": res.get("is_error").cloned().unwrap_or(Value::Null)}),
                    );
                }
                d.results.push(Value::Object(r));
            }
            _ => {}
        }
    }
    drafts
}
