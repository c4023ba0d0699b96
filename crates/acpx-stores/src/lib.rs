//! Opening any acpx session store backend by name, the way the `acpx` binary does for
//! `--store fs|sqlite|postgres`, so that a program sharing a home with the CLI opens the same
//! data in the same place (like `object_store`'s `parse_url`: one entry point over every
//! backend crate).
//!
//! | backend | where | crate |
//! |---|---|---|
//! | [`Backend::Fs`] | files under `<home>/sessions/` | `acpx-store-fs` |
//! | [`Backend::Sqlite`] | one database, `<home>/acpx.db` ([`sqlite_path`]) | `acpx-store-sqlite` |
//! | [`Backend::Postgres`] | a database URL, shared by several hosts | `acpx-store-postgres` |
//!
//! [`StoreConfig::from_env`] reads the environment variables the CLI honours:
//! - [`ENV_MAX_SEGMENT_BYTES`]: the size at which the active log segment rotates (default
//!   64 MiB);
//! - [`ENV_TURN_END_ROTATE_BYTES`]: at a turn's end the file store's active segment rotates,
//!   and so is compressed, when it holds at least this many bytes (default 1 MiB; `0` turns
//!   it off; the database backends have no segments);
//! - [`ENV_MAX_SEGMENTS`]: segments kept, the active one included (default 5);
//! - [`ENV_KEEP_ROTATED_SEGMENTS`]: `1` keeps every rotated segment of the file store
//!   (compressed) instead of deleting those beyond the window, for a full audit trail
//!   (default `0`; the database backends keep their retention budget and warn);
//! - [`ENV_STORE_URL`]: the PostgreSQL URL (wins over one given in the config);
//! - [`ENV_STORE_SCHEMA`]: the PostgreSQL schema (default `acpx`).
//!
//! ```no_run
//! # async fn demo() -> Result<(), acpx_stores::OpenError> {
//! use acpx_stores::{Backend, OpenStore, StoreConfig};
//! let home = std::path::PathBuf::from("/home/me/.acpx");
//! let config = StoreConfig::new(Backend::Sqlite, home).from_env()?;
//! let store = OpenStore::open(&config).await?.as_dyn();
//! # let _ = store; Ok(()) }
//! ```

#![warn(missing_docs)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use acpx_model::{RecordId, SettleOnLoad, Store, StoreError, StoreResult, TornTail};
use acpx_store_fs::{FsStore, FsStoreOptions};
use acpx_store_postgres::{PostgresStore, PostgresStoreOptions};
use acpx_store_sqlite::{SqliteStore, SqliteStoreOptions};

pub use acpx_store_postgres::redact_url;
pub use elsewhere::other_local_store;
pub use settling::Settling;

mod elsewhere;
mod settling;

/// Environment variable: rotate the active segment above this many bytes.
pub const ENV_MAX_SEGMENT_BYTES: &str = "ACPX_MAX_SEGMENT_BYTES";
/// Environment variable: at a turn's end, the file store's active segment rotates (and is
/// compressed) when it holds at least this many bytes (default 1 MiB; `0` turns it off).
pub const ENV_TURN_END_ROTATE_BYTES: &str = "ACPX_TURN_END_ROTATE_BYTES";
/// Environment variable: keep at most this many segments.
pub const ENV_MAX_SEGMENTS: &str = "ACPX_MAX_SEGMENTS";
/// Environment variable: `1` (or `true`, `yes`) keeps every rotated segment of the file
/// store instead of deleting those beyond [`ENV_MAX_SEGMENTS`]; `0` (`false`, `no`) or unset
/// deletes them.
pub const ENV_KEEP_ROTATED_SEGMENTS: &str = "ACPX_KEEP_ROTATED_SEGMENTS";
/// Environment variable: the PostgreSQL URL (wins over one from the config).
pub const ENV_STORE_URL: &str = "ACPX_STORE_URL";
/// Environment variable: the PostgreSQL schema (default `acpx`).
pub const ENV_STORE_SCHEMA: &str = "ACPX_STORE_SCHEMA";

/// A storage backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// Files under `<home>/sessions/`: `<id>.json` and `<id>.events*.ndjson`.
    Fs,
    /// One SQLite database, `<home>/acpx.db`.
    Sqlite,
    /// A PostgreSQL database shared by several hosts.
    Postgres,
}

