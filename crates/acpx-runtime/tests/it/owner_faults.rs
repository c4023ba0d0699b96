//! A queue owner whose store fails to append: the failure reaches the waiting client as an
//! error, and the owner serves the next task once the store works again (`docs/format.md`,
//! § Queue owner, "Faults"), on every backend, with the owner running in this process over a
//! store whose appends can be made to fail.
use crate::common;

use std::sync::Arc;

use acpx_model::testing::{FaultStore, Faults};
use acpx_model::{RecordId, Store};
use acpx_owner::client;
use acpx_owner::protocol::{Request, Response, TaskOptions};
use acpx_runtime::{text_prompt, Runtime, RuntimeOptions};
use common::*;

backend_tests! {
    a_failed_append_reaches_the_client_as_an_error => append_failure;
}

async fn prompt(home: &std::path::Path, id: &RecordId, text: &str) -> Response {
    let request = Request::SubmitPrompt {
        request_id: uuid::Uuid::new_v4().to_string(),
        prompt: text_prompt(text),
        options: TaskOptions {
            invocation: acpx_runtime::Invocation {
                permission_mode: acpx_runtime::PermissionMode::ApproveAll,
                ..Default::default()
            },
            ..TaskOptions::default()
        },
        wait: true,
    };
    client::send_if_running(home, id, &request)
        .await
        .unwrap()
        .expect("the owner runs")
        .last()
        .await
        .unwrap()
}

async fn append_failure(env: Env) {
    let flaky = Arc::new(FaultStore::new(env.store.clone(), Faults::new()));
    let rt = Runtime::new(flaky.clone() as Arc<dyn Store>, RuntimeOptions::default());
    let s = rt.open_new(env.spec(agent(""))).await.unwrap();
    let id = s.id().clone();
    s.shutdown().await.unwrap();
    let home = start_owner(&env, rt, &id).await;
    assert!(matches!(
        prompt(&home, &id, "echo one").await,
        Response::Result { .. }
    ));
    flaky.fault().fail_appends(true);
    match prompt(&home, &id, "echo two").await {
        Response::Error { error } => assert_eq!(error.code, "STORE", "{error:?}"),
        Response::Result { outcome } => {
            let store_error = outcome.error.as_ref().is_some_and(|e| e.code == "STORE");
            assert!(
                store_error || outcome.log_write_error.is_some(),
                "the failure is said: {outcome:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    flaky.fault().fail_appends(false);
    match prompt(&home, &id, "echo three").await {
        Response::Result { outcome } => assert_eq!(outcome.agent_text, "three"),
        other => panic!("the owner serves again: {other:?}"),
    }
    let answer = client::send_if_running(&home, &id, &Request::Close)
        .await
        .unwrap()
        .unwrap();
    answer.last().await.unwrap();
}
