//! The resolved settings of one invocation: flags over environment over config over
//! defaults. A front end parses its command line into [`Flags`], loads the config files
//! ([`load_config_lenient`]) and the agent registry, and [`Settings::resolve`] decides every
//! setting once, checking what the flags name (files, directories, the agent) on the way.
//!
//! | module | job |
//! |---|---|
//! | [`read`] | the files and directories flags name: `--mcp-config`, `--permission-policy`, `--elicitation-answers`, `--cwd`, `--home` |
//! | [`sources`] | every setting with where it came from (a flag, a variable, a config file, the default) |

pub mod read;
pub mod sources;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::time::Duration;

use acpx_runtime::mcp_servers::McpServers;
use acpx_runtime::permission_rules::PermissionRules;
use acpx_runtime::{
    AuthPolicy, ElicitationAnswers, Invocation, NonInteractivePermissions, PermissionMode,
    ResumePolicy,
};

use crate::agents::{AgentChoice, AgentChoiceError, AgentRegistry};
use crate::config_file::{Backend, ConfigFile, ConfigFileError, OutputFormat};
use crate::problem::Problem;

/// The settings as the command line gave them (`None`/`false`/empty: not given). A front end
/// fills it from its parsed arguments; [`Settings::resolve`] puts the config and the defaults
/// under it.
#[derive(Debug, Clone, Default)]
pub struct Flags {
    /// `--agent`: an agent command line instead of a named agent.
    pub agent: Option<String>,
    /// `--format`.
    pub format: Option<OutputFormat>,
    /// `--json-strict`: JSON only (needs a JSON format).
    pub json_strict: bool,
    /// `-v`/`--verbose`.
    pub verbose: bool,
    /// `--store` (or `ACPX_STORE`).
    pub store: Option<Backend>,
    /// `--approve-all`.
    pub approve_all: bool,
    /// `--approve-reads`.
    pub approve_reads: bool,
    /// `--deny-all`.
    pub deny_all: bool,
    /// `--timeout`, in seconds.
    pub timeout: Option<f64>,
    /// `--non-interactive-permissions`.
    pub non_interactive_permissions: Option<NonInteractivePermissions>,
    /// `--resume-policy`.
    pub resume_policy: Option<ResumePolicy>,
    /// `--mcp-config`: a file of MCP servers.
    pub mcp_config: Option<PathBuf>,
    /// `--add-dir` (repeatable).
    pub add_dir: Vec<PathBuf>,
    /// `--model`.
    pub model: Option<String>,
    /// `--ttl`, in seconds.
    pub ttl: Option<u64>,
    /// `--no-owner`.
    pub no_owner: bool,
    /// `--permission-policy`: the rules as JSON, or a file holding them.
    pub permission_policy: Option<String>,
    /// `--elicitation-answers`: a file of answers by field name.
    pub elicitation_answers: Option<PathBuf>,
    /// `--prompt-retries`.
    pub prompt_retries: Option<u32>,
    /// `--no-fs`.
    pub no_fs: bool,
    /// `--no-terminal`.
    pub no_terminal: bool,
    /// `--auth-policy`.
    pub auth_policy: Option<AuthPolicy>,
}

/// Everything a command needs to know about how it was asked to run.
#[derive(Debug)]
pub struct Settings {
    /// The output format.
    pub format: OutputFormat,
    /// `-v`/`--verbose`.
    pub verbose: bool,
    /// The acpx home (config, sessions).
    pub home: PathBuf,
    /// The working directory.
    pub cwd: PathBuf,
    /// The storage backend.
    pub backend: Backend,
    /// What to do with the agent's permission requests.
    pub permission: PermissionMode,
    /// How long a turn may take.
    pub timeout: Option<Duration>,
    /// The queue owner's idle time-to-live in seconds (0: until the session is closed).
    pub ttl: u64,
    /// Whether the TTL was given (`--ttl`, or `ttl` in a config file) rather than the
    /// default: only then does a task change a warm owner's.
    pub ttl_given: bool,
    /// Run the agent in this process (no queue owner).
    pub no_owner: bool,
    /// The most tasks waiting in a session's queue.
    pub queue_max_depth: usize,
    /// The config files, merged.
    pub config: ConfigFile,
    /// The agent names this invocation knows.
    pub registry: AgentRegistry,
    /// The agent chosen.
    pub agent: AgentChoice,
    /// `--mcp-config`: MCP servers for this invocation (stored in the session).
    pub mcp_servers: Option<McpServers>,
    /// `--add-dir`, else config `additionalDirectories`: canonical (empty: the record's).
    pub additional_directories: Vec<PathBuf>,
    /// `--model`.
    pub model: Option<String>,
    /// `--resume-policy`, else config `resumePolicy`.
    pub resume_policy: ResumePolicy,
    /// `--non-interactive-permissions`, else config `nonInteractivePermissions`.
    pub non_interactive: NonInteractivePermissions,
    /// `--permission-policy` rules.
    pub permission_rules: Option<PermissionRules>,
    /// `--elicitation-answers`, read.
    pub elicitation_answers: Option<ElicitationAnswers>,
    /// `--prompt-retries`.
    pub prompt_retries: u32,
    /// `--auth-policy`, else config `authPolicy`.
    pub auth_policy: AuthPolicy,
    /// `--no-fs`: the client neither advertises nor serves `fs/*`.
    pub no_fs: bool,
    /// `--no-terminal`: the client neither advertises nor serves `terminal/*`.
    pub no_terminal: bool,
    /// Whether the store settles every load (a command that reads sessions sets it before
    /// the store is first opened); false unless set.
    pub settle_loads: bool,
}

