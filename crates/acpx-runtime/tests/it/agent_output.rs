//! Lines on an agent's stdout that are not JSON-RPC are counted and recorded as
//! `agent_output` lifecycle events, never passed to the ACP connection nor dropped silently.
use crate::common;

use std::time::Duration;

use acpx_runtime::{text_prompt, RuntimeOptions};
use common::*;

backend_tests! {
    stdout_lines_that_are_not_json_rpc_are_recorded => non_protocol_lines;
}

async fn non_protocol_lines(env: Env) {
    let rt = env.runtime(RuntimeOptions::default());
    // A wrapper that prints two lines of its own before the real agent takes over stdout.
    let command = format!(
        "sh -c \"echo 'wrapper: starting'; echo 'progress 50%'; exec '{}'\"",
        agent_bin()
    );
    let mut s = rt.open_new(env.spec(command)).await.unwrap();
    let id = s.id().clone();
    let out = s.prompt(text_prompt("hello")).await.unwrap();
    assert_eq!(out.outcome, "completed");
    let mut seen = Vec::new();
    for _ in 0..100 {
        seen = lifecycle(&env.events(&id).await, "agent_output")
            .into_iter()
            .cloned()
            .collect();
        if seen.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    s.shutdown().await.unwrap();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[0].payload["line"], "wrapper: starting");
    assert_eq!(seen[0].payload["count"], 1);
    assert_eq!(seen[1].payload["line"], "progress 50%");
    assert_eq!(seen[1].payload["count"], 2);
    assert_eq!(seen[1].payload["stream"], "stdout");
    assert_gap_free(&env.events(&id).await);
}
