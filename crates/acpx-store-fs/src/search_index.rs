//! The search index `<root>/sessions/.search.ndjson`: the searchable texts of every snapshot,
//! keyed by the snapshot file's identity, so that a search reads one file sequentially instead
//! of parsing every snapshot.
//!
//! The file is a 64-byte header line (`{"acpxSearchIndex":1,"live":N}` padded with spaces:
//! the version, and how many bytes of entries the file held when it was last written whole),
//! then one line per entry:
//!
//! ```text
//! {"id":"<record id>","ident":{…},"revision":R,"len":L,"hash":"<64-bit hash, hex>"}\t[[i,"user","<message id>","text"],[j,"agent",null,"text"],…]\n
//! ```
//!
//! The part before the tab says which snapshot file the entry describes (its identity, the same
//! as the listing cache's, and its revision) and checks the part after it (its length and
//! hash: a torn line followed by another is never taken for an entry). The part after the tab
//! lists the messages with text, as [`acpx_model::search::message_text`] gives it.
//!
//! Like the listing cache, the index is never wrong, only sometimes stale: an entry is used
//! only while the listing finds the same identity and revision for the session's snapshot;
//! any session without such an entry (new, saved since, written by hand, its line lost or
//! damaged) is searched by loading its snapshot, and its entry is then appended. A missing,
//! foreign-version or damaged index is rebuilt the same way. Index I/O errors are never the
//! user's: they are logged at debug level and the search reads the snapshots.
//!
//! Every snapshot write appends the session's entry (one `write` with `O_APPEND`; no fsync)
//! when its texts are at most [`SAVE_TEXT_MAX`] bytes: a save costs the size of that one
//! session's texts, never a rewrite of the index, and a session with a huge reply is indexed
//! by the next search instead of at every save, when its texts are at most
//! [`SEARCH_TEXT_MAX`]; a longer one is searched in its snapshot at every search (settling,
//! in the `acpx` binary), so no search holds a long conversation whole. Appends stop while the file is more than twice
//! its size at the last rewrite (and past [`APPEND_ROOM_MIN`]), so a store that is never
//! searched does not grow it without bound. A search rewrites the file (temp file, rename,
//! under `.search.lock`) keeping only the entries in use once it holds at least as many dead
//! bytes as live ones (and [`COMPACT_DEAD_MIN`]), or when saves can no longer append.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

use acpx_model::search::{message_text, message_text_len};
use acpx_model::{
    list_order_key, match_text, search_record, RecordId, SearchHit, SearchQuery, SessionRecord,
    SessionSummary, StoreError, StoreResult,
};
use serde::{Deserialize, Serialize};

use crate::fsutil::{create_new_file, open_append_create, open_read, random_suffix, FileIdent};
use crate::layout::Layout;
use acpx_lock::FileLock;

const VERSION: u32 = 1;
/// The header line's length, newline included.
const HEADER_LEN: u64 = 64;
/// A save appends the session's entry only when its texts are at most this long; a larger
/// session is indexed by the next search (so a turn streaming an 8 MB reply does not write
/// it twice at every save).
pub(crate) const SAVE_TEXT_MAX: usize = 256 << 10;
/// A search indexes a session it had to load only when its texts are at most this long, and
/// uses no entry line longer than [`ENTRY_LINE_MAX`]: a longer session is searched in its
/// snapshot at each search, one message at a time (the `acpx` binary's loads settle), so no
/// search holds a long conversation whole (issue 15), where its entry would be read whole.
const SEARCH_TEXT_MAX: usize = 1 << 20;
/// The longest entry line a search writes or reads (JSON escapes make a line longer than its
/// texts); a longer one, written by an earlier version, is skipped without being held.
const ENTRY_LINE_MAX: usize = 2 << 20;
/// Saves append while the file is at most twice its size at the last rewrite, or this.
const APPEND_ROOM_MIN: u64 = 16 << 20;
/// A search rewrites the file once dead entries are at least the live ones and this much.
const COMPACT_DEAD_MIN: u64 = 1 << 20;

