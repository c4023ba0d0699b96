//! Every `sql` block of the "SQLite backend" section of `docs/format.md` runs against a real
//! database written by the store and returns what the text promises.

use crate::common;

use acpx_model::session::{LastTurn, TurnError};
use acpx_model::{
    Durability, EventContext, EventEnvelope, EventPayload, EventSource, EventStream, RecordId,
    Store, Timestamp,
};
use acpx_store_sqlite::SqliteStore;
use common::*;
use rusqlite::types::Value;
use serde_json::json;

fn doc_queries() -> Vec<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/format.md");
    let text = std::fs::read_to_string(path).unwrap();
    let start = text
        .find("\n## SQLite backend")
        .expect("docs/format.md has a SQLite backend section");
    let section = &text[start + 1..];
    let section = match section[3..].find("\n## ") {
        Some(end) => &section[..end + 3],
        None => section,
    };
    let mut queries = Vec::new();
    let mut rest = section;
    while let Some(at) = rest.find("```sql\n") {
        let body = &rest[at + 7..];
        let end = body.find("```").unwrap();
        queries.push(body[..end].to_owned());
        rest = &body[end..];
    }
    queries
}

fn event(id: &RecordId, seq: u64, event_type: &str, payload: serde_json::Value) -> EventEnvelope {
    let ctx = EventContext {
        acpx_record_id: id,
        acp_session_id: "acp",
        request_id: Some("req_1"),
        stream: EventStream::Prompt,
        source: EventSource::Acp,
    };
    EventEnvelope::new(
        &ctx,
        seq,
        Timestamp::now(),
        EventPayload::Unknown {
            event_type: event_type.into(),
            payload,
        },
    )
}

fn tool_call(name: Option<&str>, title: &str) -> serde_json::Value {
    let mut update =
        json!({"sessionUpdate": "tool_call", "toolCallId": "c", "title": title, "kind": "read"});
    if let Some(n) = name {
        update["name"] = json!(n);
    }
    json!({"sessionId": "acp", "update": update})
}

#[tokio::test]
async fn documented_queries_run_and_answer() {
    let queries = doc_queries();
    assert_eq!(queries.len(), 7, "update this test when adding queries");

    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("acpx.db")).unwrap();
    let now = Timestamp::now().millis();

    let mut a = record("in-project", "/home/me/project", now);
    a.thread.title = "Fix the flaky test".into();
    a.thread
        .messages
        .push(user("why is this flaky test failing?"));
    a.thread.messages.push(
        serde_json::from_value(json!({"Agent": {"content": [
            {"Text": "Let me look."},
            {"ToolUse": {"id": "call_1", "name": "run_command", "raw_input": "{}",
                         "input": {"command": "ls"}, "is_input_complete": true,
                         "thought_signature": null}}
        ], "tool_results": {}}}))
        .unwrap(),
    );
    a.thread.messages.push(acpx_model::thread::Message::Resume);
    a.acpx.last_turn = Some(LastTurn {
        request_id: "req_1".into(),
        started_at: Timestamp::now(),
        ended_at: Some(Timestamp::now()),
        resumed: false,
        stop_reason: None,
        outcome: "failed".into(),
        error: Some(TurnError {
            code: "RUNTIME".into(),
            detail_code: None,
            message: "agent crashed".into(),
            retryable: true,
        }),
        permission_stats: Default::default(),
    });
    store.create(&mut a).await.unwrap();
    let id = a.acpx_record_id.clone();
    append_locked(
        &store,
        &id,
        &[
            event(
                &id,
                1,
                "session_update",
                tool_call(Some("read_file"), "Read a.rs"),
            ),
            event(
                &id,
                2,
                "session_update",
                tool_call(Some("read_file"), "Read b.rs"),
            ),
            event(&id, 3, "session_update", tool_call(None, "Run tests")),
            event(
                &id,
                4,
                "prompt_error",
                json!({"code": "RUNTIME", "message": "agent crashed", "retryable": true}),
            ),
        ],
        Durability::Flush,
    )
    .await
    .unwrap();
    store
        .create(&mut record(
            "below-project",
            "/home/me/project/sub/",
            now - 5,
        ))
        .await
        .unwrap();
    store
        .create(&mut record("elsewhere", "/home/me/projects-old", now - 9))
        .await
        .unwrap();

    let conn = rusqlite::Connection::open(store.path()).unwrap();
    let run = |sql: &str| -> Vec<Vec<Value>> {
        let mut stmt = conn.prepare(sql).unwrap_or_else(|e| panic!("{e}\n{sql}"));
        let n = stmt.column_count();
        stmt.query_map([], |row| (0..n).map(|i| row.get::<_, Value>(i)).collect())
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap_or_else(|e| panic!("{e}\n{sql}"))
    };
    let text = |v: &Value| match v {
        Value::Text(s) => s.clone(),
        Value::Integer(i) => i.to_string(),
        other => format!("{other:?}"),
    };

    let rows = run(&queries[0]);
    let ids: Vec<String> = rows.iter().map(|r| text(&r[0])).collect();
    assert_eq!(ids, vec!["in-project", "below-project"]);

    let rows = run(&queries[1]);
    assert_eq!(rows.len(), 1);
    assert_eq!(text(&rows[0][1]), "in-project");
    assert_eq!(text(&rows[0][5]), "agent crashed");
    // The query by time repeats the partial index's condition, so it reads the index, not
    // every event of every session.
    let plan = run(&format!("EXPLAIN QUERY PLAN {}", queries[1]));
    assert!(
        plan.iter().any(|r| text(&r[3]).contains("events_by_time")),
        "{plan:?}"
    );

    let rows = run(&queries[2]);
    assert_eq!(rows.len(), 1);
    assert_eq!(text(&rows[0][3]), "agent crashed");

    let rows = run(&queries[3]);
    let tools: Vec<(String, String)> = rows.iter().map(|r| (text(&r[0]), text(&r[2]))).collect();
    assert_eq!(
        tools,
        vec![
            ("read_file".into(), "2".into()),
            ("Run tests".into(), "1".into())
        ]
    );

    let rows = run(&queries[4]);
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (text(&rows[0][0]), text(&rows[0][1])),
        ("run_command".into(), "1".into())
    );

    let rows = run(&queries[5]);
    assert_eq!(rows.len(), 1);
    assert_eq!(text(&rows[0][0]), "in-project");
    assert!(text(&rows[0][3]).contains("flaky test"), "{:?}", rows[0][3]);

    let rows = run(&queries[6]);
    let turn: Vec<(String, String, String)> = rows
        .iter()
        .map(|r| (text(&r[0]), text(&r[2]), text(&r[3])))
        .collect();
    assert_eq!(
        turn,
        vec![
            ("1".into(), "session_update".into(), "tool_call".into()),
            ("2".into(), "session_update".into(), "tool_call".into()),
            ("3".into(), "session_update".into(), "tool_call".into()),
            ("4".into(), "prompt_error".into(), "Null".into()),
        ]
    );
    // Between the bounds of the request's range, not through every event of the session.
    let plan = run(&format!("EXPLAIN QUERY PLAN {}", queries[6]));
    assert!(
        plan.iter().any(|r| text(&r[3]).contains("seq>? AND seq<?")),
        "{plan:?}"
    );
}
