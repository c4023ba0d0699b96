//! A `session.json` document read from a reader, 64 KiB at a time: a small scanner finds
//! where each value of the record, of its thread and of `thread.messages` begins and ends
//! (strings, escapes and nesting; nothing else), and serde_json parses each from a slice. Only
//! the value being read is held, so a settling load ([`SettleOnLoad`]) holds about two turns
//! of the conversation, whatever its length. serde_json's own reader would do the same, but a
//! byte at a time through `io::Read`: 150 ms against 30 for an 11 MB document, on a prompt's
//! path.
//!
//! The scanner does not validate: a value it cut is parsed by serde_json, which does. A syntax
//! error says where by byte offset in the document.

use std::io::{self, Read};

use serde::de::{DeserializeOwned, IgnoredAny};

use super::{
    join_path, record_from_parts, thread_from_parts, without_place, Invalid, SettleOnLoad, Settling,
};
use crate::{Message, SessionRecord, Thread};

/// How much is read at a time.
const CHUNK: usize = 64 * 1024;

/// Reads a whole record; the outer error is a failed read.
pub(super) fn load(
    reader: impl Read,
    settle: Option<&SettleOnLoad>,
) -> io::Result<Result<SessionRecord, Invalid>> {
    let mut scan = Scanner::new(reader);
    // Whatever follows the document but white space is damage, as it is to a slice's parser.
    let whole = read_record(&mut scan, settle).and_then(|record| match scan.peek()? {
        None => Ok(record),
        Some(_) => Err(scan.syntax(".", "trailing characters after the document")),
    });
    match whole {
        Ok(record) => Ok(Ok(record)),
        Err(Fail::Io(e)) => Err(e),
        Err(Fail::Invalid(field, message)) => Ok(Err((field, message))),
    }
}

/// Reads JSON values separated by commas (an array's body without its brackets: a settled
/// message run) from `reader`, 64 KiB at a time, each parsed from a slice as `T` and handed
/// to `each` until it says to stop (`false`). Returns how many were handed. A value that
/// does not parse, or a separator that is not a comma, is an `InvalidData` error naming the
/// value's index; a failed read is its own error. serde_json's reader would take a byte at a
/// time: four times as long to read a long session's settled turns back.
pub(crate) fn each_listed<T: DeserializeOwned>(
    reader: impl Read,
    mut each: impl FnMut(T) -> bool,
) -> io::Result<usize> {
    let mut scan = Scanner::new(reader);
    let fail = |f: Fail| match f {
        Fail::Io(e) => e,
        Fail::Invalid(field, message) => {
            io::Error::new(io::ErrorKind::InvalidData, format!("{field}: {message}"))
        }
    };
    let mut n = 0;
    loop {
        match scan.peek()? {
            None => return Ok(n),
            Some(b',') if n > 0 => scan.pos += 1,
            Some(_) if n > 0 => return Err(fail(scan.syntax(&format!("[{n}]"), "expected `,`"))),
            Some(_) => {}
        }
        let value = scan.value_as::<T>(&format!("[{n}]")).map_err(fail)?;
        n += 1;
        if !each(value.map_err(fail)?) {
            return Ok(n);
        }
    }
}

enum Fail {
    Io(io::Error),
    Invalid(String, String),
}

impl From<io::Error> for Fail {
    fn from(e: io::Error) -> Self {
        Fail::Io(e)
    }
}

impl From<Invalid> for Fail {
    fn from((field, message): Invalid) -> Self {
        Fail::Invalid(field, message)
    }
}

type Scanned<T> = Result<T, Fail>;

/// An object's keys but the one read apart, as their JSON text: see `from_rest`.
struct Rest(String);

impl Rest {
    fn new() -> Self {
        Rest("{".to_owned())
    }

    /// Adds `key` (its JSON text) and its value's JSON text.
    fn push(&mut self, key: &str, value: &str) {
        if self.0.len() > 1 {
            self.0.push(',');
        }
        self.0.push_str(key);
        self.0.push(':');
        self.0.push_str(value);
    }

    fn finish(mut self) -> String {
        self.0.push('}');
        self.0
    }
}

