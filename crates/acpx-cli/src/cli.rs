//! The command-line grammar (clap derive).
//!
//! `acpx [global options] [<agent>] [command] [args]`. The positional `<agent>` is not part of
//! the clap grammar: [`crate::grammar::split_agent`] takes it out of argv first (see there for
//! how a first word is told apart as agent, command or prompt text).
//!
//! The doc comments of the clap types are the `--help` text, written for a terminal: rustdoc's
//! markdown rules (`[default]` as a link, `<home>` as an HTML tag) do not apply to them.

#![allow(rustdoc::broken_intra_doc_links, rustdoc::invalid_html_tags)]

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::config::{Backend, Format};
use acpx_runtime::{AuthPolicy, NonInteractivePermissions, ResumePolicy};

const ABOUT: &str =
    "Run ACP coding agents from the command line, with persistent, auditable sessions.";

const LONG_ABOUT: &str = "\
Run ACP coding agents from the command line, with persistent, auditable sessions.

Every prompt is a turn in a session that acpx stores (a session.json snapshot and an append-only
NDJSON event log). A session belongs to (agent command, directory, optional name); `prompt`
finds it by walking from the working directory up to the git root.";

const AFTER_HELP: &str = "\
Usage forms:
  acpx [options] <agent> [command] [args]     e.g. acpx claude sessions new
  acpx [options] <agent> <prompt text…>       same as `acpx <agent> prompt <text…>`
  acpx [options] <command> [args]             uses the default agent (config `defaultAgent`, else codex)

The first word that is not an option is a command if it names one, otherwise it must name an
agent. To send prompt text with the default agent, say `acpx prompt \"…\"`.

Agents: acpx config show lists them; --agent <command> runs any ACP agent command line.

Examples:
  acpx sessions new                           start a session for codex in this directory
  acpx codex 'fix the failing test'           one turn in that session
  acpx --format json prompt -s api 'hi'       every recorded event as JSON, one per line
  acpx --format acp codex 'hi'                the turn's raw ACP JSON-RPC frames (Node acpx's json)
  acpx sessions events --follow               watch a session's event log as it grows
  echo 'summarize' | acpx exec                one-shot, nothing stored

Files: <home>/config.json and .acpxrc.json (project) configure defaults; sessions live under
<home> (--home, ACPX_HOME, default ~/.acpx).

Exit codes: 0 ok (a cancelled turn included), 1 runtime error (also: stdout failed, e.g.
/dev/full, after the turn was recorded), 2 usage (any unknown option), 3 timeout, 4 no session,
5 permission denied, 130 interrupted (SIGINT or SIGTERM: the turn is cancelled through ACP and
recorded first). A stdout closed by its reader (`| head`) keeps the turn's own status.
Prompt text that starts with a dash follows `--`: acpx codex -- -v means verbose";

/// The root of the grammar.
#[derive(Debug, Parser)]
#[command(
    name = "acpx",
    version,
    about = ABOUT,
    long_about = LONG_ABOUT,
    after_help = AFTER_HELP,
    subcommand_required = true,
    arg_required_else_help = true,
    args_override_self = true
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// Options accepted anywhere on the command line.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Global options")]
pub struct GlobalArgs {
    /// Run this agent command line instead of a named agent (e.g. "./my-agent --acp")
    #[arg(long, global = true, value_name = "COMMAND")]
    pub agent: Option<String>,

    /// Work in this directory instead of the current one
    #[arg(long, global = true, value_name = "DIR")]
    pub cwd: Option<PathBuf>,

    /// Output format [default: text, or `format` from the config]
    #[arg(long, global = true, value_enum, value_name = "FORMAT")]
    pub format: Option<Format>,

