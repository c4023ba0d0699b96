//! The listing cache `<root>/sessions/.index.json` and its journal `.index.journal`.
//!
//! The cache maps each snapshot file name to the file's identity (device, inode, length,
//! modification and change times) and what parsing it gave: its [`SessionSummary`], or why it
//! is malformed. Every snapshot write appends one line to the journal (the new file's identity
//! and summary), so a session saved by any process is known to the next list without parsing
//! it; the list folds the journal into the cache and empties it.
//!
//! An entry is used only while the file's identity is unchanged, so the cache and the journal
//! can be stale, missing, corrupt or written by another process without ever giving a wrong
//! answer: at worst a file is read again. An identity can repeat (an inode freed and reused
//! within one timestamp tick, with the same length), so an entry is also checked against the
//! revision at the start of the file, unless the file's change time lies more than
//! [`TRUST_MARGIN_NS`] before the moment the entry was verified: a file written since then
//! would carry a later change time, so it cannot have the same identity. Listing is therefore
//! one `readdir` plus one `stat` per snapshot, a small read only for files changed in the last
//! seconds, and a parse only for new or changed snapshots that no journal line describes.
//! The cache is rewritten only when that saves later lists real work (see
//! [`fold_threshold`]): a list after an ordinary prompt reads the journal instead.
//! The stats, reads and parses are spread over up to [`MAX_LIST_THREADS`] threads, each with
//! at least [`FILES_PER_THREAD`] snapshots (so from 2,048 snapshots on).

use std::collections::{HashMap, HashSet};
use std::fs::{self, File};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use acpx_model::{RecordId, SessionSummary, SkippedEntry, StoreError, StoreResult, SESSION_SCHEMA};
use serde::{Deserialize, Serialize};

use crate::fsutil::{
    create_new_file, io_err, open_append, open_dir, open_read, random_suffix, read_file, stat_in,
    FileIdent,
};
use crate::layout::{classify, segment_owner, tombstone_owner, Entry, Layout};
use crate::summary::STREAMED_FROM;
use acpx_lock::FileLock;

/// Version 2: summaries carry the session's usage (`SessionSummary::usage`); a cache or a
/// journal line of version 1 lacks it, so neither is used (the files are read again once).
const INDEX_VERSION: u32 = 2;

/// Why a session whose snapshot is missing but whose log is left is damaged (`load`, `list`).
pub(crate) const MISSING_SNAPSHOT: &str = "the snapshot is missing but the session's event log \
     is still there: run `acpx fsck --repair` to rebuild the snapshot from the log";

/// How far a file's change time must lie before an entry's verification for the identity
/// alone to be trusted: well above the kernel's timestamp granularity (a clock tick) and small
/// clock adjustments. A wall clock set back by more than this while a session is saved could
/// make one list show the summary of the file's previous content (the next save corrects it).
const TRUST_MARGIN_NS: i64 = 2_000_000_000;

/// Past this size the journal is no longer appended to (no list has folded it in a long
/// time); the files written meanwhile are read by the next list instead.
const JOURNAL_MAX_BYTES: u64 = 16 << 20;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct IndexEntry {
    ident: FileIdent,
    /// Wall-clock nanoseconds at which the file was known to have `ident` and the content
    /// summarized here (0 in caches written before this field existed: never trusted alone).
    #[serde(default)]
    verified_ns: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    summary: Option<SessionSummary>,
    /// Why the file is malformed (when `summary` is absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct IndexFile {
    version: u32,
    entries: HashMap<String, Box<IndexEntry>>,
}

#[derive(Serialize)]
struct IndexFileRef<'a> {
    version: u32,
    entries: &'a HashMap<String, Box<IndexEntry>>,
}

/// One journal line: a snapshot file written by this store and what it holds.
#[derive(Serialize)]
struct JournalLineRef<'a> {
    version: u32,
    name: &'a str,
    ident: FileIdent,
    verified_ns: i64,
    summary: &'a SessionSummary,
}