fn read_record<R: Read>(
    scan: &mut Scanner<R>,
    settle: Option<&SettleOnLoad>,
) -> Scanned<SessionRecord> {
    if scan.peek()? != Some(b'{') {
        // Not an object: serde_json says what it is instead.
        return Err(scan.value_as::<SessionRecord>(".")?.err().into_fail());
    }
    let mut rest = Rest::new();
    let mut thread = None;
    scan.object(".", |scan, key, key_text| {
        if key == "thread" {
            if thread.is_some() {
                return Err(invalid(".", "duplicate field `thread`"));
            }
            let t = read_thread(scan, settle)?;
            // The derived `Deserialize` reads a small stand-in; the thread goes in after.
            let stand_in = serde_json::to_string(&Thread::new(t.updated_at))
                .map_err(|e| invalid(".", &e.to_string()))?;
            rest.push(key_text, &stand_in);
            thread = Some(t);
            return Ok(());
        }
        let text = scan.value_text(&key)??;
        if key == "schema" {
            // A document of another schema says so before its conversation is read.
            early_check::<crate::session::SessionSchema>(&text, "schema")?;
        }
        rest.push(key_text, &text);
        Ok(())
    })?;
    Ok(record_from_parts(&rest.finish(), thread)?)
}

fn read_thread<R: Read>(scan: &mut Scanner<R>, settle: Option<&SettleOnLoad>) -> Scanned<Thread> {
    if scan.peek()? != Some(b'{') {
        return Err(scan.value_as::<Thread>("thread")?.err().into_fail());
    }
    let mut rest = Rest::new();
    let mut messages = None;
    scan.object("thread", |scan, key, key_text| {
        if key == "messages" {
            if messages.is_some() {
                return Err(invalid("thread", "duplicate field `messages`"));
            }
            messages = Some(read_messages(scan, settle)?);
            rest.push(key_text, "[]");
            return Ok(());
        }
        let path = format!("thread.{key}");
        let text = scan.value_text(&path)??;
        if key == "version" {
            early_check::<crate::thread::ThreadVersion>(&text, &path)?;
        }
        rest.push(key_text, &text);
        Ok(())
    })?;
    Ok(thread_from_parts(&rest.finish(), messages, settle)?)
}

/// Refuses a key's value `T` refuses, at once (the derived `Deserialize` checks it again).
fn early_check<T: DeserializeOwned>(text: &str, path: &str) -> Scanned<()> {
    match serde_json::from_str::<T>(text) {
        Ok(_) => Ok(()),
        Err(e) => Err(invalid(path, without_place(&e.to_string()))),
    }
}

fn read_messages<R: Read>(
    scan: &mut Scanner<R>,
    settle: Option<&SettleOnLoad>,
) -> Scanned<(crate::SettledMessages, Vec<Message>)> {
    const PATH: &str = "thread.messages";
    if scan.peek()? != Some(b'[') {
        return Err(scan.value_as::<Vec<Message>>(PATH)?.err().into_fail());
    }
    scan.pos += 1;
    let mut settling = Settling::new(settle);
    if scan.peek()? == Some(b']') {
        scan.pos += 1;
        return Ok(settling.finish());
    }
    let mut index = 0;
    loop {
        let path = format!("{PATH}[{index}]");
        settling.push(scan.value_as::<Message>(&path)??);
        index += 1;
        match scan.peek()? {
            Some(b',') => scan.pos += 1,
            Some(b']') => {
                scan.pos += 1;
                return Ok(settling.finish());
            }
            None => return Err(scan.syntax(PATH, "EOF while parsing a list")),
            _ => return Err(scan.syntax(PATH, "expected `,` or `]`")),
        }
    }
}

fn invalid(field: &str, message: &str) -> Fail {
    Fail::Invalid(field.to_owned(), message.to_owned())
}

/// The error of a value that did not parse, or of none at all.
trait IntoFail {
    fn into_fail(self) -> Fail;
}

impl IntoFail for Option<Fail> {
    fn into_fail(self) -> Fail {
        self.unwrap_or_else(|| invalid(".", "the document ended early"))
    }
}

struct Scanner<R> {
    reader: R,
    /// Where each read lands.
    chunk: Box<[u8]>,
    /// The bytes read and not yet passed, from document offset `base`.
    buf: Vec<u8>,
    /// The next byte to look at, in `buf`.
    pos: usize,
    base: u64,
    eof: bool,
}

impl<R: Read> Scanner<R> {
    fn new(reader: R) -> Self {
        Scanner {
            reader,
            chunk: vec![0; CHUNK].into_boxed_slice(),
            buf: Vec::with_capacity(CHUNK),
            pos: 0,
            base: 0,
            eof: false,
        }
    }

