//! Commands that run the agent: `prompt`, `exec`, `cancel`, `set-mode`, `set`, `status`,
//! `sessions new`, `sessions ensure` and `sessions fork`.
//!
//! `prompt`, `set-mode`, `set`, `cancel` and `status` of a stored session go to the session's
//! queue owner ([`owned`], `acpx_runtime::owner`): one detached process that keeps the agent
//! warm and runs the session's tasks one at a time, in order. With `--no-owner` (config
//! `noOwner`) each invocation starts the agent itself, reattaches to the session (the runtime
//! resumes or loads it, or falls back to a fresh ACP session under the same record id), does
//! its work and stops the agent; its prompts hold the session's run lock ([`acpx_runtime::runs`])
//! for their whole turn, and a second one waits for it. `exec` always runs in one process.

//!
//! | module | commands |
//! |---|---|
//! | [`prompt`](mod@prompt) | `prompt`, `exec` |
//! | [`controls`] | `cancel`, `set-mode`, `set` |
//! | [`status`](mod@status) | `status` |
//! | [`lifecycle`] | `sessions new` (and `--resume-session`), `sessions ensure` (the flows are `acpx_runtime::ops::ensure`'s) |
//! | [`fork`](mod@fork) | `sessions fork` |
//! | [`owned`] | the queue owner's client side, and the hidden `__owner` command |
//!
//! This module holds what they share: the runtime's options, the mapping of runtime errors,
//! Ctrl-C handling and opening a stored session.

mod controls;
mod fork;
mod lifecycle;
mod owned;
mod prompt;
mod status;

pub use controls::{cancel, set_mode, set_option};
pub use fork::fork;
pub use lifecycle::{ensure, new_session};
pub use owned::{
    close as close_through_owner, owner_main, probe_run, release_all_owners, release_owner_of,
};
pub use prompt::{exec, prompt};
pub use status::status;

use std::sync::Arc;
use std::time::Duration;

use acpx_model::{RecordId, SessionRecord};
use acpx_runtime::{
    Attachment, CancelHandle, FailedAttempt, Notice, Observer, PermissionMode, Runtime,
    RuntimeError, RuntimeOptions, Session,
};
use serde_json::json;
use tokio::sync::Notify;

use crate::config::PermissionMode as CliPermission;
use crate::context::Ctx;
use crate::error::{CliError, CliResult, ErrorKind};
use crate::live::TtyPrompter;

/// The runtime's options for this invocation.
fn runtime_options(ctx: &Ctx, observer: Option<Observer>) -> RuntimeOptions {
    let permission_mode = match ctx.permission {
        CliPermission::ApproveAll => PermissionMode::ApproveAll,
        CliPermission::ApproveReads => PermissionMode::ApproveReads,
        CliPermission::DenyAll => PermissionMode::DenyAll,
    };
    let prompter = if permission_mode == PermissionMode::ApproveReads {
        TtyPrompter::available()
    } else {
        None
    };
    let mut o = RuntimeOptions {
        permission_mode,
        prompter,
        prompt_timeout: ctx.timeout,
        observer,
        resume_policy: ctx.resume_policy,
        non_interactive: ctx.non_interactive,
        mcp_servers: ctx.mcp_servers.clone(),
        default_mcp_servers: ctx.config.mcp_servers.clone(),
        model: ctx.model.clone(),
        ..RuntimeOptions::default()
    };
    if let Some(t) = ctx.timeout {
        o.request_timeout = o.request_timeout.min(t.max(Duration::from_secs(1)));
    }
    o
}

/// Said with `MODE_NOT_RESTORED`, on either path.
const MODE_NOT_RESTORED_HINT: &str = "the prompt was not sent; check the mode with the agent, or choose another with `acpx set-mode`";
/// Said with `SESSION_RESUME_REQUIRED`, on either path.
const RESUME_REQUIRED_HINT: &str = "start a new session with `acpx sessions new`, or allow a new ACP session with --resume-policy allow-new";