#[derive(Deserialize)]
struct Header {
    #[serde(rename = "acpxSearchIndex")]
    version: u32,
    live: u64,
}

fn header_bytes(live: u64) -> Vec<u8> {
    let mut b = format!("{{\"acpxSearchIndex\":{VERSION},\"live\":{live}}}").into_bytes();
    b.resize(HEADER_LEN as usize - 1, b' ');
    b.push(b'\n');
    b
}

/// The header of an open index file, when it is one of this version.
fn read_header(file: &File) -> Option<Header> {
    let mut buf = [0u8; HEADER_LEN as usize];
    file.read_exact_at(&mut buf, 0).ok()?;
    if buf[buf.len() - 1] != b'\n' {
        return None;
    }
    let h: Header = serde_json::from_slice(&buf[..buf.len() - 1]).ok()?;
    (h.version == VERSION).then_some(h)
}

#[derive(Serialize)]
struct HeadRef<'a> {
    id: &'a str,
    ident: FileIdent,
    revision: u64,
    len: usize,
    hash: String,
}

#[derive(Deserialize)]
struct Head<'a> {
    #[serde(borrow)]
    id: Cow<'a, str>,
    ident: FileIdent,
    revision: u64,
    len: usize,
    #[serde(borrow)]
    hash: Cow<'a, str>,
}

/// One message of an entry: index in the whole conversation, role, message id, text.
#[derive(Deserialize)]
struct IndexedMessage<'a>(
    usize,
    #[serde(borrow)] Cow<'a, str>,
    Option<String>,
    #[serde(borrow)] Cow<'a, str>,
);

/// A 64-bit hash of an entry's messages part, enough to tell a whole entry from a torn or
/// damaged one (not against tampering: the index is a cache of files the user owns). Eight
/// bytes per step, so checking every entry of a search costs little next to reading them.
fn check_hash(bytes: &[u8]) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut h = (bytes.len() as u64).wrapping_mul(K);
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        h = (h ^ u64::from_le_bytes(w)).wrapping_mul(K);
        h ^= h >> 29;
    }
    let mut w = [0u8; 8];
    w[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
    h = (h ^ u64::from_le_bytes(w)).wrapping_mul(K);
    h ^ (h >> 32)
}

/// The messages part of `record`'s entry (`[[i, role, id, text], …]`, messages with text
/// only), or `None` when their texts are longer than `max` bytes in all.
/// Settled messages (a queue owner's earlier turns) are read back from their spill file; one
/// that cannot be leaves the session out, for a search to read its snapshot.
pub(crate) fn messages_part(record: &SessionRecord, max: usize) -> Option<Vec<u8>> {
    // Measured before anything is built: a save of a session with an 8 MB reply pays one
    // pass over its messages here, not a copy of the reply.
    let settled = record.thread.settled.searchable().ok()?;
    let total = settled
        .iter()
        .map(|t| t.text.len())
        .chain(record.thread.messages.iter().map(message_text_len))
        .try_fold(0usize, |sum, n| sum.checked_add(n).filter(|s| *s <= max))?;
    let mut out = Vec::with_capacity(total + 64 * record.thread.message_count() + 2);
    out.push(b'[');
    let mut push = |i: usize, role: &str, id: Option<&str>, text: &str| {
        if text.is_empty() {
            return Some(());
        }
        if out.len() > 1 {
            out.push(b',');
        }
        serde_json::to_writer(&mut out, &(i, role, id, text)).ok()
    };
    for t in &settled {
        push(
            t.index,
            t.role,
            t.message_id.as_deref(),
            &t.text.to_text().ok()?,
        )?;
    }
    let start = record.thread.settled.len();
    for (i, m) in record.thread.messages.iter().enumerate() {
        if let Some((role, id, text)) = message_text(m) {
            push(start + i, role, id, &text)?;
        }
    }
    out.push(b']');
    Some(out)
}

