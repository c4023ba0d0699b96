//! The write path: failing appends, snapshots behind their log, on every backend.
use crate::common;

use std::sync::Arc;
use std::time::Duration;

use acpx_model::testing::{FaultStore, Faults};
use acpx_model::Store;
use acpx_runtime::{text_prompt, Runtime, RuntimeOptions};
use common::*;

/// A real backend whose appends can be made to fail (a full or read-only disk).
fn flaky_log(env: &Env) -> Arc<FaultStore<dyn Store>> {
    Arc::new(FaultStore::new(env.store.clone(), Faults::new()))
}

backend_tests! {
    a_failing_append_is_recorded_surfaced_and_retried => append_failure;
    events_lost_with_their_append_are_reported_as_a_log_gap => log_gap;
    a_snapshot_behind_its_log_is_rolled_forward_on_open => roll_forward;
    a_disk_full_mid_stream_stops_the_turn_and_shows_only_stored_events => full_mid_stream;
    a_streaming_turn_saves_its_snapshot_a_logarithmic_number_of_times => save_budget;
    a_prompt_on_a_reopened_session_saves_its_snapshot_twice => saves_per_prompt;
}

/// What an observer was shown: each envelope's seq and JSON text, in order.
type Shown = Arc<std::sync::Mutex<Vec<(u64, String)>>>;

/// Every envelope an observer was shown, as JSON text, by seq.
fn byte_collector() -> (acpx_runtime::Observer, Shown) {
    let shown = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = shown.clone();
    let observer: acpx_runtime::Observer = Arc::new(move |e: &acpx_model::EventEnvelope| {
        let text = serde_json::to_string(e).unwrap();
        seen.lock().unwrap().push((e.seq, text));
    });
    (observer, shown)
}

/// Every shown envelope is stored under its seq with identical bytes, and the log is
/// gap-free (so no seq holds two events).
async fn assert_shown_is_stored(env: &Env, id: &acpx_model::RecordId, shown: &[(u64, String)]) {
    let stored = env.events(id).await;
    assert_gap_free(&stored);
    for (seq, text) in shown {
        let e = stored
            .get(usize::try_from(*seq).unwrap() - 1)
            .unwrap_or_else(|| panic!("shown seq {seq} is not stored"));
        assert_eq!(&serde_json::to_string(e).unwrap(), text, "seq {seq}");
    }
}

async fn full_mid_stream(env: Env) {
    let flaky = flaky_log(&env);
    let (observer, shown) = byte_collector();
    let options = RuntimeOptions {
        observer: Some(observer),
        ..RuntimeOptions::default()
    };
    let rt = Runtime::new(flaky.clone(), options);
    let mut s = rt.open_new(env.spec(agent("--resume"))).await.unwrap();
    let id = s.id().clone();
    // The disk fills up after 300 more events, in the middle of a 3,000-chunk reply.
    flaky.fault().fail_appends_after(300);
    let result = s.prompt(text_prompt("stream 3000")).await;
    let err = match result {
        Err(e) => e.to_string(),
        Ok(out) => panic!("the turn must stop when it cannot be recorded: {out:?}"),
    };
    assert!(err.contains("event log cannot be written"), "{err}");
    let shown_now = shown.lock().unwrap().clone();
    // Updates are appended in batches, and the batch that would pass the limit fails
    // whole: some of the reply was shown, never more than the disk took.
    let chunks_shown = shown_now
        .iter()
        .filter(|(_, text)| text.contains("agent_message_chunk"))
        .count();
    assert!(chunks_shown > 0 && chunks_shown <= 300, "{chunks_shown}");
    assert_shown_is_stored(&env, &id, &shown_now).await;
    let logged = env.events(&id).await.len();
    assert!(
        logged < 1000,
        "the stream was stopped, not stored to its end"
    );
    drop(s);
    // Space is freed: the next process continues numbering from the log, and every seq
    // anyone saw still holds the event they saw.
    flaky.fault().fail_appends(false);
    let mut s = rt.open_existing(&id).await.unwrap();
    assert!(s.recovery().log_gap.is_some());
    let out = s.prompt(text_prompt("echo after")).await.unwrap();
    assert_eq!(out.outcome, "completed");
    assert_eq!(out.log_write_error, None);
    s.shutdown().await.unwrap();
    let shown_all = shown.lock().unwrap().clone();
    assert!(shown_all.len() > shown_now.len());
    assert_shown_is_stored(&env, &id, &shown_all).await;
}

