//! A request turned into what the owner does: answered at once (status, cancel, a refused
//! release), or a job queued for the worker in arrival order. Requests reach it from a
//! client's connection (`server`) or from another host through the store's task queue
//! (`remote_inbox`), so both are served alike.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use acpx_model::QueuePhase;
use serde_json::{json, Map};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::net::unix::OwnedReadHalf;
use tokio::sync::mpsc;

use acpx_runtime::output_backlog::OutputBacklog;
use acpx_runtime::session::NewSessionSpec;

use super::exit::OwnerExit;
use super::job::{Job, JobKind};
use super::mutex::locked;
use super::outgoing::ReplyTx;
use super::permissions::ForwardingPrompter;
use super::protocol::{line, Request, Response, WireError};
use super::shared::Shared;

/// Stops the task reading a client's permission answers when its connection ends, however it
/// ends (its questions are then refused: `permissions`).
pub(super) struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Whether the client has closed its side already (an owner resumed after a stop reads
/// requests whose clients gave up long ago). Polls once; consumes nothing.
async fn closed_now(reader: &mut BufReader<OwnedReadHalf>) -> bool {
    matches!(
        tokio::time::timeout(Duration::ZERO, reader.fill_buf()).await,
        Ok(Ok([])) | Ok(Err(_))
    )
}

/// Sets `gone` when the client closes its side of the connection (or it fails); a waiting
/// client writes nothing after its request.
async fn watch_client(mut reader: BufReader<OwnedReadHalf>, gone: Arc<AtomicBool>) {
    let mut buf = [0u8; 256];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
    gone.store(true, Ordering::SeqCst);
}

/// Serves `request`: its answer lines go to `reply`, a turn's events counted in `backlog`
/// until written. `answers` is the connection a client answers forwarded permission
/// questions on (an interactive prompt's only). Returns whether the client waits for the
/// task's end (`--no-wait` does not), and the reader of its answers, to keep while served.
pub(super) async fn dispatch(
    shared: &Arc<Shared>,
    request: Request,
    reply: ReplyTx,
    backlog: &Arc<OutputBacklog>,
    answers: Option<BufReader<OwnedReadHalf>>,
    arrival: u64,
) -> (bool, Option<AbortOnDrop>) {
    let mut reading_answers = None;
    let wait = match request {
        Request::Status => {
            let _ = reply.send(
                line(&Response::Status {
                    status: shared.status(),
                })
                .into(),
            );
            true
        }
        Request::Cancel => {
            let _ = reply.send(line(&cancel(shared).await).into());
            true
        }
        Request::Withdraw { request_id } => {
            let withdrawn = shared.withdraw(&request_id);
            let _ = reply.send(
                line(&Response::CancelResult {
                    cancelled: withdrawn,
                    withdrawn,
                    request_id: Some(request_id),
                })
                .into(),
            );
            true
        }
        Request::SubmitPrompt {
            request_id,
            prompt,
            options,
            wait,
        } => {
            // An interactive client answers the turn's permission questions on this
            // connection (see `permissions`); the others get the non-interactive rule.
            // A client that waits keeps its side open until the answer: its end before the
            // task starts withdraws the task (at most once: a user who gave up and retries
            // does not get the prompt twice).
            let mut client_gone = None;
            let mut answers = answers;
            let closed = match answers.as_mut() {
                Some(reader) => closed_now(reader).await,
                None => false,
            };
            let prompter = match answers {
                Some(reader) if options.interactive && wait => {
                    let (p, task) =
                        ForwardingPrompter::new(reply.clone(), reader, options.elicitations);
                    reading_answers = Some(AbortOnDrop(task));
                    client_gone = Some(p.client_gone());
                    Some(p)
                }
                Some(reader) if wait => {
                    let gone = Arc::new(AtomicBool::new(false));
                    reading_answers = Some(AbortOnDrop(tokio::spawn(watch_client(
                        reader,
                        gone.clone(),
                    ))));
                    client_gone = Some(gone);
                    None
                }
                _ => None,
            };
            if closed && wait {
                if let Some(gone) = &client_gone {
                    gone.store(true, Ordering::SeqCst);
                }
            }
            // Set when the waiting client goes away, or by `withdraw` and `cancel` (a client
            // on another host has no connection here to close): a prompt not started by then
            // is dropped (`Shared::take_withdrawn`).
            locked(&shared.queued).insert(request_id.clone(), client_gone.unwrap_or_default());
            let kind = JobKind::Prompt {
                prompt,
                options,
                prompter,
                backlog: backlog.clone(),
            };
            enqueue(shared, arrival, request_id, kind, reply).await;
            wait
        }
        Request::SetMode { mode_id, options } => {
            let kind = JobKind::SetMode(mode_id, options);
            enqueue(shared, arrival, control_id(), kind, reply).await;
            true
        }
        Request::SetConfigOption {
            config_id,
            value,
            options,
        } => {
            let kind = JobKind::SetConfigOption(config_id, value, options);
            enqueue(shared, arrival, control_id(), kind, reply).await;
            true
        }
        Request::SetModel { model_id, options } => {
            let kind = JobKind::SetModel(model_id, options);
            enqueue(shared, arrival, control_id(), kind, reply).await;
            true
        }
        Request::CreateSession {
            agent_command,
            cwd,
            name,
            options,
        } => {
            let spec = NewSessionSpec {
                agent_command,
                cwd: cwd.into(),
                name,
            };
            enqueue(
                shared,
                arrival,
                control_id(),
                JobKind::Create(spec, options),
                reply,
            )
            .await;
            true
        }
        Request::ForkSession {
            parent_record_id,
            name,
            options,
        } => {
            match acpx_model::RecordId::parse(&parent_record_id) {
                Ok(parent) => {
                    let kind = JobKind::Fork(parent, name, options);
                    enqueue(shared, arrival, control_id(), kind, reply).await;
                }
                Err(e) => {
                    let error = WireError {
                        code: "USAGE".into(),
                        detail_code: None,
                        message: format!("not a record id: {parent_record_id:?} ({e})"),
                        retryable: false,
                    };
                    let _ = reply.send(line(&Response::Error { error }).into());
                }
            }
            true
        }
        Request::ReleaseIdle => {
            // Refuse newcomers while deciding, so no task slips in between the check and
            // the release; a busy owner takes them again at once.
            let was_accepting = shared.accepting.swap(false, Ordering::SeqCst);
            match shared.busy() {
                Some(error) if was_accepting => {
                    shared.accepting.store(true, Ordering::SeqCst);
                    let _ = reply.send(line(&Response::Error { error }).into());
                }
                _ => {
                    let job = Job {
                        arrival,
                        request_id: control_id(),
                        kind: JobKind::Release,
                        reply,
                        accepted_logged: true,
                    };
                    if shared.jobs.send(job).is_err() {
                        shared.stop(OwnerExit::Released);
                    }
                }
            }
            true
        }
        Request::Close | Request::Release => {
            let (why, kind) = if request == Request::Close {
                (OwnerExit::Closed, JobKind::Close)
            } else {
                (OwnerExit::Released, JobKind::Release)
            };
            // A close refuses what comes next and cancels the turn in progress; a release
            // lets the queue ahead of it finish. Either bypasses the depth limit.
            if why == OwnerExit::Closed {
                shared.accepting.store(false, Ordering::SeqCst);
                if let Some((_, c)) = locked(&shared.current).as_ref() {
                    c.cancel();
                }
            }
            let job = Job {
                arrival,
                request_id: control_id(),
                kind,
                reply,
                accepted_logged: true,
            };
            if shared.jobs.send(job).is_err() {
                shared.stop(why);
            }
            true
        }
    };
    (wait, reading_answers)
}

fn control_id() -> String {
    format!("ctl-{}", uuid::Uuid::new_v4())
}

/// The error a withdrawn prompt's client gets: `INTERRUPTED` (exit 130), since the prompt
/// was never answered; retryable, since nothing of it ran.
pub(super) fn withdrawn_error() -> WireError {
    WireError {
        code: "INTERRUPTED".into(),
        detail_code: Some("QUEUE_TASK_WITHDRAWN".into()),
        message: "the prompt was withdrawn before its turn started (cancelled while its agent \
                  was starting, or its client left); nothing of it was sent to the agent"
            .into(),
        retryable: true,
    }
}

/// `cancel`: the turn running, else the prompt whose agent is starting or attaching
/// (withdrawn: never run, its client told at once). A task between the two (its turn
/// opening) is waited for, up to a second.
pub(super) async fn cancel(shared: &Shared) -> Response {
    for _ in 0..50 {
        let current = locked(&shared.current).clone();
        if let Some((request_id, handle)) = current {
            if handle.cancel() {
                return Response::CancelResult {
                    cancelled: true,
                    withdrawn: false,
                    request_id: Some(request_id),
                };
            }
        } else if let Some(withdrawn) = withdraw_starting(shared) {
            return withdrawn;
        } else if locked(&shared.task).is_none() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Response::CancelResult {
        cancelled: false,
        withdrawn: false,
        request_id: None,
    }
}

/// Withdraws the prompt whose agent is starting, if any, and tells its client.
fn withdraw_starting(shared: &Shared) -> Option<Response> {
    let (request_id, reply) = locked(&shared.starting).take()?;
    if !shared.withdraw(&request_id) {
        return None;
    }
    let _ = reply.send(
        line(&Response::Error {
            error: withdrawn_error(),
        })
        .into(),
    );
    Some(Response::CancelResult {
        cancelled: true,
        withdrawn: true,
        request_id: Some(request_id),
    })
}

pub(super) async fn enqueue(
    shared: &Arc<Shared>,
    arrival: u64,
    request_id: String,
    kind: JobKind,
    reply: ReplyTx,
) {
    let refuse = |detail: &str, message: String| {
        let _ = reply.send(
            line(&Response::Error {
                error: WireError::runtime(detail, message, true),
            })
            .into(),
        );
    };
    if !shared.accepting.load(Ordering::SeqCst) {
        return refuse(
            "QUEUE_OWNER_SHUTTING_DOWN",
            "the queue owner is shutting down".into(),
        );
    }
    let max = shared.config.queue_max_depth;
    if shared
        .depth
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |d| {
            (d < max).then_some(d + 1)
        })
        .is_err()
    {
        return refuse(
            "QUEUE_OWNER_OVERLOADED",
            format!("the session's queue is full ({max} tasks wait already); try again later"),
        );
    }
    // The lease says how many wait (another host's `status` reads it there).
    shared.activity_changed.notify_one();
    let depth = shared.depth.load(Ordering::SeqCst);
    let ahead = depth + usize::from(locked(&shared.current).is_some()) - 1;
    let _ = reply.send(
        line(&Response::Accepted {
            request_id: request_id.clone(),
            queue_depth: ahead,
        })
        .into(),
    );
    let log = locked(&shared.queue_log).clone();
    let mut accepted_logged = false;
    if let Some(log) = log {
        let mut extra = Map::new();
        extra.insert("task".into(), json!(kind.name()));
        extra.insert("queueDepth".into(), json!(ahead));
        accepted_logged = log
            .record(QueuePhase::Accepted, Some(&request_id), extra)
            .await
            .is_ok();
    }
    let job = Job {
        arrival,
        request_id,
        kind,
        reply,
        accepted_logged,
    };
    if let Err(mpsc::error::SendError(job)) = shared.jobs.send(job) {
        shared.depth.fetch_sub(1, Ordering::SeqCst);
        let _ = job.reply.send(
            line(&Response::Error {
                error: WireError::runtime(
                    "QUEUE_OWNER_SHUTTING_DOWN",
                    "the queue owner is shutting down",
                    true,
                ),
            })
            .into(),
        );
    }
}
