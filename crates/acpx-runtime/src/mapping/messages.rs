//! `session/update` notifications: message and thought chunks, and the session-level updates
//! (plan, commands, mode, config options, title, usage); tool calls go to [`super::tool_calls`].

use acpx_model::{AgentContent, EventEnvelope, PlanState, SessionRecord, Thinking, Timestamp};
use serde_json::{json, Map, Value};

use super::agent_message::current_agent_message;
use super::tool_calls::upsert_tool_call;
use super::usage::{set_request_usage, token_usage_from};
use super::{turn_is_running, Effect, CONTEXT_USAGE_KEY, PLAN_KEY};

/// One `session/update` notification: its `sessionId` and `update` object.
pub(super) fn apply_session_update(
    record: &mut SessionRecord,
    session_id: &str,
    update: &Value,
    event: &EventEnvelope,
    at: Timestamp,
) -> Effect {
    if session_id != event.acp_session_id {
        return Effect::ignored(format!(
            "update for ACP session {:?}, not this session's {:?}",
            session_id, event.acp_session_id
        ));
    }
    let Some(update) = update.as_object() else {
        return Effect::ignored("`update` is not an object");
    };
    let kind = update
        .get("sessionUpdate")
        .and_then(Value::as_str)
        .unwrap_or("");
    // An adopted session's replayed history is mapped as a turn's updates are.
    let adopting = super::adopt::is_adopting(record);
    let in_turn = turn_is_running(record) || adopting;
    match kind {
        "agent_message_chunk" | "agent_thought_chunk" => {
            if !in_turn {
                return Effect::ignored("late: no turn is running");
            }
            let content = update.get("content");
            if content.and_then(|c| c.get("type")).and_then(Value::as_str) != Some("text") {
                return Effect::ignored("non-text chunk content has no thread slot");
            }
            let text = content
                .and_then(|c| c.get("text"))
                .and_then(Value::as_str)
                .unwrap_or("");
            let message_id = update.get("messageId").and_then(Value::as_str);
            let msg = current_agent_message(record, message_id, true);
            if kind == "agent_message_chunk" {
                match msg.content.last_mut() {
                    Some(AgentContent::Text(t)) => t.push_str(text),
                    _ => msg.content.push(AgentContent::Text(text.into())),
                }
            } else {
                match msg.content.last_mut() {
                    Some(AgentContent::Thinking(t)) => t.text.push_str(text),
                    _ => msg.content.push(AgentContent::Thinking(Thinking {
                        text: text.into(),
                        signature: None,
                    })),
                }
            }
            record.thread.updated_at = at;
            Effect::Applied
        }
        "tool_call" | "tool_call_update" => {
            if !in_turn {
                return Effect::ignored("late: no turn is running");
            }
            let effect = upsert_tool_call(record, update);
            if effect == Effect::Applied {
                record.thread.updated_at = at;
            }
            effect
        }
        "user_message_chunk" if adopting => {
            super::adopt::apply_user_chunk(record, update, event, at)
        }
        "user_message_chunk" => {
            Effect::ignored("user chunks are not mapped: the prompt is recorded as sent")
        }
        "plan" => {
            let entries = update
                .get("entries")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            // Also on the turn's agent message (its latest plan), where `sessions read`, the
            // Markdown export and any reader of the thread find it with the turn it belongs to.
            if in_turn {
                current_agent_message(record, None, false)
                    .extra
                    .insert(PLAN_KEY.to_owned(), Value::Array(entries.clone()));
            }
            record.acpx.plan = Some(PlanState {
                entries,
                updated_at: at,
            });
            Effect::Applied
        }
        "available_commands_update" => {
            record.acpx.available_commands = update
                .get("availableCommands")
                .and_then(Value::as_array)
                .map(|cmds| {
                    cmds.iter()
                        .filter_map(|c| c.get("name").and_then(Value::as_str))
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default();
            Effect::Applied
        }
        "current_mode_update" => match update.get("currentModeId").and_then(Value::as_str) {
            Some(mode) => {
                record.acpx.current_mode_id = Some(mode.to_owned());
                Effect::Applied
            }
            None => Effect::ignored("current_mode_update without currentModeId"),
        },
        "config_option_update" => match update.get("configOptions").and_then(Value::as_array) {
            Some(options) => {
                record.acpx.config_options = options.clone();
                Effect::Applied
            }
            None => Effect::ignored("config_option_update without configOptions"),
        },
        "session_info_update" => {
            let mut changed = false;
            match update.get("title") {
                Some(Value::String(t)) => {
                    record.thread.title = t.clone();
                    changed = true;
                }
                Some(Value::Null) => {
                    record.thread.title.clear();
                    changed = true;
                }
                _ => {}
            }
            if let Some(ts) = update
                .get("updatedAt")
                .and_then(Value::as_str)
                .and_then(|s| Timestamp::parse(s).ok())
            {
                record.thread.updated_at = ts;
                changed = true;
            }
            if changed {
                Effect::Applied
            } else {
                Effect::ignored("session_info_update without title or updatedAt")
            }
        }
        "usage_update" => {
            let mut usage = Map::new();
            for key in ["used", "size", "cost"] {
                if let Some(v) = update.get(key) {
                    usage.insert(key.to_owned(), v.clone());
                }
            }
            usage.insert("updated_at".into(), json!(at));
            record
                .acpx
                .extra
                .insert(CONTEXT_USAGE_KEY.into(), Value::Object(usage));
            if in_turn {
                let tokens = update.get("_meta").and_then(|m| {
                    token_usage_from(m).or_else(|| m.get("usage").and_then(token_usage_from))
                });
                if let Some(tokens) = tokens {
                    set_request_usage(record, tokens);
                }
            }
            Effect::Applied
        }
        "" => Effect::ignored("update without a sessionUpdate tag"),
        other => Effect::ignored(format!("unknown update kind {other:?}")),
    }
}