    /// Storage backend [default: fs, or `store` from the config]
    #[arg(
        long,
        global = true,
        value_enum,
        env = "ACPX_STORE",
        hide_env_values = true,
        value_name = "BACKEND"
    )]
    pub store: Option<Backend>,

    /// Where acpx keeps its config and sessions [default: ~/.acpx]
    #[arg(
        long,
        global = true,
        env = "ACPX_HOME",
        hide_env_values = true,
        value_name = "DIR"
    )]
    pub home: Option<PathBuf>,

    /// Approve every permission request of the agent
    #[arg(long, global = true, conflicts_with_all = ["approve_reads", "deny_all"])]
    pub approve_all: bool,

    /// Approve reads and searches, ask for anything else (deny without a terminal) [default]
    #[arg(long, global = true, conflicts_with = "deny_all")]
    pub approve_reads: bool,

    /// Deny every permission request of the agent
    #[arg(long, global = true)]
    pub deny_all: bool,

    /// Give up on a turn after this many seconds (exit 3). Every other request to the agent
    /// (initialize, session/new, load, set-mode, …) gives up after 120 s, or
    /// `requestTimeout` from the config, or this value when it is shorter
    // allow_negative_numbers (here and on every numeric option): without it clap reads
    // `--timeout -1` as a missing value followed by an unknown flag `-1`, and the error names
    // neither the option nor the range; with it the value parser says both.
    #[arg(long, allow_negative_numbers = true, global = true, value_name = "SECONDS", value_parser = crate::durations::timeout_flag)]
    pub timeout: Option<f64>,

    /// Without a terminal to ask: deny the operation (default), or fail the turn (exit 5)
    #[arg(long, global = true, value_enum, value_name = "POLICY")]
    pub non_interactive_permissions: Option<NonInteractivePermissions>,

    /// When the agent cannot restore the session's ACP session: continue in a new one
    /// (allow-new, the default, said on stderr) or fail (same-session-only)
    #[arg(long, global = true, value_enum, value_name = "POLICY")]
    pub resume_policy: Option<ResumePolicy>,

    /// MCP servers for the agent, from a JSON file ({"mcpServers": {...}} or ACP's array);
    /// stored with the session and sent again on every later command
    #[arg(long, global = true, value_name = "FILE")]
    pub mcp_config: Option<PathBuf>,

    /// Another workspace root for the session (repeatable; the agent must support it): sent
    /// to the agent, stored with the session and sent again on every later command
    #[arg(long = "add-dir", global = true, value_name = "DIR")]
    pub add_dir: Vec<PathBuf>,

    /// Select this model (stored with the session and set again on every later command)
    #[arg(long, global = true, value_name = "MODEL")]
    pub model: Option<String>,

    /// Print more about what acpx is doing (on stderr)
    #[arg(long, short = 'v', global = true)]
    pub verbose: bool,

    /// Keep the session's queue owner (its warm agent) this many seconds after its last task;
    /// 0 keeps it until the session is closed [default: 300, or `ttl` from the config]
    #[arg(long, allow_negative_numbers = true, global = true, value_name = "SECONDS", value_parser = crate::durations::ttl_flag)]
    pub ttl: Option<u64>,

    /// Run the agent in this process for this command only (no background queue owner)
    /// [default: `noOwner` from the config, else false]
    #[arg(long, global = true)]
    pub no_owner: bool,

    /// Permission rules, as JSON or a JSON file: {"autoApprove": [...], "autoDeny": [...],
    /// "escalate": [...], "defaultAction": "approve|deny|escalate"}; a rule is a tool kind, a
    /// title, a word of the title, or *; deny > escalate > approve, then defaultAction, then
    /// the permission mode
    #[arg(
        long,
        visible_alias = "policy",
        global = true,
        value_name = "JSON|FILE"
    )]
    pub permission_policy: Option<String>,

    /// Answers to the agent's form elicitations: a JSON object file, by field name; each form
    /// is answered with the fields it asks for (checked against its schema) or declined
    #[arg(long, global = true, value_name = "FILE")]
    pub elicitation_answers: Option<PathBuf>,

    /// Retry a prompt up to N times when it fails transiently (agent error -32603 or -32700)
    /// before any update or client operation; each attempt is recorded as a turn [default: 0]
    #[arg(long, allow_negative_numbers = true, global = true, value_name = "N")]
    pub prompt_retries: Option<u32>,

    /// JSON only: stdout carries JSON lines and stderr stays silent (needs --format json or
    /// acp; not with --verbose)
    #[arg(long, global = true, conflicts_with = "verbose")]
    pub json_strict: bool,

    /// Neither advertise nor serve fs/read_text_file and fs/write_text_file (the agent is
    /// told why if it calls them anyway)
    #[arg(long, global = true)]
    pub no_fs: bool,

    /// Neither advertise nor serve terminal/* (the agent is told why if it calls anyway)
    #[arg(long, global = true)]
    pub no_terminal: bool,

    /// When the agent lists auth methods and no credential (ACPX_AUTH_<METHOD>, or `auth` in
    /// the config) matches: go on (skip) or fail (exit 1) [default: `authPolicy` from the
    /// config, else skip]
    #[arg(long, global = true, value_enum, value_name = "POLICY")]
    pub auth_policy: Option<AuthPolicy>,
}

