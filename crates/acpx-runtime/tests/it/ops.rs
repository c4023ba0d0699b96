//! The session operations of `acpx_runtime::ops` on real stores: the file store in a temp
//! directory and the memory store.

use std::sync::Arc;

use acpx_model::{
    EventPayload, EventQuery, EventSource, EventStream, LifecyclePhase, MemoryStore, NewSession,
    RecordId, SessionRecord, Store, StoreError, Timestamp,
};
use acpx_runtime::mapping::{roll_forward, DESIRED_CONFIG_KEY, DESIRED_MODE_KEY};
use acpx_runtime::ops::fork::{create_agent_fork_record, record_fork, ForkMethod, FORKED_FROM_KEY};
use acpx_runtime::ops::import_trust::ImportTrust::Trusted;
use acpx_runtime::ops::node_import::{import_node_home, SkipKind, ThreadSource, JOURNAL_SCHEMA};
use acpx_runtime::ops::repair::{fsck, FsckOptions, ProblemKind};
use acpx_runtime::ops::scope::{create_resume_record, open_in_exact_scope};
use acpx_runtime::ops::transfer::{
    archive_head, for_each_event, import_event_lines_with, import_session_with, parse_import_file,
    read_import_source, store_new_session, ImportFile, ImportSource,
};
use acpx_runtime::ops::OpsError;
use acpx_runtime::recorder::{EventDraft, Recorder};
use acpx_store_fs::FsStore;
use serde_json::{json, Value};

fn new_record(id: &str) -> SessionRecord {
    SessionRecord::new(
        NewSession {
            acpx_record_id: RecordId::parse(id).unwrap(),
            acp_session_id: format!("acp-{id}"),
            agent_session_id: None,
            agent_command: "agent".into(),
            cwd: "/repo".into(),
            name: None,
        },
        Timestamp::now(),
    )
}

fn draft(kind: &str, request: &str, stream: EventStream, payload: Value) -> EventDraft {
    EventDraft::new(
        Some(request),
        stream,
        EventSource::Acp,
        EventPayload::from_parts(kind, &payload).unwrap(),
    )
}

/// A stored session with one finished turn ("hello" → "hi there"), recorded like a live one.
async fn session_with_a_turn(store: &Arc<dyn Store>, id: &str) -> SessionRecord {
    let mut record = new_record(id);
    record
        .acpx
        .extra
        .insert(DESIRED_MODE_KEY.into(), json!("plan"));
    store.create(&mut record).await.unwrap();
    let writer = Arc::new(
        store
            .lock(&record.acpx_record_id, std::time::Duration::from_secs(5))
            .await
            .unwrap(),
    );
    let mut rec = Recorder::new(
        store.clone(),
        &writer,
        record,
        acpx_model::Durability::Flush,
        std::time::Duration::from_millis(0),
    );
    let acp = format!("acp-{id}");
    for d in [
        draft(
            "prompt_started",
            "r1",
            EventStream::Prompt,
            json!({"message_preview": "hello", "resumed": false, "userMessageId": "u1",
                   "prompt": [{"type": "text", "text": "hello"}]}),
        ),
        draft(
            "session_update",
            "r1",
            EventStream::Prompt,
            json!({"sessionId": acp, "update": {"sessionUpdate": "agent_message_chunk",
                   "content": {"type": "text", "text": "hi there"}}}),
        ),
        draft(
            "prompt_done",
            "r1",
            EventStream::Prompt,
            json!({"stopReason": "end_turn", "permissionStats":
                   {"requested": 0, "approved": 0, "denied": 0, "cancelled": 0}}),
        ),
    ] {
        rec.record(d).await.unwrap();
    }
    rec.save().await.unwrap();
    rec.snapshot().clone()
}

async fn all_events(store: &dyn Store, id: &RecordId) -> Vec<acpx_model::EventEnvelope> {
    let mut out = Vec::new();
    for_each_event::<StoreError>(store, id, |e| {
        out.push(e.clone());
        Ok(())
    })
    .await
    .unwrap();
    out
}

fn stores() -> (tempfile::TempDir, Vec<Arc<dyn Store>>) {
    let dir = tempfile::tempdir().unwrap();
    let fs: Arc<dyn Store> = Arc::new(FsStore::open(dir.path().join("home")).unwrap());
    (dir, vec![fs, Arc::new(MemoryStore::new())])
}

