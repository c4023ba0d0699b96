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
//! Those one-process flows, Ctrl-C and remote cancel included, are
//! `acpx_runtime::ops::local`'s; the commands here build their inputs and render their events.

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
//! counting Ctrl-Cs and telling the user what opening a session changed.

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

use std::time::Duration;

use acpx_runtime::ops::local::{LocalError, LocalEvent};
use acpx_runtime::{
    Attachment, FailedAttempt, Notice, Observer, PermissionMode, RuntimeError, RuntimeOptions,
    Session,
};
use serde_json::json;

use crate::config::PermissionMode as CliPermission;
use crate::context::Ctx;
use crate::error::{CliError, ErrorKind};
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
        permission_rules: ctx.permission_rules.clone(),
        prompt_retries: ctx.prompt_retries,
        fs: !ctx.no_fs,
        terminal: !ctx.no_terminal,
        auth_policy: ctx.auth_policy,
        auth_credentials: ctx.config.auth.clone(),
        ..RuntimeOptions::default()
    };
    if let Some(t) = ctx.config.request_timeout {
        o.request_timeout = Duration::from_secs_f64(t);
    }
    if let Some(t) = ctx.timeout {
        o.request_timeout = o.request_timeout.min(t.max(Duration::from_secs(1)));
    }
    o
}

/// Said with `AGENT_TIMEOUT` for a request other than the prompt.
const REQUEST_TIMEOUT_HINT: &str = "ACP requests other than the prompt wait 120 s by default; set `requestTimeout` (seconds) in config.json to wait longer";
/// Said with `MODE_NOT_RESTORED`, on either path.
const MODE_NOT_RESTORED_HINT: &str = "the prompt was not sent; check the mode with the agent, or choose another with `acpx set-mode`";
/// Said with `SESSION_RESUME_REQUIRED`, on either path.
const RESUME_REQUIRED_HINT: &str = "start a new session with `acpx sessions new`, or allow a new ACP session with --resume-policy allow-new";

/// Said with `AUTH_REQUIRED`.
const AUTH_REQUIRED_HINT: &str = "run `acpx config show` to locate the active config, then add the credential under `auth`, or set the ACPX_AUTH_ variable named above, and retry; --auth-policy skip goes on without authenticating";

/// A runtime error as the user sees it.
fn runtime_error(ctx: &Ctx, e: RuntimeError) -> CliError {
    match e {
        RuntimeError::Store(s) => s.into(),
        RuntimeError::Spawn { .. } => CliError::runtime(e.to_string()).with_hint(format!(
            "the agent command is `{}`; `acpx config show` lists the agents, and --agent \"<command>\" runs any ACP agent",
            ctx.agent.command
        ))
        .with_detail("AGENT_SPAWN_FAILED"),
        RuntimeError::Timeout { .. } => CliError::new(ErrorKind::Timeout, e.to_string())
            .with_detail("AGENT_TIMEOUT")
            .with_hint(REQUEST_TIMEOUT_HINT),
        RuntimeError::ModeNotRestored { .. } => CliError::runtime(e.to_string())
            .with_detail("MODE_NOT_RESTORED")
            .with_hint(MODE_NOT_RESTORED_HINT),
        RuntimeError::ResumeRequired { .. } => CliError::runtime(e.to_string())
            .with_detail("SESSION_RESUME_REQUIRED")
            .with_hint(RESUME_REQUIRED_HINT),
        RuntimeError::AuthRequired { .. } => CliError::runtime(e.to_string())
            .with_detail("AUTH_REQUIRED")
            .with_hint(AUTH_REQUIRED_HINT),
        RuntimeError::Agent { ref error, .. } if error.is_not_found() => {
            CliError::no_session(e.to_string())
                .with_hint("the agent no longer knows this session; start a new one with `acpx sessions new`")
        }
        other => CliError::runtime(other.to_string()),
    }
}