/// A whole entry line for the snapshot file of `id` with `ident` and `revision`.
fn entry_line(id: &RecordId, ident: FileIdent, revision: u64, messages: &[u8]) -> Option<Vec<u8>> {
    let head = HeadRef {
        id: id.as_str(),
        ident,
        revision,
        len: messages.len(),
        hash: format!("{:016x}", check_hash(messages)),
    };
    let mut line = serde_json::to_vec(&head).ok()?;
    line.reserve(messages.len() + 2);
    line.push(b'\t');
    line.extend_from_slice(messages);
    line.push(b'\n');
    Some(line)
}

/// Notes in the index that the snapshot of `id` now has `ident` and `revision` and holds the
/// texts `messages` (from [`messages_part`]). Best effort and not synced: a lost or torn line
/// only means the next search loads that snapshot.
pub(crate) fn note_saved(
    layout: &Layout,
    id: &RecordId,
    ident: FileIdent,
    revision: u64,
    messages: &[u8],
) {
    let Some(line) = entry_line(id, ident, revision, messages) else {
        return;
    };
    let path = layout.search_index();
    let appended = (|| -> io::Result<()> {
        let (mut f, _) = open_append_create(&path)?;
        let len = f.metadata()?.len();
        if len == 0 {
            // A new index. Two processes doing this at once write two headers; the second
            // is read as a damaged entry and ignored.
            let mut bytes = header_bytes(0);
            bytes.extend_from_slice(&line);
            return f.write_all(&bytes);
        }
        match read_header(&f) {
            // Foreign or damaged: the next search rebuilds it.
            None => Ok(()),
            Some(h) if len > append_room(h.live) => Ok(()),
            Some(_) => {
                // After a torn last line (a crash mid-append) this line starts on a line of
                // its own, so that it is not lost with the torn one.
                let mut last = [0u8; 1];
                f.read_exact_at(&mut last, len - 1)?;
                if last[0] != b'\n' {
                    let mut bytes = Vec::with_capacity(line.len() + 1);
                    bytes.push(b'\n');
                    bytes.extend_from_slice(&line);
                    return f.write_all(&bytes);
                }
                // One `write` call with O_APPEND: lines of concurrent writers do not
                // interleave.
                f.write_all(&line)
            }
        }
    })();
    if let Err(e) = appended {
        tracing::debug!(index = %path.display(), error = %e, "could not note a save in the search index");
    }
}

/// How long the file may grow by appends after a rewrite that left `live` bytes of entries.
fn append_room(live: u64) -> u64 {
    (HEADER_LEN + live.saturating_mul(2)).max(APPEND_ROOM_MIN)
}

/// The hits of one search, kept in list order (rank) and only as long as they can still be
/// among the first `limit`: memory stays about `limit` hits, and sessions after the point
/// where `limit` hits are found are not searched at all.
struct Hits {
    limit: usize,
    kept: BTreeMap<usize, Vec<SearchHit>>,
    /// Sessions of this rank and later cannot contribute.
    cutoff: usize,
}

impl Hits {
    fn new(limit: usize) -> Self {
        Hits {
            limit,
            kept: BTreeMap::new(),
            cutoff: usize::MAX,
        }
    }

    fn wants(&self, rank: usize) -> bool {
        rank < self.cutoff
    }

    fn add(&mut self, rank: usize, hits: Vec<SearchHit>) {
        if hits.is_empty() || !self.wants(rank) {
            return;
        }
        self.kept.insert(rank, hits);
        let mut seen = 0;
        let mut last = None;
        for (r, h) in &self.kept {
            seen += h.len();
            if seen >= self.limit {
                last = Some(*r);
                break;
            }
        }
        if let Some(r) = last {
            self.kept.split_off(&(r + 1));
            self.cutoff = r + 1;
        }
    }

    fn finish(self) -> Vec<SearchHit> {
        let mut out: Vec<SearchHit> = self.kept.into_values().flatten().collect();
        out.truncate(self.limit);
        out
    }
}