#[tokio::test]
async fn a_fork_copies_the_conversation_and_is_recorded_through_the_recorder() {
    let (_dir, stores) = stores();
    for store in stores {
        let parent = session_with_a_turn(&store, "parent").await;
        assert_eq!(parent.thread.messages.len(), 2);
        let mut child = new_record("child");
        store.create(&mut child).await.unwrap();
        let forked = record_fork(
            store.clone(),
            &child.acpx_record_id,
            &parent,
            ForkMethod::Copy,
        )
        .await
        .unwrap();
        assert_eq!(forked.thread, parent.thread);
        assert_eq!(forked.acpx.extra[DESIRED_MODE_KEY], "plan");
        let from = &forked.acpx.extra[FORKED_FROM_KEY];
        assert_eq!(from["acpxRecordId"], "parent");
        assert_eq!(from["method"], "copy");
        assert_eq!(from["seq"], 3);
        // The event went through the recorder: seq 1, in the log, folded into the snapshot.
        let events = all_events(&*store, &child.acpx_record_id).await;
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].seq, 1);
        assert_eq!(
            events[0].payload["phase"],
            LifecyclePhase::SessionForked.as_str()
        );
        let stored = store.load(&child.acpx_record_id).await.unwrap();
        assert_eq!(stored.acpx.audit_seq, 1);
        assert_eq!(stored.acpx.event_log.last_seq, 1);
        assert_eq!(stored.thread, parent.thread);
        // The parent is untouched.
        assert_eq!(
            store
                .load(&parent.acpx_record_id)
                .await
                .unwrap()
                .acpx
                .audit_seq,
            3
        );
    }
}

/// The child of a fork is the fold of its own log: its snapshot after `record_fork` is what
/// rolling its log forward from a record that holds only its identity gives (as after a
/// crash before the snapshot was saved, or in fsck's rebuild).
#[tokio::test]
async fn a_forked_snapshot_is_what_its_log_rolls_forward_to() {
    let (_dir, stores) = stores();
    for store in stores {
        let mut parent = session_with_a_turn(&store, "parent").await;
        parent.acpx.current_mode_id = Some("plan".into());
        parent.acpx.available_commands = vec!["review".into(), "test".into()];
        parent.acpx.config_options = vec![json!({"id": "model", "currentValue": "big"})];
        parent
            .acpx
            .extra
            .insert(DESIRED_CONFIG_KEY.into(), json!({"model": "big"}));
        parent.protocol_version = Some(1);
        parent.agent_capabilities = json!({"loadSession": true});
        store.save(&mut parent).await.unwrap();
        let answer = json!({"sessionId": "acp-branch", "_meta": {"agentSessionId": "agent-7"},
                            "configOptions": [{"id": "model", "currentValue": "small"}]});
        let child = create_agent_fork_record(
            &*store,
            &parent,
            &answer,
            Some("branch".into()),
            acpx_model::RecordId::generate(),
        )
        .await
        .unwrap();
        let forked = record_fork(
            store.clone(),
            &child.acpx_record_id,
            &parent,
            ForkMethod::AgentFork,
        )
        .await
        .unwrap();
        assert_eq!(forked.thread, parent.thread);
        assert_eq!(forked.acpx.current_mode_id.as_deref(), Some("plan"));
        assert_eq!(forked.acpx.available_commands, ["review", "test"]);
        assert_eq!(forked.acpx.config_options[0]["currentValue"], "small");
        assert_eq!(
            forked.acpx.extra[DESIRED_CONFIG_KEY],
            json!({"model": "big"})
        );
        assert_eq!(forked.acpx.extra[FORKED_FROM_KEY]["method"], "session/fork");
        assert_eq!(forked.protocol_version, Some(1));

        let mut rebuilt = SessionRecord::new(
            NewSession {
                acpx_record_id: child.acpx_record_id.clone(),
                acp_session_id: child.acp_session_id.clone(),
                agent_session_id: child.agent_session_id.clone(),
                agent_command: child.agent_command.clone(),
                cwd: child.cwd.clone(),
                name: child.name.clone(),
            },
            child.created_at,
        );
        let events = all_events(&*store, &child.acpx_record_id).await;
        roll_forward(&mut rebuilt, &events);
        // Only the store's own bookkeeping is not the reducer's.
        rebuilt.revision = forked.revision;
        rebuilt.acpx.event_log = forked.acpx.event_log.clone();
        assert_eq!(rebuilt, forked);
        assert_eq!(store.load(&child.acpx_record_id).await.unwrap(), forked);
    }
}