fn parse_config_option(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_owned(), v.to_owned())),
        _ => Err(format!("{s:?} is not KEY=VALUE")),
    }
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Send a prompt to the session of this agent and directory (the default command)
    #[command(
        after_help = "The session is the one of (agent, directory, --session name), found by walking from the\n\
working directory up to the git root. Create one first with `acpx sessions new`.\n\
With no text and no --file, the prompt is read from stdin.\n\
Ctrl-C or SIGTERM cancels the turn (it ends with stopReason cancelled, exit 130); a second\n\
Ctrl-C stops the agent."
    )]
    Prompt(PromptArgs),

    /// Run one prompt in a fresh session that is not stored
    Exec(ExecArgs),

    /// Cancel the prompt running in a session (from another terminal)
    Cancel(SessionSelect),

    /// Set the session's ACP mode (e.g. ask, code); the mode ids come from the agent
    #[command(name = "set-mode")]
    SetMode(SetModeArgs),

    /// Set one of the session's ACP config options (e.g. model)
    Set(SetArgs),

    /// Show whether the session is running, idle or dead, with its ids
    Status(SessionSelect),

    /// Create, list, inspect, export and maintain sessions
    #[command(subcommand_required = false, args_conflicts_with_subcommands = true)]
    Sessions(SessionsArgs),

    /// Check every stored session for damage; --repair fixes what can be fixed
    Fsck(FsckArgs),

    /// Copy every session to the other storage backend and verify the copy
    Migrate(MigrateArgs),

    /// Show the resolved configuration and the known agents
    Config(ConfigArgs),

    /// Send a recorded session's prompts again, in order, to an agent (the source's, or the
    /// one named: `acpx claude replay SESSION`), in a new session linked to the source
    #[command(
        after_help = "The new session runs in the source's directory and is closed after its last turn. A permission\n\
question about the same tool call (title, kind and input) is answered as the source answered it;\n\
any other goes to the usual policy (--approve-all, --permission-policy, …).\n\
Compare the two with `acpx sessions diff SOURCE NEW`."
    )]
    Replay(ReplayArgs),

    /// Send one prompt to several agents at once, each in a new stored session, and show
    /// their stop reasons, tokens, cost and wall time side by side
    #[command(
        after_help = "The agents: one --agent for each (repeatable), a name from `acpx config show` or a command line,\n\
e.g. acpx compare 'fix the test' --agent codex --agent claude --agent './my-agent --acp'.\n\
Each run is a stored session of its own in this directory (closed after its turn); the table's\n\
RECORD ID opens it: acpx sessions read <id>, acpx sessions diff <id> <other id>."
    )]
    Compare(CompareArgs),

    /// Speak ACP on stdin/stdout as the agent of a recorded session: its capabilities, its
    /// updates, tool calls and permission questions, with their recorded pacing
    #[command(
        name = "serve-agent",
        after_help = "Point any ACP client at it, e.g. acpx --agent 'acpx serve-agent SESSION --fast' sessions new.\n\
Each prompt must be the next recorded one (by its text); another is refused with JSON-RPC\n\
error -32602 naming the prompt expected. Gaps between events are kept up to 2 s each."
    )]
    ServeAgent(ServeAgentArgs),

    /// Print a shell completion script (e.g. `acpx completions bash > /etc/bash_completion.d/acpx`)
    Completions(CompletionsArgs),

    /// Print a manual page (roff; e.g. `acpx man | man -l -`, `acpx man sessions list`)
    Man(ManArgs),

    /// The queue owner of one session (started by acpx itself, detached)
    #[command(name = "__owner", hide = true)]
    Owner(OwnerArgs),
}

/// `__owner`: serve one session's queue.
#[derive(Debug, Args)]
pub struct OwnerArgs {
    /// The session's record id
    #[arg(long = "record-id", value_name = "ID")]
    pub record_id: String,

    /// The most tasks waiting behind the running one
    #[arg(long = "queue-max-depth", value_name = "N")]
    pub queue_max_depth: usize,
}

/// The names clap knows as commands (for telling a command from an agent name).
pub const COMMAND_NAMES: &[&str] = &[
    "prompt",
    "exec",
    "cancel",
    "set-mode",
    "set",
    "status",
    "sessions",
    "fsck",
    "migrate",
    "config",
    "completions",
    "man",
    "help",
    "replay",
    "compare",
    "serve-agent",
    "__owner",
];

