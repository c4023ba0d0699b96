//! What the import fuzz targets (`fuzz_imports`, `fuzz_node_import`) found, each a plain test
//! now that the code keeps the promise (they were `#[ignore]`d known gaps until fixed): seqs
//! near `u64::MAX`, events from the future, relative directories, escaping of what sessions
//! show, untrusted archives, and an import never naming a process of the exporting machine.

use std::fs;

use acpx_model::{MemoryStore, SessionRecord, Store, Timestamp};
use acpx_owner::runs::Probe;
use acpx_printer::transcript::{markdown, record_facts};
use acpx_runtime::ops::node_import::import_node_home;
use acpx_runtime::ops::transfer::{
    import_event_lines, import_session, parse_import_file, read_import_source, EventLines,
    ImportFile, ImportSource,
};
use acpx_runtime::ops::OpsError;
use acpx_test_support::fuzz as fuzz_support;
use serde_json::{json, Value};

use crate::fuzz_imports::*;
use crate::fuzz_node_import::node_fixture;

// ---------------------------------------------------------------------------------------------
// Findings of these targets, each a plain test now that the code keeps the promise (they
// were `#[ignore]`d known gaps until fixed)
// ---------------------------------------------------------------------------------------------

/// `archive` read as `sessions import` reads it.
pub(crate) fn open_archive(
    archive: &[u8],
) -> (SessionRecord, EventLines<std::io::Cursor<Vec<u8>>>) {
    match read_import_source(std::io::Cursor::new(archive.to_vec()), "x.ndjson") {
        Ok(ImportSource::Archive(record, lines)) => (record, lines),
        _ => panic!("an archive"),
    }
}

/// The short sample with event line `i` (1-based) edited by `f`.
pub(crate) fn short_archive_with(audit_seq: u64, i: usize, f: impl FnOnce(&mut Value)) -> Vec<u8> {
    let archive = archive_sample(Some(3), |s| s["acpx"]["audit_seq"] = json!(audit_seq));
    let mut lines = lines_of(&archive);
    edit_line(&mut lines[i], f);
    lines.concat()
}

#[tokio::test]
async fn an_event_seq_near_u64_max_is_refused_without_overflow() {
    let mut lines = lines_of(&archive_sample(Some(1), |_| {}));
    edit_line(&mut lines[1], |e| e["seq"] = json!(u64::MAX));
    lines.push(lines[1].clone());
    let archive = lines.concat();
    let store = MemoryStore::new();
    let (record, events) = open_archive(&archive);
    let r = import_event_lines(&store, record, events, false).await;
    assert!(
        matches!(r, Err(OpsError::Invalid(_))),
        "{:?}",
        r.map(|(_, n)| n)
    );
    let text = std::str::from_utf8(&archive).expect("UTF-8");
    let Ok(ImportFile::Archive(session)) = parse_import_file(text, "x.ndjson") else {
        panic!("an archive")
    };
    assert!(import_session(&store, session, false, "x.ndjson")
        .await
        .is_err());
    assert_eq!(all_sessions(&store).await, vec![]);
}

#[tokio::test]
async fn an_audit_seq_of_u64_max_rolls_forward_without_overflow() {
    let archive = archive_sample(Some(3), |s| s["acpx"]["audit_seq"] = json!(u64::MAX));
    let store = MemoryStore::new();
    let (record, events) = open_archive(&archive);
    // Refused, or stored and then opened without a panic.
    if let Ok((stored, _)) = import_event_lines(&store, record, events, false).await {
        let _ = acpx_runtime::load_rolled_forward(&store, &stored.acpx_record_id).await;
    }
}

#[tokio::test]
async fn an_event_from_the_future_does_not_move_last_used_at_forward() {
    // A snapshot that has folded in none of its events; the first one dated 2999.
    let archive = short_archive_with(0, 1, |e| e["timestamp"] = json!("2999-01-01T00:00:00.000Z"));
    let store = MemoryStore::new();
    let (record, events) = open_archive(&archive);
    // Refused (acpx's rule: an event dated beyond a day ahead), or imported without moving
    // `lastUsedAt` into the future.
    let Ok((stored, _)) = import_event_lines(&store, record, events, false).await else {
        return;
    };
    let (rolled, ..) = acpx_runtime::load_rolled_forward(&store, &stored.acpx_record_id)
        .await
        .expect("rolled forward");
    assert!(
        rolled.last_used_at.millis() <= Timestamp::now().millis(),
        "lastUsedAt {}",
        rolled.last_used_at
    );
}