#[tokio::test]
async fn an_archive_round_trips_into_another_store() {
    let (_dir, stores) = stores();
    let from = &stores[0];
    let parent = session_with_a_turn(from, "exported").await;
    let mut text = String::from_utf8(archive_head(&parent, Timestamp::now()).unwrap()).unwrap();
    for e in all_events(&**from, &parent.acpx_record_id).await {
        let mut line = Vec::new();
        e.write_ndjson_line(&mut line);
        text.push_str(std::str::from_utf8(&line).unwrap());
    }
    let ImportFile::Archive(session) = parse_import_file(&text, "x.ndjson").unwrap() else {
        panic!("an archive")
    };
    assert_eq!(session.events.len(), 3);
    let to = &stores[1];
    let stored = import_session_with(&**to, session.clone(), false, "x.ndjson", Trusted)
        .await
        .unwrap();
    assert_eq!(stored.acpx_record_id, parent.acpx_record_id);
    assert_eq!(stored.thread, parent.thread);
    assert_eq!(stored.acpx.event_log.last_seq, 3);
    assert_eq!(all_events(&**to, &stored.acpx_record_id).await.len(), 3);
    // The same id again is refused; a fresh id is not.
    let again = import_session_with(&**to, session.clone(), false, "x.ndjson", Trusted).await;
    assert!(matches!(
        again,
        Err(OpsError::Store(StoreError::AlreadyExists(_)))
    ));
    let copy = import_session_with(&**to, session.clone(), true, "x.ndjson", Trusted)
        .await
        .unwrap();
    assert_ne!(copy.acpx_record_id, parent.acpx_record_id);
    let events = all_events(&**to, &copy.acpx_record_id).await;
    assert!(events
        .iter()
        .all(|e| e.acpx_record_id == copy.acpx_record_id));
}

/// An archive of `record` whose log is `events` (as NDJSON lines), with `bad` in place of
/// line `bad_at` (1-based among the event lines) when given.
fn archive_text(
    record: &SessionRecord,
    events: &[acpx_model::EventEnvelope],
    bad: Option<(usize, &str)>,
) -> Vec<u8> {
    let mut text = archive_head(record, Timestamp::now()).unwrap();
    for (i, e) in events.iter().enumerate() {
        match bad {
            Some((at, line)) if at == i + 1 => {
                text.extend_from_slice(line.as_bytes());
                text.push(b'\n');
            }
            _ => e.write_ndjson_line(&mut text),
        }
    }
    text
}