/// `replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The session to replay: record id, ACP session id, a unique prefix or suffix of
    /// either, or a session name in scope
    #[arg(value_name = "SESSION")]
    pub session: String,
    /// Send only the first N prompts
    #[arg(long, allow_negative_numbers = true, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub until: Option<u64>,
}

/// `compare`.
#[derive(Debug, Args)]
pub struct CompareArgs {
    /// Read the prompt from this file ("-" for stdin)
    #[arg(short = 'f', long = "file", value_name = "PATH")]
    pub file: Option<String>,
    /// The agents, from every --agent (a name or a command line); the grammar moves them
    /// here, since --agent is otherwise one global agent
    #[arg(long = "compare-agent", hide = true, value_name = "AGENT")]
    pub agents: Vec<String>,
    /// The prompt text (words are joined with spaces; after `--` words may start with a dash)
    #[arg(value_name = "TEXT")]
    pub text: Vec<String>,
}

/// `serve-agent`.
#[derive(Debug, Args)]
pub struct ServeAgentArgs {
    /// The recorded session to serve
    #[arg(value_name = "SESSION")]
    pub session: String,
    /// Play the recorded updates without their recorded pauses
    #[arg(long)]
    pub fast: bool,
}

/// `sessions diff`.
#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The first session (record id, ACP session id, prefix, suffix or name in scope)
    #[arg(value_name = "A")]
    pub a: String,
    /// The second session
    #[arg(value_name = "B")]
    pub b: String,
}

/// `man`.
#[derive(Debug, Args)]
pub struct ManArgs {
    /// The command whose page to print (`sessions list`: acpx-sessions-list(1)); none: acpx(1)
    pub command: Vec<String>,
}

/// `completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// `-s/--session <name>`: the named session of this agent and directory.
#[derive(Debug, Clone, Args)]
pub struct SessionSelect {
    /// The session's name (sessions without a name are used when absent)
    #[arg(short = 's', long = "session", value_name = "NAME")]
    pub session: Option<String>,
}

#[derive(Debug, Args)]
pub struct PromptArgs {
    /// The session's name (sessions without a name are used when absent)
    #[arg(short = 's', long = "session", value_name = "NAME")]
    pub session: Option<String>,

    /// Read the prompt from this file ("-" for stdin)
    #[arg(short = 'f', long = "file", value_name = "PATH")]
    pub file: Option<String>,

    /// Return as soon as the session's queue owner accepted the prompt (it runs in the
    /// background; its events are in the log)
    #[arg(long = "no-wait")]
    pub no_wait: bool,

    /// Send the finished turn's spans to this OpenTelemetry collector (OTLP/HTTP JSON,
    /// http:// only; default: $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, else
    /// $OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces)
    #[arg(long = "otlp-endpoint", value_name = "URL")]
    pub otlp_endpoint: Option<String>,

    /// The prompt text (words are joined with spaces; after `--` words may start with a dash)
    #[arg(value_name = "TEXT")]
    pub text: Vec<String>,
}

#[derive(Debug, Args)]
pub struct ExecArgs {
    /// Read the prompt from this file ("-" for stdin)
    #[arg(short = 'f', long = "file", value_name = "PATH")]
    pub file: Option<String>,

    /// Set this ACP config option before the prompt (repeatable, in order), e.g.
    /// --config-option model=large
    #[arg(long = "config-option", value_name = "KEY=VALUE", value_parser = parse_config_option)]
    pub config_options: Vec<(String, String)>,

    /// The prompt text (words are joined with spaces; after `--` words may start with a dash)
    #[arg(value_name = "TEXT")]
    pub text: Vec<String>,
}

#[derive(Debug, Args)]
pub struct SetModeArgs {
    #[command(flatten)]
    pub select: SessionSelect,
    /// The mode id, as the agent names it
    pub mode: String,
}

#[derive(Debug, Args)]
pub struct SetArgs {
    #[command(flatten)]
    pub select: SessionSelect,
    /// The config option id (e.g. model)
    pub key: String,
    /// Its new value
    pub value: String,
}

#[derive(Debug, Args)]
pub struct FsckArgs {
    /// Roll snapshots forward from their logs and set torn tails aside
    #[arg(long)]
    pub repair: bool,
}

