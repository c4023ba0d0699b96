//! `prompt` and `exec`: one turn with live output. Ctrl-C and remote cancel of a one-process
//! turn are [`acpx_owner::local`]'s.

use std::borrow::Cow;
use std::io::{IsTerminal, Read};
use std::sync::Arc;

use acpx_owner::drive::{DriveEvent, Prompted};
use acpx_owner::local::{self, LocalEvent};
use acpx_owner::submit::{SubmitEvent, Submitted};
use acpx_printer::failure::{turn_failed, PermissionSetup};
use acpx_printer::reports::controls as reports;
use acpx_runtime::ops::otlp_live::{self, OtlpTarget};
use acpx_runtime::prompt_input::{prompt_text, PromptInputError};
use acpx_runtime::{text_prompt, NewSessionSpec, PermissionMode, Runtime, TurnOutcome};

use super::{
    drive_error, driver, local_error, report_drive, report_local, runtime_options, sigint_count,
};
use crate::cli::{ExecArgs, PromptArgs};
use crate::config::Format;
use crate::context::Ctx;
use crate::error::{CliError, CliResult};
use crate::live::{live_output, tty_prompter, LiveOutput};
use crate::lookup::{find_in_scope, no_session_error};

/// The prompt text: `-f <file>`, `-f -` (stdin), the words, or stdin when neither is given
/// ([`prompt_text`]).
pub(crate) fn read_prompt(ctx: &Ctx, file: Option<&str>, words: &[String]) -> CliResult<String> {
    let stdin = || {
        if std::io::stdin().is_terminal() {
            ctx.out
                .note("reading the prompt from stdin; finish with Ctrl-D (or pass it as text)");
        }
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s).map(|_| s)
    };
    prompt_text(file, words, stdin).map_err(|e| {
        let empty = matches!(e, PromptInputError::Empty);
        let err = CliError::usage(e.to_string());
        match empty {
            true => err.with_hint("pass the prompt as text, with --file <path>, or on stdin"),
            false => err,
        }
    })
}

/// The exit status a finished turn maps to, and its error line
/// ([`acpx_printer::failure::turn_failed`]). `shown` says the turn's terminal event was
/// printed. (In the `acp` format the frames never say it: the error line always follows, as
/// in Node acpx.)
fn turn_result(ctx: &Ctx, outcome: &TurnOutcome, shown: bool) -> CliResult<()> {
    let permissions = PermissionSetup {
        rules: ctx.permission_rules.is_some(),
        mode: ctx.permission,
    };
    let Some(f) = turn_failed(outcome, permissions, shown, ctx.out.is_json()) else {
        return Ok(());
    };
    Err(f.into())
}

/// What the user is told while a one-process turn runs: the reply and the turn's events
/// stream through `live` (the runtime's observer); this closes its output when the turn is
/// over.
fn turn_event(ctx: &Ctx, live: &LiveOutput, event: LocalEvent<'_>) {
    match event {
        LocalEvent::TurnOver => live.finish(),
        LocalEvent::CancellingTurn => {
            live.interject("[acpx] cancelling the turn… (Ctrl-C again to stop the agent)")
        }
        other => report_local(ctx, other, true),
    }
}

/// After a turn: a warning if its events could not all be written, the reply in the quiet
/// format (in the pieces `reply` gives, after those the owner sent already), and the exit
/// status.
fn finish_turn<'a>(
    ctx: &Ctx,
    outcome: &TurnOutcome,
    reply: impl Iterator<Item = std::io::Result<Cow<'a, str>>>,
    live: &LiveOutput,
) -> CliResult<()> {
    if let Some(e) = &outcome.log_write_error {
        ctx.out.warn(&format!(
            "the event log could not be written during the turn: {e}"
        ));
    }
    if ctx.out.format == Format::Quiet {
        live.write_reply(reply)
            .map_err(|e| CliError::from(acpx_printer::failure::unreadable_reply(e)))?;
        live.end_reply();
    }
    turn_result(
        ctx,
        outcome,
        live.saw_end() && !matches!(ctx.out.format, Format::Quiet | Format::Acp),
    )
}

/// The runtime's options for a one-process turn whose output is `live`: its events, or in
/// the `acp` format the frames of its agent connection.
fn live_options(ctx: &Ctx, live: &LiveOutput) -> acpx_runtime::RuntimeOptions {
    let mut options = runtime_options(ctx, Some(live.observer()));
    options.wire_observer = live.wire_observer();
    options
}

/// Where a finished turn's spans go (`--otlp-endpoint`, the OTEL variables), if anywhere
/// ([`otlp_live::turn_target`]: a bad flag is a usage error, a bad variable a warning).
fn otlp_target(ctx: &Ctx, flag: Option<&str>) -> CliResult<Option<OtlpTarget>> {
    let (target, warning) =
        otlp_live::turn_target(flag, |k| std::env::var(k).ok()).map_err(CliError::usage)?;
    if let Some(w) = warning {
        ctx.out.warn(&w);
    }
    Ok(target)
}

/// Sends a finished turn's spans; a failure is one warning, never the turn's failure.
async fn export_otlp(
    ctx: &Ctx,
    store: &dyn acpx_model::Store,
    id: &acpx_model::RecordId,
    outcome: &TurnOutcome,
    target: Option<&OtlpTarget>,
) {
    let rid = &outcome.request_id;
    if let Some(w) = otlp_live::export_finished_turn(store, id, rid, target).await {
        ctx.out.warn(&w);
    }
}

