//! `acpx_owner::local`: turns, controls and forks run in this process, registered in the run
//! registry, with interrupts and remote cancel, on every backend against the scripted agent.
use crate::common;

use std::path::Path;
use std::time::Duration;

use acpx_model::{EventType, RecordId};
use acpx_owner::local::{self, LocalError, LocalEvent};
use acpx_owner::runs::{self, Probe};
use acpx_runtime::ops::fork::FORKED_FROM_KEY;
use acpx_runtime::{text_prompt, Runtime, RuntimeOptions};
use common::*;
use tokio::sync::{mpsc, watch};

backend_tests! {
    a_prompt_is_registered_and_a_remote_cancel_ends_it => remote_cancel;
    one_press_cancels_the_turn_two_stop_the_agent => presses;
    a_control_runs_and_a_press_while_waiting_gives_up => control;
    a_fork_by_the_agent_or_by_copy => fork;
    exec_runs_one_turn_in_a_new_session => exec;
    a_long_reply_streams_into_a_spill_file_and_is_stored_whole => long_reply;
    a_long_reasoning_streams_into_a_spill_file_and_is_stored_whole => long_reasoning;
}

/// A session of `agent` in the env's store, with the agent shut down again.
async fn stored_session(env: &Env, agent: &str) -> RecordId {
    let rt = env.runtime(RuntimeOptions::default());
    let session = rt.open_new(env.spec(agent.to_owned())).await.unwrap();
    session.shutdown().await.unwrap().acpx_record_id
}

/// A runtime whose observer forwards the turn's events, to know when the turn streams.
fn observed(env: &Env) -> (Runtime, mpsc::UnboundedReceiver<acpx_model::EventEnvelope>) {
    let (observer, rx) = channel();
    let options = RuntimeOptions {
        observer: Some(observer),
        ..RuntimeOptions::default()
    };
    (env.runtime(options), rx)
}

/// Waits until the agent streams a reply chunk of the running turn.
async fn turn_streams(rx: &mut mpsc::UnboundedReceiver<acpx_model::EventEnvelope>) {
    while let Some(e) = rx.recv().await {
        if e.kind() == EventType::SessionUpdate
            && e.payload["update"]["sessionUpdate"] == "agent_message_chunk"
        {
            return;
        }
    }
    panic!("the turn ended before it streamed");
}

