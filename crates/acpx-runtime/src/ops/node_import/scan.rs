//! The Node acpx home: finding its session records and their journal segments, and importing
//! them all into a store.

use std::path::{Path, PathBuf};

use acpx_model::{RecordId, SessionSummary, Store, StoreError, Timestamp};
use serde_json::Value;

use super::archive::{is_node_archive, parse_node_archive};
use super::convert::convert_session;
use super::loadable::{encode_uri_component, node_would_not_load};
use super::record::{is_node_record, str_of, Converted, ThreadSource};
use crate::ops::transfer::store_new_session;
use crate::ops::{OpsError, OpsResult};

/// The journal segments of a record file, oldest first: `.stream.<N>.ndjson` from the
/// highest N down to 1, then the active `.stream.ndjson`.
pub fn journal_files(record_file: &Path) -> Vec<PathBuf> {
    let Some(dir) = record_file.parent() else {
        return Vec::new();
    };
    let Some(base) = record_file
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_suffix(".json"))
    else {
        return Vec::new();
    };
    let mut rotated: Vec<(u32, PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_str()?.to_owned();
            let n = name
                .strip_prefix(base)?
                .strip_prefix(".stream.")?
                .strip_suffix(".ndjson")?
                .parse::<u32>()
                .ok()?;
            Some((n, e.path()))
        })
        .collect();
    rotated.sort_by_key(|(n, _)| std::cmp::Reverse(*n));
    let mut files: Vec<PathBuf> = rotated.into_iter().map(|(_, p)| p).collect();
    let active = dir.join(format!("{base}.stream.ndjson"));
    if active.is_file() {
        files.push(active);
    }
    files
}

/// The most a Node home's file may hold: far more than Node writes (its segments rotate at a
/// few MiB), far less than a hostile file could make acpx read.
pub const MAX_NODE_FILE_BYTES: u64 = 1 << 30;

/// Reads a file of a Node home, which may be hostile: a regular file only (a symbolic link, a
/// FIFO, which would hang the import, or a device such as `/dev/zero`, which would fill the
/// memory, is refused), of at most [`MAX_NODE_FILE_BYTES`].
pub fn read_regular_file(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| {
            if acpx_lock::is_symlink_refusal(&e) {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "a symbolic link; a Node home's files are read only as regular files",
                )
            } else {
                e
            }
        })?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file (a FIFO or a device); refusing to read it",
        ));
    }
    if meta.len() > MAX_NODE_FILE_BYTES {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "{} bytes, more than the {} MiB a Node home's file may hold",
                meta.len(),
                MAX_NODE_FILE_BYTES >> 20
            ),
        ));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(MAX_NODE_FILE_BYTES + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_NODE_FILE_BYTES {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "it grew past the size a Node home's file may hold while it was read",
        ));
    }
    Ok(bytes)
}

/// A segment whose last line has no newline: a write Node never finished.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    /// The segment.
    pub path: PathBuf,
    /// Where the torn line starts (the size of the good prefix).
    pub offset: u64,
    /// Its length in bytes.
    pub bytes: u64,
}

/// The lines of a journal, and the torn tails left out of them.
#[derive(Debug, Clone, Default)]
pub struct JournalLines {
    /// Complete lines, oldest first.
    pub lines: Vec<String>,
    /// Torn last lines (withheld, as Node's own reader does).
    pub torn: Vec<TornTail>,
}

/// The complete lines of journal segments, oldest first; a torn last line is withheld and
/// reported with its byte offset.
pub fn read_journal(files: &[PathBuf]) -> OpsResult<JournalLines> {
    let mut out = JournalLines::default();
    for f in files {
        let bytes = read_regular_file(f).map_err(|source| OpsError::Read {
            path: f.clone(),
            source,
        })?;
        journal_lines(&bytes, f, &mut out);
    }
    Ok(out)
}

/// Splits one segment's bytes into `out` (see [`read_journal`]).
pub fn journal_lines(bytes: &[u8], path: &Path, out: &mut JournalLines) {
    let good = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    if good < bytes.len() {
        out.torn.push(TornTail {
            path: path.to_path_buf(),
            offset: good as u64,
            bytes: (bytes.len() - good) as u64,
        });
    }
    let text = String::from_utf8_lossy(&bytes[..good]);
    out.lines.extend(text.lines().map(str::to_owned));
}

