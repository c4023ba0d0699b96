//! The writer against serde_json's own pretty printer, byte for byte.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::json;

use super::to_writer_pretty;

fn ours<T: Serialize + ?Sized>(value: &T) -> String {
    let mut out = Vec::new();
    to_writer_pretty(&mut out, value).unwrap();
    String::from_utf8(out).unwrap()
}

fn same<T: Serialize + ?Sized + std::fmt::Debug>(value: &T) {
    let theirs = serde_json::to_string_pretty(value).unwrap();
    assert_eq!(ours(value), theirs, "{value:?}");
}

#[test]
fn every_byte_class_at_every_offset_of_a_block() {
    // Every offset of the first two blocks of 32 and the tail after them, with the string
    // ending inside a block, at its end, or one past it.
    for byte in 0u8..0x80 {
        let c = char::from(byte);
        for before in 0..70 {
            for after in [0, 1, 7, 8, 9, 31, 32, 33] {
                let s = format!("{}{c}{}", "a".repeat(before), "b".repeat(after));
                same(&s);
            }
        }
    }
    for s in [
        "",
        "é",
        "日本語のテキスト\u{1F600}",
        "\u{7f}\u{80}\u{ff}",
        "\"\\\"\\",
        "\n\n\n\n\n\n\n\n\n",
        "\u{2028}\u{2029}",
    ] {
        same(s);
    }
}

#[test]
fn random_strings() {
    // A fixed linear congruential generator: the same strings at every run.
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) as usize
    };
    let pool: Vec<char> = "ab \t\n\r\"\\/\u{0}\u{1}\u{1f}\u{7f}é日\u{1F600}x"
        .chars()
        .collect();
    for _ in 0..5_000 {
        // Up to three blocks of 32, so the escapes of one block and the tail after the
        // last whole block are both written.
        let len = next() % 100;
        let s: String = (0..len).map(|_| pool[next() % pool.len()]).collect();
        same(&s);
    }
}

#[test]
fn values_of_every_shape() {
    same(&json!(null));
    same(&json!([]));
    same(&json!({}));
    same(&json!([[]]));
    same(&json!([{}, [], [[], {}], {"a": []}]));
    same(&json!({
        "n": [0, -1, 1.5, -0.0, 1e16, 1e-7, 123456789.125, u64::MAX, i64::MIN],
        "b": [true, false],
        "nested": {"deeper": {"deepest": ["x", {"k": "v\n"}]}},
        "empty": {"a": {}, "b": []},
        "text": "line\nbreak \"quoted\" back\\slash"
    }));
    same(&f64::NAN);
    same(&[f32::INFINITY, 0.1f32, 3.0f32]);
    same(&(1u128 << 100));
    same(&(-(1i128 << 100)));
    same(&'x');
    same(&serde_bytes_like(&[0, 1, 255]));
}

fn serde_bytes_like(bytes: &[u8]) -> Bytes<'_> {
    Bytes(bytes)
}

#[derive(Debug)]
struct Bytes<'a>(&'a [u8]);

impl Serialize for Bytes<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(self.0)
    }
}

#[derive(Debug, Serialize)]
enum Shape {
    Unit,
    Newtype(u32),
    NewtypeEmpty(Vec<u8>),
    Tuple(u8, String),
    TupleEmpty(),
    Struct { a: Option<u8>, b: Vec<Shape> },
    StructEmpty {},
}

#[derive(Debug, Serialize)]
struct Record {
    id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    skipped: Option<u8>,
    shapes: Vec<Shape>,
    by_number: BTreeMap<i64, &'static str>,
    by_flag: BTreeMap<bool, u8>,
    by_char: BTreeMap<char, u8>,
    unit: (),
    unit_struct: UnitStruct,
    newtype: Newtype,
    tuple: (u8, (), Option<bool>),
}

#[derive(Debug, Serialize)]
struct UnitStruct;

#[derive(Debug, Serialize)]
struct Newtype(String);

#[derive(Debug, Serialize)]
struct AllSkipped {
    #[serde(skip_serializing_if = "Option::is_none")]
    a: Option<u8>,
}

#[test]
fn derived_types_and_map_keys() {
    same(&Record {
        id: "r".into(),
        skipped: None,
        shapes: vec![
            Shape::Unit,
            Shape::Newtype(7),
            Shape::NewtypeEmpty(vec![]),
            Shape::Tuple(1, "t".into()),
            Shape::TupleEmpty(),
            Shape::Struct {
                a: Some(1),
                b: vec![Shape::Unit, Shape::StructEmpty {}],
            },
            Shape::StructEmpty {},
        ],
        by_number: [(-3, "minus"), (7, "seven")].into_iter().collect(),
        by_flag: [(true, 1), (false, 0)].into_iter().collect(),
        by_char: [('c', 1)].into_iter().collect(),
        unit: (),
        unit_struct: UnitStruct,
        newtype: Newtype("n".into()),
        tuple: (1, (), None),
    });
    same(&AllSkipped { a: None });
    let floats: Vec<(f64, u8)> = vec![(1.5, 1)];
    let map = FloatKeys(floats);
    assert_eq!(ours(&map), serde_json::to_string_pretty(&map).unwrap());
    let refused = FloatKeys(vec![(f64::NAN, 1)]);
    assert!(serde_json::to_string_pretty(&refused).is_err());
    let mut out = Vec::new();
    assert!(to_writer_pretty(&mut out, &refused).is_err());
}

