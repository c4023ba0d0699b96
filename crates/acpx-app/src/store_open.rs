//! Opening the storage backend chosen with `--store`: the opening itself, the environment
//! variables it honours and where each backend keeps its data are [`acpx_stores`]'s; this
//! module adds the settling of loads for reading commands and, for each way opening fails,
//! what the user can do about it (a [`Problem`]). Kept here rather than in `acpx-stores`,
//! which sits below the engine and knows neither exit codes nor `acpx` commands.
//!
//! - `fs`: files under `<home>/sessions/…`; `sqlite`: `<home>/acpx.db`;
//! - `postgres`: the URL of `ACPX_STORE_URL` or the config's `storeUrl`, in the schema
//!   `ACPX_STORE_SCHEMA` (default `acpx`). The URL is never shown with its password.

use std::path::Path;
use std::sync::Arc;

use acpx_model::SettleOnLoad;

use acpx_stores::{OpenError, StoreConfig, ENV_STORE_URL};
use acpx_stores::{OpenStore, StoreUrl};

use crate::config_file::Backend;
use crate::problem::Problem;

/// Opens `backend` under `home` (or, for postgres, at `ACPX_STORE_URL` / `config_url`),
/// creating it when absent; settling every load when `settle_loads` (what a command that
/// reads sessions asks for).
pub async fn open(
    backend: Backend,
    home: &Path,
    config_url: Option<&StoreUrl>,
    settle_loads: bool,
) -> Result<OpenStore, Problem> {
    let mut config = StoreConfig::new(backend, home.to_path_buf());
    config.url = config_url.cloned();
    if settle_loads {
        // A reading command does not hold a long session whole: its turns before the last
        // two go to spill files as they are read (docs/format.md decision 17, "Every command
        // that reads a session reads a long one this way").
        config.settle_on_load = Some(Arc::new(SettleOnLoad::new(
            acpx_runtime::text_spill::settled_stores,
        )));
    }
    let opened = match config.from_env() {
        Ok(config) => OpenStore::open(&config).await,
        Err(e) => Err(e),
    };
    opened.map_err(open_error)
}

/// The identity of the store `open` would open ([`StoreConfig::identity`]), without opening
/// it: what keys the processes that drive its sessions.
pub fn identity(
    backend: Backend,
    home: &Path,
    config_url: Option<&StoreUrl>,
) -> Result<String, Problem> {
    let mut config = StoreConfig::new(backend, home.to_path_buf());
    config.url = config_url.cloned();
    Ok(config.from_env().map_err(open_error)?.identity())
}

/// An [`OpenError`] with what to do about it.
fn open_error(e: OpenError) -> Problem {
    match e {
        OpenError::BadNumber { name, least, .. } => Problem::usage(e.to_string()).with_hint(
            format!("unset {name} or give it an integer of at least {least}"),
        ),
        OpenError::BadFlag { name, .. } => {
            Problem::usage(e.to_string()).with_hint(format!("unset {name} or set it to 1 or 0"))
        }
        OpenError::Home { .. } => Problem::runtime(e.to_string()).with_hint(
            "check --home / ACPX_HOME: it must be a directory acpx may create and write",
        ),
        OpenError::MissingUrl => Problem::usage("--store postgres needs the database URL")
            .with_hint(format!(
                "set {ENV_STORE_URL}=postgres://user:password@host/db or \"storeUrl\" in the config"
            )),
        OpenError::Store {
            backend,
            location,
            source,
        } => {
            // A damaged or foreign database file is about the file, not the directory:
            // `fsck` cannot open it either, so say what can be done with it.
            let corrupt = matches!(source, acpx_model::StoreError::Corrupt { .. });
            let io = matches!(source, acpx_model::StoreError::Io { .. });
            let too_new = matches!(source, acpx_model::StoreError::TooNew(_));
            let mut err = Problem::from(source);
            // The store's message starts with its location too: name it once.
            let detail = match err.message.find(location.as_str()) {
                Some(at) => {
                    let rest = &err.message[at + location.len()..];
                    rest.split_once(": ").map_or(rest, |(_, d)| d).to_owned()
                }
                None => err.message.clone(),
            };
            err.message = format!(
                "cannot open the {} store at {location}: {detail}",
                backend.as_str(),
            );
            if corrupt && backend == acpx_stores::Backend::Sqlite {
                err.with_hint(format!(
                    "{location} is damaged or is not an acpx database, and `acpx fsck` cannot \
                     open it either: restore it from a backup, or move it away (the next \
                     command starts a new, empty store there)"
                ))
            } else if backend == acpx_stores::Backend::Postgres {
                let hint = postgres_hint(&detail);
                err.with_hint(hint)
            } else if too_new {
                err.with_hint("a newer acpx wrote it: run that acpx, or use another --home")
            } else if io {
                err.with_hint("check --home / ACPX_HOME and the permissions of that directory")
            } else {
                // The store's message says what to do (a schema upgrade waiting for an
                // older acpx's process, for one); a hint about the directory would mislead.
                err
            }
        }
    }
}

/// What to do about a PostgreSQL store that cannot be opened, from the server's (or the
/// socket's) own message.
fn postgres_hint(detail: &str) -> String {
    let d = detail.to_ascii_lowercase();
    if d.contains("does not exist") && d.contains("database") {
        format!("create that database (`createdb NAME`) or name another one in {ENV_STORE_URL} / storeUrl")
    } else if d.contains("password authentication failed") || d.contains("role") {
        format!("check the user and password in {ENV_STORE_URL} / storeUrl")
    } else if d.contains("connection refused") || d.contains("error connecting") {
        format!("start the server, or fix the host and port in {ENV_STORE_URL} / storeUrl")
    } else {
        format!(
            "check {ENV_STORE_URL} / storeUrl, that the server is running, and that the user may \
             create the schema"
        )
    }
}
