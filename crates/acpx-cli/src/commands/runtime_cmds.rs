//! Commands that run the agent: `prompt`, `exec`, `cancel`, `set-mode`, `set`, `status`,
//! `sessions new`, `sessions ensure` and `sessions fork`.
//!
//! Each invocation starts the agent, reattaches to the session (the runtime resumes or loads
//! it, or falls back to a fresh ACP session under the same record id), does its work and
//! stops the agent. Prompts of one session run one at a time: a prompt holds the session's
//! run lock ([`crate::runs`]) for its whole turn, and a second one waits for it.

use std::io::{IsTerminal, Read};
use std::sync::Arc;
use std::time::Duration;

use acpx_model::event::LifecycleEventPayload;
use acpx_model::{
    ClosedFilter, Durability, EventContext, EventEnvelope, EventPayload, EventSource, EventStream,
    LifecyclePhase, ListQuery, NewSession, RecordId, SessionRecord, Store, Timestamp, TurnState,
};
use acpx_runtime::mapping::{apply_event, turn_is_running, DESIRED_CONFIG_KEY, DESIRED_MODE_KEY};
use acpx_runtime::{
    text_prompt, Attachment, CancelHandle, NewSessionSpec, Observer, PermissionMode, Runtime,
    RuntimeError, RuntimeOptions, Session, TurnOutcome,
};
use serde_json::{json, Map, Value};
use tokio::sync::Notify;

use crate::cli::{
    EnsureArgs, ExecArgs, ForkArgs, NewArgs, PromptArgs, SessionSelect, SetArgs, SetModeArgs,
};
use crate::commands::select;
use crate::config::{Format, PermissionMode as CliPermission};
use crate::context::Ctx;
use crate::error::{CliError, CliResult, ErrorKind};
use crate::live::{LiveOutput, TtyPrompter};
use crate::lookup::{find_in_scope, no_session_error};
use crate::render::{action, record_identity};
use crate::runs::{self, Probe};

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
        ..RuntimeOptions::default()
    };
    if let Some(t) = ctx.timeout {
        o.request_timeout = o.request_timeout.min(t.max(Duration::from_secs(1)));
    }
    o
}

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
        RuntimeError::Agent { ref error, .. } if error.is_not_found() => {
            CliError::no_session(e.to_string())
                .with_hint("the agent no longer knows this session; start a new one with `acpx sessions new`")
        }
        other => CliError::runtime(other.to_string()),
    }
}

/// The prompt text: `-f <file>`, `-f -` (stdin), the words, or stdin when neither is given.
fn read_prompt(ctx: &Ctx, file: Option<&str>, words: &[String]) -> CliResult<String> {
    let text = match (file, words.is_empty()) {
        (Some(_), false) => {
            return Err(CliError::usage(
                "give the prompt as text or with --file, not both",
            ))
        }
        (Some("-"), true) | (None, true) => {
            if std::io::stdin().is_terminal() {
                ctx.out
                    .note("reading the prompt from stdin; finish with Ctrl-D (or pass it as text)");
            }
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .map_err(|e| CliError::usage(format!("cannot read the prompt from stdin: {e}")))?;
            s
        }
        (Some(path), true) => std::fs::read_to_string(path)
            .map_err(|e| CliError::usage(format!("cannot read the prompt file {path}: {e}")))?,
        (None, false) => words.join(" "),
    };
    if text.trim().is_empty() {
        return Err(CliError::usage("the prompt is empty")
            .with_hint("pass the prompt as text, with --file <path>, or on stdin"));
    }
    Ok(text)
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
    Ok(session)
}