    /// Reads more, keeping `buf[keep..]` (what is not passed yet); false at the end.
    fn more(&mut self, keep: usize) -> io::Result<bool> {
        if keep > 0 {
            // At most the value being read is kept: a long one grows the buffer instead of
            // being moved at each read.
            self.buf.drain(..keep);
            self.base += keep as u64;
            self.pos -= keep;
        }
        if self.eof {
            return Ok(false);
        }
        let n = loop {
            match self.reader.read(&mut self.chunk[..]) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        };
        self.buf.extend_from_slice(&self.chunk[..n]);
        self.eof = n == 0;
        Ok(n > 0)
    }

    /// The next byte that is not whitespace, left unread; `None` at the end.
    fn peek(&mut self) -> io::Result<Option<u8>> {
        loop {
            match self.buf[self.pos..]
                .iter()
                .position(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
            {
                Some(i) => {
                    self.pos += i;
                    return Ok(Some(self.buf[self.pos]));
                }
                None => {
                    self.pos = self.buf.len();
                    if !self.more(self.pos)? {
                        return Ok(None);
                    }
                }
            }
        }
    }

    /// A syntax error at the scanner.
    fn syntax(&self, field: &str, what: &str) -> Fail {
        invalid(
            field,
            &format!(
                "not valid JSON: {what} at byte {}",
                self.base + self.pos as u64
            ),
        )
    }

    /// Passes the value that starts at the next byte that is not whitespace: its offset in
    /// the document and its place in `buf`. The error is a failed read or a value that does
    /// not end.
    fn cut(&mut self, path: &str) -> Scanned<(u64, usize, usize)> {
        if self.peek()?.is_none() {
            return Err(self.syntax(path, "EOF while parsing a value"));
        }
        // `value_end` may read more, moving the value to the buffer's start.
        let (start, end) = self.value_end(self.pos, path)?;
        self.pos = end;
        Ok((self.base + start as u64, start, end))
    }

    /// Passes the next value and parses it as `T`. The outer error is a failed read or a
    /// value that does not end; the inner one, a value that did not parse (its path starts
    /// with `path`).
    fn value_as<T: DeserializeOwned>(&mut self, path: &str) -> Scanned<Result<T, Fail>> {
        let (at, start, end) = self.cut(path)?;
        Ok(parse_slice(&self.buf[start..end], at, path))
    }

    /// Passes the next value, checked to be JSON, and gives its text (errors as
    /// [`Scanner::value_as`]).
    fn value_text(&mut self, path: &str) -> Scanned<Result<String, Fail>> {
        let (at, start, end) = self.cut(path)?;
        let bytes = &self.buf[start..end];
        if let Err(fail) = parse_slice::<IgnoredAny>(bytes, at, path) {
            return Ok(Err(fail));
        }
        Ok(std::str::from_utf8(bytes).map(str::to_owned).map_err(|e| {
            let offset = at + e.valid_up_to() as u64;
            invalid(
                path,
                &format!("not valid JSON: invalid unicode code point at byte {offset}"),
            )
        }))
    }

    /// Finds the end of the value starting at `buf[start]`, reading more as needed: returns
    /// its start and end, in `buf` as it is after the reads.
    fn value_end(&mut self, mut start: usize, path: &str) -> Scanned<(usize, usize)> {
        let mut at = start;
        let mut depth = 0usize;
        loop {
            if at == self.buf.len() {
                let keep = start;
                if !self.more(keep)? {
                    // A scalar may end the document; anything open may not.
                    if depth == 0 && !matches!(self.buf.get(start - keep), Some(b'"')) {
                        return Ok((start - keep, self.buf.len()));
                    }
                    self.pos = self.buf.len();
                    return Err(self.syntax(path, "EOF while parsing a value"));
                }
                at -= keep;
                start -= keep;
                continue;
            }
            match self.buf[at] {
                b'"' => {
                    (start, at) = self.string_end(at, start, path)?;
                    if depth == 0 {
                        return Ok((start, at));
                    }
                }
                b'{' | b'[' => {
                    depth += 1;
                    at += 1;
                }
                b'}' | b']' => {
                    if depth == 0 {
                        // The end of the enclosing object or array: a scalar ended before it.
                        return Ok((start, at));
                    }
                    depth -= 1;
                    at += 1;
                    if depth == 0 {
                        return Ok((start, at));
                    }
                }
                b',' | b' ' | b'\t' | b'\n' | b'\r' if depth == 0 => return Ok((start, at)),
                _ => at += 1,
            }
        }
    }

    /// Finds the end (just past the closing quote) of the string starting at `buf[at]`, in a
    /// value starting at `buf[start]`: returns the value's start and the string's end, after
    /// any reads.
    fn string_end(
        &mut self,
        mut at: usize,
        mut start: usize,
        path: &str,
    ) -> Scanned<(usize, usize)> {
        at += 1;
        loop {
            match memchr::memchr2(b'"', b'\\', &self.buf[at..]) {
                Some(i) if self.buf[at + i] == b'"' => return Ok((start, at + i + 1)),
                Some(i) if at + i + 1 < self.buf.len() => at += i + 2,
                found => {
                    // The end is not read yet, or an escape is cut in two: read more.
                    at = match found {
                        Some(i) => at + i,
                        None => self.buf.len(),
                    };
                    let keep = start;
                    if !self.more(keep)? {
                        self.pos = self.buf.len();
                        return Err(self.syntax(path, "EOF while parsing a string"));
                    }
                    at -= keep;
                    start -= keep;
                }
            }
        }
    }

    /// Reads an object's keys (the scanner at its `{`), calling `each` with each key and its
    /// JSON text, the scanner at its value, which `each` must pass.
    fn object(
        &mut self,
        path: &str,
        mut each: impl FnMut(&mut Self, String, &str) -> Scanned<()>,
    ) -> Scanned<()> {
        self.pos += 1;
        if self.peek()? == Some(b'}') {
            self.pos += 1;
            return Ok(());
        }
        loop {
            match self.peek()? {
                Some(b'"') => {}
                None => return Err(self.syntax(path, "EOF while parsing an object")),
                Some(_) => return Err(self.syntax(path, "expected a key")),
            }
            let key_text = self.value_text(path)??;
            let key: String = parse_slice(key_text.as_bytes(), self.base, path)?;
            if self.peek()? != Some(b':') {
                return Err(self.syntax(path, "expected `:`"));
            }
            self.pos += 1;
            each(self, key, &key_text)?;
            match self.peek()? {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(());
                }
                None => return Err(self.syntax(path, "EOF while parsing an object")),
                _ => return Err(self.syntax(path, "expected `,` or `}`")),
            }
        }
    }
}

