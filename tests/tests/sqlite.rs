//! The conformance suite against `SqliteStore`, unchanged. The raw-log and failpoint checks
//! do not apply (a row cannot hold a torn or damaged line; SQLite has no crash points of ours)
//! and are reported as ignored; a damaged document is injected into its row the way a hand
//! edit in the `sqlite3` shell would do it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use acpx_model::RecordId;
use acpx_store_sqlite::{SqliteStore, SqliteStoreOptions};
use acpx_tests::{argv, DirBackend};

fn db(dir: &Path) -> PathBuf {
    dir.join("acpx.db")
}

/// Overwrites the `document` column of `id` with raw bytes, keeping the revision (so the row
/// counts as edited outside acpx). `CAST` keeps bytes that are not UTF-8 as they are.
fn inject_document(dir: &Path, id: &RecordId, bytes: &[u8]) {
    let conn = rusqlite::Connection::open(db(dir)).expect("open the database");
    conn.busy_timeout(Duration::from_secs(30)).unwrap();
    let changed = conn
        .execute(
            // The table, not the `sessions` view: a change made through the view's trigger
            // is not counted in `changes()`.
            "UPDATE session_documents SET document = CAST(?1 AS TEXT) WHERE session_key = \
             (SELECT session_key FROM session_rows WHERE acpx_record_id = ?2)",
            (bytes, id.as_str()),
        )
        .expect("update the document");
    assert_eq!(changed, 1, "no row for {id}");
}

fn backend_with(options: SqliteStoreOptions, worker_flags: &'static [&'static str]) -> DirBackend {
    DirBackend::new("sqlite", move |dir| {
        Arc::new(SqliteStore::open_with(db(dir), options.clone()).expect("open SqliteStore"))
    })
    .worker(move |dir| {
        let path = db(dir).display().to_string();
        let mut args = argv(["--backend", "sqlite", "--path", &path]);
        args.extend(argv(worker_flags.iter().copied()));
        args
    })
    .snapshot_injector(inject_document)
}

fn backend() -> DirBackend {
    backend_with(SqliteStoreOptions::default(), &[])
}

/// 4 KiB × 3 of retained event bytes: a dozen events go over the budget.
fn tiny_budget() -> DirBackend {
    backend_with(
        SqliteStoreOptions {
            max_segment_bytes: 4096,
            max_segments: 3,
            lock_timeout: Duration::from_secs(60),
            ..SqliteStoreOptions::default()
        },
        &[
            "--max-segment-bytes",
            "4096",
            "--max-segments",
            "3",
            "--lock-timeout-ms",
            "60000",
        ],
    )
    .small_event_budget()
}

acpx_tests::conformance_tests!(backend(), retention = tiny_budget());
