//! [`SettledMessages`]: the finished part of a conversation, kept in spill stores
//! ([`TextSpill`]) instead of memory by a process that lives on between turns (the queue
//! owner), so that its memory does not grow with the session's length (issue 15; docs/format.md
//! decision 17).
//!
//! A settled message never changes again: the runtime settles the turns before the last one
//! once a turn has ended, and by then every tool call of theirs has its result. Three runs
//! hold them, each append-only and contiguous in its own store:
//! - the **message run**: each message as the snapshot's writer (`json_pretty.rs`) writes it
//!   at depth 0, joined by `,\n`. A save copies the run into the `messages` array, indenting
//!   each line, without parsing it; any other serializer gets the messages parsed back one at
//!   a time.
//! - the **search run**: for each message with searchable text, a header line
//!   `[index,"role",message_id,length]` and then the text itself (as
//!   [`crate::search::message_text`] gives it), so that a store indexing the conversation at
//!   each save reads the texts back without parsing the messages.
//! - the **usage run**: the settled turns' entries of `request_token_usage` (each keyed by
//!   its turn's `User` message id), as the snapshot's writer writes them inside the map,
//!   joined by `,\n`; a save copies them before the entries still in memory.
//!
//! In memory a thread holds only the runs' handles and lengths and the settled usage's sum,
//! whatever the number of messages. A thread read back from a store has none settled, unless
//! the load settled it (`crate::Store::load_settling`; `crate::SettleOnLoad`).

use std::borrow::Cow;
use std::fmt;
use std::io::{self, BufRead as _, Read};
use std::sync::Arc;

use indexmap::IndexMap;
use serde::ser::{self, SerializeSeq};
use serde::{Serialize, Serializer};

use crate::message::{AgentContent, Message};
use crate::message_text::message_text;
use crate::thread_text::{TextSpill, ThreadText};
use crate::token_usage::TokenUsage;

/// The three spill stores of the settled runs (messages, search, usage), each theirs alone.
pub type SettledStores = [Arc<dyn TextSpill>; 3];

/// The settled messages of a thread: the first [`SettledMessages::len`] messages of the
/// conversation, before `thread.messages` (see the module docs).
#[derive(Clone, Default)]
pub struct SettledMessages(Option<Runs>);

#[derive(Clone)]
struct Runs {
    count: usize,
    messages: Arc<dyn TextSpill>,
    messages_len: u64,
    search: Arc<dyn TextSpill>,
    search_len: u64,
    usage: Arc<dyn TextSpill>,
    usage_len: u64,
    usage_count: usize,
    /// The sum of the settled usage entries (a thread's cumulative usage sums them all).
    usage_sum: TokenUsage,
}

/// The searchable text of one settled message: what [`crate::search::message_text`] gave for
/// it, its text still in the search run.
#[derive(Debug, Clone)]
pub struct SettledText {
    /// The message's index in the whole conversation.
    pub index: usize,
    /// `"user"` or `"agent"`.
    pub role: &'static str,
    /// The `User` message id (agent messages have none).
    pub message_id: Option<String>,
    /// The text, read from the search run on demand.
    pub text: ThreadText,
}

