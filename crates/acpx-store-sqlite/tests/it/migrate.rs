//! A database written at schema version 1 (`tests/fixtures/schema-v1.db`, made by the crate
//! as it was at that version with `tests/fixtures/make_schema_v1.rs`) migrates forward on
//! open and keeps every session, event and message.

use crate::common;

use std::path::{Path, PathBuf};

use acpx_model::{Durability, EventQuery, ListQuery, SearchQuery, Store};
use acpx_store_sqlite::{SqliteStore, SCHEMA_VERSION};
use common::*;
use rusqlite::Connection;

fn fixture_copy(dir: &Path) -> PathBuf {
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/schema-v1.db");
    let path = dir.join("acpx.db");
    std::fs::copy(fixture, &path).unwrap();
    let conn = Connection::open(&path).unwrap();
    let v: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(v, 1, "the fixture is a version 1 database");
    path
}

fn raw(path: &Path) -> Connection {
    let conn = Connection::open(path).unwrap();
    conn.pragma_update(None, "foreign_keys", "ON").unwrap();
    conn
}

async fn event_lines(store: &SqliteStore, id: &str) -> Vec<String> {
    let page = store
        .read_events(&rid(id), &EventQuery::default())
        .await
        .unwrap();
    page.events.iter().map(|e| e.to_ndjson()).collect()
}

fn expected_lines(id: &str, first: u64, last: u64) -> Vec<String> {
    events(&rid(id), first, last - first + 1)
        .iter()
        .map(|e| e.to_ndjson())
        .collect()
}

