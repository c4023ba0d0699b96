//! The Node acpx home: finding its session records and their journal segments, and importing
//! them all into a store.

use std::path::{Path, PathBuf};

use acpx_model::{RecordId, SessionRecord, Store, StoreError, Timestamp};
use serde_json::Value;

use super::convert::convert_session;
use super::record::{is_node_record, ThreadSource};
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

/// The complete lines of journal segments, oldest first.
pub fn read_journal(files: &[PathBuf]) -> OpsResult<Vec<String>> {
    let mut lines = Vec::new();
    for f in files {
        let bytes = std::fs::read(f).map_err(|source| OpsError::Read {
            path: f.clone(),
            source,
        })?;
        let text = String::from_utf8_lossy(&bytes);
        // A last line without its newline is a torn write: Node's own reader withholds it.
        let complete = match text.rfind('\n') {
            Some(i) => &text[..=i],
            None => "",
        };
        lines.extend(complete.lines().map(str::to_owned));
    }
    Ok(lines)
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
    /// The session as stored.
    pub record: SessionRecord,
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
/// `store`. With `new_id` each gets a fresh record id (a copy next to an earlier import).
///
/// A file that cannot be converted or stored is skipped (and a half-stored session removed
/// again), never fatal; an unreadable directory is [`OpsError::Invalid`], an unreadable
/// journal [`OpsError::Read`].
pub async fn import_node_home(
    store: &dyn Store,
    dir: &Path,
    new_id: bool,
) -> OpsResult<NodeImportReport> {
    let files = record_files(dir)?;
    let now = Timestamp::now();
    let mut report = NodeImportReport {
        files: files.len(),
        ..NodeImportReport::default()
    };
    let skip = |path: &str, kind: SkipKind, reason: String| NodeSkipped {
        path: path.to_owned(),
        reason,
        kind,
    };
    for file in &files {
        let origin = file.display().to_string();
        let doc: Value = match std::fs::read(file)
            .map_err(|e| e.to_string())
            .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
        {
            Ok(v) => v,
            Err(e) => {
                report.skipped.push(skip(
                    &origin,
                    SkipKind::Failed,
                    format!("not readable JSON: {e}"),
                ));
                continue;
            }
        };
        if !is_node_record(&doc) {
            report.skipped.push(skip(
                &origin,
                SkipKind::Ignored,
                "not a Node acpx session record (no acpx_record_id)".into(),
            ));
            continue;
        }
        let journal = read_journal(&journal_files(file))?;
        let mut conv = match convert_session(&doc, &journal, &origin, now) {
            Ok(c) => c,
            Err(e) => {
                report.skipped.push(skip(&origin, SkipKind::Failed, e));
                continue;
            }
        };
        if new_id {
            let id = RecordId::generate();
            for e in &mut conv.events {
                e.acpx_record_id = id.clone();
            }
            conv.record.acpx_record_id = id;
        }
        let id = conv.record.acpx_record_id.clone();
        match store_new_session(store, conv.record, &conv.events).await {
            Ok(stored) => report.imported.push(NodeImported {
                origin,
                node_record_id: conv.original_id,
                record: stored,
                events: conv.events.len(),
                thread_source: conv.thread_source,
                notes: conv.notes,
            }),
            Err(OpsError::Store(StoreError::AlreadyExists(_))) => {
                report.skipped.push(skip(
                    &origin,
                    SkipKind::AlreadyPresent,
                    format!(
                        "session {id} already exists in the store (pass --new-id to import a copy)"
                    ),
                ));
            }
            Err(e) => {
                let _ = store.delete(&id).await.or_else(|e| match e {
                    StoreError::NotFound(_) => Ok(false),
                    other => Err(other),
                });
                report
                    .skipped
                    .push(skip(&origin, SkipKind::Failed, e.to_string()));
            }
        }
    }
    Ok(report)
}