async fn append_failure(env: Env) {
    let flaky = flaky_log(&env);
    // What an observer (the CLI's output, an owner's client) was shown, by seq.
    let shown = Arc::new(std::sync::Mutex::new(Vec::<u64>::new()));
    let seen = shown.clone();
    let observer: acpx_runtime::Observer = Arc::new(move |e: &acpx_model::EventEnvelope| {
        seen.lock().unwrap().push(e.seq);
    });
    let options = RuntimeOptions {
        observer: Some(observer),
        ..RuntimeOptions::default()
    };
    let rt = Runtime::new(flaky.clone(), options);
    let mut s = rt.open_new(env.spec(agent(""))).await.unwrap();
    let id = s.id().clone();
    let before = env.events(&id).await.len();
    let shown_before = shown.lock().unwrap().len();
    flaky.fault().fail_appends(true);
    let out = s
        .prompt(text_prompt("echo during the outage"))
        .await
        .unwrap();
    assert_eq!(out.outcome, "completed", "the turn itself is not lost");
    let err = out.log_write_error.expect("the failure reaches the caller");
    assert!(err.contains("No space left on device"), "{err}");
    // The failure reached session.json, with the turn.
    let on_disk = env.stored(&id).await;
    assert!(on_disk
        .acpx
        .event_log
        .last_write_error
        .as_deref()
        .unwrap()
        .contains("No space left"));
    assert_eq!(on_disk.thread.messages.len(), 2);
    assert_eq!(env.events(&id).await.len(), before, "nothing was appended");
    assert_eq!(
        shown.lock().unwrap().len(),
        shown_before,
        "nothing unstored was shown to an observer"
    );
    // The disk recovers: the held-back events go out first, in order, without a gap.
    flaky.fault().fail_appends(false);
    let out = s.prompt(text_prompt("echo after")).await.unwrap();
    assert_eq!(out.log_write_error, None);
    let r = s.shutdown().await.unwrap();
    let ev = env.events(&id).await;
    assert_gap_free(&ev);
    assert_eq!(r.acpx.audit_seq, ev.len() as u64);
    assert_eq!(r.acpx.event_log.last_seq, ev.len() as u64);
    assert_eq!(r.acpx.event_log.last_write_error, None);
    // Once stored, every event was shown exactly once, in seq order.
    let shown = shown.lock().unwrap().clone();
    let stored: Vec<u64> = ev.iter().map(|e| e.seq).collect();
    assert_eq!(shown, stored[stored.len() - shown.len()..].to_vec());
    assert!(shown.windows(2).all(|w| w[1] == w[0] + 1), "{shown:?}");
    let texts: Vec<_> = updates(&ev, "agent_message_chunk")
        .iter()
        .map(|e| {
            e.payload["update"]["content"]["text"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(texts, ["during the outage", "after"]);
}

async fn log_gap(env: Env) {
    let flaky = flaky_log(&env);
    let rt = Runtime::new(flaky.clone(), RuntimeOptions::default());
    let mut s = rt.open_new(env.spec(agent("--resume"))).await.unwrap();
    let id = s.id().clone();
    flaky.fault().fail_appends(true);
    s.prompt(text_prompt("echo unlogged")).await.unwrap();
    // The process goes away with events that never reached the log.
    drop(s);
    let logged = env.events(&id).await.len() as u64;
    assert!(env.stored(&id).await.acpx.audit_seq > logged);
    flaky.fault().fail_appends(false);
    let s = rt.open_existing(&id).await.unwrap();
    let (from, to) = s.recovery().log_gap.expect("the gap is reported");
    assert_eq!(from, logged + 1);
    assert!(to >= from);
    let r = s.shutdown().await.unwrap();
    assert_eq!(
        r.thread.messages.len(),
        2,
        "the snapshot keeps what it had folded in"
    );
    let ev = env.events(&id).await;
    assert_gap_free(&ev);
    let gap = lifecycle(&ev, "log_gap");
    assert_eq!(gap.len(), 1);
    assert_eq!(gap[0].seq, logged + 1, "numbering continues from the log");
    assert_eq!(gap[0].payload["fromSeq"], from);
}

async fn roll_forward(env: Env) {
    // Snapshots are only written at boundaries here, so the streamed chunks exist only in the
    // log when the process disappears mid-turn.
    let rt = env.runtime(RuntimeOptions {
        snapshot_interval: Duration::from_secs(3600),
        ..RuntimeOptions::default()
    });
    let mut s = rt.open_new(env.spec(agent("--resume"))).await.unwrap();
    let id = s.id().clone();
    let (obs, mut rx) = channel();
    {
        let turn = s.prompt_with(text_prompt("slow 400"), Some(obs));
        tokio::pin!(turn);
        let mut chunks = 0;
        loop {
            tokio::select! {
                _ = &mut turn => panic!("the turn should still be running"),
                e = rx.recv() => {
                    if e.unwrap().payload["update"]["sessionUpdate"] == "agent_message_chunk" {
                        chunks += 1;
                        if chunks == 5 { break; }
                    }
                }
            }
        }
    }
    drop(s);
    let stale = env.stored(&id).await;
    let logged = env.events(&id).await;
    assert!(
        stale.acpx.audit_seq < logged.len() as u64,
        "the snapshot is behind its log"
    );
    let chunk_text: String = updates(&logged, "agent_message_chunk")
        .iter()
        .map(|e| e.payload["update"]["content"]["text"].as_str().unwrap())
        .collect();
    let (record, recovery) = rt.recover(&id).await.unwrap();
    assert_eq!(
        recovery.rolled_forward.applied,
        logged.len() as u64 - stale.acpx.audit_seq
    );
    assert!(recovery.interrupted_turn.is_some());
    assert!(recovery.stale_agent_pid.is_some());
    let t = thread_json(&record);
    assert_eq!(
        t["messages"][1]["Agent"]["content"][1]["Text"], chunk_text,
        "every logged chunk is in the thread"
    );
    assert_eq!(
        t["messages"][1]["Agent"]["tool_results"]["call_slow"]["is_error"],
        true
    );
    let turn = record.acpx.last_turn.clone().unwrap();
    assert_eq!(
        (
            turn.outcome.as_str(),
            turn.error.unwrap().detail_code.as_deref()
        ),
        ("interrupted", Some("TURN_INTERRUPTED"))
    );
    assert_eq!(record.pid, None);
    assert_eq!(
        env.stored(&id).await.acpx.audit_seq,
        record.acpx.audit_seq,
        "the repair was saved"
    );
    // Recovery is idempotent, and the session is usable again.
    let (again, second) = rt.recover(&id).await.unwrap();
    assert_eq!(second, acpx_runtime::Recovery::default());
    assert_eq!(again.acpx.audit_seq, record.acpx.audit_seq);
    let mut s = rt.open_existing(&id).await.unwrap();
    assert_eq!(
        s.prompt(text_prompt("echo back")).await.unwrap().outcome,
        "completed"
    );
    s.shutdown().await.unwrap();
    assert_gap_free(&env.events(&id).await);
}

async fn save_budget(env: Env) {
    // A short interval: alone it would allow a save every 100 ms of the turn; the debounce
    // budget (docs/format.md § Snapshot debounce) allows one per doubling of the log.
    let rt = env.runtime(RuntimeOptions {
        snapshot_interval: Duration::from_millis(100),
        ..RuntimeOptions::default()
    });
    let mut s = rt.open_new(env.spec(agent(""))).await.unwrap();
    let id = s.id().clone();
    let revision_before = env.stored(&id).await.revision;
    let out = s.prompt(text_prompt("stream 20000")).await.unwrap();
    assert_eq!(out.outcome, "completed");
    let r = s.shutdown().await.unwrap();
    let saves = r.revision - revision_before;
    // Forced saves (turn start and end, shutdown), one per doubling of the log (about 16 in
    // all), and one after each pause of 100 ms in the stream (a loaded machine stalls the
    // agent now and then). A save per interval would be over 100 for a turn this long in a
    // debug build.
    assert!(saves <= 60, "{saves} saves for a 20000-chunk turn");
    let ev = env.events(&id).await;
    assert_gap_free(&ev);
    assert_eq!(r.acpx.audit_seq, ev.len() as u64);
    assert_eq!(updates(&ev, "agent_message_chunk").len(), 20000);
    let text = match r.thread.messages.last() {
        Some(acpx_model::Message::Agent(a)) => match a.content.first() {
            Some(acpx_model::AgentContent::Text(t)) => t.len(),
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    };
    assert_eq!(text, 20000 * 8, "every chunk is in the thread");
}

async fn saves_per_prompt(env: Env) {
    // A save costs O(snapshot): a short turn on a large session must not rewrite it for each
    // start and lifecycle event (docs/format.md § Snapshot debounce). With an interval longer
    // than the test, no pause of the stream saves either, so the count is exact: the turn's
    // end and the session's final save (agent exit).
    let rt = env.runtime(RuntimeOptions {
        snapshot_interval: Duration::from_secs(600),
        ..RuntimeOptions::default()
    });
    let s = rt.open_new(env.spec(agent(""))).await.unwrap();
    let id = s.id().clone();
    s.shutdown().await.unwrap();
    let before = env.stored(&id).await;
    let mut s = rt.open_existing(&id).await.unwrap();
    let out = s.prompt(text_prompt("stream 50")).await.unwrap();
    assert_eq!(out.outcome, "completed");
    let r = s.shutdown().await.unwrap();
    assert_eq!(
        r.revision - before.revision,
        2,
        "saves for one reopened prompt"
    );
    // Nothing was left unsaved: the snapshot on disk holds every logged event.
    let stored = env.stored(&id).await;
    let ev = env.events(&id).await;
    assert_gap_free(&ev);
    assert_eq!(stored.acpx.audit_seq, ev.len() as u64);
    assert!(stored.acpx.audit_seq > before.acpx.audit_seq + 50);
    assert_eq!(stored.revision, r.revision);
}
