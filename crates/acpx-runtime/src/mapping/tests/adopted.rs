//! An adopted session's log (`session_adopted`, the replay, `adoption_replayed`) folds into a
//! thread with the conversation; the same updates outside a replay change nothing; a replay
//! left open is closed by the next turn.

use super::*;
use crate::mapping::adopt::{ADOPTED_KEY, ADOPTING_KEY};

fn life(l: &mut Log, body: Value) -> Effect {
    let p = EventPayload::from_parts("lifecycle_event", &body).unwrap();
    l.push(None, p)
}

fn user(text: &str) -> Value {
    json!({"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": text}})
}

fn users(record: &SessionRecord) -> Vec<String> {
    record
        .thread
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::User(u) => Some(
                u.content
                    .iter()
                    .map(|c| format!("{c:?}"))
                    .collect::<Vec<_>>()
                    .join(""),
            ),
            _ => None,
        })
        .collect()
}

#[test]
fn the_replayed_history_becomes_the_thread() {
    let mut l = Log::new();
    life(
        &mut l,
        json!({"phase": "session_adopted", "acpSessionId": ACP, "method": "session/load",
               "agentSessionId": "native-1"}),
    );
    assert_eq!(l.record.acpx.extra[ADOPTING_KEY], true);
    assert_eq!(l.record.agent_session_id.as_deref(), Some("native-1"));
    l.update(user("remember "));
    l.update(user("the door"));
    l.update(text("Noted."));
    l.update(
        json!({"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "Read",
                    "status": "in_progress"}),
    );
    l.update(user("and now?"));
    l.update(text("The door."));
    life(
        &mut l,
        json!({"phase": "adoption_replayed", "replayedUpdates": 6}),
    );
    let r = &l.record;
    assert!(!r.acpx.extra.contains_key(ADOPTING_KEY));
    assert_eq!(r.acpx.extra[ADOPTED_KEY]["replayedUpdates"], 6);
    assert_eq!(r.acpx.extra[ADOPTED_KEY]["method"], "session/load");
    assert_eq!(r.thread.messages.len(), 4, "{:?}", r.thread.messages);
    let u = users(r);
    assert!(
        u[0].contains("remember the door") && u[1].contains("and now?"),
        "{u:?}"
    );
    assert_eq!(l.agent(1).content.len(), 2, "text and the tool call");
    // The open tool call was closed when the history ended.
    let Message::Agent(a) = &r.thread.messages[1] else {
        panic!()
    };
    assert!(a.tool_results.contains_key("t1"), "{a:?}");
    assert!(r.acpx.last_turn.is_none(), "history is not a turn");
}

#[test]
fn user_chunks_outside_a_replay_change_nothing_and_a_turn_closes_an_open_replay() {
    let mut l = Log::new();
    assert!(matches!(l.update(user("hi")), Effect::Ignored(_)));
    assert!(l.record.thread.messages.is_empty());
    life(
        &mut l,
        json!({"phase": "session_adopted", "acpSessionId": ACP, "method": "session/load"}),
    );
    l.update(user("from the agent"));
    // The log was cut here (no adoption_replayed): the next turn closes the replay.
    l.start("a new turn");
    assert!(!l.record.acpx.extra.contains_key(ADOPTING_KEY));
    l.done("end_turn", None);
    assert!(matches!(l.update(user("late")), Effect::Ignored(_)));
    assert_eq!(users(&l.record).len(), 2);
}

#[test]
fn a_message_id_change_starts_a_new_user_message() {
    let mut l = Log::new();
    life(
        &mut l,
        json!({"phase": "session_adopted", "acpSessionId": ACP, "method": "session/load"}),
    );
    let mut a = user("one");
    a["messageId"] = json!("m1");
    let mut b = user("two");
    b["messageId"] = json!("m2");
    l.update(a);
    l.update(b);
    let ids: Vec<&str> = l
        .record
        .thread
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::User(u) => Some(u.id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(ids, ["m1", "m2"]);
}
