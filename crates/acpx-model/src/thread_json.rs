//! [`ThreadJson`]: a JSON value of the thread (a tool call's `input`, a tool result's
//! `output`), held in memory or, once its turn has finished in a session that lives on, as
//! its JSON text in a spill store ([`TextSpill`], as a long [`ThreadText`]).
//!
//! A coding agent's turn makes many tool calls, each with up to 10 KB of input (a file
//! written whole) and of raw output (a command's); a queue owner that keeps them as `Value`s
//! grows with every call (issue 15). The JSON is the same either way. A spilled value's text
//! is what the snapshot's writer (`json_pretty.rs`) writes for it at depth 0, so a save
//! copies it back, indented, without parsing or escaping it again (a session holds thousands);
//! any other serializer, and a comparison, get the value parsed back. A read error fails the
//! serialization (never a cut or missing value in a snapshot), and a snapshot read back
//! always gives a value in memory.

use std::borrow::Cow;
use std::fmt;
use std::io;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::{TextSpill, ThreadText};

/// A JSON value of the thread: in memory, or its JSON text (as a session document writes it)
/// in a spill store.
#[derive(Clone)]
pub struct ThreadJson(Repr);

#[derive(Clone)]
enum Repr {
    Value(Value),
    /// The value's JSON text as `json_pretty.rs` writes it at depth 0 (spilled).
    Text(ThreadText),
}

impl ThreadJson {
    /// The value: borrowed when in memory, else read back from the spill and parsed.
    pub fn to_value(&self) -> io::Result<Cow<'_, Value>> {
        match &self.0 {
            Repr::Value(v) => Ok(Cow::Borrowed(v)),
            Repr::Text(t) => {
                let text = t.to_text()?;
                serde_json::from_str(&text)
                    .map(Cow::Owned)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
            }
        }
    }

    /// The value in memory, when it is (not spilled).
    pub fn as_value(&self) -> Option<&Value> {
        match &self.0 {
            Repr::Value(v) => Some(v),
            Repr::Text(_) => None,
        }
    }

    /// Whether the value lives in a spill store.
    pub fn is_spilled(&self) -> bool {
        matches!(&self.0, Repr::Text(t) if t.is_spilled())
    }

    /// Moves the value to a spill store as its JSON text (written as a session document
    /// writes it, so a save copies it back without parsing or escaping it again) when that
    /// text is at least `min_len` bytes long. `spill` gives the store, asked only then.
    ///
    /// `Ok(true)` when the value moved or stays by rule: a shorter one, or one nested deeper
    /// than [`MAX_SPILLED_DEPTH`] (serde_json could not read it back); `Ok(false)` when it
    /// should have moved and `spill` gave no store. Errors only when the write failed; the
    /// value then stays in memory, unchanged.
    pub fn spill_into_if_long(
        &mut self,
        min_len: usize,
        spill: impl FnOnce() -> Option<Arc<dyn TextSpill>>,
    ) -> io::Result<bool> {
        let Repr::Value(v) = &self.0 else {
            return Ok(true);
        };
        if nested_deeper_than(v, MAX_SPILLED_DEPTH) {
            return Ok(true);
        }
        let mut text = Vec::new();
        crate::json_pretty::to_writer_pretty(&mut text, v)?;
        if text.len() < min_len {
            return Ok(true);
        }
        let Some(spill) = spill() else {
            return Ok(false);
        };
        // The writer writes UTF-8 only.
        let text =
            String::from_utf8(text).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        let mut text = ThreadText::from(text);
        text.spill_into(spill)?;
        if text.is_spilled() {
            self.0 = Repr::Text(text);
        }
        Ok(true)
    }
}

/// A value nested deeper than this stays in memory: serde_json reads back 128 levels at most
/// (an agent's JSON, read by serde_json too, is never deeper; a value a library user built
/// could be), and the margin keeps clear of that limit.
pub const MAX_SPILLED_DEPTH: usize = 100;

/// Whether `v` has arrays or objects nested more than `limit` deep.
fn nested_deeper_than(v: &Value, limit: usize) -> bool {
    let deeper = |c: &Value| limit == 0 || nested_deeper_than(c, limit - 1);
    match v {
        Value::Array(items) => items.iter().any(deeper),
        Value::Object(map) => map.values().any(deeper),
        _ => false,
    }
}