impl SettledMessages {
    /// How many messages are settled.
    pub fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |r| r.count)
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many `request_token_usage` entries are settled.
    pub fn usage_len(&self) -> usize {
        self.0.as_ref().map_or(0, |r| r.usage_count)
    }

    /// The sum of the settled `request_token_usage` entries.
    pub fn usage_sum(&self) -> TokenUsage {
        self.0
            .as_ref()
            .map_or_else(TokenUsage::default, |r| r.usage_sum)
    }

    /// The settled `request_token_usage` entries, read back, in order.
    pub fn usage(&self) -> io::Result<IndexMap<String, TokenUsage>> {
        let Some(runs) = self.0.as_ref().filter(|r| r.usage_count > 0) else {
            return Ok(IndexMap::new());
        };
        let reader = io::Cursor::new(b"{")
            .chain(RunReader::new(&*runs.usage, 0, runs.usage_len))
            .chain(io::Cursor::new(b"}"));
        serde_json::from_reader(io::BufReader::new(reader)).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("the settled token usage could not be read back: {e}"),
            )
        })
    }

    /// Appends `messages`, which follow the settled ones in the conversation, to the runs,
    /// and the first `usage_entries` entries of `usage` (the `request_token_usage` of their
    /// turns). `stores` gives the three stores (message, search and usage runs) the first
    /// time, each used by these runs alone and empty: a run must stay contiguous. All or
    /// nothing: on an error nothing is settled, and the caller keeps the messages; a store
    /// left with a failed write refuses every later append (the messages then stay in
    /// memory, as before they were settled). [`crate::Thread::settle`] is the caller.
    pub(crate) fn settle(
        &mut self,
        messages: &[Message],
        usage: &IndexMap<String, TokenUsage>,
        usage_entries: usize,
        stores: impl FnOnce() -> io::Result<SettledStores>,
    ) -> io::Result<()> {
        // Usage settles with the turns it belongs to or after them, never before the first
        // message (the run of messages would then be an empty element of `thread.messages`).
        let usage_entries = usage_entries.min(usage.len());
        if messages.is_empty() && (self.0.is_none() || usage_entries == 0) {
            return Ok(());
        }
        let runs = match &self.0 {
            Some(r) => r.clone(),
            None => {
                let [messages, search, usage] = stores()?;
                if !messages.is_empty() || !search.is_empty() || !usage.is_empty() {
                    return Err(io::Error::other(
                        "settled runs need spill stores of their own, empty at first",
                    ));
                }
                Runs {
                    count: 0,
                    messages,
                    messages_len: 0,
                    search,
                    search_len: 0,
                    usage,
                    usage_len: 0,
                    usage_count: 0,
                    usage_sum: TokenUsage::default(),
                }
            }
        };
        if runs.messages.len() != runs.messages_len
            || runs.search.len() != runs.search_len
            || runs.usage.len() != runs.usage_len
        {
            return Err(io::Error::other(
                "a settled run's spill store holds a failed write: nothing more can be settled",
            ));
        }
        let mut out = RunWriter::new(&*runs.messages, runs.messages_len);
        let mut search = RunWriter::new(&*runs.search, runs.search_len);
        for (i, message) in messages.iter().enumerate() {
            if runs.count + i > 0 {
                out.write(b",\n")?;
            }
            crate::json_pretty::to_writer_pretty(&mut out, message)?;
            if let Some((role, id, text)) = search_entry(message)? {
                let header = serde_json::to_string(&(runs.count + i, role, id, text.len()))
                    .map_err(io::Error::other)?;
                search.write(header.as_bytes())?;
                search.write(b"\n")?;
                search.write(text.as_bytes())?;
            }
        }
        let mut usage_out = RunWriter::new(&*runs.usage, runs.usage_len);
        let mut usage_sum = runs.usage_sum;
        for (i, (key, value)) in usage.iter().take(usage_entries).enumerate() {
            if runs.usage_count + i > 0 {
                usage_out.write(b",\n")?;
            }
            // The entry as the writer writes it inside the map at depth 0.
            let mut one = IndexMap::new();
            one.insert(key, value);
            let mut text = Vec::new();
            crate::json_pretty::to_writer_pretty(&mut text, &one)?;
            usage_out.write(map_entries(&text)?)?;
            usage_sum = usage_sum.saturating_add(*value);
        }
        let messages_len = out.finish()?;
        let search_len = search.finish()?;
        let usage_len = usage_out.finish()?;
        self.0 = Some(Runs {
            count: runs.count + messages.len(),
            messages_len,
            search_len,
            usage_len,
            usage_count: runs.usage_count + usage_entries,
            usage_sum,
            ..runs
        });
        Ok(())
    }

    /// Calls `f` with each settled message, parsed back in order, and its index; stops at the
    /// first error of `f`, which it returns inside. The outer error is a run that could not be
    /// read back.
    pub fn try_for_each<E>(
        &self,
        mut f: impl FnMut(usize, Message) -> Result<(), E>,
    ) -> io::Result<Result<(), E>> {
        let Some(runs) = &self.0 else {
            return Ok(Ok(()));
        };
        // Each message parsed from a slice of a 64 KiB read (`json_scan::each_listed`).
        let reader = RunReader::new(&*runs.messages, 0, runs.messages_len);
        let mut failed = None;
        let mut index = 0;
        let read =
            crate::json_scan::each_listed::<Message>(reader, |message| match f(index, message) {
                Ok(()) => {
                    index += 1;
                    true
                }
                Err(e) => {
                    failed = Some(e);
                    false
                }
            });
        if let Some(e) = failed {
            return Ok(Err(e));
        }
        match read {
            Ok(n) if n == runs.count => Ok(Ok(())),
            Ok(n) => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "the settled message run holds {n} messages, not {}",
                    runs.count
                ),
            )),
            Err(e) => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("the settled message run could not be read back: {e}"),
            )),
        }
    }

    /// The searchable texts of the settled messages, in order (messages without text, the
    /// `Resume` markers, have none): handles into the search run, its texts not read.
    pub fn searchable(&self) -> io::Result<Vec<SettledText>> {
        let Some(runs) = &self.0 else {
            return Ok(Vec::new());
        };
        // One pass in order, reading the headers and stepping over the texts: a save reads
        // every header, and a read a message would cost a session of thousands.
        let mut reader = io::BufReader::with_capacity(
            64 << 10,
            RunReader::new(&*runs.search, 0, runs.search_len),
        );
        let mut out = Vec::new();
        let mut at = 0u64;
        let mut line = Vec::new();
        while at < runs.search_len {
            line.clear();
            let n = reader.read_until(b'\n', &mut line)?;
            if line.pop() != Some(b'\n') {
                return Err(truncated_search_run());
            }
            at += n as u64;
            let (index, role, message_id, len): (usize, String, Option<String>, u64) =
                serde_json::from_slice(&line).map_err(|e| {
                    io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("a settled search entry's header is not readable: {e}"),
                    )
                })?;
            let role = match role.as_str() {
                "user" => "user",
                "agent" => "agent",
                other => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("a settled search entry has the unknown role {other:?}"),
                    ))
                }
            };
            if at.checked_add(len).is_none_or(|end| end > runs.search_len) {
                return Err(truncated_search_run());
            }
            out.push(SettledText {
                index,
                role,
                message_id,
                text: ThreadText::spilled_range(runs.search.clone(), at, len),
            });
            let step = i64::try_from(len).map_err(|_| truncated_search_run())?;
            reader.seek_relative(step)?;
            at += len;
        }
        Ok(out)
    }

    /// Serializes the whole conversation, these messages then `live`, as `thread.messages`.
    pub(crate) fn serialize_with<S: Serializer>(
        &self,
        live: &[Message],
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        let Some(runs) = &self.0 else {
            return live.serialize(serializer);
        };
        let mut seq = serializer.serialize_seq(Some(runs.count + live.len()))?;
        if crate::json_pretty::is_running() {
            // The session document's writer copies the run as one element: its messages are
            // already joined by `,\n`, and each line is indented to the array's depth.
            let run = ThreadText::spilled_range(runs.messages.clone(), 0, runs.messages_len);
            seq.serialize_element(&WrittenRun(&run))?;
        } else {
            match self.try_for_each(|_, m| seq.serialize_element(&m)) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(e),
                Err(e) => return Err(ser::Error::custom(e)),
            }
        }
        for m in live {
            seq.serialize_element(m)?;
        }
        seq.end()
    }
}

