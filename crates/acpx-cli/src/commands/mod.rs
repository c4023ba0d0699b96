//! The commands, and what they share: picking the session a command acts on.

pub mod config_cmd;
pub mod fsck;
pub mod migrate;
pub mod node_import;
pub mod replay;
pub mod runtime_cmds;
pub mod sessions;
pub mod shell;
pub mod transfer;
pub mod usage;

use acpx_model::{SessionRecord, SessionSummary};
use acpx_printer::live::Tone;
use acpx_printer::reports::{Printed, Said};

use crate::cli::{Command, ConfigCommand, SessionsCommand, Target};
use crate::context::Ctx;
use crate::error::{CliError, CliResult};
use crate::lookup::{
    find_in_scope, load_in_scope, no_session_error_named, resolve_id_or_name,
    resolve_summary_id_or_name,
};

/// Runs one command.
pub async fn run(ctx: &Ctx, command: Command) -> CliResult<()> {
    match command {
        Command::Prompt(a) => runtime_cmds::prompt(ctx, a).await,
        Command::Exec(a) => runtime_cmds::exec(ctx, a).await,
        Command::Cancel(a) => runtime_cmds::cancel(ctx, a).await,
        Command::SetMode(a) => runtime_cmds::set_mode(ctx, a).await,
        Command::Set(a) => runtime_cmds::set_option(ctx, a).await,
        Command::Status(a) => runtime_cmds::status(ctx, a).await,
        Command::Owner(a) => runtime_cmds::owner_main(ctx, a).await,
        Command::Fsck(a) => fsck::run(ctx, a).await,
        Command::Completions(a) => shell::completions(ctx, a.shell),
        Command::Man(a) => shell::man(ctx, &a.command),
        Command::Migrate(a) => migrate::run(ctx, a).await,
        Command::Replay(a) => replay::replay(ctx, a).await,
        Command::Compare(a) => replay::compare(ctx, a).await,
        Command::ServeAgent(a) => replay::serve_agent(ctx, a).await,
        Command::Config(a) => match a.command.unwrap_or(ConfigCommand::Show) {
            ConfigCommand::Show => config_cmd::show(ctx),
            ConfigCommand::Init(a) => config_cmd::init(ctx, a.force),
        },
        Command::Sessions(s) => match s.command {
            None if s.list.from_agent => runtime_cmds::list_from_agent(ctx, s.list).await,
            None => sessions::list(ctx, s.list).await,
            Some(SessionsCommand::List(a)) if a.from_agent => {
                runtime_cmds::list_from_agent(ctx, a).await
            }
            Some(SessionsCommand::List(a)) => sessions::list(ctx, a).await,
            Some(SessionsCommand::New(a)) => runtime_cmds::new_session(ctx, a).await,
            Some(SessionsCommand::Ensure(a)) => runtime_cmds::ensure(ctx, a).await,
            Some(SessionsCommand::Fork(a)) => runtime_cmds::fork(ctx, a).await,
            Some(SessionsCommand::Adopt(a)) => runtime_cmds::adopt(ctx, a).await,
            Some(SessionsCommand::Show(a)) => sessions::show(ctx, a).await,
            Some(SessionsCommand::Close(a)) => sessions::close(ctx, a).await,
            Some(SessionsCommand::Trust(a)) => transfer::trust(ctx, a).await,
            Some(SessionsCommand::Delete(a)) => sessions::delete(ctx, a).await,
            Some(SessionsCommand::History(a)) => sessions::history(ctx, a).await,
            Some(SessionsCommand::Events(a)) => sessions::events(ctx, a).await,
            Some(SessionsCommand::Read(a)) => sessions::read(ctx, a).await,
            Some(SessionsCommand::Watch(a)) => sessions::watch(ctx, a).await,
            Some(SessionsCommand::Export(a)) => transfer::export(ctx, a).await,
            Some(SessionsCommand::Import(a)) => transfer::import(ctx, a).await,
            Some(SessionsCommand::Prune(a)) => sessions::prune(ctx, a).await,
            Some(SessionsCommand::Search(a)) => sessions::search(ctx, a).await,
            Some(SessionsCommand::Diff(a)) => replay::diff(ctx, a).await,
            Some(SessionsCommand::Usage(a)) => usage::usage(ctx, a).await,
        },
    }
}

/// Writes what a command prints ([`Printed`]): its warnings, the part of this invocation's
/// format, its notes.
pub fn print(ctx: &Ctx, p: Printed) {
    for w in &p.warnings {
        ctx.out.warn(w);
    }
    if ctx.out.is_json() {
        if let Some(v) = &p.json {
            ctx.out.json(v);
        }
    } else if ctx.out.is_text() {
        ctx.out.lines(p.text);
    } else {
        ctx.out.lines(p.quiet);
    }
    for n in &p.notes {
        ctx.out.note(n);
    }
}

