//! The SQLite store mirrors the file store: for the same operations, the events read back
//! from SQLite and written as NDJSON are byte-for-byte the lines of the file store's log, and
//! the `document` column is byte-for-byte its `session.json`. Plus copies both ways.

use crate::common;

use acpx_model::migrate::copy_store;
use acpx_model::{Durability, EventQuery, ListQuery, RecordId, Store};
use acpx_store_fs::FsStore;
use acpx_store_sqlite::SqliteStore;
use common::*;
use serde_json::json;

/// The same script against any store.
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
        store.flush(&id).await.unwrap();
        r.thread.messages.push(user(
            "Mirror me: ünïcödé, \"quotes\", tabs\t and \\ slashes",
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
    let mut gone = record("mirror-gone", "/x", 1);
    store.create(&mut gone).await.unwrap();
    append_locked(
        store,
        &gone.acpx_record_id,
        &events(&gone.acpx_record_id, 1, 3),
        Durability::Flush,
    )
    .await
    .unwrap();
    assert!(store.delete(&gone.acpx_record_id).await.unwrap());
    ids
}

fn fs_lines(fs: &FsStore, id: &RecordId) -> Vec<String> {
    let mut paths = Vec::new();
    for n in (1..=fs.options().max_segments).rev() {
        paths.push(fs.segment_path(id, n));
    }
    paths.push(fs.active_log_path(id));
    let mut lines = Vec::new();
    for p in paths {
        if let Ok(text) = std::fs::read_to_string(&p) {
            assert!(text.is_empty() || text.ends_with('\n'), "{}", p.display());
            lines.extend(text.lines().map(str::to_owned));
        }
    }
    lines
}

async fn sqlite_lines(store: &SqliteStore, id: &RecordId) -> Vec<String> {
    let page = store.read_events(id, &EventQuery::default()).await.unwrap();
    page.events.iter().map(|e| e.to_ndjson()).collect()
}

#[tokio::test]
async fn events_and_documents_are_byte_for_byte_the_file_stores() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FsStore::open(dir.path().join("fs")).unwrap();
    let sqlite = SqliteStore::open(dir.path().join("acpx.db")).unwrap();
    let ids_fs = script(&fs).await;
    let ids_sqlite = script(&sqlite).await;
    assert_eq!(ids_fs, ids_sqlite);

    let conn = rusqlite::Connection::open(sqlite.path()).unwrap();
    for id in &ids_fs {
        let from_files = fs_lines(&fs, id);
        let from_rows = sqlite_lines(&sqlite, id).await;
        assert!(from_files.len() >= 150);
        assert_eq!(from_files.len(), from_rows.len(), "{id}");
        for (n, (a, b)) in from_files.iter().zip(&from_rows).enumerate() {
            assert_eq!(a, b, "{id} line {}", n + 1);
        }
        let snapshot = std::fs::read(fs.snapshot_path(id)).unwrap();
        let document: Vec<u8> = conn
            .query_row(
                "SELECT CAST(document AS BLOB) FROM sessions WHERE acpx_record_id = ?1",
                [id.as_str()],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&document),
            String::from_utf8_lossy(&snapshot),
            "{id}"
        );
    }
    let a = fs.list(&ListQuery::default()).await.unwrap().sessions;
    let b = sqlite.list(&ListQuery::default()).await.unwrap().sessions;
    assert_eq!(a, b);
    assert!(!std::path::Path::new(&fs.snapshot_path(&rid("mirror-gone"))).exists());
    let gone: i64 = conn
        .query_row(
            "SELECT (SELECT count(*) FROM sessions WHERE acpx_record_id = 'mirror-gone') + \
             (SELECT count(*) FROM events WHERE acpx_record_id = 'mirror-gone')",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(gone, 0);
}

async fn assert_same_content(a: &dyn Store, b: &dyn Store, ids: &[RecordId]) {
    for id in ids {
        let ra = a.load(id).await.unwrap();
        let mut rb = b.load(id).await.unwrap();
        rb.revision = ra.revision;
        rb.acpx.event_log = ra.acpx.event_log.clone();
        assert_eq!(ra, rb, "{id}");
        let ea = a
            .read_events(id, &EventQuery::default())
            .await
            .unwrap()
            .events;
        let eb = b
            .read_events(id, &EventQuery::default())
            .await
            .unwrap()
            .events;
        assert_eq!(
            ea.iter().map(|e| e.to_ndjson()).collect::<Vec<_>>(),
            eb.iter().map(|e| e.to_ndjson()).collect::<Vec<_>>(),
            "{id}"
        );
    }
}

