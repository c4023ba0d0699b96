//! The PostgreSQL store mirrors the file store: for the same operations, the events read
//! back and written as NDJSON are byte-for-byte the lines of the file store's log, and the
//! `document` column is byte-for-byte its `session.json`. Plus a copy both ways, and the
//! refusal of a schema written by a newer acpx.

use crate::common;

use acpx_model::migrate::copy_store;
use acpx_model::{Durability, EventQuery, ListQuery, RecordId, SearchQuery, Store, StoreError};
use acpx_store_fs::FsStore;
use acpx_store_postgres::{PostgresStore, SCHEMA_VERSION};
use common::server::{admin, open, schema, url};
use common::*;
use serde_json::json;

async fn script(store: &dyn Store) -> Vec<RecordId> {
    let mut ids = Vec::new();
    for (i, cwd) in ["/work/a", "/work/b/", "/"].iter().enumerate() {
        let id = format!("mirror-{i}");
        let mut r = record(&id, cwd, 10_000 + i as i64);
        r.name = (i != 1).then(|| format!("name {i}"));
        r.agent_session_id = (i == 2).then(|| "native-xyz".to_owned());
        store.create(&mut r).await.unwrap();
        let id = r.acpx_record_id.clone();
        let evs = events(&id, 1, 150 + 37 * i as u64);
        let mut next = 0;
        for (k, size) in [1usize, 64, 7, 64, 2, 64, 100].iter().cycle().enumerate() {
            if next >= evs.len() {
                break;
            }
            let end = (next + size).min(evs.len());
            let durability = [Durability::Flush, Durability::Fsync, Durability::None][k % 3];
            append_locked(store, &id, &evs[next..end], durability)
                .await
                .unwrap();
            next = end;
        }
        r.thread.messages.push(user(
            "Mirror me: ünïcödé, \"quotes\", tabs\t and \\ slashes 100%_done",
        ));
        r.thread.messages.push(agent("Done."));
        r.thread.title = format!("Session {i}");
        r.extra
            .insert("futureTopLevel".into(), json!({"z": [1.5, null], "a": "b"}));
        store.save(&mut r).await.unwrap();
        if i == 1 {
            store.close(&id, ts(20_000)).await.unwrap();
        }
        ids.push(id);
    }
    ids
}

async fn lines(store: &dyn Store, id: &RecordId) -> Vec<String> {
    let page = store.read_events(id, &EventQuery::default()).await.unwrap();
    page.events.iter().map(|e| e.to_ndjson()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_and_documents_are_byte_for_byte_the_file_stores() {
    let Some(url) = url() else { return };
    let dir = tempfile::tempdir().unwrap();
    let fs = FsStore::open(dir.path().join("fs")).unwrap();
    let schema = schema("mirror");
    let pg = open(&url, &schema).await;
    let ids = script(&fs).await;
    assert_eq!(script(&pg).await, ids);
    let client = admin(&url).await;
    for id in &ids {
        let a = lines(&fs, id).await;
        let b = lines(&pg, id).await;
        assert!(a.len() >= 150);
        assert_eq!(a, b, "{id}");
        let snapshot = std::fs::read_to_string(fs.snapshot_path(id)).unwrap();
        let row = client
            .query_one(
                &format!("SELECT document FROM {schema}.sessions WHERE acpx_record_id = $1"),
                &[&id.as_str()],
            )
            .await
            .unwrap();
        assert_eq!(row.get::<_, String>(0), snapshot, "{id}");
    }
    let a = fs.list(&ListQuery::default()).await.unwrap().sessions;
    let b = pg.list(&ListQuery::default()).await.unwrap().sessions;
    assert_eq!(a, b);
    // LIKE's wildcards in a term are plain characters.
    for text in ["100%_done", "ÜNÏ", "SLASHES"] {
        let q = SearchQuery {
            text: text.into(),
            ..SearchQuery::default()
        };
        assert_eq!(
            fs.search(&q).await.unwrap(),
            pg.search(&q).await.unwrap(),
            "{text}"
        );
    }
    let q = SearchQuery {
        text: "1_0%".into(),
        ..SearchQuery::default()
    };
    assert!(pg.search(&q).await.unwrap().is_empty());

    // Copies both ways are verified by copy_store itself.
    let back = FsStore::open(dir.path().join("back")).unwrap();
    copy_store(&pg, &back).await.unwrap();
    let schema2 = common::server::schema("mirror_copy");
    let pg2 = open(&url, &schema2).await;
    copy_store(&fs, &pg2).await.unwrap();
    for id in &ids {
        assert_eq!(lines(&back, id).await, lines(&fs, id).await);
        assert_eq!(lines(&pg2, id).await, lines(&fs, id).await);
    }
    pg.drop_schema().await.unwrap();
    pg2.drop_schema().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_from_a_newer_acpx_is_refused_untouched() {
    let Some(url) = url() else { return };
    let schema = schema("newer");
    let store = open(&url, &schema).await;
    let client = admin(&url).await;
    client
        .execute(
            &format!("UPDATE {schema}.acpx_schema_version SET version = $1"),
            &[&(SCHEMA_VERSION + 1)],
        )
        .await
        .unwrap();
    let err = PostgresStore::connect(
        &url,
        acpx_store_postgres::PostgresStoreOptions {
            schema: schema.clone(),
            ..Default::default()
        },
    )
    .await
    .unwrap_err();
    assert!(matches!(err, StoreError::TooNew(_)), "{err}");
    assert!(err.to_string().contains("upgrade acpx"), "{err}");
    let version: i32 = client
        .query_one(
            &format!("SELECT version FROM {schema}.acpx_schema_version"),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, SCHEMA_VERSION + 1);
    store.drop_schema().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_never_show_the_password() {
    let url = "postgres://someone:hunter2@127.0.0.1:1/nowhere?connect_timeout=2";
    let err = PostgresStore::connect(url, Default::default())
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(!text.contains("hunter2"), "{text}");
    assert!(text.contains("someone:***@127.0.0.1:1"), "{text}");
}