impl Backend {
    /// The backend's name: `fs`, `sqlite` or `postgres`.
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Fs => "fs",
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }
}

/// With the `clap` feature, a command line names a backend by [`Backend::as_str`].
#[cfg(feature = "clap")]
impl clap::ValueEnum for Backend {
    fn value_variants<'a>() -> &'a [Self] {
        &[Backend::Fs, Backend::Sqlite, Backend::Postgres]
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.as_str()))
    }
}

/// A database URL. Its `Debug` shows it without its password.
#[derive(Clone, PartialEq, Eq)]
pub struct StoreUrl(pub String);

impl std::fmt::Debug for StoreUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StoreUrl({:?})", redact_url(&self.0))
    }
}

/// The PostgreSQL URL in effect: [`ENV_STORE_URL`] when set, else `configured`.
pub fn postgres_url(configured: Option<&StoreUrl>) -> Option<String> {
    match std::env::var(ENV_STORE_URL) {
        Ok(u) if !u.trim().is_empty() => Some(u),
        _ => configured.map(|u| u.0.clone()),
    }
}

/// The path of the SQLite database under `home`.
pub fn sqlite_path(home: &Path) -> PathBuf {
    home.join("acpx.db")
}

/// Why a store could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// An environment variable that must hold an integer of at least `least` holds something
    /// else.
    #[error("environment variable {name}={value:?} is not an integer of at least {least}")]
    BadNumber {
        /// The variable.
        name: &'static str,
        /// Its value.
        value: String,
        /// The smallest value it takes.
        least: u8,
    },
    /// An environment variable that must hold a yes/no flag holds something else.
    #[error("environment variable {name}={value:?} is not a flag (1, true, yes, 0, false or no)")]
    BadFlag {
        /// The variable.
        name: &'static str,
        /// Its value.
        value: String,
    },
    /// The home cannot be a directory.
    #[error("cannot use {} as the acpx home: {problem}", home.display())]
    Home {
        /// The home directory.
        home: PathBuf,
        /// What is wrong with it.
        problem: String,
    },
    /// [`Backend::Postgres`] without a URL.
    #[error("the postgres backend needs the database URL")]
    MissingUrl,
    /// The backend refused to open.
    #[error("cannot open the {} store at {location}: {source}", backend.as_str())]
    Store {
        /// The backend.
        backend: Backend,
        /// Where (a URL without its password).
        location: String,
        /// Why.
        source: StoreError,
    },
}

/// Where and how to open a backend.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// The backend.
    pub backend: Backend,
    /// The acpx home (`fs` and `sqlite` keep their data under it).
    pub home: PathBuf,
    /// The PostgreSQL URL ([`Backend::Postgres`] only).
    pub url: Option<StoreUrl>,
    /// The PostgreSQL schema (default `acpx`).
    pub schema: Option<String>,
    /// The size at which the active log segment rotates (default 64 MiB).
    pub max_segment_bytes: Option<u64>,
    /// Segments kept, the active one included (default 5).
    pub max_segments: Option<u32>,
    /// Keep every rotated segment (file store; default false). See
    /// `acpx_store_fs::FsStoreOptions::keep_rotated_segments`.
    pub keep_rotated_segments: Option<bool>,
    /// The size at or above which the file store's active segment rotates at a turn's end
    /// (default 1 MiB; 0: off). See
    /// `acpx_store_fs::FsStoreOptions::turn_end_rotate_bytes`.
    pub turn_end_rotate_bytes: Option<u64>,
    /// Settle every load of a session (the store [`OpenStore::as_dyn`] gives is then a
    /// [`Settling`] store; default: loads read the conversation whole).
    pub settle_on_load: Option<Arc<SettleOnLoad>>,
}

impl StoreConfig {
    /// `backend` under `home`, with every default.
    pub fn new(backend: Backend, home: PathBuf) -> Self {
        StoreConfig {
            backend,
            home,
            url: None,
            schema: None,
            max_segment_bytes: None,
            max_segments: None,
            keep_rotated_segments: None,
            turn_end_rotate_bytes: None,
            settle_on_load: None,
        }
    }

