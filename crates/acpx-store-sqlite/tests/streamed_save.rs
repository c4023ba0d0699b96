//! A save by the holder of the session's lock on a multi-threaded runtime runs in place and
//! serializes the document straight into the row (incremental blob I/O into a `zeroblob`).
//! The row must hold exactly what the serialized path stores, the file store's bytes (as a
//! BLOB), readable by the JSON functions and as text.

mod common;
mod support;

use std::time::Duration;

use acpx_model::{SearchQuery, SessionRecord, Store, StoreError};
use common::*;
use support::{assert_fts_in_step, open, raw};

fn stored(store: &acpx_store_sqlite::SqliteStore, id: &str) -> (String, Vec<u8>, i64, String) {
    raw(store)
        .query_row(
            "SELECT typeof(document), CAST(document AS BLOB), revision, \
                 json_extract(document, '$.acpxRecordId') \
                     || json_extract(CAST(document AS TEXT), '$.acpxRecordId') \
             FROM sessions WHERE acpx_record_id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .unwrap()
}

fn check_row(store: &acpx_store_sqlite::SqliteStore, r: &SessionRecord) {
    let (ty, bytes, revision, id) = stored(store, r.acpx_record_id.as_str());
    assert_eq!(ty, "blob");
    assert_eq!(revision as u64, r.revision);
    assert_eq!(id, r.acpx_record_id.as_str().repeat(2));
    assert!(
        bytes == r.to_json_vec().unwrap(),
        "the row holds other bytes"
    );
    // The table-valued JSON functions of the hand queries (docs/format.md) read it too.
    let messages: usize = raw(store)
        .query_row(
            "SELECT count(*) FROM sessions s, json_each(s.document, '$.thread.messages') \
             WHERE s.acpx_record_id = ?1",
            [r.acpx_record_id.as_str()],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(messages, r.thread.messages.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_save_in_place_stores_the_file_stores_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let id = rid("streamed");
    let mut r = record("streamed", "/repo", 1);
    store.create(&mut r).await.unwrap();
    let lock = store.lock(&id, Duration::from_secs(5)).await.unwrap();

    // Small, then growing to megabytes (the row's text in overflow pages), then shrinking
    // again: each placeholder is exactly as long as the document written into it.
    r.thread.messages.push(user("ünïcödé \"quotes\"\n"));
    store.save(&mut r).await.unwrap();
    check_row(&store, &r);
    let reply: String = "streamed words, \u{1F600} and more; ".repeat(60_000);
    r.thread.messages.push(agent(&reply));
    store.save(&mut r).await.unwrap();
    check_row(&store, &r);
    assert!(
        r.to_json_vec().unwrap().len() > 1 << 20,
        "above the small-cache threshold"
    );
    r.thread.messages.pop();
    r.thread.title = "short again".into();
    store.save(&mut r).await.unwrap();
    check_row(&store, &r);
    assert_eq!(store.load(&id).await.unwrap(), r);

    // The revision check still refuses a stale copy, and the row is left as it was.
    let mut stale = r.clone();
    stale.revision -= 1;
    stale.thread.messages.push(agent(&reply));
    assert!(matches!(
        store.save(&mut stale).await,
        Err(StoreError::Conflict { .. })
    ));
    check_row(&store, &r);

    // The search index is in step with the parts of the saved messages.
    drop(lock);
    assert_fts_in_step(&raw(&store));
    let hits = store
        .search(&SearchQuery {
            text: "ünïcödé".into(),
            ..SearchQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(hits.len(), 1);
}