impl SettledMessages {
    /// Serializes the whole `request_token_usage`, the settled entries then `live`.
    pub(crate) fn serialize_usage_with<S: Serializer>(
        &self,
        live: &IndexMap<String, TokenUsage>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        let Some(runs) = self.0.as_ref().filter(|r| r.usage_count > 0) else {
            return live.serialize(serializer);
        };
        let all = AllUsage {
            settled: self,
            live,
        };
        if !crate::json_pretty::is_running() {
            return all.serialize(serializer);
        }
        // The map as the writer writes it at depth 0: the settled entries copied, then the
        // ones in memory, written here.
        let mut pieces = vec![
            ThreadText::from("{\n"),
            ThreadText::spilled_range(runs.usage.clone(), 0, runs.usage_len),
        ];
        if !live.is_empty() {
            let mut text = Vec::new();
            crate::json_pretty::to_writer_pretty(&mut text, live).map_err(ser::Error::custom)?;
            let entries = map_entries(&text).map_err(ser::Error::custom)?;
            let entries = std::str::from_utf8(entries).map_err(ser::Error::custom)?;
            pieces.push(ThreadText::from(format!(",\n{entries}")));
        }
        pieces.push(ThreadText::from("\n}"));
        match crate::json_pretty::serialize_written_pieces(pieces, &all, serializer) {
            Ok(written) => written,
            Err(serializer) => all.serialize(serializer),
        }
    }
}

