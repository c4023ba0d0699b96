//! A snapshot's summary for the list cache (`index.rs`), read from the file when the cache has
//! no entry that still describes it (another program wrote it, the cache was lost, the home
//! was copied), and for `Store::summary` ([`SummaryMemo`]). A small snapshot is read whole and parsed as `load` parses it; a large one is
//! read as a stream ([`SessionRecord::from_json_reader`]) with its turns before the last two
//! counted and dropped as they are read, so that listing a home holding a long session does not
//! hold that session's document and parse at once (docs/format.md decision 17, "Every command
//! that reads a session reads a long one this way").

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use acpx_model::{RecordId, SessionRecord, SessionSummary, SettleOnLoad, TextSpill};

use crate::fsutil::{open_read, FileIdent};

/// Snapshots this large or larger are summarized from a stream. Below it a whole read costs
/// less (one buffer, the slice parser) and holds little.
pub(crate) const STREAMED_FROM: u64 = 1 << 20;

/// The summary of the snapshot of `id` at `path`, `len` bytes long. The outer error is the
/// file's (it could not be read); the inner one names the field that does not validate, as
/// `load` would.
pub(crate) fn read_summary(
    id: &RecordId,
    path: &Path,
    len: u64,
    streamed_from: u64,
) -> io::Result<Result<SessionSummary, (String, String)>> {
    summarize_file(id, path, open_read(path)?, len, streamed_from)
}

/// [`read_summary`] of the snapshot file already open as `file`.
pub(crate) fn summarize_file(
    id: &RecordId,
    path: &Path,
    mut file: File,
    len: u64,
    streamed_from: u64,
) -> io::Result<Result<SessionSummary, (String, String)>> {
    if len < streamed_from {
        let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0).saturating_add(1));
        file.read_to_end(&mut bytes)?;
        return Ok(parse_snapshot(id, path, &bytes).map(|r| r.summary()));
    }
    let origin = path.display().to_string();
    let count_only = SettleOnLoad::new(|| {
        let run = || -> Arc<dyn TextSpill> { Arc::new(CountingSpill::default()) };
        Ok([run(), run(), run()])
    });
    Ok(
        match SessionRecord::from_json_reader(file, &origin, Some(&count_only))? {
            Ok(record) => check_snapshot_id(id, record).map(|r| r.summary()),
            Err(v) => Err((v.field, v.message)),
        },
    )
}

/// Sessions whose last summary [`SummaryMemo`] keeps at most; past it the memo starts over.
const MEMO_SESSIONS: usize = 64;

/// The last summary `Store::summary` read of each session, with the identity of the file it
/// was read from: a follower that asks every half second reads the snapshot again only once
/// a save has replaced it, not its whole conversation at every question.
#[derive(Debug, Default)]
pub(crate) struct SummaryMemo(Mutex<HashMap<RecordId, (FileIdent, SessionSummary)>>);

impl SummaryMemo {
    /// The summary kept for `id` if it was read from the file `ident` describes.
    pub(crate) fn get(&self, id: &RecordId, ident: &FileIdent) -> Option<SessionSummary> {
        let memo = self.0.lock().unwrap_or_else(|p| p.into_inner());
        memo.get(id)
            .filter(|(read_from, _)| read_from == ident)
            .map(|(_, s)| s.clone())
    }

    /// Keeps `summary`, read from the file `ident` describes, for `id`.
    pub(crate) fn put(&self, id: &RecordId, ident: FileIdent, summary: &SessionSummary) {
        let mut memo = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if memo.len() >= MEMO_SESSIONS && !memo.contains_key(id) {
            memo.clear();
        }
        memo.insert(id.clone(), (ident, summary.clone()));
    }
}

/// A settled run that keeps only its length: a summary counts the settled messages and sums
/// their usage (both kept in memory), and never reads them back.
#[derive(Debug, Default)]
struct CountingSpill(AtomicU64);