/// Set once SIGINT or SIGTERM arrived during a command: the turn was cancelled through ACP and
/// recorded, and the process then exits 130 (see [`was_interrupted`]).
static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn mark_interrupted() {
    INTERRUPTED.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// Whether SIGINT or SIGTERM interrupted this invocation (its exit status is then 130).
pub fn was_interrupted() -> bool {
    INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst)
}

/// Resolves on the next SIGINT or SIGTERM (both cancel a turn the same way); `None` when
/// a stream of them ended. A signal that cannot be watched never arrives.
pub(super) struct Interrupts {
    int: Option<tokio::signal::unix::Signal>,
    term: Option<tokio::signal::unix::Signal>,
}

impl Interrupts {
    /// Installs both handlers now, so no signal kills the process from here on.
    pub(super) fn new() -> Self {
        use tokio::signal::unix::{signal, SignalKind};
        Interrupts {
            int: signal(SignalKind::interrupt()).ok(),
            term: signal(SignalKind::terminate()).ok(),
        }
    }

    /// The next interrupt (marking the invocation as interrupted).
    pub(super) async fn recv(&mut self) -> Option<()> {
        async fn one(s: &mut Option<tokio::signal::unix::Signal>) -> Option<()> {
            match s {
                Some(s) => s.recv().await,
                None => std::future::pending().await,
            }
        }
        let r = tokio::select! {
            r = one(&mut self.int) => r,
            r = one(&mut self.term) => r,
        };
        if r.is_some() {
            mark_interrupted();
        }
        r
    }
}

/// Counts the Ctrl-Cs (and SIGTERMs) from now on, for [`acpx_runtime::ops::local`]: the first
/// one during a turn cancels it, the second stops the agent (see the module docs there). The
/// handlers are installed before this returns, so no signal kills the process meanwhile.
fn sigint_count() -> tokio::sync::watch::Receiver<u32> {
    let (tx, rx) = tokio::sync::watch::channel(0);
    let mut signals = Interrupts::new();
    tokio::spawn(async move {
        while signals.recv().await.is_some() {
            tx.send_modify(|n| *n += 1);
            if tx.is_closed() {
                return;
            }
        }
    });
    rx
}

/// What the user is told while a one-process command runs (`waiting` is the line shown while
/// another process's prompt holds the session).
fn report_local(ctx: &Ctx, event: LocalEvent<'_>, waiting: &str) {
    match event {
        LocalEvent::Waiting(_) => ctx.out.note(waiting),
        LocalEvent::Opened(session) => {
            report_notices(ctx, session.notices());
            report_attachment(ctx, session);
        }
        LocalEvent::CancellingTurn => {
            if ctx.out.is_text() {
                crate::output::stderr_line("\n[acpx] cancelling the turn… (Ctrl-C again to stop the agent)");
            }
        }
        LocalEvent::TurnOver => {}
        LocalEvent::ForkByCopy => ctx.out.warn(
            "the agent does not support session/fork: the new session has a copy of the conversation, \
             but the agent starts it without that context",
        ),
    }
}

/// What a prompt, a control or a fork waits with while another process's prompt holds the
/// session.
const WAITING_FOR_PROMPT: &str =
    "[acpx] a prompt is running in this session; waiting for it to finish";

/// A [`LocalError`] as the user sees it.
fn local_error(ctx: &Ctx, e: LocalError) -> CliError {
    match e {
        LocalError::Interrupted => interrupted_error(),
        LocalError::StartTimeout(t) => start_timeout_error(t),
        LocalError::Runtime(e) => runtime_error(ctx, e),
        LocalError::Runs(e) => e.into(),
        LocalError::Ops(e) => e.into(),
    }
}

/// The agent did not start within `--timeout`.
fn start_timeout_error(t: Duration) -> CliError {
    CliError::new(
        ErrorKind::Timeout,
        format!(
            "the agent did not start within {} s (--timeout)",
            t.as_secs_f64()
        ),
    )
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
                    crate::output::stderr_line(&format!(
                        "[acpx] the agent could not restore ACP session {previous_acp_session_id} ({}); continuing in new ACP session {acp_session_id}: the agent does not remember earlier turns",
                        describe_attempts(failed_attempts)
                    ));
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
