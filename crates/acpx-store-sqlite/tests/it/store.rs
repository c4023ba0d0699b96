//! Behaviour of `SqliteStore` on a real database file.

use crate::common;
use crate::support;

use std::os::unix::fs::PermissionsExt;

use acpx_model::{
    ClosedFilter, Durability, EventQuery, EventStream, ListQuery, ReadMode, Store, StoreError,
};
use acpx_store_sqlite::{SqliteStore, SqliteStoreOptions, SCHEMA_VERSION};
use common::*;
use rusqlite::Connection;
use support::{open, raw};

#[tokio::test]
async fn create_load_save_close_delete() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let mut r = record("s1", "/repo", 1_000);
    store.create(&mut r).await.unwrap();
    assert_eq!(r.revision, 1);
    assert!(matches!(
        store.create(&mut record("s1", "/repo", 1)).await,
        Err(StoreError::AlreadyExists(_))
    ));

    let loaded = store.load(&rid("s1")).await.unwrap();
    assert_eq!(loaded, r);

    r.thread.messages.push(user("hello there"));
    r.thread.title = "Greeting".into();
    store.save(&mut r).await.unwrap();
    assert_eq!(r.revision, 2);
    assert_eq!(store.load(&rid("s1")).await.unwrap(), r);

    // A stale copy gets Conflict and changes nothing.
    let mut stale = loaded.clone();
    stale.name = Some("stale".into());
    match store.save(&mut stale).await {
        Err(StoreError::Conflict {
            expected, actual, ..
        }) => assert_eq!((expected, actual), (1, 2)),
        other => panic!("{other:?}"),
    }
    assert_eq!(stale.revision, 1);
    assert_eq!(store.load(&rid("s1")).await.unwrap(), r);

    let closed = store.close(&rid("s1"), ts(5_000)).await.unwrap();
    assert!(closed.closed);
    assert_eq!(closed.closed_at, Some(ts(5_000)));
    assert_eq!(closed.revision, 3);
    // Idempotent.
    let again = store.close(&rid("s1"), ts(9_000)).await.unwrap();
    assert_eq!(again, closed);

    assert!(matches!(
        store.save(&mut record("nope", "/", 1)).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(store.delete(&rid("s1")).await.unwrap());
    assert!(!store.delete(&rid("s1")).await.unwrap());
    assert!(matches!(
        store.load(&rid("s1")).await,
        Err(StoreError::NotFound(_))
    ));
}

#[tokio::test]
async fn document_is_the_file_stores_bytes_and_columns_agree() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let mut r = record("s1", "/repo/", 7_000);
    r.name = Some("backend".into());
    r.agent_session_id = Some("native-1".into());
    r.thread.messages.push(user("first"));
    r.thread.messages.push(agent("second"));
    r.thread.title = "Title".into();
    store.create(&mut r).await.unwrap();
    store.save(&mut r).await.unwrap();

    let conn = raw(&store);
    let (doc, name, cwd, title, count, rev, last_used): (
        String,
        Option<String>,
        String,
        Option<String>,
        i64,
        i64,
        String,
    ) = conn
        .query_row(
            "SELECT document, name, cwd, title, message_count, revision, last_used_at \
             FROM sessions WHERE acpx_record_id = 's1'",
            [],
            |row| {
                Ok((
                    row.get(0)?,
                    row.get(1)?,
                    row.get(2)?,
                    row.get(3)?,
                    row.get(4)?,
                    row.get(5)?,
                    row.get(6)?,
                ))
            },
        )
        .unwrap();
    assert_eq!(doc.as_bytes(), r.to_json_vec().unwrap().as_slice());
    assert_eq!(name.as_deref(), Some("backend"));
    assert_eq!(cwd, "/repo/");
    assert_eq!(title.as_deref(), Some("Title"));
    assert_eq!(count, 2);
    assert_eq!(rev, 2);
    assert_eq!(last_used, "1970-01-01T00:00:07.000Z");

    let page = store.list(&ListQuery::default()).await.unwrap();
    assert_eq!(page.sessions, vec![r.summary()]);
    assert!(page.skipped.is_empty());
}

