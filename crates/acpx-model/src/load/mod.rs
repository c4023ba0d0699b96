//! Reading a `session.json` document: [`SessionRecord::from_json_slice`], through serde's
//! derived `Deserialize`, and [`SessionRecord::from_json_reader`], which reads a document 64
//! KiB at a time and settles the conversation as it goes when asked ([`SettleOnLoad`];
//! docs/format.md decision 17, "Opening a long session").
//!
//! The reader (`stream.rs`) cuts the document into its values with a small scanner (strings,
//! escapes, nesting) and parses each from a slice: the record's and the thread's keys one at a
//! time, `thread.messages` element by element, every other key kept as its JSON text (small:
//! settings, ids, usage) and handed to the derived `Deserialize` afterwards, which applies
//! the defaults, aliases and checks (duplicate fields too) it always does. Errors name the
//! field, as a slice's do; a syntax error in a key's value names that key and the byte.
//! serde_json's own reader would parse a document a byte at a time: five times slower than
//! its slice parser on an 11 MB document.

mod stream;

use std::collections::VecDeque;
use std::fmt;
use std::io;
use std::sync::{Arc, Mutex};

use indexmap::IndexMap;
use serde::de::DeserializeOwned;

use crate::json_scan::{join_path, without_place, Invalid};
use crate::settled::{SettledMessages, SettledStores};
use crate::{Message, SessionRecord, Thread, ValidationError};

/// How many of the last turns a settling load keeps in memory: the last one, which a late
/// update of its tool calls or the next turn's end still reads, and the one before, in which
/// a `tool_call_update` may still find its call (docs/format.md § Tool calls, "Which call an
/// update names") when the log holds events the snapshot had not folded in yet. The first
/// turn to end settles the one before, as it always did.
pub const KEEP_TURNS_ON_LOAD: usize = 2;

/// Settles a conversation into spill stores while it is read ([`SessionRecord::
/// from_json_reader`]), for a process that lives on between turns (the queue owner) or any
/// that should not hold a long session whole (the `acpx` commands that read sessions: a
/// store made to settle every load): the turns before the last [`KEEP_TURNS_ON_LOAD`] go to
/// the settled runs as soon as the next turn begins in the document, so the load holds about
/// two turns and one message, not the conversation. The record comes out as
/// [`Thread::settle`] would have left it.
///
/// Settling is best effort: when the stores cannot be made or written, the rest of the
/// conversation stays in memory (as after a failed [`Thread::settle`]), the load goes on,
/// and [`SettleOnLoad::failure`] says why.
pub struct SettleOnLoad {
    stores: StoresFactory,
    failure: Mutex<Option<String>>,
}

/// Makes the spill stores of one settling load.
type StoresFactory = Arc<dyn Fn() -> io::Result<SettledStores> + Send + Sync>;

impl SettleOnLoad {
    /// A settling load whose runs go to the stores `stores` makes (called once, at the first
    /// settling; each store empty and used by these runs alone).
    pub fn new(stores: impl Fn() -> io::Result<SettledStores> + Send + Sync + 'static) -> Self {
        SettleOnLoad {
            stores: Arc::new(stores),
            failure: Mutex::new(None),
        }
    }

    /// A settling load of its own, with the same stores factory and no failure yet: a store
    /// that settles every load ([`crate::Store::load`] of a store made to) makes one per load,
    /// so that concurrent loads each report their own failure.
    pub fn another_load(&self) -> SettleOnLoad {
        SettleOnLoad {
            stores: self.stores.clone(),
            failure: Mutex::new(None),
        }
    }

    /// Why settling stopped during the last load, if it did (the rest stayed in memory);
    /// each load starts without.
    pub fn failure(&self) -> Option<String> {
        self.failure
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The sentence a store logs when settling stopped during the last load
    /// ([`SettleOnLoad::failure`]): the model has no logger, each store logs it with its own.
    pub fn failure_warning(&self) -> Option<String> {
        self.failure().map(|why| {
            format!(
                "the conversation is read whole: its finished turns could not be written to \
                 spill files ({why})"
            )
        })
    }

    fn failed(&self, e: &io::Error) {
        self.set_failure(Some(e.to_string()));
    }

    fn set_failure(&self, failure: Option<String>) {
        *self
            .failure
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = failure;
    }

    /// Settles the whole of `thread` as this load would have: everything before its last
    /// [`KEEP_TURNS_ON_LOAD`] turns (for a backend that reads the document whole first).
    pub fn settle_loaded(&self, thread: &mut Thread) {
        self.set_failure(None);
        let starts: Vec<usize> = turn_starts(&thread.messages);
        let cut = starts
            .len()
            .checked_sub(KEEP_TURNS_ON_LOAD)
            .map_or(0, |i| starts[i]);
        if let Err(e) = thread.settle(cut, || (self.stores)()) {
            self.failed(&e);
        }
    }
}

impl fmt::Debug for SettleOnLoad {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SettleOnLoad")
            .field("failure", &self.failure())
            .finish_non_exhaustive()
    }
}

fn turn_starts(messages: &[Message]) -> Vec<usize> {
    messages
        .iter()
        .enumerate()
        .filter(|(_, m)| matches!(m, Message::User(_)))
        .map(|(i, _)| i)
        .collect()
}