struct FloatKeys(Vec<(f64, u8)>);

impl Serialize for FloatKeys {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

#[test]
fn a_streamed_string_is_escaped_as_one() {
    struct Pieces;
    impl std::fmt::Display for Pieces {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            for piece in ["abc\"", "\n\u{1}", "日本", "\\xyz0123456789"] {
                f.write_str(piece)?;
            }
            Ok(())
        }
    }
    struct Streamed;
    impl Serialize for Streamed {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.collect_str(&Pieces)
        }
    }
    assert_eq!(
        ours(&Streamed),
        serde_json::to_string_pretty(&Streamed).unwrap()
    );
}

#[test]
fn a_failing_writer_fails_the_write() {
    struct Full;
    impl std::io::Write for Full {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::Error::from(std::io::ErrorKind::StorageFull))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let err = to_writer_pretty(Full, &json!({"a": "b"})).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::StorageFull);
}

/// Whole session documents, as stores write them: the fixtures of the fuzzers (every part of
/// a thread and of the `acpx` namespace), and one whose reply is streamed from a spill.
#[test]
fn session_documents_are_written_as_serde_json_writes_them() {
    use crate::{SessionRecord, TextSpill, ThreadText};
    for (name, text) in [
        (
            "session_small",
            include_str!("../../tests/fixtures/fuzz/session_small.json"),
        ),
        (
            "session_full",
            include_str!("../../tests/fixtures/fuzz/session_full.json"),
        ),
    ] {
        let record = SessionRecord::from_json_slice(text.as_bytes(), name).unwrap();
        let mut theirs = serde_json::to_vec_pretty(&record).unwrap();
        theirs.push(b'\n');
        assert_eq!(record.to_json_vec().unwrap(), theirs, "{name}");
        assert_eq!(record.json_len(), theirs.len(), "{name}");
        let mut written = Vec::new();
        record.write_json(&mut written).unwrap();
        assert_eq!(written, theirs, "{name}");
    }
    let spill = std::sync::Arc::new(crate::testing::MemorySpill::default());
    let long = "a long reply with \"quotes\", \\ and\nnewlines ".repeat(5_000);
    let mut text = ThreadText::from(long.clone());
    text.spill_into(spill.clone() as std::sync::Arc<dyn TextSpill>)
        .unwrap();
    assert_eq!(spill.len(), long.len() as u64, "the text was spilled");
    assert_eq!(ours(&text), serde_json::to_string_pretty(&long).unwrap());
}

#[derive(Debug, Serialize)]
struct WithRaw {
    before: u8,
    raw: Box<serde_json::value::RawValue>,
    list: Vec<Box<serde_json::value::RawValue>>,
    #[serde(serialize_with = "optional_key_map")]
    keyed: (),
}

/// A map whose key is an `Option<&str>`: serde_json writes the inner string.
fn optional_key_map<S: serde::Serializer>(_: &(), s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut map = s.serialize_map(Some(1))?;
    map.serialize_entry(&Some("k"), &1)?;
    map.end()
}

