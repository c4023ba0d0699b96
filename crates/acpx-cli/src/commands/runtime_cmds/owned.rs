//! Commands served by the session's queue owner (`acpx_runtime::owner`): this module only
//! finds or starts the owner, sends the request and renders the answer with the same
//! renderers and exit codes as the one-process path.

use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::time::Duration;

use acpx_model::RecordId;
use acpx_runtime::owner::client::{self, Answer};
use acpx_runtime::owner::lease::{self, LeasePaths};
use acpx_runtime::owner::protocol::{
    OwnerStatus, Request, Response, TaskOptions, WireError, WireNotice,
};
use acpx_runtime::owner::{run_owner, OwnerConfig, OwnerExit};
use acpx_runtime::{text_prompt, Notice, Runtime, TurnOutcome};
use serde_json::{json, Map, Value};

use crate::cli::OwnerArgs;
use crate::config::{Format, PermissionMode as CliPermission};
use crate::context::Ctx;
use crate::error::{CliError, CliResult, ErrorKind};
use crate::live::{LiveOutput, TtyPrompter};
use crate::render::action;
use crate::runs::{self, Probe, RunInfo};

use super::{report_notices, runtime_options, MODE_NOT_RESTORED_HINT, RESUME_REQUIRED_HINT};

/// A wire error as the user sees it.
pub(super) fn wire_error(e: WireError) -> CliError {
    let kind = match e.code.as_str() {
        "TIMEOUT" => ErrorKind::Timeout,
        "NO_SESSION" => ErrorKind::NoSession,
        "USAGE" => ErrorKind::Usage,
        _ => ErrorKind::Runtime,
    };
    let mut err = CliError::new(kind, e.message);
    if let Some(d) = &e.detail_code {
        err = err.with_detail(d);
        match d.as_str() {
            "QUEUE_OWNER_START_FAILED" => {
                err = err.with_hint(
                    "see <home>/owners/<record id>.log, or run this command with --no-owner",
                )
            }
            "MODE_NOT_RESTORED" => err = err.with_hint(MODE_NOT_RESTORED_HINT),
            "SESSION_RESUME_REQUIRED" => err = err.with_hint(RESUME_REQUIRED_HINT),
            _ => {}
        }
    }
    if e.retryable {
        err = err.with_data("retryable", json!(true));
    }
    err
}

