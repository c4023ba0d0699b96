//! `replay`, `sessions diff`, `compare` and `serve-agent`: argv in, `acpx_replay` called,
//! its result printed. The engines are `acpx_replay`'s (issue 47, items 3 and 4).

use std::io::IsTerminal;

use acpx_owner::interrupts::ctrl_c;
use acpx_replay::compare::{self, CompareAgent};
use acpx_replay::replay::{self, ReplaySpec};
use acpx_replay::{diff, read_recording, serve_agent, ReplayError};

use crate::cli::{CompareArgs, DiffArgs, ReplayArgs, ServeAgentArgs, Target};
use crate::commands::runtime_cmds::{read_prompt, runtime_options};
use crate::commands::{print, select_summary};
use crate::context::Ctx;
use crate::error::{CliError, CliResult};
use acpx_printer::reports::replay as reports;

/// A session named on the command line (id, prefix, suffix or name in scope).
fn target(id: &str) -> Target {
    Target {
        id: Some(id.to_owned()),
        session: None,
    }
}

fn replay_error(e: ReplayError) -> CliError {
    match e {
        ReplayError::Store(s) => s.into(),
        ReplayError::Invalid(m) => CliError::usage(m),
        other => CliError::runtime(other.to_string()),
    }
}

/// `acpx [<agent>] replay SESSION [--until N]`.
pub async fn replay(ctx: &Ctx, a: ReplayArgs) -> CliResult<()> {
    let source = select_summary(ctx, &target(&a.session)).await?;
    let spec = ReplaySpec {
        source: source.acpx_record_id.clone(),
        // An agent named on the command line (positional or --agent); else the source's.
        agent_command: ctx.agent.explicit.then(|| ctx.agent.command.clone()),
        until: a.until.map(|n| n as usize),
    };
    let store = ctx.store().await?;
    let out = &ctx.out;
    let outcome = replay::replay(
        store,
        runtime_options(ctx, None),
        &spec,
        ctrl_c(),
        |event| out.note(&reports::replay_progress(&spec.source, &event)),
    )
    .await
    .map_err(replay_error)?;
    print(ctx, reports::replayed(&spec.source, &outcome));
    if outcome.interrupted {
        return Err(super::runtime_cmds::interrupted_error());
    }
    Ok(())
}

/// `acpx sessions diff A B`.
pub async fn diff(ctx: &Ctx, a: DiffArgs) -> CliResult<()> {
    let first = select_summary(ctx, &target(&a.a)).await?;
    let second = select_summary(ctx, &target(&a.b)).await?;
    let store = ctx.store().await?;
    let ra = read_recording(&*store, &first.acpx_record_id)
        .await
        .map_err(replay_error)?;
    let rb = read_recording(&*store, &second.acpx_record_id)
        .await
        .map_err(replay_error)?;
    let d = diff::diff(&ra, &rb);
    if ctx.out.is_json() {
        ctx.out.json(&d.to_json());
    } else {
        let colour = std::io::stdout().is_terminal()
            && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
        ctx.out.raw(&diff::render_text(&d, colour));
    }
    Ok(())
}

/// `acpx compare 'prompt' --agent A --agent B …`.
pub async fn compare(ctx: &Ctx, a: CompareArgs) -> CliResult<()> {
    if ctx.agent.explicit {
        return Err(
            CliError::usage("compare takes its agents from --agent only")
                .with_hint("acpx compare 'prompt' --agent codex --agent claude"),
        );
    }
    if a.agents.is_empty() {
        return Err(CliError::usage("compare needs at least one --agent")
            .with_hint("acpx compare 'prompt' --agent codex --agent claude"));
    }
    let mut agents = Vec::with_capacity(a.agents.len());
    for given in &a.agents {
        let (word, raw) = match ctx.registry.contains(given) {
            true => (Some(given.clone()), None),
            false => (None, Some(given.clone())),
        };
        let choice = ctx
            .registry
            .choose(word, raw, None)
            .map_err(|e| CliError::usage(format!("--agent {given:?}: {e}")))?;
        agents.push(CompareAgent {
            label: given.clone(),
            command: choice.command,
        });
    }
    let text = read_prompt(ctx, a.file.as_deref(), &a.text)?;
    let store = ctx.store().await?;
    let (stop, interrupt) = tokio::sync::watch::channel(false);
    let watcher = tokio::spawn(async move {
        ctrl_c().await;
        let _ = stop.send(true);
    });
    let rows = compare::compare(
        store,
        runtime_options(ctx, None),
        &agents,
        ctx.cwd.clone(),
        &text,
        interrupt,
    )
    .await;
    watcher.abort();
    print(ctx, reports::compared(&text, &rows));
    if rows.iter().all(|r| r.record_id.is_none()) {
        return Err(CliError::runtime("no agent could be started"));
    }
    Ok(())
}

/// `acpx serve-agent SESSION [--fast]`: stdout belongs to the ACP connection from here on.
pub async fn serve_agent(ctx: &Ctx, a: ServeAgentArgs) -> CliResult<()> {
    let source = select_summary(ctx, &target(&a.session)).await?;
    let store = ctx.store().await?;
    let recording = read_recording(&*store, &source.acpx_record_id)
        .await
        .map_err(replay_error)?;
    if recording.turns.is_empty() {
        return Err(CliError::usage(format!(
            "session {} has no prompts to serve",
            source.acpx_record_id
        )));
    }
    serve_agent::serve(recording, a.fast)
        .await
        .map_err(replay_error)
}
