//! Error types: validation errors that name the file and field, and the store error enum.

use std::time::Duration;

use crate::id::{InvalidRecordId, RecordId};

/// A document that does not satisfy the format. Displays as
/// ``<origin>: field `<path>`: <message>``, for example
/// ``~/.acpx/sessions/a.json: field `thread.speed`: unknown variant "warp"``.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{origin}: field `{field}`: {message}")]
pub struct ValidationError {
    /// The file (or row, or line) the document came from.
    pub origin: String,
    /// Dotted path of the offending field (`.` for the document itself).
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl ValidationError {
    /// The error for `field` of the document from `origin`.
    pub fn new(origin: &str, field: &str, message: impl Into<String>) -> Self {
        ValidationError {
            origin: origin.to_owned(),
            field: field.to_owned(),
            message: message.into(),
        }
    }

    pub(crate) fn from_path_error(
        origin: &str,
        e: serde_path_to_error::Error<serde_json::Error>,
    ) -> Self {
        // A syntax error where a key was expected ends the path with an unknown segment
        // ("?", "thread.?"): the error is the enclosing object's (`.` for the document).
        let path = e.path().to_string();
        let path = match path.strip_suffix('?') {
            Some("") => ".".to_owned(),
            Some(outer) => outer.strip_suffix('.').unwrap_or(outer).to_owned(),
            None => path,
        };
        let inner = e.into_inner();
        // serde_json appends " at line L column C"; keep it: it helps find the spot in a file.
        let message = if inner.is_syntax() || inner.is_eof() {
            format!("not valid JSON: {inner}")
        } else {
            inner.to_string()
        };
        ValidationError::new(origin, &path, message)
    }
}

/// Errors returned by every [`crate::Store`] implementation.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// No session has this id.
    #[error("session {0} not found")]
    NotFound(RecordId),

    /// `create` of an id that is taken.
    #[error("session {0} already exists; refusing to overwrite it")]
    AlreadyExists(RecordId),

    /// A copy (`migrate`) found the id already in the target, and that session is not an
    /// identical copy of the source (or cannot be read back): it is left alone.
    #[error("session {id} already exists in the target and is not the same as the source: {what}; refusing to overwrite it")]
    AlreadyExistsDiffering {
        /// The session.
        id: RecordId,
        /// What differs, e.g. "the SHA-256 of the event log differs".
        what: String,
    },

    /// A save based on a stale revision (`docs/format.md`, Decisions 2).
    #[error("session {id}: save conflict: the record was loaded at revision {expected}, but the stored revision is {actual}; reload it and apply the change again")]
    Conflict {
        /// The session.
        id: RecordId,
        /// The revision the record was loaded at.
        expected: u64,
        /// The revision in the store.
        actual: u64,
    },

    /// Another writer holds the session's lock, and waiting for it timed out.
    #[error("session {id} is locked by another writer; gave up after waiting {} s", seconds_for_people(*waited))]
    Locked {
        /// The session.
        id: RecordId,
        /// How long the caller waited.
        waited: Duration,
    },

    /// A writer whose owner lease (generation `generation`) is no longer the session's: it was
    /// taken over (the lease is now generation `current`) or released. Nothing was written.
    #[error("session {id}: this writer's owner lease (generation {generation}) {}; it may no longer write to the session", match current { Some(c) => format!("was taken over by generation {c}"), None => "was released".to_owned() })]
    Fenced {
        /// The session.
        id: RecordId,
        /// The generation the writer holds.
        generation: u64,
        /// The session's lease generation now, if it has a lease.
        current: Option<u64>,
    },

    /// An append whose first seq is not the log's last seq + 1.
    #[error("session {id}: event seq {got} refused: the log ends at seq {last}, so the next event must have seq {}", last + 1)]
    SeqMismatch {
        /// The session.
        id: RecordId,
        /// The last seq in the log.
        last: u64,
        /// The seq of the refused event.
        got: u64,
    },

    /// Stored data that does not parse or breaks a rule of `docs/format.md`.
    #[error("corrupt data in {location}{}: {reason}", line.map(|l| format!(" line {l}")).unwrap_or_default())]
    Corrupt {
        /// The file or row.
        location: String,
        /// The line in it, for a log.
        line: Option<u64>,
        /// What is wrong.
        reason: String,
    },

    /// A snapshot that fails validation (`docs/format.md`, "Validation").
    #[error(transparent)]
    Invalid(#[from] ValidationError),

    /// A string that is not a valid record id.
    #[error("invalid record id: {0}")]
    InvalidId(#[from] InvalidRecordId),

    /// A query or call argument the store cannot accept.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// A paging cursor this store did not issue.
    #[error("invalid cursor: {0}")]
    InvalidCursor(String),

    /// Data in a format version newer than this acpx reads.
    #[error("the stored data was written by a newer acpx ({0}); upgrade acpx to read it")]
    TooNew(String),

    /// An I/O error.
    #[error("I/O error on {path}: {source}")]
    Io {
        /// The file or directory.
        path: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },

    /// Any other failure of a backend (a SQLite error, for example).
    #[error("{backend} backend error: {message}")]
    Backend {
        /// The backend's name.
        backend: &'static str,
        /// What went wrong.
        message: String,
    },
}

impl StoreError {
    /// An I/O error on `path`.
    pub fn io(path: impl std::fmt::Display, source: std::io::Error) -> Self {
        StoreError::Io {
            path: path.to_string(),
            source,
        }
    }

    /// Corrupt data at `location` (and `line`).
    pub fn corrupt(
        location: impl Into<String>,
        line: Option<u64>,
        reason: impl Into<String>,
    ) -> Self {
        StoreError::Corrupt {
            location: location.into(),
            line,
            reason: reason.into(),
        }
    }

    /// A short machine-readable name of the variant, for JSON output and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::NotFound(_) => "not_found",
            StoreError::AlreadyExists(_) | StoreError::AlreadyExistsDiffering { .. } => {
                "already_exists"
            }
            StoreError::Conflict { .. } => "conflict",
            StoreError::Locked { .. } => "locked",
            StoreError::Fenced { .. } => "fenced",
            StoreError::SeqMismatch { .. } => "seq_mismatch",
            StoreError::Corrupt { .. } => "corrupt",
            StoreError::Invalid(_) => "invalid",
            StoreError::InvalidId(_) => "invalid_id",
            StoreError::InvalidArgument(_) => "invalid_argument",
            StoreError::InvalidCursor(_) => "invalid_cursor",
            StoreError::TooNew(_) => "too_new",
            StoreError::Io { .. } => "io",
            StoreError::Backend { .. } => "backend",
        }
    }
}

/// The result of a store operation.
pub type StoreResult<T> = Result<T, StoreError>;

/// Seconds as people read them (`10`, `0.5`), never `Debug`'s `10.000146764s`.
fn seconds_for_people(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 10.0 {
        format!("{}", (s * 10.0).round() / 10.0)
    } else {
        format!("{}", s.round())
    }
}
