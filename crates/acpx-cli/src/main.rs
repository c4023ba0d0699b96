//! `acpx`: run ACP coding agents from the command line, with persistent, auditable sessions.
//!
//! See `acpx --help` and the crate README. The flow of one invocation: read `--home`, `--cwd`
//! and `--format` early (the config and so the agent names depend on them), load the config,
//! take the positional agent out of argv ([`grammar`]), parse the rest with clap ([`cli`]),
//! resolve the settings ([`context`]), and run the command ([`commands`]). Every failure is a
//! [`error::CliError`] whose kind sets the exit code.

mod agents;
mod backends;
mod cli;
mod commands;
mod config;
mod context;
mod diagnostics;
mod elicit_tty;
use acpx_runtime::durations;
mod error;
mod grammar;
mod help;
mod live;
mod lookup;
mod output;
mod progress;
mod render;

// The fuzz targets of the config and argv readers (docs/RELIABILITY.md § Fuzzing).
#[cfg(test)]
#[path = "../tests/fuzz_cli/mod.rs"]
mod fuzz_cli;

use std::ffi::OsString;
use std::path::PathBuf;

use clap::Parser;

use crate::cli::Cli;
use crate::config::{Config, Format};
use crate::context::{resolve_cwd, resolve_home, Ctx};
use crate::error::{CliError, ErrorKind};
use crate::output::Out;

// The system allocator, with huge pages under its multi-megabyte buffers once
// `bound_large_allocations` turns them on (not in the test agent): see the type.
#[global_allocator]
static ALLOCATOR: acpx_app::allocator::LargeBufferAllocator =
    acpx_app::allocator::LargeBufferAllocator;

fn main() {
    let args: Vec<OsString> = std::env::args_os().collect();
    // `acpx __test-agent …` is the `demo` agent's process: serve ACP on stdio, nothing else.
    if args.get(1).and_then(|a| a.to_str()) == Some(agents::TEST_AGENT_COMMAND) {
        let flags = args[2..]
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        match tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
        {
            Ok(rt) => rt.block_on(acpx_test_agent::serve(flags)),
            Err(e) => {
                crate::output::stderr_line(&format!(
                    "acpx {}: cannot start a runtime: {e}",
                    agents::TEST_AGENT_COMMAND
                ));
                std::process::exit(1);
            }
        }
        return;
    }
    // Before any thread starts: see the function. Not in the test agent above: the ACP crate's
    // stdio transport allocates an 8 MiB pipe buffer each time it starts writing after a
    // flush, which under this bound became an mmap and a munmap per streamed chunk.
    acpx_app::allocator::bound_large_allocations();
    std::process::exit(run(args));
}

/// The format to report early errors in, before the settings are resolved.
fn early_format(pre: &grammar::Prescan, config: Option<&Config>) -> Format {
    match pre.format.as_deref() {
        Some("json") => Format::Json,
        Some("quiet") => Format::Quiet,
        Some("acp") => Format::Acp,
        Some(_) => Format::Text,
        None => config.and_then(|c| c.format).unwrap_or(Format::Text),
    }
}

/// Whether clap answered with a help text (or could not find `global` after `help`).
fn help_kind(e: &clap::Error) -> bool {
    use clap::error::ErrorKind as K;
    let global = e.kind() == K::InvalidSubcommand && e.to_string().contains("'global'");
    e.kind() == K::DisplayHelp || global
}

fn fail(format: Format, e: &CliError) -> i32 {
    if !e.already_reported {
        Out::new(format, false).error(e);
    } else if format == Format::Text {
        // The message was shown (for example as the turn's `[error]` line); the advice not.
        if let Some(h) = &e.hint {
            crate::output::end_stdout_line();
            crate::output::stderr_line(&format!("  hint: {h}"));
        }
    }
    e.kind.exit_code()
}