/// `prompt`.
pub async fn prompt(ctx: &Ctx, a: PromptArgs) -> CliResult<()> {
    let store = ctx.store().await?;
    let Some(found) =
        find_in_scope(&*store, &ctx.agent.command, &ctx.cwd, a.session.as_deref()).await?
    else {
        return Err(no_session_error(&ctx.agent, &ctx.cwd, a.session.as_deref()));
    };
    let id = found.acpx_record_id;
    let text = read_prompt(ctx, a.file.as_deref(), &a.text)?;
    let otlp = otlp_target(ctx, a.otlp_endpoint.as_deref())?;
    if ctx.no_owner && a.no_wait {
        return Err(CliError::usage("--no-wait needs the queue owner")
            .with_hint("leave out --no-owner (or config `noOwner`)"));
    }
    let live = live_output(&ctx.out);
    // The same prompter the one-process path would use (`runtime_options`): when there is
    // one, the owner forwards the turn's permission questions here.
    let prompter = if ctx.permission == PermissionMode::ApproveReads {
        tty_prompter()
    } else {
        None
    };
    let local = Box::new(|| live_options(ctx, &live));
    let prompted = driver(ctx, store.clone(), local)?
        .prompt(
            &id,
            text_prompt(&text),
            !a.no_wait,
            prompter.as_deref(),
            |event| prompt_event(ctx, &live, event),
        )
        .await
        .map_err(|e| drive_error(ctx, e))?;
    match prompted {
        Prompted::Owner(Submitted::Finished(outcome)) => {
            // The owner sent the reply in parts, printed as they came (`agent_text` is
            // empty), or, an owner that predates them, whole in `agent_text`. Either way it
            // says when a part could not be read back.
            let reply = match &outcome.agent_text_error {
                None => Ok(Cow::Borrowed(outcome.agent_text.as_str())),
                Some(e) => Err(std::io::Error::other(e.clone())),
            };
            export_otlp(ctx, &*store, &id, &outcome, otlp.as_ref()).await;
            finish_turn(ctx, &outcome, std::iter::once(reply), &live)
        }
        Prompted::Owner(Submitted::Queued {
            request_id,
            queue_depth,
        }) => {
            let queued = reports::prompt_queued(&id, &request_id, queue_depth);
            crate::commands::print(ctx, queued);
            Ok(())
        }
        Prompted::Local(turn) => {
            export_otlp(ctx, &*store, &id, &turn.outcome, otlp.as_ref()).await;
            finish_turn(ctx, &turn.outcome, turn.agent_text(), &live)
        }
    }
}

/// What the user is told while a prompt is driven: the reply and the turn's events stream
/// through `live`, and so do the reply's parts in the quiet format.
fn prompt_event(ctx: &Ctx, live: &LiveOutput, event: DriveEvent<'_>) {
    match event {
        DriveEvent::ViaOwner => live.activity("waiting for the queue owner"),
        DriveEvent::StartingAgent => live.activity("starting the agent"),
        DriveEvent::Local(event) => turn_event(ctx, live, event),
        DriveEvent::Owner(SubmitEvent::Queued(_)) => {
            report_drive(ctx, event, true);
            live.activity("waiting for the tasks ahead");
        }
        DriveEvent::Owner(SubmitEvent::Event(envelope)) => live.on_event(envelope),
        DriveEvent::Owner(SubmitEvent::CancellingTurn) => {
            live.interject("[acpx] cancelling the turn… (Ctrl-C again to stop waiting)")
        }
        DriveEvent::Owner(SubmitEvent::TurnOver) => live.finish(),
        DriveEvent::Owner(SubmitEvent::ReplyPart(part)) => live.reply_piece(part),
        DriveEvent::Owner(SubmitEvent::Frame(direction, line)) => live.on_frame(direction, line),
        other => report_drive(ctx, other, true),
    }
}

/// `exec`: a fresh session in memory, one prompt, nothing stored.
pub async fn exec(ctx: &Ctx, a: ExecArgs) -> CliResult<()> {
    if ctx.config.disable_exec {
        return Err(
            CliError::usage("exec is disabled by the config (`disableExec`)")
                .with_detail("EXEC_DISABLED")
                .with_hint("use a stored session: `acpx sessions new`, then `acpx prompt`"),
        );
    }
    let text = read_prompt(ctx, a.file.as_deref(), &a.text)?;
    let live = live_output(&ctx.out);
    live.activity("starting the agent");
    let runtime = Runtime::new(
        Arc::new(acpx_model::MemoryStore::new()),
        live_options(ctx, &live),
    );
    let spec = NewSessionSpec {
        agent_command: ctx.agent.command.clone(),
        cwd: ctx.cwd.clone(),
        name: None,
    };
    let turn = local::exec_with_config(
        &runtime,
        spec,
        &a.config_options,
        text_prompt(&text),
        sigint_count(),
        |event| turn_event(ctx, &live, event),
    )
    .await
    .map_err(|e| local_error(ctx, e))?;
    finish_turn(ctx, &turn.outcome, turn.agent_text(), &live)
}
