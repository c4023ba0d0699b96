//! Opening the storage backend chosen with `--store`.
//!
//! - `fs`: [`FsStore`] rooted at `<home>` (`<home>/sessions/…`).
//! - `sqlite`: [`SqliteStore`] at `<home>/acpx.db`.
//! - `postgres`: [`PostgresStore`] at the URL of `ACPX_STORE_URL` or the config's `storeUrl`,
//!   in the schema `ACPX_STORE_SCHEMA` (default `acpx`). The URL is never shown with its
//!   password ([`acpx_store_postgres::redact_url`]).
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
use acpx_store_postgres::{redact_url, PostgresStore, PostgresStoreOptions};
use acpx_store_sqlite::{SqliteStore, SqliteStoreOptions};

use crate::config::Backend;
use crate::error::{CliError, CliResult};

/// Environment variable: rotate the active segment above this many bytes.
pub const ENV_MAX_SEGMENT_BYTES: &str = "ACPX_MAX_SEGMENT_BYTES";
/// Environment variable: keep at most this many segments.
pub const ENV_MAX_SEGMENTS: &str = "ACPX_MAX_SEGMENTS";

/// Environment variable: the PostgreSQL URL of `--store postgres` (wins over `storeUrl`).
pub const ENV_STORE_URL: &str = "ACPX_STORE_URL";
/// Environment variable: the PostgreSQL schema of `--store postgres` (default `acpx`).
pub const ENV_STORE_SCHEMA: &str = "ACPX_STORE_SCHEMA";

/// A store URL from the config. Its `Debug` (and so any debug output of the config) shows it
/// without its password.
#[derive(Clone, PartialEq, Eq)]
pub struct StoreUrl(pub String);

impl std::fmt::Debug for StoreUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StoreUrl({:?})", redact_url(&self.0))
    }
}

/// The PostgreSQL URL in effect: `ACPX_STORE_URL`, else the config's `storeUrl`.
pub fn postgres_url(config_url: Option<&StoreUrl>) -> Option<String> {
    match std::env::var(ENV_STORE_URL) {
        Ok(u) if !u.trim().is_empty() => Some(u),
        _ => config_url.map(|u| u.0.clone()),
    }
}

/// An opened store, keeping the concrete type for backend-specific operations.
#[derive(Debug, Clone)]
pub enum OpenStore {
    Fs(Arc<FsStore>),
    Sqlite(Arc<SqliteStore>),
    Postgres(Arc<PostgresStore>),
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
    /// Opens `backend` under `home` (or, for postgres, at `ACPX_STORE_URL` / `config_url`),
    /// creating it when absent.
    pub async fn open(
        backend: Backend,
        home: &Path,
        config_url: Option<&StoreUrl>,
    ) -> CliResult<OpenStore> {
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
            Backend::Postgres => {
                let url = postgres_url(config_url).ok_or_else(|| {
                    CliError::usage("--store postgres needs the database URL".to_owned()).with_hint(
                        format!(
                            "set {ENV_STORE_URL}=postgres://user:password@host/db or \
                                 \"storeUrl\" in the config"
                        ),
                    )
                })?;
                let mut opts = PostgresStoreOptions::default();
                if let Ok(schema) = std::env::var(ENV_STORE_SCHEMA) {
                    if !schema.trim().is_empty() {
                        opts.schema = schema.trim().to_owned();
                    }
                }
                if let Some(b) = max_segment_bytes {
                    opts.max_segment_bytes = b;
                }
                if let Some(s) = max_segments {
                    opts.max_segments = s;
                }
                let store = PostgresStore::connect(&url, opts).await.map_err(|e| {
                    let mut err = CliError::from(e);
                    err.message = format!(
                        "cannot open the postgres store at {}: {}",
                        redact_url(&url),
                        err.message
                    );
                    err.with_hint(format!(
                        "check {ENV_STORE_URL} / storeUrl, that the server is running, and \
                         that the user may create the schema"
                    ))
                })?;
                OpenStore::Postgres(Arc::new(store))
            }
        })
    }

    /// The store as a trait object.
    pub fn as_dyn(&self) -> Arc<dyn Store> {
        match self {
            OpenStore::Fs(s) => s.clone(),
            OpenStore::Sqlite(s) => s.clone(),
            OpenStore::Postgres(s) => s.clone(),
        }
    }

    /// Moves an incomplete last log line aside (fs only; the databases commit whole batches,
    /// so they never have one).
    pub fn set_aside_torn_tail(&self, id: &RecordId) -> StoreResult<Option<TornTail>> {
        match self {
            OpenStore::Fs(s) => s.set_aside_torn_tail(id),
            OpenStore::Sqlite(_) | OpenStore::Postgres(_) => Ok(None),
        }
    }

    /// Where the backend keeps its data, for messages (a URL without its password).
    pub fn location(&self, home: &Path) -> String {
        match self {
            OpenStore::Fs(_) => home.join("sessions").display().to_string(),
            OpenStore::Sqlite(_) => sqlite_path(home).display().to_string(),
            OpenStore::Postgres(s) => s.location().to_owned(),
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