fn run(args: Vec<OsString>) -> i32 {
    let pre = grammar::prescan(&args);
    let home_flag = pre
        .home
        .clone()
        .or_else(|| std::env::var_os("ACPX_HOME").filter(|h| !h.is_empty()))
        .map(PathBuf::from);
    let setup = (|| -> Result<_, CliError> {
        let home = resolve_home(home_flag.as_deref())?;
        let cwd = resolve_cwd(pre.cwd.as_deref().map(std::path::Path::new))?;
        let (config, config_problem) = config::load_lenient(&home, &cwd);
        Ok((home, cwd, config, config_problem))
    })();
    let (home, cwd, config, config_problem) = match setup {
        Ok(s) => s,
        Err(e) => return fail(early_format(&pre, None), &e),
    };
    let format = early_format(&pre, Some(&config));
    let registry = agents::registry(&config.agents, &home);

    // `acpx` alone: the help and the usage exit code, on stdout on a terminal (rather than
    // wait for a prompt on stdin), else on stderr as clap's `arg_required_else_help` does.
    // Not left to clap: with ACPX_HOME or ACPX_STORE set it counts the variable as an
    // argument and answers "requires a subcommand", listing the hidden `__owner`.
    if args.len() <= 1 {
        use std::io::IsTerminal;
        let mut command = <Cli as clap::CommandFactory>::command();
        if std::io::stdin().is_terminal() {
            let _ = command.print_help();
        } else {
            output::stderr_text(&command.render_help().to_string());
        }
        return ErrorKind::Usage.exit_code();
    }

    let split = match grammar::split_agent(args, |w| registry.contains(w)) {
        Ok(s) => s,
        // The agent may be one the broken config file defines: its problem comes first.
        Err(_) if config_problem.is_some() => {
            return config_problem.map_or(1, |e| fail(format, &e));
        }
        Err(mut e) => {
            if e.detail_code.as_deref() == Some("UNKNOWN_AGENT") {
                let names = registry.names();
                e.message = format!("{}; known agents: {}", e.message, names.join(", "));
                e = e.with_data("knownAgents", serde_json::json!(names));
            }
            return fail(format, &e);
        }
    };
    let mut split = split;
    grammar::compare_agents(&mut split.args);
    let cli = match Cli::try_parse_from(&split.args) {
        Ok(c) => c,
        // A command's help without the global options (`acpx help global` has those).
        Err(e) if help_kind(&e) => match help::for_args(&split.args) {
            Some(text) => {
                output::Out::new(Format::Text, false).raw(&text);
                return 0;
            }
            None if split.agent.as_deref() == Some(agents::DEMO_AGENT) => {
                output::Out::new(Format::Text, false).raw(&help::demo_help());
                return 0;
            }
            None => return clap_error(format, e),
        },
        Err(e) => return clap_error(format, e),
    };
    let json_strict = cli.global.json_strict;
    diagnostics::install(format, cli.global.verbose);
    if let Some(e) = config_problem {
        if !works_without_config(&cli.command) {
            return fail(format, &e);
        }
        Out::new(format, false).warn(&format!(
            "{} (ignored: this command runs with the other settings and the defaults)",
            e.message
        ));
    }
    let mut ctx = match Ctx::new(cli.global, split.agent, home, cwd, config, registry) {
        Ok(c) => c,
        Err(e) => return fail(format, &e),
    };
    ctx.settle_loads = commands::settles_loads(&cli.command);
    // After the settings check, so that a refused `--json-strict` is still explained.
    if json_strict {
        output::silence_stderr();
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            return fail(
                format,
                &CliError::runtime(format!("cannot start the async runtime: {e}")),
            )
        }
    };
    let result = rt.block_on(commands::run(&ctx, cli.command));
    // Do not wait for blocking tasks (a stdin reader, a lock waiter) that no one needs any more.
    rt.shutdown_timeout(std::time::Duration::from_millis(100));
    exit_status(&ctx, result)
}