impl Settings {
    /// Resolves the flags over the config over the defaults. `agent_word` is the positional
    /// agent taken out of the command line. `warn` is told each thing worth a warning found
    /// on the way (the config's unknown keys: a typo'd key silently does nothing otherwise).
    pub fn resolve(
        flags: Flags,
        agent_word: Option<String>,
        home: PathBuf,
        cwd: PathBuf,
        config: ConfigFile,
        registry: AgentRegistry,
        warn: &mut dyn FnMut(&str),
    ) -> Result<Settings, Problem> {
        let format = Settings::output_format(&flags, &config);
        if flags.json_strict && !format.is_json() {
            return Err(Problem::usage("--json-strict needs --format json (or acp)")
                .with_hint("add --format json (or set `format` to json in the config)"));
        }
        let backend = flags.store.or(config.store).unwrap_or(Backend::Fs);
        let permission = if flags.approve_all {
            PermissionMode::ApproveAll
        } else if flags.deny_all {
            PermissionMode::DenyAll
        } else if flags.approve_reads {
            PermissionMode::ApproveReads
        } else {
            config
                .default_permissions
                .unwrap_or(PermissionMode::ApproveReads)
        };
        let timeout = flags
            .timeout
            .or(config.timeout)
            .map(Duration::from_secs_f64);
        let ttl_given = flags.ttl.is_some() || config.ttl.is_some();
        let ttl = flags
            .ttl
            .or(config.ttl)
            .unwrap_or(acpx_owner::DEFAULT_TTL.as_secs());
        let no_owner = flags.no_owner || config.no_owner;
        let queue_max_depth = config
            .queue_max_depth
            .unwrap_or(acpx_owner::DEFAULT_QUEUE_MAX_DEPTH);
        let agent = choose_agent(&registry, agent_word, flags.agent, &config)?;
        for unknown in &config.unknown_keys {
            warn(unknown);
        }
        let mcp_servers = match &flags.mcp_config {
            Some(p) => Some(read::mcp_config(p)?),
            None => None,
        };
        let additional_directories = if flags.add_dir.is_empty() {
            let configured = config.additional_directories.clone().unwrap_or_default();
            read::dirs(&configured, "config additionalDirectories")?
        } else {
            read::dirs(&flags.add_dir, "--add-dir")?
        };
        if flags.model.as_deref().is_some_and(|m| m.trim().is_empty()) {
            return Err(Problem::usage("--model needs a model id"));
        }
        let resume_policy = flags
            .resume_policy
            .or(config.resume_policy)
            .unwrap_or_default();
        let non_interactive = flags
            .non_interactive_permissions
            .or(config.non_interactive)
            .unwrap_or_default();
        let auth_policy = flags.auth_policy.or(config.auth_policy).unwrap_or_default();
        Ok(Settings {
            format,
            verbose: flags.verbose,
            auth_policy,
            mcp_servers,
            additional_directories,
            model: flags.model.clone(),
            permission_rules: flags
                .permission_policy
                .as_deref()
                .map(read::permission_policy)
                .transpose()?,
            elicitation_answers: flags
                .elicitation_answers
                .as_deref()
                .map(read::elicitation_answers)
                .transpose()?,
            prompt_retries: flags.prompt_retries.unwrap_or(0),
            no_fs: flags.no_fs,
            no_terminal: flags.no_terminal,
            resume_policy,
            non_interactive,
            home,
            cwd,
            backend,
            permission,
            timeout,
            ttl,
            ttl_given,
            no_owner,
            queue_max_depth,
            config,
            registry,
            agent,
            settle_loads: false,
        })
    }

    /// The output format: `--format`, else the config's `format`, else text (known before
    /// the rest is resolved, to say what resolving finds).
    pub fn output_format(flags: &Flags, config: &ConfigFile) -> OutputFormat {
        flags.format.or(config.format).unwrap_or(OutputFormat::Text)
    }