/// Where the entry a search uses for one session lies in the index file.
struct Used {
    line_off: u64,
    line_len: u64,
    body_off: u64,
    body_len: usize,
    /// Whether its raw text holds every term (so it must be parsed and matched).
    candidate: bool,
}

/// What reading the index found.
struct Scan {
    file: File,
    header_live: u64,
    /// Per session (by rank): the entry that describes the snapshot the listing found.
    used: Vec<Option<Used>>,
    /// Bytes of the lines in `used`.
    live: u64,
    /// Where reading stopped: the end of the last whole line.
    scanned: u64,
    /// Whether the file went on after `scanned` with part of a line (torn by a crash, or
    /// being appended right now).
    torn_tail: bool,
}

/// One search of `sessions` (the listing's summaries and file identities, already filtered
/// by cwd). `load` reads a snapshot the way `Store::load` does. Gives exactly the hits of
/// [`search_record`] over the sessions in list order, truncated to the limit.
///
/// The index is read once, sequentially, keeping only where each usable entry lies and
/// whether its raw text holds every term; the sessions are then searched in list order
/// (entries parsed from the file, other snapshots loaded) until the limit is reached.
pub(crate) fn search(
    layout: &Layout,
    mut sessions: Vec<(SessionSummary, FileIdent)>,
    query: &SearchQuery,
    mut load: impl FnMut(&RecordId, &FileIdent) -> StoreResult<SessionRecord>,
) -> Vec<SearchHit> {
    let terms = query.terms();
    if terms.is_empty() {
        return Vec::new();
    }
    sessions.sort_by(|a, b| list_order_key(&a.0).cmp(&list_order_key(&b.0)));
    let mut hits = Hits::new(query.effective_limit());
    let path = layout.search_index();
    let scan = scan_index(&path, &sessions, &terms);
    let mut sink = match &scan {
        Some(scan) => Sink::Append {
            path: &path,
            file: None,
            written: 0,
            newline_first: scan.torn_tail,
        },
        None => Sink::rebuild(layout),
    };
    let mut buf = Vec::new();
    for (rank, (summary, ident)) in sessions.iter().enumerate() {
        // Ranks only grow and the cutoff only falls: nothing after this can be a hit.
        if !hits.wants(rank) {
            break;
        }
        if let Some(scan) = &scan {
            if let Some(used) = &scan.used[rank] {
                if !used.candidate {
                    continue;
                }
                if let Some(found) = entry_hits(&scan.file, used, summary, &terms, &mut buf) {
                    hits.add(rank, found);
                    continue;
                }
                // Checked by length and hash, yet not an entry (written by another
                // program): the snapshot answers, and its new entry replaces this one.
            }
        }
        match load(&summary.acpx_record_id, ident) {
            Ok(record) => {
                hits.add(rank, search_record(&record, query));
                // Indexed only when it is the version the listing saw (the identity is the
                // listing's): a file replaced in between is left to the next search.
                if record.revision == summary.revision {
                    let line = messages_part(&record, SEARCH_TEXT_MAX)
                        .and_then(|m| {
                            entry_line(&summary.acpx_record_id, *ident, record.revision, &m)
                        })
                        .filter(|l| l.len() <= ENTRY_LINE_MAX);
                    if let Some(line) = line {
                        sink.push(&line);
                    }
                }
            }
            // Deleted since the listing, or damaged: search what can be read.
            Err(StoreError::NotFound(_)) => {}
            Err(e) => tracing::warn!(error = %e, "search skipped a session"),
        }
    }
    let appended = sink.finish(layout);
    if let Some(scan) = scan {
        if let Err(e) = maybe_compact(layout, &scan, appended) {
            tracing::debug!(index = %path.display(), error = %e, "could not rewrite the search index");
        }
    }
    hits.finish()
}