#[derive(Deserialize)]
struct JournalLine {
    /// [`INDEX_VERSION`] of the writer; absent (0) in lines written before version 2.
    #[serde(default)]
    version: u32,
    name: String,
    ident: FileIdent,
    verified_ns: i64,
    summary: SessionSummary,
}

/// Wall-clock nanoseconds since the Unix epoch (the clock file times come from).
pub(crate) fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// Notes in the journal that `<id>.json` now has `ident` and holds `summary`. Best effort
/// and not synced: a lost or torn line only means the next list reads the file.
pub(crate) fn journal_saved(
    layout: &Layout,
    id: &RecordId,
    ident: FileIdent,
    summary: &SessionSummary,
    verified_ns: i64,
) {
    let name = format!("{id}.json");
    let line = JournalLineRef {
        version: INDEX_VERSION,
        name: &name,
        ident,
        verified_ns,
        summary,
    };
    let Ok(mut bytes) = serde_json::to_vec(&line) else {
        return;
    };
    bytes.push(b'\n');
    let path = layout.index_journal();
    let appended = open_append(&path).and_then(|mut f| {
        if f.metadata()?.len() > JOURNAL_MAX_BYTES {
            return Ok(());
        }
        // One `write` call with O_APPEND: lines of concurrent writers do not interleave.
        f.write_all(&bytes)
    });
    if let Err(e) = appended {
        tracing::debug!(journal = %path.display(), error = %e, "could not note a save in the listing journal");
    }
}

/// Reads the journal: the last line per file name (torn, foreign or older-version lines are
/// ignored), and the journal's length.
fn read_journal(layout: &Layout) -> (HashMap<String, Box<IndexEntry>>, u64) {
    let mut out = HashMap::new();
    let Ok(bytes) = read_file(&layout.index_journal()) else {
        return (out, 0);
    };
    for line in bytes.split(|b| *b == b'\n') {
        if let Ok(l) = serde_json::from_slice::<JournalLine>(line) {
            if l.version != INDEX_VERSION {
                continue;
            }
            out.insert(
                l.name,
                Box::new(IndexEntry {
                    ident: l.ident,
                    verified_ns: l.verified_ns,
                    summary: Some(l.summary),
                    error: None,
                }),
            );
        }
    }
    (out, bytes.len() as u64)
}

/// The in-process copy of the index, loaded from disk on first use.
#[derive(Debug, Default)]
pub(crate) struct IndexCache {
    loaded: bool,
    /// Boxed: a listing moves every entry several times (into its file's work item, through
    /// the threads, into the new map), and an entry with its summary is a few hundred bytes.
    entries: HashMap<String, Box<IndexEntry>>,
    /// Bytes of the cache file read at load; `None` when there was no usable one.
    cache_bytes: Option<u64>,
}

/// What one `list_all` found.
pub(crate) struct Listing {
    pub summaries: Vec<SessionSummary>,
    /// The identity of the file each summary came from (same order as `summaries`).
    pub idents: Vec<FileIdent>,
    pub skipped: Vec<SkippedEntry>,
    /// How many snapshot files had to be parsed (the rest came from the cache).
    pub parsed: usize,
}

/// What a listing's `readdir` saw besides snapshots: sessions with event segments, and
/// tombstones of deletes under way (see [`Layout::tombstone`]).
#[derive(Default)]
struct LogsWithoutSnapshot {
    snapshots: HashSet<RecordId>,
    logs: HashSet<RecordId>,
    tombstones: HashSet<RecordId>,
}

impl LogsWithoutSnapshot {
    fn note(&mut self, name: &str) {
        if let Some(id) = segment_owner(name) {
            self.logs.insert(id);
        } else if let Some(id) = tombstone_owner(name) {
            self.tombstones.insert(id);
        }
    }

    /// Sessions with a log but neither a snapshot nor a tombstone: damaged, not deleted
    /// (docs/format.md § Damaged snapshots). `readdir` is not atomic, so a candidate is
    /// checked again on its own files (a delete or create may have run meanwhile).
    fn damaged(self, layout: &Layout) -> Vec<RecordId> {
        let mut out: Vec<RecordId> = self
            .logs
            .into_iter()
            .filter(|id| !self.snapshots.contains(id) && !self.tombstones.contains(id))
            .filter(|id| {
                [layout.snapshot(id), layout.tombstone(id)]
                    .iter()
                    .all(|p| matches!(fs::symlink_metadata(p), Err(e) if e.kind() == io::ErrorKind::NotFound))
            })
            .collect();
        out.sort();
        out
    }
}