/// A runtime error as the user sees it.
fn runtime_error(ctx: &Ctx, e: RuntimeError) -> CliError {
    match e {
        RuntimeError::Store(s) => s.into(),
        RuntimeError::Spawn { .. } => CliError::runtime(e.to_string()).with_hint(format!(
            "the agent command is `{}`; `acpx config show` lists the agents, and --agent \"<command>\" runs any ACP agent",
            ctx.agent.command
        ))
        .with_detail("AGENT_SPAWN_FAILED"),
        RuntimeError::Timeout { .. } => {
            CliError::new(ErrorKind::Timeout, e.to_string()).with_detail("AGENT_TIMEOUT")
        }
        RuntimeError::ModeNotRestored { .. } => CliError::runtime(e.to_string())
            .with_detail("MODE_NOT_RESTORED")
            .with_hint(MODE_NOT_RESTORED_HINT),
        RuntimeError::ResumeRequired { .. } => CliError::runtime(e.to_string())
            .with_detail("SESSION_RESUME_REQUIRED")
            .with_hint(RESUME_REQUIRED_HINT),
        RuntimeError::Agent { ref error, .. } if error.is_not_found() => {
            CliError::no_session(e.to_string())
                .with_hint("the agent no longer knows this session; start a new one with `acpx sessions new`")
        }
        other => CliError::runtime(other.to_string()),
    }
}

