//! File names inside `<root>/sessions`, and the parsing of names found there.
//!
//! Every name is derived from a validated [`RecordId`], which cannot contain a separator or start
//! with a dot, so no name can escape the directory or collide with the store's own hidden files
//! (`.index.json`, temp files), which all start with a dot.

use std::path::{Path, PathBuf};

use acpx_lock::SessionLockDir;
use acpx_model::RecordId;

/// The store's own listing cache.
pub(crate) const INDEX_FILE: &str = ".index.json";
/// The lock that serializes writers of [`INDEX_FILE`].
pub(crate) const INDEX_LOCK_FILE: &str = ".index.lock";
/// Lines appended by every snapshot write, folded into [`INDEX_FILE`] by the next list.
pub(crate) const INDEX_JOURNAL_FILE: &str = ".index.journal";
/// Prefix of temp files of the index (`.index.json.tmp.<pid>.<random>`).
pub(crate) const INDEX_TEMP_PREFIX: &str = ".index.json.tmp.";

/// The search index: per snapshot file identity, the searchable texts (see
/// [`crate::search_index`]).
pub(crate) const SEARCH_FILE: &str = ".search.ndjson";
/// The lock that serializes rewrites of [`SEARCH_FILE`].
pub(crate) const SEARCH_LOCK_FILE: &str = ".search.lock";
/// Prefix of temp files of the search index (`.search.ndjson.tmp.<pid>.<random>`).
pub(crate) const SEARCH_TEMP_PREFIX: &str = ".search.ndjson.tmp.";

/// Touched after each sweep for a crash's leftovers: its modification time says when the last
/// one ran (see `FsCore::open`).
pub(crate) const CLEANUP_MARK_FILE: &str = ".cleanup";

/// Paths of one store directory.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    pub sessions: PathBuf,
    /// The sessions' lock files, `<id>.lock` beside their snapshots.
    pub locks: SessionLockDir,
}

/// What a file name in the sessions directory is, when it belongs to the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Entry {
    /// `<id>.json`
    Snapshot(RecordId),
    /// `.<id>.json.tmp.<anything>`
    SnapshotTemp(RecordId),
    /// `.index.json.tmp.<anything>`
    IndexTemp,
    /// `.search.ndjson.tmp.<anything>`
    SearchTemp,
}

impl Layout {
    pub fn snapshot(&self, id: &RecordId) -> PathBuf {
        self.sessions.join(format!("{id}.json"))
    }

    pub fn snapshot_temp(&self, id: &RecordId, suffix: &str) -> PathBuf {
        self.sessions
            .join(format!(".{id}.json.tmp.{}.{suffix}", std::process::id()))
    }

    pub fn lock(&self, id: &RecordId) -> PathBuf {
        self.locks.path(id)
    }

    /// `<id>.lease`: the session's owner lease (`acpx_lock::lease_file`).
    pub fn lease(&self, id: &RecordId) -> PathBuf {
        self.sessions.join(format!("{id}.lease"))
    }

    /// `<id>.deleted`: the tombstone of a delete in progress (the snapshot renamed, or an empty
    /// file when there was none). While it exists the session is gone, whatever log files
    /// are left; the delete that wrote it (or the next open, create or delete) removes them.
    pub fn tombstone(&self, id: &RecordId) -> PathBuf {
        self.sessions.join(format!("{id}.deleted"))
    }

    /// Segment 0 is the active one (`<id>.events.ndjson`); `n >= 1` are older (`1` newest).
    pub fn segment(&self, id: &RecordId, n: u32) -> PathBuf {
        if n == 0 {
            self.sessions.join(format!("{id}.events.ndjson"))
        } else {
            self.sessions.join(format!("{id}.events.{n}.ndjson"))
        }
    }

    /// `<id>.events.<n>.ndjson.zst` (`n >= 1`): an older segment compressed when it was closed
    /// (docs/format.md § Compressed segments).
    pub fn segment_zst(&self, id: &RecordId, n: u32) -> PathBuf {
        self.sessions.join(format!("{id}.events.{n}.ndjson.zst"))
    }

    /// `<id>.events.<n>.ndjson.zst.tmp`: a compression in progress (or debris of one a crash
    /// interrupted; the next compression of that segment and a delete remove it).
    pub fn segment_zst_temp(&self, id: &RecordId, n: u32) -> PathBuf {
        self.sessions
            .join(format!("{id}.events.{n}.ndjson.zst.tmp"))
    }

