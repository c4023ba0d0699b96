//! The test server (`ACPX_TEST_POSTGRES_URL`) and a scratch schema per test.

use std::sync::atomic::{AtomicU32, Ordering};

use acpx_store_postgres::{PostgresStore, PostgresStoreOptions};

pub const URL_VAR: &str = "ACPX_TEST_POSTGRES_URL";

/// The server URL; `None` (with a visible message) when it is not set outside CI. Under
/// `CI=true` a missing server fails the test.
pub fn url() -> Option<String> {
    match std::env::var(URL_VAR) {
        Ok(u) if !u.trim().is_empty() => Some(u),
        _ => {
            assert!(
                std::env::var("CI").map_or(true, |v| v != "true"),
                "{URL_VAR} is not set under CI=true: the postgres tests must run"
            );
            eprintln!("skipped: set {URL_VAR} to run the postgres tests");
            None
        }
    }
}

/// A schema name no other test (or run) uses.
pub fn schema(tag: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "acpx_{tag}_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// `url` with an `application_name` that tells this test's connections apart.
pub fn url_with_app(url: &str, app: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}application_name={app}")
}

pub async fn open(url: &str, schema: &str) -> PostgresStore {
    PostgresStore::connect(
        url,
        PostgresStoreOptions {
            schema: schema.to_owned(),
            ..PostgresStoreOptions::default()
        },
    )
    .await
    .unwrap_or_else(|e| panic!("connect: {e}"))
}

pub async fn admin(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect to the test server");
    tokio::spawn(connection);
    client
}

/// Ends every server process of connections named `app` (what an administrator's
/// `pg_terminate_backend` or a server restart does to them); returns how many.
pub async fn terminate(url: &str, app: &str) -> i64 {
    let client = admin(url).await;
    let row = client
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE application_name = $1 AND pid <> pg_backend_pid()",
            &[&app],
        )
        .await
        .unwrap();
    row.get(0)
}
