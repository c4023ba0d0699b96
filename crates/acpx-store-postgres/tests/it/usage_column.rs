//! `sessions.usage` (schema version 3) on a real PostgreSQL server (runs only with
//! `ACPX_TEST_POSTGRES_URL`): written with every save, and filled in from the documents of
//! the rows a version 2 schema held when it is upgraded.

use crate::common;

use acpx_model::{ListQuery, SessionUsage, Store};
use common::server::{admin, open, schema, url};
use common::*;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upgrade_to_version_3_fills_in_the_usage_of_existing_rows() {
    let Some(url) = url() else { return };
    let schema = schema("usage");
    let s = open(&url, &schema).await;
    let mut r = record("u1", "/repo", 1_772_000_000_000);
    r.thread.cumulative_token_usage.output_tokens = 12;
    r.acpx.extra.insert(
        "context_usage".into(),
        json!({"used": 3, "size": 30, "cost": {"amount": 0.75, "currency": "USD"}}),
    );
    s.create(&mut r).await.unwrap();
    let expected = SessionUsage::of(&r);
    assert!(expected.reported);
    let listed = s.list(&ListQuery::default()).await.unwrap();
    assert_eq!(listed.sessions[0].usage, expected, "written by the save");
    drop(s);
    // Back to version 2 as it was: no column.
    admin(&url)
        .await
        .batch_execute(&format!(
            "ALTER TABLE {schema}.sessions DROP COLUMN usage; \
             UPDATE {schema}.acpx_schema_version SET version = 2;"
        ))
        .await
        .unwrap();
    let s = open(&url, &schema).await;
    let listed = s.list(&ListQuery::default()).await.unwrap();
    assert_eq!(
        listed.sessions[0].usage, expected,
        "filled in by the upgrade"
    );
    let stored: Option<String> = admin(&url)
        .await
        .query_one(&format!("SELECT usage FROM {schema}.sessions"), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        stored.as_deref().map(SessionUsage::from_json_text),
        Some(Ok(expected))
    );
}
