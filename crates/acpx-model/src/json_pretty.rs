//! Pretty-printed JSON for session documents: byte for byte what
//! `serde_json::to_writer_pretty` writes, with string escaping that tests 32 bytes at a
//! step.
//!
//! Why: serde_json escapes a string one byte at a time (a table lookup and a branch for each
//! byte). A session document holds the whole conversation, 10 MB after a 1M-chunk turn, and
//! every save serializes all of it: escaping was most of what a prompt on such a session cost
//! more than one on a new session (callgrind: 99 M of 124 M instructions; docs/BENCHMARKS.md §
//! Schema version 8). The bytes are the same, so a document saved before this writer existed
//! compares equal, window for window, with the same document saved now (the SQLite store
//! rewrites only the windows that differ), and a test holds the two writers to it.
//!
//! Everything but strings and the layout (numbers, booleans, null) is written by serde_json
//! itself, so number formatting can never drift from it.
//!
//! A tool value moved to a spill file ([`crate::ThreadJson`]) is kept there as this writer
//! writes it at depth 0, and copied back with each line indented to where it goes
//! ([`serialize_written_text`]): a coding agent's session holds thousands of them, and parsing
//! and escaping each one again at every save made a turn's cost grow with the session (issue
//! 15: 3–4 → 15–16 ms of the queue owner's CPU a turn over 300 turns of tool calls, fs;
//! docs/BENCHMARKS.md § Tool values copied back as written).

use std::cell::{Cell, RefCell};
use std::fmt::{self, Display};
use std::io::{self, Write};

use serde::ser::{self, Impossible, Serialize};

use crate::ThreadText;

/// Writes `value` as `serde_json::to_writer_pretty` does.
pub fn to_writer_pretty<W: Write, T: Serialize + ?Sized>(writer: W, value: &T) -> io::Result<()> {
    /// Puts back whether an outer call was running (a `Serialize` may write a document of
    /// its own).
    struct Running(bool);
    impl Drop for Running {
        fn drop(&mut self) {
            RUNNING.set(self.0);
        }
    }
    let _running = Running(RUNNING.replace(true));
    let mut ser = PrettySerializer {
        out: writer,
        indent: 0,
        has_value: false,
    };
    value.serialize(&mut ser).map_err(|e| e.0)
}

thread_local! {
    /// Whether [`to_writer_pretty`] is writing on this thread: only then may a value hand its
    /// text over instead of serializing itself.
    static RUNNING: Cell<bool> = const { Cell::new(false) };
    /// The text handed over ([`serialize_written_text`]), taken by the writer when it meets
    /// [`WRITTEN_TEXT_TOKEN`], or dropped by the value's own serialization.
    static HANDED_OVER: RefCell<Option<Vec<ThreadText>>> = const { RefCell::new(None) };
}

/// The newtype struct name under which a handed-over text reaches the writer.
const WRITTEN_TEXT_TOKEN: &str = "$acpx::json_pretty::WrittenText";

/// Whether [`to_writer_pretty`] is writing on this thread.
pub(crate) fn is_running() -> bool {
    RUNNING.get()
}

/// Serializes a value whose JSON `text` is what [`to_writer_pretty`] writes for it at depth 0,
/// and whose `value` gives it parsed back. When this writer is running, the text is handed
/// over and wrapped in a newtype struct named [`WRITTEN_TEXT_TOKEN`]: this writer takes the
/// text and copies it, indenting each of its lines to the value's depth (a JSON text written
/// so holds no line break inside a string: a newline there is written `\n`); any other
/// serializer met on the way (one that buffers or wraps a value: a tagged or flattened
/// enum's) passes through to the wrapped `value`, which drops the handed-over text and
/// serializes the parsed value. Gives `serializer` back when this writer is not running.
pub(crate) fn serialize_written_text<S: ser::Serializer, V: Serialize>(
    text: &ThreadText,
    value: &V,
    serializer: S,
) -> std::result::Result<std::result::Result<S::Ok, S::Error>, S> {
    serialize_written_pieces(vec![text.clone()], value, serializer)
}