/// A Node home with one record (`sess-node-2`, no journal) edited by `f`, imported.
pub(crate) async fn node_home_with(
    f: impl FnOnce(&mut Value),
) -> (MemoryStore, Vec<SessionRecord>) {
    let home = tempfile::tempdir_in(fuzz_support::scratch_root()).expect("a temp dir");
    let sessions = home.path().join("sessions");
    fs::create_dir_all(&sessions).expect("sessions dir");
    let mut record: Value =
        serde_json::from_slice(&node_fixture("sess-node-2.json")).expect("a Node record");
    f(&mut record);
    fs::write(
        sessions.join("sess-node-2.json"),
        serde_json::to_vec(&record).expect("json"),
    )
    .expect("write");
    let store = MemoryStore::new();
    let report = import_node_home(&store, home.path(), false)
        .await
        .expect("the home is read");
    let mut stored = Vec::new();
    for i in &report.imported {
        stored.push(
            store
                .load(&i.session.acpx_record_id)
                .await
                .expect("it loads"),
        );
    }
    (store, stored)
}

#[tokio::test]
async fn a_node_session_with_a_relative_cwd_is_not_imported_there() {
    let (_, stored) = node_home_with(|r| r["cwd"] = json!("relative/../../etc")).await;
    for r in stored {
        assert!(
            admissible_cwd(&r.cwd),
            "imported with the directory {:?}",
            r.cwd
        );
    }
}

#[tokio::test]
async fn a_node_session_last_used_in_the_future_is_brought_back_to_now() {
    let (_, stored) =
        node_home_with(|r| r["last_used_at"] = json!("2999-01-01T00:00:00.000Z")).await;
    assert_eq!(stored.len(), 1);
    assert!(stored[0].last_used_at.millis() <= Timestamp::now().millis());
}

#[tokio::test]
async fn what_sessions_show_and_the_markdown_export_print_of_an_import_is_escaped() {
    let archive = archive_sample(Some(3), |s| {
        s["acpSessionId"] = json!("sess\u{1b}]0;owned\u{7}");
        s["thread"]["title"] = json!("\u{1b}[2Jtitle");
    });
    let store = MemoryStore::new();
    let (record, events) = open_archive(&archive);
    let (stored, _) = import_event_lines(&store, record, events, false)
        .await
        .expect("imported");
    for (label, value) in record_facts(&stored, &Probe::Idle) {
        assert!(
            !value.chars().any(char::is_control),
            "`sessions show` prints the {label} {value:?}"
        );
    }
    let md = markdown(&stored);
    let header = md.split("\n\n- record id").next().unwrap_or_default();
    assert!(!header.chars().any(char::is_control), "{header:?}");
}

#[tokio::test]
async fn an_archive_that_says_it_is_untrusted_already_is_not_runnable() {
    let archive = archive_sample(Some(3), |s| {
        s["agentCommand"] = json!(HOSTILE_COMMANDS[0]);
        s["acpx"]["mcp_servers"] = mcp_shape(1);
        s["acpx"]["untrusted_import"] = json!({"agentCommand": 1});
    });
    let store = MemoryStore::new();
    let (record, events) = open_archive(&archive);
    let (stored, _) = import_event_lines(&store, record, events, false)
        .await
        .expect("imported");
    let loaded = store.load(&stored.acpx_record_id).await.expect("it loads");
    assert!(
        loaded.agent_command.starts_with("untrusted-import:"),
        "stored to run {:?}",
        loaded.agent_command
    );
    assert!(loaded
        .acpx
        .extra
        .get("untrusted_import")
        .and_then(|u| u.get("agentCommand"))
        .is_some_and(Value::is_string));
    assert!(!loaded.acpx.extra.contains_key("mcp_servers"));
}

#[tokio::test]
async fn an_imported_session_names_no_process_of_the_exporting_machine() {
    // Its snapshot has folded in none of its events; the first says agent 25584 started.
    let archive = short_archive_with(0, 1, |_| {});
    let store = MemoryStore::new();
    let (record, events) = open_archive(&archive);
    let (stored, _) = import_event_lines(&store, record, events, false)
        .await
        .expect("imported");
    let loaded = store.load(&stored.acpx_record_id).await.expect("it loads");
    assert_eq!(loaded.pid, None);
}