    /// The identity of the store this config opens: a string naming its data, the same for
    /// every process that opens that data (pass the home resolved) and different for any
    /// other store: `fs:<home>/sessions`, `sqlite:<home>/acpx.db`, or
    /// `postgres:<URL without its password>#<schema>`. What keys the processes that drive
    /// the store's sessions (`acpx_owner::authority`), so that an owner of a session in one
    /// store never serves a command meant for the same record id in another.
    pub fn identity(&self) -> String {
        match self.backend {
            Backend::Fs => format!("fs:{}", self.home.join("sessions").display()),
            Backend::Sqlite => format!("sqlite:{}", sqlite_path(&self.home).display()),
            Backend::Postgres => format!(
                "postgres:{}#{}",
                self.url
                    .as_ref()
                    .map(|u| redact_url(&u.0))
                    .unwrap_or_default(),
                self.schema.as_deref().unwrap_or("acpx")
            ),
        }
    }

    /// With the settings of the environment variables (see the crate docs); the URL of
    /// [`ENV_STORE_URL`] wins over one already set.
    pub fn from_env(mut self) -> Result<Self, OpenError> {
        if let Some(b) = env_number(ENV_MAX_SEGMENT_BYTES, 1)? {
            self.max_segment_bytes = Some(b);
        }
        if let Some(b) = env_number(ENV_TURN_END_ROTATE_BYTES, 0)? {
            self.turn_end_rotate_bytes = Some(b);
        }
        if let Some(s) = env_number(ENV_MAX_SEGMENTS, 1)? {
            self.max_segments = Some(s);
        }
        if let Some(k) = env_flag(ENV_KEEP_ROTATED_SEGMENTS)? {
            self.keep_rotated_segments = Some(k);
        }
        self.url = postgres_url(self.url.as_ref()).map(StoreUrl);
        if let Ok(schema) = std::env::var(ENV_STORE_SCHEMA) {
            if !schema.trim().is_empty() {
                self.schema = Some(schema.trim().to_owned());
            }
        }
        Ok(self)
    }
}

fn env_number<T: std::str::FromStr + PartialOrd + From<u8>>(
    name: &'static str,
    least: u8,
) -> Result<Option<T>, OpenError> {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => match v.trim().parse::<T>() {
            Ok(n) if n >= T::from(least) => Ok(Some(n)),
            _ => Err(OpenError::BadNumber {
                name,
                value: v,
                least,
            }),
        },
        _ => Ok(None),
    }
}

fn env_flag(name: &'static str) -> Result<Option<bool>, OpenError> {
    let Ok(v) = std::env::var(name) else {
        return Ok(None);
    };
    match v.trim().to_ascii_lowercase().as_str() {
        "" => Ok(None),
        "1" | "true" | "yes" => Ok(Some(true)),
        "0" | "false" | "no" => Ok(Some(false)),
        _ => Err(OpenError::BadFlag { name, value: v }),
    }
}

/// An opened backend, of its concrete type for backend-specific operations.
#[derive(Debug, Clone)]
pub enum OpenBackend {
    /// The file store.
    Fs(Arc<FsStore>),
    /// The SQLite store.
    Sqlite(Arc<SqliteStore>),
    /// The PostgreSQL store.
    Postgres(Arc<PostgresStore>),
}

/// An opened store: its backend, and whether its loads settle ([`StoreConfig::settle_on_load`]),
/// which [`OpenStore::as_dyn`] applies as a [`Settling`] wrapper.
#[derive(Debug, Clone)]
pub struct OpenStore {
    backend: OpenBackend,
    settle_on_load: Option<Arc<SettleOnLoad>>,
}

impl OpenStore {
    /// The backend, of its concrete type (its loads do not settle: see [`OpenStore::as_dyn`]).
    pub fn backend(&self) -> &OpenBackend {
        &self.backend
    }