/// The exit status a finished turn maps to. `shown` says the turn's terminal event was
/// printed: in JSON mode that line is the last one and carries the outcome, so no error line
/// follows it; in text mode its `[error]` line said what went wrong.
fn turn_result(ctx: &Ctx, outcome: &TurnOutcome, shown: bool) -> CliResult<()> {
    let reported = |e: CliError| if shown { e.reported() } else { e };
    match outcome.outcome {
        TurnState::Completed => {
            let s = outcome.permission_stats;
            if s.requested > 0 && s.approved == 0 && s.denied + s.cancelled > 0 {
                let json_shown = shown && ctx.out.is_json();
                let e = CliError::new(
                    ErrorKind::PermissionDenied,
                    format!(
                        "the agent asked for permission {} time(s) and was refused",
                        s.requested
                    ),
                )
                .with_hint(if ctx.permission == CliPermission::ApproveReads {
                    "answer on a terminal, or re-run with --approve-all"
                } else {
                    "re-run with --approve-all or --approve-reads"
                });
                return Err(if json_shown { e.reported() } else { e });
            }
            Ok(())
        }
        TurnState::Cancelled => Ok(()),
        TurnState::Timeout => Err(reported(
            CliError::new(
                ErrorKind::Timeout,
                outcome
                    .error
                    .as_ref()
                    .map(|e| e.message.clone())
                    .unwrap_or_else(|| "the turn timed out".into()),
            )
            .with_hint("raise --timeout, or leave it out"),
        )),
        _ => {
            let (code, msg) = match &outcome.error {
                Some(e) => (e.code.as_str(), e.message.clone()),
                None => ("RUNTIME", "the turn failed".to_owned()),
            };
            let kind = if code == "NO_SESSION" {
                ErrorKind::NoSession
            } else {
                ErrorKind::Runtime
            };
            let mut err = CliError::new(kind, msg);
            if let Some(d) = outcome.error.as_ref().and_then(|e| e.detail_code.clone()) {
                err = err.with_detail(&d);
            }
            if let Some(a) = &outcome.acp_error {
                err = err.with_data("acp", a.to_json());
            }
            Err(reported(err))
        }
    }
}

/// Runs one turn in `session` with live output, Ctrl-C and remote cancel. Shuts the session
/// down afterwards (or drops it, killing the agent, when interrupted).
async fn run_turn(
    ctx: &Ctx,
    mut session: Session,
    text: &str,
    live: &LiveOutput,
    interrupts: Interrupts,
) -> CliResult<(TurnOutcome, SessionRecord)> {
    let prompt = session.prompt(text_prompt(text));
    let result = or_interrupt(prompt, &interrupts).await;
    drop(interrupts);
    let Some(result) = result else {
        live.finish();
        stop_now(session).await;
        return Err(interrupted_error());
    };
    live.finish();
    let outcome = match result {
        Ok(o) => o,
        Err(e) => {
            let _ = session.shutdown().await;
            return Err(runtime_error(ctx, e));
        }
    };
    let record = session
        .shutdown()
        .await
        .map_err(|e| runtime_error(ctx, e))?;
    if let Some(e) = &outcome.log_write_error {
        ctx.out.warn(&format!(
            "the event log could not be written during the turn: {e}"
        ));
    }
    Ok((outcome, record))
}

fn print_quiet(ctx: &Ctx, outcome: &TurnOutcome) {
    if ctx.out.format == Format::Quiet && !outcome.agent_text.is_empty() {
        let mut t = outcome.agent_text.clone();
        if !t.ends_with('\n') {
            t.push('\n');
        }
        ctx.out.raw(&t);
    }
}