#[tokio::test]
async fn events_round_trip_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let id = rid("s1");
    store.create(&mut record("s1", "/repo", 1)).await.unwrap();
    let evs = events(&id, 1, 200);
    for (i, chunk) in evs.chunks(64).enumerate() {
        let durability = [Durability::None, Durability::Flush, Durability::Fsync][i % 3];
        let state = append_locked(&store, &id, chunk, durability).await.unwrap();
        assert_eq!(state.last_seq, chunk.last().unwrap().seq);
        assert!(state.last_write_at.is_some());
    }
    let page = store
        .read_events(&id, &EventQuery::default())
        .await
        .unwrap();
    assert_eq!(page.events.len(), 200);
    assert_eq!((page.oldest_seq, page.last_seq), (1, 200));
    for (a, b) in page.events.iter().zip(&evs) {
        assert_eq!(a.to_ndjson(), b.to_ndjson());
        assert_eq!(a, b);
    }
    let state = store.event_log_state(&id).await.unwrap();
    assert_eq!(state.last_seq, 200);
    assert_eq!(state.segment_count, 1);
    assert!(
        state.active_path.starts_with("sqlite:"),
        "{}",
        state.active_path
    );
    assert!(state.active_path.ends_with("#s1"), "{}", state.active_path);
}

#[tokio::test]
async fn appends_must_continue_the_log_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let id = rid("s1");
    store.create(&mut record("s1", "/repo", 1)).await.unwrap();
    append_locked(&store, &id, &events(&id, 1, 5), Durability::Flush)
        .await
        .unwrap();
    for (bad, expect_got) in [(events(&id, 7, 2), 7), (events(&id, 5, 2), 5)] {
        match append_locked(&store, &id, &bad, Durability::Flush).await {
            Err(StoreError::SeqMismatch { last, got, .. }) => {
                assert_eq!((last, got), (5, expect_got))
            }
            other => panic!("{other:?}"),
        }
    }
    // A gap inside the batch refuses the whole batch.
    let mut gappy = events(&id, 6, 3);
    gappy[2].seq = 10;
    assert!(matches!(
        append_locked(&store, &id, &gappy, Durability::Flush).await,
        Err(StoreError::SeqMismatch {
            last: 7,
            got: 10,
            ..
        })
    ));
    // An event of another session refuses the batch.
    let mut foreign = events(&id, 6, 2);
    foreign[1].acpx_record_id = rid("other");
    assert!(matches!(
        append_locked(&store, &id, &foreign, Durability::Flush).await,
        Err(StoreError::InvalidArgument(_))
    ));
    assert_eq!(store.event_log_state(&id).await.unwrap().last_seq, 5);
    let page = store
        .read_events(&id, &EventQuery::default())
        .await
        .unwrap();
    assert_eq!(page.events.len(), 5);
    assert!(matches!(
        append_locked(
            &store,
            &rid("missing"),
            &events(&rid("missing"), 1, 1),
            Durability::Flush
        )
        .await,
        Err(StoreError::NotFound(_))
    ));
    // An empty batch is fine and changes nothing.
    assert_eq!(
        append_locked(&store, &id, &[], Durability::Flush)
            .await
            .unwrap()
            .last_seq,
        5
    );
}

