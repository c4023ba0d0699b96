//! Record ids: the stable local key of a session, safe to use as a file name.
//!
//! A record id reaches file paths (`<root>/sessions/<id>.json`) and SQL keys, and some of its
//! inputs come from outside (an agent's session id, a CLI argument, a file read from disk). The
//! only way to obtain a [`RecordId`] is through validation, so a value of this type can never
//! escape the store's directory.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Longest accepted record id, in bytes. Leaves room for the longest suffix we append
/// (`.events.<n>.ndjson`, temp-file suffixes) inside the common 255-byte file-name limit.
pub const MAX_RECORD_ID_LEN: usize = 128;

/// A validated acpx record id (`acpxRecordId`).
///
/// Allowed: 1 to [`MAX_RECORD_ID_LEN`] ASCII letters, digits, `-`, `_` and `.`, not starting
/// with `.`. That excludes path separators, `..`, NUL, drive prefixes (`C:`), whitespace and
/// every non-ASCII character.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RecordId(String);

/// Why a string is not a valid record id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidRecordId {
    /// The empty string.
    #[error("record id is empty")]
    Empty,
    /// Longer than [`MAX_RECORD_ID_LEN`] bytes.
    #[error("record id is {len} bytes long; the limit is {MAX_RECORD_ID_LEN}")]
    TooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// Starts with `.`.
    #[error("record id {id:?} starts with '.'; hidden names and '..' are not allowed")]
    LeadingDot {
        /// The id.
        id: String,
    },
    /// Contains a character other than ASCII letters, digits, `-`, `_` and `.`.
    #[error("record id {id:?} contains {ch:?}; only ASCII letters, digits, '-', '_' and '.' are allowed")]
    BadChar {
        /// The id.
        id: String,
        /// The first character not allowed.
        ch: char,
    },
}

impl RecordId {
    /// Validates `s` as a record id.
    pub fn parse(s: &str) -> Result<Self, InvalidRecordId> {
        if s.is_empty() {
            return Err(InvalidRecordId::Empty);
        }
        if s.len() > MAX_RECORD_ID_LEN {
            return Err(InvalidRecordId::TooLong { len: s.len() });
        }
        if s.starts_with('.') {
            return Err(InvalidRecordId::LeadingDot { id: s.to_owned() });
        }
        if let Some(ch) = s
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
        {
            return Err(InvalidRecordId::BadChar {
                id: s.escape_debug().to_string(),
                ch,
            });
        }
        Ok(RecordId(s.to_owned()))
    }

    /// Mints a fresh random id (UUID v4, hyphenated lowercase).
    pub fn generate() -> Self {
        RecordId(uuid::Uuid::new_v4().to_string())
    }

    /// Derives a record id from an id chosen by someone else (for example an agent's ACP session
    /// id): the value itself when it is already valid, otherwise a fresh id. Never fails.
    pub fn from_untrusted_or_generate(s: &str) -> Self {
        RecordId::parse(s).unwrap_or_else(|_| RecordId::generate())
    }

    /// The id as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RecordId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for RecordId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RecordId({:?})", self.0)
    }
}

impl AsRef<str> for RecordId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::str::FromStr for RecordId {
    type Err = InvalidRecordId;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        RecordId::parse(s)
    }
}

impl Serialize for RecordId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for RecordId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = std::borrow::Cow::<'de, str>::deserialize(d)?;
        RecordId::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_uuids_and_acp_style_ids() {
        for ok in [
            "2f8f2028-df7d-4479-a0a0-9f10238986cd",
            "mock-cf08a0d3",
            "sess_01.v2",
            "a",
            &"x".repeat(MAX_RECORD_ID_LEN),
        ] {
            assert!(RecordId::parse(ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn rejects_everything_that_could_escape_a_directory() {
        let long = "x".repeat(MAX_RECORD_ID_LEN + 1);
        for bad in [
            "",
            ".",
            "..",
            "../etc/passwd",
            "a/b",
            "a\\b",
            "a\0b",
            ".hidden",
            "C:evil",
            "with space",
            "tab\t",
            "é",
            long.as_str(),
        ] {
            assert!(RecordId::parse(bad).is_err(), "{bad:?} must be rejected");
        }
    }

    #[test]
    fn errors_name_the_problem() {
        let e = RecordId::parse("a/b").unwrap_err().to_string();
        assert!(e.contains("'/'"), "{e}");
        let e = RecordId::parse("..").unwrap_err().to_string();
        assert!(e.contains("starts with '.'"), "{e}");
    }

    #[test]
    fn untrusted_ids_never_fail() {
        assert_eq!(RecordId::from_untrusted_or_generate("abc").as_str(), "abc");
        let fresh = RecordId::from_untrusted_or_generate("../../x");
        assert!(RecordId::parse(fresh.as_str()).is_ok());
        assert_ne!(fresh.as_str(), "../../x");
    }

    #[test]
    fn deserialization_validates() {
        assert!(serde_json::from_str::<RecordId>("\"../x\"").is_err());
        assert_eq!(
            serde_json::from_str::<RecordId>("\"abc\"")
                .unwrap()
                .as_str(),
            "abc"
        );
    }
}
