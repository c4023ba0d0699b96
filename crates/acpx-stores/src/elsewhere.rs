//! Whether a home keeps sessions in another local backend than the one in use: what `acpx
//! sessions list` says when the store it lists is empty (sessions made with the other
//! `--store`, or left behind by a `migrate`).

use std::path::{Path, PathBuf};

use acpx_model::{ClosedFilter, ListQuery, RecordId};

use crate::{sqlite_path, Backend, OpenStore, StoreConfig};

/// The other local backend of `home` and where it keeps its data, when it holds a session;
/// `backend` is the one in use (a database backend is compared with the file store). The
/// file store is looked at without opening it (opening sweeps its directory): a snapshot file
/// `<id>.json` is enough. A SQLite store is opened only when its file exists, and named only
/// when it has a session (any `--store sqlite` command creates an empty `acpx.db`).
pub async fn other_local_store(home: &Path, backend: Backend) -> Option<(Backend, PathBuf)> {
    match backend {
        Backend::Sqlite | Backend::Postgres => {
            let dir = home.join("sessions");
            let any_snapshot = std::fs::read_dir(&dir).ok()?.flatten().any(|e| {
                let name = e.file_name();
                let name = name.to_string_lossy();
                !name.starts_with('.')
                    && name
                        .strip_suffix(".json")
                        .is_some_and(|id| RecordId::parse(id).is_ok())
            });
            any_snapshot.then_some((Backend::Fs, dir))
        }
        Backend::Fs => {
            let db = sqlite_path(home);
            if !db.is_file() {
                return None;
            }
            let config = StoreConfig::new(Backend::Sqlite, home.to_path_buf())
                .from_env()
                .ok()?;
            let store = OpenStore::open(&config).await.ok()?;
            let query = ListQuery {
                closed: ClosedFilter::Any,
                limit: Some(1),
                ..ListQuery::default()
            };
            let page = store.as_dyn().list(&query).await.ok()?;
            (!page.sessions.is_empty()).then_some((Backend::Sqlite, db))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_empty_home_has_no_other_store() {
        let home = tempfile::tempdir().unwrap();
        assert_eq!(other_local_store(home.path(), Backend::Fs).await, None);
        assert_eq!(other_local_store(home.path(), Backend::Sqlite).await, None);
    }

    #[tokio::test]
    async fn a_snapshot_file_names_the_file_store() {
        let home = tempfile::tempdir().unwrap();
        let dir = home.path().join("sessions");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(".tmp-write.json"), "{}").unwrap();
        assert_eq!(other_local_store(home.path(), Backend::Sqlite).await, None);
        let id = RecordId::generate();
        std::fs::write(dir.join(format!("{id}.json")), "{}").unwrap();
        assert_eq!(
            other_local_store(home.path(), Backend::Sqlite).await,
            Some((Backend::Fs, dir))
        );
    }

    #[tokio::test]
    async fn an_empty_sqlite_file_is_not_named() {
        let home = tempfile::tempdir().unwrap();
        let config = StoreConfig::new(Backend::Sqlite, home.path().to_path_buf());
        drop(OpenStore::open(&config).await.unwrap());
        assert!(sqlite_path(home.path()).is_file());
        assert_eq!(other_local_store(home.path(), Backend::Fs).await, None);
    }
}