    /// `<id>.events.torn-<unix-ms>`, with `-<k>` appended when `k > 0` (two set-asides in one
    /// millisecond).
    pub fn torn(&self, id: &RecordId, unix_ms: u128, k: u32) -> PathBuf {
        if k == 0 {
            self.sessions.join(format!("{id}.events.torn-{unix_ms}"))
        } else {
            self.sessions
                .join(format!("{id}.events.torn-{unix_ms}-{k}"))
        }
    }

    pub fn index(&self) -> PathBuf {
        self.sessions.join(INDEX_FILE)
    }

    pub fn index_journal(&self) -> PathBuf {
        self.sessions.join(INDEX_JOURNAL_FILE)
    }

    pub fn index_lock(&self) -> PathBuf {
        self.sessions.join(INDEX_LOCK_FILE)
    }

    pub fn index_temp(&self, suffix: &str) -> PathBuf {
        self.sessions.join(format!(
            "{INDEX_TEMP_PREFIX}{}.{suffix}",
            std::process::id()
        ))
    }

    pub fn cleanup_mark(&self) -> PathBuf {
        self.sessions.join(CLEANUP_MARK_FILE)
    }

    pub fn search_index(&self) -> PathBuf {
        self.sessions.join(SEARCH_FILE)
    }

    pub fn search_lock(&self) -> PathBuf {
        self.sessions.join(SEARCH_LOCK_FILE)
    }

    pub fn search_temp(&self, suffix: &str) -> PathBuf {
        self.sessions.join(format!(
            "{SEARCH_TEMP_PREFIX}{}.{suffix}",
            std::process::id()
        ))
    }

    pub fn dir(&self) -> &Path {
        &self.sessions
    }
}

/// Whether the process that wrote the snapshot temp file `name` (`.<id>.json.tmp.<pid>.…`)
/// still runs: a save writes its temp file before it takes the session's lock (the document
/// is streamed there, [`crate::core`]), so a temp file of a live process may be a save in
/// flight and is left alone; one of a process that is gone is debris. Reads `/proc/<pid>`
/// (Linux); a name without a pid counts as debris.
pub(crate) fn temp_writer_alive(name: &str) -> bool {
    let pid = name
        .split_once(".json.tmp.")
        .and_then(|(_, rest)| rest.split('.').next())
        .and_then(|p| p.parse::<u32>().ok());
    match pid {
        Some(pid) if pid == std::process::id() => true,
        Some(pid) => Path::new(&format!("/proc/{pid}")).exists(),
        None => false,
    }
}

/// Classifies a directory entry name. Names that are not the store's return `None` and are
/// never touched.
pub(crate) fn classify(name: &str) -> Option<Entry> {
    if let Some(rest) = name.strip_prefix('.') {
        if rest.starts_with("index.json.tmp.") {
            return Some(Entry::IndexTemp);
        }
        if name.starts_with(SEARCH_TEMP_PREFIX) {
            return Some(Entry::SearchTemp);
        }
        let (id, _) = rest.split_once(".json.tmp.")?;
        return RecordId::parse(id).ok().map(Entry::SnapshotTemp);
    }
    let id = name.strip_suffix(".json")?;
    RecordId::parse(id).ok().map(Entry::Snapshot)
}

/// The session whose event segment (active `<id>.events.ndjson`, older
/// `<id>.events.<n>.ndjson` or compressed `<id>.events.<n>.ndjson.zst`) `name` is.
pub(crate) fn segment_owner(name: &str) -> Option<RecordId> {
    if let Some(id) = name.strip_suffix(".events.ndjson") {
        return RecordId::parse(id).ok();
    }
    let name = name.strip_suffix(".zst").unwrap_or(name);
    let (id, n) = name.strip_suffix(".ndjson")?.rsplit_once('.')?;
    let id = id.strip_suffix(".events")?;
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    RecordId::parse(id).ok()
}

/// The session whose tombstone (`<id>.deleted`) `name` is.
pub(crate) fn tombstone_owner(name: &str) -> Option<RecordId> {
    RecordId::parse(name.strip_suffix(".deleted")?).ok()
}

