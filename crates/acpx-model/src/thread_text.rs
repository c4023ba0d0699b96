//! [`ThreadText`]: the text of an agent message or of its reasoning (`Thinking`), held in
//! memory or, once long, in a spill store the runtime provides (a temp file), so a reply of
//! megabytes does not stay resident while it streams (issue 15: a 1M-chunk turn's reply is 8 MB, half of the whole process).
//!
//! The model does no I/O: [`TextSpill`] is the contract, and the runtime implements it (one
//! file per session, shared by its long texts). A text is spilled only on request
//! ([`ThreadText::spill_into`]); a snapshot read back always gives an in-memory text. Serialization streams a spilled text through `Display` (serde's
//! `collect_str`), so `serde_json::to_writer` into a file never holds it whole.

use std::borrow::Cow;
use std::cell::Cell;
use std::fmt;
use std::io;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An append-only store of UTF-8 bytes that holds long [`ThreadText`]s, each a range of it.
///
/// Copies of a text share their store; each knows its own range, and bytes once written never
/// change, so a copy reads what it held when it was made.
pub trait TextSpill: Send + Sync + fmt::Debug {
    /// How many bytes it holds.
    fn len(&self) -> u64;
    /// Whether it holds nothing.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Appends `text` if it holds exactly `expected` bytes, and says so; `Ok(false)` (nothing
    /// written) when something else appended first.
    fn append_at(&self, expected: u64, text: &str) -> io::Result<bool>;
    /// Reads the bytes from `offset` into `buf`, returning how many (at least one while
    /// `offset` is below [`TextSpill::len`]).
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize>;
}

/// The text of an agent message (`{"Text": "…"}` in the thread) or of its reasoning (`Thinking`).
#[derive(Clone)]
pub struct ThreadText(Repr);

#[derive(Clone)]
enum Repr {
    Inline(String),
    /// Bytes `start..start + len` of `spill`.
    Spilled {
        spill: Arc<dyn TextSpill>,
        start: u64,
        len: u64,
    },
    /// A spilled text that had to come back into memory (another copy appended to its store
    /// first, or the store failed) and could not be read: it serializes as an error, so no
    /// snapshot is written with it cut (the event log still holds every chunk).
    Unreadable {
        len: u64,
        error: Arc<str>,
    },
}

/// Bytes read from a spill per chunk.
const CHUNK: usize = 64 << 10;

impl ThreadText {
    /// An empty text.
    pub fn new() -> Self {
        ThreadText(Repr::Inline(String::new()))
    }

    /// Bytes `start..start + len` of `spill`, which hold UTF-8 text.
    pub(crate) fn spilled_range(spill: Arc<dyn TextSpill>, start: u64, len: u64) -> Self {
        ThreadText(Repr::Spilled { spill, start, len })
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        match &self.0 {
            Repr::Inline(s) => s.len(),
            Repr::Spilled { len, .. } | Repr::Unreadable { len, .. } => {
                usize::try_from(*len).unwrap_or(usize::MAX)
            }
        }
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether it lives in a spill store.
    pub fn is_spilled(&self) -> bool {
        matches!(self.0, Repr::Spilled { .. })
    }

    /// The text, when it is in memory.
    pub fn as_inline(&self) -> Option<&str> {
        match &self.0 {
            Repr::Inline(s) => Some(s),
            _ => None,
        }
    }

    /// Appends `text`. A spilled text appends to its store; if something else appended there
    /// first, or the store fails, this copy is read back into memory and goes on there (and
    /// if that read fails, the text becomes unreadable: see [`ThreadText::to_text`]).
    pub fn push_str(&mut self, text: &str) {
        match &mut self.0 {
            Repr::Inline(s) => s.push_str(text),
            Repr::Spilled { spill, start, len } => {
                if let Ok(true) = spill.append_at(*start + *len, text) {
                    *len += text.len() as u64;
                    return;
                }
                let len = *len + text.len() as u64;
                self.0 = match self.to_text() {
                    Ok(whole) => Repr::Inline(whole.into_owned() + text),
                    Err(e) => Repr::Unreadable {
                        len,
                        error: e.to_string().into(),
                    },
                };
            }
            Repr::Unreadable { len, .. } => *len += text.len() as u64,
        }
    }

    /// Moves an in-memory text to the end of `spill`. On an error the text stays in memory.
    pub fn spill_into(&mut self, spill: Arc<dyn TextSpill>) -> io::Result<()> {
        let Repr::Inline(s) = &self.0 else {
            return Ok(());
        };
        // Another text of the store may append between the two calls: try again then.
        for _ in 0..8 {
            let start = spill.len();
            if spill.append_at(start, s)? {
                let len = s.len() as u64;
                self.0 = Repr::Spilled { spill, start, len };
                return Ok(());
            }
        }
        Err(io::Error::other(
            "the spill store kept growing under this text",
        ))
    }

    /// The text in pieces: one borrowed piece in memory, pieces of 64 KiB read from a spill.
    pub fn chunks(&self) -> Chunks<'_> {
        Chunks {
            text: self,
            offset: 0,
            carry: Vec::new(),
            done: false,
        }
    }