#[tokio::test]
async fn an_archive_is_stored_as_it_is_read_and_a_bad_line_stores_nothing() {
    let (_dir, stores) = stores();
    let from = &stores[0];
    let parent = session_with_a_turn(from, "streamed").await;
    // A log longer than one import batch (1,000 events): copies of its last event renumbered.
    let mut events = all_events(&**from, &parent.acpx_record_id).await;
    let last = events.last().unwrap().clone();
    for seq in events.len() as u64 + 1..=2_500 {
        let mut e = last.clone();
        e.seq = seq;
        events.push(e);
    }
    let to = &stores[1];
    let open = |text: Vec<u8>| match read_import_source(std::io::Cursor::new(text), "x.ndjson") {
        Ok(ImportSource::Archive(record, lines)) => (record, lines),
        _ => panic!("an archive"),
    };

    // A bad line after the first batch: the stage is aborted, nothing of the session stays.
    let (record, lines) = open(archive_text(
        &parent,
        &events,
        Some((1_700, "{\"not\": 1}")),
    ));
    let r = import_event_lines_with(&**to, record, lines, false, Trusted).await;
    assert!(
        matches!(&r, Err(OpsError::Invalid(m)) if m.contains("x.ndjson line 1701")),
        "{:?}",
        r.map(|(_, n)| n)
    );
    assert!(matches!(
        to.load(&parent.acpx_record_id).await,
        Err(StoreError::NotFound(_))
    ));
    // A log whose oldest events retention removed is stored as retained from its first seq.
    let (record, lines) = open(archive_text(&parent, &events[1..], None));
    let (stored, n) = import_event_lines_with(&**to, record, lines, false, Trusted)
        .await
        .unwrap();
    assert_eq!(n, 2_499);
    assert_eq!(stored.acpx.event_log.last_seq, 2_500);
    assert_eq!(all_events(&**to, &parent.acpx_record_id).await, events[1..]);
    to.delete(&parent.acpx_record_id).await.unwrap();
    // A gap is refused before anything is stored.
    let mut gap = events.clone();
    gap.remove(5);
    let (record, lines) = open(archive_text(&parent, &gap, None));
    let r = import_event_lines_with(&**to, record, lines, false, Trusted).await;
    assert!(
        matches!(&r, Err(OpsError::Invalid(m)) if m.contains("has seq 7, expected 6")),
        "{:?}",
        r.map(|(_, n)| n)
    );
    assert!(matches!(
        to.load(&parent.acpx_record_id).await,
        Err(StoreError::NotFound(_))
    ));

    let (record, lines) = open(archive_text(&parent, &events, None));
    let (stored, n) = import_event_lines_with(&**to, record, lines, false, Trusted)
        .await
        .unwrap();
    assert_eq!(n, 2_500);
    assert_eq!(stored.acpx_record_id, parent.acpx_record_id);
    assert_eq!(stored.acpx.event_log.last_seq, 2_500);
    assert_eq!(all_events(&**to, &stored.acpx_record_id).await, events);
    // Under a fresh id every event is moved to it.
    let (record, lines) = open(archive_text(&parent, &events, None));
    let (copy, _) = import_event_lines_with(&**to, record, lines, true, Trusted)
        .await
        .unwrap();
    assert_ne!(copy.acpx_record_id, parent.acpx_record_id);
    let copied = all_events(&**to, &copy.acpx_record_id).await;
    assert_eq!(copied.len(), 2_500);
    assert!(copied
        .iter()
        .all(|e| e.acpx_record_id == copy.acpx_record_id));
}

#[tokio::test]
async fn a_log_with_a_gap_is_not_stored() {
    let (_dir, stores) = stores();
    let from = &stores[0];
    let parent = session_with_a_turn(from, "gappy").await;
    let mut events = all_events(&**from, &parent.acpx_record_id).await;
    events.remove(1);
    let mut record = parent.clone();
    record.acpx_record_id = RecordId::parse("gappy2").unwrap();
    for e in &mut events {
        e.acpx_record_id = record.acpx_record_id.clone();
    }
    let r = store_new_session(&*stores[1], record.clone(), &events).await;
    assert!(matches!(r, Err(OpsError::Invalid(m)) if m.contains("seq 3, expected 2")));
    assert!(matches!(
        stores[1].load(&record.acpx_record_id).await,
        Err(StoreError::NotFound(_))
    ));
}

#[tokio::test]
async fn fsck_finds_a_snapshot_behind_its_log_and_repairs_it() {
    let (_dir, stores) = stores();
    for store in stores {
        let session = session_with_a_turn(&store, "behind").await;
        let id = session.acpx_record_id.clone();
        // Put the snapshot back to before the turn: the log is ahead.
        let mut stale = store.load(&id).await.unwrap();
        let fresh = new_record("behind");
        stale.thread = fresh.thread;
        stale.acpx.audit_seq = 0;
        stale.acpx.last_turn = None;
        store.save(&mut stale).await.unwrap();

        let check = || FsckOptions {
            repair: false,
            set_aside_torn_tail: None,
        };
        let report = fsck(store.clone(), check(), |_| Ok::<_, OpsError>(false))
            .await
            .unwrap();
        assert_eq!(report.checked, 1);
        let kinds: Vec<ProblemKind> = report.problems.iter().map(|p| p.kind).collect();
        assert_eq!(kinds, [ProblemKind::SnapshotBehind]);
        assert!(report.repairable_left());

        let repair = FsckOptions {
            repair: true,
            set_aside_torn_tail: None,
        };
        let report = fsck(store.clone(), repair, |_| Ok::<_, OpsError>(false))
            .await
            .unwrap();
        assert_eq!(report.repaired(), 1);
        assert_eq!(report.remaining(), 0);
        let repaired = store.load(&id).await.unwrap();
        assert!(repaired.acpx.audit_seq >= 3);
        assert_eq!(repaired.thread.messages.len(), 2);

        let report = fsck(store.clone(), check(), |_| Ok::<_, OpsError>(false))
            .await
            .unwrap();
        assert!(report.problems.is_empty(), "{:?}", report.problems);
        // A busy session is skipped, not checked.
        let report = fsck(store.clone(), check(), |_| Ok::<_, OpsError>(true))
            .await
            .unwrap();
        assert_eq!((report.checked, report.skipped_busy.len()), (0, 1));
    }
}