/// Parses `bytes`, a value at offset `at` of the document, as `T`: all of it, or an error
/// naming the field (its path starts with `path`) and the byte.
fn parse_slice<T: DeserializeOwned>(bytes: &[u8], at: u64, path: &str) -> Result<T, Fail> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let describe = |e: serde_json::Error, field: String| {
        // serde_json's place is in the value's slice; the document's is more use.
        let what = e.to_string();
        let what = match e.line() {
            0 => what,
            line => {
                let offset = at + offset_of(bytes, line, e.column());
                format!("{} at byte {offset}", without_place(&what))
            }
        };
        let message = if e.is_syntax() || e.is_eof() {
            format!("not valid JSON: {what}")
        } else {
            what
        };
        Fail::Invalid(field, message)
    };
    // Parsed without tracking the path first (tracking every field cost a tenth of a long
    // conversation's load); a value that fails is parsed again to find where.
    let value = T::deserialize(&mut de).map_err(|first| {
        let mut again = serde_json::Deserializer::from_slice(bytes);
        match serde_path_to_error::deserialize::<_, T>(&mut again) {
            Err(e) => {
                let field = join_path(path, &e.path().to_string());
                describe(e.into_inner(), field)
            }
            Ok(_) => describe(first, path.to_owned()),
        }
    })?;
    // Whatever follows the value in its slice (`12x`, `null{}`: the scanner cuts a scalar at
    // the next delimiter) is an error, as it is to a parser of the whole document.
    de.end().map_err(|e| describe(e, path.to_owned()))?;
    Ok(value)
}

/// The offset in `bytes` of serde_json's (line, column), both counted from 1.
fn offset_of(bytes: &[u8], line: usize, column: usize) -> u64 {
    let line_start = if line <= 1 {
        0
    } else {
        memchr::memchr_iter(b'\n', bytes)
            .nth(line - 2)
            .map_or(bytes.len(), |i| i + 1)
    };
    (line_start + column.saturating_sub(1)) as u64
}
