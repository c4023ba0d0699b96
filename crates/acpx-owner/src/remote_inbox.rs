//! The owner's inbox for tasks other hosts queue in the store ([`acpx_model::RemoteTasks`],
//! a PostgreSQL store several hosts share; docs/format.md § Queue across hosts).
//!
//! Woken by the store (or once a second), the owner takes the session's queued tasks oldest
//! first and serves each request exactly as if it had come over its socket
//! ([`super::dispatch`]): a prompt joins the same FIFO queue as the local ones. Each answer
//! line (accepted, started, the result or error) is written back to the task for its
//! submitter; a turn's events are not, since the submitter reads them from the session's
//! log. The submitter's host cannot answer permission questions: its prompts run with the
//! non-interactive rule of their own options.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use acpx_model::{RemoteTask, Store, StoreError};
use serde_json::Value;
use tokio::sync::mpsc;

use acpx_runtime::output_backlog::OutputBacklog;

use super::dispatch::dispatch;
use super::exit::OwnerExit;
use super::outgoing::{Outgoing, CLIENT_BACKLOG_MAX};
use super::protocol::{Request, Response, WireError};
use super::shared::Shared;

/// How long the inbox waits for a wake-up before looking anyway.
const POLL: Duration = Duration::from_secs(1);

/// Takes and serves the session's queued tasks until the owner stops accepting.
pub(super) async fn serve(shared: Arc<Shared>, store: Arc<dyn Store>, generation: u64) {
    let id = shared.config.record_id.clone();
    let Some(tasks) = store.remote_tasks() else {
        return;
    };
    loop {
        if let Err(e) = tasks.wait_for_tasks(&id, POLL).await {
            tracing::warn!("cannot wait for queued tasks: {e}");
            tokio::time::sleep(POLL).await;
        }
        // An owner on its way out leaves queued tasks to the next one.
        if !shared.accepting.load(Ordering::SeqCst) {
            continue;
        }
        match tasks.claim_tasks(&id, generation).await {
            Ok(claimed) => {
                for task in claimed {
                    serve_task(&shared, &store, task).await;
                }
            }
            Err(e @ StoreError::Fenced { .. }) => {
                tracing::warn!("stopping: {e}");
                shared.stop(OwnerExit::TakenOver);
                return;
            }
            Err(e) => tracing::warn!("cannot take queued tasks: {e}"),
        }
    }
}

/// Serves one task: its request is dispatched here, in order; its answers are written back
/// by a task of their own.
async fn serve_task(shared: &Arc<Shared>, store: &Arc<dyn Store>, task: RemoteTask) {
    let (reply, replies) = mpsc::unbounded_channel::<Outgoing>();
    let backlog = OutputBacklog::new(CLIENT_BACKLOG_MAX);
    let request = match serde_json::from_value::<Request>(task.request.clone()) {
        Ok(r) => r,
        Err(e) => {
            let error = WireError::runtime(
                "QUEUE_REQUEST_INVALID",
                format!("bad request from host {}: {e}", task.from_host),
                false,
            );
            answer(store, task.task_id, &Response::Error { error }).await;
            return;
        }
    };
    let request = match request {
        // The submitter reads the reply from the result and the log: no parts, no questions.
        Request::SubmitPrompt {
            request_id,
            prompt,
            mut options,
            wait,
        } => {
            options.interactive = false;
            options.reply_in_parts = false;
            Request::SubmitPrompt {
                request_id,
                prompt,
                options,
                wait,
            }
        }
        other => other,
    };
    let arrival = shared.arrivals.number();
    let (wait, _no_answers) = dispatch(shared, request, reply, &backlog, None, arrival).await;
    tokio::spawn(forward(store.clone(), task.task_id, replies, backlog, wait));
}

/// Writes a task's answer lines back until its final one.
async fn forward(
    store: Arc<dyn Store>,
    task_id: u64,
    mut replies: mpsc::UnboundedReceiver<Outgoing>,
    backlog: Arc<OutputBacklog>,
    wait: bool,
) {
    while let Some(out) = replies.recv().await {
        match out {
            Outgoing::Event(l) => backlog.taken(l.len()),
            Outgoing::Line(l) => {
                let Ok(response) = serde_json::from_str::<Response>(l.trim_end()) else {
                    continue;
                };
                answer(&store, task_id, &response).await;
                let accepted_only = matches!(response, Response::Accepted { .. }) && !wait;
                if response.is_final() || accepted_only {
                    return;
                }
            }
            Outgoing::Reply { outcome, .. } => {
                // Not asked for (reply_in_parts is off); the outcome stands on its own.
                let response = Response::Result { outcome: *outcome };
                answer(&store, task_id, &response).await;
                return;
            }
        }
    }
}

async fn answer(store: &Arc<dyn Store>, task_id: u64, response: &Response) {
    let Some(tasks) = store.remote_tasks() else {
        return;
    };
    let line = serde_json::to_value(response).unwrap_or(Value::Null);
    if let Err(e) = tasks.answer_task(task_id, &line).await {
        tracing::warn!("cannot answer task {task_id}: {e}");
    }
}