/// A closed segment of the file store is kept compressed; fsck reads it, and reports one that
/// is damaged as a damaged log naming the `.zst` file (not repairable, like a damaged line).
#[tokio::test]
async fn fsck_reads_compressed_segments_and_reports_a_damaged_one() {
    let dir = tempfile::tempdir().unwrap();
    let fs = Arc::new(
        FsStore::open_with(
            dir.path().join("home"),
            acpx_store_fs::FsStoreOptions {
                // Every event rotates: each closed segment holds one event.
                max_segment_bytes: 100,
                max_segments: 5,
                ..Default::default()
            },
        )
        .unwrap(),
    );
    let store: Arc<dyn Store> = fs.clone();
    let session = session_with_a_turn(&store, "zst").await;
    let id = session.acpx_record_id.clone();
    let z = fs.compressed_segment_path(&id, 2);
    assert!(z.exists(), "closed segments are compressed");
    let check = || FsckOptions {
        repair: false,
        set_aside_torn_tail: None,
    };
    let report = fsck(store.clone(), check(), |_| Ok::<_, OpsError>(false))
        .await
        .unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);

    let mut bytes = std::fs::read(&z).unwrap();
    bytes[20] ^= 0x55;
    std::fs::write(&z, &bytes).unwrap();
    for repair in [false, true] {
        let options = FsckOptions {
            repair,
            set_aside_torn_tail: None,
        };
        let report = fsck(store.clone(), options, |_| Ok::<_, OpsError>(false))
            .await
            .unwrap();
        let damaged: Vec<_> = report
            .problems
            .iter()
            .filter(|p| p.kind == ProblemKind::LogDamaged)
            .collect();
        assert_eq!(damaged.len(), 1, "{:?}", report.problems);
        let message = &damaged[0].message;
        assert!(
            message.contains(&z.display().to_string())
                && message.contains("cannot be decompressed"),
            "{message}"
        );
        assert!(!damaged[0].repairable && !damaged[0].repaired);
    }
}