    /// Opens the backend `config` names, creating it (and the home) when absent.
    pub async fn open(config: &StoreConfig) -> Result<OpenStore, OpenError> {
        let home = &config.home;
        let failed = |source: StoreError, location: &Path| OpenError::Store {
            backend: config.backend,
            location: location.display().to_string(),
            source,
        };
        if let Some(problem) = not_a_directory(home) {
            return Err(OpenError::Home {
                home: home.clone(),
                problem,
            });
        }
        if config.backend != Backend::Fs && config.keep_rotated_segments == Some(true) {
            // The database backends retain by their byte budget; they have no segment files.
            tracing::warn!(
                backend = config.backend.as_str(),
                "keep_rotated_segments applies to the file store only; this backend keeps its retention budget"
            );
        }
        let backend = match config.backend {
            Backend::Fs => {
                let mut opts = FsStoreOptions::default();
                if let Some(b) = config.max_segment_bytes {
                    opts.max_segment_bytes = b;
                }
                if let Some(s) = config.max_segments {
                    opts.max_segments = s;
                }
                if let Some(k) = config.keep_rotated_segments {
                    opts.keep_rotated_segments = k;
                }
                if let Some(b) = config.turn_end_rotate_bytes {
                    opts.turn_end_rotate_bytes = b;
                }
                let store = FsStore::open_with(home.clone(), opts).map_err(|e| failed(e, home))?;
                OpenBackend::Fs(Arc::new(store))
            }
            Backend::Sqlite => {
                let path = sqlite_path(home);
                std::fs::create_dir_all(home).map_err(|e| OpenError::Home {
                    home: home.clone(),
                    problem: not_a_directory(home).unwrap_or_else(|| e.to_string()),
                })?;
                let mut opts = SqliteStoreOptions::default();
                if let Some(b) = config.max_segment_bytes {
                    opts.max_segment_bytes = b;
                }
                if let Some(s) = config.max_segments {
                    opts.max_segments = s;
                }
                let store = SqliteStore::open_with(&path, opts).map_err(|e| failed(e, &path))?;
                OpenBackend::Sqlite(Arc::new(store))
            }
            Backend::Postgres => {
                let url = config.url.as_ref().ok_or(OpenError::MissingUrl)?;
                let mut opts = PostgresStoreOptions::default();
                if let Some(schema) = &config.schema {
                    opts.schema = schema.clone();
                }
                if let Some(b) = config.max_segment_bytes {
                    opts.max_segment_bytes = b;
                }
                if let Some(s) = config.max_segments {
                    opts.max_segments = s;
                }
                let store = PostgresStore::connect(&url.0, opts)
                    .await
                    .map_err(|source| OpenError::Store {
                        backend: Backend::Postgres,
                        location: redact_url(&url.0),
                        source,
                    })?;
                OpenBackend::Postgres(Arc::new(store))
            }
        };
        Ok(OpenStore {
            backend,
            settle_on_load: config.settle_on_load.clone(),
        })
    }

    /// The store as a trait object: the backend, wrapped in [`Settling`] when its loads
    /// settle.
    pub fn as_dyn(&self) -> Arc<dyn Store> {
        let store: Arc<dyn Store> = match &self.backend {
            OpenBackend::Fs(s) => s.clone(),
            OpenBackend::Sqlite(s) => s.clone(),
            OpenBackend::Postgres(s) => s.clone(),
        };
        match &self.settle_on_load {
            Some(settle) => Arc::new(Settling::new(store, settle.clone())),
            None => store,
        }
    }

    /// Moves an incomplete last log line aside (fs only; the databases commit whole batches,
    /// so they never have one).
    pub fn set_aside_torn_tail(&self, id: &RecordId) -> StoreResult<Option<TornTail>> {
        match &self.backend {
            OpenBackend::Fs(s) => s.set_aside_torn_tail(id),
            OpenBackend::Sqlite(_) | OpenBackend::Postgres(_) => Ok(None),
        }
    }

    /// Where the backend keeps session `id`, for messages: its snapshot file, or the database
    /// and its row (a URL without its password).
    pub fn record_location(&self, home: &Path, id: &RecordId) -> String {
        match &self.backend {
            OpenBackend::Fs(_) => home
                .join("sessions")
                .join(format!("{id}.json"))
                .display()
                .to_string(),
            OpenBackend::Sqlite(_) | OpenBackend::Postgres(_) => {
                format!("{} (sessions row {id})", self.location(home))
            }
        }
    }