/// The Node session record files under `dir` (or `dir/sessions`), sorted. A directory that
/// cannot be read is [`OpsError::Invalid`].
pub fn record_files(dir: &Path) -> OpsResult<Vec<PathBuf>> {
    let sessions = if dir.join("sessions").is_dir() {
        dir.join("sessions")
    } else {
        dir.to_path_buf()
    };
    let entries = std::fs::read_dir(&sessions)
        .map_err(|e| OpsError::Invalid(format!("cannot read {}: {e}", sessions.display())))?;
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.is_file()
                && p.extension().is_some_and(|x| x == "json")
                && !p
                    .file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.contains(".stream.") || n.starts_with('.'))
        })
        .collect();
    files.sort();
    Ok(files)
}

/// One imported Node session.
#[derive(Debug, Clone)]
pub struct NodeImported {
    /// The record file it came from.
    pub origin: String,
    /// The Node record id (the stored id differs when it was not a valid one, or with
    /// `new_id`).
    pub node_record_id: String,
    /// The session as stored, summarized: the report of a large Node home holds no
    /// conversation (each session leaves memory once stored).
    pub session: SessionSummary,
    /// Events stored.
    pub events: usize,
    /// Where its conversation came from.
    pub thread_source: ThreadSource,
    /// Things worth telling the user (ids changed, journal incomplete, …).
    pub notes: Vec<String>,
}

/// Why a record file was not imported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkipKind {
    /// Not a Node session record: not an error.
    Ignored,
    /// A Node record file that Node itself would not load (not JSON, wrong schema, a file name
    /// that is not its record id, …): not imported, so no phantom session appears. Not an
    /// error: Node ignores these files too.
    NotLoadable,
    /// The session is in the store already (an earlier import): not an error.
    AlreadyPresent,
    /// It could not be converted or stored.
    Failed,
}

/// A record file that was not imported.
#[derive(Debug, Clone)]
pub struct NodeSkipped {
    /// The file.
    pub path: String,
    /// Why not, for people.
    pub reason: String,
    /// Why not, for programs.
    pub kind: SkipKind,
}

/// How [`import_node`] works.
#[derive(Debug, Clone, Default)]
pub struct NodeImportOptions {
    /// Give every session a fresh record id (a copy next to an earlier import).
    pub new_id: bool,
    /// Convert and report, store nothing.
    pub dry_run: bool,
    /// The directory a Node export archive's relative `cwd` is resolved against (the home
    /// directory, as Node's own import does); `None` keeps it as it is.
    pub home: Option<PathBuf>,
}

/// What [`import_node_home`] did.
#[derive(Debug, Clone, Default)]
pub struct NodeImportReport {
    /// Record files found.
    pub files: usize,
    /// Sessions imported, in file name order.
    pub imported: Vec<NodeImported>,
    /// Files not imported.
    pub skipped: Vec<NodeSkipped>,
}

impl NodeImportReport {
    /// Files that failed (neither imported, nor ignored, nor already present).
    pub fn failed(&self) -> usize {
        self.skipped
            .iter()
            .filter(|s| s.kind == SkipKind::Failed)
            .count()
    }
}

/// Imports every session of a Node acpx home `dir` (or its `sessions/` directory) into
/// `store`: [`import_node`] with only `new_id` set and no progress.
pub async fn import_node_home(
    store: &dyn Store,
    dir: &Path,
    new_id: bool,
) -> OpsResult<NodeImportReport> {
    let options = NodeImportOptions {
        new_id,
        ..NodeImportOptions::default()
    };
    import_node(store, dir, &options, &|_, _| {}).await
}

