//! Commands that run the agent: `prompt`, `exec`, `cancel`, `set-mode`, `set`, `status`,
//! `sessions new`, `sessions ensure`, `sessions fork`, `sessions adopt` and `sessions list
//! --from-agent`.
//!
//! `prompt`, `set-mode`, `set`, `cancel` and `status` of a stored session go to the session's
//! queue owner ([`owned`], `acpx_owner`): one detached process that keeps the agent
//! warm and runs the session's tasks one at a time, in order. With `--no-owner` (config
//! `noOwner`) each invocation starts the agent itself, reattaches to the session (the runtime
//! resumes or loads it, or falls back to a fresh ACP session under the same record id), does
//! its work and stops the agent; its prompts hold the session's run lock ([`acpx_owner::runs`])
//! for their whole turn, and a second one waits for it. `exec` always runs in one process.
//! Those one-process flows, Ctrl-C and remote cancel included, are
//! `acpx_owner::local`'s; the commands here build their inputs and render their events.

//!
//! | module | commands |
//! |---|---|
//! | [`prompt`](mod@prompt) | `prompt`, `exec` |
//! | [`controls`] | `cancel`, `set-mode`, `set` |
//! | [`status`](mod@status) | `status` |
//! | [`lifecycle`] | `sessions new` (and `--resume-session`), `sessions ensure` (the flows are `acpx_owner::ensure`'s) |
//! | [`fork`](mod@fork) | `sessions fork` |
//! | [`adopt`](mod@adopt) | `sessions list --from-agent`, `sessions adopt` |
//! | [`owned`] | the queue owner's client side, and the hidden `__owner` command |
//!
//! This module holds what they share: the runtime's options, the mapping of runtime errors,
//! and telling the user what opening a session changed (the sentences are
//! `acpx_printer::notices`'s; Ctrl-C counting is `acpx_owner::interrupts`'s).

mod adopt;
mod controls;
mod fork;
mod lifecycle;
mod owned;
mod prompt;
mod status;

pub use adopt::{adopt, list_from_agent};
pub use controls::{cancel, set_mode, set_option};
pub use fork::fork;
pub use lifecycle::{ensure, new_session};
pub use owned::{owner_main, probe_run, release_all_owners, release_all_owners_of};
pub(crate) use prompt::read_prompt;
pub use prompt::{exec, prompt};
pub use status::status;

pub use acpx_owner::interrupts::was_interrupted;

use std::time::Duration;

use acpx_owner::drive::{DriveError, DriveEvent, Driver};
use acpx_owner::interrupts::{ctrl_c, interrupt_count as sigint_count};
use acpx_owner::local::{LocalError, LocalEvent};
use acpx_owner::submit::SubmitEvent;
use acpx_printer::failure::flows::{drive_failure, interrupted, local_failure};
use acpx_printer::failure::{self, Cause, Failure};
use acpx_printer::notices;
use acpx_runtime::{Notice, Observer, PermissionMode, RuntimeError, RuntimeOptions, Session};

use crate::context::Ctx;
use crate::error::{CliError, CliResult};
use crate::live::tty_prompter;

/// The runtime's options for this invocation: the configuration's request timeout and
/// credentials, a terminal to ask when the mode asks, then the command's own options
/// ([`acpx_app::settings::Settings::invocation`], applied as the queue owner applies them).
pub fn runtime_options(ctx: &Ctx, observer: Option<Observer>) -> RuntimeOptions {
    let prompter = if ctx.permission == PermissionMode::ApproveReads {
        tty_prompter()
    } else {
        None
    };
    let mut o = RuntimeOptions {
        prompter,
        observer,
        auth_credentials: ctx.config.auth.clone(),
        ..RuntimeOptions::default()
    };
    if let Some(t) = ctx.config.request_timeout {
        o.request_timeout = Duration::from_secs_f64(t);
    }
    ctx.invocation().apply(&mut o);
    o
}

/// A runtime error as the user sees it ([`failure::runtime_failure`]).
fn runtime_error(ctx: &Ctx, e: RuntimeError) -> CliError {
    failure::runtime_failure(e, &ctx.agent.command).into()
}

