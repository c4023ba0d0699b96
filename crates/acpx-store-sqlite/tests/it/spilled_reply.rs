//! A reply still in its spill file (the process recording a long turn) is saved without being
//! read back whole: the document is streamed, the search parts are read a part at a time.
//! The row and the parts must be exactly those of the same reply in memory, on both save
//! paths (in place under the session's lock, and on a pool thread).

use crate::common;
use crate::support;

use std::sync::Arc;
use std::time::Duration;

use acpx_model::testing::MemorySpill;
use acpx_model::{AgentContent, Message, SearchQuery, SessionRecord, Store, StoreError, Thinking};
use common::*;
use support::{assert_fts_in_step, open, raw};

/// A `messages` row: index, part, text hash, text start.
type PartRow = (i64, i64, i64, i64);

/// The stored document and message parts of session `id`.
fn stored(store: &acpx_store_sqlite::SqliteStore, id: &str) -> (Vec<u8>, Vec<PartRow>) {
    let conn = raw(store);
    let doc = conn
        .query_row(
            "SELECT CAST(document AS BLOB) FROM sessions WHERE acpx_record_id = ?1",
            [id],
            |r| r.get(0),
        )
        .unwrap();
    let mut stmt = conn
        .prepare(
            "SELECT message_index, part, text_hash, text_start FROM messages \
             WHERE acpx_record_id = ?1 ORDER BY message_index, part",
        )
        .unwrap();
    let parts = stmt
        .query_map([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    (doc, parts)
}

/// `r` with its last message's text moved into a spill.
fn spill_last(r: &mut SessionRecord) -> Arc<MemorySpill> {
    let spill = Arc::new(MemorySpill::default());
    let Some(Message::Agent(a)) = r.thread.messages.last_mut() else {
        panic!("an agent message last");
    };
    let Some(AgentContent::Text(t)) = a.content.last_mut() else {
        panic!("a text last");
    };
    t.spill_into(spill.clone()).unwrap();
    spill
}

async fn check(in_place: bool) {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    // Multi-byte characters across the 64 KiB part boundaries; a word only near the end.
    let reply = format!("{}the-last-word", "reply ✓ 🦀 é, ".repeat(40_000));
    let (id_mem, id_spill) = (rid("in-memory"), rid("spilled"));
    let mut records = Vec::new();
    for name in ["in-memory", "spilled"] {
        let mut r = record(name, "/repo", 1);
        store.create(&mut r).await.unwrap();
        r.thread.messages.push(user("a long one please"));
        let mut reply_msg = agent(&reply);
        // Thinking before the reply: the parts cut the pieces joined by a newline.
        if let Message::Agent(a) = &mut reply_msg {
            a.content.insert(
                0,
                AgentContent::Thinking(Thinking {
                    text: "pondering ✓".into(),
                    signature: None,
                }),
            );
        }
        r.thread.messages.push(reply_msg);
        records.push(r);
    }
    let spill = spill_last(&mut records[1]);
    let _locks = if in_place {
        Some((
            store.lock(&id_mem, Duration::from_secs(5)).await.unwrap(),
            store.lock(&id_spill, Duration::from_secs(5)).await.unwrap(),
        ))
    } else {
        None
    };
    for r in &mut records {
        store.save(r).await.unwrap();
    }
    let (doc_mem, parts_mem) = stored(&store, id_mem.as_str());
    let (doc_spill, parts_spill) = stored(&store, id_spill.as_str());
    assert!(parts_mem.len() > 10, "{} parts", parts_mem.len());
    assert_eq!(parts_spill, parts_mem, "the same parts, hashes and starts");
    let rename = |d: Vec<u8>, id: &str| String::from_utf8(d).unwrap().replace(id, "X");
    assert_eq!(
        rename(doc_spill, id_spill.as_str()).replace("spilled", "N"),
        rename(doc_mem, id_mem.as_str()).replace("in-memory", "N")
    );
    let loaded = store.load(&id_spill).await.unwrap();
    assert_eq!(loaded, records[1]);

    // An unreadable spill refuses the save and leaves the row as it was.
    let before = stored(&store, id_spill.as_str());
    records[1].thread.title = "changed".into();
    spill.fail_reads(true);
    let err = store.save(&mut records[1]).await.unwrap_err();
    assert!(
        matches!(&err, StoreError::Backend { message, .. } if message.contains("spill file")),
        "{err:?}"
    );
    assert_eq!(stored(&store, id_spill.as_str()), before);
    drop(_locks);

    assert_fts_in_step(&raw(&store));
    let hits = store
        .search(&SearchQuery {
            text: "the-last-word".into(),
            ..SearchQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(hits.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spilled_reply_saved_in_place_stores_what_the_same_reply_in_memory_does() {
    check(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spilled_reply_saved_on_a_pool_thread_stores_what_the_same_reply_in_memory_does() {
    check(false).await;
}
