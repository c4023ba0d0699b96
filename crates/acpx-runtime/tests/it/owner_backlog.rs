//! A client of the queue owner that reads its turn's events slower than the agent streams
//! them holds the turn up (the agent waits), instead of the owner queuing the rest of the
//! turn for it in memory (issue 15: nothing holds a whole turn; `acpx_runtime::output_backlog`).
//! The owner runs in this process (its own thread and runtime) with the scripted agent as a
//! real process; the client is the owner protocol's own client over the socket.
use crate::common;

use std::time::Duration;

use acpx_model::TurnState;
use acpx_owner::client;
use acpx_owner::protocol::{Request, Response, TaskOptions};
use acpx_runtime::{text_prompt, RuntimeOptions};
use common::*;

/// Chunks the turn streams: about 14 MB of event lines, far past what the owner may hold.
const CHUNKS: u64 = 40_000;

/// A prompt task; `no_events` as `--format quiet` sends it.
fn prompt(text: &str, no_events: bool) -> Request {
    Request::SubmitPrompt {
        request_id: uuid::Uuid::new_v4().to_string(),
        prompt: text_prompt(text),
        options: TaskOptions {
            invocation: acpx_runtime::Invocation {
                permission_mode: acpx_runtime::PermissionMode::ApproveAll,
                ..Default::default()
            },
            no_events,
            ..TaskOptions::default()
        },
        wait: true,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_does_not_read_holds_its_turn_up() {
    agent_bin();
    tokio::time::timeout(Duration::from_secs(240), behind(Env::new(Backend::Fs)))
        .await
        .expect("the test timed out (a hang)");
}

async fn behind(env: Env) {
    let rt = env.runtime(RuntimeOptions::default());
    let s = rt.open_new(env.spec(agent(""))).await.unwrap();
    let id = s.id().clone();
    s.shutdown().await.unwrap();
    let home = start_owner(&env, rt, &id).await;
    let before = env.store.event_log_state(&id).await.unwrap().last_seq;

    let request = prompt(&format!("stream {CHUNKS}"), false);
    let mut answer = client::send_if_running(&home, &id, &request)
        .await
        .unwrap()
        .expect("the owner runs");

    // The client reads nothing: once the owner holds its limit of lines and the socket's
    // buffer is full, the session records no more updates and the agent waits.
    let mut stalled_at = None;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let a = env.store.event_log_state(&id).await.unwrap().last_seq;
        tokio::time::sleep(Duration::from_millis(600)).await;
        let b = env.store.event_log_state(&id).await.unwrap().last_seq;
        // Past the owner's start (the agent's start and the attach pause the log too).
        if a == b && b > before + 500 {
            stalled_at = Some(b);
            break;
        }
    }
    let stalled_at = stalled_at.expect("the log never stopped growing");
    let recorded = stalled_at - before;
    // A few MB of lines at most are in flight (the owner's 1 MiB, the socket's buffers, the
    // update gate's 256): a small part of the turn.
    assert!(
        recorded < CHUNKS / 4,
        "{recorded} events recorded while the client read nothing"
    );

    // Reading on, the client gets every event of the turn, in order (from `prompt_started`
    // on, each seq follows the one before; the owner's queue events are not sent), then
    // the result.
    let mut last_seq: Option<u64> = None;
    let mut chunks = 0;
    let outcome = loop {
        match answer.next().await.unwrap() {
            Some(Response::Event { envelope }) => {
                if envelope.event_type == "prompt_started" {
                    last_seq = None;
                }
                if let Some(prev) = last_seq {
                    assert_eq!(envelope.seq, prev + 1, "events out of order or missing");
                }
                last_seq = Some(envelope.seq);
                chunks += u64::from(
                    envelope.event_type == "session_update"
                        && envelope.payload["update"]["sessionUpdate"] == "agent_message_chunk",
                );
            }
            Some(Response::Result { outcome }) => break outcome,
            Some(Response::Error { error }) => panic!("{error:?}"),
            Some(_) => {}
            None => panic!("no result"),
        }
    };
    assert_eq!(outcome.outcome, TurnState::Completed);
    assert_eq!(chunks, CHUNKS);
    let stored = env.events(&id).await;
    assert_gap_free(&stored);
    assert_eq!(
        updates(&stored, "agent_message_chunk").len() as u64,
        CHUNKS,
        "the log holds the whole turn"
    );

    // A client that goes away without reading releases the turn: the owner goes on to the
    // next task.
    let request = prompt(&format!("stream {CHUNKS}"), false);
    let gone = client::send_if_running(&home, &id, &request)
        .await
        .unwrap()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    drop(gone);
    let request = prompt("echo after", true);
    let after = client::send_if_running(&home, &id, &request)
        .await
        .unwrap()
        .unwrap();
    match after.last().await.unwrap() {
        Response::Result { outcome } => {
            assert_eq!(outcome.outcome, TurnState::Completed);
            assert_eq!(outcome.agent_text, "after");
        }
        other => panic!("{other:?}"),
    }
    let stored = env.events(&id).await;
    assert_eq!(
        updates(&stored, "agent_message_chunk").len() as u64,
        2 * CHUNKS + 1,
        "the abandoned turn is recorded whole"
    );

    let answer = client::send_if_running(&home, &id, &Request::Close)
        .await
        .unwrap()
        .unwrap();
    answer.last().await.unwrap();
}
