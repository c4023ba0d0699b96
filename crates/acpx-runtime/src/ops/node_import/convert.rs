//! One Node session (record + journal) → a record and its event log, the thread rebuilt
//! with the pure reducer ([`crate::mapping::roll_forward`]).

use acpx_model::{
    EventEnvelope, Message, NewSession, RecordId, SessionRecord, Thread, Timestamp, UserContent,
    UserMessage,
};
use serde_json::{json, Value};

use super::journal::convert_journal;
use super::record::{convert_record, str_of, Converted, ThreadSource};
use crate::mapping::roll_forward;

/// A valid record id derived from a Node id that is not one: the same id every time (so a
/// second import finds the first), readable, and distinct for distinct originals (a hash of
/// the original is appended).
pub fn safe_id(original: &str) -> RecordId {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in original.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100000001b3);
    }
    let cleaned: String = original
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let cleaned = cleaned.trim_start_matches('.');
    let stem: String = cleaned.chars().take(100).collect();
    let candidate = if stem.is_empty() {
        format!("node-{h:016x}")
    } else {
        format!("{stem}-{:08x}", h as u32)
    };
    RecordId::parse(&candidate).unwrap_or_else(|_| RecordId::generate())
}

/// Gives the journal's prompts the ids of Node's `User` messages, so token usage keyed by them
/// and anything else naming a turn still match. Node keeps the last 200 messages, so the
/// record's users are the journal's last ones: they are paired from the end, and only when the
/// texts agree (Node cuts long text and ends it with "..."). Returns a note when some could
/// not be paired.
fn keep_user_message_ids(events: &mut [EventEnvelope], messages: &[Message]) -> Option<String> {
    let users: Vec<&UserMessage> = messages
        .iter()
        .filter_map(|m| match m {
            Message::User(u) => Some(u),
            _ => None,
        })
        .collect();
    let mut prompts: Vec<&mut EventEnvelope> = events
        .iter_mut()
        .filter(|e| e.event_type.as_str() == "prompt_started")
        .collect();
    let mut unpaired = 0;
    for (prompt, user) in prompts.iter_mut().rev().zip(users.iter().rev()) {
        let sent: String = prompt
            .payload
            .get("prompt")
            .and_then(Value::as_array)
            .map(|blocks| {
                blocks
                    .iter()
                    .filter_map(|b| b.get("text").and_then(Value::as_str))
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_default();
        let stored: String = user
            .content
            .iter()
            .filter_map(|c| match c {
                UserContent::Text(t) => Some(t.as_str()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n");
        let stored_head = stored.strip_suffix("...").unwrap_or(&stored);
        if sent == stored || (stored.ends_with("...") && sent.starts_with(stored_head)) {
            prompt.payload["userMessageId"] = json!(user.id);
        } else {
            unpaired += 1;
        }
    }
    (unpaired > 0).then(|| {
        format!("{unpaired} turn(s) of the journal do not match the record's user messages; they got new ids")
    })
}

fn user_turns(messages: &[Message]) -> usize {
    messages
        .iter()
        .filter(|m| matches!(m, Message::User(_)))
        .count()
}

/// Converts one Node session: the record document and its journal lines (oldest first).
pub fn convert_session(
    node: &Value,
    journal: &[String],
    origin: &str,
    now: Timestamp,
) -> Result<Converted, String> {
    let original_id = str_of(node, "acpx_record_id")
        .unwrap_or_default()
        .to_owned();
    let mut notes = Vec::new();
    let new_id = match RecordId::parse(&original_id) {
        Ok(id) => id,
        Err(e) => {
            let id = safe_id(&original_id);
            notes.push(format!(
                "the Node record id {original_id:?} cannot be a file name here ({e}); imported as {id}"
            ));
            id
        }
    };
    let doc = convert_record(node, &new_id, now);
    let bytes = serde_json::to_vec(&doc).unwrap_or_default();
    let mut record = SessionRecord::from_json_slice(&bytes, origin).map_err(|e| e.to_string())?;

    let mut conv = convert_journal(journal, &new_id, &record.acp_session_id, record.created_at);
    if let Some(note) = keep_user_message_ids(&mut conv.events, &record.thread.messages) {
        notes.push(note);
    }
    if conv.bad_lines > 0 {
        notes.push(format!(
            "{} journal line(s) were not JSON and were skipped",
            conv.bad_lines
        ));
    }

    // Rebuild the thread from the journal with the runtime's reducer, on a copy of the record
    // with an empty conversation.
    let mut rebuilt = SessionRecord::new(
        NewSession {
            acpx_record_id: new_id.clone(),
            acp_session_id: record.acp_session_id.clone(),
            agent_session_id: record.agent_session_id.clone(),
            agent_command: record.agent_command.clone(),
            cwd: record.cwd.clone(),
            name: record.name.clone(),
        },
        record.created_at,
    );
    roll_forward(&mut rebuilt, conv.events.iter());
    let stored_turns = user_turns(&record.thread.messages);
    let journal_turns = user_turns(&rebuilt.thread.messages);
    let thread_source = if journal_turns > 0 && journal_turns >= stored_turns {
        let stored = std::mem::replace(&mut record.thread, Thread::new(record.created_at));
        record.thread = rebuilt.thread;
        if record.thread.title.is_empty() {
            record.thread.title = stored.title;
        }
        // Node's usage is keyed by its user message ids, which the rebuilt thread keeps: the
        // journal's own counts win, Node's fill the turns the journal has none for.
        let rebuilt_had_usage = !record.thread.request_token_usage.is_empty();
        for (k, v) in stored.request_token_usage {
            record.thread.request_token_usage.entry(k).or_insert(v);
        }
        if rebuilt_had_usage || stored.cumulative_token_usage == Default::default() {
            record.thread.cumulative_token_usage = record
                .thread
                .request_token_usage
                .values()
                .fold(Default::default(), |acc: acpx_model::TokenUsage, u| {
                    acc.saturating_add(*u)
                });
        } else {
            record.thread.cumulative_token_usage = stored.cumulative_token_usage;
        }
        record.thread.updated_at = record.thread.updated_at.max(stored.updated_at);
        for (k, v) in stored.extra {
            record.thread.extra.entry(k).or_insert(v);
        }
        record.thread.imported = true;
        ThreadSource::Journal
    } else {
        if stored_turns > 0 || !journal.is_empty() {
            notes.push(format!(
                "the journal holds {journal_turns} of the {stored_turns} turns (older segments were rotated away{}); \
                 kept the record's messages, which Node may have trimmed",
                if conv.complete { "" } else { ", it does not start at the first message" }
            ));
        }
        ThreadSource::Record
    };
    // Bookkeeping the reducer derived from the log; identity and lifecycle stay the record's.
    record.acpx.audit_seq = conv.events.len() as u64;
    record.acpx.audit_events = rebuilt.acpx.audit_events;
    record.acpx.audit_dropped_count = rebuilt.acpx.audit_dropped_count;
    if record.acpx.last_turn.is_none() {
        record.acpx.last_turn = rebuilt.acpx.last_turn;
    }
    if record.acpx.plan.is_none() {
        record.acpx.plan = rebuilt.acpx.plan;
    }
    if record.acpx.current_mode_id.is_none() {
        record.acpx.current_mode_id = rebuilt.acpx.current_mode_id;
    }
    if record.acpx.available_commands.is_empty() {
        record.acpx.available_commands = rebuilt.acpx.available_commands;
    }
    if record.acpx.config_options.is_empty() {
        record.acpx.config_options = rebuilt.acpx.config_options;
    }
    // What else the log says (the context window and cost of `usage_update`, …), unless the
    // record says it already.
    for (k, v) in rebuilt.acpx.extra {
        record.acpx.extra.entry(k).or_insert(v);
    }
    record.extra.insert(
        "importedFrom".into(),
        json!({
            "source": "node-acpx",
            "path": origin,
            "acpxRecordId": original_id,
            "importedAt": now,
            "threadSource": thread_source.as_str(),
            "journalComplete": conv.complete,
            "nodeImportedFrom": node.get("imported_from").cloned().unwrap_or(Value::Null),
            "nodeEventLog": node.get("event_log").cloned().unwrap_or(Value::Null),
            "nodeLastSeq": node.get("last_seq").cloned().unwrap_or(Value::Null),
        }),
    );
    Ok(Converted {
        record,
        events: conv.events,
        original_id,
        thread_source,
        notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::node_import::JOURNAL_SCHEMA;
    use acpx_model::AgentContent;

    fn node_record() -> Value {
        json!({
            "schema": "acpx.session.v1",
            "acpx_record_id": "sess-1",
            "acp_session_id": "sess-1",
            "agent_session_id": "native-1",
            "agent_command": "node agent.js",
            "cwd": "/repo",
            "name": "api",
            "created_at": "2026-01-01T00:00:00.000Z",
            "last_used_at": "2026-01-01T00:05:00.000Z",
            "last_seq": 6,
            "closed": false,
            "pid": 4242,
            "title": "Greeting",
            "messages": [
                {"User": {"id": "u1", "content": [{"Text": "hello"}, {"Audio": {"data": "AAA", "mime_type": "audio/wav"}}]}},
                {"Agent": {"content": [{"Text": "hi th..."}], "tool_results": {}}}
            ],
            "updated_at": "2026-01-01T00:05:00.000Z",
            "cumulative_token_usage": {"input_tokens": 3, "output_tokens": 4},
            "cumulative_cost": {"amount": 0.01, "currency": "USD"},
            "acpx": {"current_mode_id": "code", "available_commands": [{"name": "plan", "has_input": false}], "desired_mode_id": "code"}
        })
    }

    fn journal() -> Vec<String> {
        [
            json!({"schema": JOURNAL_SCHEMA, "type": "segment", "record_id": "sess-1", "sequence": 0, "message_sequence": 0, "request_id": null}),
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}}),
            json!({"schema": JOURNAL_SCHEMA, "type": "turn_started", "request_id": "r1"}),
            json!({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": {"sessionId": "sess-1", "prompt": [{"type": "text", "text": "hello"}]}}),
            json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "sess-1", "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi there, the whole untrimmed text"}}}}),
            json!({"jsonrpc": "2.0", "id": 2, "result": {"stopReason": "end_turn"}}),
            json!({"schema": JOURNAL_SCHEMA, "type": "turn_result", "request_id": "r1", "result": {"status": "completed", "stopReason": "end_turn"}}),
        ]
        .iter()
        .map(|v| v.to_string())
        .collect()
    }

    #[test]
    fn journal_rebuilds_the_untrimmed_thread() {
        let c = convert_session(&node_record(), &journal(), "x.json", Timestamp::now()).unwrap();
        assert_eq!(c.thread_source, ThreadSource::Journal);
        let Message::Agent(a) = &c.record.thread.messages[1] else {
            panic!()
        };
        assert_eq!(
            a.content[0],
            AgentContent::Text("hi there, the whole untrimmed text".into())
        );
        assert_eq!(c.record.thread.title, "Greeting");
        assert_eq!(c.record.agent_session_id.as_deref(), Some("native-1"));
        assert_eq!(c.record.pid, None);
        assert_eq!(c.record.acpx.available_commands, vec!["plan".to_owned()]);
        assert_eq!(c.record.acpx.audit_seq, c.events.len() as u64);
        let types: Vec<&str> = c.events.iter().map(|e| e.event_type.as_str()).collect();
        assert_eq!(
            types,
            [
                "node_journal",
                "prompt_started",
                "session_update",
                "prompt_done"
            ]
        );
        assert!(c
            .events
            .iter()
            .enumerate()
            .all(|(i, e)| e.seq == i as u64 + 1));
        assert_eq!(
            c.record.acpx.last_turn.as_ref().unwrap().outcome,
            "completed"
        );
    }

    #[test]
    fn without_a_journal_the_record_messages_are_kept_audio_included() {
        let c = convert_session(&node_record(), &[], "x.json", Timestamp::now()).unwrap();
        assert_eq!(c.thread_source, ThreadSource::Record);
        assert_eq!(c.record.thread.messages.len(), 2);
        let Message::User(u) = &c.record.thread.messages[0] else {
            panic!()
        };
        assert_eq!(u.extra["acpx_node_content"][0]["Audio"]["data"], "AAA");
        assert_eq!(c.record.thread.extra["cumulative_cost"]["currency"], "USD");
    }

    #[test]
    fn a_turn_without_result_is_marked_interrupted() {
        let mut j = journal();
        j.truncate(5);
        let c = convert_session(&node_record(), &j, "x.json", Timestamp::now()).unwrap();
        let last = c.events.last().unwrap();
        assert_eq!(last.event_type, "prompt_error");
        assert_eq!(
            c.record.acpx.last_turn.as_ref().unwrap().outcome,
            "interrupted"
        );
    }

    #[test]
    fn invalid_ids_get_a_stable_safe_one() {
        let mut n = node_record();
        n["acpx_record_id"] = json!("a/b");
        let c = convert_session(&n, &[], "x.json", Timestamp::now()).unwrap();
        assert!(c.record.acpx_record_id.as_str().starts_with("a_b-"));
        assert_eq!(c.original_id, "a/b");
        assert!(!c.notes.is_empty());
        let again = convert_session(&n, &[], "x.json", Timestamp::now()).unwrap();
        assert_eq!(again.record.acpx_record_id, c.record.acpx_record_id);
        assert_ne!(safe_id("a:b"), safe_id("a/b"));
        assert!(safe_id("..").as_str().starts_with("node-"));
    }
}