    /// Bytes `start..end` of the text (`end` past its length reads to its end), read from its
    /// spill when spilled. The range need not fall on character boundaries.
    pub fn read_bytes(&self, start: usize, end: usize) -> io::Result<Cow<'_, [u8]>> {
        let end = end.min(self.len());
        let start = start.min(end);
        match &self.0 {
            Repr::Inline(s) => Ok(Cow::Borrowed(&s.as_bytes()[start..end])),
            Repr::Spilled {
                spill, start: at, ..
            } => {
                let mut buf = vec![0; end - start];
                read_exact_at(&**spill, *at + start as u64, &mut buf)?;
                Ok(Cow::Owned(buf))
            }
            Repr::Unreadable { error, .. } => Err(unreadable(error)),
        }
    }

    /// The whole text (read from its spill when spilled).
    pub fn to_text(&self) -> io::Result<Cow<'_, str>> {
        if let Repr::Inline(s) = &self.0 {
            return Ok(Cow::Borrowed(s));
        }
        let mut out = String::with_capacity(self.len());
        for piece in self.chunks() {
            out.push_str(&piece?);
        }
        Ok(Cow::Owned(out))
    }

    /// [`ThreadText::to_text`], with what could not be read back replaced by a note saying so
    /// (for display only: never store it).
    pub fn to_text_lossy(&self) -> Cow<'_, str> {
        if let Repr::Inline(s) = &self.0 {
            return Cow::Borrowed(s);
        }
        Cow::Owned(self.to_string())
    }
}

impl ThreadText {
    /// The text's first `chars` characters and one more when it has more (so a caller that
    /// clips can tell), read from its spill only as far as that; what could not be read back
    /// is replaced by a note, as in [`ThreadText::to_text_lossy`] (for display only).
    pub fn head_lossy(&self, chars: usize) -> Cow<'_, str> {
        if let Repr::Inline(s) = &self.0 {
            return Cow::Borrowed(s);
        }
        let mut out = String::new();
        let mut count = 0;
        for piece in self.chunks() {
            match piece {
                Ok(p) => {
                    for c in p.chars() {
                        if count > chars {
                            return Cow::Owned(out);
                        }
                        out.push(c);
                        count += 1;
                    }
                }
                Err(e) => {
                    out.push_str(&unreadable_note(&e));
                    break;
                }
            }
        }
        Cow::Owned(out)
    }
}

/// What stands in a displayed text for the part that could not be read back.
fn unreadable_note(e: &io::Error) -> String {
    format!("[acpx: the rest of this text could not be read back from its spill file: {e}]")
}

fn unreadable(error: &str) -> io::Error {
    io::Error::other(format!("an earlier read of its spill file failed: {error}"))
}

/// Fills `buf` from `offset` of `spill`.
fn read_exact_at(spill: &dyn TextSpill, offset: u64, buf: &mut [u8]) -> io::Result<()> {
    let mut filled = 0;
    while filled < buf.len() {
        match spill.read_at(offset + filled as u64, &mut buf[filled..]) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the spill file is shorter than the text it holds",
                ))
            }
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

impl Default for ThreadText {
    fn default() -> Self {
        Self::new()
    }
}

impl From<String> for ThreadText {
    fn from(s: String) -> Self {
        ThreadText(Repr::Inline(s))
    }
}

impl From<&str> for ThreadText {
    fn from(s: &str) -> Self {
        ThreadText(Repr::Inline(s.to_owned()))
    }
}

impl fmt::Debug for ThreadText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Repr::Inline(s) => fmt::Debug::fmt(s, f),
            Repr::Spilled { len, .. } => write!(f, "<{len} bytes in a spill file>"),
            Repr::Unreadable { len, error } => write!(f, "<{len} bytes, unreadable: {error}>"),
        }
    }
}