impl SessionRecord {
    /// Parses and validates a `session.json` document. `origin` (a file path or a row name)
    /// is used in error messages, which name the offending field.
    pub fn from_json_slice(bytes: &[u8], origin: &str) -> Result<Self, ValidationError> {
        let mut de = serde_json::Deserializer::from_slice(bytes);
        let record = match <SessionRecord as serde::Deserialize>::deserialize(&mut de) {
            Ok(record) => record,
            Err(first) => {
                let e = parse_tracking_path_on_error::<SessionRecord>(bytes).err();
                return Err(e.map_or_else(
                    || ValidationError::new(origin, ".", first.to_string()),
                    |e| ValidationError::from_path_error(origin, e),
                ));
            }
        };
        // Whatever follows the document but white space is damage, as it is to the streaming
        // loader (which reads the large snapshots): both refuse it alike.
        de.end()
            .map_err(|e| ValidationError::new(origin, ".", format!("not valid JSON: {e}")))?;
        record.validate(origin)?;
        Ok(record)
    }

    /// [`SessionRecord::from_json_slice`] from a reader, 64 KiB at a time, settling the
    /// conversation as it goes when `settle` is given (see [`SettleOnLoad`]): a long session
    /// is then never whole in memory. The outer error is a read that failed (the disk's
    /// error, not a damaged document); the inner one, a document that does not validate. A
    /// syntax error says where by byte offset instead of line and column.
    pub fn from_json_reader(
        reader: impl io::Read,
        origin: &str,
        settle: Option<&SettleOnLoad>,
    ) -> io::Result<Result<Self, ValidationError>> {
        if let Some(settle) = settle {
            settle.set_failure(None);
        }
        let record = match stream::load(reader, settle)? {
            Ok(r) => r,
            Err((field, message)) => return Ok(Err(ValidationError::new(origin, &field, message))),
        };
        Ok(record.validate(origin).map(|()| record))
    }
}

/// An object's keys but the one read apart, as their JSON text (`{"key": value, …}`, the
/// one read apart as a small stand-in in its place), for `T`'s derived `Deserialize` to read:
/// its duplicate checks, defaults, aliases and errors are then a slice's. An error names its
/// whole path (`prefix` is the object's); its place in this text would mean nothing.
fn from_rest<T: DeserializeOwned>(rest: &str, prefix: &str) -> Result<T, Invalid> {
    parse_tracking_path_on_error(rest.as_bytes()).map_err(|e| {
        let path = join_path(prefix, &e.path().to_string());
        (path, without_place(&e.into_inner().to_string()).to_owned())
    })
}

/// `T` from the JSON `bytes`, parsed without tracking the path first (tracking every field
/// cost a tenth of a load, and a migration loads every session twice); a value that fails is
/// parsed again, tracking it, to say where.
fn parse_tracking_path_on_error<T: DeserializeOwned>(
    bytes: &[u8],
) -> Result<T, serde_path_to_error::Error<serde_json::Error>> {
    match T::deserialize(&mut serde_json::Deserializer::from_slice(bytes)) {
        Ok(value) => Ok(value),
        Err(_) => {
            serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_slice(bytes))
        }
    }
}

/// The record of its other keys (`rest`, see [`from_rest`]) and its thread, read apart.
fn record_from_parts(rest: &str, thread: Option<Thread>) -> Result<SessionRecord, Invalid> {
    let mut record: SessionRecord = from_rest(rest, "")?;
    if let Some(t) = thread {
        record.thread = t;
    }
    Ok(record)
}

/// The thread of its other keys (`rest`, see [`from_rest`]) and its messages, read apart;
/// with `settle`, the settled turns' token usage settles too, now that the map is read (it
/// follows the messages).
fn thread_from_parts(
    rest: &str,
    messages: Option<(SettledMessages, Vec<Message>)>,
    settle: Option<&SettleOnLoad>,
) -> Result<Thread, Invalid> {
    let mut thread: Thread = from_rest(rest, "thread")?;
    if let Some((settled, messages)) = messages {
        thread.settled = settled;
        thread.messages = messages;
    }
    // Not after a failure: its cause is what the caller hears, and the runs take nothing more.
    if let Some(settle) = settle.filter(|s| !thread.settled.is_empty() && s.failure().is_none()) {
        if let Err(e) = thread.settle(0, || (settle.stores)()) {
            settle.failed(&e);
        }
    }
    Ok(thread)
}

/// `thread.messages` as they are read, the turns before the last [`KEEP_TURNS_ON_LOAD`]
/// settled as soon as the next turn begins (see [`SettleOnLoad`]).
struct Settling<'a> {
    settle: Option<&'a SettleOnLoad>,
    settled: SettledMessages,
    messages: Vec<Message>,
    /// Where the last turns begin in `messages`, at most KEEP_TURNS_ON_LOAD of them.
    starts: VecDeque<usize>,
}

impl<'a> Settling<'a> {
    fn new(settle: Option<&'a SettleOnLoad>) -> Self {
        Settling {
            settle,
            settled: SettledMessages::default(),
            messages: Vec::new(),
            starts: VecDeque::with_capacity(KEEP_TURNS_ON_LOAD + 1),
        }
    }

    fn push(&mut self, message: Message) {
        if let (Some(s), Message::User(_)) = (self.settle, &message) {
            self.starts.push_back(self.messages.len());
            if self.starts.len() > KEEP_TURNS_ON_LOAD {
                self.starts.pop_front();
                let cut = self.starts[0];
                let no_usage = IndexMap::new();
                match self
                    .settled
                    .settle(&self.messages[..cut], &no_usage, 0, || (s.stores)())
                {
                    Ok(()) => {
                        self.messages.drain(..cut);
                        self.starts.iter_mut().for_each(|i| *i -= cut);
                    }
                    Err(e) => {
                        // The rest stays in memory, as after a failed `Thread::settle`.
                        s.failed(&e);
                        self.settle = None;
                    }
                }
            }
        }
        self.messages.push(message);
    }

    fn finish(self) -> (SettledMessages, Vec<Message>) {
        (self.settled, self.messages)
    }
}

#[cfg(test)]
mod tests;
