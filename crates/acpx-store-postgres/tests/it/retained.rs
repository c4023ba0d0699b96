//! `create_sessions` of a log whose oldest events retention removed, on a real PostgreSQL
//! server (runs only with `ACPX_TEST_POSTGRES_URL`): stored as a log retained from its first
//! seq, as on the file and SQLite stores.

use crate::common;

use acpx_model::{Durability, EventQuery, NewSessionData, Store, StoreError};
use common::server::{open, schema, url};
use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_retained_from_a_later_seq_is_stored_from_there() {
    let Some(url) = url() else { return };
    let schema = schema("retained");
    let s = open(&url, &schema).await;
    let id = rid("t0");
    let given = events(&id, 5, 5);
    let untrimmed = rid("t1");
    let stored = s
        .create_sessions(vec![
            NewSessionData {
                record: record("t1", "/repo", 1_772_000_000_000),
                events: events(&untrimmed, 1, 2),
            },
            NewSessionData {
                record: record("t0", "/repo", 1_772_000_000_000),
                events: given.clone(),
            },
        ])
        .await
        .unwrap();
    assert_eq!(stored[1].acpx.event_log.last_seq, 9);
    assert_eq!(stored[1].revision, 2);
    assert_eq!(s.load(&id).await.unwrap(), stored[1]);
    assert_eq!(s.event_log_state(&id).await.unwrap().last_seq, 9);
    let page = s.read_events(&id, &EventQuery::default()).await.unwrap();
    assert_eq!((page.oldest_seq, page.last_seq), (5, 9));
    assert_eq!(page.events, given);
    let page = s
        .read_events(&untrimmed, &EventQuery::default())
        .await
        .unwrap();
    assert_eq!((page.oldest_seq, page.last_seq), (1, 2));

    let w = s
        .lock(&id, std::time::Duration::from_secs(1))
        .await
        .unwrap();
    let gap = s.append(&w, &events(&id, 11, 1), Durability::Fsync).await;
    assert!(
        matches!(gap, Err(StoreError::SeqMismatch { .. })),
        "{gap:?}"
    );
    s.append(&w, &events(&id, 10, 1), Durability::Fsync)
        .await
        .unwrap();
    drop(w);
    let page = s.read_events(&id, &EventQuery::default()).await.unwrap();
    assert_eq!((page.oldest_seq, page.last_seq), (5, 10));

    // A log with a gap is refused, and the batch's sessions are removed again.
    let other = rid("t2");
    let mut holed = events(&other, 5, 2);
    holed.extend(events(&other, 8, 1));
    let refused = s
        .create_sessions(vec![
            NewSessionData {
                record: record("t3", "/repo", 1_772_000_000_000),
                events: events(&rid("t3"), 3, 1),
            },
            NewSessionData {
                record: record("t2", "/repo", 1_772_000_000_000),
                events: holed,
            },
        ])
        .await;
    assert!(
        matches!(refused, Err(StoreError::SeqMismatch { .. })),
        "{refused:?}"
    );
    assert!(matches!(s.load(&other).await, Err(StoreError::NotFound(_))));
    assert!(matches!(
        s.load(&rid("t3")).await,
        Err(StoreError::NotFound(_))
    ));
    s.drop_schema().await.unwrap();
}
