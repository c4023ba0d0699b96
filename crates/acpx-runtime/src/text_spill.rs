//! Long replies leave memory while they stream: once the text of the agent message a turn is
//! writing passes [`SPILL_AT`] bytes, the recorder moves it into the session's [`FileSpill`],
//! an unlinked temp file, and the chunks the reducer folds in afterwards append there (issue
//! 15: a 1M-chunk turn's reply is 8 MB, half of the whole process; see docs/format.md
//! decision 16). The reducer knows nothing of files (a text appends wherever it lives); the
//! recorder decides when a text moves. The snapshot writer streams it back out
//! ([`acpx_model::ThreadText`]), and a snapshot read back holds it in memory again.
//!
//! In a session that lives on after a turn (the queue owner's), the finished turn's texts
//! of [`SPILL_FINISHED_AT`] bytes or more move there too ([`SessionSpill::compact_finished`]):
//! replies, reasoning, and the tool calls' inputs and results, texts and JSON values alike
//! ([`acpx_model::ThreadJson`]; a coding agent's turn reads files and runs commands, up to
//! 10 KB of input, result text and raw output a call). So the owner's memory does not grow
//! with the conversation's text; what stays are the messages' structure, short texts and
//! values, and the diffs and terminal outputs kept beside a result (10 KB a result at most).
//!
//! One file per session ([`SessionSpill`]), shared by its long replies, so a long-lived queue
//! owner holds one descriptor per session whatever the number of long turns. The file is made
//! in the system's temp directory (`TMPDIR`; on a tmpfs its pages are still RAM, only no
//! longer the process's). It has no name (`O_TMPFILE`, or unlinked at once where the file
//! system lacks it), so a crash leaves nothing behind. When no file can be made the text stays
//! in memory (tried again after [`RETRY_AFTER`]); when a write fails the unwritten bytes stay
//! in memory (logged once; tried again each 64 KiB more), so nothing is lost either way.
//! A read that fails fails the snapshot's save (the file is storage: docs/format.md decision
//! 16 says what that costs).

use std::fmt;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use acpx_model::{
    AgentContent, Message, ResultContent, SessionRecord, TextSpill, ThreadJson, ThreadText,
};

/// A text longer than this is moved to a spill file: above what agents usually send in one
/// message (a 10k-chunk turn is 78 KB), so only very long replies pay for the file, and the
/// same size above which a save leaves a session out of the file store's search index.
pub const SPILL_AT: usize = 256 << 10;

/// Finished texts and tool values at least this long move to the spill file too (while a turn
/// runs, its earlier messages and finished tool calls; at its end, in a session that lives on,
/// every message), so the
/// conversation's text does not accumulate in memory turn after turn (issue 15: resident memory
/// per live session bounded whatever the session's length; docs/format.md decision 16). Below
/// it a text costs about what its handle in the file would.
pub const SPILL_FINISHED_AT: usize = 256;

/// A settling of at least this many messages gives the heap it freed back to the system
/// ([`SessionSpill::settle`], and a load that settled as many); a turn's end settles one
/// turn, a few messages.
pub const TRIM_AFTER: usize = 256;

/// Gives the heap's free pages back to the system (`malloc_trim`, glibc), which a process
/// keeps otherwise: the messages a settling freed were many small blocks among live ones.
pub(crate) fn release_freed_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free memory of glibc's arenas to the system; it
    // touches no live block.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Three new spill files for the settled runs of one session ([`acpx_model::SettledStores`]).
pub fn settled_stores() -> io::Result<acpx_model::SettledStores> {
    let file = || -> io::Result<Arc<dyn TextSpill>> { Ok(Arc::new(FileSpill::new()?)) };
    Ok([file()?, file()?, file()?])
}

/// Appends are gathered up to this many bytes before one write.
const TAIL_MAX: usize = 64 << 10;

/// After a spill file could not be made, the next try waits this long (not one per chunk).
pub const RETRY_AFTER: Duration = Duration::from_secs(10);

/// The spill file of one session, made when its first long reply needs it.
#[derive(Debug, Default)]
pub struct SessionSpill {
    file: Option<Arc<FileSpill>>,
    /// When making the file last failed.
    failed_at: Option<Instant>,
    /// Whether the last settling failed (logged once).
    settle_failed: bool,
    /// Whether a settling succeeded since the session was opened (this spill is its
    /// recorder's).
    settled_before: bool,
}

impl SessionSpill {
    /// Moves the text the thread's last message ends with (where the reducer appends a
    /// streamed reply or its streamed reasoning) to this session's spill file once it is
    /// longer than [`SPILL_AT`].
    pub fn spill_last_reply_if_long(&mut self, record: &mut SessionRecord) {
        if let Some(Message::Agent(a)) = record.thread.messages.last_mut() {
            match a.content.last_mut() {
                Some(AgentContent::Text(t)) => self.spill_if_long(t),
                Some(AgentContent::Thinking(t)) => self.spill_if_long(&mut t.text),
                _ => {}
            }
        }
    }

