//! A document read key by key is the record serde's derive read; a settling load leaves what
//! `Thread::settle` leaves, and writes back the same bytes.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use serde_json::json;

use super::*;
use crate::json_scan::each_listed;
use crate::testing::MemorySpill;
use crate::{NewSession, RecordId, TextSpill, Timestamp, TokenUsage};

fn usage(n: u64) -> TokenUsage {
    TokenUsage {
        input_tokens: n,
        output_tokens: n + 1,
        ..TokenUsage::default()
    }
}

/// A record of `turns` turns (a user message, an agent message with a tool call and its
/// result, every third turn a resume marker), usage for each turn behind an imported key,
/// and keys this version does not know at both levels.
fn record(turns: usize) -> SessionRecord {
    let mut r = SessionRecord::new(
        NewSession {
            acpx_record_id: RecordId::parse("load-test").unwrap(),
            acp_session_id: "acp-1".into(),
            agent_session_id: Some("agent-1".into()),
            agent_command: "agent --acp".into(),
            cwd: "/repo".into(),
            name: Some("n".into()),
        },
        Timestamp::parse("2026-02-27T12:10:00.000Z").unwrap(),
    );
    r.extra.insert("futureTop".into(), json!({"k": [1, 2]}));
    let t = &mut r.thread;
    t.extra.insert("draft_prompt".into(), json!("kept"));
    t.request_token_usage.insert("imported".into(), usage(1));
    for i in 0..turns {
        let user: Message = serde_json::from_value(json!(
            {"User": {"id": format!("u{i}"), "content": [{"Text": format!("question {i}\n\"q\"")}]}}
        ))
        .unwrap();
        let agent: Message = serde_json::from_value(json!({"Agent": {
            "content": [{"Text": format!("answer {i}")},
                {"ToolUse": {"id": format!("c{i}"), "name": "read", "raw_input": "{}",
                    "input": {"path": format!("/f{i}")}, "is_input_complete": true,
                    "thought_signature": null}}],
            "tool_results": {format!("c{i}"): {"tool_use_id": format!("c{i}"),
                "tool_name": "read", "is_error": false, "content": {"Text": "x".repeat(200)},
                "output": null}},
            "reasoning_details": null}}))
        .unwrap();
        t.messages.push(user);
        t.messages.push(agent);
        if i % 3 == 2 {
            t.messages.push(Message::Resume);
        }
        t.request_token_usage
            .insert(format!("u{i}"), usage(i as u64 + 2));
    }
    t.cumulative_token_usage = t.request_usage_total();
    r
}

fn spill_stores() -> SettleOnLoad {
    SettleOnLoad::new(|| {
        let s = || Arc::new(MemorySpill::default()) as Arc<dyn TextSpill>;
        Ok([s(), s(), s()])
    })
}

#[test]
fn a_document_reads_as_the_derived_deserialize_read_it() {
    let r = record(5);
    let bytes = r.to_json_vec().unwrap();
    let derived: SessionRecord = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(
        SessionRecord::from_json_slice(&bytes, "o").unwrap(),
        derived
    );
    assert_eq!(
        SessionRecord::from_json_reader(&bytes[..], "o", None)
            .unwrap()
            .unwrap(),
        derived
    );
    assert_eq!(derived, r);
}

#[test]
fn legacy_names_and_defaults_still_apply() {
    let doc = json!({
        "schema": "acpx.session.v1",
        "id": "legacy-id",
        "sessionId": "acp-9",
        "runtimeSessionId": "",
        "agentCommand": "a",
        "cwd": "/",
        "createdAt": "2026-02-27T12:10:00.000Z",
        "lastUsedAt": "2026-02-27T12:10:00.000Z",
        "thread": {"version": "0.3.0", "title": null, "messages": [],
                   "updated_at": "2026-02-27T12:10:00.000Z"},
        "acpx": {}
    });
    let bytes = serde_json::to_vec(&doc).unwrap();
    let r = SessionRecord::from_json_slice(&bytes, "o").unwrap();
    assert_eq!(r.acpx_record_id.as_str(), "legacy-id");
    assert_eq!(r.acp_session_id, "acp-9");
    assert_eq!(r.agent_session_id, None);
    assert_eq!(r.thread.title, "");
    assert_eq!(r.revision, 0);
    assert_eq!(r, serde_json::from_slice::<SessionRecord>(&bytes).unwrap());
}

