//! `kill -9` of the acpx process in the middle of a turn.
//!
//! The test binary re-runs itself as the victim (the `driver` test below does nothing unless
//! `ACPX_CRASH_DRIVER` is set): the child opens a real store, starts a slow turn against the
//! scripted agent and prints every event once it is recorded. The parent SIGKILLs it after
//! a number of events were acknowledged, then checks that nothing acknowledged was lost,
//! that the stale snapshot is rolled forward from the log, and that the turn is recorded as
//! interrupted. Memory stores do not outlive a process, so this runs on the file and SQLite
//! backends.
use crate::common;

use std::io::Write;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use acpx_model::{EventEnvelope, RecordId};
use acpx_runtime::{text_prompt, Runtime, RuntimeOptions};
use common::*;
use tokio::io::{AsyncBufReadExt, BufReader};

const DRIVER_ENV: &str = "ACPX_CRASH_DRIVER";

/// The victim process. Arguments in `ACPX_CRASH_DRIVER`: `<backend>|<store root>|<cwd>`.
#[test]
fn driver() {
    let Ok(spec) = std::env::var(DRIVER_ENV) else {
        return;
    };
    let parts: Vec<&str> = spec.split('|').collect();
    let backend = match parts[0] {
        "fs" => Backend::Fs,
        "sqlite" => Backend::Sqlite,
        other => panic!("unknown backend {other}"),
    };
    let store = open_store(backend, std::path::Path::new(parts[1]));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let observer: acpx_runtime::Observer = Arc::new(|e: &EventEnvelope| {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(
                out,
                "event {} {} {}",
                e.seq,
                e.event_type,
                e.payload["update"]["sessionUpdate"].as_str().unwrap_or("-")
            );
            let _ = out.flush();
        });
        let runtime = Runtime::new(
            store,
            RuntimeOptions {
                observer: Some(observer),
                // Only boundaries are saved: the chunks live in the log alone when the kill comes.
                snapshot_interval: Duration::from_secs(3600),
                ..RuntimeOptions::default()
            },
        );
        let mut s = runtime
            .open_new(acpx_runtime::NewSessionSpec {
                agent_command: agent("--resume"),
                cwd: parts[2].into(),
                name: None,
            })
            .await
            .unwrap();
        println!("id {}", s.id());
        let _ = std::io::stdout().flush();
        let _ = s.prompt(text_prompt("slow 2000")).await;
        println!("the turn ended before the kill");
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_mid_turn_fs() {
    agent_bin(); // built before the clock starts
    tokio::time::timeout(TEST_TIMEOUT, kill_9_mid_turn(Backend::Fs))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_mid_turn_sqlite() {
    agent_bin(); // built before the clock starts
    tokio::time::timeout(TEST_TIMEOUT, kill_9_mid_turn(Backend::Sqlite))
        .await
        .unwrap();
}

async fn kill_9_mid_turn(backend: Backend) {
    let env = Env::new(backend);
    let name = if backend == Backend::Fs {
        "fs"
    } else {
        "sqlite"
    };
    let mut child = tokio::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "crash::driver",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(
            DRIVER_ENV,
            format!("{name}|{}|{}", env.dir.path().display(), env.cwd.display()),
        )
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut id = None;
    let mut acked: Vec<(u64, String)> = Vec::new();
    let mut chunks = 0;
    while let Some(line) = lines.next_line().await.unwrap() {
        if let Some(rest) = line.strip_prefix("id ") {
            id = Some(RecordId::parse(rest).unwrap());
        } else if let Some(rest) = line.strip_prefix("event ") {
            let mut w = rest.split_whitespace();
            let seq: u64 = w.next().unwrap().parse().unwrap();
            let ty = w.next().unwrap().to_owned();
            if w.next() == Some("agent_message_chunk") {
                chunks += 1;
            }
            acked.push((seq, ty));
            if chunks == 25 {
                break;
            }
        }
    }
    assert_eq!(chunks, 25, "the driver streamed");
    // SAFETY: kill(2) on our own child's pid.
    let pid = child.id().unwrap() as i32;
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let status = child.wait().await.unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    let id = id.expect("the driver printed the record id");

    // Nothing that was acknowledged is missing from the log.
    let store = env.reopen_store();
    let logged = events(&*store, &id).await;
    assert_gap_free(&logged);
    for (seq, ty) in &acked {
        let e = logged
            .iter()
            .find(|e| e.seq == *seq)
            .unwrap_or_else(|| panic!("acknowledged event {seq} lost"));
        assert_eq!(&e.event_type, ty);
    }
    let stale = store.load(&id).await.unwrap();
    assert!(
        stale.acpx.audit_seq < logged.len() as u64,
        "the snapshot is behind the log"
    );
    let logged_text: String = updates(&logged, "agent_message_chunk")
        .iter()
        .map(|e| e.payload["update"]["content"]["text"].as_str().unwrap())
        .collect();
    let request_id = logged
        .iter()
        .find(|e| e.event_type == "prompt_started")
        .unwrap()
        .request_id
        .clone();
    let agent_pid = lifecycle(&logged, "agent_started")[0].payload["pid"]
        .as_u64()
        .unwrap() as u32;

    // Reopen in this (another) process.
    let rt = Runtime::new(store.clone(), RuntimeOptions::default());
    let mut s = rt.open_existing(&id).await.unwrap();
    let recovery = s.recovery().clone();
    assert_eq!(
        recovery.rolled_forward.applied,
        logged.len() as u64 - stale.acpx.audit_seq
    );
    assert_eq!(recovery.interrupted_turn, request_id);
    assert_eq!(recovery.stale_agent_pid, Some(agent_pid));
    let r = s.record().await;
    let t = thread_json(&r);
    assert_eq!(t["messages"][0]["User"]["content"][0]["Text"], "slow 2000");
    assert_eq!(
        t["messages"][1]["Agent"]["content"][1]["Text"], logged_text,
        "every logged chunk is in the thread"
    );
    assert!(logged_text.starts_with("chunk 0. chunk 1. "));
    // The call did not end by a cancel: its result says acpx stopped mid-turn.
    let slow = &t["messages"][1]["Agent"]["tool_results"]["call_slow"];
    assert_eq!(
        slow["content"][0]["Text"],
        "Tool call unfinished: acpx stopped before the turn ended"
    );
    assert_eq!(slow["unfinished"], "interrupted");
    assert_eq!(r.acpx.last_turn.as_ref().unwrap().outcome, "interrupted");
    // The session works again.
    let out = s.prompt(text_prompt("echo alive")).await.unwrap();
    assert_eq!(out.outcome, "completed");
    s.shutdown().await.unwrap();
    let after = events(&*env.reopen_store(), &id).await;
    assert_gap_free(&after);
    let interrupted: Vec<_> = after
        .iter()
        .filter(|e| e.event_type == "prompt_error")
        .collect();
    assert_eq!(interrupted.len(), 1);
    assert_eq!(interrupted[0].payload["outcome"], "interrupted");
    assert_eq!(interrupted[0].request_id, request_id);
}