/// A failure as `acpx_printer::failure` explains it; one it leaves to the binary's own
/// mapping ([`Cause`]) keeps that mapping's kind and message, and the hint it was given.
impl From<Failure> for CliError {
    fn from(f: Failure) -> CliError {
        if let Some(cause) = f.cause {
            let err = match cause {
                Cause::Store(e) => CliError::from(e),
                Cause::Ops(e) => e.into(),
                Cause::Runs(e) => e.into(),
            };
            return match f.hint {
                Some(h) => err.with_hint(h),
                None => err,
            };
        }
        let mut err = CliError::new(f.kind, f.message);
        err.hint = f.hint;
        err.detail_code = f.detail_code;
        if let Some(a) = f.acp {
            err = err.with_data("acp", a);
        }
        if f.retryable {
            err = err.with_data("retryable", serde_json::json!(true));
        }
        if f.shown {
            err.reported()
        } else {
            err
        }
    }
}

/// What the user is told while a one-process command runs (a prompt's or not: `prompt`,
/// [`notices::local_said`]), beside what opening the session changed.
fn report_local(ctx: &Ctx, event: LocalEvent<'_>, prompt: bool) {
    match event {
        LocalEvent::Opened(session) => {
            report_notices(ctx, session.notices());
            report_attachment(ctx, session);
        }
        LocalEvent::CancellingTurn if ctx.out.is_text() => crate::output::stderr_line(
            "\n[acpx] cancelling the turn… (Ctrl-C again to stop the agent)",
        ),
        other => crate::commands::say(ctx, notices::local_said(&other, prompt)),
    }
}

/// This command's [`Driver`]: its options, the store, and `local` (the runtime's options of
/// the one-process path, built only on that path).
fn driver<'a>(
    ctx: &'a Ctx,
    store: std::sync::Arc<dyn acpx_model::Store>,
    local: Box<dyn Fn() -> RuntimeOptions + 'a>,
) -> CliResult<Driver<'a>> {
    Ok(Driver {
        store,
        authority: ctx.authority()?,
        task: owned::task_options(ctx),
        in_process: ctx.no_owner,
        spawn: Box::new(move |id| owned::spawn_owner(ctx, id)),
        local_options: local,
        interrupts: sigint_count,
    })
}

/// What the user is told while a prompt (`prompt`), a control or a fork is driven
/// ([`notices::drive_said`]), beside what opening the session changed.
fn report_drive(ctx: &Ctx, event: DriveEvent<'_>, prompt: bool) {
    match event {
        DriveEvent::Owner(SubmitEvent::Started(notices)) => report_notices(ctx, notices),
        DriveEvent::Local(event) => report_local(ctx, event, prompt),
        other => crate::commands::say(ctx, notices::drive_said(&other, prompt)),
    }
}

/// A [`DriveError`] as the user sees it.
fn drive_error(ctx: &Ctx, e: DriveError) -> CliError {
    drive_failure(e, &ctx.agent.command).into()
}

/// A [`LocalError`] as the user sees it.
fn local_error(ctx: &Ctx, e: LocalError) -> CliError {
    local_failure(e, &ctx.agent.command).into()
}

/// A second Ctrl-C stopped the agent of a one-process command.
pub(crate) fn interrupted_error() -> CliError {
    interrupted().into()
}

/// Says (with `--verbose`) how an opened session got its ACP session, and whether an
/// unfinished turn was recorded as interrupted.
fn report_attachment(ctx: &Ctx, session: &Session) {
    for line in notices::attachment_lines(session.attachment(), session.recovery()) {
        ctx.out.verbose(&line);
    }
}

/// Tells the user what opening a session changed ([`notices::said`]): a fallback to a new
/// ACP session (one stderr line in text mode; in JSON mode the next action object carries
/// it as `sessionFallback`, as a prompt streams the `session_fallback` lifecycle event
/// itself), choices that could not be set again, MCP servers the agent cannot take.
fn report_notices(ctx: &Ctx, notices: &[Notice]) {
    if ctx.out.is_json() {
        for v in notices.iter().filter_map(notices::fallback_json) {
            ctx.out.attach_to_next_action("sessionFallback", v);
        }
    }
    for said in notices::said(notices) {
        crate::commands::say(ctx, Some(said));
    }
}