/// The field an error names, for a document with `edit` applied.
fn error_field(edit: impl FnOnce(&mut serde_json::Value)) -> (String, String) {
    let mut doc = serde_json::to_value(record(2)).unwrap();
    edit(&mut doc);
    let bytes = serde_json::to_vec(&doc).unwrap();
    let e = SessionRecord::from_json_slice(&bytes, "o").unwrap_err();
    let settled = SessionRecord::from_json_reader(Trickle::new(&bytes), "o", Some(&spill_stores()))
        .unwrap()
        .unwrap_err();
    // The same error either way, placed by line and column in a slice, by byte in a reader.
    let place = |m: &str| {
        let m = m.split(" at line ").next().unwrap_or_default();
        m.split(" at byte ").next().unwrap_or_default().to_owned()
    };
    assert_eq!(
        (&e.field, place(&e.message)),
        (&settled.field, place(&settled.message))
    );
    (e.field, e.message)
}

#[test]
fn errors_name_the_field_at_every_depth() {
    let (field, message) = error_field(|d| d["revision"] = json!("x"));
    assert_eq!(field, "revision");
    assert!(message.contains("invalid type"), "{message}");
    assert_eq!(
        error_field(|d| d["thread"]["title"] = json!(5)).0,
        "thread.title"
    );
    assert_eq!(
        error_field(|d| d["thread"]["request_token_usage"]["u1"] = json!("x")).0,
        "thread.request_token_usage.u1"
    );
    let (field, message) = error_field(|d| d["thread"]["messages"][1] = json!({"kind": 1}));
    assert_eq!(field, "thread.messages[1]");
    assert!(message.contains("legacy message shape"), "{message}");
    let (field, message) = error_field(|d| {
        d.as_object_mut().unwrap().remove("thread");
    });
    assert_eq!(field, ".");
    assert!(message.starts_with("missing field `thread`"), "{message}");
    let (field, message) = error_field(|d| {
        d["thread"].as_object_mut().unwrap().remove("updated_at");
    });
    assert_eq!(field, "thread");
    assert!(message.contains("updated_at"), "{message}");
    assert_eq!(error_field(|d| d["thread"] = json!("t")).0, "thread");
    assert_eq!(
        error_field(|d| d["acpSessionId"] = json!("")).0,
        "acpSessionId"
    );
}

#[test]
fn a_syntax_error_says_where() {
    let bytes = record(1).to_json_vec().unwrap();
    let cut = &bytes[..bytes.len() / 2];
    let e = SessionRecord::from_json_slice(cut, "o").unwrap_err();
    assert!(e.message.starts_with("not valid JSON"), "{}", e.message);
    let e = SessionRecord::from_json_reader(cut, "o", Some(&spill_stores()))
        .unwrap()
        .unwrap_err();
    assert!(e.message.starts_with("not valid JSON"), "{}", e.message);
}

#[test]
fn a_settling_load_keeps_two_turns_and_writes_the_same_bytes() {
    for turns in [0, 1, 2, 3, 4, 10, 40] {
        let r = record(turns);
        let bytes = r.to_json_vec().unwrap();
        let settle = spill_stores();
        let loaded = SessionRecord::from_json_reader(Trickle::new(&bytes), "o", Some(&settle))
            .unwrap()
            .unwrap();
        assert_eq!(settle.failure(), None);
        let t = &loaded.thread;
        assert_eq!(t.message_count(), r.thread.message_count(), "{turns} turns");
        let in_memory = t
            .messages
            .iter()
            .filter(|m| matches!(m, Message::User(_)))
            .count();
        assert_eq!(in_memory, turns.min(KEEP_TURNS_ON_LOAD), "{turns} turns");
        assert!(matches!(t.messages.first(), Some(Message::User(_)) | None));
        // The usage of the settled turns settled with them (the imported key first).
        let usage_left = if turns > KEEP_TURNS_ON_LOAD {
            KEEP_TURNS_ON_LOAD
        } else {
            turns + 1
        };
        assert_eq!(t.request_token_usage.len(), usage_left, "{turns} turns");
        assert_eq!(t.request_usage_total(), r.thread.request_usage_total());
        assert_eq!(loaded.to_json_vec().unwrap(), bytes, "{turns} turns");
        // The same as the whole conversation settled after the load.
        let mut whole = SessionRecord::from_json_slice(&bytes, "o").unwrap();
        spill_stores().settle_loaded(&mut whole.thread);
        assert_eq!(whole.thread.settled.len(), t.settled.len(), "{turns} turns");
        assert_eq!(whole.thread.messages, t.messages);
        assert_eq!(whole.to_json_vec().unwrap(), bytes);
        // Read back in every other way.
        let mut unsettled = loaded.clone();
        unsettled.thread.unsettle().unwrap();
        assert_eq!(unsettled, r, "{turns} turns");
    }
}