    /// Moves `text` to this session's spill file once it is longer than [`SPILL_AT`].
    pub fn spill_if_long(&mut self, text: &mut ThreadText) {
        if text.is_spilled() || text.len() <= SPILL_AT {
            return;
        }
        let Some(file) = self.file() else {
            return;
        };
        if let Err(e) = text.spill_into(file) {
            tracing::debug!("a long reply stays in memory: its spill file failed ({e})");
        }
    }

    /// Makes the finished messages of `record` from index `from` up to (not including) `end`
    /// as small in memory as they can be, and returns where the next call starts: their agent
    /// texts and tool calls (replies, reasoning, tool inputs and results, texts and JSON
    /// values) at least [`SPILL_FINISHED_AT`] long move to this session's spill file, and
    /// their lists lose the room they had to grow (a list's first push makes room for four
    /// items, and an agent content item is about 200 bytes). Called for the messages before
    /// the one a turn is writing, and for all of them once a turn has finished; they rarely
    /// change again (a late update or chunk still lands wherever its text lives, bringing it
    /// back into memory if it must). When the spill file cannot be had, the next call starts
    /// again at the message whose text stayed.
    ///
    /// The first call after a session was opened moves the whole conversation it loaded: a
    /// one-off write of its texts to the file.
    pub fn compact_finished(
        &mut self,
        record: &mut SessionRecord,
        from: usize,
        end: usize,
    ) -> usize {
        let messages = &mut record.thread.messages;
        let end = end.min(messages.len());
        let from = from.min(end);
        for (i, message) in messages.iter_mut().enumerate().take(end).skip(from) {
            match message {
                Message::User(u) => u.content.shrink_to_fit(),
                Message::Agent(a) => {
                    a.content.shrink_to_fit();
                    a.tool_results.shrink_to_fit();
                    for content in &mut a.content {
                        let moved = match content {
                            AgentContent::Text(t) => self.spill_finished_text(t),
                            AgentContent::Thinking(t) => self.spill_finished_text(&mut t.text),
                            AgentContent::ToolUse(t) => {
                                self.spill_finished_text(&mut t.raw_input)
                                    && self.spill_finished_json(&mut t.input)
                            }
                            AgentContent::RedactedThinking(_) => true,
                        };
                        if !moved {
                            return i;
                        }
                    }
                    // Tool results: a coding agent's turn holds many (file reads, command
                    // output), up to 10 KB of text and 10 KB of raw output each.
                    for result in a.tool_results.values_mut() {
                        for content in &mut result.content {
                            if let ResultContent::Text(t) = content {
                                if !self.spill_finished_text(t) {
                                    return i;
                                }
                            }
                        }
                        if let Some(output) = &mut result.output {
                            if !self.spill_finished_json(output) {
                                return i;
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        end
    }

    /// Compacts the finished tool calls of message `index` (the one a turn is writing) whose
    /// results come at or after position `from` of its `tool_results`, and returns where the
    /// next call starts: an agent that chains tool calls without text between them keeps
    /// them all in one message, and a call with a result is final (later updates of it are
    /// ignored). When the spill file cannot be had, the next call starts again at the
    /// result whose call stayed.
    pub fn compact_finished_tool_calls(
        &mut self,
        record: &mut SessionRecord,
        index: usize,
        from: usize,
    ) -> usize {
        let Some(Message::Agent(a)) = record.thread.messages.get_mut(index) else {
            return from;
        };
        let count = a.tool_results.len();
        for position in from..count {
            let Some((id, result)) = a.tool_results.get_index_mut(position) else {
                return position;
            };
            let mut moved = true;
            for content in &mut result.content {
                if let ResultContent::Text(t) = content {
                    moved = moved && self.spill_finished_text(t);
                }
            }
            if let Some(output) = &mut result.output {
                moved = moved && self.spill_finished_json(output);
            }
            let tool_use = a.content.iter_mut().find_map(|c| match c {
                AgentContent::ToolUse(t) if t.id == *id => Some(t),
                _ => None,
            });
            if let Some(t) = tool_use {
                moved = moved
                    && self.spill_finished_text(&mut t.raw_input)
                    && self.spill_finished_json(&mut t.input);
            }
            if !moved {
                return position;
            }
        }
        count
    }

    /// Settles the messages of `record` before index `end` (the turns before the last, once
    /// a turn has ended in a session that lives on) and their turns' token usage into the
    /// thread's settled runs ([`acpx_model::SettledMessages`]), three spill files of their
    /// own, and drops them from memory; returns how many moved (none when the runs could not
    /// take them: they then stay in memory, and the next turn's end tries again).
    ///
    /// Afterwards new long texts go to a new spill file: the old one, now holding the
    /// settled messages' texts again written into the runs, closes (and its space is freed)
    /// once the last turn, whose texts it also holds, is settled in turn.
    ///
    /// When [`TRIM_AFTER`] messages or more moved at once, or at the first settling since the
    /// session was opened (which moves the turns a settling load kept, their long texts still
    /// in memory), the freed heap goes back to the system: glibc keeps freed small blocks for
    /// the process, so an owner that opened a long session stayed at its loaded size
    /// (docs/format.md decision 17).
    pub fn settle(&mut self, record: &mut SessionRecord, end: usize) -> usize {
        let thread = &mut record.thread;
        let end = end.min(thread.messages.len());
        if end == 0 {
            return 0;
        }
        match thread.settle(end, settled_stores) {
            Ok(()) => {
                self.file = None;
                self.settle_failed = false;
                if end >= TRIM_AFTER || !self.settled_before {
                    release_freed_heap();
                }
                self.settled_before = true;
                end
            }
            Err(e) => {
                if !self.settle_failed {
                    tracing::warn!(
                        "finished turns stay in memory: they could not be written to a spill file ({e})"
                    );
                }
                self.settle_failed = true;
                0
            }
        }
    }

    /// Moves a finished text at least [`SPILL_FINISHED_AT`] long to this session's spill file;
    /// false when it should have moved and could not.
    fn spill_finished_text(&mut self, text: &mut ThreadText) -> bool {
        if text.is_spilled() || text.len() < SPILL_FINISHED_AT {
            return true;
        }
        let Some(file) = self.file() else {
            return false;
        };
        match text.spill_into(file) {
            Ok(()) => true,
            Err(e) => {
                tracing::debug!("a finished reply stays in memory: its spill file failed ({e})");
                false
            }
        }
    }

    /// Moves a finished JSON value whose text is at least [`SPILL_FINISHED_AT`] long to this
    /// session's spill file; false when it should have moved and could not.
    fn spill_finished_json(&mut self, value: &mut ThreadJson) -> bool {
        if value.as_value().is_none_or(is_small_json) {
            return true;
        }
        // The file is made only for a value that turns out long enough.
        let file = || self.file().map(|f| f as Arc<dyn TextSpill>);
        match value.spill_into_if_long(SPILL_FINISHED_AT, file) {
            Ok(moved_or_stays) => moved_or_stays,
            Err(e) => {
                tracing::debug!(
                    "a finished tool value stays in memory: its spill file failed ({e})"
                );
                false
            }
        }
    }

    fn file(&mut self) -> Option<Arc<FileSpill>> {
        if let Some(f) = &self.file {
            return Some(f.clone());
        }
        if self.failed_at.is_some_and(|t| t.elapsed() < RETRY_AFTER) {
            return None;
        }
        match FileSpill::new() {
            Ok(f) => {
                let f = Arc::new(f);
                self.file = Some(f.clone());
                self.failed_at = None;
                Some(f)
            }
            Err(e) => {
                if self.failed_at.is_none() {
                    tracing::warn!(
                        "a long reply stays in memory: no spill file in {} ({e})",
                        std::env::temp_dir().display()
                    );
                }
                self.failed_at = Some(Instant::now());
                None
            }
        }
    }
}

/// Whether a value is short enough to stay in memory without writing it out: its JSON without
/// escapes is under half of [`SPILL_FINISHED_AT`] (escapes rarely double a text), counted only
/// as far as that.
fn is_small_json(v: &serde_json::Value) -> bool {
    unescaped_json_len(v, SPILL_FINISHED_AT / 2) < SPILL_FINISHED_AT / 2
}

/// The length of `v` as compact JSON without escapes, counted up to `cap` (a number counts one
/// byte at least).
fn unescaped_json_len(v: &serde_json::Value, cap: usize) -> usize {
    use serde_json::Value;
    match v {
        Value::Null | Value::Bool(_) => 5,
        Value::Number(_) => 1,
        Value::String(s) => s.len() + 2,
        Value::Array(items) => {
            let mut len = 2;
            for item in items {
                if len >= cap {
                    break;
                }
                len += 1 + unescaped_json_len(item, cap - len);
            }
            len
        }
        Value::Object(map) => {
            let mut len = 2;
            for (key, value) in map {
                if len >= cap {
                    break;
                }
                len += key.len() + 4 + unescaped_json_len(value, cap - len);
            }
            len
        }
    }
}

/// A [`TextSpill`] in an unlinked temp file, with the latest appends in memory until they
/// make 64 KiB.
pub struct FileSpill {
    state: Mutex<State>,
}

struct State {
    file: File,
    /// Bytes in the file.
    written: u64,
    /// Bytes after them, not written yet.
    tail: Vec<u8>,
    /// After a failed write: the tail length at which to try again.
    retry_at: Option<usize>,
}

impl FileSpill {
    /// A new, empty spill file in the temp directory.
    pub fn new() -> io::Result<FileSpill> {
        Ok(FileSpill {
            state: Mutex::new(State {
                file: tempfile::tempfile()?,
                written: 0,
                tail: Vec::new(),
                retry_at: None,
            }),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl fmt::Debug for FileSpill {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.state();
        f.debug_struct("FileSpill")
            .field("written", &s.written)
            .field("tail_len", &s.tail.len())
            .field("failing", &s.retry_at.is_some())
            .finish()
    }
}

impl TextSpill for FileSpill {
    fn len(&self) -> u64 {
        let s = self.state();
        s.written + s.tail.len() as u64
    }

    fn append_at(&self, expected: u64, text: &str) -> io::Result<bool> {
        let mut s = self.state();
        if s.written + s.tail.len() as u64 != expected {
            return Ok(false);
        }
        let State {
            file,
            written,
            tail,
            retry_at,
        } = &mut *s;
        // A large piece (a text moved here by `spill_into`) is written as it is, not copied.
        let direct = tail.is_empty() && text.len() >= TAIL_MAX && retry_at.is_none();
        if !direct {
            tail.extend_from_slice(text.as_bytes());
        }
        let due = tail.len() >= TAIL_MAX && retry_at.is_none_or(|at| tail.len() >= at);
        if direct || due {
            let bytes = if direct { text.as_bytes() } else { &tail[..] };
            match file.write_all_at(bytes, *written) {
                Ok(()) => {
                    *written += bytes.len() as u64;
                    tail.clear();
                    if retry_at.take().is_some() {
                        tracing::info!("a long reply's spill file can be written again");
                    }
                }
                // The bytes stay in the tail: in memory, readable, written at a later try.
                Err(e) => {
                    if direct {
                        tail.extend_from_slice(text.as_bytes());
                    }
                    if retry_at.is_none() {
                        tracing::warn!(
                            "a long reply's spill file cannot be written ({e}); keeping the \
                             rest in memory"
                        );
                    }
                    *retry_at = Some(tail.len() + TAIL_MAX);
                }
            }
        }
        Ok(true)
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let s = self.state();
        if offset < s.written {
            let n = usize::try_from(s.written - offset).map_or(buf.len(), |n| n.min(buf.len()));
            return s.file.read_at(&mut buf[..n], offset);
        }
        let start = usize::try_from(offset - s.written).unwrap_or(usize::MAX);
        let rest = s.tail.get(start..).unwrap_or(&[]);
        let n = rest.len().min(buf.len());
        buf[..n].copy_from_slice(&rest[..n]);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_json_values_stay_without_being_written_out() {
        use serde_json::json;
        assert!(is_small_json(
            &json!({"pattern": "TODO", "path": "/repo/src"})
        ));
        assert!(is_small_json(&json!(null)));
        assert!(!is_small_json(&json!({"content": "x".repeat(200)})));
        assert!(!is_small_json(
            &json!([{"k": "v".repeat(100)}, {"k": "w".repeat(100)}])
        ));
        // Counting stops at the cap: a huge list is not walked to its end.
        let many = serde_json::Value::Array(vec![json!(1); 1_000_000]);
        assert!(unescaped_json_len(&many, 128) < 200);
    }

    #[test]
    fn long_texts_move_to_one_file_and_read_back_whole() {
        let mut session = SessionSpill::default();
        let mut texts = [ThreadText::new(), ThreadText::new()];
        let mut expected = [String::new(), String::new()];
        for (t, e) in texts.iter_mut().zip(&mut expected) {
            for i in 0..60_000 {
                let piece = format!("{i:07} é ");
                t.push_str(&piece);
                session.spill_if_long(t);
                e.push_str(&piece);
            }
        }
        for (t, e) in texts.iter().zip(&expected) {
            assert!(t.is_spilled());
            assert_eq!(t.to_text().unwrap(), e.as_str());
            assert_eq!(
                serde_json::to_vec(t).unwrap(),
                serde_json::to_vec(e).unwrap()
            );
        }
        let file = session.file.as_ref().unwrap();
        assert_eq!(file.len() as usize, expected[0].len() + expected[1].len());
    }

    #[test]
    fn a_short_text_stays_in_memory() {
        let mut session = SessionSpill::default();
        let mut t = ThreadText::from("x".repeat(SPILL_AT));
        session.spill_if_long(&mut t);
        assert!(!t.is_spilled());
        assert!(session.file.is_none());
    }
}