/// Waits until a process holds the run of `id` with its run file written.
async fn running(home: &Path, id: &RecordId) -> runs::RunInfo {
    loop {
        if let Probe::Running(Some(info)) = runs::probe(home, id).unwrap() {
            return info;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The run lock of `id` is free and its files are gone. Within a moment, not at once: the
/// tests of this binary run side by side and start agent processes, and a child forked by
/// another test's thread holds a copy of every open file (the run lock's included) until it
/// execs, so a lock closed in that window is released only when the child's exec closes its
/// copy (seen once in CI as `Running(None)` right after the turn).
async fn assert_released(home: &Path, id: &RecordId) {
    assert!(
        runs::wait_idle(home, id, Duration::from_secs(5))
            .await
            .unwrap(),
        "the run lock is still held 5 s after the turn"
    );
    assert_eq!(runs::probe(home, id).unwrap(), Probe::Idle);
}

async fn remote_cancel(env: Env) {
    let agent = env.loading_agent("");
    let id = stored_session(&env, &agent).await;
    let (rt, mut rx) = observed(&env);
    let home = env.dir.path().join("home");
    let (_presses, interrupts) = watch::channel(0);
    let turn = local::prompt(
        &rt,
        &home,
        &id,
        text_prompt("slow 400"),
        Some(Duration::from_secs(30)),
        interrupts,
        |_| {},
    );
    let canceller = async {
        let info = running(&home, &id).await;
        assert_eq!(info.pid, std::process::id());
        turn_streams(&mut rx).await;
        let (h, i) = (home.clone(), id.clone());
        let sent = tokio::task::spawn_blocking(move || runs::request_cancel(&h, &i))
            .await
            .unwrap()
            .unwrap();
        assert!(sent.is_some(), "the running prompt takes the cancel");
    };
    let (turn, ()) = tokio::join!(turn, canceller);
    let turn = turn.unwrap();
    assert_eq!(turn.outcome.outcome.as_str(), "cancelled");
    assert!(turn.outcome.cancel_requested);
    assert_eq!(turn.record.acpx_record_id, id);
    // The run is released with the turn.
    assert_released(&home, &id).await;
}

async fn presses(env: Env) {
    let agent = env.loading_agent("");
    let id = stored_session(&env, &agent).await;
    let home = env.dir.path().join("home");

    // One press: the turn is cancelled through ACP and ends normally.
    let (rt, mut rx) = observed(&env);
    let (press, interrupts) = watch::channel(0);
    let mut seen = Vec::new();
    let turn = local::prompt(
        &rt,
        &home,
        &id,
        text_prompt("slow 400"),
        None,
        interrupts,
        |e| {
            seen.push(
                format!("{e:?}")
                    .split(['(', ' '])
                    .next()
                    .unwrap()
                    .to_owned(),
            )
        },
    );
    let presser = async {
        turn_streams(&mut rx).await;
        press.send_modify(|n| *n += 1);
    };
    let (turn, ()) = tokio::join!(turn, presser);
    assert_eq!(turn.unwrap().outcome.outcome.as_str(), "cancelled");
    assert_eq!(seen, ["Opened", "CancellingTurn", "TurnOver"]);

    // Two presses: the agent is stopped and the turn is left unfinished.
    let (rt, mut rx) = observed(&env);
    let (press, interrupts) = watch::channel(0);
    let turn = local::prompt(
        &rt,
        &home,
        &id,
        text_prompt("slow 400"),
        None,
        interrupts,
        |_| {},
    );
    let presser = async {
        turn_streams(&mut rx).await;
        press.send_modify(|n| *n += 2);
    };
    let (turn, ()) = tokio::join!(turn, presser);
    assert!(matches!(turn, Err(LocalError::Interrupted)), "{turn:?}");
    assert_released(&home, &id).await;
    let rt = env.runtime(RuntimeOptions::default());
    let reopened = rt.open_existing(&id).await.unwrap();
    assert!(
        reopened.recovery().interrupted_turn.is_some(),
        "the next open records the stopped turn as interrupted"
    );
    reopened.shutdown().await.unwrap();
}

async fn control(env: Env) {
    let agent = env.loading_agent("");
    let id = stored_session(&env, &agent).await;
    let home = env.dir.path().join("home");
    let rt = env.runtime(RuntimeOptions::default());

    let (_press, interrupts) = watch::channel(0);
    let mut opened = 0;
    let done = local::control(
        &rt,
        &home,
        &id,
        None,
        interrupts,
        |e| {
            if let LocalEvent::Opened(_) = e {
                opened += 1;
            }
        },
        async |s: &mut acpx_runtime::Session| s.set_mode("plan").await,
    )
    .await
    .unwrap();
    assert_eq!(opened, 1);
    assert!(done.resumed, "the loading agent loads its session");
    assert_eq!(done.record.acpx.current_mode_id.as_deref(), Some("plan"));
    // The run lock is released when the control returns; a child that another test of this
    // process is forking at that moment holds a copy of the lock's file descriptor until it
    // execs (close-on-exec), so the release can show a moment later.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while runs::probe(&home, &id).unwrap() != Probe::Idle {
        assert!(std::time::Instant::now() < deadline, "the run stays held");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // Another holder has the run: the control waits, and a press gives up.
    let (_held, _cancels) = runs::acquire(&home, &id, "held", |_| {}).await.unwrap();
    let (press, interrupts) = watch::channel(0);
    let mut waited = false;
    let result = local::control(
        &rt,
        &home,
        &id,
        None,
        interrupts,
        |e| {
            if let LocalEvent::Waiting(info) = e {
                assert_eq!(info.map(|i| i.request_id.as_str()), Some("held"));
                waited = true;
                press.send_modify(|n| *n += 1);
            }
        },
        async |_: &mut acpx_runtime::Session| -> acpx_runtime::RuntimeResult<()> {
            panic!("the control must not run while another holds the session")
        },
    )
    .await;
    assert!(matches!(result, Err(LocalError::Interrupted)), "{result:?}");
    assert!(waited);
}

async fn fork(env: Env) {
    let home = env.dir.path().join("home");
    let rt = env.runtime(RuntimeOptions::default());
    for (flags, method) in [("--fork", "session/fork"), ("", "copy")] {
        let agent = env.loading_agent(flags);
        let id = stored_session(&env, &agent).await;
        let (_press, interrupts) = watch::channel(0);
        let mut by_copy = false;
        let forked = local::fork(
            &rt,
            &home,
            &id,
            Some("child".into()),
            None,
            interrupts,
            |e| by_copy |= matches!(e, LocalEvent::ForkByCopy),
        )
        .await
        .unwrap();
        assert_eq!(by_copy, method == "copy");
        assert_eq!(forked.parent.acpx_record_id, id);
        assert_ne!(forked.child.acpx_record_id, id);
        assert_eq!(forked.child.name.as_deref(), Some("child"));
        assert_eq!(
            forked.child.acpx.extra[FORKED_FROM_KEY]["method"], method,
            "{flags:?}"
        );
        let stored = env.stored(&forked.child.acpx_record_id).await;
        assert_eq!(
            stored.acpx.extra[FORKED_FROM_KEY]["acpxRecordId"],
            id.as_str()
        );
    }
}

async fn exec(env: Env) {
    let rt = Runtime::new(
        std::sync::Arc::new(acpx_model::MemoryStore::new()),
        RuntimeOptions::default(),
    );
    let (_press, interrupts) = watch::channel(0);
    let mut events = Vec::new();
    let turn = local::exec(
        &rt,
        env.spec(agent("")),
        text_prompt("hi there"),
        interrupts,
        |e| events.push(matches!(e, LocalEvent::TurnOver)),
    )
    .await
    .unwrap();
    assert_eq!(turn.outcome.outcome.as_str(), "completed");
    assert!(
        turn.outcome.agent_text.is_empty(),
        "the reply is read from the record"
    );
    assert!(turn
        .agent_text()
        .collect::<std::io::Result<String>>()
        .unwrap()
        .contains("You said: hi there"));
    assert_eq!(events, [false, true], "Opened, then TurnOver");
    // Nothing went to the env's store.
    let listed = env.store.list(&Default::default()).await.unwrap();
    assert!(listed.sessions.is_empty());
}

/// One turn of `prompt` through `local::prompt` on a new stored session of the scripted agent.
async fn local_turn(env: &Env, prompt: &str) -> (RecordId, local::Turn) {
    let id = stored_session(env, &agent("")).await;
    let rt = env.runtime(RuntimeOptions::default());
    let home = env.dir.path().join("home");
    let (_presses, interrupts) = watch::channel(0);
    let turn = local::prompt(
        &rt,
        &home,
        &id,
        text_prompt(prompt),
        Some(Duration::from_secs(60)),
        interrupts,
        |_| {},
    )
    .await
    .unwrap();
    assert_eq!(turn.outcome.outcome.as_str(), "completed");
    (id, turn)
}

/// A reply past `text_spill::SPILL_AT` (40,000 8-byte chunks: 320,000 bytes) leaves memory
/// while it streams, and comes back whole: in the turn's reply, in the stored snapshot and in
/// a transcript.
async fn long_reply(env: Env) {
    let (id, turn) = local_turn(&env, "stream 40000").await;
    let reply = turn
        .agent_text()
        .collect::<std::io::Result<String>>()
        .unwrap();
    assert!(
        reply.len() > acpx_runtime::text_spill::SPILL_AT,
        "{}",
        reply.len()
    );
    let live = agent_texts(&turn.record, reply_text);
    assert!(
        live.iter().any(|t| t.is_spilled()),
        "the live reply is in a spill file"
    );
    let stored = env.stored(&id).await;
    let stored_texts = agent_texts(&stored, reply_text);
    assert_eq!(stored_texts, live);
    // A store that serializes gives the text back in memory (the memory store keeps a copy
    // of the record, which shares the spill file).
    if !matches!(env.backend, Backend::Memory) {
        assert!(stored_texts.iter().all(|t| !t.is_spilled()));
    }
    assert_eq!(
        stored_texts
            .iter()
            .map(|t| t.to_text().unwrap().into_owned())
            .collect::<String>(),
        reply
    );
    assert!(acpx_printer::transcript::markdown(&turn.record).contains(&reply[reply.len() - 100..]));
}

/// Reasoning past `text_spill::SPILL_AT` (40,000 8-byte thought chunks) leaves memory while
/// it streams, as a long reply does, and is stored whole.
async fn long_reasoning(env: Env) {
    let (id, turn) = local_turn(&env, "think 40000").await;
    let live = agent_texts(&turn.record, reasoning_text);
    assert_eq!(live.len(), 1);
    assert!(
        live[0].is_spilled(),
        "the live reasoning is in a spill file"
    );
    let expected: String = (0..40_000).map(|i| format!("{i:07} ")).collect();
    assert_eq!(live[0].to_text().unwrap(), expected);
    let stored = env.stored(&id).await;
    assert_eq!(agent_texts(&stored, reasoning_text), live);
    let markdown = acpx_printer::transcript::markdown(&turn.record);
    assert!(markdown.contains(expected.trim_end()));
}