    /// This command's options for the session engine, decided once: the one-process path
    /// applies them to its runtime, the queue owner receives them with the task.
    pub fn invocation(&self) -> Invocation {
        Invocation {
            permission_mode: self.permission,
            timeout: self.timeout,
            non_interactive: Some(self.non_interactive),
            elicitation_answers: self.elicitation_answers.as_deref().cloned(),
            resume_policy: Some(self.resume_policy),
            mcp_servers: self.mcp_servers.clone(),
            default_mcp_servers: self.config.mcp_servers.clone(),
            additional_directories: self.additional_directories.clone(),
            model: self.model.clone(),
            prompt_retries: Some(self.prompt_retries),
            permission_policy: self.permission_rules.clone(),
            auth_policy: Some(self.auth_policy),
            no_fs: self.no_fs,
            no_terminal: self.no_terminal,
        }
    }

    /// The authority directory of `backend`'s store under this home
    /// ([`acpx_owner::authority`]: where its sessions' queue owners, `--no-owner` runs and
    /// scope locks are found), created when missing.
    pub fn authority_of(&self, backend: Backend) -> Result<PathBuf, Problem> {
        let identity =
            crate::store_open::identity(backend, &self.home, self.config.store_url.as_ref())?;
        acpx_owner::authority::authority_dir(&identity).map_err(|e| {
            Problem::runtime(format!("cannot prepare the runtime directory: {e}")).with_hint(
                "set XDG_RUNTIME_DIR to a directory of yours with mode 0700, or remove the one named",
            )
        })
    }
}

/// The agent of this invocation ([`AgentRegistry::choose`]), its refusals with what to do.
fn choose_agent(
    registry: &AgentRegistry,
    agent_word: Option<String>,
    agent_flag: Option<String>,
    config: &ConfigFile,
) -> Result<AgentChoice, Problem> {
    let default = config.default_agent.as_deref();
    registry
        .choose(agent_word, agent_flag, default)
        .map_err(|e| {
            let err = Problem::usage(e.to_string());
            match e {
                AgentChoiceError::Both { .. } => err.with_hint(
                    "use one of them: a name from `acpx config show`, or --agent with a command line",
                ),
                AgentChoiceError::EmptyCommand => {
                    err.with_hint("for example --agent \"./my-agent --acp\"")
                }
                AgentChoiceError::UnknownDefault(_) => Problem::usage(format!(
                    "{e} (config: {})",
                    config
                        .files
                        .iter()
                        .map(|f| f.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
                .with_hint("name a built-in agent, or define it under `agents` in the config"),
            }
        })
}

/// Reads the global file under `home` and the project file found from `cwd`; the first
/// problem in either fails the load.
pub fn load_config(home: &Path, cwd: &Path) -> Result<ConfigFile, Problem> {
    let (config, problem) = load_config_lenient(home, cwd);
    match problem {
        Some(e) => Err(e),
        None => Ok(config),
    }
}

/// The files as [`ConfigFile::load_lenient`] reads them, leniently: a file that cannot be
/// read or parsed is left out, a key with a bad value is left out, and the first such problem
/// is returned next to the settings that were good (what commands that do not need the
/// config run with).
pub fn load_config_lenient(home: &Path, cwd: &Path) -> (ConfigFile, Option<Problem>) {
    let (file, problem) = ConfigFile::load_lenient(home, cwd);
    (file, problem.map(config_problem))
}

/// A config file that cannot be used: exit 1 (`CONFIG_INVALID`), not the usage code 2,
/// since nothing on the command line is wrong (`docs/format.md` § Configuration errors).
fn config_problem(e: ConfigFileError) -> Problem {
    Problem::runtime(e.0)
        .with_hint("fix that file or remove it (the file `acpx config init` writes explains every accepted key); `acpx fsck`, `acpx sessions list`, --help and --version work without it")
        .with_detail("CONFIG_INVALID")
}

/// `config init`: writes the commented template of the global config file
/// ([`crate::config_file::TEMPLATE`]) to `<home>/config.json` and returns its path. An
/// existing file is replaced only when `force`.
pub fn init_config_file(home: &Path, force: bool) -> Result<PathBuf, Problem> {
    let path = home.join("config.json");
    if path.exists() && !force {
        return Err(Problem::usage(format!("{} already exists", path.display()))
            .with_detail("CONFIG_EXISTS")
            .with_hint("pass --force to replace it, or edit it"));
    }
    // Private (it may come to hold a store URL with its password), and never written through
    // a link planted at its path unless `--force` (a config kept in a dotfiles repository and
    // linked here is the user's own).
    let mut file = acpx_runtime::ops::transfer::create_file_for_user(&path, force)
        .map_err(|e| Problem::runtime(e.to_string()))?;
    std::io::Write::write_all(&mut file, crate::config_file::TEMPLATE.as_bytes())
        .map_err(|e| Problem::runtime(format!("cannot write {}: {e}", path.display())))?;
    Ok(path)
}