#[tokio::test]
async fn copy_fs_to_sqlite_and_back() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FsStore::open(dir.path().join("fs")).unwrap();
    let ids = script(&fs).await;

    let sqlite = SqliteStore::open(dir.path().join("acpx.db")).unwrap();
    let report = copy_store(&fs, &sqlite).await.unwrap();
    assert_eq!(report.sessions.len(), ids.len());
    assert!(report.skipped.is_empty());
    assert_same_content(&fs, &sqlite, &ids).await;
    for s in &report.sessions {
        let state = sqlite.event_log_state(&s.acpx_record_id).await.unwrap();
        assert_eq!(state.last_seq, s.last_seq);
        let doc = sqlite.load(&s.acpx_record_id).await.unwrap();
        assert_eq!(
            doc.acpx.event_log, state,
            "the copy's snapshot points at its own log"
        );
    }
    assert!(sqlite.load(&ids[1]).await.unwrap().closed);

    // A second copy into the same target finds every session there, identical, and copies
    // nothing.
    let again = copy_store(&fs, &sqlite).await.unwrap();
    assert!(again.sessions.is_empty());
    assert_eq!(again.already_copied, report.sessions);

    let back = FsStore::open(dir.path().join("fs-back")).unwrap();
    let report_back = copy_store(&sqlite, &back).await.unwrap();
    assert_eq!(report_back.sessions.len(), ids.len());
    assert_same_content(&sqlite, &back, &ids).await;
    // Same digests on every hop: the content did not change on the way.
    for (a, b) in report.sessions.iter().zip(&report_back.sessions) {
        assert_eq!(a.acpx_record_id, b.acpx_record_id);
        assert_eq!(a.events_sha256, b.events_sha256);
        assert_eq!(a.snapshot_sha256, b.snapshot_sha256);
    }
    // And the round trip reproduces the original log files line for line.
    for id in &ids {
        assert_eq!(fs_lines(&fs, id), fs_lines(&back, id), "{id}");
    }
}

/// More sessions than one batch of `copy_store` (256), so that a batch is written while the
/// next one is read, with a session whose log is longer than a page (copied alone) in the
/// middle of the second batch: every copy verified, in the source's list order, both ways.
#[tokio::test]
async fn a_copy_of_several_batches_keeps_the_list_order_both_ways() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FsStore::open(dir.path().join("fs")).unwrap();
    for i in 0..600i64 {
        let mut r = record(&format!("many-{i:03}"), "/work/many", 50_000 + i);
        fs.create(&mut r).await.unwrap();
        let id = r.acpx_record_id.clone();
        let n = if i == 300 { 2_500 } else { 1 + (i as u64 % 5) };
        append_locked(&fs, &id, &events(&id, 1, n), Durability::None)
            .await
            .unwrap();
        fs.flush(&id).await.unwrap();
    }
    let listed: Vec<RecordId> = fs
        .list(&ListQuery::default())
        .await
        .unwrap()
        .sessions
        .into_iter()
        .map(|s| s.acpx_record_id)
        .collect();
    assert_eq!(listed.len(), 600);

    let sqlite = SqliteStore::open(dir.path().join("acpx.db")).unwrap();
    let report = copy_store(&fs, &sqlite).await.unwrap();
    let copied: Vec<RecordId> = report
        .sessions
        .iter()
        .map(|s| s.acpx_record_id.clone())
        .collect();
    assert_eq!(copied, listed, "the report keeps the source's list order");
    let long = report
        .sessions
        .iter()
        .find(|s| s.acpx_record_id.as_str() == "many-300")
        .unwrap();
    assert_eq!((long.events, long.last_seq), (2_500, 2_500));
    assert_same_content(&fs, &sqlite, &listed).await;

    let back = FsStore::open(dir.path().join("fs-back")).unwrap();
    let report_back = copy_store(&sqlite, &back).await.unwrap();
    assert_eq!(report_back.sessions.len(), 600);
    for (a, b) in report.sessions.iter().zip(&report_back.sessions) {
        assert_eq!(a, b, "same figures on both hops");
    }
    for id in &listed {
        assert_eq!(fs_lines(&fs, id), fs_lines(&back, id), "{id}");
    }
}