impl TextSpill for CountingSpill {
    fn len(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }

    fn append_at(&self, expected: u64, text: &str) -> io::Result<bool> {
        let after = expected + text.len() as u64;
        Ok(self
            .0
            .compare_exchange(expected, after, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok())
    }

    fn read_at(&self, _offset: u64, _buf: &mut [u8]) -> io::Result<usize> {
        Err(io::Error::other(
            "a summary's settled messages were counted, not kept",
        ))
    }
}

/// Parses and validates a snapshot the way `load` does: the document must validate and the
/// record id inside must equal the file name's.
pub(crate) fn parse_snapshot(
    id: &RecordId,
    path: &Path,
    bytes: &[u8],
) -> Result<SessionRecord, (String, String)> {
    let origin = path.display().to_string();
    let record =
        SessionRecord::from_json_slice(bytes, &origin).map_err(|v| (v.field, v.message))?;
    check_snapshot_id(id, record)
}

/// The record of a parsed snapshot, if the id inside equals the file name's.
pub(crate) fn check_snapshot_id(
    id: &RecordId,
    record: SessionRecord,
) -> Result<SessionRecord, (String, String)> {
    if record.acpx_record_id != *id {
        return Err((
            "acpxRecordId".to_owned(),
            format!(
                "is {:?}, but the file name says {:?}; a snapshot must be named after the id it \
                 holds (was it copied or renamed by hand?)",
                record.acpx_record_id.as_str(),
                id.as_str()
            ),
        ));
    }
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;
    use acpx_model::{
        AgentContent, AgentMessage, Message, NewSession, ThreadText, Timestamp, UserContent,
        UserMessage,
    };

    fn record(turns: usize) -> SessionRecord {
        let mut r = SessionRecord::new(
            NewSession {
                acpx_record_id: RecordId::parse("a").unwrap(),
                acp_session_id: "acp".into(),
                agent_session_id: None,
                agent_command: "agent".into(),
                cwd: "/r".into(),
                name: Some("long".into()),
            },
            Timestamp::now(),
        );
        r.thread.title = "a long one".into();
        for t in 0..turns {
            r.thread.messages.push(Message::User(UserMessage {
                id: format!("u{t}"),
                content: vec![UserContent::Text(format!("question {t}"))],
                extra: Default::default(),
            }));
            let mut a = AgentMessage::default();
            a.content
                .push(AgentContent::Text(ThreadText::from(format!("answer {t}"))));
            r.thread.messages.push(Message::Agent(a));
        }
        r
    }

    #[test]
    fn a_streamed_summary_is_the_whole_reads() {
        let dir = tempfile::tempdir().unwrap();
        let id = RecordId::parse("a").unwrap();
        for turns in [0, 1, 2, 3, 9] {
            let path = dir.path().join("a.json");
            std::fs::write(&path, record(turns).to_json_vec().unwrap()).unwrap();
            let whole = read_summary(&id, &path, 0, u64::MAX).unwrap().unwrap();
            let streamed = read_summary(&id, &path, 0, 0).unwrap().unwrap();
            assert_eq!(streamed, whole, "{turns} turns");
            assert_eq!(streamed.message_count, 2 * turns as u64);
        }
    }

    #[test]
    fn a_streamed_summary_refuses_what_a_load_refuses() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("b.json");
        std::fs::write(&path, record(3).to_json_vec().unwrap()).unwrap();
        let other = RecordId::parse("b").unwrap();
        let (field, _) = read_summary(&other, &path, 0, 0).unwrap().unwrap_err();
        assert_eq!(field, "acpxRecordId");
        std::fs::write(&path, b"{\"schema\": \"acpx.session.v1\", \"thread\": [").unwrap();
        assert!(read_summary(&other, &path, 0, 0).unwrap().is_err());
        std::fs::remove_file(&path).unwrap();
        let e = read_summary(&other, &path, 0, 0).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
    }
}
