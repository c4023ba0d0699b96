//! Permission questions of a queue owner's turn forwarded to the client that submitted it,
//! driven through the owner's real socket protocol with a scripted prompter in place of a
//! terminal (`docs/format.md`, § Queue owner, "Permission questions"), on every backend.
use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use acpx_model::RecordId;
use acpx_owner::client::{self, Answer};
use acpx_owner::protocol::{Request, Response, TaskOptions};
use acpx_runtime::{
    text_prompt, PermissionMode, PermissionPrompter, PermissionQuestion, RuntimeOptions,
    TurnOutcome,
};
use common::*;

backend_tests! {
    a_forwarded_question_is_answered_by_the_client => answered;
    a_client_gone_while_asked_gets_the_non_interactive_answer => client_gone;
}

/// Answers every question the same way and counts them.
struct Scripted {
    answer: bool,
    asked: AtomicUsize,
}

#[async_trait::async_trait]
impl PermissionPrompter for Scripted {
    async fn ask(&self, q: &PermissionQuestion) -> bool {
        assert_eq!(q.kind.as_deref(), Some("execute"), "{q:?}");
        self.asked.fetch_add(1, Ordering::SeqCst);
        self.answer
    }
}

/// A session and its owner, running in this process.
async fn owner(env: &Env) -> (std::path::PathBuf, RecordId) {
    let options = RuntimeOptions {
        permission_mode: PermissionMode::ApproveReads,
        ..RuntimeOptions::default()
    };
    let rt = env.runtime(options);
    let s = rt.open_new(env.spec(agent(""))).await.unwrap();
    let id = s.id().clone();
    s.shutdown().await.unwrap();
    let home = start_owner(env, rt, &id).await;
    (home, id)
}

async fn submit(home: &std::path::Path, id: &RecordId, interactive: bool) -> Answer {
    let request = Request::SubmitPrompt {
        request_id: uuid::Uuid::new_v4().to_string(),
        prompt: text_prompt("permission execute run it"),
        options: TaskOptions {
            invocation: acpx_runtime::Invocation {
                permission_mode: acpx_runtime::PermissionMode::ApproveReads,
                ..Default::default()
            },
            interactive,
            ..TaskOptions::default()
        },
        wait: true,
    };
    client::send_if_running(home, id, &request)
        .await
        .unwrap()
        .expect("the owner runs")
}

/// Plays one turn, answering with `prompter`; returns its outcome.
async fn play(mut answer: Answer, prompter: &Scripted) -> TurnOutcome {
    loop {
        match answer.next().await.unwrap() {
            Some(Response::PermissionRequest { id, question }) => {
                answer.answer_with(id, question, prompter).await.unwrap();
            }
            Some(Response::Result { outcome }) => return outcome.into(),
            Some(Response::Error { error }) => panic!("{error:?}"),
            Some(_) => {}
            None => panic!("no result"),
        }
    }
}

async fn close(home: &std::path::Path, id: &RecordId) {
    let answer = client::send_if_running(home, id, &Request::Close)
        .await
        .unwrap()
        .unwrap();
    answer.last().await.unwrap();
}

async fn answered(env: Env) {
    let (home, id) = owner(&env).await;
    let yes = Scripted {
        answer: true,
        asked: AtomicUsize::new(0),
    };
    let o = play(submit(&home, &id, true).await, &yes).await;
    assert_eq!(yes.asked.load(Ordering::SeqCst), 1);
    assert_eq!(
        (o.permission_stats.requested, o.permission_stats.approved),
        (1, 1)
    );
    let no = Scripted {
        answer: false,
        asked: AtomicUsize::new(0),
    };
    let o = play(submit(&home, &id, true).await, &no).await;
    assert_eq!(no.asked.load(Ordering::SeqCst), 1);
    assert_eq!(
        (o.permission_stats.requested, o.permission_stats.denied),
        (1, 1)
    );
    // A client that cannot ask is never asked: the non-interactive rule (deny) decides.
    let o = play(submit(&home, &id, false).await, &yes).await;
    assert_eq!(yes.asked.load(Ordering::SeqCst), 1);
    assert_eq!(o.permission_stats.denied, 1);
    close(&home, &id).await;
}

async fn client_gone(env: Env) {
    let (home, id) = owner(&env).await;
    let mut answer = submit(&home, &id, true).await;
    loop {
        match answer.next().await.unwrap() {
            Some(Response::PermissionRequest { .. }) => break,
            Some(Response::Result { .. }) | None => panic!("the question never came"),
            Some(_) => {}
        }
    }
    // The client goes away with the question open.
    drop(answer);
    // The turn ends with the question refused, and is recorded.
    let mut finished = None;
    for _ in 0..400 {
        let ev = env.events(&id).await;
        if let Some(e) = ev
            .iter()
            .rev()
            .find(|e| e.event_type == "queue_event" && e.payload["phase"] == "done")
        {
            finished = Some((e.clone(), ev));
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let (done, ev) = finished.expect("the turn was recorded");
    assert_eq!(done.payload["outcome"], "completed", "{done:?}");
    let (requested, asked) = permission_ops(&ev);
    assert_eq!((requested.len(), asked.len()), (1, 1));
    assert_eq!(asked[0].payload["decision"], "denied", "{:?}", asked[0]);
    close(&home, &id).await;
}