#[tokio::test]
async fn read_events_filters_and_pages() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let id = rid("s1");
    store.create(&mut record("s1", "/repo", 1)).await.unwrap();
    let evs = events(&id, 1, 100);
    append_locked(&store, &id, &evs, Durability::Flush)
        .await
        .unwrap();

    let q = EventQuery {
        types: vec!["x.acme.metric".into(), "prompt_started".into()],
        streams: vec![EventStream::Prompt],
        limit: Some(7),
        ..EventQuery::from_seq(10)
    };
    let expected: Vec<u64> = evs
        .iter()
        .filter(|e| e.seq >= 10 && q.matches(e))
        .map(|e| e.seq)
        .collect();
    let mut got = Vec::new();
    let mut q = q;
    loop {
        let page = store.read_events(&id, &q).await.unwrap();
        assert!(page.events.len() <= 7);
        got.extend(page.events.iter().map(|e| e.seq));
        match page.next_seq {
            Some(next) => q.from_seq = next,
            None => break,
        }
    }
    assert_eq!(got, expected);

    let by_request = store
        .read_events(
            &id,
            &EventQuery {
                request_id: Some("req_3".into()),
                ..EventQuery::default()
            },
        )
        .await
        .unwrap();
    let expected: Vec<u64> = evs
        .iter()
        .filter(|e| e.request_id.as_deref() == Some("req_3"))
        .map(|e| e.seq)
        .collect();
    assert_eq!(
        by_request.events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        expected
    );
    assert!(matches!(
        store
            .read_events(&rid("nope"), &EventQuery::default())
            .await,
        Err(StoreError::NotFound(_))
    ));
}

#[tokio::test]
async fn retention_keeps_the_byte_budget() {
    let dir = tempfile::tempdir().unwrap();
    let options = SqliteStoreOptions {
        max_segment_bytes: 4_000,
        max_segments: 3,
        ..SqliteStoreOptions::default()
    };
    let store = SqliteStore::open_with(dir.path().join("acpx.db"), options).unwrap();
    let id = rid("s1");
    store.create(&mut record("s1", "/repo", 1)).await.unwrap();
    let evs = events(&id, 1, 300);
    let line = |e: &acpx_model::EventEnvelope| e.to_ndjson().len() as u64 + 1;
    for chunk in evs.chunks(64) {
        let state = append_locked(&store, &id, chunk, Durability::Flush)
            .await
            .unwrap();
        assert!(state.segment_count <= 3);
        assert_eq!(state.max_segment_bytes, 4_000);
        assert_eq!(state.max_segments, 3);
    }
    let page = store
        .read_events(&id, &EventQuery::default())
        .await
        .unwrap();
    let kept: u64 = page.events.iter().map(line).sum();
    assert!(kept <= 12_000, "{kept}");
    // Only as many as needed were dropped: one more line would break the budget less its
    // step (an eighth of a segment), and the window is at least that.
    let first = page.events[0].seq;
    assert!(
        kept + line(&evs[first as usize - 2]) > 12_000 - 500,
        "{kept}"
    );
    assert!(kept >= 12_000 - 500 - 2 * line(&evs[0]), "{kept}");
    assert_eq!(page.oldest_seq, first);
    assert_eq!(page.last_seq, 300);
    assert_eq!(page.events.last().unwrap().seq, 300);
    let state = store.event_log_state(&id).await.unwrap();
    assert_eq!(state.segment_count, kept.div_ceil(4_000) as u32);
    // The log continues after trimming.
    append_locked(&store, &id, &events(&id, 301, 1), Durability::Flush)
        .await
        .unwrap();
}

#[tokio::test]
async fn an_event_larger_than_the_budget_is_kept_alone() {
    let dir = tempfile::tempdir().unwrap();
    let options = SqliteStoreOptions {
        max_segment_bytes: 100,
        max_segments: 1,
        ..SqliteStoreOptions::default()
    };
    let store = SqliteStore::open_with(dir.path().join("acpx.db"), options).unwrap();
    let id = rid("s1");
    store.create(&mut record("s1", "/repo", 1)).await.unwrap();
    append_locked(&store, &id, &events(&id, 1, 3), Durability::Flush)
        .await
        .unwrap();
    let page = store
        .read_events(&id, &EventQuery::default())
        .await
        .unwrap();
    assert_eq!(
        page.events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![3]
    );
    let state = store.event_log_state(&id).await.unwrap();
    assert_eq!((state.last_seq, state.segment_count), (3, 1));
}