#[test]
fn raw_values_and_optional_keys_as_serde_json_writes_them() {
    let raw = |t: &str| serde_json::value::RawValue::from_string(t.to_owned()).unwrap();
    same(&WithRaw {
        before: 1,
        raw: raw(r#"{"compact":[1,2],"s":"\u0041\n"}"#),
        list: vec![raw("[]"), raw("  {\"spaced\" : true}  ")],
        keyed: (),
    });
}

/// Tool values moved to a spill file are copied back as they were written, indented to their
/// depth: the document is the same, byte for byte, as with the values in memory, and neither
/// writer nor the counting pass parses them.
#[test]
fn spilled_tool_values_are_copied_back_at_their_depth() {
    use std::sync::Arc;

    use crate::{AgentContent, Message, SessionRecord, TextSpill, ThreadJson};

    let spill = Arc::new(crate::testing::MemorySpill::default());
    let store = || Some(spill.clone() as Arc<dyn TextSpill>);
    let text = include_str!("../../tests/fixtures/fuzz/session_full.json");
    let original = SessionRecord::from_json_slice(text.as_bytes(), "session_full").unwrap();
    let mut record = original.clone();
    let mut moved = 0;
    for message in &mut record.thread.messages {
        let Message::Agent(a) = message else { continue };
        for content in &mut a.content {
            if let AgentContent::ToolUse(t) = content {
                assert!(t.input.spill_into_if_long(0, store).unwrap());
                moved += usize::from(t.input.is_spilled());
            }
        }
        for result in a.tool_results.values_mut() {
            if let Some(output) = &mut result.output {
                assert!(output.spill_into_if_long(0, store).unwrap());
                moved += usize::from(output.is_spilled());
            }
        }
    }
    assert!(moved >= 2, "the fixture has tool values: {moved}");
    let mut theirs = serde_json::to_vec_pretty(&original).unwrap();
    theirs.push(b'\n');
    assert_eq!(record.to_json_vec().unwrap(), theirs);
    assert_eq!(record.json_len(), theirs.len());
    let mut written = Vec::new();
    record.write_json(&mut written).unwrap();
    assert_eq!(written, theirs);
    // Another serializer is given the value itself.
    assert_eq!(
        serde_json::to_string(&record).unwrap(),
        serde_json::to_string(&original).unwrap()
    );
    assert_eq!(record, original);

    // Every shape, at several depths, with a string longer than a read of the spill (64 KiB).
    let long = "line one\nline \"two\"\t\\ é 日本 ".repeat(3_000);
    let value = json!({
        "empty_object": {}, "empty_array": [], "nested": [[[]], [{}], [1, [2, {"a": null}]]],
        "text": long, "n": [0.1, -0.0, 1e300, u64::MAX, i64::MIN], "flags": [true, false]
    });
    /// `{"k": [..]}` around `{"k": [..]}` … around a value.
    #[derive(Serialize)]
    #[serde(untagged)]
    enum Nest {
        Value(ThreadJson),
        Around { k: Vec<Nest> },
    }
    for depth in 0..4 {
        let mut j = ThreadJson::from(value.clone());
        assert!(j.spill_into_if_long(0, store).unwrap());
        assert!(j.is_spilled());
        let (mut in_memory, mut spilled) = (value.clone(), Nest::Value(j));
        for _ in 0..depth {
            in_memory = json!({ "k": [in_memory] });
            spilled = Nest::Around { k: vec![spilled] };
        }
        assert_eq!(ours(&spilled), ours(&in_memory), "depth {depth}");
        assert_eq!(
            ours(&spilled),
            serde_json::to_string_pretty(&in_memory).unwrap()
        );
    }
}

/// A spilled value that reaches the writer through a serializer of serde's own (an internally
/// tagged enum's, a flattened field's, an untagged enum's buffer) is written as its value.
#[test]
fn a_spilled_value_behind_another_serializer_is_written_whole() {
    use std::sync::Arc;

    use crate::{TextSpill, ThreadJson};

    #[derive(Serialize)]
    #[serde(tag = "kind")]
    enum Tagged<T> {
        Read(T),
    }
    #[derive(Serialize)]
    struct Flattened<T> {
        id: u8,
        #[serde(flatten)]
        rest: T,
    }
    let spill = Arc::new(crate::testing::MemorySpill::default());
    let value = json!({"path": "/repo/src/main.rs", "content": "fn main() {}\n".repeat(30)});
    let spilled = || {
        let mut j = ThreadJson::from(value.clone());
        assert!(j
            .spill_into_if_long(0, || Some(spill.clone() as Arc<dyn TextSpill>))
            .unwrap());
        assert!(j.is_spilled());
        j
    };
    assert_eq!(
        ours(&Tagged::Read(spilled())),
        ours(&Tagged::Read(value.clone()))
    );
    assert_eq!(
        ours(&Flattened {
            id: 1,
            rest: spilled()
        }),
        ours(&Flattened {
            id: 1,
            rest: value.clone()
        })
    );
    // Then a plain one: nothing handed over before is left to be taken by mistake.
    let plain = vec![spilled(), ThreadJson::from(json!([]))];
    assert_eq!(ours(&plain), ours(&vec![value.clone(), json!([])]));
}

/// Whether a value is worth a spill store is decided before one is asked for, and a value
/// nested deeper than serde_json reads back stays in memory.
#[test]
fn a_short_or_deep_value_asks_for_no_store() {
    use crate::ThreadJson;

    let mut asked = false;
    let mut short = ThreadJson::from(json!({"path": "/repo/src/main.rs"}));
    assert!(short
        .spill_into_if_long(256, || {
            asked = true;
            None
        })
        .unwrap());
    assert!(!asked && !short.is_spilled());
    let mut long = ThreadJson::from(json!({"content": "x".repeat(300)}));
    assert!(
        !long.spill_into_if_long(256, || None).unwrap(),
        "no store: it stays"
    );
    assert!(!long.is_spilled());
    let mut deep = json!("x".repeat(300));
    for _ in 0..crate::thread_json::MAX_SPILLED_DEPTH + 1 {
        deep = json!([deep]);
    }
    let mut deep = ThreadJson::from(deep);
    assert!(deep
        .spill_into_if_long(0, || {
            asked = true;
            None
        })
        .unwrap());
    assert!(!asked && !deep.is_spilled());
}