#[test]
fn a_load_that_cannot_settle_keeps_the_conversation_in_memory() {
    let r = record(6);
    let bytes = r.to_json_vec().unwrap();
    let asked = Arc::new(AtomicUsize::new(0));
    let counted = asked.clone();
    let settle = SettleOnLoad::new(move || {
        counted.fetch_add(1, Ordering::SeqCst);
        Err(std::io::Error::other("no temp dir"))
    });
    let loaded = SessionRecord::from_json_reader(&bytes[..], "o", Some(&settle))
        .unwrap()
        .unwrap();
    assert_eq!(loaded, r);
    assert!(loaded.thread.settled.is_empty());
    assert_eq!(
        asked.load(Ordering::SeqCst),
        1,
        "tried once, then left alone"
    );
    assert_eq!(settle.failure().as_deref(), Some("no temp dir"));
}

#[test]
fn a_failed_read_is_the_readers_error_not_a_damaged_document() {
    struct Failing<'a>(&'a [u8]);
    impl std::io::Read for Failing<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if self.0.is_empty() {
                return Err(std::io::Error::from_raw_os_error(5));
            }
            let n = buf.len().min(self.0.len()).min(100);
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }
    let bytes = record(3).to_json_vec().unwrap();
    let e =
        SessionRecord::from_json_reader(Failing(&bytes[..bytes.len() / 2]), "o", None).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(5), "{e}");
}

/// A reader that gives 1 to 7 bytes a read: every value, string and escape of a document is
/// cut somewhere.
struct Trickle<'a> {
    bytes: &'a [u8],
    step: usize,
}

impl<'a> Trickle<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Trickle { bytes, step: 0 }
    }
}

impl std::io::Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.step = self.step % 7 + 1;
        let n = self.step.min(buf.len()).min(self.bytes.len());
        buf[..n].copy_from_slice(&self.bytes[..n]);
        self.bytes = &self.bytes[n..];
        Ok(n)
    }
}

#[test]
fn a_document_read_in_pieces_of_any_size_reads_whole() {
    let mut r = record(4);
    // Escapes of every kind, a string past one read of the scanner, odd keys and scalars.
    r.thread.title = "\\\"\\\\\n\u{1F600}\u{7}".repeat(3);
    r.extra.insert(
        "k\"ey\\".into(),
        json!([true, false, null, -1.5e3, "]}", {"a": "{["}]),
    );
    r.thread
        .extra
        .insert("long".into(), json!("ab\\\"cd".repeat(30_000)));
    r.thread
        .extra
        .insert("empty".into(), json!({"o": {}, "a": []}));
    let bytes = r.to_json_vec().unwrap();
    let settle = spill_stores();
    let mut loaded = SessionRecord::from_json_reader(Trickle::new(&bytes), "o", Some(&settle))
        .unwrap()
        .unwrap();
    assert_eq!(loaded.to_json_vec().unwrap(), bytes);
    loaded.thread.unsettle().unwrap();
    assert_eq!(loaded, r);
    // Compact JSON, as another writer may leave it, and a document ending right after it.
    let compact = serde_json::to_vec(&r).unwrap();
    let read = SessionRecord::from_json_reader(Trickle::new(&compact), "o", None)
        .unwrap()
        .unwrap();
    assert_eq!(read, r);
    let read = SessionRecord::from_json_reader(&compact[..], "o", None)
        .unwrap()
        .unwrap();
    assert_eq!(read, r);
}