/// `prompt`.
pub async fn prompt(ctx: &Ctx, a: PromptArgs) -> CliResult<()> {
    let store = ctx.store().await?;
    let Some(found) =
        find_in_scope(&*store, &ctx.agent.command, &ctx.cwd, a.session.as_deref()).await?
    else {
        return Err(no_session_error(
            &ctx.agent.label(),
            &ctx.cwd,
            a.session.as_deref(),
        ));
    };
    let id = found.acpx_record_id;
    let text = read_prompt(ctx, a.file.as_deref(), &a.text)?;
    let request_id = uuid::Uuid::new_v4().to_string();
    let out = ctx.out.clone();
    let (_run, remote) = runs::acquire(&ctx.home, &id, &request_id, |info| {
        out.note(&format!(
            "[acpx] another prompt is running in this session{}; waiting for it to finish",
            info.map(|i| format!(" (pid {})", i.pid))
                .unwrap_or_default()
        ));
    })
    .await?;
    let live = LiveOutput::new(ctx.out.clone());
    let runtime = Runtime::new(store, runtime_options(ctx, Some(live.observer())));
    // Ctrl-C during startup interrupts; once the session is open it cancels the turn.
    let startup = Interrupts::start(None, None, &ctx.out);
    let session = open_existing(ctx, &runtime, &id, &startup).await?;
    drop(startup);
    let interrupts = Interrupts::start(Some(session.cancel_handle()), Some(remote), &ctx.out);
    let (outcome, _record) = run_turn(ctx, session, &text, &live, interrupts).await?;
    print_quiet(ctx, &outcome);
    turn_result(
        ctx,
        &outcome,
        live.saw_end() && ctx.out.format != Format::Quiet,
    )
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
    let live = LiveOutput::new(ctx.out.clone());
    let runtime = Runtime::new(
        Arc::new(acpx_model::MemoryStore::new()),
        runtime_options(ctx, Some(live.observer())),
    );
    let startup = Interrupts::start(None, None, &ctx.out);
    let open = runtime.open_new(NewSessionSpec {
        agent_command: ctx.agent.command.clone(),
        cwd: ctx.cwd.clone(),
        name: None,
    });
    let session = match or_interrupt(open, &startup).await {
        None => return Err(interrupted_error()),
        Some(r) => r.map_err(|e| runtime_error(ctx, e))?,
    };
    drop(startup);
    let interrupts = Interrupts::start(Some(session.cancel_handle()), None, &ctx.out);
    let (outcome, _) = run_turn(ctx, session, &text, &live, interrupts).await?;
    print_quiet(ctx, &outcome);
    turn_result(
        ctx,
        &outcome,
        live.saw_end() && ctx.out.format != Format::Quiet,
    )
}

/// The session of `-s <name>` in this scope, or the no-session error.
async fn scope_session(ctx: &Ctx, name: Option<&str>) -> CliResult<SessionRecord> {
    let store = ctx.store().await?;
    match find_in_scope(&*store, &ctx.agent.command, &ctx.cwd, name).await? {
        Some(s) => Ok(store.load(&s.acpx_record_id).await?),
        None => Err(no_session_error(&ctx.agent.label(), &ctx.cwd, name)),
    }
}

/// `cancel`.
pub async fn cancel(ctx: &Ctx, a: SessionSelect) -> CliResult<()> {
    let r = scope_session(ctx, a.session.as_deref()).await?;
    let home = ctx.home.clone();
    let id = r.acpx_record_id.clone();
    let sent = tokio::task::spawn_blocking(move || runs::request_cancel(&home, &id))
        .await
        .map_err(|e| CliError::runtime(format!("cancel failed: {e}")))??;
    if ctx.out.is_json() {
        let mut m = record_identity(&r);
        m.insert("cancelled".into(), json!(sent.is_some()));
        if let Some(i) = &sent {
            m.insert("requestId".into(), json!(i.request_id));
            m.insert("pid".into(), json!(i.pid));
        }
        ctx.out.json(&action("cancel_result", m));
    } else if ctx.out.is_text() {
        match &sent {
            Some(i) => ctx.out.line(&format!(
                "cancel requested (prompt of pid {}; it ends with stopReason cancelled)",
                i.pid
            )),
            None => ctx.out.line("nothing to cancel"),
        }
    }
    Ok(())
}

/// Opens the scope's session for a control command, runs `f` on it, shuts it down.
async fn with_session<T>(
    ctx: &Ctx,
    name: Option<&str>,
    f: impl AsyncFnOnce(&mut Session) -> Result<T, RuntimeError>,
) -> CliResult<(T, bool, SessionRecord)> {
    let r = scope_session(ctx, name).await?;
    let id = r.acpx_record_id.clone();
    let out = ctx.out.clone();
    let (_run, _remote) = runs::acquire(&ctx.home, &id, "control", |_| {
        out.note("[acpx] a prompt is running in this session; waiting for it to finish");
    })
    .await?;
    let runtime = Runtime::new(ctx.store().await?, runtime_options(ctx, None));
    let interrupts = Interrupts::start(None, None, &ctx.out);
    let mut session = open_existing(ctx, &runtime, &id, &interrupts).await?;
    let resumed = session.resumed();
    let result = match or_interrupt(f(&mut session), &interrupts).await {
        None => {
            stop_now(session).await;
            return Err(interrupted_error());
        }
        Some(r) => r,
    };
    let record = session.shutdown().await.map_err(|e| runtime_error(ctx, e));
    let value = result.map_err(|e| runtime_error(ctx, e))?;
    Ok((value, resumed, record?))
}

