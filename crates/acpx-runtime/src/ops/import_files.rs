//! The files of `sessions import`: an archive (its snapshot and its events in one file) or a
//! `session.json` with, optionally, its log in a file of its own (`--events`), opened so that
//! the events are read while they are stored ([`super::transfer::import_event_lines_with`]).

use std::io::BufRead;
use std::path::Path;

use acpx_model::SessionRecord;

use super::transfer::{read_import_source, EventLines, ImportSource};
use super::OpsError;

/// Events of an import, read as they are stored.
pub type ImportEvents = EventLines<Box<dyn BufRead + Send>>;

/// Why the files of an import cannot be imported.
#[derive(Debug, thiserror::Error)]
pub enum ImportFileError {
    /// A file cannot be opened.
    #[error("cannot read {path}: {error}")]
    Unreadable {
        /// The file, as given.
        path: String,
        /// Why.
        error: std::io::Error,
    },
    /// The file is neither an acpx archive nor a `session.json`.
    #[error("{0}")]
    NotASession(String),
    /// `--events` was given with an archive.
    #[error("--events is for a session.json import; an archive carries its own events")]
    EventsWithArchive,
    /// The file is a session record of the Node acpx (imported from its home instead).
    #[error("{0} is a session written by the Node acpx")]
    NodeRecord(String),
    /// The snapshot is not valid.
    #[error(transparent)]
    Ops(OpsError),
}

fn open_reader(path: &Path) -> Result<Box<dyn BufRead + Send>, ImportFileError> {
    std::fs::File::open(path)
        .map(|f| {
            Box::new(std::io::BufReader::with_capacity(256 * 1024, f)) as Box<dyn BufRead + Send>
        })
        .map_err(|error| ImportFileError::Unreadable {
            path: path.display().to_string(),
            error,
        })
}

/// Reads the snapshot of an import (an archive's first line, or a `session.json`) and opens
/// its events (the rest of the archive, or the file `events`), which are read while they are
/// stored.
pub fn open_import_files(
    file: &Path,
    events: Option<&Path>,
) -> Result<(SessionRecord, ImportEvents), ImportFileError> {
    let origin = file.display().to_string();
    let parsed = read_import_source(open_reader(file)?, &origin).map_err(|e| match e {
        OpsError::Invalid(m) if m.contains("neither an acpx archive nor a session.json") => {
            ImportFileError::NotASession(m)
        }
        other => ImportFileError::Ops(other),
    })?;
    match parsed {
        ImportSource::Archive(_, _) if events.is_some() => Err(ImportFileError::EventsWithArchive),
        ImportSource::Archive(record, lines) => Ok((record, lines)),
        ImportSource::NodeRecord => Err(ImportFileError::NodeRecord(origin)),
        ImportSource::Snapshot(record) => {
            let lines = match events {
                Some(p) => EventLines::new(open_reader(p)?, &p.display().to_string(), 1),
                None => EventLines::new(
                    Box::new(std::io::empty()) as Box<dyn BufRead + Send>,
                    &origin,
                    1,
                ),
            };
            Ok((record, lines))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_file_and_a_file_that_is_no_session_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.ndjson");
        match open_import_files(&missing, None) {
            Err(ImportFileError::Unreadable { path, .. }) => {
                assert!(path.ends_with("missing.ndjson"))
            }
            other => panic!("expected Unreadable, got {:?}", other.map(|_| ())),
        }
        let junk = dir.path().join("junk.json");
        std::fs::write(&junk, "[1, 2]").unwrap();
        assert!(matches!(
            open_import_files(&junk, None),
            Err(ImportFileError::NotASession(_) | ImportFileError::Ops(_))
        ));
    }
}