#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// The backend to copy to (the source is --store)
    #[arg(long, value_enum, value_name = "BACKEND")]
    pub to: Backend,
}

#[derive(Debug, Args)]
pub struct ConfigArgs {
    #[command(subcommand)]
    pub command: Option<ConfigCommand>,
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Show the resolved configuration and the known agents (the default)
    Show,
    /// Write <home>/config.json: every setting at its default, each explained by a
    /// "// key" entry (refuses to replace an existing file without --force)
    Init(ConfigInitArgs),
}

#[derive(Debug, Args)]
pub struct ConfigInitArgs {
    /// Replace an existing config file
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Args)]
pub struct SessionsArgs {
    #[command(subcommand)]
    pub command: Option<SessionsCommand>,
    #[command(flatten)]
    pub list: ListArgs,
}

/// Picks one stored session: by id, or by name in this agent's scope.
#[derive(Debug, Clone, Args)]
pub struct Target {
    /// Record id, ACP session id, a session name in scope, or a unique prefix or suffix of either id
    #[arg(value_name = "SESSION")]
    pub id: Option<String>,
    /// The session's name in this agent's scope (the unnamed session when absent)
    #[arg(
        short = 's',
        long = "session",
        value_name = "NAME",
        conflicts_with = "id"
    )]
    pub session: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum SessionsCommand {
    /// Create a session (closing the open one with the same agent, directory and name)
    New(NewArgs),
    /// Return the session of this agent, directory and name, creating it if there is none
    Ensure(EnsureArgs),
    /// List stored sessions, newest first
    List(ListArgs),
    /// Show a session's record (identity, lifecycle, last turn)
    Show(Target),
    /// Close a session: it stays stored and listable, but prompts no longer find it
    Close(Target),
    /// Accept an imported session: show the agent command and MCP servers its archive names
    /// and let it run them, or, with an agent named (`acpx <agent> sessions trust`), continue
    /// it with that agent instead
    Trust(TrustArgs),
    /// Delete a session and its whole event log
    Delete(DeleteArgs),
    /// Fork a session into a new one that starts from the same conversation
    Fork(ForkArgs),
    /// Adopt a session the agent made elsewhere (an editor, another client): a new record
    /// attached to it through session/load (or session/resume), with the history the agent
    /// replays recorded; then an ordinary session (`sessions list --from-agent` lists the
    /// agent's sessions)
    Adopt(AdoptArgs),
    /// Show the conversation
    History(HistoryArgs),
    /// Show the session's event log
    Events(EventsArgs),
    /// A readable transcript of the whole conversation, thinking and tool calls included
    Read(ReadArgs),
    /// Replay the session's event log, then follow it (across processes) until the session
    /// is closed
    Watch(WatchArgs),
    /// Write a session out as an HTML page, Markdown, session JSON, NDJSON log, or an importable archive
    Export(ExportArgs),
    /// Import an exported session, or sessions written by the Node acpx
    Import(ImportArgs),
    /// Delete closed sessions older than a cutoff (every closed session when none is given)
    Prune(PruneArgs),
    /// Search the conversations of every session
    Search(SearchArgs),
    /// Compare two sessions turn by turn (a replay and its source, say): replies, tool calls
    /// and their files, stop reasons, tokens, cost, wall time
    Diff(DiffArgs),
    /// Tokens and cost the agents reported, summed per session, agent, day or model
    Usage(UsageArgs),
}

#[derive(Debug, Args)]
pub struct NewArgs {
    /// Name the session (several sessions can then share a directory)
    #[arg(long, short = 's', visible_alias = "session", value_name = "NAME", value_parser = session_name)]
    pub name: Option<String>,
    /// Attach to an existing ACP session of the agent instead of creating one
    #[arg(long, value_name = "ACP_SESSION_ID")]
    pub resume_session: Option<String>,
}

#[derive(Debug, Args)]
pub struct EnsureArgs {
    /// The session's name
    #[arg(long, short = 's', visible_alias = "session", value_name = "NAME", value_parser = session_name)]
    pub name: Option<String>,
}