/// Starts a detached owner for session `id`: the `acpx` binary itself in its own process
/// group, stdin and stdout closed, stderr appended to `<home>/owners/<id>.log`.
fn spawn_owner(ctx: &Ctx, id: &RecordId) -> std::io::Result<()> {
    let paths = LeasePaths::new(&ctx.home, id);
    lease::prepare_dirs(&paths)?;
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(lease::owners_dir(&ctx.home).join(format!("{id}.log")))?;
    let exe = std::env::current_exe()?;
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("--home")
        .arg(&ctx.home)
        .arg("--cwd")
        .arg(&ctx.cwd)
        .arg("--store")
        .arg(ctx.backend.as_str())
        .arg("--ttl")
        .arg(ctx.ttl.to_string())
        .arg("__owner")
        .arg("--record-id")
        .arg(id.as_str())
        .arg("--queue-max-depth")
        .arg(ctx.queue_max_depth.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .process_group(0);
    // Not waited for: the owner outlives this command (init reaps it).
    cmd.spawn().map(drop)
}

async fn send_or_spawn(ctx: &Ctx, id: &RecordId, request: &Request) -> CliResult<Answer> {
    let spawn = || spawn_owner(ctx, id);
    client::send_or_spawn(&ctx.home, id, request, &spawn)
        .await
        .map_err(wire_error)
}

/// This command's own options, for the owner: the same ones the one-process path gives its
/// runtime (`runtime_options`).
pub(super) fn task_options(ctx: &Ctx) -> TaskOptions {
    TaskOptions {
        permission_mode: ctx.permission.as_str().to_owned(),
        timeout_ms: ctx
            .timeout
            .map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
        non_interactive: Some(ctx.non_interactive),
        resume_policy: Some(ctx.resume_policy),
        mcp_servers: ctx.mcp_servers.as_ref().map(|m| m.to_json()),
        default_mcp_servers: ctx.config.mcp_servers.as_ref().map(|m| m.to_json()),
        model: ctx.model.clone(),
        permission_policy: ctx.permission_rules.clone(),
        prompt_retries: Some(ctx.prompt_retries),
        no_fs: ctx.no_fs,
        no_terminal: ctx.no_terminal,
        auth_policy: Some(ctx.auth_policy),
        interactive: false,
        // Quiet output prints only the answer: the owner need not stream the events.
        no_events: ctx.out.format == crate::config::Format::Quiet,
    }
}

fn into_notices(notices: Vec<WireNotice>) -> Vec<Notice> {
    notices.into_iter().map(Notice::from).collect()
}

/// `prompt` through the owner. Returns the turn's outcome, or `None` for `--no-wait`.
pub(super) async fn prompt(
    ctx: &Ctx,
    id: &RecordId,
    text: &str,
    no_wait: bool,
    live: &LiveOutput,
) -> CliResult<Option<TurnOutcome>> {
    let request_id = uuid::Uuid::new_v4().to_string();
    // The same prompter the one-process path would use (`runtime_options`): when there is
    // one, the owner forwards the turn's permission questions here.
    let prompter = if ctx.permission == CliPermission::ApproveReads {
        TtyPrompter::available()
    } else {
        None
    };
    let mut options = task_options(ctx);
    options.interactive = prompter.is_some();
    let request = Request::SubmitPrompt {
        request_id: request_id.clone(),
        prompt: text_prompt(text),
        options,
        wait: !no_wait,
    };
    // One listener for the whole wait: a Ctrl-C that arrives while a line is being rendered
    // is kept for the next select, not lost between two `ctrl_c()` futures.
    let mut sigint = super::Interrupts::new();
    let mut answer = send_or_spawn(ctx, id, &request).await?;
    let mut cancels = 0u32;
    loop {
        let next = tokio::select! {
            n = answer.next() => n,
            r = sigint.recv() => {
                if r.is_none() {
                    continue;
                }
                cancels += 1;
                if cancels > 1 {
                    return Err(CliError::new(
                        ErrorKind::Interrupted,
                        "interrupted: the turn goes on in the session's queue owner (`acpx cancel` stops it)",
                    ));
                }
                if ctx.out.is_text() {
                    crate::output::stderr_line("\n[acpx] cancelling the turn… (Ctrl-C again to stop waiting)");
                }
                let _ = cancel_request(ctx, id).await;
                continue;
            }
        };
        match next.map_err(wire_error)? {
            None => return Err(wire_error(WireError::disconnected())),
            Some(Response::Accepted { queue_depth, .. }) => {
                if no_wait {
                    if ctx.out.is_json() {
                        let mut m = Map::new();
                        m.insert("acpxRecordId".into(), json!(id.as_str()));
                        m.insert("requestId".into(), json!(request_id));
                        ctx.out.json(&action("prompt_queued", m));
                    } else {
                        ctx.out.line(&request_id);
                    }
                    return Ok(None);
                }
                if queue_depth > 0 {
                    ctx.out.note(&format!(
                        "[acpx] queued behind {queue_depth} task(s) of this session"
                    ));
                }
            }
            Some(Response::Started { notices, .. }) => {
                report_notices(ctx, &into_notices(notices));
            }
            Some(Response::Event { envelope }) => live.on_event(&envelope),
            Some(Response::PermissionRequest { id: qid, question }) => {
                // Only an interactive request is asked; refuse anything else.
                let answered = match &prompter {
                    Some(p) => {
                        let asked = tokio::select! {
                            a = answer.answer_with(qid, question, p.as_ref()) => Some(a),
                            _ = sigint.recv() => None,
                        };
                        match asked {
                            Some(a) => a,
                            None => {
                                // Ctrl-C while the question is open: the turn is cancelled
                                // through the owner, which answers the open question as
                                // cancelled; the refusal sent after it only closes ours.
                                cancels += 1;
                                if ctx.out.is_text() {
                                    crate::output::stderr_line("\n[acpx] cancelling the turn… (Ctrl-C again to stop waiting)");
                                }
                                let _ = cancel_request(ctx, id).await;
                                answer.answer_permission(qid, false).await.map(|_| false)
                            }
                        }
                    }
                    None => answer.answer_permission(qid, false).await.map(|_| false),
                };
                if let Err(e) = answered {
                    ctx.out.warn(&format!(
                        "could not send the permission answer to the queue owner: {e}"
                    ));
                }
            }
            Some(Response::Result { outcome }) => {
                live.finish();
                return Ok(Some(outcome.into()));
            }
            Some(Response::Error { error }) => {
                live.finish();
                return Err(wire_error(error));
            }
            Some(other) => {
                return Err(CliError::runtime(format!(
                    "the queue owner answered a prompt with {other:?}"
                )))
            }
        }
    }
}

/// `set-mode` / `set` through the owner: the agent's answer and whether the session was
/// reattached.
pub(super) async fn control(
    ctx: &Ctx,
    id: &RecordId,
    request: Request,
) -> CliResult<(Value, bool)> {
    let mut answer = send_or_spawn(ctx, id, &request).await?;
    while let Some(r) = answer.next().await.map_err(wire_error)? {
        match r {
            Response::Accepted { .. } | Response::Event { .. } => {}
            Response::Started { notices, .. } => report_notices(ctx, &into_notices(notices)),
            Response::ControlResult { resumed, value } => return Ok((value, resumed)),
            Response::Error { error } => return Err(wire_error(error)),
            other => {
                return Err(CliError::runtime(format!(
                    "the queue owner answered a control with {other:?}"
                )))
            }
        }
    }
    Err(wire_error(WireError::disconnected()))
}

async fn ask_running(ctx: &Ctx, id: &RecordId, request: Request) -> CliResult<Option<Response>> {
    let Some(answer) = client::send_if_running(&ctx.home, id, &request)
        .await
        .map_err(|e| CliError::runtime(format!("cannot reach the queue owner: {e}")))?
    else {
        return Ok(None);
    };
    match answer.last().await.map_err(wire_error)? {
        Response::Error { error } => Err(wire_error(error)),
        r => Ok(Some(r)),
    }
}

/// Asks a running owner to cancel its turn: `None` when no owner runs, else whether a turn
/// was cancelled and its request id.
pub(super) async fn cancel_request(
    ctx: &Ctx,
    id: &RecordId,
) -> CliResult<Option<(bool, Option<String>)>> {
    match ask_running(ctx, id, Request::Cancel).await? {
        None => Ok(None),
        Some(Response::CancelResult {
            cancelled,
            request_id,
        }) => Ok(Some((cancelled, request_id))),
        Some(other) => Err(CliError::runtime(format!(
            "the queue owner answered cancel with {other:?}"
        ))),
    }
}

/// A running owner's state, `None` when none runs.
pub async fn status(ctx: &Ctx, id: &RecordId) -> CliResult<Option<OwnerStatus>> {
    match ask_running(ctx, id, Request::Status).await? {
        Some(Response::Status { status }) => Ok(Some(status)),
        _ => Ok(None),
    }
}

/// Whether a prompt runs in session `id`: in its queue owner, or in a one-process prompt
/// (its run file).
pub async fn probe_run(ctx: &Ctx, id: &RecordId) -> CliResult<Probe> {
    if let Some(owner) = status(ctx, id).await? {
        return Ok(match owner.running {
            Some(request_id) => Probe::Running(Some(RunInfo {
                pid: owner.pid,
                request_id,
                started_at: owner.started_at,
                socket: LeasePaths::new(&ctx.home, id).socket,
            })),
            None => Probe::Idle,
        });
    }
    runs::probe(&ctx.home, id)
}

/// Asks a running owner to close the session (ACP `session/close` when advertised, record
/// closed, owner and agent gone). Returns whether an owner did it.
pub async fn close(ctx: &Ctx, id: &RecordId) -> CliResult<bool> {
    let paths = LeasePaths::new(&ctx.home, id);
    let done = match ask_running(ctx, id, Request::Close).await? {
        None => return Ok(false),
        Some(Response::Closed { .. }) => true,
        Some(other) => {
            return Err(CliError::runtime(format!(
                "the queue owner answered close with {other:?}"
            )))
        }
    };
    // The owner exits right after answering; wait for its lease so nothing of it is left.
    for _ in 0..200 {
        if !lease::is_alive(&paths) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    Ok(done)
}

/// Stops a running owner of session `id` (the session stays open), so this process can take
/// the session's writer lock.
pub async fn release_owner_of(ctx: &Ctx, id: &RecordId) -> CliResult<()> {
    client::release(&ctx.home, id, Duration::from_secs(30))
        .await
        .map(drop)
        .map_err(wire_error)
}

/// Stops every running owner under the home (their sessions stay open), for commands that
/// write every session (`migrate`, `fsck --repair`).
pub async fn release_all_owners(ctx: &Ctx) -> CliResult<()> {
    let Ok(entries) = std::fs::read_dir(lease::owners_dir(&ctx.home)) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(id) = name.to_str().and_then(|n| n.strip_suffix(".lock")) else {
            continue;
        };
        if let Ok(id) = RecordId::parse(id) {
            release_owner_of(ctx, &id).await?;
        }
    }
    Ok(())
}

/// The hidden `__owner` command: serve one session until idle, closed or signalled.
pub async fn owner_main(ctx: &Ctx, a: OwnerArgs) -> CliResult<()> {
    let id = RecordId::parse(&a.record_id)
        .map_err(|e| CliError::usage(format!("--record-id {}: {e}", a.record_id)))?;
    let mut options = runtime_options(ctx, None);
    // Each task brings its own permission mode and timeout; nobody can answer a question
    // at a terminal here.
    options.prompter = None;
    options.prompt_timeout = None;
    let runtime = Runtime::new(ctx.store().await?, options);
    let config = OwnerConfig {
        home: ctx.home.clone(),
        record_id: id,
        ttl: (ctx.ttl > 0).then(|| Duration::from_secs(ctx.ttl)),
        queue_max_depth: ctx.queue_max_depth.max(1),
    };
    let exit = run_owner(runtime, config)
        .await
        .map_err(|e| CliError::runtime(e.to_string()))?;
    match exit {
        OwnerExit::OpenFailed(why) => Err(CliError::runtime(format!(
            "the queue owner could not start the agent: {why}"
        ))),
        other => {
            if ctx.out.format != Format::Quiet {
                crate::output::stderr_line(&format!(
                    "acpx queue owner {}: stopped ({other:?})",
                    std::process::id()
                ));
            }
            Ok(())
        }
    }
}