#[tokio::test]
async fn list_filters_orders_and_pages() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    for i in 0..30 {
        let mut r = record(
            &format!("s{i:02}"),
            if i % 2 == 0 { "/a" } else { "/b/" },
            1_000 + i / 4,
        );
        if i % 3 == 0 {
            r.name = Some("named".into());
        }
        store.create(&mut r).await.unwrap();
        if i % 5 == 0 {
            store.close(&r.acpx_record_id, ts(9_999)).await.unwrap();
        }
    }
    let all = store.list(&ListQuery::default()).await.unwrap().sessions;
    assert_eq!(all.len(), 30);
    let mut sorted = all.clone();
    sorted.sort_by(|a, b| acpx_model::list_order_key(a).cmp(&acpx_model::list_order_key(b)));
    assert_eq!(all, sorted);

    for q in [
        ListQuery {
            cwd: Some("/b".into()),
            ..ListQuery::default()
        },
        ListQuery {
            cwd: Some("/a/".into()),
            closed: ClosedFilter::Open,
            ..ListQuery::default()
        },
        ListQuery {
            name: Some("named".into()),
            closed: ClosedFilter::Closed,
            ..ListQuery::default()
        },
        ListQuery {
            agent_command: Some("agent --acp".into()),
            ..ListQuery::default()
        },
    ] {
        let expected = q.paginate(all.clone(), vec![]).unwrap().sessions;
        assert!(!expected.is_empty());
        let mut paged = q.clone();
        paged.limit = Some(4);
        let mut got = Vec::new();
        loop {
            let page = store.list(&paged).await.unwrap();
            got.extend(page.sessions);
            match page.next_cursor {
                Some(c) => paged.cursor = Some(c),
                None => break,
            }
        }
        assert_eq!(got, expected, "{q:?}");
    }
    assert!(matches!(
        store
            .list(&ListQuery {
                cwd: Some("relative".into()),
                ..ListQuery::default()
            })
            .await,
        Err(StoreError::InvalidArgument(_))
    ));
    assert!(matches!(
        store
            .list(&ListQuery {
                cursor: Some("garbage".into()),
                ..ListQuery::default()
            })
            .await,
        Err(StoreError::InvalidCursor(_))
    ));
}