/// Imports into `store` every session Node acpx would load from `path`: a Node home (or its
/// `sessions/` directory), one record file, or a Node `sessions export` archive.
/// `progress(done, total)` is called after each file.
///
/// A file that cannot be converted or stored is skipped (each session is staged and committed
/// in one step, so nothing of it is stored), never fatal; files Node would not load are skipped with the reason
/// ([`SkipKind::NotLoadable`]); an unreadable directory is [`OpsError::Invalid`], an
/// unreadable journal [`OpsError::Read`].
pub async fn import_node(
    store: &dyn Store,
    path: &Path,
    options: &NodeImportOptions,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> OpsResult<NodeImportReport> {
    let files = if path.is_file() {
        vec![path.to_path_buf()]
    } else {
        record_files(path)?
    };
    let now = Timestamp::now();
    let mut report = NodeImportReport {
        files: files.len(),
        ..NodeImportReport::default()
    };
    for (done, file) in files.iter().enumerate() {
        match prepare(file, options, now)? {
            Prepared::Skip(kind, reason) => report.skipped.push(NodeSkipped {
                path: file.display().to_string(),
                reason,
                kind,
            }),
            Prepared::Session(conv) => store_one(store, file, *conv, options, &mut report).await,
        }
        progress(done + 1, files.len());
    }
    Ok(report)
}

enum Prepared {
    Skip(SkipKind, String),
    Session(Box<Converted>),
}

/// Reads and converts one file (record or archive), or says why it is skipped.
fn prepare(file: &Path, options: &NodeImportOptions, now: Timestamp) -> OpsResult<Prepared> {
    let origin = file.display().to_string();
    let doc: Value = match read_regular_file(file)
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
    {
        Ok(v) => v,
        Err(e) => {
            return Ok(Prepared::Skip(
                SkipKind::NotLoadable,
                format!("not JSON, Node would not load it: {e}"),
            ))
        }
    };
    let (doc, journal) = if is_node_archive(&doc) {
        match parse_node_archive(&doc, options.home.as_deref()) {
            Ok(a) => {
                let id = str_of(&a.record, "acpx_record_id").unwrap_or_default();
                let name = format!("{}.json", encode_uri_component(id));
                if let Some(why) = node_would_not_load(&a.record, &name) {
                    return Ok(Prepared::Skip(SkipKind::NotLoadable, why));
                }
                let journal = JournalLines {
                    lines: a.lines,
                    torn: Vec::new(),
                };
                (a.record, journal)
            }
            Err(e) => return Ok(Prepared::Skip(SkipKind::NotLoadable, e)),
        }
    } else {
        if !is_node_record(&doc) {
            return Ok(Prepared::Skip(
                SkipKind::Ignored,
                "not a Node acpx session record (no acpx_record_id)".into(),
            ));
        }
        let name = file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if let Some(why) = node_would_not_load(&doc, &name) {
            return Ok(Prepared::Skip(
                SkipKind::NotLoadable,
                format!("Node would not load it: {why}"),
            ));
        }
        let journal = read_journal(&journal_files(file))?;
        (doc, journal)
    };
    let mut conv = match convert_session(&doc, &journal.lines, &origin, now) {
        Ok(c) => c,
        Err(e) => return Ok(Prepared::Skip(SkipKind::Failed, e)),
    };
    for t in &journal.torn {
        conv.notes.push(format!(
            "the last line of {} is torn at byte offset {} ({} bytes, never finished by Node): \
             imported the {} bytes before it",
            t.path.display(),
            t.offset,
            t.bytes,
            t.offset
        ));
    }
    if options.new_id {
        let id = RecordId::generate();
        for e in &mut conv.events {
            e.acpx_record_id = id.clone();
        }
        conv.record.acpx_record_id = id;
    }
    Ok(Prepared::Session(Box::new(conv)))
}

/// Stores one converted session (or, in a dry run, checks that it could be).
async fn store_one(
    store: &dyn Store,
    file: &Path,
    conv: Converted,
    options: &NodeImportOptions,
    report: &mut NodeImportReport,
) {
    let origin = file.display().to_string();
    let id = conv.record.acpx_record_id.clone();
    let exists = || NodeSkipped {
        path: origin.clone(),
        reason: format!(
            "session {id} already exists in the store (pass --new-id to import a copy)"
        ),
        kind: SkipKind::AlreadyPresent,
    };
    let events = conv.events.len();
    let stored = if options.dry_run {
        match store.load(&id).await {
            Ok(_) => {
                report.skipped.push(exists());
                return;
            }
            Err(_) => Ok(conv.record),
        }
    } else {
        // A Node home is data from elsewhere too: the same directory and date rules as an
        // archive's (its agent command is the user's own Node acpx's).
        let mut record = conv.record;
        match crate::ops::transfer::admit_imported(&mut record) {
            Ok(()) => store_new_session(store, record, &conv.events).await,
            Err(e) => Err(e),
        }
    };
    match stored {
        Ok(record) => report.imported.push(NodeImported {
            origin,
            node_record_id: conv.original_id,
            session: record.summary(),
            events,
            thread_source: conv.thread_source,
            notes: conv.notes,
        }),
        Err(OpsError::Store(StoreError::AlreadyExists(_))) => report.skipped.push(exists()),
        // Staged: a failed store left nothing of the session (and a session that was there
        // before is `AlreadyExists`, never removed).
        Err(e) => {
            report.skipped.push(NodeSkipped {
                path: origin,
                reason: e.to_string(),
                kind: SkipKind::Failed,
            });
        }
    }
}
