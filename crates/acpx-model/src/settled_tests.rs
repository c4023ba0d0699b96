//! Settled messages write, read back and search like the messages they were.

use std::sync::Arc;

use serde_json::json;

use super::*;
use crate::search::message_text;
use crate::testing::MemorySpill;
use crate::Thread;

/// A thread of every kind of message: user text, a mention and an image; agent text,
/// reasoning, a tool call with a spilled input and its result; a resume marker; odd strings.
fn thread() -> Thread {
    let mut t: Thread = serde_json::from_value(json!({
        "version": "0.3.0",
        "title": "t",
        "messages": [
            {"User": {"id": "u1", "content": [{"Text": "hello\nthere \"q\" \u{1F600}"},
                {"Mention": {"uri": {"File": {"abs_path": "/a"}}, "content": "fn a() {}"}}]}},
            {"Agent": {"content": [{"Thinking": {"text": "hmm", "signature": null}},
                {"Text": "line one\nline two"},
                {"ToolUse": {"id": "c1", "name": "read", "raw_input": "{\"path\":\"/a\"}",
                    "input": {"path": "/a", "deep": {"list": [1, 2.5, null, {"k": "v"}]}},
                    "is_input_complete": true, "thought_signature": null}}],
                "tool_results": {"c1": {"tool_use_id": "c1", "tool_name": "read",
                    "is_error": false, "content": {"Text": "x".repeat(300)},
                    "output": {"text": "y".repeat(400)}}},
                "reasoning_details": null}},
            "Resume",
            {"User": {"id": "u2", "content": [{"Text": ""}], "future_key": [1, 2]}},
            {"Agent": {"content": [], "tool_results": {}, "reasoning_details": null}},
            {"User": {"id": "u3", "content": [{"Text": "last"}]}},
            {"Agent": {"content": [{"Text": "end"}], "tool_results": {},
                "reasoning_details": {"r": 1}}}
        ],
        "updated_at": "2026-02-27T12:10:00.000Z",
        "request_token_usage": {
            "imported \"key\" \\ é": {"input_tokens": 2, "output_tokens": 2,
                "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
            "u1": {"input_tokens": 3, "output_tokens": 4,
                "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
            "u2": {"input_tokens": 5, "output_tokens": 6,
                "cache_creation_input_tokens": 1, "cache_read_input_tokens": 2,
                "thought_tokens": 7},
            "u3": {"input_tokens": 8, "output_tokens": 9,
                "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
            "not-a-turn": {"input_tokens": 1, "output_tokens": 1,
                "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
        },
        "draft_prompt": "kept"
    }))
    .unwrap();
    // A tool input held in a spill store, as the runtime leaves it, settles too.
    if let Message::Agent(a) = &mut t.messages[1] {
        if let AgentContent::ToolUse(u) = &mut a.content[2] {
            let spill = Arc::new(MemorySpill::default());
            assert!(u
                .input
                .spill_into_if_long(0, || Some(spill as Arc<dyn TextSpill>))
                .unwrap());
            assert!(u.input.is_spilled());
        }
    }
    t
}

fn pretty(t: &Thread) -> String {
    let mut out = Vec::new();
    crate::json_pretty::to_writer_pretty(&mut out, t).unwrap();
    String::from_utf8(out).unwrap()
}

type Stores = [Arc<MemorySpill>; 3];

fn stores() -> Stores {
    [Arc::default(), Arc::default(), Arc::default()]
}

/// Settles the first `n` of `t`'s messages, as the runtime does.
fn settle(t: &mut Thread, n: usize, into: &Stores) {
    let [m, s, u] = into.clone();
    t.settle(n, || Ok([m as _, s as _, u as _])).unwrap();
}

#[test]
fn a_thread_writes_the_same_bytes_however_much_is_settled() {
    let whole = thread();
    let expected_pretty = pretty(&whole);
    assert_eq!(
        expected_pretty,
        serde_json::to_string_pretty(&whole).unwrap()
    );
    let expected_compact = serde_json::to_string(&whole).unwrap();
    let expected_value = serde_json::to_value(&whole).unwrap();
    let all = whole.messages.len();
    for first in 0..=all {
        for second in 0..=all - first {
            let mut t = whole.clone();
            let into = stores();
            settle(&mut t, first, &into);
            settle(&mut t, second, &into);
            assert_eq!(t.settled.len(), first + second);
            assert_eq!(t.message_count(), all);
            // The usage of the turns settled settles with them, in order, and the entry
            // of no turn before them; what follows the first turn still in memory stays.
            let expected_usage = match first + second {
                0 => 0,
                n => {
                    let staying: Vec<&str> = whole.messages[n..]
                        .iter()
                        .filter_map(|m| match m {
                            Message::User(u) => Some(u.id.as_str()),
                            _ => None,
                        })
                        .collect();
                    whole
                        .request_token_usage
                        .keys()
                        .take_while(|k| !staying.contains(&k.as_str()))
                        .count()
                }
            };
            assert_eq!(t.settled.usage_len(), expected_usage);
            if first + second >= 1 {
                assert!(
                    expected_usage >= 2,
                    "the imported key and u1 settle with turn one"
                );
            }
            assert_eq!(t.request_usage_total(), whole.request_usage_total());
            let mut back = t.clone();
            back.unsettle().unwrap();
            assert_eq!(back, whole);
            assert_eq!(pretty(&t), expected_pretty, "settled {first} + {second}");
            assert_eq!(serde_json::to_string(&t).unwrap(), expected_compact);
            assert_eq!(serde_json::to_value(&t).unwrap(), expected_value);
            // Nested deeper, as in a session document: indented to its depth.
            let wrapped = json!({"a": {"b": [1]}});
            let mut w = Vec::new();
            crate::json_pretty::to_writer_pretty(&mut w, &(wrapped.clone(), &t)).unwrap();
            assert_eq!(
                String::from_utf8(w).unwrap(),
                serde_json::to_string_pretty(&(wrapped, &whole)).unwrap()
            );
            // Read back, every message is in memory again.
            let back: Thread = serde_json::from_str(&pretty(&t)).unwrap();
            assert!(back.settled.is_empty());
            assert_eq!(back.messages.len(), all);
        }
    }
}

#[test]
fn settled_messages_are_visited_and_searched_as_they_were() {
    let whole = thread();
    let mut t = whole.clone();
    settle(&mut t, 5, &stores());
    let mut seen = Vec::new();
    t.try_for_each_message(|i, m| {
        seen.push((i, m.clone()));
        Ok::<_, ()>(())
    })
    .unwrap()
    .unwrap();
    assert_eq!(seen.len(), whole.messages.len());
    for (i, m) in &seen {
        assert_eq!(*m, whole.messages[*i], "message {i}");
    }
    // A caller's error stops the visit and comes back as it was.
    let mut visited = 0;
    let stopped = t
        .try_for_each_message(|i, _| {
            visited += 1;
            if i == 1 {
                Err("stop")
            } else {
                Ok(())
            }
        })
        .unwrap();
    assert_eq!((stopped, visited), (Err("stop"), 2));

    let texts = t.settled.searchable().unwrap();
    let expected: Vec<_> = whole.messages[..5]
        .iter()
        .enumerate()
        .filter_map(|(i, m)| message_text(m).map(|(r, id, text)| (i, r, id, text)))
        .collect();
    assert_eq!(texts.len(), expected.len());
    for (got, (i, role, id, text)) in texts.iter().zip(expected) {
        assert_eq!(got.index, i);
        assert_eq!(got.role, role);
        assert_eq!(got.message_id.as_deref(), id);
        assert_eq!(got.text.to_text().unwrap(), text);
    }
}

#[test]
fn settled_messages_compare_by_content() {
    let whole = thread();
    let (mut a, mut b) = (whole.clone(), whole.clone());
    settle(&mut a, 3, &stores());
    settle(&mut b, 3, &stores());
    assert_eq!(a, b);
    let mut c = whole.clone();
    settle(&mut c, 2, &stores());
    assert_ne!(a, c);
    assert_ne!(a, whole);
    assert!(format!("{:?}", a.settled).contains("3 messages"));
}

#[test]
fn nothing_settles_when_the_stores_fail_and_reads_that_fail_fail_the_writes() {
    let mut t = thread();
    let before = t.clone();
    let failed = t.settle(2, || Err(io::Error::other("no temp dir")));
    assert!(failed.is_err());
    assert!(t.settled.is_empty());
    assert_eq!(t, before, "nothing moved");

    let into = stores();
    settle(&mut t, 2, &into);
    into[0].fail_reads(true);
    let err = serde_json::to_string(&t).unwrap_err().to_string();
    assert!(err.contains("settled message run"), "{err}");
    let mut out = Vec::new();
    let err = crate::json_pretty::to_writer_pretty(&mut out, &t)
        .unwrap_err()
        .to_string();
    assert!(err.contains("could not be read back"), "{err}");
    assert!(t.try_for_each_message(|_, _| Ok::<_, ()>(())).is_err());
    assert_ne!(t.clone(), t);
    into[0].fail_reads(false);
    assert_eq!(t.clone(), t);
    into[2].fail_reads(true);
    let err = serde_json::to_string(&t).unwrap_err().to_string();
    assert!(err.contains("settled token usage"), "{err}");
    assert!(t.clone().unsettle().is_err());
    into[2].fail_reads(false);

    // A write some other text made between two settles is refused, not interleaved.
    let before = t.clone();
    into[0].append_at(into[0].len(), "stray").unwrap();
    let err = t
        .settle(1, || unreachable!("the stores exist"))
        .unwrap_err();
    assert!(err.to_string().contains("failed write"), "{err}");
    assert_eq!(t.settled.len(), 2);
    assert_eq!(t.messages, before.messages);
}

#[test]
fn long_messages_settle_in_pieces_and_read_back_whole() {
    // Texts longer than a run's 64 KiB appends and a reader's buffer, with characters of two,
    // three and four bytes across every cut.
    let long = "é日\u{1F600}a".repeat(30_000);
    let user = |id: &str, text: &str| json!({"User": {"id": id, "content": [{"Text": text}]}});
    let agent = |text: &str| {
        json!({"Agent": {"content": [{"Text": text}], "tool_results": {},
            "reasoning_details": null}})
    };
    let whole: Thread = serde_json::from_value(json!({
        "version": "0.3.0",
        "title": "",
        "messages": [user("u1", &long), agent(&long), user("u2", "short"), agent("x"),
            user("u3", &long[..70_000]), agent("y"), user("u4", "tail")],
        "updated_at": "2026-02-27T12:10:00.000Z"
    }))
    .unwrap();
    let mut t = whole.clone();
    settle(&mut t, 6, &stores());
    assert_eq!(pretty(&t), pretty(&whole));
    assert_eq!(
        serde_json::to_string(&t).unwrap(),
        serde_json::to_string(&whole).unwrap()
    );
    let texts = t.settled.searchable().unwrap();
    assert_eq!(texts.len(), 6);
    for (got, m) in texts.iter().zip(&whole.messages) {
        assert_eq!(got.text.to_text().unwrap(), message_text(m).unwrap().2);
    }
    let mut back = t.clone();
    back.unsettle().unwrap();
    assert_eq!(back, whole);
}