#[test]
fn a_broken_document_read_in_pieces_says_where() {
    let bytes = record(3).to_json_vec().unwrap();
    let text = String::from_utf8(bytes).unwrap();
    let cases = [
        (text.replacen("\"cwd\":", "\"cwd\"", 1), "."),
        (
            text.replacen("\"answer 1\"", "\"answer 1\" x", 1),
            "thread.messages[3]",
        ),
        (
            text.replacen("\"answer 1\"", "\"answer 1", 1),
            "thread.messages[3]",
        ),
        (text[..text.len() - 3].to_owned(), "."),
        (text[..text.len() / 2].to_owned(), "thread.messages"),
        (String::new(), "."),
        ("[1, 2]".to_owned(), "."),
        ("{\"a\": tru}".to_owned(), "a"),
    ];
    for (doc, field) in cases {
        let e = SessionRecord::from_json_reader(Trickle::new(doc.as_bytes()), "o", None)
            .unwrap()
            .unwrap_err();
        assert!(e.field.starts_with(field), "{field}: {e:?}");
        assert!(
            e.message.contains("at byte") || e.message.contains("expected struct"),
            "{field}: {e:?}"
        );
    }
}

/// `doc` read by the slice parser and by the reader, in pieces.
fn both(doc: &str) -> [Result<SessionRecord, crate::ValidationError>; 2] {
    let slice = SessionRecord::from_json_slice(doc.as_bytes(), "o");
    let reader = SessionRecord::from_json_reader(Trickle::new(doc.as_bytes()), "o", None).unwrap();
    [slice, reader]
}

#[test]
fn a_reader_refuses_what_a_slice_refuses_and_takes_what_it_takes() {
    let text = String::from_utf8(record(2).to_json_vec().unwrap()).unwrap();
    // Bytes after a scalar, which the scanner cuts at the next delimiter.
    for (from, to) in [
        ("\"revision\": 0", "\"revision\": 0x"),
        ("\"closed\": false", "\"closed\": falsey"),
        ("\"pid\": null", "\"pid\": null{}"),
        ("\"imported\": false", "\"imported\": false\"x\""),
    ] {
        assert!(text.contains(from), "{from}");
        let [slice, reader] = both(&text.replacen(from, to, 1));
        let (slice, reader) = (slice.unwrap_err(), reader.unwrap_err());
        assert!(
            reader.message.starts_with("not valid JSON"),
            "{to}: {reader:?}"
        );
        assert!(
            slice.message.starts_with("not valid JSON"),
            "{to}: {slice:?}"
        );
    }
    // A key the record does not know, twice: the last one wins, in `extra`.
    let doc = text.replacen("{\n", "{\n  \"futureTop\": 1,\n", 1);
    let [slice, reader] = both(&doc);
    let (slice, reader) = (slice.unwrap(), reader.unwrap());
    assert_eq!(slice.extra["futureTop"], json!({"k": [1, 2]}));
    assert_eq!(slice, reader);
    // A field of its own, twice: refused.
    let doc = text.replacen("{\n", "{\n  \"cwd\": \"/elsewhere\",\n", 1);
    let [slice, reader] = both(&doc);
    assert!(slice.unwrap_err().message.contains("duplicate field `cwd`"));
    assert!(reader
        .unwrap_err()
        .message
        .contains("duplicate field `cwd`"));
    let doc = text.replacen(
        "\"draft_prompt\"",
        "\"title\": \"t\",\n    \"draft_prompt\"",
        1,
    );
    let [slice, reader] = both(&doc);
    assert!(slice
        .unwrap_err()
        .message
        .contains("duplicate field `title`"));
    assert!(reader
        .unwrap_err()
        .message
        .contains("duplicate field `title`"));
}

