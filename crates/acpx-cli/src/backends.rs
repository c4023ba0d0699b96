//! Opening the storage backend chosen with `--store`.
//!
//! - `fs`: [`FsStore`] rooted at `<home>` (`<home>/sessions/…`).
//! - `sqlite`: [`SqliteStore`] at `<home>/acpx.db`.
//!
//! Two environment variables tune retention for both backends; they exist mainly so tests can
//! make rotation happen with a few events:
//! - `ACPX_MAX_SEGMENT_BYTES`: the size at which the active log segment rotates
//!   (default 64 MiB);
//! - `ACPX_MAX_SEGMENTS`: segments kept, the active one included (default 5).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use acpx_model::{RecordId, Store, StoreResult, TornTail};
use acpx_store_fs::{FsStore, FsStoreOptions};
use acpx_store_sqlite::{SqliteStore, SqliteStoreOptions};

use crate::config::Backend;
use crate::error::{CliError, CliResult};

/// Environment variable: rotate the active segment above this many bytes.
pub const ENV_MAX_SEGMENT_BYTES: &str = "ACPX_MAX_SEGMENT_BYTES";
/// Environment variable: keep at most this many segments.
pub const ENV_MAX_SEGMENTS: &str = "ACPX_MAX_SEGMENTS";

/// An opened store, keeping the concrete type for backend-specific operations.
#[derive(Debug, Clone)]
pub enum OpenStore {
    Fs(Arc<FsStore>),
    Sqlite(Arc<SqliteStore>),
}

fn env_number<T: std::str::FromStr + PartialOrd + From<u8>>(name: &str) -> CliResult<Option<T>> {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => match v.trim().parse::<T>() {
            Ok(n) if n >= T::from(1) => Ok(Some(n)),
            _ => Err(CliError::usage(format!(
                "environment variable {name}={v:?} is not a positive integer"
            ))
            .with_hint(format!("unset {name} or give it a positive integer"))),
        },
        _ => Ok(None),
    }
}

/// The path of the SQLite database under `home`.
pub fn sqlite_path(home: &Path) -> PathBuf {
    home.join("acpx.db")
}

impl OpenStore {
    /// Opens `backend` under `home`, creating it when absent.
    pub fn open(backend: Backend, home: &Path) -> CliResult<OpenStore> {
        let max_segment_bytes: Option<u64> = env_number(ENV_MAX_SEGMENT_BYTES)?;
        let max_segments: Option<u32> = env_number(ENV_MAX_SEGMENTS)?;
        let hint = |e: acpx_model::StoreError, what: &Path| {
            let mut err = CliError::from(e);
            err.message = format!(
                "cannot open the {} store at {}: {}",
                backend.as_str(),
                what.display(),
                err.message
            );
            err.with_hint("check --home / ACPX_HOME and the permissions of that directory")
        };
        if let Some(problem) = not_a_directory(home) {
            return Err(home_problem(home, &problem));
        }
        Ok(match backend {
            Backend::Fs => {
                let mut opts = FsStoreOptions::default();
                if let Some(b) = max_segment_bytes {
                    opts.max_segment_bytes = b;
                }
                if let Some(s) = max_segments {
                    opts.max_segments = s;
                }
                OpenStore::Fs(Arc::new(
                    FsStore::open_with(home.to_path_buf(), opts).map_err(|e| hint(e, home))?,
                ))
            }
            Backend::Sqlite => {
                let path = sqlite_path(home);
                std::fs::create_dir_all(home).map_err(|e| home_error(home, &e))?;
                let mut opts = SqliteStoreOptions::default();
                if let Some(b) = max_segment_bytes {
                    opts.max_segment_bytes = b;
                }
                if let Some(s) = max_segments {
                    opts.max_segments = s;
                }
                OpenStore::Sqlite(Arc::new(
                    SqliteStore::open_with(&path, opts).map_err(|e| hint(e, &path))?,
                ))
            }
        })
    }

    /// The store as a trait object.
    pub fn as_dyn(&self) -> Arc<dyn Store> {
        match self {
            OpenStore::Fs(s) => s.clone(),
            OpenStore::Sqlite(s) => s.clone(),
        }
    }

    /// Moves an incomplete last log line aside (fs only; SQLite commits whole batches, so it
    /// never has one).
    pub fn set_aside_torn_tail(&self, id: &RecordId) -> StoreResult<Option<TornTail>> {
        match self {
            OpenStore::Fs(s) => s.set_aside_torn_tail(id),
            OpenStore::Sqlite(_) => Ok(None),
        }
    }

    /// Where the backend keeps its data, for messages.
    pub fn location(&self, home: &Path) -> PathBuf {
        match self {
            OpenStore::Fs(_) => home.join("sessions"),
            OpenStore::Sqlite(_) => sqlite_path(home),
        }
    }
}

/// Why `home` cannot be a directory: it, or its nearest existing ancestor, is something else.
fn not_a_directory(home: &Path) -> Option<String> {
    let existing = home.ancestors().find(|a| a.exists())?;
    if existing.is_dir() {
        None
    } else if existing == home {
        Some("it exists and is not a directory".to_owned())
    } else {
        Some(format!(
            "{} exists and is not a directory",
            existing.display()
        ))
    }
}

/// Why the home directory `home` cannot be created, naming the path and the problem.
fn home_error(home: &Path, e: &std::io::Error) -> CliError {
    home_problem(
        home,
        &not_a_directory(home).unwrap_or_else(|| e.to_string()),
    )
}

fn home_problem(home: &Path, problem: &str) -> CliError {
    CliError::runtime(format!(
        "cannot use {} as the acpx home: {problem}",
        home.display()
    ))
    .with_hint("check --home / ACPX_HOME: it must be a directory acpx may create and write")
}