    /// Where the backend keeps its data, for messages (a URL without its password).
    pub fn location(&self, home: &Path) -> String {
        match &self.backend {
            OpenBackend::Fs(_) => home.join("sessions").display().to_string(),
            OpenBackend::Sqlite(_) => sqlite_path(home).display().to_string(),
            OpenBackend::Postgres(s) => s.location().to_owned(),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn opens_each_file_backend_under_the_home() {
        let dir = tempfile::tempdir().unwrap();
        for backend in [Backend::Fs, Backend::Sqlite] {
            let home = dir.path().join(backend.as_str());
            let store = OpenStore::open(&StoreConfig::new(backend, home.clone()))
                .await
                .unwrap();
            let listed = store.as_dyn().list(&Default::default()).await.unwrap();
            assert!(listed.sessions.is_empty());
            assert!(store.location(&home).starts_with(home.to_str().unwrap()));
        }
        assert!(sqlite_path(&dir.path().join("sqlite")).is_file());
    }

    #[tokio::test]
    async fn a_home_that_is_a_file_is_named_in_the_error() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, "x").unwrap();
        let err = OpenStore::open(&StoreConfig::new(Backend::Sqlite, file.join("home")))
            .await
            .unwrap_err();
        assert!(matches!(err, OpenError::Home { .. }), "{err}");
        assert!(
            err.to_string().contains("exists and is not a directory"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn postgres_without_a_url_says_so() {
        let config = StoreConfig::new(Backend::Postgres, PathBuf::from("/nonexistent-acpx"));
        let err = OpenStore::open(&config).await.unwrap_err();
        assert!(matches!(err, OpenError::MissingUrl));
    }

    #[test]
    fn keep_rotated_segments_flag_values() {
        // A variable of this test only: tests run in parallel threads of one process.
        const VAR: &str = "ACPX_TEST_KEEP_ROTATED_FLAG";
        for (value, want) in [
            ("1", Some(true)),
            ("yes", Some(true)),
            (" TRUE ", Some(true)),
            ("0", Some(false)),
            ("no", Some(false)),
            ("", None),
        ] {
            std::env::set_var(VAR, value);
            assert_eq!(env_flag(VAR).unwrap(), want, "{value:?}");
        }
        std::env::set_var(VAR, "maybe");
        let err = env_flag(VAR).unwrap_err();
        assert!(
            err.to_string()
                .contains("ACPX_TEST_KEEP_ROTATED_FLAG=\"maybe\""),
            "{err}"
        );
        std::env::remove_var(VAR);
        assert_eq!(env_flag(VAR).unwrap(), None);
    }

    #[tokio::test]
    async fn keep_rotated_segments_reaches_the_file_store() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = StoreConfig::new(Backend::Fs, dir.path().to_path_buf());
        config.keep_rotated_segments = Some(true);
        let opened = OpenStore::open(&config).await.unwrap();
        let OpenBackend::Fs(fs) = opened.backend() else {
            panic!("not the file store");
        };
        assert!(fs.options().keep_rotated_segments);
    }

    #[tokio::test]
    async fn turn_end_rotation_takes_zero_and_reaches_the_file_store() {
        // A variable of this test only: tests run in parallel threads of one process.
        const VAR: &str = "ACPX_TEST_TURN_END_ROTATE";
        for (value, want) in [("0", Some(0u64)), (" 4096 ", Some(4096)), ("", None)] {
            std::env::set_var(VAR, value);
            assert_eq!(env_number::<u64>(VAR, 0).unwrap(), want, "{value:?}");
        }
        std::env::set_var(VAR, "-1");
        let err = env_number::<u64>(VAR, 0).unwrap_err();
        assert!(err.to_string().contains("at least 0"), "{err}");
        std::env::set_var(VAR, "0");
        let err = env_number::<u64>(VAR, 1).unwrap_err();
        assert!(err.to_string().contains("at least 1"), "{err}");
        std::env::remove_var(VAR);

        let dir = tempfile::tempdir().unwrap();
        let mut config = StoreConfig::new(Backend::Fs, dir.path().to_path_buf());
        assert_eq!(config.turn_end_rotate_bytes, None);
        config.turn_end_rotate_bytes = Some(0);
        let opened = OpenStore::open(&config).await.unwrap();
        let OpenBackend::Fs(fs) = opened.backend() else {
            panic!("not the file store");
        };
        assert_eq!(fs.options().turn_end_rotate_bytes, 0);
    }

    #[test]
    fn a_url_is_debugged_without_its_password() {
        let url = StoreUrl("postgres://u:s3cret@h/db".into());
        assert!(!format!("{url:?}").contains("s3cret"));
    }
}
