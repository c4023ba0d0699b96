//! Error types: validation errors that name the file and field, and the store error enum.

use std::time::Duration;

use crate::id::{InvalidRecordId, RecordId};

/// A document that does not satisfy the format. Displays as
/// `<origin>: field `<path>`: <message>`, for example
/// `~/.acpx/sessions/a.json: field `thread.speed`: unknown variant "warp"`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{origin}: field `{field}`: {message}")]
pub struct ValidationError {
    /// The file (or row, or line) the document came from.
    pub origin: String,
    /// Dotted path of the offending field (`.` for the document itself).
    pub field: String,
    pub message: String,
}

impl ValidationError {
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
        let path = e.path().to_string();
        let inner = e.into_inner();
        // serde_json appends " at line L column C"; keep it: it helps find the spot in a file.
        ValidationError::new(origin, &path, inner.to_string())
    }
}

/// Errors returned by every [`crate::Store`] implementation.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("session {0} not found")]
    NotFound(RecordId),

    #[error("session {0} already exists; refusing to overwrite it")]
    AlreadyExists(RecordId),

    #[error("session {id}: save conflict: the record was loaded at revision {expected}, but the stored revision is {actual}; reload it and apply the change again")]
    Conflict {
        id: RecordId,
        expected: u64,
        actual: u64,
    },

    #[error("session {id} is locked by another writer; gave up after waiting {waited:?}")]
    Locked { id: RecordId, waited: Duration },

    #[error("session {id}: event seq {got} refused: the log ends at seq {last}, so the next event must have seq {}", last + 1)]
    SeqMismatch { id: RecordId, last: u64, got: u64 },

    #[error("corrupt data in {location}{}: {reason}", line.map(|l| format!(" line {l}")).unwrap_or_default())]
    Corrupt {
        location: String,
        line: Option<u64>,
        reason: String,
    },

    #[error(transparent)]
    Invalid(#[from] ValidationError),

    #[error("invalid record id: {0}")]
    InvalidId(#[from] InvalidRecordId),

    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    #[error("invalid cursor: {0}")]
    InvalidCursor(String),

    #[error("the stored data was written by a newer acpx ({0}); upgrade acpx to read it")]
    TooNew(String),

    #[error("I/O error on {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },

    #[error("{backend} backend error: {message}")]
    Backend {
        backend: &'static str,
        message: String,
    },
}

impl StoreError {
    pub fn io(path: impl std::fmt::Display, source: std::io::Error) -> Self {
        StoreError::Io {
            path: path.to_string(),
            source,
        }
    }

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
            StoreError::AlreadyExists(_) => "already_exists",
            StoreError::Conflict { .. } => "conflict",
            StoreError::Locked { .. } => "locked",
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

pub type StoreResult<T> = Result<T, StoreError>;