/// The revision of a snapshot as this store writes it, read from its first bytes: the
/// document starts `{"schema": ..., "revision": N,` (pretty-printed, in this key order). `None`
/// when the file does not start that way (written by something else): parse it instead.
pub(crate) fn revision_from_prefix(prefix: &[u8]) -> Option<u64> {
    let head = format!("{{\n  \"schema\": \"{SESSION_SCHEMA}\",\n  \"revision\": ");
    let rest = prefix.strip_prefix(head.as_bytes())?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || digits > 20 || rest.get(digits) != Some(&b',') {
        return None;
    }
    std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()
}

/// [`revision_from_prefix`] of an open snapshot file (one small read).
pub(crate) fn read_revision_prefix(file: &File) -> io::Result<Option<u64>> {
    let mut buf = [0u8; 96];
    let mut n = 0;
    while n < buf.len() {
        match file.read_at(&mut buf[n..], n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(revision_from_prefix(&buf[..n]))
}

/// `field `x`: message`, the reason text of a malformed snapshot.
pub(crate) fn reason(field: &str, message: &str) -> String {
    format!("field `{field}`: {message}")
}

impl IndexCache {
    fn load(&mut self, layout: &Layout) {
        if self.loaded {
            return;
        }
        self.loaded = true;
        let path = layout.index();
        let parsed = read_file(&path).ok().and_then(|b| {
            let len = b.len() as u64;
            serde_json::from_slice::<IndexFile>(&b)
                .ok()
                .map(|f| (f, len))
        });
        match parsed {
            Some((f, len)) if f.version == INDEX_VERSION => {
                self.entries = f.entries;
                self.cache_bytes = Some(len);
            }
            Some(_) | None => {
                self.cache_bytes = None;
                tracing::debug!(index = %path.display(), "no usable listing cache; rebuilding it");
            }
        }
    }

    /// Lists every snapshot in the directory (summaries in no particular order), keeping in
    /// the listing only the summaries `keep` accepts (the skipped entries are all there). Every file is verified all the same; only
    /// the copies of summaries nobody asked for are spared (with 10k sessions, a scope
    /// lookup's list keeps a handful of them).
    pub fn list_matching(
        &mut self,
        layout: &Layout,
        keep: &dyn Fn(&SessionSummary) -> bool,
    ) -> StoreResult<Listing> {
        self.load(layout);
        // Anything verified from here on held its content at least since this instant.
        let started_ns = now_ns();
        let (mut journal, journal_len) = read_journal(layout);
        let dir = layout.dir();
        let rd = fs::read_dir(dir).map_err(|e| io_err(dir, e))?;
        let mut logs_and_tombstones = LogsWithoutSnapshot::default();
        // First the directory, with each snapshot's known entries taken out of the maps
        // (whatever is left in `self.entries` at the end was deleted) ...
        let mut files = Vec::with_capacity(self.entries.len());
        for entry in rd {
            let entry = entry.map_err(|e| io_err(dir, e))?;
            let os_name = entry.file_name();
            // A name that is not UTF-8 cannot be `<record id>.json`.
            let Some(name) = os_name.to_str() else {
                continue;
            };
            let Some(Entry::Snapshot(id)) = classify(name) else {
                logs_and_tombstones.note(name);
                continue;
            };
            logs_and_tombstones.snapshots.insert(id.clone());
            let known = [journal.remove(name), self.entries.remove(name)];
            files.push(SnapshotFile {
                path: entry.path(),
                name: name.to_owned(),
                id,
                known,
            });
        }
        // ... then each file's stat, and its read where the entries cannot answer, spread over
        // a few threads: with 10k sessions this part is most of a listing, and it is system
        // calls on independent files.
        let dir_file = open_dir(dir).map_err(|e| io_err(dir, e))?;
        let looked = look_at_all(files, &dir_file, started_ns);
        let mut fresh: HashMap<String, Box<IndexEntry>> = HashMap::with_capacity(looked.len());
        let mut out = Listing {
            summaries: Vec::with_capacity(looked.len()),
            idents: Vec::with_capacity(looked.len()),
            skipped: Vec::new(),
            parsed: 0,
        };
        let mut remembered = 0usize;
        let mut vanished = false;
        for (file, look) in looked {
            let e = match look {
                Look::Gone => {
                    vanished = true;
                    continue;
                }
                Look::Unusable(reason) => {
                    skip(&mut out, &file.id, &file.path, reason);
                    continue;
                }
                Look::Entry {
                    entry,
                    parsed,
                    remember,
                } => {
                    out.parsed += usize::from(parsed);
                    remembered += usize::from(remember && !parsed);
                    entry
                }
            };
            match (&e.summary, &e.error) {
                (Some(s), _) => {
                    if keep(s) {
                        out.summaries.push(s.clone());
                        out.idents.push(e.ident);
                    }
                }
                (None, err) => skip(
                    &mut out,
                    &file.id,
                    &file.path,
                    err.clone().unwrap_or_else(|| "malformed snapshot".into()),
                ),
            }
            fresh.insert(file.name, e);
        }
        for id in logs_and_tombstones.damaged(layout) {
            skip(
                &mut out,
                &id,
                &layout.snapshot(&id),
                MISSING_SNAPSHOT.into(),
            );
        }
        let gone = vanished || !self.entries.is_empty();
        self.entries = fresh;
        let worth_writing = self.cache_bytes.is_none()
            || out.parsed > 0
            || gone
            || remembered >= REMEMBER_BEFORE_WRITING
            || journal_len >= fold_threshold(self.cache_bytes);
        if worth_writing {
            if let Some(written) = write_index(layout, &self.entries, journal_len) {
                self.cache_bytes = Some(written);
            }
        }
        Ok(out)
    }
}

/// A snapshot file a listing found, with the entries the journal and the cache hold for it.
struct SnapshotFile {
    path: PathBuf,
    name: String,
    id: RecordId,
    /// The journal's entry first (newer), then the cache's.
    known: [Option<Box<IndexEntry>>; 2],
}

/// What a listing learned about one snapshot file.
enum Look {
    /// Removed since the `readdir`.
    Gone,
    /// Not a readable regular file: the reason to report.
    Unusable(String),
    /// Its entry: one of the known ones if the file still is what it describes (`parsed`
    /// false), else one made by parsing the file. `remember`: the cache should be rewritten
    /// for it.
    Entry {
        entry: Box<IndexEntry>,
        parsed: bool,
        remember: bool,
    },
}

/// Below this many files one thread does the work (starting threads would cost more).
const FILES_PER_THREAD: usize = 1_024;
/// At most this many threads look at files.
const MAX_LIST_THREADS: usize = 4;

/// [`look_at`] for every file, on up to [`MAX_LIST_THREADS`] threads.
fn look_at_all(files: Vec<SnapshotFile>, dir: &File, started_ns: i64) -> Vec<(SnapshotFile, Look)> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(MAX_LIST_THREADS)
        .min(files.len() / FILES_PER_THREAD)
        .max(1);
    let look_all = |part: Vec<SnapshotFile>| -> Vec<(SnapshotFile, Look)> {
        part.into_iter()
            .map(|mut f| {
                let look = look_at(&mut f, dir, started_ns);
                (f, look)
            })
            .collect()
    };
    if threads == 1 {
        return look_all(files);
    }
    let per_thread = files.len().div_ceil(threads);
    let mut parts = Vec::with_capacity(threads);
    let mut rest = files;
    while rest.len() > per_thread {
        let tail = rest.split_off(per_thread);
        parts.push(rest);
        rest = tail;
    }
    parts.push(rest);
    std::thread::scope(|scope| {
        let mut looked = Vec::new();
        let mut handles = Vec::new();
        for part in parts {
            // The part is handed over once the thread runs, so that a thread that cannot be
            // started (a process limit) leaves its part to this one instead of losing it.
            let (tx, rx) = std::sync::mpsc::channel::<Vec<SnapshotFile>>();
            let started = std::thread::Builder::new()
                .name("acpx-list".into())
                .spawn_scoped(scope, move || look_all(rx.recv().unwrap_or_default()));
            match started {
                Ok(h) => match tx.send(part) {
                    Ok(()) => handles.push(h),
                    // The thread is gone already (it could only have panicked): its join
                    // below carries that; the part is done here.
                    Err(std::sync::mpsc::SendError(part)) => {
                        handles.push(h);
                        looked.extend(look_all(part));
                    }
                },
                Err(_) => looked.extend(look_all(part)),
            }
        }
        for h in handles {
            match h.join() {
                Ok(part) => looked.extend(part),
                // A panic in a worker is a bug; carry it to the caller as one.
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        looked
    })
}

/// Stats one snapshot file and finds its entry: a known one that still describes it, else a
/// new one from parsing the file.
fn look_at(f: &mut SnapshotFile, dir: &File, started_ns: i64) -> Look {
    let stat = match stat_in(dir, &f.name, &f.path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Look::Gone,
        Err(e) => return Look::Unusable(format!("cannot stat the file: {e}")),
    };
    if !stat.is_file {
        return Look::Unusable(
            "not a regular file (symlinks and directories are not followed)".into(),
        );
    }
    let ident = stat.ident;
    let mut remember = false;
    // Of the entries that describe this very file, the one verified last: a journal line
    // kept across lists must not make a trusted entry of this process look new again.
    let usable = f
        .known
        .iter_mut()
        .filter_map(Option::take)
        .filter(|e| e.ident == ident)
        .max_by_key(|e| e.verified_ns)
        .and_then(|mut e| {
            if trusted(&e) {
                return Some(e);
            }
            if !revision_agrees(&f.path, &e) {
                return None;
            }
            e.verified_ns = started_ns;
            // Remembered only once it makes the entry trusted, so that a file saved in the
            // last seconds does not rewrite the cache on every list.
            remember = trusted(&e);
            Some(e)
        });
    if let Some(entry) = usable {
        return Look::Entry {
            entry,
            parsed: false,
            remember,
        };
    }
    let read = crate::summary::read_summary(&f.id, &f.path, ident.len, STREAMED_FROM);
    let parsed = match read {
        Ok(p) => p,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Look::Gone,
        Err(e) => return Look::Unusable(format!("cannot read the file: {e}")),
    };
    let entry = match parsed {
        Ok(summary) => IndexEntry {
            ident,
            verified_ns: started_ns,
            summary: Some(summary),
            error: None,
        },
        Err((field, message)) => IndexEntry {
            ident,
            verified_ns: started_ns,
            summary: None,
            error: Some(reason(&field, &message)),
        },
    };
    Look::Entry {
        entry: Box::new(entry),
        parsed: true,
        remember: true,
    }
}

/// Entries newly verified by their revision (files saved in the last seconds, now trusted)
/// that make rewriting the cache worth it: fewer cost the next list a read each, less than
/// the rewrite.
const REMEMBER_BEFORE_WRITING: usize = 64;

/// The journal length past which a list folds it into the cache. Rewriting the cache costs
/// its whole size (4.8 MB with 10k sessions) while reading the journal costs only its lines,
/// one per snapshot write since the last fold: folding at every list after a prompt made
/// every command on a large store rewrite the cache. The journal is folded once it is a
/// quarter of the cache (at least 256 KiB), well before it stops being appended to.
fn fold_threshold(cache_bytes: Option<u64>) -> u64 {
    (cache_bytes.unwrap_or(0) / 4).clamp(256 << 10, JOURNAL_MAX_BYTES / 2)
}

/// Whether `e` can be used on its identity alone (see the module docs).
fn trusted(e: &IndexEntry) -> bool {
    e.ident.ctime_ns < e.verified_ns.saturating_sub(TRUST_MARGIN_NS)
}

/// A file identity can repeat (a freed inode reused within one timestamp tick, same length),
/// so a cached entry is also checked against the revision at the start of the file, which
/// every save of this store increments. Files in another layout are judged by identity.
fn revision_agrees(path: &Path, e: &IndexEntry) -> bool {
    let Ok(file) = open_read(path) else {
        return false;
    };
    match read_revision_prefix(&file) {
        Ok(Some(rev)) => e.summary.as_ref().is_some_and(|s| s.revision == rev),
        Ok(None) => true,
        Err(_) => false,
    }
}

fn skip(out: &mut Listing, id: &RecordId, path: &Path, reason: String) {
    let location = path.display().to_string();
    // Debug, not warn: the skipped entry goes back to the caller, which reports it (the
    // CLI's `warning:` line, fsck, the lookup's damaged-session error); a warning here
    // printed the same problem twice, and at every command that lists.
    tracing::debug!(file = %location, %reason, "skipping a malformed session snapshot");
    out.skipped.push(SkippedEntry {
        acpx_record_id: Some(id.clone()),
        location,
        reason,
    });
}

/// Writes the cache (temp file, then rename; no fsync: losing it only costs a re-parse), then
/// empties the journal if it still has the `journal_len` bytes folded in (a line appended in
/// between may be lost, which only costs a read). Best effort: a read-only directory or a
/// concurrent writer just means no cache this time.
fn write_index(
    layout: &Layout,
    entries: &HashMap<String, Box<IndexEntry>>,
    journal_len: u64,
) -> Option<u64> {
    let result = (|| -> StoreResult<Option<u64>> {
        let lock_path = layout.index_lock();
        let Some(_lock) = FileLock::try_exclusive(&lock_path).map_err(|e| io_err(&lock_path, e))?
        else {
            return Ok(None);
        };
        let body = IndexFileRef {
            version: INDEX_VERSION,
            entries,
        };
        let bytes = serde_json::to_vec(&body).map_err(|e| StoreError::Backend {
            backend: "fs",
            message: format!("cannot serialize the listing cache: {e}"),
        })?;
        let tmp = layout.index_temp(&random_suffix());
        let written = create_new_file(&tmp)
            .and_then(|mut f| f.write_all(&bytes))
            .and_then(|()| fs::rename(&tmp, layout.index()));
        if let Err(e) = written {
            let _ = fs::remove_file(&tmp);
            return Err(io_err(&tmp, e));
        }
        if journal_len > 0 {
            let journal = layout.index_journal();
            let emptied = open_append(&journal).and_then(|f| {
                if f.metadata()?.len() == journal_len {
                    f.set_len(0)?;
                }
                Ok(())
            });
            emptied.map_err(|e| io_err(&journal, e))?;
        }
        Ok(Some(bytes.len() as u64))
    })();
    result.unwrap_or_else(|e| {
        tracing::debug!(error = %e, "could not write the listing cache");
        None
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use acpx_model::{NewSession, SessionRecord, Timestamp};

    #[test]
    fn revision_prefix_matches_what_the_store_writes() {
        let mut r = SessionRecord::new(
            NewSession {
                acpx_record_id: RecordId::parse("a").unwrap(),
                acp_session_id: "acp".into(),
                agent_session_id: None,
                agent_command: "agent".into(),
                cwd: "/r".into(),
                name: None,
            },
            Timestamp::now(),
        );
        for rev in [0u64, 1, 9, 10, 12_345, u64::MAX] {
            r.revision = rev;
            let bytes = r.to_json_vec().unwrap();
            assert_eq!(
                revision_from_prefix(&bytes[..96.min(bytes.len())]),
                Some(rev)
            );
        }
        for other in [
            &b"{\"schema\":\"acpx.session.v1\",\"revision\":3,"[..],
            b"{\n  \"schema\": \"acpx.session.v1\",\n  \"revision\": -3,",
            b"{\n  \"schema\": \"acpx.session.v1\",\n  \"revision\": 3",
            b"{\n  \"schema\": \"acpx.session.v1\",\n  \"revision\": ,",
            b"",
        ] {
            assert_eq!(revision_from_prefix(other), None);
        }
    }
}
