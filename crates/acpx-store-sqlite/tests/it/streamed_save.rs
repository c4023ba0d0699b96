//! A save by the holder of the session's lock on a multi-threaded runtime runs in place and
//! serializes the document straight into its row (incremental blob I/O). The `sessions` view
//! must show exactly what the serialized path stores, the file store's bytes, readable by the
//! JSON functions; the row itself holds them as text when short, and as a BLOB padded with
//! spaces when long (schema version 6), rewritten in place while the document fits.

use crate::common;
use crate::support;

use std::time::Duration;

use acpx_model::{SearchQuery, SessionRecord, Store, StoreError};
use common::*;
use support::{assert_fts_in_step, open, raw};

/// The row of session `id`: through the `sessions` view (type, bytes, revision, the record
/// id read twice by the JSON functions) and in `session_documents` (type, bytes).
struct Stored {
    view_type: String,
    view: Vec<u8>,
    revision: i64,
    json_id: String,
    row_type: String,
    row: Vec<u8>,
}

fn stored(store: &acpx_store_sqlite::SqliteStore, id: &str) -> Stored {
    raw(store)
        .query_row(
            "SELECT typeof(s.document), CAST(s.document AS BLOB), s.revision, \
                 json_extract(s.document, '$.acpxRecordId') \
                     || json_extract(d.document, '$.acpxRecordId'), \
                 typeof(d.document), CAST(d.document AS BLOB) \
             FROM sessions s JOIN session_documents d USING (session_key) \
             WHERE s.acpx_record_id = ?1",
            [id],
            |r| {
                Ok(Stored {
                    view_type: r.get(0)?,
                    view: r.get(1)?,
                    revision: r.get(2)?,
                    json_id: r.get(3)?,
                    row_type: r.get(4)?,
                    row: r.get(5)?,
                })
            },
        )
        .unwrap()
}

/// Checks the stored document of `r` and gives the length of its row.
fn check_row(store: &acpx_store_sqlite::SqliteStore, r: &SessionRecord) -> usize {
    let s = stored(store, r.acpx_record_id.as_str());
    let json = r.to_json_vec().unwrap();
    assert_eq!(s.view_type, "text", "the view gives the document as text");
    assert_eq!(s.revision as u64, r.revision);
    assert_eq!(s.json_id, r.acpx_record_id.as_str().repeat(2));
    assert!(s.view == json, "the view shows other bytes");
    if json.len() < 64 * 1024 {
        assert_eq!(s.row_type, "text");
        assert!(s.row == json, "a short document is stored exactly");
    } else {
        assert_eq!(s.row_type, "blob");
        assert!(s.row.len() >= json.len());
        assert!(s.row[..json.len()] == json[..], "the row holds other bytes");
        assert!(
            s.row[json.len()..].iter().all(|b| *b == b' '),
            "the rest of the row is spaces"
        );
    }
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
    s.row.len()
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
    let row = check_row(&store, &r);
    assert!(
        r.to_json_vec().unwrap().len() > 1 << 20,
        "above the small-cache threshold"
    );

    // In place: a message added at the end, a field before the long text growing (every
    // byte after it moves), a document shrinking by a little (its old tail turns to spaces).
    r.thread
        .messages
        .push(user("a short question after the long reply"));
    store.save(&mut r).await.unwrap();
    assert_eq!(check_row(&store, &r), row, "written in place");
    r.name = Some("a much longer name than before, moving every byte after it".into());
    store.save(&mut r).await.unwrap();
    assert_eq!(check_row(&store, &r), row, "written in place");
    r.thread.messages.pop();
    r.name = None;
    store.save(&mut r).await.unwrap();
    assert_eq!(check_row(&store, &r), row, "written in place");
    assert_eq!(store.load(&id).await.unwrap(), r);
    // Growing past the row's room makes a new, longer row.
    r.thread.messages.push(agent(&reply));
    store.save(&mut r).await.unwrap();
    assert!(check_row(&store, &r) > row, "a longer row");
    r.thread.messages.pop();
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

/// A session whose document row was deleted by hand loads as corrupt, and replacing its
/// snapshot (what `fsck --repair` does) makes the row again, short or long.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_document_row_deleted_by_hand_is_made_again_by_a_repair() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    for (name, reply_words) in [("short", 10), ("long", 20_000)] {
        let id = rid(name);
        let mut r = record(name, "/repo", 1);
        r.thread.messages.push(agent(&"word ".repeat(reply_words)));
        store.create(&mut r).await.unwrap();
        raw(&store)
            .execute(
                "DELETE FROM session_documents WHERE session_key = \
                 (SELECT session_key FROM session_rows WHERE acpx_record_id = ?1)",
                [name],
            )
            .unwrap();
        assert!(
            matches!(store.load(&id).await, Err(StoreError::Corrupt { .. })),
            "{name}"
        );
        let lock = store.lock(&id, Duration::from_secs(5)).await.unwrap();
        let mut repaired = r.clone();
        store.replace_snapshot(&lock, &mut repaired).await.unwrap();
        drop(lock);
        let loaded = store.load(&id).await.unwrap();
        assert_eq!(loaded.thread, r.thread, "{name}");
        check_row(&store, &loaded);
    }
    let checked: i64 = raw(&store)
        .query_row("SELECT min(document_checked) FROM session_rows", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(checked, 1, "the repaired rows are checked again");
}
