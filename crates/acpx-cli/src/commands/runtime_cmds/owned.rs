//! The queue owner's client side (`acpx_owner`): how the owner process is started, the
//! options a task carries to it, and its errors as the user sees them; the hidden `__owner`
//! command. Driving a command through the owner or in process is `acpx_owner::drive`'s.

use std::time::Duration;

use acpx_model::RecordId;
use acpx_owner::lease;
use acpx_owner::protocol::TaskOptions;
use acpx_owner::runs::Probe;
use acpx_owner::submit::{self, SubmitError};
use acpx_owner::{run_owner, OwnerConfig, OwnerExit};
use acpx_runtime::Runtime;

use crate::cli::OwnerArgs;
use crate::config::Format;
use crate::context::Ctx;
use crate::error::{CliError, CliResult};

use super::runtime_options;

/// Starts a detached owner for session `id`: the `acpx` binary itself
/// ([`lease::spawn_detached`]: its own process group, stderr appended to
/// `<home>/owners/<id>.log`).
pub(super) fn spawn_owner(ctx: &Ctx, id: &RecordId) -> std::io::Result<()> {
    let mut cmd = std::process::Command::new(std::env::current_exe()?);
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
        .arg(ctx.queue_max_depth.to_string());
    lease::spawn_detached(cmd, &ctx.home, id)
}

/// This command's own options, for the owner: the same ones the one-process path gives its
/// runtime (`runtime_options`).
pub(super) fn task_options(ctx: &Ctx) -> TaskOptions {
    TaskOptions {
        invocation: ctx.invocation(),
        interactive: false,
        elicitations: false,
        // Quiet output prints only the answer, and `acp` the frames: the owner need not
        // stream the events.
        no_events: matches!(ctx.out.format, Format::Quiet | Format::Acp),
        no_agent_text: ctx.out.format != crate::config::Format::Quiet,
        // Quiet output prints the reply: in parts, as the owner reads them, never whole.
        reply_in_parts: ctx.out.format == crate::config::Format::Quiet,
        ttl_seconds: ctx.ttl_given.then_some(ctx.ttl),
        acp_frames: ctx.out.is_acp(),
        verbose: ctx.out.verbose,
    }
}

/// A failure to talk to the queue owner as the user sees it.
pub fn submit_error(e: SubmitError) -> CliError {
    acpx_printer::failure::flows::submit_failure(e).into()
}

/// Whether a prompt runs in session `id`: in its queue owner, or in a one-process prompt
/// (its run file).
pub async fn probe_run(ctx: &Ctx, record: &acpx_model::SessionRecord) -> CliResult<Probe> {
    submit::probe_run(ctx.authority()?, record)
        .await
        .map_err(submit_error)
}

/// Stops every running owner under the home (their sessions stay open), for commands that
/// write every session (`migrate`, `fsck --repair`).
pub async fn release_all_owners(ctx: &Ctx) -> CliResult<()> {
    release_all_owners_of(ctx, ctx.backend).await
}

/// [`release_all_owners`] for the store of `backend` under this home (`migrate`'s target).
pub async fn release_all_owners_of(ctx: &Ctx, backend: crate::config::Backend) -> CliResult<()> {
    let authority = ctx.authority_of(backend)?;
    // A store several hosts share has owners elsewhere too: reached through its queue.
    let store = if backend == ctx.backend {
        Some(ctx.store().await?)
    } else if backend == crate::config::Backend::Postgres {
        Some(
            crate::backends::open(backend, &ctx.home, ctx.config.store_url.as_ref(), false)
                .await?
                .as_dyn(),
        )
    } else {
        None
    };
    submit::release_all_anywhere(store.as_ref(), &authority)
        .await
        .map_err(submit_error)
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
        authority: ctx.authority()?.to_owned(),
        home: ctx.home.clone(),
        record_id: id,
        ttl: (ctx.ttl > 0).then(|| Duration::from_secs(ctx.ttl)),
        queue_max_depth: ctx.queue_max_depth.max(1),
    };
    let exit = run_owner(runtime, config)
        .await
        .map_err(|e| CliError::runtime(e.to_string()))?;
    if let OwnerExit::OpenFailed(why) = exit {
        return Err(CliError::runtime(format!(
            "the queue owner could not start the agent: {why}"
        )));
    }
    if ctx.out.format != Format::Quiet {
        let line = acpx_printer::notices::owner_exit_line(&exit, std::process::id());
        crate::output::stderr_line(&line);
    }
    Ok(())
}