/// Writes the text, like [`ThreadText::to_text_lossy`] (never an error: `to_string` panics on
/// one).
impl fmt::Display for ThreadText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        Streamed {
            text: self,
            failed: &Cell::new(None),
        }
        .fmt(f)
    }
}

/// A text written piece by piece; a read error ends it (with a note) and is kept in `failed`
/// for the caller.
struct Streamed<'a> {
    text: &'a ThreadText,
    failed: &'a Cell<Option<io::Error>>,
}

impl fmt::Display for Streamed<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for piece in self.text.chunks() {
            match piece {
                Ok(p) => f.write_str(&p)?,
                Err(e) => {
                    f.write_str(&unreadable_note(&e))?;
                    self.failed.set(Some(e));
                    break;
                }
            }
        }
        Ok(())
    }
}

impl PartialEq for ThreadText {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (Repr::Inline(a), Repr::Inline(b)) => a == b,
            (
                Repr::Spilled { spill, start, len },
                Repr::Spilled {
                    spill: s2,
                    start: t2,
                    len: l2,
                },
            ) if Arc::ptr_eq(spill, s2) && start == t2 && len == l2 => true,
            _ => {
                self.len() == other.len()
                    && matches!((self.to_text(), other.to_text()), (Ok(a), Ok(b)) if a == b)
            }
        }
    }
}

impl PartialEq<str> for ThreadText {
    fn eq(&self, other: &str) -> bool {
        self.len() == other.len() && matches!(self.to_text(), Ok(t) if t == other)
    }
}

impl PartialEq<&str> for ThreadText {
    fn eq(&self, other: &&str) -> bool {
        *self == **other
    }
}

impl Serialize for ThreadText {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match &self.0 {
            Repr::Inline(s) => serializer.serialize_str(s),
            Repr::Unreadable { error, .. } => Err(serde::ser::Error::custom(format!(
                "a long reply or reasoning text could not be read back from its spill file: {error}"
            ))),
            // serde_json streams `Display` into its writer, escaping as it goes. A read error
            // fails the serialization (a `fmt::Error` would make serde_json panic), so a
            // snapshot is never written with a cut text.
            Repr::Spilled { .. } => {
                let failed = Cell::new(None);
                let ok = serializer.collect_str(&Streamed {
                    text: self,
                    failed: &failed,
                })?;
                match failed.take() {
                    None => Ok(ok),
                    Some(e) => Err(serde::ser::Error::custom(format!(
                        "a long reply or reasoning text could not be read back from its spill file: {e}"
                    ))),
                }
            }
        }
    }
}

impl<'de> Deserialize<'de> for ThreadText {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(ThreadText::from)
    }
}

/// The pieces of a [`ThreadText`] ([`ThreadText::chunks`]).
pub struct Chunks<'a> {
    text: &'a ThreadText,
    offset: usize,
    /// The start of a character cut by the end of the last piece read.
    carry: Vec<u8>,
    done: bool,
}

impl<'a> Iterator for Chunks<'a> {
    type Item = io::Result<Cow<'a, str>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        if let Repr::Inline(s) = &self.text.0 {
            self.done = true;
            return Some(Ok(Cow::Borrowed(s)));
        }
        let len = self.text.len();
        if self.offset >= len {
            self.done = true;
            if self.carry.is_empty() {
                return None;
            }
            return Some(Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "the spill file ends inside a character",
            )));
        }
        let end = len.min(self.offset + CHUNK);
        let read = match self.text.read_bytes(self.offset, end) {
            Ok(bytes) => bytes,
            Err(e) => {
                self.done = true;
                return Some(Err(e));
            }
        };
        self.offset = end;
        let mut buf = std::mem::take(&mut self.carry);
        buf.extend_from_slice(&read);
        let not_utf8 = || {
            io::Error::new(
                io::ErrorKind::InvalidData,
                "the spill file holds bytes that are not UTF-8",
            )
        };
        match String::from_utf8(buf) {
            Ok(s) => Some(Ok(Cow::Owned(s))),
            Err(e) if e.utf8_error().error_len().is_some() => {
                self.done = true;
                Some(Err(not_utf8()))
            }
            Err(e) => {
                // A character cut by the piece's end: its start goes with the next piece.
                let valid = e.utf8_error().valid_up_to();
                let mut bytes = e.into_bytes();
                self.carry = bytes.split_off(valid);
                Some(
                    String::from_utf8(bytes)
                        .map(Cow::Owned)
                        .map_err(|_| not_utf8()),
                )
            }
        }
    }
}

#[cfg(test)]
#[path = "thread_text_tests.rs"]
mod tests;