/// Watches Ctrl-C and remote cancel requests while a command runs.
///
/// The first Ctrl-C (or a `cancel` from another terminal) cancels the turn, which then ends
/// with stopReason `cancelled`; a cancel that arrives before the turn has started is applied
/// as soon as it starts. A second Ctrl-C, or a first one while no turn runs, interrupts.
struct Interrupts {
    interrupted: Arc<Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl Interrupts {
    fn start(
        cancel: Option<CancelHandle>,
        mut remote: Option<tokio::sync::mpsc::UnboundedReceiver<()>>,
        out: &crate::output::Out,
    ) -> Interrupts {
        let interrupted = Arc::new(Notify::new());
        let notify = interrupted.clone();
        let text = out.is_text();
        let task = tokio::spawn(async move {
            let mut ctrl_c = 0;
            let mut pending_cancel = false;
            loop {
                tokio::select! {
                    r = tokio::signal::ctrl_c() => {
                        if r.is_err() {
                            return;
                        }
                        ctrl_c += 1;
                        match &cancel {
                            // During a turn the first Ctrl-C cancels it (as soon as it runs, if
                            // it is just starting).
                            Some(c) if ctrl_c == 1 => {
                                if !c.cancel() {
                                    pending_cancel = true;
                                }
                                if text {
                                    eprintln!("\n[acpx] cancelling the turn… (Ctrl-C again to stop the agent)");
                                }
                            }
                            _ => {
                                notify.notify_one();
                                return;
                            }
                        }
                    }
                    m = async { match remote.as_mut() { Some(r) => r.recv().await, None => std::future::pending().await } } => {
                        match m {
                            Some(()) => {
                                if let Some(c) = &cancel {
                                    if !c.cancel() {
                                        pending_cancel = true;
                                    }
                                }
                            }
                            None => remote = None,
                        }
                    }
                    _ = tokio::time::sleep(Duration::from_millis(20)), if pending_cancel => {
                        if cancel.as_ref().is_some_and(CancelHandle::cancel) {
                            pending_cancel = false;
                        }
                    }
                }
            }
        });
        Interrupts { interrupted, task }
    }
}

impl Drop for Interrupts {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Stops the agent after an interrupt: the terminals it started are killed, the agent gets
/// its short stop sequence and its exit is recorded. Bounded, so a second Ctrl-C never hangs;
/// past the bound the session is dropped, which kills the agent's process group at once.
async fn stop_now(session: Session) {
    let _ = tokio::time::timeout(Duration::from_secs(4), session.shutdown()).await;
}

fn interrupted_error() -> CliError {
    CliError::new(
        ErrorKind::Interrupted,
        "interrupted: the agent was stopped; what it did so far is in the event log",
    )
    .with_hint("the next prompt records the unfinished turn as interrupted")
}

/// Resolves on the first Ctrl-C: what interrupts starting an agent when no turn runs yet
/// (never, if the signal cannot be watched).
async fn ctrl_c() {
    if tokio::signal::ctrl_c().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Runs `fut` unless interrupted; `None` when interrupted.
async fn or_interrupt<T>(fut: impl std::future::Future<Output = T>, i: &Interrupts) -> Option<T> {
    tokio::select! {
        r = fut => Some(r),
        _ = i.interrupted.notified() => None,
    }
}

/// Opens a stored session, with the interrupt and timeout rules.
async fn open_existing(
    ctx: &Ctx,
    runtime: &Runtime,
    id: &RecordId,
    interrupts: &Interrupts,
) -> CliResult<Session> {
    let open = runtime.open_existing(id);
    let opened = match ctx.timeout {
        Some(t) => match or_interrupt(tokio::time::timeout(t, open), interrupts).await {
            None => return Err(interrupted_error()),
            Some(Err(_)) => {
                return Err(CliError::new(
                    ErrorKind::Timeout,
                    format!(
                        "the agent did not start within {} s (--timeout)",
                        t.as_secs_f64()
                    ),
                ))
            }
            Some(Ok(r)) => r,
        },
        None => match or_interrupt(open, interrupts).await {
            None => return Err(interrupted_error()),
            Some(r) => r,
        },
    };
    let session = opened.map_err(|e| runtime_error(ctx, e))?;
    report_notices(ctx, session.notices());
    report_attachment(ctx, &session);
    Ok(session)
}

/// Says (with `--verbose`) how an opened session got its ACP session, and whether an
/// unfinished turn was recorded as interrupted.
fn report_attachment(ctx: &Ctx, session: &Session) {
    match session.attachment() {
        Attachment::Fallback {
            reason,
            previous_acp_session_id,
        } => ctx.out.verbose(&format!(
            "the agent could not reattach ACP session {previous_acp_session_id} ({reason}); started a fresh one under the same record"
        )),
        Attachment::Reattached { method, .. } => {
            ctx.out.verbose(&format!("reattached with {method}"))
        }
        Attachment::Created => {}
    }
    if let Some(t) = &session.recovery().interrupted_turn {
        ctx.out
            .verbose(&format!("recorded the unfinished turn {t} as interrupted"));
    }
}

fn describe_attempts(attempts: &[FailedAttempt]) -> String {
    if attempts.is_empty() {
        return "the agent supports neither session/resume nor session/load".into();
    }
    attempts
        .iter()
        .map(|a| format!("{}: {}", a.method, a.reason.replace('_', " ")))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Tells the user what opening a session changed: a fallback to a new ACP session (one
/// stderr line in text mode, a `session_fallback` JSON line on stdout in JSON mode), choices
/// that could not be set again, MCP servers the agent cannot take (warnings).
fn report_notices(ctx: &Ctx, notices: &[Notice]) {
    for notice in notices {
        match notice {
            Notice::Fallback {
                previous_acp_session_id,
                acp_session_id,
                failed_attempts,
            } => {
                if ctx.out.is_json() {
                    // A prompt streams the `session_fallback` lifecycle event itself; a
                    // command's action object carries it as `sessionFallback`.
                    ctx.out.attach_to_next_action(
                        "sessionFallback",
                        json!({
                            "previousAcpSessionId": previous_acp_session_id,
                            "acpxSessionId": acp_session_id,
                            "failedAttempts": failed_attempts.iter().map(FailedAttempt::to_json).collect::<Vec<_>>(),
                        }),
                    );
                } else if ctx.out.is_text() {
                    eprintln!(
                        "[acpx] the agent could not restore ACP session {previous_acp_session_id} ({}); continuing in new ACP session {acp_session_id}: the agent does not remember earlier turns",
                        describe_attempts(failed_attempts)
                    );
                }
            }
            Notice::ChoiceNotRestored {
                kind,
                id,
                value,
                error,
            } => {
                let what = if kind == "model" {
                    format!("the model {value}")
                } else {
                    format!("config option {id} = {value}")
                };
                ctx.out.warn(&format!(
                    "could not set {what} again ({error}); the agent uses its own value"
                ));
            }
            Notice::McpServersLeftOut(names) => ctx.out.warn(&format!(
                "the agent does not take these MCP servers' transport, so they were not sent: {}",
                names.join(", ")
            )),
        }
    }
}

/// Shuts a session down, or stops it at once after an interrupt.
async fn stop_or_shutdown(
    session: Session,
    interrupted: bool,
) -> Result<SessionRecord, RuntimeError> {
    if interrupted {
        stop_now(session).await;
        Err(RuntimeError::InvalidInput("interrupted".into()))
    } else {
        session.shutdown().await
    }
}