#[tokio::test]
async fn hand_edited_rows_are_reported_not_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    for i in 0..7 {
        store
            .create(&mut record(&format!("s{i}"), "/r", 100 - i))
            .await
            .unwrap();
    }
    let conn = raw(&store);
    // A document that no longer validates.
    conn.execute(
        "UPDATE sessions SET document = json_set(document, '$.thread.speed', 'warp') \
         WHERE acpx_record_id = 's1'",
        [],
    )
    .unwrap();
    // A document that is not JSON at all.
    conn.execute(
        "UPDATE sessions SET document = '{not json' WHERE acpx_record_id = 's2'",
        [],
    )
    .unwrap();
    // A valid document that no longer matches its columns.
    conn.execute(
        "UPDATE sessions SET document = json_set(document, '$.name', 'renamed') \
         WHERE acpx_record_id = 's3'",
        [],
    )
    .unwrap();
    // A valid edit that keeps the columns true is accepted.
    conn.execute(
        "UPDATE sessions SET document = json_set(document, '$.pid', 42) \
         WHERE acpx_record_id = 's4'",
        [],
    )
    .unwrap();
    // A hostile key and a broken timestamp column.
    conn.execute(
        "INSERT INTO sessions (acpx_record_id, acp_session_id, agent_command, cwd, created_at, \
         last_used_at, last_used_ms, closed, message_count, revision, document_checked, document) \
         SELECT '../../etc/passwd', acp_session_id, agent_command, cwd, created_at, last_used_at, \
         last_used_ms, closed, message_count, revision, 1, document FROM sessions \
         WHERE acpx_record_id = 's0'",
        [],
    )
    .unwrap();
    conn.execute(
        "UPDATE sessions SET created_at = 'yesterday' WHERE acpx_record_id = 's5'",
        [],
    )
    .unwrap();
    // A column edited without the document: the two disagree.
    conn.execute(
        "UPDATE sessions SET name = 'column only' WHERE acpx_record_id = 's6'",
        [],
    )
    .unwrap();

    let page = store.list(&ListQuery::default()).await.unwrap();
    let listed: Vec<_> = page
        .sessions
        .iter()
        .map(|s| s.acpx_record_id.to_string())
        .collect();
    assert_eq!(listed, vec!["s0", "s4"]);
    let reasons: Vec<String> = page
        .skipped
        .iter()
        .map(|s| format!("{} {}", s.location, s.reason))
        .collect();
    assert_eq!(page.skipped.len(), 6, "{reasons:#?}");
    let find = |key: &str| {
        reasons
            .iter()
            .find(|r| r.contains(&format!("row \"{key}\"")))
            .unwrap_or_else(|| panic!("{key} not reported: {reasons:#?}"))
            .clone()
    };
    assert!(find("s1").contains("thread.speed"), "{}", find("s1"));
    assert!(find("s2").contains("document"), "{}", find("s2"));
    assert!(find("s3").contains("`name`"), "{}", find("s3"));
    assert!(find("s5").contains("created_at"), "{}", find("s5"));
    assert!(find("s6").contains("`name`"), "{}", find("s6"));
    assert!(
        find("../../etc/passwd").contains("acpx_record_id"),
        "{reasons:#?}"
    );

    // The same skipping works page by page, with every good session once.
    let mut q = ListQuery {
        limit: Some(1),
        ..ListQuery::default()
    };
    let (mut seen, mut skipped) = (Vec::new(), 0);
    loop {
        let page = store.list(&q).await.unwrap();
        seen.extend(page.sessions.iter().map(|s| s.acpx_record_id.to_string()));
        skipped += page.skipped.len();
        match page.next_cursor {
            Some(c) => q.cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(seen, vec!["s0", "s4"]);
    assert_eq!(skipped, 6);

    match store.load(&rid("s1")).await {
        Err(StoreError::Corrupt {
            location, reason, ..
        }) => {
            assert!(location.contains("sessions row \"s1\""), "{location}");
            assert!(reason.contains("thread.speed"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        store.load(&rid("s2")).await,
        Err(StoreError::Corrupt { .. })
    ));
    // Loading and saving a valid hand-edited session re-derives its columns.
    let mut s3 = store.load(&rid("s3")).await.unwrap();
    assert_eq!(s3.name.as_deref(), Some("renamed"));
    store.save(&mut s3).await.unwrap();
    let page = store.list(&ListQuery::default()).await.unwrap();
    assert!(page
        .sessions
        .iter()
        .any(|s| s.acpx_record_id.as_str() == "s3" && s.name.as_deref() == Some("renamed")));
    // Closing a corrupt session is a Corrupt error, not a panic or a silent overwrite.
    assert!(matches!(
        store.close(&rid("s2"), ts(1)).await,
        Err(StoreError::Corrupt { .. })
    ));
    // A document is read in either storage class the schema allows: TEXT (above) and BLOB.
    conn.execute(
        "UPDATE sessions SET document = CAST(document AS BLOB) WHERE acpx_record_id = 's4'",
        [],
    )
    .unwrap();
    assert_eq!(store.load(&rid("s4")).await.unwrap().pid, Some(42));
}

#[tokio::test]
async fn damaged_event_rows_strict_and_lenient() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let id = rid("s1");
    store.create(&mut record("s1", "/repo", 1)).await.unwrap();
    append_locked(&store, &id, &events(&id, 1, 10), Durability::Flush)
        .await
        .unwrap();
    raw(&store)
        .execute(
            "UPDATE event_rows SET payload = '{broken' WHERE seq = 4 \
             AND session_key = (SELECT session_key FROM sessions WHERE acpx_record_id = 's1')",
            [],
        )
        .unwrap();
    match store.read_events(&id, &EventQuery::default()).await {
        Err(StoreError::Corrupt {
            location, reason, ..
        }) => {
            assert!(location.contains("seq 4"), "{location}");
            assert!(reason.contains("payload"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    let page = store
        .read_events(
            &id,
            &EventQuery {
                mode: ReadMode::Lenient,
                ..EventQuery::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(page.events.len(), 9);
    assert_eq!(page.damaged.len(), 1);
    assert_eq!(page.damaged[0].line, 4);
    // Paged: the damaged row takes a row of a page's `LIMIT` without becoming an event, and
    // the page still says where the log goes on.
    for limit in 1..=10 {
        let mut query = EventQuery {
            mode: ReadMode::Lenient,
            limit: Some(limit),
            ..EventQuery::default()
        };
        let mut seen = Vec::new();
        loop {
            let page = store.read_events(&id, &query).await.unwrap();
            seen.extend(page.events.iter().map(|e| e.seq));
            match page.next_seq {
                Some(n) => query.from_seq = n,
                None => break,
            }
        }
        let expected: Vec<u64> = (1..=10).filter(|s| *s != 4).collect();
        assert_eq!(seen, expected, "limit {limit}");
    }
    // A damaged row does not take an event's place: a page of one from the damaged row holds
    // the next good event (a retry decides on whether a turn's first page holds any event).
    let page = store
        .read_events(
            &id,
            &EventQuery {
                mode: ReadMode::Lenient,
                limit: Some(1),
                ..EventQuery::from_seq(4)
            },
        )
        .await
        .unwrap();
    let seqs: Vec<u64> = page.events.iter().map(|e| e.seq).collect();
    assert_eq!((seqs, page.damaged.len()), (vec![5], 1));
}

#[tokio::test]
async fn a_newer_schema_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("acpx.db");
    {
        let store = SqliteStore::open(&path).unwrap();
        store.create(&mut record("s1", "/r", 1)).await.unwrap();
    }
    {
        let conn = Connection::open(&path).unwrap();
        conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .unwrap();
        conn.pragma_update(None, "wal_checkpoint", "TRUNCATE")
            .unwrap();
    }
    let before = std::fs::read(&path).unwrap();
    match SqliteStore::open(&path) {
        Err(StoreError::TooNew(msg)) => {
            assert!(msg.contains(&path.display().to_string()), "{msg}");
            assert!(msg.contains(&format!("{}", SCHEMA_VERSION + 1)), "{msg}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(std::fs::read(&path).unwrap(), before);
}

#[tokio::test]
async fn fresh_database_is_migrated_and_private() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested/deeper/acpx.db");
    let store = SqliteStore::open(&path).unwrap();
    store.create(&mut record("s1", "/r", 1)).await.unwrap();
    let conn = raw(&store);
    let v: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(v, SCHEMA_VERSION);
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    let perm = |p: std::path::PathBuf| std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
    assert_eq!(perm(path.clone()), 0o600);
    for suffix in ["-wal", "-shm"] {
        let mut p = path.clone().into_os_string();
        p.push(suffix);
        assert_eq!(perm(p.into()), 0o600, "{suffix}");
    }
    assert_eq!(perm(dir.path().join("nested")), 0o700);
    assert_eq!(perm(dir.path().join("nested/deeper")), 0o700);
    let mut locks = path.clone().into_os_string();
    locks.push(".locks");
    assert_eq!(perm(locks.into()), 0o700);
    // Opening again (schema already current) is fine.
    drop(store);
    SqliteStore::open(&path).unwrap();
}

#[tokio::test]
async fn garbage_file_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("acpx.db");
    std::fs::write(
        &path,
        b"this is not a database, just some text that is long enough to have a header. ".repeat(20),
    )
    .unwrap();
    let err = SqliteStore::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains("not an SQLite database"), "{err}");
}

/// Processes that open a new store at the same moment (two `sessions ensure` in parallel)
/// all get it: switching the new file to WAL needs its exclusive lock, which SQLite refuses at
/// once (no busy handler) to all but one of them.
#[test]
fn a_new_store_opened_by_many_at_once_opens_for_all() {
    for round in 0..20 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("acpx.db");
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(8));
        let opens: Vec<_> = (0..8)
            .map(|_| {
                let (path, barrier) = (path.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    SqliteStore::open(&path).map(drop)
                })
            })
            .collect();
        for open in opens {
            if let Err(e) = open.join().unwrap() {
                panic!("round {round}: {e}");
            }
        }
    }
}