/// [`serialize_written_text`] of a text in pieces, copied one after the other.
pub(crate) fn serialize_written_pieces<S: ser::Serializer, V: Serialize>(
    pieces: Vec<ThreadText>,
    value: &V,
    serializer: S,
) -> std::result::Result<std::result::Result<S::Ok, S::Error>, S> {
    if !RUNNING.get() {
        return Err(serializer);
    }
    /// The value itself, for a serializer other than this writer: the text handed over is
    /// dropped, not left for a later value.
    struct ValueItself<'a, V>(&'a V);
    impl<V: Serialize> Serialize for ValueItself<'_, V> {
        fn serialize<S: ser::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
            HANDED_OVER.with(|h| h.borrow_mut().take());
            self.0.serialize(s)
        }
    }
    HANDED_OVER.with(|h| *h.borrow_mut() = Some(pieces));
    Ok(serializer.serialize_newtype_struct(WRITTEN_TEXT_TOKEN, &ValueItself(value)))
}

/// An I/O error of the writer, or a value that JSON cannot hold (a map key that is not a
/// string, a number or a boolean), or the error of a value's own `Serialize`.
#[derive(Debug)]
pub struct Error(io::Error);

impl Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for Error {}

impl ser::Error for Error {
    fn custom<T: Display>(msg: T) -> Self {
        Error(io::Error::other(msg.to_string()))
    }
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Self {
        Error(e)
    }
}

type Result<T = ()> = std::result::Result<T, Error>;

/// serde_json's `PrettyFormatter` state: the nesting depth, and whether the innermost open
/// array or object has had a value (which decides whether its closing bracket goes on a
/// line of its own).
struct PrettySerializer<W> {
    out: W,
    indent: usize,
    has_value: bool,
}

impl<W: Write> PrettySerializer<W> {
    fn write_indent(&mut self) -> io::Result<()> {
        for _ in 0..self.indent {
            self.out.write_all(b"  ")?;
        }
        Ok(())
    }

    fn open(&mut self, bracket: &[u8]) -> io::Result<()> {
        self.indent += 1;
        self.has_value = false;
        self.out.write_all(bracket)
    }

    fn close(&mut self, bracket: &[u8]) -> io::Result<()> {
        self.indent -= 1;
        if self.has_value {
            self.out.write_all(b"\n")?;
            self.write_indent()?;
        }
        self.out.write_all(bracket)
    }

    /// Before an array element or an object key.
    fn item(&mut self, first: bool) -> io::Result<()> {
        self.out.write_all(if first { b"\n" } else { b",\n" })?;
        self.write_indent()
    }

    fn string(&mut self, s: &str) -> io::Result<()> {
        self.out.write_all(b"\"")?;
        write_escaped(&mut self.out, s)?;
        self.out.write_all(b"\"")
    }

    /// A scalar, written by serde_json (a number, a boolean, null).
    fn scalar<T: Serialize>(&mut self, value: T) -> Result {
        serde_json::to_writer(&mut self.out, &value).map_err(|e| Error(io::Error::from(e)))
    }

    /// `{"variant": ` of an enum variant with data, before the data.
    fn open_variant(&mut self, variant: &str) -> io::Result<()> {
        self.open(b"{")?;
        self.item(true)?;
        self.string(variant)?;
        self.out.write_all(b": ")
    }

    /// The `}` after an enum variant's data.
    fn close_variant(&mut self) -> io::Result<()> {
        self.has_value = true;
        self.close(b"}")
    }

    /// A value's text as this writer writes it at depth 0 ([`serialize_written_text`]), each
    /// line after the first indented to the current depth.
    fn written_text(&mut self, pieces: &[ThreadText]) -> Result {
        let mut line_break = b"\n".to_vec();
        line_break.extend(std::iter::repeat_n(b' ', 2 * self.indent));
        for piece in pieces.iter().flat_map(ThreadText::chunks) {
            let piece = piece.map_err(|e| {
                Error(io::Error::new(
                    e.kind(),
                    format!("a spilled part of the thread (a tool call's JSON, settled messages or token usage) could not be read back from its spill file: {e}"),
                ))
            })?;
            let bytes = piece.as_bytes();
            let mut start = 0;
            for at in memchr::memchr_iter(b'\n', bytes) {
                self.out.write_all(&bytes[start..at])?;
                self.out.write_all(&line_break)?;
                start = at + 1;
            }
            self.out.write_all(&bytes[start..])?;
        }
        Ok(())
    }