/// The exit status of a command that ran, once its turn (if any) was recorded to its end:
/// - SIGINT or SIGTERM cancelled the turn through ACP: 130 (unless the command failed
///   otherwise);
/// - stdout closed by its reader (`| head -c 10`): the command's own status, quietly;
/// - stdout failing otherwise (`> /dev/full`): 1, with the reason on stderr — what was printed
///   is incomplete, the session's log is not.
fn exit_status(ctx: &Ctx, result: Result<(), CliError>) -> i32 {
    let failed_stdout = match output::stdout_failure() {
        Some(output::StdoutFailure::Failed(why)) => Some(why),
        _ => None,
    };
    match result {
        Err(e) => fail(ctx.out.format, &e),
        Ok(()) if commands::runtime_cmds::was_interrupted() => ErrorKind::Interrupted.exit_code(),
        Ok(()) => match failed_stdout {
            Some(why) => {
                let e = CliError::runtime(format!("cannot write to stdout: {why}"))
                    .with_detail("STDOUT_FAILED")
                    .with_hint("the output is incomplete; the session's event log holds everything (`acpx sessions events`)");
                Out::new(Format::Text, false).error(&e);
                e.kind.exit_code()
            }
            None => 0,
        },
    }
}

/// Commands that still run when a config file is broken (`docs/format.md` § Configuration
/// errors): the ones an operator needs to look at and repair the store.
fn works_without_config(command: &cli::Command) -> bool {
    use cli::{Command, SessionsCommand};
    match command {
        Command::Fsck(_) => true,
        Command::Sessions(s) => matches!(s.command, None | Some(SessionsCommand::List(_))),
        _ => false,
    }
}

/// Reports a clap error: help and version print normally (exit 0); usage errors exit 2, as a
/// JSON error line in JSON format.
fn clap_error(format: Format, e: clap::Error) -> i32 {
    use clap::error::ErrorKind as K;
    // `--version` in JSON output is a result object like any other.
    if e.kind() == K::DisplayVersion && format.is_json() {
        Out::new(format, false).json(&serde_json::json!({
            "action": "version",
            "version": env!("CARGO_PKG_VERSION"),
        }));
        return 0;
    }
    if matches!(
        e.kind(),
        K::DisplayHelp | K::DisplayVersion | K::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        let _ = e.print();
        return if e.kind() == K::DisplayHelpOnMissingArgumentOrSubcommand {
            2
        } else {
            0
        };
    }
    let from_env = value_from_env(&e);
    if format.is_json() {
        let text = naming_env(e.to_string(), from_env);
        let first = text
            .lines()
            .next()
            .unwrap_or("invalid arguments")
            .trim_start_matches("error: ")
            .to_owned();
        // clap's own "did you mean" (`tip: a similar argument exists: '--format'`) is the
        // best hint there is; the generic pointer to --help otherwise.
        let tip = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("tip: "))
            .map(str::to_owned);
        let err = CliError::usage(first)
            .with_hint(
                tip.unwrap_or_else(|| "see `acpx --help`, or `acpx <command> --help`".into()),
            )
            .with_data("usage", serde_json::json!(text.trim()));
        Out::new(format, false).error(&err);
        return 2;
    }
    if let Some(var) = from_env {
        // clap names the option; the user set the variable, so name it too.
        output::stderr_text(&naming_env(e.render().to_string(), Some(var)));
        return 2;
    }
    let _ = e.print();
    2
}

/// clap's message with the variable the value came from added to its first line.
fn naming_env(text: String, var: Option<&str>) -> String {
    match var {
        Some(var) => text.replacen(
            '\n',
            &format!(" (from the environment variable {var})\n"),
            1,
        ),
        None => text,
    }
}

/// The environment variable an invalid option value came from, when it was not given on the
/// command line: clap's message names only the option (`--store`), which the user never typed.
fn value_from_env(e: &clap::Error) -> Option<&'static str> {
    use clap::error::{ContextKind, ContextValue};
    if e.kind() != clap::error::ErrorKind::InvalidValue {
        return None;
    }
    let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg) else {
        return None;
    };
    let (flag, var) = [("--store", "ACPX_STORE"), ("--home", "ACPX_HOME")]
        .into_iter()
        .find(|(flag, _)| arg.split_whitespace().next() == Some(flag))?;
    let typed = std::env::args_os().skip(1).any(|a| {
        a.to_str()
            .is_some_and(|a| a == flag || a.starts_with(&format!("{flag}=")))
    });
    (!typed && std::env::var_os(var).is_some()).then_some(var)
}