/// The hits of one used entry, read back from the file; `None` if it does not parse.
fn entry_hits(
    file: &File,
    used: &Used,
    summary: &SessionSummary,
    terms: &[String],
    buf: &mut Vec<u8>,
) -> Option<Vec<SearchHit>> {
    buf.resize(used.body_len, 0);
    file.read_exact_at(buf, used.body_off).ok()?;
    let messages = serde_json::from_slice::<Vec<IndexedMessage>>(buf).ok()?;
    Some(
        messages
            .iter()
            .filter_map(|m| {
                let snippet = match_text(&m.3, terms)?;
                Some(SearchHit {
                    acpx_record_id: summary.acpx_record_id.clone(),
                    title: summary.title.clone(),
                    message_index: m.0,
                    role: m.1.clone().into_owned(),
                    message_id: m.2.clone(),
                    snippet,
                })
            })
            .collect(),
    )
}

/// Reads the index: which entry describes each session's snapshot, and whether it can hold
/// the terms. `None` when there is no usable index (missing, another version, unreadable):
/// rebuild it.
fn scan_index(
    path: &Path,
    sessions: &[(SessionSummary, FileIdent)],
    terms: &[String],
) -> Option<Scan> {
    let file = match open_read(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
        Err(e) => {
            tracing::debug!(index = %path.display(), error = %e, "cannot read the search index; rebuilding it");
            return None;
        }
    };
    let Some(header) = read_header(&file) else {
        tracing::debug!(index = %path.display(), "no usable search index; rebuilding it");
        return None;
    };
    let ranks: HashMap<&str, usize> = sessions
        .iter()
        .enumerate()
        .map(|(i, (s, _))| (s.acpx_record_id.as_str(), i))
        .collect();
    // The raw entry can be tested for the terms before it is parsed when they cannot be
    // changed by JSON escaping (which touches only `"`, `\` and control characters): a
    // message holding a term then holds it verbatim in the line.
    let prefilter = terms
        .iter()
        .all(|t| t.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\'));
    let mut scan = Scan {
        file,
        header_live: header.live,
        used: (0..sessions.len()).map(|_| None).collect(),
        live: 0,
        scanned: HEADER_LEN,
        torn_tail: false,
    };
    let mut reader = BufReader::with_capacity(256 << 10, &scan.file);
    if reader.seek(SeekFrom::Start(HEADER_LEN)).is_err() {
        return None;
    }
    let mut line = Vec::new();
    let mut lower = Vec::new();
    loop {
        line.clear();
        let (line_len, whole) = match read_line_within(&mut reader, &mut line, ENTRY_LINE_MAX) {
            Ok((0, _)) => break,
            Ok(read) => read,
            Err(e) => {
                // What was read stays usable; the rest is searched in the snapshots.
                tracing::debug!(index = %path.display(), error = %e, "search index read failed");
                break;
            }
        };
        if !whole {
            // Torn by a crash, or being appended right now: not ours to judge yet.
            scan.torn_tail = true;
            break;
        }
        let line_off = scan.scanned;
        scan.scanned += line_len;
        if line_len != line.len() as u64 {
            // Longer than any entry a search now uses: its session is searched in its
            // snapshot, and a rewrite drops the line.
            continue;
        }
        let Some((rank, tab)) = live_entry(&line, &ranks, sessions) else {
            continue;
        };
        let body = &line[tab + 1..line.len() - 1];
        let candidate = !prefilter || {
            lower.clear();
            lower.extend(body.iter().map(u8::to_ascii_lowercase));
            std::str::from_utf8(&lower)
                .is_ok_and(|text| terms.iter().all(|t| text.contains(t.as_str())))
        };
        // The last whole entry wins (a later one may replace one that does not parse).
        if let Some(old) = scan.used[rank].take() {
            scan.live -= old.line_len;
        }
        scan.live += line_len;
        scan.used[rank] = Some(Used {
            line_off,
            line_len,
            body_off: line_off + tab as u64 + 1,
            body_len: body.len(),
            candidate,
        });
    }
    drop(reader);
    Some(scan)
}

/// Reads one line (its newline included) into `line` when it is at most `max` bytes long;
/// a longer one is read through without being kept (`line` then holds none of it). Returns
/// the bytes read (0 at the end of the file) and whether they end with a newline (a last
/// line without one is torn).
fn read_line_within(
    reader: &mut impl BufRead,
    line: &mut Vec<u8>,
    max: usize,
) -> io::Result<(u64, bool)> {
    let mut read = 0u64;
    let mut keep = true;
    loop {
        let available = match reader.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok((read, false));
        }
        let (part, done) = match memchr::memchr(b'\n', available) {
            Some(i) => (&available[..=i], true),
            None => (available, false),
        };
        let n = part.len();
        if keep && line.len() + n <= max {
            line.extend_from_slice(part);
        } else {
            keep = false;
            line.clear();
        }
        reader.consume(n);
        read += n as u64;
        if done {
            return Ok((read, true));
        }
    }
}