#[tokio::test]
async fn a_version_1_database_migrates_forward_with_everything_in_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = fixture_copy(dir.path());
    let store = SqliteStore::open(&path).unwrap();

    let conn = raw(&path);
    let v: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(v, SCHEMA_VERSION);
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    let orphans: i64 = conn
        .query_row("SELECT count(*) FROM pragma_foreign_key_check", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(orphans, 0);

    // Sessions: all four, in list order, with their columns and documents.
    let page = store.list(&ListQuery::default()).await.unwrap();
    assert!(page.skipped.is_empty(), "{:?}", page.skipped);
    let ids: Vec<String> = page
        .sessions
        .iter()
        .map(|s| s.acpx_record_id.to_string())
        .collect();
    assert_eq!(ids, ["old-a", "old-b", "old-c", "old-d"]);
    let a = store.load(&rid("old-a")).await.unwrap();
    assert_eq!(a.revision, 2);
    assert_eq!(a.thread.title, "Migration");
    assert_eq!(a.name.as_deref(), Some("backend"));
    assert_eq!(page.sessions[0], a.summary());
    assert!(store.load(&rid("old-b")).await.unwrap().closed);
    let cwd = store
        .list(&ListQuery {
            cwd: Some("/work/a".into()),
            ..ListQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(cwd.sessions.len(), 1);

    // Events: byte for byte what was appended, retention's trimming included.
    assert_eq!(
        event_lines(&store, "old-a").await,
        expected_lines("old-a", 1, 150)
    );
    assert_eq!(
        event_lines(&store, "old-b").await,
        expected_lines("old-b", 1, 10)
    );
    assert!(event_lines(&store, "old-c").await.is_empty());
    let d = store
        .read_events(&rid("old-d"), &EventQuery::default())
        .await
        .unwrap();
    assert_eq!((d.oldest_seq, d.last_seq), (77, 100));
    assert_eq!(
        d.events.iter().map(|e| e.to_ndjson()).collect::<Vec<_>>(),
        expected_lines("old-d", 77, 100)
    );
    let state = store.event_log_state(&rid("old-a")).await.unwrap();
    assert_eq!(state.last_seq, 150);
    assert!(state.last_write_at.is_some());
    let retained: i64 = conn
        .query_row(
            "SELECT l.retained_bytes - (SELECT sum(bytes) FROM events WHERE acpx_record_id = 'old-d') \
             FROM event_logs l JOIN sessions USING (session_key) WHERE acpx_record_id = 'old-d'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(retained, 0, "retained_bytes still sums the rows");

    // The view shows the events with their record id; nothing of the deleted session.
    let per_session: Vec<(String, i64)> = conn
        .prepare("SELECT acpx_record_id, count(*) FROM events GROUP BY 1 ORDER BY 1")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        per_session,
        [
            ("old-a".to_owned(), 150),
            ("old-b".to_owned(), 10),
            ("old-d".to_owned(), 24)
        ]
    );

    // Search still finds the migrated messages.
    let hits = store
        .search(&SearchQuery {
            text: "migration keep".into(),
            ..SearchQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].acpx_record_id.as_str(), "old-a");

    // Writing continues where version 1 stopped.
    let state = append_locked(
        &store,
        &rid("old-a"),
        &events(&rid("old-a"), 151, 2),
        Durability::Flush,
    )
    .await
    .unwrap();
    assert_eq!(state.last_seq, 152);
    append_locked(
        &store,
        &rid("old-c"),
        &events(&rid("old-c"), 1, 3),
        Durability::Flush,
    )
    .await
    .unwrap();
    let mut a = a;
    a.thread.messages.push(user("and after the migration?"));
    store.save(&mut a).await.unwrap();
    assert_eq!(a.revision, 3);

    // A new session gets a key no old row ever had, and an empty log.
    let mut e = record("old-gone", "/work/e", 9_000);
    store.create(&mut e).await.unwrap();
    assert!(event_lines(&store, "old-gone").await.is_empty());
    let keys: (i64, i64) = conn
        .query_row(
            "SELECT (SELECT session_key FROM sessions WHERE acpx_record_id = 'old-gone'), \
             (SELECT max(session_key) FROM sessions WHERE acpx_record_id <> 'old-gone')",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert!(keys.0 > keys.1, "{keys:?}");

    assert!(store.delete(&rid("old-a")).await.unwrap());
    let left: i64 = conn
        .query_row(
            "SELECT count(*) FROM events WHERE acpx_record_id = 'old-a'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(left, 0);

    // Opening again finds the current version and changes nothing.
    drop(store);
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(
        event_lines(&store, "old-b").await,
        expected_lines("old-b", 1, 10)
    );
}

/// Rows already orphaned before the migration (a session row deleted in a shell, where
/// `foreign_keys` is off by default) do not stop it; its events, which no call could reach
/// anymore, are not carried over.
#[tokio::test]
async fn rows_orphaned_by_a_hand_delete_do_not_block_the_migration() {
    let dir = tempfile::tempdir().unwrap();
    let path = fixture_copy(dir.path());
    {
        let conn = Connection::open(&path).unwrap();
        conn.pragma_update(None, "foreign_keys", "OFF").unwrap();
        let n = conn
            .execute("DELETE FROM sessions WHERE acpx_record_id = 'old-a'", [])
            .unwrap();
        assert_eq!(n, 1);
    }
    let store = SqliteStore::open(&path).unwrap();
    let ids: Vec<String> = store
        .list(&ListQuery::default())
        .await
        .unwrap()
        .sessions
        .iter()
        .map(|s| s.acpx_record_id.to_string())
        .collect();
    assert_eq!(ids, ["old-b", "old-c", "old-d"]);
    let conn = raw(&path);
    let events: i64 = conn
        .query_row("SELECT count(*) FROM event_rows", [], |r| r.get(0))
        .unwrap();
    assert_eq!(events, 10 + 24);
    // The orphaned messages rows were there before and are still reported, not hidden.
    let orphans: Vec<String> = conn
        .prepare("SELECT \"table\" FROM pragma_foreign_key_check")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(orphans, ["messages", "messages"]);
    assert_eq!(
        event_lines(&store, "old-b").await,
        expected_lines("old-b", 1, 10)
    );
}

/// A migration that fails part-way is rolled back whole: the file stays at version 1 with
/// all its rows, and the error says what failed.
#[tokio::test]
async fn a_failed_migration_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = fixture_copy(dir.path());
    {
        // A table in the way of the rebuild.
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch("CREATE TABLE sessions_v2 (x INTEGER) STRICT")
            .unwrap();
    }
    let err = SqliteStore::open(&path).unwrap_err();
    assert!(err.to_string().contains("sessions_v2"), "{err}");
    assert!(err.to_string().contains("migrate"), "{err}");
    let conn = Connection::open(&path).unwrap();
    let (version, events): (i64, i64) = conn
        .query_row(
            "SELECT (SELECT user_version FROM pragma_user_version), (SELECT count(*) FROM events)",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((version, events), (1, 184));
    drop(conn);
    // Out of the way, the same file migrates.
    Connection::open(&path)
        .unwrap()
        .execute_batch("DROP TABLE sessions_v2")
        .unwrap();
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(
        event_lines(&store, "old-b").await,
        expected_lines("old-b", 1, 10)
    );
}

/// The version 6 split of `sessions` into `session_rows` and `session_documents` (on a
/// database written by the crate at version 5, `tests/fixtures/make_schema_v5.rs`) keeps
/// every key and the `AUTOINCREMENT` high-water mark (the key of the deleted `k3` is not given
/// to a new session), every document byte for byte (a TEXT one and a BLOB one), the events,
/// and leaves `sessions` readable and writable by hand as a view.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_version_6_split_keeps_keys_documents_and_their_high_water_mark() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("acpx.db");
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/schema-v5.db");
    std::fs::copy(fixture, &path).unwrap();
    let before: Vec<(i64, String, Vec<u8>)> = {
        let conn = raw(&path);
        let v: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(v, 5, "the fixture is a version 5 database");
        let mut stmt = conn
            .prepare(
                "SELECT session_key, acpx_record_id, CAST(document AS BLOB) FROM sessions \
                 ORDER BY session_key",
            )
            .unwrap();
        let rows = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap();
        rows.map(Result::unwrap).collect()
    };
    assert_eq!(before.len(), 2);
    let hashes = |conn: &Connection| -> Vec<(String, i64, i64, i64)> {
        let mut stmt = conn
            .prepare(
                "SELECT acpx_record_id, message_index, part, text_hash FROM messages \
                 ORDER BY acpx_record_id, message_index, part",
            )
            .unwrap();
        let rows = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .unwrap();
        rows.map(Result::unwrap).collect()
    };
    let v5_hashes = hashes(&raw(&path));
    assert!(!v5_hashes.is_empty());
    // A view of the user's own over `sessions` does not stop the migration.
    raw(&path)
        .execute_batch("CREATE VIEW my_sessions AS SELECT acpx_record_id, name FROM sessions")
        .unwrap();

    let store = SqliteStore::open(&path).unwrap();
    let conn = raw(&path);
    let mine: i64 = conn
        .query_row("SELECT count(*) FROM my_sessions", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mine, 2, "the user's view reads the sessions' rows");
    // The search parts' hashes were computed again with version 6's function.
    let v6_hashes = hashes(&conn);
    assert_eq!(v6_hashes.len(), v5_hashes.len());
    assert!(v6_hashes.iter().zip(&v5_hashes).all(|(a, b)| a.3 != b.3));
    let v: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(v, SCHEMA_VERSION);
    let orphans: i64 = conn
        .query_row("SELECT count(*) FROM pragma_foreign_key_check", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(orphans, 0);
    for (key, id, document) in &before {
        let (k, d): (i64, Vec<u8>) = conn
            .query_row(
                "SELECT session_key, CAST(document AS BLOB) FROM sessions \
                 WHERE acpx_record_id = ?1",
                [id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!(k, *key, "{id}");
        assert!(d == *document, "{id}: the document changed");
        let loaded = store.load(&rid(id)).await.unwrap();
        assert!(loaded.to_json_vec().unwrap() == *document, "{id}");
    }
    assert_eq!(event_lines(&store, "k2").await, expected_lines("k2", 1, 5));

    store.create(&mut record("k4", "/repo", 9)).await.unwrap();
    let key4: i64 = conn
        .query_row(
            "SELECT session_key FROM session_rows WHERE acpx_record_id = 'k4'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(key4, 4, "key 3 was a deleted session's");
    let ids: Vec<String> = store
        .list(&ListQuery::default())
        .await
        .unwrap()
        .sessions
        .into_iter()
        .map(|s| s.acpx_record_id.to_string())
        .collect();
    assert_eq!(ids, ["k4", "k2", "k1"]);

    // The long document, saved again by the holder of its lock, is padded in its row and
    // still reads back as the file store's bytes.
    let lock = store
        .lock(&rid("k2"), std::time::Duration::from_secs(5))
        .await
        .unwrap();
    let mut k2 = store.load(&rid("k2")).await.unwrap();
    k2.thread.messages.push(user("and one more"));
    store.save(&mut k2).await.unwrap();
    drop(lock);
    let (stored_len, view): (i64, Vec<u8>) = conn
        .query_row(
            "SELECT length(CAST(d.document AS BLOB)), CAST(s.document AS BLOB) \
             FROM session_documents d JOIN sessions s USING (session_key) \
             WHERE s.acpx_record_id = 'k2'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    let expected = k2.to_json_vec().unwrap();
    assert!(
        view == expected,
        "the view shows the document without its padding"
    );
    assert!(
        stored_len as usize > expected.len(),
        "the row has room to grow"
    );
    assert_eq!(store.load(&rid("k2")).await.unwrap(), k2);
    // The save found the migrated hashes equal to its own: it rewrote no existing part.
    let after_save = hashes(&conn);
    assert_eq!(
        after_save.len(),
        v6_hashes.len() + 1,
        "the new message's part"
    );
    assert!(v6_hashes.iter().all(|h| after_save.contains(h)));
}

/// A version 5 database is not upgraded while another process holds a session's writer lock
/// (an older acpx's queue owner would fail its saves on the new schema): the open is refused,
/// saying why, and changes nothing; once the lock is released, it opens and upgrades.
#[tokio::test]
async fn the_upgrade_waits_for_a_writer_of_the_old_schema() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("acpx.db");
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/schema-v5.db");
    std::fs::copy(fixture, &path).unwrap();
    let locks = dir.path().join("acpx.db.locks");
    std::fs::create_dir_all(&locks).unwrap();
    // A lock file left by a process that died is no obstacle; a held one is.
    std::fs::write(locks.join("k1.lock"), b"").unwrap();
    let held = acpx_lock::FileLock::exclusive_blocking(&locks.join("k2.lock")).unwrap();
    let err = SqliteStore::open(&path).expect_err("refused").to_string();
    assert!(
        err.contains(&format!(
            "schema upgraded from version 5 to {SCHEMA_VERSION}"
        )) && err.contains("session k2"),
        "{err}"
    );
    let v: i64 = raw(&path)
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(v, 5, "nothing changed");
    drop(held);
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(
        store.load(&rid("k2")).await.unwrap().acpx_record_id,
        rid("k2")
    );
}

/// Version 8 gives each request a seq range and narrows `events_by_time`: a version 7
/// database upgrades once no older acpx holds a session's lock (its appends would miss the
/// ranges), and reads by type and by request id give what they gave.
#[tokio::test]
async fn version_8_ranges_requests_after_older_writers_are_gone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("acpx.db");
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/schema-v5.db");
    std::fs::copy(fixture, &path).unwrap();
    drop(SqliteStore::open(&path).unwrap());
    // Put the indexes back as version 7 had them.
    raw(&path)
        .execute_batch(
            "DROP TABLE event_requests; \
             DROP INDEX events_by_time; \
             DROP INDEX messages_hashes; \
             CREATE INDEX events_by_request ON event_rows (session_key, request_id, seq) \
                 WHERE request_id IS NOT NULL; \
             CREATE INDEX events_by_time ON event_rows (timestamp); \
             PRAGMA user_version = 7;",
        )
        .unwrap();
    // A row a hand delete (without `foreign_keys`) left without its session: the upgrade
    // gives it no range, and is not refused for it.
    raw(&path)
        .execute_batch(
            "PRAGMA foreign_keys = OFF; \
             INSERT INTO event_rows (session_key, seq, event_version, timestamp, \
             acp_session_id, request_id, stream, source, type, payload, bytes) \
             VALUES (999, 1, 1, '2026-01-01T00:00:00.000Z', 'a', 'req_orphan', 'prompt', \
             'acp', 'session_update', '{}', 10)",
        )
        .unwrap();
    let by = |store: &SqliteStore, t: Option<&str>, request: Option<&str>| {
        let store = store.clone();
        let q = EventQuery {
            types: t.map(|t| vec![t.into()]).unwrap_or_default(),
            request_id: request.map(str::to_owned),
            ..EventQuery::from_seq(0)
        };
        async move {
            let page = store.read_events(&rid("k2"), &q).await.unwrap();
            page.events.iter().map(|e| e.seq).collect::<Vec<_>>()
        }
    };
    let locks = dir.path().join("acpx.db.locks");
    std::fs::create_dir_all(&locks).unwrap();
    let held = acpx_lock::FileLock::exclusive_blocking(&locks.join("k2.lock")).unwrap();
    let err = SqliteStore::open(&path).expect_err("waits").to_string();
    assert!(
        err.contains("from version 7") && err.contains("--request-id"),
        "{err}"
    );
    drop(held);
    // An older migration or import writing new sessions is waited for too.
    let batch = acpx_lock::FileLock::exclusive_blocking(&locks.join(".batch.1.lock")).unwrap();
    let err = SqliteStore::open(&path).expect_err("waits").to_string();
    assert!(err.contains("a migration or import"), "{err}");
    drop(batch);
    let store = SqliteStore::open(&path).expect("upgrades once the writer is gone");
    let conn = raw(&path);
    let (version, time_index, request_index): (i64, String, i64) = conn
        .query_row(
            "SELECT (SELECT user_version FROM pragma_user_version), \
             (SELECT sql FROM sqlite_master WHERE name = 'events_by_time'), \
             (SELECT count(*) FROM sqlite_master WHERE name = 'events_by_request')",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    assert!(
        time_index.ends_with("WHERE type <> 'session_update'"),
        "{time_index}"
    );
    assert_eq!(request_index, 0);
    let hashes: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE name = 'messages_hashes'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(hashes, 1);
    let orphan_ranges: i64 = conn
        .query_row(
            "SELECT count(*) FROM event_requests WHERE session_key = 999",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(orphan_ranges, 0);
    let requests: Vec<String> = conn
        .prepare(
            "SELECT DISTINCT request_id FROM events \
             WHERE acpx_record_id = 'k2' AND request_id IS NOT NULL",
        )
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(!requests.is_empty(), "the fixture has requests");
    for r in &requests {
        let expected: Vec<u64> = conn
            .prepare(
                "SELECT seq FROM events WHERE acpx_record_id = 'k2' AND request_id = ?1 \
                 ORDER BY seq",
            )
            .unwrap()
            .query_map([r], |row| row.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(by(&store, None, Some(r)).await, expected, "{r}");
    }
    assert!(by(&store, None, Some("req_none")).await.is_empty());
    for t in [
        "session_update",
        "prompt_started",
        "client_operation",
        "x.acme.metric",
    ] {
        let expected: Vec<u64> = conn
            .prepare(
                "SELECT seq FROM events WHERE acpx_record_id = 'k2' AND type = ?1 ORDER BY seq",
            )
            .unwrap()
            .query_map([t], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert!(!expected.is_empty(), "the fixture has {t} events");
        assert_eq!(by(&store, Some(t), None).await, expected, "{t}");
    }
}