/// `set-mode`.
pub async fn set_mode(ctx: &Ctx, a: SetModeArgs) -> CliResult<()> {
    let mode = a.mode.clone();
    let ((), resumed, record) =
        with_session(ctx, a.select.session.as_deref(), async |s: &mut Session| {
            s.set_mode(&mode).await
        })
        .await?;
    if ctx.out.is_json() {
        let mut m = Map::new();
        m.insert("modeId".into(), json!(a.mode));
        m.insert("resumed".into(), json!(resumed));
        m.extend(record_identity(&record));
        ctx.out.json(&action("mode_set", m));
    } else if ctx.out.is_text() {
        ctx.out.line(&format!("mode set to {}", a.mode));
    }
    Ok(())
}

/// `set <key> <value>`: `true` / `false` are sent as booleans, anything else as a string.
pub async fn set_option(ctx: &Ctx, a: SetArgs) -> CliResult<()> {
    let value = match a.value.as_str() {
        "true" => Value::Bool(true),
        "false" => Value::Bool(false),
        v => Value::String(v.to_owned()),
    };
    let (key, v) = (a.key.clone(), value.clone());
    let (options, resumed, record) =
        with_session(ctx, a.select.session.as_deref(), async |s: &mut Session| {
            s.set_config_option(&key, v).await
        })
        .await?;
    if ctx.out.is_json() {
        let mut m = Map::new();
        m.insert("configId".into(), json!(a.key));
        m.insert("value".into(), value);
        m.insert("resumed".into(), json!(resumed));
        m.insert("configOptions".into(), Value::Array(options));
        m.extend(record_identity(&record));
        ctx.out.json(&action("config_set", m));
    } else if ctx.out.is_text() {
        ctx.out.line(&format!("{} set to {}", a.key, a.value));
    }
    Ok(())
}

/// `status`: local health, no ACP call. Exit 0 whatever the state (it is the answer).
pub async fn status(ctx: &Ctx, a: SessionSelect) -> CliResult<()> {
    let store = ctx.store().await?;
    let found = find_in_scope(&*store, &ctx.agent.command, &ctx.cwd, a.session.as_deref()).await?;
    let Some(found) = found else {
        let summary = format!(
            "no open session for agent {} in {}",
            ctx.agent.label(),
            ctx.cwd.display()
        );
        if ctx.out.is_json() {
            let mut m = Map::new();
            m.insert("status".into(), json!("no-session"));
            m.insert("summary".into(), json!(summary));
            ctx.out.json(&action("status_snapshot", m));
        } else {
            ctx.out.line(&format!("no-session: {summary}"));
        }
        return Ok(());
    };
    let record = store.load(&found.acpx_record_id).await?;
    let probe = runs::probe(&ctx.home, &record.acpx_record_id)?;
    let (status, summary, run) = match &probe {
        Probe::Running(info) => (
            "running",
            "a prompt is running".to_owned(),
            info.clone(),
        ),
        Probe::Dead(info) => (
            "dead",
            "the process running its last prompt died mid-turn; the next prompt records the turn as interrupted".to_owned(),
            info.clone(),
        ),
        Probe::Idle if turn_is_running(&record) => (
            "dead",
            "its last turn never finished (acpx was stopped); the next prompt records it as interrupted".to_owned(),
            None,
        ),
        Probe::Idle => ("idle", "no prompt is running".to_owned(), None),
    };
    if ctx.out.is_json() {
        let mut m = Map::new();
        m.insert("status".into(), json!(status));
        m.insert("summary".into(), json!(summary));
        m.extend(record_identity(&record));
        if let (Some(i), "running") = (&run, status) {
            m.insert("pid".into(), json!(i.pid));
            m.insert("requestId".into(), json!(i.request_id));
            m.insert("runningSince".into(), json!(i.started_at));
            if let Some(p) = record.pid {
                m.insert("agentPid".into(), json!(p));
            }
        }
        if let Some(mode) = &record.acpx.current_mode_id {
            m.insert("mode".into(), json!(mode));
        }
        if let Some(t) = record.last_prompt_at {
            m.insert("lastPromptTime".into(), json!(t));
        }
        ctx.out.json(&action("status_snapshot", m));
        return Ok(());
    }
    let o = &ctx.out;
    o.line(&format!("{status}: {summary}"));
    o.line(&format!("  record id:        {}", record.acpx_record_id));
    o.line(&format!("  ACP session id:   {}", record.acp_session_id));
    if let Some(a) = &record.agent_session_id {
        o.line(&format!("  agent session id: {a}"));
    }
    if let (Some(i), "running") = (&run, status) {
        o.line(&format!(
            "  pid:              {} (since {})",
            i.pid, i.started_at
        ));
    }
    if let Some(mode) = &record.acpx.current_mode_id {
        o.line(&format!("  mode:             {mode}"));
    }
    if let Some(t) = record.last_prompt_at {
        o.line(&format!("  last prompt:      {t}"));
    }
    Ok(())
}