impl Default for ThreadJson {
    fn default() -> Self {
        ThreadJson(Repr::Value(Value::Null))
    }
}

impl From<Value> for ThreadJson {
    fn from(v: Value) -> Self {
        ThreadJson(Repr::Value(v))
    }
}

impl fmt::Debug for ThreadJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Repr::Value(v) => fmt::Debug::fmt(v, f),
            Repr::Text(t) => write!(f, "<{} bytes of JSON in a spill file>", t.len()),
        }
    }
}

/// Values compare, wherever they live; one that cannot be read back equals nothing.
impl PartialEq for ThreadJson {
    fn eq(&self, other: &Self) -> bool {
        match (self.to_value(), other.to_value()) {
            (Ok(a), Ok(b)) => a == b,
            _ => false,
        }
    }
}

impl PartialEq<Value> for ThreadJson {
    fn eq(&self, other: &Value) -> bool {
        self.to_value().is_ok_and(|v| *v == *other)
    }
}

impl Serialize for ThreadJson {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // A session document's writer copies the spilled text as it is; any other serializer
        // is given the value, parsed back.
        let serializer = match &self.0 {
            Repr::Text(t) => {
                match crate::json_pretty::serialize_written_text(t, &Parsed(self), serializer) {
                    Ok(written) => return written,
                    Err(serializer) => serializer,
                }
            }
            Repr::Value(_) => serializer,
        };
        Parsed(self).serialize(serializer)
    }
}

/// A value serialized as itself: parsed back first when spilled.
struct Parsed<'a>(&'a ThreadJson);

impl Serialize for Parsed<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0.to_value() {
            Ok(v) => v.serialize(serializer),
            Err(e) => Err(serde::ser::Error::custom(format!(
                "a tool call's JSON could not be read back from its spill file: {e}"
            ))),
        }
    }
}

impl<'de> Deserialize<'de> for ThreadJson {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Value::deserialize(deserializer).map(ThreadJson::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::MemorySpill;
    use serde_json::json;

    #[test]
    fn a_spilled_value_writes_and_compares_like_the_value() {
        let value = json!({"path": "/repo/a.rs", "content": "fn main() {}\n".repeat(40)});
        let spill = Arc::new(MemorySpill::default());
        let mut small = ThreadJson::from(json!({"path": "/repo"}));
        let store = || Some(spill.clone() as Arc<dyn TextSpill>);
        assert!(small.spill_into_if_long(256, store).unwrap());
        assert!(!small.is_spilled(), "a short value stays in memory");
        let mut j = ThreadJson::from(value.clone());
        assert!(j.spill_into_if_long(256, store).unwrap());
        assert!(j.is_spilled());
        assert!(j.as_value().is_none());
        assert_eq!(j, value);
        assert_eq!(j, ThreadJson::from(value.clone()));
        assert_eq!(
            serde_json::to_string(&j).unwrap(),
            serde_json::to_string(&value).unwrap()
        );
        let back: ThreadJson = serde_json::from_str(&serde_json::to_string(&j).unwrap()).unwrap();
        assert!(!back.is_spilled());
        assert_eq!(back, j);
        assert!(format!("{j:?}").contains("bytes of JSON in a spill file"));
        // Floats, extreme integers and keys out of order come back the same, byte for byte.
        let odd = json!({"z": 0.30000000000000004, "a": 1.0, "m": 1.0715660391465826e-75,
            "u": u64::MAX, "i": i64::MIN, "f": [5e-324, 1.7976931348623157e308, -0.0]});
        let mut j2 = ThreadJson::from(odd.clone());
        assert!(j2.spill_into_if_long(0, store).unwrap());
        assert!(j2.is_spilled());
        assert_eq!(
            serde_json::to_string(&j2).unwrap(),
            serde_json::to_string(&odd).unwrap()
        );
        // A failed read fails the serialization and equals nothing.
        spill.fail_reads(true);
        let err = serde_json::to_string(&j).unwrap_err().to_string();
        assert!(err.contains("could not be read back"), "{err}");
        assert!(j != value);
    }
}