    fn seq(&mut self, len: Option<usize>) -> Result<Compound<'_, W>> {
        self.open(b"[")?;
        Ok(Compound::new(self, len, b"]")?)
    }

    fn map(&mut self, len: Option<usize>) -> Result<Compound<'_, W>> {
        self.open(b"{")?;
        Ok(Compound::new(self, len, b"}")?)
    }
}

/// The escape of each byte that JSON strings cannot hold as they are: 0 for none, `u` for
/// `\u00XX`, or the letter after the backslash.
const ESCAPE: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = b'u';
        b += 1;
    }
    table[0x08] = b'b';
    table[0x09] = b't';
    table[0x0a] = b'n';
    table[0x0c] = b'f';
    table[0x0d] = b'r';
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table
};

/// The bytes [`write_escaped`] tests at one step.
const BLOCK: usize = 32;

/// A bit for each byte of `block` that needs an escape (bit k for byte k): a control
/// character (below 0x20), `"` or `\`.
///
/// Written so the compiler makes vector code of it (SSE2 on x86-64, NEON on aarch64, no
/// `unsafe`): the first loop, a plain "is there any", compiles to a few vector compares for
/// the whole block, and is all that runs for the blocks of plain text; the mask is built only
/// for a block that holds something to escape.
#[inline]
fn escape_mask(block: &[u8; BLOCK]) -> u32 {
    let mut any = 0u8;
    for &b in block {
        any |= u8::from(b < 0x20) | u8::from(b == b'"') | u8::from(b == b'\\');
    }
    if any == 0 {
        return 0;
    }
    let mut mask = 0u32;
    for (k, &b) in block.iter().enumerate() {
        mask |= u32::from((b < 0x20) | (b == b'"') | (b == b'\\')) << k;
    }
    mask
}

/// Writes the escape of one byte that needs one.
fn write_escape<W: Write + ?Sized>(out: &mut W, byte: u8) -> io::Result<()> {
    match ESCAPE[usize::from(byte)] {
        b'u' => {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.write_all(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(byte >> 4)],
                HEX[usize::from(byte & 0xf)],
            ])
        }
        escape => out.write_all(&[b'\\', escape]),
    }
}

/// Writes the contents of a JSON string: runs of bytes that need no escape in one write each,
/// found [`BLOCK`] bytes at a step, and the escapes of a block found by its mask's bits, not
/// by a test of each byte (agent text has a newline or a quote every few dozen bytes). The
/// last, partial block is tested as a whole one too, padded with spaces, so a short string (a
/// key, an id, a timestamp) is one test. The callgrind counts are in docs/BENCHMARKS.md §
/// Huge pages for large buffers.
fn write_escaped<W: Write + ?Sized>(out: &mut W, s: &str) -> io::Result<()> {
    let bytes = s.as_bytes();
    let mut run_start = 0;
    let mut start = 0;
    while start < bytes.len() {
        let rest = &bytes[start..];
        let mut mask = match rest.first_chunk::<BLOCK>() {
            Some(block) => escape_mask(block),
            None => {
                let mut padded = [b' '; BLOCK];
                padded[..rest.len()].copy_from_slice(rest);
                escape_mask(&padded)
            }
        };
        while mask != 0 {
            let at = start + mask.trailing_zeros() as usize;
            out.write_all(&bytes[run_start..at])?;
            write_escape(out, bytes[at])?;
            run_start = at + 1;
            mask &= mask - 1;
        }
        start += BLOCK;
    }
    out.write_all(&bytes[run_start..])
}

impl<'a, W: Write> ser::Serializer for &'a mut PrettySerializer<W> {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = Compound<'a, W>;
    type SerializeTuple = Compound<'a, W>;
    type SerializeTupleStruct = Compound<'a, W>;
    type SerializeTupleVariant = Compound<'a, W>;
    type SerializeMap = Compound<'a, W>;
    type SerializeStruct = Compound<'a, W>;
    type SerializeStructVariant = Compound<'a, W>;

