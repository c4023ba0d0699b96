//! Search over long messages, which the SQLite store keeps in parts of 64 KiB that overlap
//! by 1 KiB: every hit and snippet equals the scanning implementation's
//! (`acpx_model::search_record`), for terms inside a part, across a part boundary, in
//! different parts of one message and longer than the overlap; a message that grows is
//! re-indexed only in its changed parts.

use crate::common;
use crate::support;

use acpx_model::search::search_record;
use acpx_model::thread::Message;
use acpx_model::{SearchQuery, SessionRecord, Store};
use common::*;
use support::{assert_fts_in_step, open, raw};

/// `count` words `w00000 `, `w00001 `, …: 7 bytes each, so part boundaries (multiples of
/// 65,536 bytes) fall inside words.
fn words(count: usize) -> String {
    (0..count).map(|i| format!("w{i:05} ")).collect()
}

fn set_reply(r: &mut SessionRecord, text: &str) {
    r.thread.messages.truncate(1);
    r.thread.messages.push(agent(text));
}

async fn assert_same_as_scan(store: &impl Store, record: &SessionRecord, text: &str) {
    let query = SearchQuery {
        text: text.into(),
        ..SearchQuery::default()
    };
    let got = store.search(&query).await.unwrap();
    let want = search_record(record, &query);
    assert_eq!(got, want, "query {text:?}");
}

#[tokio::test]
async fn long_messages_match_and_show_as_the_scan_does() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let mut a = record("a", "/one", 2_000);
    a.thread.messages.push(user("write a long answer"));
    let reply = words(30_000); // 210,000 bytes: four parts
    set_reply(&mut a, &reply);
    store.create(&mut a).await.unwrap();

    // 65,536 / 7 = 9,362.3: word 9362 starts 2 bytes before the first boundary.
    let crossing = "w09362";
    assert!(reply.find(crossing).unwrap() < 65_536);
    assert!(reply.find(crossing).unwrap() + crossing.len() > 65_536);
    let long_term: String = reply[65_000..66_200].trim().to_owned();
    assert!(long_term.len() > 1_024);
    for text in [
        "w00000",            // the start of the message
        "w00100",            // inside part 0
        crossing,            // across the first boundary
        "w09363",            // just after it (in part 1 and in the overlap of nothing)
        "w20000",            // inside part 2
        "w29999",            // the end of the message
        "w00001 w29998",     // two terms in different parts
        "w09362 write",      // a term of another message: no hit
        "w2",                // a short term (instr), first in part 2
        "nothing-like-this", // no hit
        &long_term,          // longer than the overlap, across a boundary
    ] {
        assert_same_as_scan(&store, &a, text).await;
    }
}

#[tokio::test]
async fn a_growing_message_rewrites_only_its_changed_parts() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let mut a = record("a", "/one", 2_000);
    a.thread.messages.push(user("stream"));
    set_reply(&mut a, &words(20_000)); // 140,000 bytes: parts 0, 1, 2
    store.create(&mut a).await.unwrap();
    let conn = raw(&store);
    let rowids = |conn: &rusqlite::Connection| -> Vec<(i64, i64, i64)> {
        conn.prepare(
            "SELECT part, rowid, text_start FROM messages WHERE message_index = 1 ORDER BY part",
        )
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
    };
    let before = rowids(&conn);
    assert_eq!(before.len(), 3);
    assert_eq!(before[0].2, 0);
    assert!(before[1].2 < 65_536 && before[1].2 >= 65_536 - 1_024 - 3);

    set_reply(&mut a, &words(40_000)); // 280,000 bytes: parts 0 to 4
    store.save(&mut a).await.unwrap();
    let after = rowids(&conn);
    assert_eq!(after.len(), 5);
    // The full parts kept their rows (an update of the text would have kept the rowid
    // too, so compare the hash column's witness: the text is unchanged).
    assert_eq!(after[..2], before[..2]);
    let unchanged: i64 = conn
        .query_row(
            "SELECT count(*) FROM messages WHERE message_index = 1 AND part < 2 \
             AND length(text) >= 65536 - 3",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(unchanged, 2);
    assert_same_as_scan(&store, &a, "w39999").await;
    assert_same_as_scan(&store, &a, "w18724").await; // around the third boundary

    // Shrinking drops the parts that are gone, from the index too.
    set_reply(&mut a, "short now");
    store.save(&mut a).await.unwrap();
    assert_eq!(rowids(&conn).len(), 1);
    assert_same_as_scan(&store, &a, "w39999").await;
    assert_same_as_scan(&store, &a, "short").await;
    assert_fts_in_step(&conn);
}

#[tokio::test]
async fn multibyte_text_is_cut_on_character_boundaries() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let mut a = record("a", "/one", 2_000);
    // 3-byte characters: 65,536 is not a boundary.
    let text = "日本語のテキスト ".repeat(8_000);
    a.thread.messages.push(Message::Resume);
    a.thread
        .messages
        .push(agent(&format!("{text}needle {text}")));
    store.create(&mut a).await.unwrap();
    assert_same_as_scan(&store, &a, "needle").await;
    assert_same_as_scan(&store, &a, "テキスト needle").await;
}

#[tokio::test]
async fn a_part_whose_text_moved_by_a_byte_is_rewritten() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let mut a = record("a", "/one", 2_000);
    a.thread.messages.push(user("repeat"));
    // All 3-byte characters: the part boundaries fall at 65,535 and 131,070 bytes.
    let same = "あ".repeat(50_000);
    set_reply(&mut a, &format!("{same}needle"));
    store.create(&mut a).await.unwrap();
    // One byte in front moves every boundary by one byte, and part 1's text (all "あ")
    // stays byte for byte the same: its row must still learn its new start.
    set_reply(&mut a, &format!("x{same}needle"));
    store.save(&mut a).await.unwrap();
    let conn = raw(&store);
    let starts: Vec<i64> = conn
        .prepare("SELECT text_start FROM messages WHERE message_index = 1 ORDER BY part")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let want: Vec<i64> = acpx_store_sqlite_part_starts(&format!("x{same}needle"));
    assert_eq!(starts, want);
    assert_same_as_scan(&store, &a, "needle").await;
    let long_term = "あ".repeat(400); // 1,200 bytes: checked on the message put back together
    assert_same_as_scan(&store, &a, &format!("x{long_term}")).await;
}

/// The stored starts of the parts of `text`, computed as the store does (64 KiB parts on
/// character boundaries, each row 1 KiB earlier), independently of its code.
fn acpx_store_sqlite_part_starts(text: &str) -> Vec<i64> {
    let floor = |mut at: usize| {
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        at
    };
    let mut starts = vec![0];
    let mut own = 0;
    while text.len() - own > 64 * 1024 {
        own = floor(own + 64 * 1024);
        starts.push(floor(own - 1024) as i64);
    }
    starts
}
