//! JSON values read from a reader 64 KiB at a time ([`Scanner`]): a small scanner finds where
//! each value begins and ends (strings, escapes and nesting; nothing else), and serde_json
//! parses each from a slice. Only the value being read is held. serde_json's own reader would
//! do the same, but a byte at a time through `io::Read`: several times slower on a long
//! session. What `load` reads a `session.json` with, and [`each_listed`] a settled run.
//!
//! The scanner does not validate: a value it cut is parsed by serde_json, which does. A syntax
//! error says where by byte offset in the document.

use std::io::{self, Read};

use serde::de::{DeserializeOwned, IgnoredAny};

/// How much is read at a time.
const CHUNK: usize = 64 * 1024;

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

/// Why a scan stopped: a failed read, or a value that is not valid (its path and why).
pub(crate) enum Fail {
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

/// A scan's result.
pub(crate) type Scanned<T> = Result<T, Fail>;

/// A field's path and what is wrong with it.
pub(crate) type Invalid = (String, String);

/// A value at `field` that is not valid.
pub(crate) fn invalid(field: &str, message: &str) -> Fail {
    Fail::Invalid(field.to_owned(), message.to_owned())
}

pub(crate) struct Scanner<R> {
    reader: R,
    /// Where each read lands.
    chunk: Box<[u8]>,
    /// The bytes read and not yet passed, from document offset `base`.
    buf: Vec<u8>,
    /// The next byte to look at, in `buf`.
    pub(crate) pos: usize,
    base: u64,
    eof: bool,
}

impl<R: Read> Scanner<R> {
    pub(crate) fn new(reader: R) -> Self {
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
    pub(crate) fn peek(&mut self) -> io::Result<Option<u8>> {
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
    pub(crate) fn syntax(&self, field: &str, what: &str) -> Fail {
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
    pub(crate) fn value_as<T: DeserializeOwned>(&mut self, path: &str) -> Scanned<Result<T, Fail>> {
        let (at, start, end) = self.cut(path)?;
        Ok(parse_slice(&self.buf[start..end], at, path))
    }

    /// Passes the next value, checked to be JSON, and gives its text (errors as
    /// [`Scanner::value_as`]).
    pub(crate) fn value_text(&mut self, path: &str) -> Scanned<Result<String, Fail>> {
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
    pub(crate) fn object(
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

/// The path of a field at `inner` (serde_path_to_error's, `.` for the value itself) in a value
/// at `outer` (`""` or `.` for the document).
pub(crate) fn join_path(outer: &str, inner: &str) -> String {
    match (outer, inner) {
        ("", ".") => ".".to_owned(),
        (o, ".") => o.to_owned(),
        ("" | ".", i) => i.to_owned(),
        (o, i) if i.starts_with('[') => format!("{o}{i}"),
        (o, i) => format!("{o}.{i}"),
    }
}

/// A serde_json error's message without its place (` at line L column C`), which is in a
/// slice or a text of this module's, not in the document.
pub(crate) fn without_place(message: &str) -> &str {
    message.rsplit_once(" at line ").map_or(message, |(m, _)| m)
}