/// The session rank of `line` and the position of its tab when it is a whole entry
/// describing the snapshot the listing found for that session.
fn live_entry(
    line: &[u8],
    ranks: &HashMap<&str, usize>,
    sessions: &[(SessionSummary, FileIdent)],
) -> Option<(usize, usize)> {
    let tab = line.iter().position(|b| *b == b'\t')?;
    let head: Head = serde_json::from_slice(&line[..tab]).ok()?;
    let rank = *ranks.get(head.id.as_ref())?;
    let (summary, ident) = &sessions[rank];
    if head.ident != *ident || head.revision != summary.revision {
        return None;
    }
    let body = &line[tab + 1..line.len() - 1];
    if body.len() != head.len || format!("{:016x}", check_hash(body)) != head.hash {
        return None;
    }
    Some((rank, tab))
}

/// Where the entries of snapshots a search had to load go.
enum Sink<'p> {
    /// Appended to the index in use.
    Append {
        path: &'p Path,
        file: Option<File>,
        written: u64,
        /// The file ended with part of a line: start on a line of our own (an in-flight
        /// append completes first, since appends are serialized; a torn line stays torn).
        newline_first: bool,
    },
    /// Written to a new index that replaces a missing or unusable one.
    Rebuild {
        _lock: FileLock,
        tmp: std::path::PathBuf,
        file: File,
        written: u64,
    },
    /// Nowhere (another process is rebuilding the index, or writing failed).
    Off,
}

impl Sink<'_> {
    fn rebuild(layout: &Layout) -> Self {
        let lock_path = layout.search_lock();
        let lock = match FileLock::try_exclusive(&lock_path) {
            Ok(Some(l)) => l,
            Ok(None) => return Sink::Off,
            Err(e) => {
                tracing::debug!(lock = %lock_path.display(), error = %e, "cannot lock the search index");
                return Sink::Off;
            }
        };
        let tmp = layout.search_temp(&random_suffix());
        match create_new_file(&tmp).and_then(|mut f| f.write_all(&header_bytes(0)).map(|()| f)) {
            Ok(file) => Sink::Rebuild {
                _lock: lock,
                tmp,
                file,
                written: 0,
            },
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                tracing::debug!(index = %tmp.display(), error = %e, "cannot write a search index");
                Sink::Off
            }
        }
    }

    fn push(&mut self, line: &[u8]) {
        let result = match self {
            Sink::Append {
                path,
                file,
                written,
                newline_first,
            } => {
                let opened = match file {
                    Some(f) => Ok(f),
                    None => open_append_create(path).map(|(f, _)| file.insert(f)),
                };
                opened.and_then(|f| {
                    if std::mem::take(newline_first) {
                        let mut bytes = Vec::with_capacity(line.len() + 1);
                        bytes.push(b'\n');
                        bytes.extend_from_slice(line);
                        f.write_all(&bytes)?;
                        *written += 1;
                    } else {
                        f.write_all(line)?;
                    }
                    *written += line.len() as u64;
                    Ok(())
                })
            }
            Sink::Rebuild { file, written, .. } => {
                file.write_all(line).map(|()| *written += line.len() as u64)
            }
            Sink::Off => Ok(()),
        };
        if let Err(e) = result {
            tracing::debug!(error = %e, "could not add to the search index");
            if let Sink::Rebuild { tmp, .. } = self {
                let _ = fs::remove_file(&*tmp);
            }
            *self = Sink::Off;
        }
    }

    /// Completes a rebuild (header, rename). Returns the bytes appended to the index in use.
    fn finish(self, layout: &Layout) -> u64 {
        match self {
            Sink::Append { written, .. } => written,
            Sink::Rebuild {
                _lock,
                tmp,
                file,
                written,
            } => {
                let done = file
                    .write_all_at(&header_bytes(written), 0)
                    .and_then(|()| fs::rename(&tmp, layout.search_index()));
                if let Err(e) = done {
                    let _ = fs::remove_file(&tmp);
                    tracing::debug!(index = %tmp.display(), error = %e, "could not write the search index");
                }
                0
            }
            Sink::Off => 0,
        }
    }
}

