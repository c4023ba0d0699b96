//! The resolved settings of one invocation: flags over environment over config over defaults.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use acpx_model::Store;
use acpx_runtime::mcp_servers::{read_mcp_servers_file, McpServers};
use acpx_runtime::permission_rules::PermissionRules;
use acpx_runtime::{AuthPolicy, Invocation, NonInteractivePermissions, ResumePolicy};
use tokio::sync::OnceCell;

pub use acpx_app::agents::AgentChoice;
use acpx_app::agents::AgentChoiceError;
use acpx_app::paths::{self, PathError};

use crate::agents::AgentRegistry;
use crate::backends::OpenStore;
use crate::cli::GlobalArgs;
use crate::config::{Backend, Config, Format, PermissionMode};
use crate::error::{CliError, CliResult};
use crate::output::Out;

/// Everything a command needs.
#[derive(Debug)]
pub struct Ctx {
    pub out: Out,
    pub home: PathBuf,
    pub cwd: PathBuf,
    pub backend: Backend,
    pub permission: PermissionMode,
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
    pub config: Config,
    pub registry: AgentRegistry,
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
    pub elicitation_answers: Option<acpx_runtime::ElicitationAnswers>,
    /// `--prompt-retries`.
    pub prompt_retries: u32,
    /// `--auth-policy`, else config `authPolicy`.
    pub auth_policy: AuthPolicy,
    /// `--no-fs`: the client neither advertises nor serves `fs/*`.
    pub no_fs: bool,
    /// `--no-terminal`: the client neither advertises nor serves `terminal/*`.
    pub no_terminal: bool,
    /// Whether the store settles every load ([`crate::commands::settles_loads`]); false
    /// unless set before the store is first used.
    pub settle_loads: bool,
    store: OnceCell<OpenStore>,
    authority: std::sync::OnceLock<PathBuf>,
}

/// `dirs` canonicalized; one that does not exist or is not a directory is a usage error
/// naming it and where it came from (`source`).
fn resolve_dirs(dirs: &[PathBuf], source: &str) -> CliResult<Vec<PathBuf>> {
    acpx_runtime::session::additional_dirs::resolve(dirs)
        .map_err(|e| CliError::usage(format!("{source}: {e}")))
}

/// Reads an `--mcp-config` file: `{"mcpServers": {...}}` or ACP's array. A bad file is a
/// usage error naming the file and the field.
pub fn read_mcp_config(path: &Path) -> CliResult<McpServers> {
    read_mcp_servers_file(path).map_err(|e| {
        CliError::usage(format!("--mcp-config {}: {e}", path.display()))
            .with_detail("MCP_CONFIG_INVALID")
            .with_hint("expected {\"mcpServers\": {\"<name>\": {\"command\", \"args\", \"env\"}}} or ACP's array of servers")
    })
}

/// `--permission-policy`: the rules as JSON text (starting with `{`) or a file holding them.
/// Anything wrong is a usage error naming the problem.
pub fn read_permission_policy(arg: &str) -> CliResult<PermissionRules> {
    PermissionRules::from_arg(arg).map_err(|m| {
        CliError::usage(format!("--permission-policy: {m}"))
            .with_detail("PERMISSION_POLICY_INVALID")
    })
}

/// `--elicitation-answers FILE`: a JSON object of answers by field name.
fn read_elicitation_answers(path: &Path) -> CliResult<acpx_runtime::ElicitationAnswers> {
    let shown = path.display();
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::usage(format!("--elicitation-answers: cannot read {shown}: {e}")))?;
    match serde_json::from_str::<serde_json::Value>(&text) {
        Ok(serde_json::Value::Object(answers)) => Ok(Arc::new(answers)),
        Ok(_) => Err(CliError::usage(format!(
            "--elicitation-answers: {shown} must hold a JSON object (answers by field name)"
        ))),
        Err(e) => Err(CliError::usage(format!(
            "--elicitation-answers: {shown} is not valid JSON: {e}"
        ))),
    }
}

/// The working directory: `--cwd` (made absolute, symlinks resolved like the process cwd)
/// or the process's own ([`paths::resolve_cwd`]).
pub fn resolve_cwd(flag: Option<&Path>) -> CliResult<PathBuf> {
    paths::resolve_cwd(flag).map_err(|e| match e {
        PathError::CurrentDir(e) => {
            CliError::runtime(format!("cannot read the current directory: {e}"))
        }
        PathError::Resolve { path, source } => {
            CliError::usage(format!("--cwd {}: {source}", path.display()))
                .with_hint("pass an existing directory")
        }
        PathError::NotADirectory(path) => {
            CliError::usage(format!("--cwd {}: not a directory", path.display()))
        }
        e => CliError::usage(format!("--cwd: {e}")),
    })
}

/// `--home`/`ACPX_HOME` made absolute, with symlinks and `..` resolved as far as it exists
/// (it need not exist yet; [`paths::resolve_home`], default `~/.acpx`).
pub fn resolve_home(flag: Option<&Path>) -> CliResult<PathBuf> {
    paths::resolve_home(flag).map_err(|e| match e {
        PathError::NoHome => CliError::usage("cannot find the home directory: $HOME is not set")
            .with_hint("pass --home <dir> or set ACPX_HOME"),
        PathError::Resolve { path, source } => {
            CliError::usage(format!("--home {}: {source}", path.display()))
        }
        e => CliError::usage(format!("--home: {e}")),
    })
}