/// A log with more damaged lines than a page lists: the lines left out still account for
/// the seqs they hold, so fsck reports damage, not a gap.
#[tokio::test]
async fn fsck_counts_damaged_lines_a_page_does_not_list() {
    let dir = tempfile::tempdir().unwrap();
    let fs = Arc::new(FsStore::open(dir.path().join("home")).unwrap());
    let store: Arc<dyn Store> = fs.clone();
    let mut record = new_record("many");
    store.create(&mut record).await.unwrap();
    let writer = Arc::new(
        store
            .lock(&record.acpx_record_id, std::time::Duration::from_secs(5))
            .await
            .unwrap(),
    );
    let id = record.acpx_record_id.clone();
    let mut rec = Recorder::new(
        store.clone(),
        &writer,
        record,
        acpx_model::Durability::Flush,
        std::time::Duration::from_millis(0),
    );
    for i in 0..300 {
        rec.record(draft(
            "session_update",
            "r1",
            EventStream::Prompt,
            json!({"sessionId": "acp-many", "update": {"sessionUpdate": "agent_message_chunk",
                   "content": {"type": "text", "text": format!("chunk {i}")}}}),
        ))
        .await
        .unwrap();
    }
    rec.save().await.unwrap();
    drop(rec);
    drop(writer);
    let path = fs.active_log_path(&id);
    let text = std::fs::read_to_string(&path).unwrap();
    let damaged: String = text
        .lines()
        .enumerate()
        .map(|(i, l)| {
            if (50..250).contains(&i) {
                format!("garbage {i}\n")
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    std::fs::write(&path, damaged).unwrap();
    let report = fsck(
        store.clone(),
        FsckOptions {
            repair: false,
            set_aside_torn_tail: None,
        },
        |_| Ok::<_, OpsError>(false),
    )
    .await
    .unwrap();
    let kinds: Vec<_> = report.problems.iter().map(|p| p.kind).collect();
    assert!(
        !kinds.contains(&ProblemKind::SeqGap),
        "{:?}",
        report.problems
    );
    assert!(kinds.contains(&ProblemKind::LogDamaged), "{kinds:?}");
}

#[tokio::test]
async fn a_node_home_is_imported_once_with_its_journal() {
    let dir = tempfile::tempdir().unwrap();
    let sessions = dir.path().join("sessions");
    std::fs::create_dir_all(&sessions).unwrap();
    let record = json!({
        "schema": "acpx.session.v1",
        "acpx_record_id": "node-1",
        "acp_session_id": "node-1",
        "agent_command": "node agent.js",
        "cwd": "/repo",
        "created_at": "2026-01-01T00:00:00.000Z",
        "last_used_at": "2026-01-01T00:05:00.000Z",
        "last_seq": 3,
        "closed": false,
        "title": "t",
        "messages": [{"User": {"id": "u1", "content": [{"Text": "hello"}]}}],
        "updated_at": "2026-01-01T00:05:00.000Z",
        "acpx": {}
    });
    std::fs::write(sessions.join("node-1.json"), record.to_string()).unwrap();
    let journal = [
        json!({"schema": JOURNAL_SCHEMA, "type": "turn_started", "request_id": "r1"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": {"sessionId": "node-1", "prompt": [{"type": "text", "text": "hello"}]}}),
        json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "node-1", "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"}}}}),
        json!({"jsonrpc": "2.0", "id": 2, "result": {"stopReason": "end_turn"}}),
    ]
    .iter()
    .map(|v| format!("{v}\n"))
    .collect::<String>();
    std::fs::write(sessions.join("node-1.stream.ndjson"), journal).unwrap();
    std::fs::write(sessions.join("other.json"), "{\"not\": \"a session\"}").unwrap();

    let store = FsStore::open(dir.path().join("acpx-home")).unwrap();
    let report = import_node_home(&store, dir.path(), false).await.unwrap();
    assert_eq!(report.files, 2);
    assert_eq!(report.imported.len(), 1);
    let imported = &report.imported[0];
    assert_eq!(imported.thread_source, ThreadSource::Journal);
    assert_eq!(imported.session.message_count, 2);
    assert_eq!(imported.events, 3);
    let stored = store.load(&imported.session.acpx_record_id).await.unwrap();
    assert_eq!(stored.acpx.event_log.last_seq, 3);
    assert_eq!(report.skipped[0].kind, SkipKind::Ignored);
    assert_eq!(report.failed(), 0);

    let again = import_node_home(&store, dir.path(), false).await.unwrap();
    assert!(again.imported.is_empty());
    assert!(again
        .skipped
        .iter()
        .any(|s| s.kind == SkipKind::AlreadyPresent));
    let page = store
        .read_events(&imported.session.acpx_record_id, &EventQuery::default())
        .await
        .unwrap();
    assert_eq!(page.events.len(), 3, "the second import wrote nothing");
}

#[tokio::test]
async fn a_resume_record_takes_the_acp_id_when_it_is_free() {
    let store = MemoryStore::new();
    let first = create_resume_record(&store, "acp-7", "agent", "/repo", None)
        .await
        .unwrap();
    assert_eq!(first.acpx_record_id.as_str(), "acp-7");
    let second = create_resume_record(&store, "acp-7", "agent", "/repo", None)
        .await
        .unwrap();
    assert_ne!(second.acpx_record_id.as_str(), "acp-7");
    assert_eq!(second.acp_session_id, "acp-7");
    assert!(matches!(
        create_resume_record(&store, " ", "agent", "/repo", None).await,
        Err(OpsError::Invalid(_))
    ));
    let open = open_in_exact_scope(&store, "agent", "/repo", None)
        .await
        .unwrap();
    assert_eq!(open.len(), 2);
    assert!(open_in_exact_scope(&store, "agent", "/elsewhere", None)
        .await
        .unwrap()
        .is_empty());
}