    fn serialize_bool(self, v: bool) -> Result {
        self.scalar(v)
    }
    fn serialize_i8(self, v: i8) -> Result {
        self.scalar(v)
    }
    fn serialize_i16(self, v: i16) -> Result {
        self.scalar(v)
    }
    fn serialize_i32(self, v: i32) -> Result {
        self.scalar(v)
    }
    fn serialize_i64(self, v: i64) -> Result {
        self.scalar(v)
    }
    fn serialize_i128(self, v: i128) -> Result {
        self.scalar(v)
    }
    fn serialize_u8(self, v: u8) -> Result {
        self.scalar(v)
    }
    fn serialize_u16(self, v: u16) -> Result {
        self.scalar(v)
    }
    fn serialize_u32(self, v: u32) -> Result {
        self.scalar(v)
    }
    fn serialize_u64(self, v: u64) -> Result {
        self.scalar(v)
    }
    fn serialize_u128(self, v: u128) -> Result {
        self.scalar(v)
    }
    fn serialize_f32(self, v: f32) -> Result {
        self.scalar(v)
    }
    fn serialize_f64(self, v: f64) -> Result {
        self.scalar(v)
    }
    fn serialize_char(self, v: char) -> Result {
        Ok(self.string(v.encode_utf8(&mut [0; 4]))?)
    }
    fn serialize_str(self, v: &str) -> Result {
        Ok(self.string(v)?)
    }
    fn serialize_bytes(self, v: &[u8]) -> Result {
        use ser::SerializeSeq;
        let mut seq = self.seq(Some(v.len()))?;
        for b in v {
            seq.serialize_element(b)?;
        }
        seq.end()
    }
    fn serialize_none(self) -> Result {
        self.scalar(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result {
        self.scalar(())
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Result {
        self.scalar(())
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result {
        Ok(self.string(variant)?)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        value: &T,
    ) -> Result {
        if name == WRITTEN_TEXT_TOKEN {
            if let Some(pieces) = HANDED_OVER.with(|h| h.borrow_mut().take()) {
                return self.written_text(&pieces);
            }
        }
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result {
        self.open_variant(variant)?;
        value.serialize(&mut *self)?;
        Ok(self.close_variant()?)
    }
    fn serialize_seq(self, len: Option<usize>) -> Result<Compound<'a, W>> {
        self.seq(len)
    }
    fn serialize_tuple(self, len: usize) -> Result<Compound<'a, W>> {
        self.seq(Some(len))
    }
    fn serialize_tuple_struct(self, _name: &'static str, len: usize) -> Result<Compound<'a, W>> {
        self.seq(Some(len))
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Compound<'a, W>> {
        self.open_variant(variant)?;
        let mut seq = self.seq(Some(len))?;
        seq.in_variant = true;
        Ok(seq)
    }
    fn serialize_map(self, len: Option<usize>) -> Result<Compound<'a, W>> {
        self.map(len)
    }
    fn serialize_struct(self, name: &'static str, len: usize) -> Result<Compound<'a, W>> {
        if name == RAW_VALUE_TOKEN {
            // A `serde_json::value::RawValue`: its one field is JSON text, written as it is.
            return Ok(Compound {
                ser: self,
                first: None,
                close: b"",
                in_variant: false,
                raw: true,
            });
        }
        self.map(Some(len))
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Compound<'a, W>> {
        self.open_variant(variant)?;
        let mut map = self.map(Some(len))?;
        map.in_variant = true;
        Ok(map)
    }

    /// A long text streamed through `Display` ([`crate::ThreadText`]) is escaped piece by
    /// piece as it comes, never collected.
    fn collect_str<T: Display + ?Sized>(self, value: &T) -> Result {
        struct Escaping<'w, W: Write> {
            out: &'w mut W,
            error: Option<io::Error>,
        }
        impl<W: Write> fmt::Write for Escaping<'_, W> {
            fn write_str(&mut self, s: &str) -> fmt::Result {
                write_escaped(self.out, s).map_err(|e| {
                    self.error = Some(e);
                    fmt::Error
                })
            }
        }
        self.out.write_all(b"\"")?;
        let mut escaping = Escaping {
            out: &mut self.out,
            error: None,
        };
        if fmt::write(&mut escaping, format_args!("{value}")).is_err() {
            return Err(Error(escaping.error.unwrap_or_else(|| {
                io::Error::other("a value's Display implementation failed")
            })));
        }
        Ok(self.out.write_all(b"\"")?)
    }
}

/// An array or an object being written (a struct is an object; an enum variant with data is
/// an object of one key around one of these).
pub struct Compound<'a, W> {
    ser: &'a mut PrettySerializer<W>,
    /// `None` once empty and closed at the start (a known length of 0, as serde_json does),
    /// else whether the next item is the first.
    first: Option<bool>,
    close: &'static [u8],
    in_variant: bool,
    /// A `RawValue` (see [`RAW_VALUE_TOKEN`]): no brackets, the field's text as it is.
    raw: bool,
}

/// The struct name under which `serde_json::value::RawValue` serializes its JSON text (serde_json's
/// own serializer writes that text unchanged; so does this one).
const RAW_VALUE_TOKEN: &str = "$serde_json::private::RawValue";

impl<'a, W: Write> Compound<'a, W> {
    fn new(
        ser: &'a mut PrettySerializer<W>,
        len: Option<usize>,
        close: &'static [u8],
    ) -> io::Result<Self> {
        let first = if len == Some(0) {
            ser.close(close)?;
            None
        } else {
            Some(true)
        };
        Ok(Compound {
            ser,
            first,
            close,
            in_variant: false,
            raw: false,
        })
    }