/// The open sessions of exactly this scope (no directory walk).
async fn open_in_exact_scope(ctx: &Ctx, name: Option<&str>) -> CliResult<Vec<SessionRecord>> {
    let store = ctx.store().await?;
    let page = store
        .list(&ListQuery {
            cwd: Some(ctx.cwd.to_string_lossy().into_owned()),
            agent_command: Some(ctx.agent.command.clone()),
            name: name.map(str::to_owned),
            closed: ClosedFilter::Open,
            ..ListQuery::default()
        })
        .await?;
    let mut out = Vec::new();
    for s in page
        .sessions
        .into_iter()
        .filter(|s| name.is_some() || s.name.is_none())
    {
        out.push(store.load(&s.acpx_record_id).await?);
    }
    Ok(out)
}

/// Starts the agent and creates a new session record in this scope.
async fn create_session(ctx: &Ctx, name: Option<&str>) -> CliResult<SessionRecord> {
    let runtime = Runtime::new(ctx.store().await?, runtime_options(ctx, None));
    let interrupts = Interrupts::start(None, None, &ctx.out);
    let open = runtime.open_new(NewSessionSpec {
        agent_command: ctx.agent.command.clone(),
        cwd: ctx.cwd.clone(),
        name: name.map(str::to_owned),
    });
    let opened = match ctx.timeout {
        Some(t) => match or_interrupt(tokio::time::timeout(t, open), &interrupts).await {
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
        None => match or_interrupt(open, &interrupts).await {
            None => return Err(interrupted_error()),
            Some(r) => r,
        },
    };
    let session = opened.map_err(|e| runtime_error(ctx, e))?;
    session.shutdown().await.map_err(|e| runtime_error(ctx, e))
}

fn print_ensured(
    ctx: &Ctx,
    record: &SessionRecord,
    created: bool,
    replaced: Option<&SessionRecord>,
) {
    if ctx.out.is_json() {
        let mut m = Map::new();
        m.insert("created".into(), json!(created));
        m.extend(record_identity(record));
        if let Some(n) = &record.name {
            m.insert("name".into(), json!(n));
        }
        if let Some(r) = replaced {
            m.insert("replacedSessionId".into(), json!(r.acpx_record_id));
        }
        ctx.out.json(&action("session_ensured", m));
        return;
    }
    if !ctx.out.is_text() {
        ctx.out.line(record.acpx_record_id.as_str());
        return;
    }
    let verb = if created { "created" } else { "found" };
    let where_ = match ctx.backend {
        crate::config::Backend::Fs => ctx
            .home
            .join("sessions")
            .join(format!("{}.json", record.acpx_record_id))
            .display()
            .to_string(),
        crate::config::Backend::Sqlite => format!(
            "{} (sessions row {})",
            crate::backends::sqlite_path(&ctx.home).display(),
            record.acpx_record_id
        ),
    };
    ctx.out.line(&format!(
        "{verb} session {}{} for agent {} in {}",
        record.acpx_record_id,
        record
            .name
            .as_deref()
            .map(|n| format!(" ({n})"))
            .unwrap_or_default(),
        ctx.agent.label(),
        record.cwd
    ));
    ctx.out.line(&format!("  stored in {where_}"));
    if let Some(r) = replaced {
        ctx.out.line(&format!(
            "  closed the previous session {}",
            r.acpx_record_id
        ));
    }
}

/// `sessions new`: creates a session (or, with `--resume-session`, attaches a new record to
/// an ACP session the agent already has), then closes the other open sessions of the same
/// scope. Creating first means a failure leaves the old session usable.
pub async fn new_session(ctx: &Ctx, a: NewArgs) -> CliResult<()> {
    let name = a.name.as_deref();
    let _scope = runs::lock_scope(
        &ctx.home,
        &ctx.agent.command,
        &ctx.cwd.to_string_lossy(),
        name,
    )
    .await?;
    let store = ctx.store().await?;
    let previous = open_in_exact_scope(ctx, name).await?;
    let record = match &a.resume_session {
        Some(acp_id) => resume_session(ctx, acp_id, name).await?,
        None => create_session(ctx, name).await?,
    };
    let mut replaced = None;
    for old in previous {
        if runs::request_cancel(&ctx.home, &old.acpx_record_id)?.is_some() {
            ctx.out.note(&format!(
                "[acpx] cancelled the prompt running in {}",
                old.acpx_record_id
            ));
            runs::wait_idle(&ctx.home, &old.acpx_record_id, Duration::from_secs(30)).await?;
        }
        let closed = crate::commands::sessions::close_with_retry(&*store, &old).await?;
        replaced = Some(closed);
    }
    print_ensured(ctx, &record, true, replaced.as_ref());
    Ok(())
}

/// A new record for the ACP session `acp_id` that the agent already has: the record id is
/// that id when it is usable and free (as Node acpx does), else a fresh one. The agent must
/// resume or load it; if it cannot (it would start a fresh session instead), the record is
/// removed again and nothing is created.
async fn resume_session(ctx: &Ctx, acp_id: &str, name: Option<&str>) -> CliResult<SessionRecord> {
    if acp_id.trim().is_empty() {
        return Err(CliError::usage("--resume-session needs an ACP session id"));
    }
    let store = ctx.store().await?;
    let mut record = SessionRecord::new(
        NewSession {
            acpx_record_id: RecordId::from_untrusted_or_generate(acp_id),
            acp_session_id: acp_id.to_owned(),
            agent_session_id: None,
            agent_command: ctx.agent.command.clone(),
            cwd: ctx.cwd.to_string_lossy().into_owned(),
            name: name.map(str::to_owned),
        },
        Timestamp::now(),
    );
    if let Err(acpx_model::StoreError::AlreadyExists(_)) = store.create(&mut record).await {
        record.acpx_record_id = RecordId::generate();
        store.create(&mut record).await?;
    }
    let id = record.acpx_record_id.clone();
    let runtime = Runtime::new(store.clone(), runtime_options(ctx, None));
    let interrupts = Interrupts::start(None, None, &ctx.out);
    let attached = match open_existing(ctx, &runtime, &id, &interrupts).await {
        Ok(session) => {
            let attachment = session.attachment().clone();
            let shut = session.shutdown().await.map_err(|e| runtime_error(ctx, e));
            match (attachment, shut) {
                (Attachment::Reattached { .. }, Ok(r)) => Ok(r),
                (Attachment::Reattached { .. }, Err(e)) => Err(e),
                (Attachment::Fallback { reason, .. }, _) => Err(CliError::new(
                    ErrorKind::NoSession,
                    format!("the agent could not resume ACP session {acp_id:?} ({reason}); no session was created"),
                )),
                (Attachment::Created, _) => Err(CliError::runtime(format!(
                    "the agent did not attach ACP session {acp_id:?}; no session was created"
                ))),
            }
        }
        Err(e) => Err(e),
    };
    match attached {
        Ok(r) => Ok(r),
        Err(e) => {
            let _ = store.delete(&id).await;
            Err(e.with_hint(
                "check the id (the agent's own session list), and that the agent supports session/resume or session/load",
            ))
        }
    }
}

/// `sessions ensure`: the scope's session (directory walk), created when there is none.
/// Idempotent, also when several run at once (they serialize on the scope lock).
pub async fn ensure(ctx: &Ctx, a: EnsureArgs) -> CliResult<()> {
    let name = a.name.as_deref();
    let _scope = runs::lock_scope(
        &ctx.home,
        &ctx.agent.command,
        &ctx.cwd.to_string_lossy(),
        name,
    )
    .await?;
    let store = ctx.store().await?;
    if let Some(found) = find_in_scope(&*store, &ctx.agent.command, &ctx.cwd, name).await? {
        let record = store.load(&found.acpx_record_id).await?;
        print_ensured(ctx, &record, false, None);
        return Ok(());
    }
    let record = create_session(ctx, name).await?;
    print_ensured(ctx, &record, true, None);
    Ok(())
}

/// Appends a `session_forked` lifecycle event to the child's log and records the fork in
/// its snapshot (`acpx.forked_from`), copying the parent's conversation and session state.
async fn record_fork(
    store: &dyn Store,
    child: &RecordId,
    parent: &SessionRecord,
    forked_from: Value,
) -> CliResult<SessionRecord> {
    let _lock = store.lock(child, Duration::from_secs(10)).await?;
    let mut r = store.load(child).await?;
    r.thread = parent.thread.clone();
    r.acpx.current_mode_id = parent.acpx.current_mode_id.clone();
    r.acpx.available_commands = parent.acpx.available_commands.clone();
    if r.acpx.config_options.is_empty() {
        r.acpx.config_options = parent.acpx.config_options.clone();
    }
    for key in [DESIRED_MODE_KEY, DESIRED_CONFIG_KEY] {
        if let Some(v) = parent.acpx.extra.get(key) {
            r.acpx.extra.insert(key.to_owned(), v.clone());
        }
    }
    r.acpx
        .extra
        .insert(FORKED_FROM_KEY.to_owned(), forked_from.clone());
    let state = store.event_log_state(child).await?;
    let ctx = EventContext {
        acpx_record_id: child,
        acp_session_id: &r.acp_session_id,
        request_id: None,
        stream: EventStream::Lifecycle,
        source: EventSource::Runtime,
    };
    let extra = match forked_from {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    let event = EventEnvelope::new(
        &ctx,
        state.last_seq + 1,
        Timestamp::now(),
        EventPayload::LifecycleEvent(LifecycleEventPayload {
            phase: LifecyclePhase::SessionForked,
            exit_code: None,
            signal: None,
            reason: None,
            extra,
        }),
    );
    let appended = store
        .append(child, std::slice::from_ref(&event), Durability::Fsync)
        .await;
    r.note_append_result(&appended);
    appended?;
    apply_event(&mut r, &event);
    store.save(&mut r).await?;
    Ok(r)
}

/// `acpx` key of a forked session: `{acpxRecordId, acpSessionId, seq, messageCount, method,
/// forkedAt}` of the parent at the fork point.
pub const FORKED_FROM_KEY: &str = "forked_from";

/// `sessions fork`: a new session that starts from the parent's conversation. With an agent
/// that advertises `session/fork`, the agent forks its own session (it keeps the context);
/// otherwise the new session gets a fresh ACP session and a copy of the stored conversation
/// (the agent starts without the context, which is said). The parent is never changed, and
/// the new session gets a new record id.
pub async fn fork(ctx: &Ctx, a: ForkArgs) -> CliResult<()> {
    let parent = select(ctx, &a.target).await?;
    if parent.closed {
        return Err(CliError::usage(format!(
            "session {} is closed; fork an open session",
            parent.acpx_record_id
        ))
        .with_hint("`acpx sessions export` and `sessions import --new-id` copy a closed session"));
    }
    let store = ctx.store().await?;
    let out = ctx.out.clone();
    let (_run, _remote) = runs::acquire(&ctx.home, &parent.acpx_record_id, "fork", |_| {
        out.note("[acpx] a prompt is running in this session; waiting for it to finish");
    })
    .await?;
    let runtime = Runtime::new(store.clone(), runtime_options(ctx, None));
    let interrupts = Interrupts::start(None, None, &ctx.out);
    let session = open_existing(ctx, &runtime, &parent.acpx_record_id, &interrupts).await?;
    let parent_now = session.record().await;
    let can_fork = session
        .initialize_response()
        .get("agentCapabilities")
        .and_then(|c| c.get("sessionCapabilities"))
        .and_then(|s| s.get("fork"))
        .is_some_and(Value::is_object);
    let forked_from = |method: &str| {
        json!({
            "acpxRecordId": parent_now.acpx_record_id,
            "acpSessionId": parent_now.acp_session_id,
            "seq": parent_now.acpx.audit_seq,
            "messageCount": parent_now.thread.messages.len(),
            "method": method,
            "forkedAt": Timestamp::now(),
        })
    };
    let child = if can_fork {
        let params = json!({"sessionId": parent_now.acp_session_id, "cwd": parent_now.cwd, "mcpServers": []});
        let answer = or_interrupt(session.agent_request("session/fork", params), &interrupts).await;
        let shutdown = stop_or_shutdown(session, answer.is_none()).await;
        let answer = match answer {
            None => return Err(interrupted_error()),
            Some(a) => a.map_err(|e| runtime_error(ctx, e))?,
        };
        shutdown.map_err(|e| runtime_error(ctx, e))?;
        let Some(new_acp) = answer
            .get("sessionId")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
        else {
            return Err(CliError::runtime(format!(
                "the agent answered session/fork without a sessionId: {answer}"
            )));
        };
        let agent_session_id = answer
            .get("_meta")
            .and_then(|m| m.get("agentSessionId"))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned);
        let mut record = SessionRecord::new(
            NewSession {
                acpx_record_id: RecordId::generate(),
                acp_session_id: new_acp.to_owned(),
                agent_session_id,
                agent_command: parent_now.agent_command.clone(),
                cwd: parent_now.cwd.clone(),
                name: a.name.clone(),
            },
            Timestamp::now(),
        );
        record.protocol_version = parent_now.protocol_version;
        record.agent_capabilities = parent_now.agent_capabilities.clone();
        if let Some(opts) = answer.get("configOptions").and_then(Value::as_array) {
            record.acpx.config_options = opts.clone();
        }
        store.create(&mut record).await?;
        record_fork(
            &*store,
            &record.acpx_record_id,
            &parent_now,
            forked_from("session/fork"),
        )
        .await?
    } else {
        session
            .shutdown()
            .await
            .map_err(|e| runtime_error(ctx, e))?;
        ctx.out.warn(
            "the agent does not support session/fork: the new session has a copy of the conversation, \
             but the agent starts it without that context",
        );
        let open = runtime.open_new(NewSessionSpec {
            agent_command: parent_now.agent_command.clone(),
            cwd: std::path::PathBuf::from(&parent_now.cwd),
            name: a.name.clone(),
        });
        let fresh = match or_interrupt(open, &interrupts).await {
            None => return Err(interrupted_error()),
            Some(r) => r.map_err(|e| runtime_error(ctx, e))?,
        };
        let fresh = fresh.shutdown().await.map_err(|e| runtime_error(ctx, e))?;
        record_fork(
            &*store,
            &fresh.acpx_record_id,
            &parent_now,
            forked_from("copy"),
        )
        .await?
    };
    let method = child.acpx.extra[FORKED_FROM_KEY]["method"].clone();
    if ctx.out.is_json() {
        let mut m = record_identity(&child);
        if let Some(n) = &child.name {
            m.insert("name".into(), json!(n));
        }
        m.insert(
            "parentAcpxRecordId".into(),
            json!(parent_now.acpx_record_id),
        );
        m.insert(
            "parentAcpxSessionId".into(),
            json!(parent_now.acp_session_id),
        );
        m.insert("forkSeq".into(), json!(parent_now.acpx.audit_seq));
        m.insert(
            "forkMessageCount".into(),
            json!(parent_now.thread.messages.len()),
        );
        m.insert("method".into(), method);
        ctx.out.json(&action("session_forked", m));
    } else if ctx.out.is_text() {
        ctx.out.line(&format!(
            "forked {} into {} ({} messages, {})",
            parent_now.acpx_record_id,
            child.acpx_record_id,
            child.thread.messages.len(),
            method.as_str().unwrap_or_default()
        ));
    } else {
        ctx.out.line(child.acpx_record_id.as_str());
    }
    Ok(())
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
