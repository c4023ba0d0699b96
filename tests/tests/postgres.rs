//! The conformance suite against `PostgresStore`, on the server named by
//! `ACPX_TEST_POSTGRES_URL` (`.ci/run` starts one; see `scripts/pg-test-server.sh`). Every
//! backend instance gets a schema of its own, dropped afterwards, so checks run in parallel
//! without seeing each other. Without the variable the suite is skipped with a message,
//! except under `CI=true`, where a missing server fails the run.
//!
//! The raw-log and failpoint checks do not apply (a row cannot hold a torn or damaged line)
//! and are reported as ignored; a damaged document is injected into its row the way a hand
//! edit in `psql` would do it. The worker processes are the "other hosts": each opens the
//! same schema through its own connections.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use acpx_model::{RecordId, Store};
use acpx_store_postgres::{PostgresStore, PostgresStoreOptions};
use acpx_tests::{argv, Backend, Capabilities};
use async_trait::async_trait;

const URL_VAR: &str = "ACPX_TEST_POSTGRES_URL";

struct PostgresBackend {
    url: String,
    options: PostgresStoreOptions,
    opened: AtomicBool,
    small_event_budget: bool,
}

impl PostgresBackend {
    fn new(url: &str, mut options: PostgresStoreOptions, small_event_budget: bool) -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        options.schema = format!(
            "acpx_t{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        PostgresBackend {
            url: url.to_owned(),
            options,
            opened: AtomicBool::new(false),
            small_event_budget,
        }
    }

    async fn client(&self) -> tokio_postgres::Client {
        let (client, connection) = tokio_postgres::connect(&self.url, tokio_postgres::NoTls)
            .await
            .expect("connect to the test server");
        tokio::spawn(connection);
        client
    }
}

impl Drop for PostgresBackend {
    fn drop(&mut self) {
        if !self.opened.load(Ordering::Relaxed) {
            return;
        }
        // Dropped inside the check's runtime: the cleanup runs on a thread with its own.
        let (url, schema) = (self.url.clone(), self.options.schema.clone());
        let cleanup = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async {
                if let Ok((client, connection)) =
                    tokio_postgres::connect(&url, tokio_postgres::NoTls).await
                {
                    tokio::spawn(connection);
                    let _ = client
                        .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
                        .await;
                }
            });
        });
        let _ = cleanup.join();
    }
}

#[async_trait]
impl Backend for PostgresBackend {
    fn name(&self) -> &'static str {
        "postgres"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            worker: true,
            raw_snapshot: true,
            small_event_budget: self.small_event_budget,
            remote_tasks: true,
            ..Capabilities::NONE
        }
    }

    async fn open(&self) -> Arc<dyn Store> {
        self.opened.store(true, Ordering::Relaxed);
        Arc::new(
            PostgresStore::connect(&self.url, self.options.clone())
                .await
                .unwrap_or_else(|e| panic!("open PostgresStore: {e}")),
        )
    }

    fn worker_args(&self) -> Option<Vec<String>> {
        Some(argv([
            "--backend",
            "postgres",
            "--url",
            &self.url,
            "--schema",
            &self.options.schema,
            "--max-segment-bytes",
            &self.options.max_segment_bytes.to_string(),
            "--max-segments",
            &self.options.max_segments.to_string(),
            "--lock-timeout-ms",
            &self.options.lock_timeout.as_millis().to_string(),
        ]))
    }

    async fn inject_snapshot(&self, id: &RecordId, bytes: &[u8]) -> Option<()> {
        // A text column holds UTF-8 without NUL: other bytes are written as the closest text
        // a hand edit could store (lossy), which is just as malformed a document.
        let text = String::from_utf8_lossy(bytes).replace('\0', "");
        let changed = self
            .client()
            .await
            .execute(
                &format!(
                    "UPDATE {}.sessions SET document = $1 WHERE acpx_record_id = $2",
                    self.options.schema
                ),
                &[&text, &id.as_str()],
            )
            .await
            .expect("update the document");
        assert_eq!(changed, 1, "no row for {id}");
        Some(())
    }

    async fn inject_log_bytes(&self, _id: &RecordId, _bytes: &[u8]) -> Option<()> {
        None
    }

    fn data_dir(&self) -> Option<std::path::PathBuf> {
        None
    }
}

fn main() -> std::process::ExitCode {
    let url = match std::env::var(URL_VAR) {
        Ok(url) if !url.trim().is_empty() => url,
        _ => {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                eprintln!(
                    "error: {URL_VAR} is not set under CI=true: the postgres conformance suite \
                     must run (.ci/run starts a server with scripts/pg-test-server.sh)"
                );
                return std::process::ExitCode::FAILURE;
            }
            println!(
                "skipped: set {URL_VAR} (e.g. eval \"$(bash scripts/pg-test-server.sh start \
                 /tmp/acpx-pg)\") to run the postgres conformance suite"
            );
            return std::process::ExitCode::SUCCESS;
        }
    };
    let default_url = url.clone();
    let tiny_url = url;
    acpx_tests::suite!()
        .conformance(move || {
            PostgresBackend::new(
                &default_url,
                PostgresStoreOptions {
                    lock_timeout: Duration::from_secs(60),
                    pool_size: 4,
                    ..PostgresStoreOptions::default()
                },
                false,
            )
        })
        .retention(move || {
            // 4 KiB × 3 of retained event bytes: a dozen events go over the budget.
            PostgresBackend::new(
                &tiny_url,
                PostgresStoreOptions {
                    max_segment_bytes: 4096,
                    max_segments: 3,
                    lock_timeout: Duration::from_secs(60),
                    pool_size: 4,
                    ..PostgresStoreOptions::default()
                },
                true,
            )
        })
        .run()
}