/// Rewrites the index with only its live entries when dead ones outweigh them, or when saves
/// can no longer append to it. Lines appended after `scan` read the file are kept (those
/// appended while the new file is written are lost, which only costs a snapshot read).
fn maybe_compact(layout: &Layout, scan: &Scan, appended: u64) -> io::Result<()> {
    let path = layout.search_index();
    let len = scan.file.metadata()?.len();
    let live = scan.live + appended;
    let dead = len.saturating_sub(HEADER_LEN + live);
    if dead < live.max(COMPACT_DEAD_MIN) && len <= append_room(scan.header_live) {
        return Ok(());
    }
    let lock_path = layout.search_lock();
    let Some(_lock) = FileLock::try_exclusive(&lock_path)? else {
        return Ok(());
    };
    // Another process may have rewritten it since this search opened it.
    let current = fs::symlink_metadata(&path)?;
    let ours = scan.file.metadata()?;
    if current.ino() != ours.ino() || current.dev() != ours.dev() {
        return Ok(());
    }
    let tmp = layout.search_temp(&random_suffix());
    let written = (|| -> io::Result<()> {
        let mut out = create_new_file(&tmp)?;
        out.write_all(&header_bytes(0))?;
        let mut kept = 0u64;
        let mut buf = vec![0u8; 1 << 20];
        let mut ranges: Vec<(u64, u64)> = scan
            .used
            .iter()
            .flatten()
            .map(|u| (u.line_off, u.line_len))
            .collect();
        ranges.sort_unstable();
        // Neighbouring lines are copied in one go.
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
        for (off, n) in ranges {
            match merged.last_mut() {
                Some((o, l)) if *o + *l == off => *l += n,
                _ => merged.push((off, n)),
            }
        }
        for (off, n) in merged {
            let mut done = 0;
            while done < n {
                let k = (n - done).min(buf.len() as u64) as usize;
                scan.file.read_exact_at(&mut buf[..k], off + done)?;
                out.write_all(&buf[..k])?;
                done += k as u64;
            }
            kept += n;
        }
        // The tail: this search's own entries and other processes' saves since the scan, up
        // to the last whole line.
        let mut tail = &scan.file;
        tail.seek(SeekFrom::Start(scan.scanned))?;
        let mut last_newline = 0u64;
        let mut copied = 0u64;
        loop {
            let k = match tail.read(&mut buf) {
                Ok(0) => break,
                Ok(k) => k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if let Some(p) = buf[..k].iter().rposition(|b| *b == b'\n') {
                last_newline = copied + p as u64 + 1;
            }
            out.write_all(&buf[..k])?;
            copied += k as u64;
        }
        kept += last_newline;
        out.set_len(HEADER_LEN + kept)?;
        out.write_all_at(&header_bytes(kept), 0)?;
        fs::rename(&tmp, &path)
    })();
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests;
