//! Prompt turn events (`prompt_started`, `prompt_done`, `prompt_error`) and the `User` message
//! built from the ACP prompt blocks.

use acpx_model::event::{PromptDonePayload, PromptErrorPayload, PromptStartedPayload};
use acpx_model::{
    EventEnvelope, LastTurn, Message, PermissionStats, SessionRecord, Timestamp, TurnError,
    TurnState, UserMessage,
};
use serde_json::{json, Map, Value};

use super::tool_calls::flush_open_tool_uses;
use super::tool_content::ToolCallEnd;
use super::usage::{set_request_usage, token_usage_from};
use super::user_content::user_content_from_acp;
use super::{turn_is_running, Effect};

pub(super) fn apply_prompt_started(
    record: &mut SessionRecord,
    p: &PromptStartedPayload,
    event: &EventEnvelope,
    at: Timestamp,
) -> Effect {
    // An adoption whose replay never closed (a crash) is closed before a turn opens.
    super::adopt::close_replay(record, None, at);
    // A turn that never ended (a crash) is closed before the next one opens.
    if turn_is_running(record) {
        flush_open_tool_uses(record, at, &ToolCallEnd::Interrupted);
        if let Some(t) = record.acpx.last_turn.as_mut() {
            t.outcome = "interrupted".into();
            t.ended_at = Some(at);
        }
    }
    let user_id = p
        .extra
        .get("userMessageId")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| format!("user-{}", event.seq));
    let blocks = p
        .extra
        .get("prompt")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_else(|| vec![json!({"type": "text", "text": p.message_preview})]);
    record.thread.messages.push(Message::User(UserMessage {
        id: user_id,
        content: user_content_from_acp(&blocks),
        extra: Map::new(),
    }));
    record.thread.updated_at = at;
    record.last_prompt_at = Some(at);
    record.acpx.last_turn = Some(LastTurn {
        request_id: event.request_id.clone().unwrap_or_default(),
        started_at: at,
        ended_at: None,
        resumed: p.resumed,
        stop_reason: None,
        outcome: "running".into(),
        error: None,
        permission_stats: PermissionStats::default(),
    });
    Effect::Applied
}

pub(super) fn apply_prompt_done(
    record: &mut SessionRecord,
    p: &PromptDonePayload,
    at: Timestamp,
) -> Effect {
    let end = if p.stop_reason == "cancelled" {
        ToolCallEnd::Cancelled
    } else {
        ToolCallEnd::TurnEnded(p.stop_reason.clone())
    };
    flush_open_tool_uses(record, at, &end);
    if let Some(usage) = p.extra.get("usage").and_then(token_usage_from) {
        set_request_usage(record, usage);
    }
    let outcome = if p.stop_reason == "cancelled" {
        "cancelled"
    } else {
        "completed"
    };
    end_turn(record, at, |t| {
        t.stop_reason = Some(p.stop_reason.clone());
        t.outcome = outcome.into();
        t.permission_stats = p.permission_stats;
    });
    record.thread.updated_at = at;
    Effect::Applied
}

pub(super) fn apply_prompt_error(
    record: &mut SessionRecord,
    p: &PromptErrorPayload,
    event: &EventEnvelope,
    at: Timestamp,
) -> Effect {
    let outcome = p
        .extra
        .get("outcome")
        .and_then(Value::as_str)
        .map_or(TurnState::Failed, TurnState::from);
    flush_open_tool_uses(record, at, &tool_call_end(p, &outcome));
    let stats = p
        .extra
        .get("permissionStats")
        .and_then(|v| serde_json::from_value::<PermissionStats>(v.clone()).ok());
    let error = TurnError {
        code: p.code.clone(),
        detail_code: p.detail_code.clone(),
        message: p.message.clone(),
        retryable: p.retryable,
    };
    let request_id = event.request_id.clone().unwrap_or_default();
    if record.acpx.last_turn.is_none() {
        // An error for a turn whose start the snapshot never saw (its log was rotated away).
        record.acpx.last_turn = Some(LastTurn {
            request_id,
            started_at: at,
            ended_at: None,
            resumed: false,
            stop_reason: None,
            outcome: "running".into(),
            error: None,
            permission_stats: PermissionStats::default(),
        });
    }
    let stop_reason = p
        .extra
        .get("stopReason")
        .and_then(Value::as_str)
        .map(str::to_owned);
    end_turn(record, at, |t| {
        t.outcome = outcome;
        t.error = Some(error);
        t.stop_reason = stop_reason;
        if let Some(s) = stats {
            t.permission_stats = s;
        }
    });
    record.thread.updated_at = at;
    Effect::Applied
}

/// Why a failed turn ended, for the tool calls it left open.
fn tool_call_end(p: &PromptErrorPayload, outcome: &TurnState) -> ToolCallEnd {
    match outcome {
        TurnState::Cancelled => ToolCallEnd::Cancelled,
        TurnState::Timeout => ToolCallEnd::TimedOut,
        TurnState::Interrupted => ToolCallEnd::Interrupted,
        _ if p.detail_code.as_deref() == Some("AGENT_DISCONNECTED")
            || p.extra.contains_key("agentExit") =>
        {
            ToolCallEnd::AgentExited(p.message.clone())
        }
        _ => ToolCallEnd::TurnFailed(p.message.clone()),
    }
}

pub(super) fn end_turn(record: &mut SessionRecord, at: Timestamp, f: impl FnOnce(&mut LastTurn)) {
    if let Some(t) = record.acpx.last_turn.as_mut() {
        t.ended_at = Some(at);
        f(t);
    }
}