#[test]
fn what_follows_the_document_is_refused_by_both_but_white_space() {
    let text = String::from_utf8(record(2).to_json_vec().unwrap()).unwrap();
    let [slice, reader] = both(&format!("{text}\n \n"));
    assert_eq!(slice.unwrap(), reader.unwrap());
    for after in ["x", "{}", "null", "}"] {
        let [slice, reader] = both(&format!("{text}\n{after}"));
        for (how, e) in [
            ("slice", slice.unwrap_err()),
            ("reader", reader.unwrap_err()),
        ] {
            assert!(
                e.message.starts_with("not valid JSON"),
                "{how}, {after:?}: {e:?}"
            );
            assert_eq!(e.field, ".", "{how}, {after:?}: {e:?}");
        }
    }
}

#[test]
fn a_reader_checks_duplicates_and_the_schema_as_a_slice_does() {
    let text = String::from_utf8(record(2).to_json_vec().unwrap()).unwrap();
    // A field twice whose first value is wrong.
    let doc = text.replacen("{\n", "{\n  \"cwd\": 5,\n", 1);
    let [slice, reader] = both(&doc);
    assert!(slice.is_err());
    assert!(reader.is_err(), "{reader:?}");
    // A field twice inside a nested object.
    let doc = text.replacen("\"acpx\": {", "\"acpx\": {\n    \"plan\": null,", 1);
    let doc = doc.replacen("\"acpx\": {", "\"acpx\": {\n    \"plan\": null,", 1);
    assert!(doc.matches("\"plan\": null").count() >= 2, "{doc}");
    let [slice, reader] = both(&doc);
    assert!(slice
        .unwrap_err()
        .message
        .contains("duplicate field `plan`"));
    let reader = reader.unwrap_err();
    assert_eq!(reader.field, "acpx", "{reader:?}");
    assert!(
        reader.message.contains("duplicate field `plan`"),
        "{reader:?}"
    );
    // Another schema says so before a message it cannot read is reached.
    let doc = text
        .replacen("acpx.session.v1", "acpx.session.v2", 1)
        .replacen("\"User\"", "\"Someone\"", 1);
    let [slice, reader] = both(&doc);
    assert_eq!(slice.unwrap_err().field, "schema");
    assert_eq!(reader.unwrap_err().field, "schema");
}

#[test]
fn a_document_that_ends_after_a_comma_says_so() {
    let doc = b"{\"schema\": \"acpx.session.v1\",";
    let e = SessionRecord::from_json_reader(Trickle::new(doc), "o", None)
        .unwrap()
        .unwrap_err();
    assert_eq!(e.field, ".");
    assert!(e.message.contains("EOF while parsing an object"), "{e:?}");
}

#[test]
fn listed_values_read_back_in_pieces_of_any_size() {
    let messages = record(3).thread.messages;
    let text = messages
        .iter()
        .map(|m| serde_json::to_string_pretty(m).unwrap())
        .collect::<Vec<_>>()
        .join(",\n");
    // Pieces of 1 to 7 bytes, and whole.
    for trickle in [true, false] {
        let mut read = Vec::new();
        let each = |m| {
            read.push(m);
            true
        };
        let n = if trickle {
            each_listed::<Message>(Trickle::new(text.as_bytes()), each)
        } else {
            each_listed::<Message>(text.as_bytes(), each)
        }
        .unwrap();
        assert_eq!(
            (n, &read),
            (messages.len(), &messages),
            "trickled: {trickle}"
        );
    }
    // Stopped by its caller after the second.
    let mut seen = 0;
    let n = each_listed::<Message>(text.as_bytes(), |_| {
        seen += 1;
        seen < 2
    })
    .unwrap();
    assert_eq!((n, seen), (2, 2));
    assert_eq!(each_listed::<u32>(&b""[..], |_| true).unwrap(), 0);
    assert_eq!(each_listed::<u32>(&b" 1,2 ,3\n"[..], |_| true).unwrap(), 3);
    for (bad, says) in [
        (&b"1 2"[..], "[1]: not valid JSON: expected `,`"),
        (b"1,{", "[1]: not valid JSON: EOF"),
        (b"1,\"x\"", "[1]: invalid type"),
    ] {
        let e = each_listed::<u32>(bad, |_| true).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
        assert!(e.to_string().starts_with(says), "{e}");
    }
}