/// Says a line on stderr to whom it is for ([`Said`]); nothing for `None`.
pub fn say(ctx: &Ctx, said: Option<Said>) {
    match said {
        Some(Said::Warning(w)) => ctx.out.warn(&w),
        Some(Said::Note(n)) => ctx.out.note(&n),
        Some(Said::Verbose(v)) => ctx.out.verbose(&v),
        None => {}
    }
}

/// Colours for stdout, as it takes them ([`acpx_printer::reports::Paint`]).
pub fn paint_out(ctx: &Ctx) -> impl Fn(Tone, &str) -> String + '_ {
    move |tone, text| match crate::live::style_of(tone) {
        Some(style) => ctx.out.paint_out(style, text),
        None => text.to_owned(),
    }
}

/// Whether `command` opens its store settling every load (docs/format.md decision 17, "Every
/// command that reads a session reads a long one this way"): the commands that read sessions
/// and end. Not the ones that run turns or controls (a prompt, `exec`, `set`; the owner
/// settles its own loads): a settling load writes the older turns to spill files and the
/// turn's save reads them back, a cost that a prompt on a session holding one 1M-chunk reply
/// paid at every turn (issue 15's session-size measure: 1.20 of a new session's CPU, against
/// 1.1). `sessions events` and `watch` load no record: they find the session by its summary
/// ([`select_summary`]), and a follower asks for it again ([`acpx_model::Store::summary`]) to
/// see whether it was closed; they stay listed, as a store opened so costs nothing until it
/// loads. `sessions fork`
/// settles too: it runs no turn, and it reads the parent twice (96 → 63 MB on an 11 MB
/// session).
pub fn settles_loads(command: &Command) -> bool {
    match command {
        Command::Status(_) | Command::Fsck(_) => true,
        Command::Sessions(s) => matches!(
            s.command,
            None | Some(
                SessionsCommand::List(_)
                    | SessionsCommand::Show(_)
                    | SessionsCommand::Close(_)
                    | SessionsCommand::Delete(_)
                    | SessionsCommand::History(_)
                    | SessionsCommand::Events(_)
                    | SessionsCommand::Watch(_)
                    | SessionsCommand::Fork(_)
                    | SessionsCommand::Read(_)
                    | SessionsCommand::Export(_)
                    | SessionsCommand::Prune(_)
                    | SessionsCommand::Search(_)
                    | SessionsCommand::Usage(_)
            )
        ),
        _ => false,
    }
}

/// The open session of this agent, directory (walking up to the git root) and name.
pub async fn select_in_scope(ctx: &Ctx, name: Option<&str>) -> CliResult<SessionRecord> {
    let store = ctx.store().await?;
    match load_in_scope(&*store, &ctx.agent.command, &ctx.cwd, name).await? {
        Some(r) => Ok(r),
        None => Err(no_session_in_scope(ctx, &*store, name).await),
    }
}

/// The error when the scope has no open session named `name`.
async fn no_session_in_scope(
    ctx: &Ctx,
    store: &dyn acpx_model::Store,
    name: Option<&str>,
) -> CliError {
    no_session_error_named(store, &ctx.agent, &ctx.cwd, name).await
}

/// The session a `[SESSION] [-s NAME]` pair designates: an id (record id, ACP id, unique
/// suffix; failing that, a session name in this scope), or the scope's session.
pub async fn select(ctx: &Ctx, target: &Target) -> CliResult<SessionRecord> {
    let Some(text) = &target.id else {
        return select_in_scope(ctx, target.session.as_deref()).await;
    };
    let store = ctx.store().await?;
    match resolve_id_or_name(&*store, text, &ctx.agent.command, &ctx.cwd).await? {
        Some(r) => Ok(r),
        None => Err(no_such_id(ctx, text)),
    }
}

/// [`select`] for a command that needs the session's id and not its conversation (`sessions
/// events`, `watch`): the summary, so that a long session is not read to be found.
pub async fn select_summary(ctx: &Ctx, target: &Target) -> CliResult<SessionSummary> {
    let store = ctx.store().await?;
    let Some(text) = &target.id else {
        let name = target.session.as_deref();
        return match find_in_scope(&*store, &ctx.agent.command, &ctx.cwd, name).await? {
            Some(s) => Ok(s),
            None => Err(no_session_in_scope(ctx, &*store, name).await),
        };
    };
    match resolve_summary_id_or_name(&*store, text, &ctx.agent.command, &ctx.cwd).await? {
        Some(s) => Ok(s),
        None => Err(no_such_id(ctx, text)),
    }
}

/// Nothing has the id (or name) `text` ([`acpx_printer::reports::sessions::no_such_id`]).
fn no_such_id(ctx: &Ctx, text: &str) -> CliError {
    let agent = ctx.agent.display();
    let scope = ctx
        .agent
        .explicit
        .then_some((agent.as_str(), ctx.cwd.as_path()));
    CliError::no_session(acpx_printer::reports::sessions::no_such_id(text, scope))
        .with_hint("`acpx sessions list` shows the stored sessions and their ids")
}