/// The whole `request_token_usage`, the settled entries parsed back: for a serializer other
/// than the session document's writer.
struct AllUsage<'a> {
    settled: &'a SettledMessages,
    live: &'a IndexMap<String, TokenUsage>,
}

impl Serialize for AllUsage<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let settled = self.settled.usage().map_err(ser::Error::custom)?;
        let mut map = serializer.serialize_map(Some(settled.len() + self.live.len()))?;
        for (k, v) in settled.iter().chain(self.live) {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

/// The entries of a map as the writer writes it at depth 0 (`{\n  "k": …\n}`): what lies
/// between its braces, each entry indented one level.
fn map_entries(text: &[u8]) -> io::Result<&[u8]> {
    text.strip_prefix(b"{\n")
        .and_then(|t| t.strip_suffix(b"\n}"))
        .ok_or_else(|| io::Error::other("a map written without entries"))
}

/// The message run, handed to the session document's writer. Met by any other serializer on
/// the way (one that wraps a value, which `thread.messages` never is), it fails rather than
/// write the run as one message.
struct WrittenRun<'a>(&'a ThreadText);

impl Serialize for WrittenRun<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        struct NotHere;
        impl Serialize for NotHere {
            fn serialize<S: Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
                Err(ser::Error::custom(
                    "settled messages reached a serializer that cannot copy them as written",
                ))
            }
        }
        match crate::json_pretty::serialize_written_text(self.0, &NotHere, serializer) {
            Ok(written) => written,
            Err(serializer) => NotHere.serialize(serializer),
        }
    }
}

/// A message's role, message id and searchable text, as [`message_text`] gives them.
type SearchEntry<'a> = (&'static str, Option<&'a str>, Cow<'a, str>);

/// What [`message_text`] gives for `message`, its spilled texts read back strictly: a
/// text that cannot be read fails the settling instead of storing a note in its place.
fn search_entry(message: &Message) -> io::Result<Option<SearchEntry<'_>>> {
    let Message::Agent(a) = message else {
        return Ok(message_text(message));
    };
    let mut pieces = Vec::new();
    for content in &a.content {
        match content {
            AgentContent::Text(t) => pieces.push(t.to_text()?),
            AgentContent::Thinking(t) => pieces.push(t.text.to_text()?),
            _ => {}
        }
    }
    Ok(Some(("agent", None, Cow::Owned(pieces.join("\n")))))
}

fn truncated_search_run() -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "the settled search run ends inside an entry",
    )
}

/// Appends to a run in pieces of up to 64 KiB, each cut at a character boundary.
struct RunWriter<'a> {
    store: &'a dyn TextSpill,
    len: u64,
    pending: Vec<u8>,
}

impl<'a> RunWriter<'a> {
    fn new(store: &'a dyn TextSpill, len: u64) -> Self {
        RunWriter {
            store,
            len,
            pending: Vec::new(),
        }
    }

    fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        io::Write::write_all(self, bytes)
    }

    /// Appends what is pending, and returns the run's new length.
    fn finish(mut self) -> io::Result<u64> {
        self.append(true)?;
        Ok(self.len)
    }

    fn append(&mut self, all: bool) -> io::Result<()> {
        let valid = match std::str::from_utf8(&self.pending) {
            Ok(s) => s.len(),
            Err(e) if e.error_len().is_none() && !all => e.valid_up_to(),
            Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e)),
        };
        if valid == 0 {
            return Ok(());
        }
        // Checked just above.
        let text = std::str::from_utf8(&self.pending[..valid]).map_err(io::Error::other)?;
        if !self.store.append_at(self.len, text)? {
            return Err(io::Error::other(
                "something else appended to a settled run's spill store",
            ));
        }
        self.len += valid as u64;
        self.pending.drain(..valid);
        Ok(())
    }
}

impl io::Write for RunWriter<'_> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.pending.extend_from_slice(bytes);
        if self.pending.len() >= 64 << 10 {
            self.append(false)?;
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Reads bytes `at..end` of a run.
struct RunReader<'a> {
    store: &'a dyn TextSpill,
    at: u64,
    end: u64,
}

impl<'a> RunReader<'a> {
    fn new(store: &'a dyn TextSpill, at: u64, end: u64) -> Self {
        RunReader { store, at, end }
    }
}

impl io::Seek for RunReader<'_> {
    fn seek(&mut self, pos: io::SeekFrom) -> io::Result<u64> {
        let to = match pos {
            io::SeekFrom::Start(n) => Some(n),
            io::SeekFrom::Current(d) => self.at.checked_add_signed(d),
            io::SeekFrom::End(d) => self.end.checked_add_signed(d),
        };
        self.at = to.ok_or_else(|| io::Error::other("a seek before the start of a run"))?;
        Ok(self.at)
    }
}

impl Read for RunReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = usize::try_from(self.end.saturating_sub(self.at)).unwrap_or(usize::MAX);
        let want = buf.len().min(left);
        if want == 0 {
            return Ok(0);
        }
        let n = self.store.read_at(self.at, &mut buf[..want])?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "a settled run's spill store is shorter than the run",
            ));
        }
        self.at += n as u64;
        Ok(n)
    }
}

impl fmt::Debug for SettledMessages {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            None => f.write_str("SettledMessages(none)"),
            Some(r) => write!(
                f,
                "SettledMessages({} messages, {} bytes in a spill store; {} usage entries)",
                r.count, r.messages_len, r.usage_count
            ),
        }
    }
}

/// Equal when they settle the same messages, written the same; one that cannot be read back
/// equals nothing.
impl PartialEq for SettledMessages {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (None, None) => true,
            (Some(a), Some(b)) => {
                a.count == b.count
                    && a.usage_count == b.usage_count
                    && a.usage_sum == b.usage_sum
                    && same_bytes(
                        (&*a.messages, a.messages_len),
                        (&*b.messages, b.messages_len),
                    )
                    .unwrap_or(false)
                    && same_bytes((&*a.usage, a.usage_len), (&*b.usage, b.usage_len))
                        .unwrap_or(false)
            }
            _ => false,
        }
    }
}

/// Whether two runs (a store and the run's length) hold the same bytes.
fn same_bytes(a: (&dyn TextSpill, u64), b: (&dyn TextSpill, u64)) -> io::Result<bool> {
    if a.1 != b.1 {
        return Ok(false);
    }
    let mut ra = io::BufReader::new(RunReader::new(a.0, 0, a.1));
    let mut rb = io::BufReader::new(RunReader::new(b.0, 0, b.1));
    loop {
        let (x, y) = (
            io::BufRead::fill_buf(&mut ra)?,
            io::BufRead::fill_buf(&mut rb)?,
        );
        let n = x.len().min(y.len());
        if n == 0 {
            return Ok(x.is_empty() && y.is_empty());
        }
        if x[..n] != y[..n] {
            return Ok(false);
        }
        ra.consume(n);
        rb.consume(n);
    }
}

#[cfg(test)]
#[path = "settled_tests.rs"]
mod tests;