    fn next_item(&mut self) -> io::Result<()> {
        let first = self.first.unwrap_or(false);
        self.first = Some(false);
        self.ser.item(first)
    }

    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result {
        self.next_item()?;
        value.serialize(&mut *self.ser)?;
        self.ser.has_value = true;
        Ok(())
    }

    fn entry_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result {
        self.next_item()?;
        key.serialize(MapKey {
            ser: &mut *self.ser,
        })
    }

    fn entry_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result {
        self.ser.out.write_all(b": ")?;
        value.serialize(&mut *self.ser)?;
        self.ser.has_value = true;
        Ok(())
    }

    fn finish(self) -> Result {
        if self.first.is_some() {
            self.ser.close(self.close)?;
        }
        if self.in_variant {
            self.ser.close_variant()?;
        }
        Ok(())
    }
}

/// The four array-shaped compounds of serde, alike but for the name of their element method.
macro_rules! array_compound {
    ($($trait:ident :: $method:ident),*) => {$(
        impl<W: Write> ser::$trait for Compound<'_, W> {
            type Ok = ();
            type Error = Error;
            fn $method<T: Serialize + ?Sized>(&mut self, value: &T) -> Result {
                self.element(value)
            }
            fn end(self) -> Result {
                self.finish()
            }
        }
    )*};
}

array_compound!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field
);

impl<W: Write> ser::SerializeMap for Compound<'_, W> {
    type Ok = ();
    type Error = Error;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result {
        self.entry_key(key)
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result {
        self.entry_value(value)
    }
    fn end(self) -> Result {
        self.finish()
    }
}

impl<W: Write> ser::SerializeStruct for Compound<'_, W> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, key: &'static str, value: &T) -> Result {
        if self.raw {
            // The field is a string holding the JSON text: take it back out of its quotes.
            let quoted = serde_json::to_string(value).map_err(|e| Error(io::Error::from(e)))?;
            let text: String =
                serde_json::from_str(&quoted).map_err(|e| Error(io::Error::from(e)))?;
            self.ser.out.write_all(text.as_bytes())?;
            return Ok(());
        }
        self.entry_key(key)?;
        self.entry_value(value)
    }
    fn end(self) -> Result {
        self.finish()
    }
}

impl<W: Write> ser::SerializeStructVariant for Compound<'_, W> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, key: &'static str, value: &T) -> Result {
        ser::SerializeStruct::serialize_field(self, key, value)
    }
    fn end(self) -> Result {
        self.finish()
    }
}

/// A map key: a string, or a number or boolean written as a string (as serde_json does).
struct MapKey<'a, W> {
    ser: &'a mut PrettySerializer<W>,
}

