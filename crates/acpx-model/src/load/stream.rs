//! A `session.json` document read from a reader, 64 KiB at a time, with the JSON scanner of
//! `json_scan`: each value of the record, of its thread and of `thread.messages` is cut and
//! parsed from a slice, so only the value being read is held, and a settling load
//! ([`SettleOnLoad`]) holds about two turns of the conversation, whatever its length.
//! serde_json's own reader would do the same, but a byte at a time through `io::Read`: 150 ms
//! against 30 for an 11 MB document, on a prompt's path.

use std::io::{self, Read};

use serde::de::DeserializeOwned;

use super::{record_from_parts, thread_from_parts, SettleOnLoad, Settling};
use crate::json_scan::{invalid, without_place, Fail, Invalid, Scanned, Scanner};
use crate::{Message, SessionRecord, Thread};

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

/// The error of a value that did not parse, or of none at all.
trait IntoFail {
    fn into_fail(self) -> Fail;
}

impl IntoFail for Option<Fail> {
    fn into_fail(self) -> Fail {
        self.unwrap_or_else(|| invalid(".", "the document ended early"))
    }
}
