//! The reply through the queue owner's socket protocol (`docs/format.md`, § Queue owner): a
//! task that sets `replyInParts` gets `reply_part` lines, then a `result` with an empty
//! `agentText`; a task without it (an older client) still gets `agentText` whole; a client
//! that goes away mid-reply costs the owner nothing. The owner runs in this process (its own
//! thread and runtime) with the scripted agent as a real process.
use crate::common;

use std::path::Path;
use std::time::Duration;

use acpx_model::RecordId;
use acpx_model::TurnState;
use acpx_owner::client::{self, Answer};
use acpx_owner::protocol::{Request, Response, TaskOptions, WireOutcome};
use acpx_runtime::{agent_text_after, text_prompt, RuntimeOptions};
use common::*;

async fn submit(home: &Path, id: &RecordId, text: &str, in_parts: bool) -> Answer {
    let request = Request::SubmitPrompt {
        request_id: uuid::Uuid::new_v4().to_string(),
        prompt: text_prompt(text),
        options: TaskOptions {
            invocation: acpx_runtime::Invocation {
                permission_mode: acpx_runtime::PermissionMode::ApproveAll,
                ..Default::default()
            },
            no_events: true,
            reply_in_parts: in_parts,
            ..TaskOptions::default()
        },
        wait: true,
    };
    client::send_if_running(home, id, &request)
        .await
        .unwrap()
        .expect("the owner runs")
}

/// The reply's parts and the result, checking that every part comes before it.
async fn collect(mut answer: Answer) -> (Vec<String>, WireOutcome) {
    let mut parts = Vec::new();
    loop {
        match answer.next().await.unwrap() {
            Some(Response::ReplyPart { text }) => parts.push(text),
            Some(Response::Result { outcome }) => {
                assert_eq!(answer.next().await.unwrap(), None, "the result is last");
                return (parts, outcome);
            }
            Some(Response::Error { error }) => panic!("{error:?}"),
            // Events recorded while the owner attaches still come (`noEvents` is the turn's).
            Some(_) => {}
            None => panic!("no result"),
        }
    }
}

/// What `stream N` replies: N chunks of 8 bytes.
fn streamed(n: usize) -> String {
    (0..n).map(|i| format!("{i:07} ")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_goes_in_parts_only_to_a_client_that_asks() {
    agent_bin();
    tokio::time::timeout(Duration::from_secs(240), in_parts(Env::new(Backend::Fs)))
        .await
        .expect("the test timed out (a hang)");
}

async fn in_parts(env: Env) {
    let rt = env.runtime(RuntimeOptions::default());
    let s = rt.open_new(env.spec(agent(""))).await.unwrap();
    let id = s.id().clone();
    s.shutdown().await.unwrap();
    let home = start_owner(&env, rt, &id).await;
    // 320,000 bytes: past the 256 KiB at which the reply moves to the spill file.
    let want = streamed(40_000);

    // An older client (no flag): the reply whole in `agentText`, no part.
    let (parts, o) = collect(submit(&home, &id, "stream 40000", false).await).await;
    assert!(parts.is_empty(), "{} parts", parts.len());
    assert_eq!(o.outcome, TurnState::Completed);
    assert!(o.agent_text == want, "{} bytes", o.agent_text.len());

    // A client that asks: the same reply in parts of at most 64 KiB, then an empty
    // `agentText` and no error.
    let (parts, o) = collect(submit(&home, &id, "stream 40000", true).await).await;
    assert!(parts.len() >= 5, "{} parts", parts.len());
    assert!(
        parts.iter().all(|p| !p.is_empty() && p.len() <= 64 << 10),
        "{:?}",
        parts.iter().map(String::len).collect::<Vec<_>>()
    );
    assert!(parts.concat() == want);
    assert_eq!(o.outcome, TurnState::Completed);
    assert_eq!((o.agent_text.as_str(), o.agent_text_error), ("", None));
    // The session stored that very reply.
    let stored = env.stored(&id).await;
    assert!(agent_text_after(&stored, &o.user_message_id).unwrap() == want);

    // A short reply is one part.
    let (parts, o) = collect(submit(&home, &id, "echo hi", true).await).await;
    assert_eq!(parts, ["hi"]);
    assert_eq!(o.agent_text, "");

    // A client that goes away after the first part, without reading the rest: the owner
    // drops the rest and serves the next task; the abandoned turn is recorded whole.
    let mut answer = submit(&home, &id, "stream 40000", true).await;
    loop {
        match answer.next().await.unwrap() {
            Some(Response::ReplyPart { .. }) => break,
            Some(Response::Result { .. }) | None => panic!("no part"),
            Some(_) => {}
        }
    }
    drop(answer);
    let (parts, _) = collect(submit(&home, &id, "echo after", true).await).await;
    assert_eq!(parts, ["after"]);
    let stored = env.stored(&id).await;
    let users: Vec<_> = stored
        .thread
        .messages
        .iter()
        .filter_map(|m| match m {
            acpx_model::Message::User(u) => Some(u.id.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(users.len(), 5);
    assert!(agent_text_after(&stored, &users[3]).unwrap() == want);

    let answer = client::send_if_running(&home, &id, &Request::Close)
        .await
        .unwrap()
        .unwrap();
    answer.last().await.unwrap();
}