#[derive(Debug, Clone, Default, Args)]
pub struct ListArgs {
    /// Only sessions whose directory is DIR (with --from-agent: instead of the current one)
    #[arg(long, value_name = "DIR")]
    pub filter_cwd: Option<PathBuf>,
    /// Only sessions with this name
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Only open sessions
    #[arg(long, conflicts_with = "closed")]
    pub open: bool,
    /// Only closed sessions
    #[arg(long)]
    pub closed: bool,
    /// At most this many sessions per page (with --from-agent: in all)
    #[arg(long, allow_negative_numbers = true, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub limit: Option<u64>,
    /// Continue after the page that printed this cursor (with --from-agent: the agent's cursor)
    #[arg(long, value_name = "CURSOR")]
    pub cursor: Option<String>,
    /// The sessions the agent itself keeps (ACP session/list), of the current directory
    /// unless --filter-cwd or --all-cwds; every page unless --limit
    #[arg(long, conflicts_with_all = ["name", "open", "closed"])]
    pub from_agent: bool,
    /// With --from-agent: the agent's sessions of every directory
    #[arg(long, requires = "from_agent", conflicts_with = "filter_cwd")]
    pub all_cwds: bool,
}

#[derive(Debug, Args)]
pub struct AdoptArgs {
    /// The agent's ACP session id (`sessions list --from-agent` lists them)
    #[arg(value_name = "ACP_SESSION_ID")]
    pub acp_session_id: String,
    /// Name the new session
    #[arg(long, short = 's', visible_alias = "session", value_name = "NAME", value_parser = session_name)]
    pub name: Option<String>,
}

#[derive(Debug, Args)]
pub struct DeleteArgs {
    #[command(flatten)]
    pub target: Target,
    /// Also delete an open session (close it first otherwise)
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Args)]
pub struct ForkArgs {
    #[command(flatten)]
    pub target: Target,
    /// Name of the new session
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
}

#[derive(Debug, Args)]
pub struct HistoryArgs {
    #[command(flatten)]
    pub target: Target,
    /// Only the last N messages
    #[arg(long, allow_negative_numbers = true, value_name = "N")]
    pub limit: Option<usize>,
    /// Show thinking and tool calls in full
    #[arg(long)]
    pub full: bool,
}

#[derive(Debug, Args)]
pub struct ReadArgs {
    #[command(flatten)]
    pub target: Target,
    /// Only the last N messages
    #[arg(long, allow_negative_numbers = true, value_name = "N")]
    pub tail: Option<usize>,
}

#[derive(Debug, Args)]
pub struct WatchArgs {
    #[command(flatten)]
    pub target: Target,
    /// Start at this seq instead of replaying the whole log
    #[arg(
        long,
        allow_negative_numbers = true,
        value_name = "SEQ",
        default_value_t = 1
    )]
    pub from_seq: u64,
}

#[derive(Debug, Args)]
pub struct EventsArgs {
    #[command(flatten)]
    pub target: Target,
    /// Only events of this type (repeatable), e.g. session_update, prompt_done
    #[arg(long = "type", value_name = "TYPE")]
    pub types: Vec<String>,
    /// Only events of this stream (repeatable): prompt, control, lifecycle, queue
    #[arg(long = "stream", value_name = "STREAM")]
    pub streams: Vec<String>,
    /// Only events of this prompt or control request
    #[arg(long, value_name = "ID")]
    pub request_id: Option<String>,
    /// Start at this seq
    #[arg(
        long,
        allow_negative_numbers = true,
        value_name = "SEQ",
        default_value_t = 1
    )]
    pub from_seq: u64,
    /// At most this many events
    #[arg(long, allow_negative_numbers = true, value_name = "N")]
    pub limit: Option<usize>,
    /// Keep printing new events as they are written, until the session is closed or Ctrl-C
    #[arg(long, short = 'F')]
    pub follow: bool,
    /// Skip damaged lines (reporting them) instead of failing
    #[arg(long)]
    pub lenient: bool,
}