/// Whether `name` is one of `id`'s event-log files other than the active segment: an older
/// segment (`<id>.events.<n>.ndjson`, compressed `….ndjson.zst`, or a compression's temp file
/// `….ndjson.zst.tmp`) or a set-aside torn tail (`<id>.events.torn-<digits>` or
/// `<id>.events.torn-<digits>-<digits>`).
pub(crate) fn is_log_file_of(name: &str, id: &RecordId) -> bool {
    let Some(rest) = name
        .strip_prefix(id.as_str())
        .and_then(|r| r.strip_prefix(".events."))
    else {
        return false;
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let plain = rest
        .strip_suffix(".ndjson.zst.tmp")
        .or_else(|| rest.strip_suffix(".ndjson.zst"))
        .or_else(|| rest.strip_suffix(".ndjson"));
    if let Some(n) = plain {
        return digits(n);
    }
    if let Some(t) = rest.strip_prefix("torn-") {
        return match t.split_once('-') {
            Some((ms, k)) => digits(ms) && digits(k),
            None => digits(t),
        };
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> RecordId {
        RecordId::parse(s).unwrap()
    }

    #[test]
    fn classifies_store_names_only() {
        assert_eq!(classify("abc.json"), Some(Entry::Snapshot(id("abc"))));
        assert_eq!(
            classify("a.events.1.json"),
            Some(Entry::Snapshot(id("a.events.1")))
        );
        assert_eq!(
            classify(".abc.json.tmp.12.ff"),
            Some(Entry::SnapshotTemp(id("abc")))
        );
        assert_eq!(classify(".index.json.tmp.1.2"), Some(Entry::IndexTemp));
        assert_eq!(classify(".search.ndjson.tmp.1.2"), Some(Entry::SearchTemp));
        for other in [
            ".index.json",
            ".index.lock",
            ".search.ndjson",
            ".search.lock",
            "abc.lock",
            "abc.lease",
            "abc.lease.tmp-12",
            "abc.events.ndjson",
            "abc.events.2.ndjson",
            "abc.events.2.ndjson.zst",
            "abc.events.2.ndjson.zst.tmp",
            "abc.events.torn-17",
            "notes.txt",
            ".json",
            "a b.json",
            "..json.tmp.x",
        ] {
            assert_eq!(classify(other), None, "{other}");
        }
    }

    #[test]
    fn segments_and_tombstones_name_their_session() {
        for (name, owner) in [
            ("a.events.ndjson", Some("a")),
            ("a.events.3.ndjson", Some("a")),
            ("a.events.3.ndjson.zst", Some("a")),
            ("a.events.ndjson.zst", None),
            ("a.events.3.ndjson.zst.tmp", None),
            ("a.events.1.events.ndjson", Some("a.events.1")),
            ("a.events.events.2.ndjson", Some("a.events")),
            ("a.events.x.ndjson", None),
            ("a.events..ndjson", None),
            ("a.json", None),
            ("a.events.torn-17", None),
            (".events.ndjson", None),
        ] {
            assert_eq!(segment_owner(name), owner.map(id), "{name}");
        }
        assert_eq!(tombstone_owner("a.b.deleted"), Some(id("a.b")));
        assert_eq!(tombstone_owner("a.json"), None);
        assert_eq!(tombstone_owner(".deleted"), None);
        assert_eq!(classify("a.deleted"), None);
    }

    #[test]
    fn log_files_of_one_session_are_recognized_exactly() {
        let a = id("a");
        for yes in [
            "a.events.1.ndjson",
            "a.events.12.ndjson",
            "a.events.12.ndjson.zst",
            "a.events.12.ndjson.zst.tmp",
            "a.events.torn-1700000000000",
            "a.events.torn-1700000000000-2",
        ] {
            assert!(is_log_file_of(yes, &a), "{yes}");
        }
        for no in [
            "a.events.ndjson.json",
            "a.events.1.events.ndjson",
            "a.events.x.ndjson",
            "a.events.ndjson.zst",
            "a.events.x.ndjson.zst",
            "a.events.1.zst",
            "a.events.torn-",
            "a.events.torn-1-",
            "a.json",
            "ab.events.1.ndjson",
            "a.events.1.json",
        ] {
            assert!(!is_log_file_of(no, &a), "{no}");
        }
    }
}