impl Ctx {
    /// Resolves the globals. `agent_word` is the positional agent taken out of argv.
    pub fn new(
        global: GlobalArgs,
        agent_word: Option<String>,
        home: PathBuf,
        cwd: PathBuf,
        config: Config,
        registry: AgentRegistry,
    ) -> CliResult<Ctx> {
        let format = global.format.or(config.format).unwrap_or(Format::Text);
        if global.json_strict && !format.is_json() {
            return Err(
                CliError::usage("--json-strict needs --format json (or acp)")
                    .with_hint("add --format json (or set `format` to json in the config)"),
            );
        }
        let out = Out::new(format, global.verbose);
        let backend = global.store.or(config.store).unwrap_or(Backend::Fs);
        let permission = if global.approve_all {
            PermissionMode::ApproveAll
        } else if global.deny_all {
            PermissionMode::DenyAll
        } else if global.approve_reads {
            PermissionMode::ApproveReads
        } else {
            config
                .default_permissions
                .unwrap_or(PermissionMode::ApproveReads)
        };
        let timeout = global
            .timeout
            .or(config.timeout)
            .map(Duration::from_secs_f64);
        let ttl_given = global.ttl.is_some() || config.ttl.is_some();
        let ttl = global
            .ttl
            .or(config.ttl)
            .unwrap_or(acpx_owner::DEFAULT_TTL.as_secs());
        let no_owner = global.no_owner || config.no_owner;
        let queue_max_depth = config
            .queue_max_depth
            .unwrap_or(acpx_owner::DEFAULT_QUEUE_MAX_DEPTH);
        let default = config.default_agent.as_deref();
        let agent = registry
            .choose(agent_word, global.agent, default)
            .map_err(|e| {
                let err = CliError::usage(e.to_string());
                match e {
                    AgentChoiceError::Both { .. } => err.with_hint(
                        "use one of them: a name from `acpx config show`, or --agent with a command line",
                    ),
                    AgentChoiceError::EmptyCommand => {
                        err.with_hint("for example --agent \"./my-agent --acp\"")
                    }
                    AgentChoiceError::UnknownDefault(_) => CliError::usage(format!(
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
            })?;
        // A typo'd key silently does nothing: always said (issue 49).
        for unknown in &config.unknown_keys {
            out.warn(unknown);
        }
        let mcp_servers = match &global.mcp_config {
            Some(p) => Some(read_mcp_config(p)?),
            None => None,
        };
        let additional_directories = if global.add_dir.is_empty() {
            let configured = config.additional_directories.clone().unwrap_or_default();
            resolve_dirs(&configured, "config additionalDirectories")?
        } else {
            resolve_dirs(&global.add_dir, "--add-dir")?
        };
        if global.model.as_deref().is_some_and(|m| m.trim().is_empty()) {
            return Err(CliError::usage("--model needs a model id"));
        }
        let resume_policy = global
            .resume_policy
            .or(config.resume_policy)
            .unwrap_or_default();
        let non_interactive = global
            .non_interactive_permissions
            .or(config.non_interactive)
            .unwrap_or_default();
        let auth_policy = global
            .auth_policy
            .or(config.auth_policy)
            .unwrap_or_default();
        Ok(Ctx {
            auth_policy,
            mcp_servers,
            additional_directories,
            model: global.model.clone(),
            permission_rules: global
                .permission_policy
                .as_deref()
                .map(read_permission_policy)
                .transpose()?,
            elicitation_answers: global
                .elicitation_answers
                .as_deref()
                .map(read_elicitation_answers)
                .transpose()?,
            prompt_retries: global.prompt_retries.unwrap_or(0),
            no_fs: global.no_fs,
            no_terminal: global.no_terminal,
            resume_policy,
            non_interactive,
            out,
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
            store: OnceCell::new(),
            authority: std::sync::OnceLock::new(),
        })
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

    /// The store of `--store`, opened on first use.
    pub async fn opened(&self) -> CliResult<&OpenStore> {
        self.store
            .get_or_try_init(|| async {
                crate::backends::open(
                    self.backend,
                    &self.home,
                    self.config.store_url.as_ref(),
                    self.settle_loads,
                )
                .await
            })
            .await
    }

    /// The authority directory of the store of `--store` (`acpx_owner::authority`): where
    /// its sessions' queue owners, `--no-owner` runs and scope locks are found. Created on
    /// first use.
    pub fn authority(&self) -> CliResult<&Path> {
        if let Some(dir) = self.authority.get() {
            return Ok(dir);
        }
        let dir = self.authority_of(self.backend)?;
        Ok(self.authority.get_or_init(|| dir))
    }

    /// The authority directory of `backend`'s store under this home (see [`Ctx::authority`]),
    /// created when missing.
    pub fn authority_of(&self, backend: Backend) -> CliResult<PathBuf> {
        let identity =
            crate::backends::identity(backend, &self.home, self.config.store_url.as_ref())?;
        acpx_owner::authority::authority_dir(&identity).map_err(|e| {
            CliError::runtime(format!("cannot prepare the runtime directory: {e}")).with_hint(
                "set XDG_RUNTIME_DIR to a directory of yours with mode 0700, or remove the one named",
            )
        })
    }

    /// The store, if it was opened already.
    pub fn opened_now(&self) -> Option<&OpenStore> {
        self.store.get()
    }

    /// The store as a trait object.
    pub async fn store(&self) -> CliResult<Arc<dyn Store>> {
        Ok(self.opened().await?.as_dyn())
    }
}