/// What `sessions export` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExportKind {
    /// The session JSON and its event log in one NDJSON file, for `sessions import`
    Archive,
    /// A readable Markdown transcript
    Markdown,
    /// The session.json document
    Json,
    /// The NDJSON event log
    Ndjson,
    /// An ATIF v1.8 trajectory (Harbor's Agent Trajectory Interchange Format), for
    /// evaluation harnesses
    Atif,
    /// One OpenTelemetry trace as OTLP/JSON (an ExportTraceServiceRequest), for tracing
    /// backends
    Otlp,
    /// One self-contained HTML page to read or share: every turn, tool call, diff, terminal,
    /// permission answer, tokens and cost, with search (no network, nothing recorded runs)
    Html,
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    #[command(flatten)]
    pub target: Target,
    /// What to write
    #[arg(
        long = "as",
        value_enum,
        default_value = "archive",
        value_name = "KIND"
    )]
    pub kind: ExportKind,
    /// Write to this file instead of stdout
    #[arg(long, short = 'o', value_name = "PATH")]
    pub output: Option<PathBuf>,
    /// With -o: write through a symbolic link, or into a file of another user you may write
    /// (refused otherwise: a link planted in a shared directory would send the conversation
    /// elsewhere)
    #[arg(long, requires = "output")]
    pub force: bool,
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// An archive, or a session.json (with --events for its log)
    #[arg(
        value_name = "FILE",
        required_unless_present = "from_node_acpx",
        conflicts_with = "from_node_acpx"
    )]
    pub file: Option<PathBuf>,
    /// The NDJSON event log that goes with a session.json
    #[arg(long, value_name = "FILE")]
    pub events: Option<PathBuf>,
    /// Import under a fresh record id (when the original id is taken)
    #[arg(long)]
    pub new_id: bool,
    /// Import every session of a Node acpx 0.19 home (or its sessions directory), or a Node
    /// `sessions export` archive
    #[arg(long, value_name = "DIR")]
    pub from_node_acpx: Option<PathBuf>,
    /// With --from-node-acpx: show what would be imported, store nothing
    #[arg(long, requires = "from_node_acpx")]
    pub dry_run: bool,
    /// Let the imported session run the agent command and MCP servers its archive names
    /// (shown); without it they are kept as information until `sessions trust`
    #[arg(long, conflicts_with = "from_node_acpx")]
    pub trust: bool,
}

#[derive(Debug, Args)]
pub struct TrustArgs {
    /// Record id, ACP session id, or a unique prefix or suffix of either id
    #[arg(value_name = "SESSION")]
    pub id: String,
}

#[derive(Debug, Args)]
pub struct PruneArgs {
    /// Only sessions closed before this date (RFC 3339 or YYYY-MM-DD)
    #[arg(long, value_name = "DATE", conflicts_with = "older_than")]
    pub before: Option<String>,
    /// Only sessions closed more than this many days ago
    #[arg(long, allow_negative_numbers = true, value_name = "DAYS")]
    pub older_than: Option<f64>,
    /// Show what would be pruned without deleting anything
    #[arg(long)]
    pub dry_run: bool,
    /// Delete the event logs too (otherwise each log is kept in <home>/pruned/)
    #[arg(long)]
    pub include_history: bool,
}

#[derive(Debug, Args)]
pub struct SearchArgs {
    /// Words that must all occur in a message (case-insensitive)
    #[arg(required = true, value_name = "TEXT")]
    pub text: Vec<String>,
    /// Only sessions whose directory is DIR
    #[arg(long, value_name = "DIR")]
    pub filter_cwd: Option<PathBuf>,
    /// At most this many hits
    #[arg(
        long,
        allow_negative_numbers = true,
        value_name = "N",
        default_value_t = 50
    )]
    pub limit: usize,
}

#[derive(Debug, Args)]
pub struct UsageArgs {
    /// Only this session (record id, ACP session id, name, or a unique prefix or suffix);
    /// every stored session when absent
    #[arg(value_name = "SESSION")]
    pub session: Option<String>,
    /// One row per session, agent, day (of the session's last prompt, UTC) or model
    #[arg(long, value_name = "GROUP", default_value = "session",
          value_parser = ["session", "agent", "day", "model"])]
    pub by: String,
    /// Only sessions whose day is this one or later (YYYY-MM-DD or YYYYMMDD, UTC)
    #[arg(long, value_name = "DATE")]
    pub since: Option<String>,
    /// Only sessions whose day is this one or earlier (YYYY-MM-DD or YYYYMMDD, UTC)
    #[arg(long, value_name = "DATE")]
    pub until: Option<String>,
}

/// A name for a new session: any text a terminal shows as written (no control characters,
/// which would move the cursor or recolour the screen wherever the name is listed).
fn session_name(s: &str) -> Result<String, String> {
    if s.chars().any(char::is_control) {
        Err(
            "a session name cannot contain control characters (escape sequences, tabs, newlines)"
                .into(),
        )
    } else if s.trim().is_empty() {
        Err("a session name cannot be empty".into())
    } else {
        Ok(s.to_owned())
    }
}
