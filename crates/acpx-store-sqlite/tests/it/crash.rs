//! A writer process SIGKILLed in the middle of appends and saves leaves no half-applied call:
//! every batch is whole, every acknowledged call is there, and each snapshot's columns and
//! full-text rows agree with its document.
//!
//! The writer is this test binary re-executed with `ACPX_SQLITE_CRASH_DB` set (see
//! [`crash_writer`]), so the test needs no extra binary.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use acpx_model::{Durability, EventQuery, ListQuery, Store};
use acpx_store_sqlite::SqliteStore;
use common::*;

const DB_ENV: &str = "ACPX_SQLITE_CRASH_DB";
const BATCH: u64 = 64;

/// The writer: appends batches of 64 events and saves a growing thread, forever, printing
/// `ack seq=N` / `ack rev=R` after each acknowledged call. A no-op in a normal test run.
#[test]
fn crash_writer() {
    let Ok(db) = std::env::var(DB_ENV) else {
        return;
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let store = SqliteStore::open(&db).unwrap();
        let id = rid("victim");
        let mut r = store.load(&id).await.unwrap();
        let mut last = store.event_log_state(&id).await.unwrap().last_seq;
        let mut n = 0u64;
        loop {
            let durability = if n.is_multiple_of(5) {
                Durability::Fsync
            } else {
                Durability::Flush
            };
            append_locked(&store, &id, &events(&id, last + 1, BATCH), durability)
                .await
                .unwrap();
            last += BATCH;
            println!("ack seq={last}");
            r.thread
                .messages
                .push(user(&format!("message {n} with searchable words")));
            r.thread.title = format!("after {n} turns");
            r.last_used_at = ts(1_000_000 + n as i64);
            store.save(&mut r).await.unwrap();
            println!("ack rev={}", r.revision);
            n += 1;
        }
    });
}

fn max_ack(lines: &[String], key: &str) -> u64 {
    lines
        .iter()
        .filter_map(|l| l.strip_prefix("ack ")?.strip_prefix(key)?.parse().ok())
        .max()
        .unwrap_or(0)
}

#[test]
fn killed_writer_leaves_only_whole_calls() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("acpx.db");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let store = SqliteStore::open(&db).unwrap();
        store
            .create(&mut record("victim", "/repo", 1))
            .await
            .unwrap();
    });
    for round in 0..4u64 {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "crash::crash_writer",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(DB_ENV, &db)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut lines = Vec::new();
        // Let it run a varying number of calls, then kill it wherever it is.
        let target = 20 + 13 * round;
        let mut line = String::new();
        while (lines.len() as u64) < target {
            line.clear();
            if out.read_line(&mut line).unwrap() == 0 {
                panic!("writer ended early: {lines:?}");
            }
            if line.starts_with("ack ") {
                lines.push(line.trim().to_owned());
            }
        }
        child.kill().unwrap();
        child.wait().unwrap();
        // Whatever it acknowledged before dying is still in the pipe.
        for l in out.lines() {
            let l = l.unwrap();
            if l.starts_with("ack ") {
                lines.push(l);
            }
        }
        let acked_seq = max_ack(&lines, "seq=");
        let acked_rev = max_ack(&lines, "rev=");

        rt.block_on(async {
            let store = SqliteStore::open(&db).unwrap();
            let id = rid("victim");
            let state = store.event_log_state(&id).await.unwrap();
            assert!(
                state.last_seq >= acked_seq,
                "round {round}: acked seq {acked_seq} lost"
            );
            assert_eq!(
                state.last_seq % BATCH,
                0,
                "round {round}: half a batch survived"
            );
            let page = store
                .read_events(&id, &EventQuery::default())
                .await
                .unwrap();
            assert_eq!(page.events.len() as u64, state.last_seq);
            assert!(page
                .events
                .iter()
                .enumerate()
                .all(|(i, e)| e.seq == i as u64 + 1));

            let r = store.load(&id).await.unwrap();
            assert!(
                r.revision >= acked_rev,
                "round {round}: acked revision lost"
            );
            // The columns and the search rows were written with the document, or not at all.
            let page = store.list(&ListQuery::default()).await.unwrap();
            assert!(page.skipped.is_empty(), "{:?}", page.skipped);
            assert_eq!(page.sessions, vec![r.summary()]);
            let conn = rusqlite::Connection::open(store.path()).unwrap();
            let (rows, checked): (i64, i64) = conn
                .query_row(
                    "SELECT (SELECT count(*) FROM messages WHERE acpx_record_id = 'victim'), \
                     (SELECT document_checked FROM sessions WHERE acpx_record_id = 'victim')",
                    [],
                    |row| Ok((row.get(0)?, row.get(1)?)),
                )
                .unwrap();
            assert_eq!(rows as usize, r.thread.messages.len());
            assert_eq!(checked, 1);
            let integrity: String = conn
                .query_row("PRAGMA integrity_check", [], |row| row.get(0))
                .unwrap();
            assert_eq!(integrity, "ok");
            conn.execute(
                "INSERT INTO messages_fts (messages_fts, rank) VALUES ('integrity-check', 1)",
                [],
            )
            .unwrap();
            let hits = store
                .search(&acpx_model::SearchQuery {
                    text: "searchable".into(),
                    limit: Some(10_000),
                    ..Default::default()
                })
                .await
                .unwrap();
            assert_eq!(hits.len(), r.thread.messages.len());
        });
    }
}