impl<W: Write> MapKey<'_, W> {
    /// A scalar key, quoted: serde_json's own key serializer writes it, inside a map of one
    /// entry, so a key it refuses (a float that is not finite) fails here as it does there.
    fn quoted<T: Serialize>(self, value: T) -> Result {
        struct OneEntry<T>(T);
        impl<T: Serialize> Serialize for OneEntry<T> {
            fn serialize<S: ser::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
                use ser::SerializeMap;
                let mut map = s.serialize_map(Some(1))?;
                map.serialize_entry(&self.0, &())?;
                map.end()
            }
        }
        let text =
            serde_json::to_string(&OneEntry(value)).map_err(|e| Error(io::Error::from(e)))?;
        // `{"<key>":null}`: the key is all between the braces but the `:null`.
        let key = text
            .strip_prefix('{')
            .and_then(|t| t.strip_suffix(":null}"))
            .ok_or_else(|| Error(io::Error::other("unexpected map key serialization")))?;
        Ok(self.ser.out.write_all(key.as_bytes())?)
    }
}

fn key_must_be_a_string() -> Error {
    Error(io::Error::other("key must be a string"))
}

impl<W: Write> ser::Serializer for MapKey<'_, W> {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = Impossible<(), Error>;
    type SerializeTuple = Impossible<(), Error>;
    type SerializeTupleStruct = Impossible<(), Error>;
    type SerializeTupleVariant = Impossible<(), Error>;
    type SerializeMap = Impossible<(), Error>;
    type SerializeStruct = Impossible<(), Error>;
    type SerializeStructVariant = Impossible<(), Error>;

    fn serialize_str(self, v: &str) -> Result {
        Ok(self.ser.string(v)?)
    }
    fn serialize_char(self, v: char) -> Result {
        Ok(self.ser.string(v.encode_utf8(&mut [0; 4]))?)
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result {
        Ok(self.ser.string(variant)?)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result {
        value.serialize(self)
    }
    fn serialize_bool(self, v: bool) -> Result {
        self.quoted(v)
    }
    fn serialize_i8(self, v: i8) -> Result {
        self.quoted(v)
    }
    fn serialize_i16(self, v: i16) -> Result {
        self.quoted(v)
    }
    fn serialize_i32(self, v: i32) -> Result {
        self.quoted(v)
    }
    fn serialize_i64(self, v: i64) -> Result {
        self.quoted(v)
    }
    fn serialize_i128(self, v: i128) -> Result {
        self.quoted(v)
    }
    fn serialize_u8(self, v: u8) -> Result {
        self.quoted(v)
    }
    fn serialize_u16(self, v: u16) -> Result {
        self.quoted(v)
    }
    fn serialize_u32(self, v: u32) -> Result {
        self.quoted(v)
    }
    fn serialize_u64(self, v: u64) -> Result {
        self.quoted(v)
    }
    fn serialize_u128(self, v: u128) -> Result {
        self.quoted(v)
    }
    fn serialize_f32(self, v: f32) -> Result {
        self.quoted(v)
    }
    fn serialize_f64(self, v: f64) -> Result {
        self.quoted(v)
    }
    fn serialize_bytes(self, _v: &[u8]) -> Result {
        Err(key_must_be_a_string())
    }
    fn serialize_none(self) -> Result {
        Err(key_must_be_a_string())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result {
        Err(key_must_be_a_string())
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Result {
        Err(key_must_be_a_string())
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _value: &T,
    ) -> Result {
        Err(key_must_be_a_string())
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<Self::SerializeSeq> {
        Err(key_must_be_a_string())
    }
    fn serialize_tuple(self, _len: usize) -> Result<Self::SerializeTuple> {
        Err(key_must_be_a_string())
    }
    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeTupleStruct> {
        Err(key_must_be_a_string())
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeTupleVariant> {
        Err(key_must_be_a_string())
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<Self::SerializeMap> {
        Err(key_must_be_a_string())
    }
    fn serialize_struct(self, _name: &'static str, _len: usize) -> Result<Self::SerializeStruct> {
        Err(key_must_be_a_string())
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeStructVariant> {
        Err(key_must_be_a_string())
    }
}

#[cfg(test)]
mod tests;
