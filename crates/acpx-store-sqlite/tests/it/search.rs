//! Full-text search of `SqliteStore` on a real database file: substrings, saves that change
//! what is indexed, and query text that must never reach FTS5 as syntax.

use crate::common;
use crate::support;

use acpx_model::{ListQuery, SearchQuery, Store};
use common::*;
use support::{assert_fts_in_step, open, raw};

#[tokio::test]
async fn search_finds_substrings_and_follows_saves() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let mut a = record("a", "/one", 2_000);
    a.thread.title = "Build fixes".into();
    a.thread.messages.push(user("Please rebuild the PROJECT"));
    a.thread.messages.push(acpx_model::thread::Message::Resume);
    a.thread.messages.push(agent("Rebuilt it; all tests pass"));
    store.create(&mut a).await.unwrap();
    let mut b = record("b", "/two", 1_000);
    b.thread.messages.push(user("project status?"));
    store.create(&mut b).await.unwrap();

    let hits = store
        .search(&SearchQuery {
            text: "project".into(),
            ..SearchQuery::default()
        })
        .await
        .unwrap();
    let got: Vec<_> = hits
        .iter()
        .map(|h| {
            (
                h.acpx_record_id.to_string(),
                h.message_index,
                h.role.clone(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("a".into(), 0, "user".into()),
            ("b".into(), 0, "user".into())
        ]
    );
    assert_eq!(hits[0].title.as_deref(), Some("Build fixes"));
    assert_eq!(hits[0].message_id.as_deref(), Some("u-26"));
    assert!(hits[0].snippet.contains("PROJECT"), "{}", hits[0].snippet);

    // Mid-word substrings match, like the scanning backends.
    let hits = store
        .search(&SearchQuery {
            text: "BUIL tests".into(),
            ..SearchQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!((hits[0].message_index, hits[0].role.as_str()), (2, "agent"));
    // Short terms (below the trigram size) still match.
    let hits = store
        .search(&SearchQuery {
            text: "it ;".into(),
            ..SearchQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(hits.len(), 1);
    // cwd filter.
    let hits = store
        .search(&SearchQuery {
            text: "project".into(),
            cwd: Some("/two/".into()),
            ..SearchQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].acpx_record_id.as_str(), "b");

    // The index follows saves: edited and removed messages stop matching.
    a.thread.messages.truncate(1);
    a.thread.messages[0] = user("something else entirely");
    store.save(&mut a).await.unwrap();
    let hits = store
        .search(&SearchQuery {
            text: "project".into(),
            ..SearchQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].acpx_record_id.as_str(), "b");
    store.delete(&rid("b")).await.unwrap();
    assert!(store
        .search(&SearchQuery {
            text: "project".into(),
            ..SearchQuery::default()
        })
        .await
        .unwrap()
        .is_empty());
    let conn = raw(&store);
    assert_fts_in_step(&conn);
}

#[tokio::test]
async fn search_text_can_never_inject_fts_syntax() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let mut a = record("a", "/one", 2_000);
    a.thread.messages.push(user(
        r#"weird "quoted" text with NEAR(a b) AND OR NOT * ^ : - + ( ) { } col:val"#,
    ));
    store.create(&mut a).await.unwrap();
    for text in [
        "\"",
        "\"\"",
        "\"quoted\"",
        "NEAR(a b)",
        "AND",
        "OR NOT",
        "*",
        "^weird",
        "col:val",
        "-",
        "(",
        ")",
        "{ }",
        "text*",
        "a\0b",
        "'; DROP TABLE sessions; --",
        "ünïcödé ✓",
        "\u{202e}",
    ] {
        let result = store
            .search(&SearchQuery {
                text: text.into(),
                ..SearchQuery::default()
            })
            .await;
        let hits = result.unwrap_or_else(|e| panic!("{text:?}: {e}"));
        let scanned = acpx_model::search_record(
            &store.load(&rid("a")).await.unwrap(),
            &SearchQuery {
                text: text.into(),
                ..SearchQuery::default()
            },
        );
        // Never stricter than the shared scanning rule.
        assert!(hits.len() >= scanned.len(), "{text:?}");
    }
    assert_eq!(
        store
            .list(&ListQuery::default())
            .await
            .unwrap()
            .sessions
            .len(),
        1
    );
}
