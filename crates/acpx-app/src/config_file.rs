//! Configuration files: `<home>/config.json` (global) and `.acpxrc.json` (project), read
//! and checked below any user interface (`docs/format.md` § Configuration). A program
//! resolves the result with its own flags and environment, as the `acpx` binary does.
//!
//! The project file is the nearest `.acpxrc.json` found walking from the working directory up
//! to the git root (the first directory holding a `.git` directory or file); without a git root
//! only the working directory itself is checked. Project keys win over global keys; `agents`
//! are merged name by name.
//!
//! Keys (all optional): `defaultAgent`, `defaultPermissions` (`approve-all` | `approve-reads` |
//! `deny-all`), `format` (`text` | `json` | `acp` | `quiet`), `store` (`fs` | `sqlite` | `postgres`),
//! `storeUrl` (the PostgreSQL URL of `store: postgres`), `timeout` (seconds, a positive
//! number), `requestTimeout` (seconds every other ACP request may take, default 120; both at
//! most a year, see [`acpx_runtime::durations`]), `agents` (`{"name": {"command": "..."}}` or
//! `{"name": {"argv": ["..."]}}`), `disableExec` (boolean), `ttl` (the queue owner's idle
//! seconds, 0 = until closed), `queueMaxDepth` (1 or more), `noOwner` (boolean: run the agent
//! in each command's own process), `mcpServers` (the MCP servers of new sessions:
//! `{"name": {"command", "args", "env"}}` or ACP's array), `additionalDirectories` (the
//! session's additional workspace roots when `--add-dir` names none: a list of paths, relative
//! ones taken from the config file's directory), `nonInteractivePermissions`
//! (`deny` | `fail`), `resumePolicy` (`allow-new` | `same-session-only`), `authPolicy` (`skip` |
//! `fail`), `auth` (`{"<auth method id>": "<credential>"}`, see `docs/format.md` §
//! Authentication). Any other key is collected in [`ConfigFile::unknown_keys`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use acpx_runtime::durations::{check_seconds, Range};
use acpx_runtime::mcp_servers::{parse_mcp_servers, McpServers};
use acpx_runtime::ops::lookup::walk_dirs;
use acpx_runtime::{AuthPolicy, NonInteractivePermissions, PermissionMode, ResumePolicy};
pub use acpx_stores::{Backend, StoreUrl};

/// `format`: how a command shows its results.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputFormat {
    /// `text`: human-readable.
    Text,
    /// `json`: one JSON object per line.
    Json,
    /// `quiet`: only the final reply text.
    Quiet,
    /// `acp`: a turn's raw ACP JSON-RPC frames, one per line (other commands as `json`).
    Acp,
}

impl OutputFormat {
    /// The spelling of `format` and `--format`.
    pub fn as_str(self) -> &'static str {
        match self {
            OutputFormat::Text => "text",
            OutputFormat::Json => "json",
            OutputFormat::Quiet => "quiet",
            OutputFormat::Acp => "acp",
        }
    }

    /// Whether stdout carries JSON lines only (`json` and `acp`).
    pub fn is_json(self) -> bool {
        matches!(self, OutputFormat::Json | OutputFormat::Acp)
    }
}

/// With the `clap` feature, `--format` takes the spellings of [`OutputFormat::as_str`].
#[cfg(feature = "clap")]
impl clap::ValueEnum for OutputFormat {
    fn value_variants<'a>() -> &'a [Self] {
        &[
            OutputFormat::Text,
            OutputFormat::Json,
            OutputFormat::Quiet,
            OutputFormat::Acp,
        ]
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.as_str()))
    }
}

/// The merged configuration of the global and the project file.
///
/// Its `Debug` shows neither the password of `storeUrl` nor the credentials of `auth`.
#[derive(Clone, Default)]
pub struct ConfigFile {
    /// `defaultAgent`: an agent name or command line.
    pub default_agent: Option<String>,
    /// `defaultPermissions`.
    pub default_permissions: Option<PermissionMode>,
    /// `format`.
    pub format: Option<OutputFormat>,
    /// `store`.
    pub store: Option<Backend>,
    /// `storeUrl`: the PostgreSQL URL (its `Debug` hides the password).
    pub store_url: Option<StoreUrl>,
    /// `timeout`: seconds a turn may take.
    pub timeout: Option<f64>,
    /// `requestTimeout`: seconds every ACP request but the prompt may take.
    pub request_timeout: Option<f64>,
    /// `agents`: name → agent command line.
    pub agents: BTreeMap<String, String>,
    /// `disableExec`.
    pub disable_exec: bool,
    /// `ttl`: the queue owner's idle time-to-live in whole seconds (0: until closed).
    pub ttl: Option<u64>,
    /// `queueMaxDepth`: the most tasks waiting in a session's queue.
    pub queue_max_depth: Option<usize>,
    /// `noOwner`: run the agent in the command's own process.
    pub no_owner: bool,
    /// `mcpServers`: the MCP servers of new sessions (and of older records without any).
    pub mcp_servers: Option<McpServers>,
    /// `additionalDirectories`: the session's additional workspace roots when `--add-dir`
    /// names none (relative paths joined to the config file's directory; not checked here).
    pub additional_directories: Option<Vec<PathBuf>>,
    /// `nonInteractivePermissions`.
    pub non_interactive: Option<NonInteractivePermissions>,
    /// `resumePolicy`.
    pub resume_policy: Option<ResumePolicy>,
    /// `authPolicy`.
    pub auth_policy: Option<AuthPolicy>,
    /// `auth`: credentials by auth method id.
    pub auth: BTreeMap<String, String>,
    /// The files that were read, global first.
    pub files: Vec<PathBuf>,
    /// Unknown keys, as `file: unknown key ...`.
    pub unknown_keys: Vec<String>,
}

impl std::fmt::Debug for ConfigFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigFile")
            .field("default_agent", &self.default_agent)
            .field("default_permissions", &self.default_permissions)
            .field("format", &self.format)
            .field("store", &self.store)
            .field("store_url", &self.store_url)
            .field("timeout", &self.timeout)
            .field("request_timeout", &self.request_timeout)
            .field("agents", &self.agents)
            .field("ttl", &self.ttl)
            .field("no_owner", &self.no_owner)
            .field("auth_methods", &self.auth.keys().collect::<Vec<_>>())
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

/// What `config init` writes: every key at its default, explained by the "// key" entry
/// before it (JSON has no comments; the loader skips keys that start with `//`).
pub const TEMPLATE: &str = r#"{
  "//": "acpx configuration, written by `acpx config init`. Keys starting with // are comments. A project's .acpxrc.json overrides this file; flags override both.",
  "// defaultAgent": "the agent when none is named: a built-in name (`acpx config show` lists them) or one of `agents`",
  "defaultAgent": "codex",
  "// defaultPermissions": "approve-reads (reads and searches allowed, anything else asked on a terminal), approve-all or deny-all",
  "defaultPermissions": "approve-reads",
  "// nonInteractivePermissions": "when a question needs a terminal and there is none: deny (the turn goes on) or fail (exit 5)",
  "nonInteractivePermissions": "deny",
  "// format": "output format: text, json (one JSON value per line: the event log's envelopes), acp (a turn's raw ACP JSON-RPC frames, as Node acpx's json) or quiet (the reply only)",
  "format": "text",
  "// store": "storage backend: fs (files under the home), sqlite (one database file under the home) or postgres (a PostgreSQL database, at storeUrl)",
  "store": "fs",
  "// storeUrl": "add \"storeUrl\": \"postgres://user:password@host/db\" for store postgres (ACPX_STORE_URL in the environment wins)",
  "// timeout": "add \"timeout\": <seconds> to give up on a turn after that long (exit 3); no limit by default",
  "// requestTimeout": "seconds every ACP request but the prompt may take before it is abandoned (default 120)",
  "// ttl": "seconds the session's queue owner keeps its agent warm after the last task; 0 = until the session is closed",
  "ttl": 300,
  "// queueMaxDepth": "the most tasks waiting behind the running one in a session",
  "queueMaxDepth": 16,
  "// noOwner": "true: every command runs the agent in its own process (no queue owner)",
  "noOwner": false,
  "// disableExec": "true: `acpx exec` (a one-off prompt without a stored session) is refused",
  "disableExec": false,
  "// resumePolicy": "when the agent cannot restore a session: allow-new (continue in a new ACP session, said on stderr) or same-session-only (fail)",
  "resumePolicy": "allow-new",
  "// authPolicy": "when the agent lists auth methods and no credential matches: skip (go on) or fail (exit 1)",
  "authPolicy": "skip",
  "// auth": "add \"auth\": {\"<auth method id>\": \"<credential>\"} to authenticate; ACPX_AUTH_<METHOD_ID> in the environment wins",
  "// mcpServers": "add \"mcpServers\": {\"<name>\": {\"command\": \"…\", \"args\": [], \"env\": {}}} to give MCP servers to every new session",
  "// additionalDirectories": "add \"additionalDirectories\": [\"../shared\"] to give every session more workspace roots (like --add-dir; relative to this file's directory); the agent must support them",
  "// agents": "your own agents: \"name\": \"command line\" (or {\"command\": \"…\"}); they override built-in names",
  "agents": {}
}
"#;

/// A config file that cannot be used (it cannot be read, is not JSON, or a key's value is
/// wrong): the message names the file, and the key and its line when there is one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigFileError(pub String);

/// The result of this module.
pub type ConfigResult<T> = Result<T, ConfigFileError>;

/// A duration key's value in seconds, checked against `range` ([`acpx_runtime::durations`]).
fn seconds(path: &Path, key: &str, value: &Value, range: Range) -> ConfigResult<f64> {
    let checked = match value.as_f64() {
        Some(n) => check_seconds(n, range).map(|_| n),
        None => Err(format!("expected a number of seconds, got {value}")),
    };
    checked.map_err(|e| config_error(path, key, &e))
}

/// Keys of Node acpx's config that this version accepts without acting on them.
const IGNORED_NODE_KEYS: &[&str] = &["$schema"];

/// Every key the loader acts on (a key not here is reported unknown, with the closest of
/// these as a "did you mean"; [`TEMPLATE`] explains each).
pub const KNOWN_KEYS: &[&str] = &[
    "defaultAgent",
    "defaultPermissions",
    "nonInteractivePermissions",
    "format",
    "store",
    "storeUrl",
    "timeout",
    "requestTimeout",
    "ttl",
    "queueMaxDepth",
    "noOwner",
    "disableExec",
    "resumePolicy",
    "authPolicy",
    "auth",
    "agents",
    "mcpServers",
    "additionalDirectories",
];

/// The known key closest to `key` (a typo of it: at most a third of its letters differ,
/// ignoring case), for "did you mean".
pub fn closest_key(key: &str) -> Option<&'static str> {
    let key = key.to_ascii_lowercase();
    KNOWN_KEYS
        .iter()
        .map(|k| (edit_distance(&key, &k.to_ascii_lowercase()), *k))
        .filter(|(d, k)| *d <= (k.len() / 3).max(1))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// Levenshtein distance over chars (short strings: config keys).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

impl ConfigFile {
    /// Reads the global file under `home` and the project file found from `cwd`; the first
    /// problem in either fails the load.
    pub fn load(home: &Path, cwd: &Path) -> ConfigResult<ConfigFile> {
        let (config, problem) = ConfigFile::load_lenient(home, cwd);
        match problem {
            Some(e) => Err(e),
            None => Ok(config),
        }
    }

    /// [`ConfigFile::load`] that keeps going: a file that cannot be read or parsed is left out,
    /// a key with a bad value is left out, and the first such problem is returned next to
    /// the settings that were good (what commands that do not need the config run with).
    pub fn load_lenient(home: &Path, cwd: &Path) -> (ConfigFile, Option<ConfigFileError>) {
        let mut config = ConfigFile::default();
        let mut problem = None;
        let global = home.join("config.json");
        if global.is_file() {
            if let Err(e) = config.merge_file(&global) {
                problem.get_or_insert(e);
            }
        }
        if let Some(project) = find_project_config(cwd) {
            // A project file that is also the global file (home inside the project) counts once.
            if project != global {
                if let Err(e) = config.merge_file(&project) {
                    problem.get_or_insert(e);
                }
            }
        }
        (config, problem)
    }

    fn merge_file(&mut self, path: &Path) -> ConfigResult<()> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            config_problem(format!("cannot read config file {}: {e}", path.display()))
        })?;
        let value: Value = serde_json::from_str(&text).map_err(|e| {
            config_problem(format!(
                "config file {}: invalid JSON at line {}, column {}: {e}",
                path.display(),
                e.line(),
                e.column()
            ))
        })?;
        let Value::Object(map) = value else {
            return Err(config_error(path, ".", "the file must hold a JSON object"));
        };
        self.files.push(path.to_owned());
        let mut first = None;
        for (key, value) in &map {
            if let Err(e) = self.merge_key(path, key, value) {
                first.get_or_insert(at_line(e, &text, key));
            }
        }
        first.map_or(Ok(()), Err)
    }

    fn merge_key(&mut self, path: &Path, key: &str, value: &Value) -> ConfigResult<()> {
        {
            match key {
                "defaultAgent" => {
                    let s = expect_string(path, key, value)?;
                    if s.trim().is_empty() {
                        return Err(config_error(path, key, "must not be empty"));
                    }
                    self.default_agent = Some(s);
                }
                "defaultPermissions" => {
                    self.default_permissions = Some(match expect_string(path, key, value)?.as_str() {
                        "approve-all" => PermissionMode::ApproveAll,
                        "approve-reads" => PermissionMode::ApproveReads,
                        "deny-all" => PermissionMode::DenyAll,
                        other => {
                            return Err(config_error(
                                path,
                                key,
                                &format!("expected \"approve-all\", \"approve-reads\" or \"deny-all\", got {other:?}"),
                            ))
                        }
                    });
                }
                "format" => {
                    self.format = Some(match expect_string(path, key, value)?.as_str() {
                        "text" => OutputFormat::Text,
                        "json" => OutputFormat::Json,
                        "quiet" => OutputFormat::Quiet,
                        "acp" => OutputFormat::Acp,
                        other => {
                            return Err(config_error(
                                path,
                                key,
                                &format!(
                                "expected \"text\", \"json\", \"acp\" or \"quiet\", got {other:?}"
                            ),
                            ))
                        }
                    });
                }
                "store" => {
                    self.store = Some(match expect_string(path, key, value)?.as_str() {
                        "fs" => Backend::Fs,
                        "sqlite" => Backend::Sqlite,
                        "postgres" => Backend::Postgres,
                        other => {
                            return Err(config_error(
                                path,
                                key,
                                &format!(
                                    "expected \"fs\", \"sqlite\" or \"postgres\", got {other:?}"
                                ),
                            ))
                        }
                    });
                }
                "storeUrl" => {
                    self.store_url = Some(StoreUrl(expect_string(path, key, value)?));
                }
                "timeout" => self.timeout = Some(seconds(path, key, value, Range::Positive)?),
                "requestTimeout" => {
                    self.request_timeout = Some(seconds(path, key, value, Range::Positive)?)
                }
                "ttl" => {
                    let n = seconds(path, key, value, Range::ZeroOrMore)?;
                    self.ttl = Some(n.round() as u64);
                }
                "queueMaxDepth" => match value.as_u64().filter(|n| *n >= 1) {
                    Some(n) => {
                        self.queue_max_depth = Some(usize::try_from(n).unwrap_or(usize::MAX))
                    }
                    None => {
                        return Err(config_error(
                            path,
                            key,
                            &format!("expected a whole number of 1 or more, got {value}"),
                        ))
                    }
                },
                "noOwner" => match value {
                    Value::Bool(b) => self.no_owner = *b,
                    other => {
                        return Err(config_error(
                            path,
                            key,
                            &format!("expected true or false, got {other}"),
                        ))
                    }
                },
                "disableExec" => match value {
                    Value::Bool(b) => self.disable_exec = *b,
                    other => {
                        return Err(config_error(
                            path,
                            key,
                            &format!("expected true or false, got {other}"),
                        ))
                    }
                },
                "agents" => {
                    let Value::Object(agents) = value else {
                        return Err(config_error(
                            path,
                            key,
                            "expected an object of {\"<name>\": {\"command\": \"...\"}}",
                        ));
                    };
                    for (name, def) in agents {
                        let field = format!("agents.{name}");
                        if name.trim().is_empty() || name.starts_with('-') {
                            return Err(config_error(
                                path,
                                &field,
                                "an agent name must be a non-empty word not starting with '-'",
                            ));
                        }
                        let command = agent_command(path, &field, def)?;
                        self.agents.insert(name.trim().to_lowercase(), command);
                    }
                }
                "mcpServers" => {
                    // The key's value is the servers by name (or ACP's array).
                    let servers =
                        parse_mcp_servers(value).map_err(|e| config_error(path, key, &e.0))?;
                    self.mcp_servers = Some(servers);
                }
                "additionalDirectories" => {
                    let not_paths = || {
                        config_error(path, key, &format!("expected a list of paths, got {value}"))
                    };
                    let base = path.parent().unwrap_or(Path::new("."));
                    let dirs = value
                        .as_array()
                        .ok_or_else(not_paths)?
                        .iter()
                        .map(|d| d.as_str().map(|d| base.join(d)).ok_or_else(not_paths))
                        .collect::<ConfigResult<Vec<_>>>()?;
                    self.additional_directories = Some(dirs);
                }
                "nonInteractivePermissions" => {
                    self.non_interactive = Some(match expect_string(path, key, value)?.as_str() {
                        "deny" => NonInteractivePermissions::Deny,
                        "fail" => NonInteractivePermissions::Fail,
                        other => {
                            return Err(config_error(
                                path,
                                key,
                                &format!("expected \"deny\" or \"fail\", got {other:?}"),
                            ))
                        }
                    });
                }
                "authPolicy" => {
                    self.auth_policy = Some(match expect_string(path, key, value)?.as_str() {
                        "skip" => AuthPolicy::Skip,
                        "fail" => AuthPolicy::Fail,
                        other => {
                            return Err(config_error(
                                path,
                                key,
                                &format!("expected \"skip\" or \"fail\", got {other:?}"),
                            ))
                        }
                    });
                }
                "auth" => {
                    let Value::Object(methods) = value else {
                        return Err(config_error(
                            path,
                            key,
                            "expected an object of {\"<auth method id>\": \"<credential>\"}",
                        ));
                    };
                    for (id, credential) in methods {
                        match credential.as_str().filter(|c| !c.trim().is_empty()) {
                            Some(c) => {
                                self.auth.insert(id.clone(), c.to_owned());
                            }
                            None => {
                                return Err(config_error(
                                    path,
                                    &format!("auth.{id}"),
                                    "expected a non-empty string",
                                ))
                            }
                        }
                    }
                }
                "resumePolicy" => {
                    self.resume_policy = Some(match expect_string(path, key, value)?.as_str() {
                        "allow-new" => ResumePolicy::AllowNew,
                        "same-session-only" => ResumePolicy::SameSessionOnly,
                        other => {
                            return Err(config_error(
                                path,
                                key,
                                &format!(
                                    "expected \"allow-new\" or \"same-session-only\", got {other:?}"
                                ),
                            ))
                        }
                    });
                }
                k if IGNORED_NODE_KEYS.contains(&k) => {}
                // Comments (`acpx config init` explains each key with a "// key" entry).
                k if k.starts_with("//") => {}
                other => self.unknown_keys.push(format!(
                    "{}: unknown key `{other}` (ignored){}",
                    path.display(),
                    match closest_key(other) {
                        Some(k) => format!("; did you mean `{k}`?"),
                        None => format!("; the known keys are {}", KNOWN_KEYS.join(", ")),
                    }
                )),
            }
        }
        Ok(())
    }
}

fn agent_command(path: &Path, field: &str, def: &Value) -> ConfigResult<String> {
    match def {
        Value::String(s) if !s.trim().is_empty() => Ok(s.clone()),
        Value::Object(o) => {
            if let Some(c) = o.get("command") {
                match c {
                    Value::String(s) if !s.trim().is_empty() => return Ok(s.clone()),
                    _ => {
                        return Err(config_error(
                            path,
                            &format!("{field}.command"),
                            "expected a non-empty command line string",
                        ))
                    }
                }
            }
            if let Some(a) = o.get("argv") {
                let argv: Option<Vec<&str>> = a
                    .as_array()
                    .map(|items| items.iter().map(Value::as_str).collect::<Option<Vec<_>>>())
                    .unwrap_or(None);
                match argv {
                    Some(argv) if !argv.is_empty() && !argv[0].is_empty() => {
                        return Ok(shell_words::join(argv))
                    }
                    _ => {
                        return Err(config_error(
                            path,
                            &format!("{field}.argv"),
                            "expected a non-empty array of strings",
                        ))
                    }
                }
            }
            Err(config_error(
                path,
                field,
                "expected {\"command\": \"...\"} or {\"argv\": [\"...\"]}",
            ))
        }
        _ => Err(config_error(
            path,
            field,
            "expected {\"command\": \"...\"} or {\"argv\": [\"...\"]}",
        )),
    }
}

fn expect_string(path: &Path, key: &str, value: &Value) -> ConfigResult<String> {
    value
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| config_error(path, key, &format!("expected a string, got {value}")))
}

fn config_error(path: &Path, key: &str, message: &str) -> ConfigFileError {
    config_problem(format!(
        "config file {}: key `{key}`: {message}",
        path.display()
    ))
}

/// A config file that cannot be used.
fn config_problem(message: String) -> ConfigFileError {
    ConfigFileError(message)
}

/// Adds the line of the top-level `key` in the file's `text` to a key error.
fn at_line(e: ConfigFileError, text: &str, key: &str) -> ConfigFileError {
    let quoted = format!("\"{key}\"");
    if let Some(pos) = text.find(&quoted) {
        let line = text[..pos].matches('\n').count() + 1;
        return ConfigFileError(e.0.replacen(": key `", &format!(": line {line}: key `"), 1));
    }
    e
}

/// The nearest `.acpxrc.json` from `cwd` up to the git root.
fn find_project_config(cwd: &Path) -> Option<PathBuf> {
    walk_dirs(cwd)
        .into_iter()
        .map(|d| d.join(".acpxrc.json"))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_template_loads_with_every_key_known() {
        let home = tempfile::tempdir().unwrap();
        std::fs::write(home.path().join("config.json"), TEMPLATE).unwrap();
        let c = ConfigFile::load(home.path(), home.path()).unwrap();
        assert!(c.unknown_keys.is_empty(), "{:?}", c.unknown_keys);
        assert_eq!(c.auth_policy, Some(AuthPolicy::Skip));
        assert_eq!(c.format, Some(OutputFormat::Text));
    }

    /// `config init` names every key the loader accepts, and every key it names is accepted.
    #[test]
    fn the_template_explains_every_known_key() {
        let template: serde_json::Map<String, Value> = serde_json::from_str(TEMPLATE).unwrap();
        for key in KNOWN_KEYS {
            assert!(
                template.contains_key(&format!("// {key}")),
                "the template does not explain `{key}`"
            );
        }
        for key in template.keys().filter(|k| !k.starts_with("//")) {
            assert!(
                KNOWN_KEYS.contains(&key.as_str()),
                "`{key}` is not a known key"
            );
        }
    }

    #[test]
    fn an_unknown_key_names_the_closest_known_one() {
        assert_eq!(closest_key("tll"), Some("ttl"));
        assert_eq!(closest_key("defaultagent"), Some("defaultAgent"));
        assert_eq!(closest_key("requestTimout"), Some("requestTimeout"));
        assert_eq!(closest_key("banana"), None);
        let home = tempfile::tempdir().unwrap();
        std::fs::write(
            home.path().join("config.json"),
            r#"{"tll": 5, "zzzzzz": 1}"#,
        )
        .unwrap();
        let c = ConfigFile::load(home.path(), home.path()).unwrap();
        assert!(
            c.unknown_keys[0].ends_with("unknown key `tll` (ignored); did you mean `ttl`?"),
            "{:?}",
            c.unknown_keys
        );
        assert!(
            c.unknown_keys[1].contains("the known keys are defaultAgent, "),
            "{:?}",
            c.unknown_keys
        );
    }

    /// `additionalDirectories`: relative paths are taken from the config file's directory;
    /// anything but a list of strings names the key.
    #[test]
    fn additional_directories_are_read_relative_to_the_file() {
        let home = tempfile::tempdir().unwrap();
        std::fs::write(
            home.path().join("config.json"),
            r#"{"additionalDirectories": ["shared", "/abs/dir"]}"#,
        )
        .unwrap();
        let c = ConfigFile::load(home.path(), home.path()).unwrap();
        assert_eq!(
            c.additional_directories,
            Some(vec![home.path().join("shared"), PathBuf::from("/abs/dir")])
        );
        std::fs::write(
            home.path().join("config.json"),
            r#"{"additionalDirectories": "shared"}"#,
        )
        .unwrap();
        let Err(err) = ConfigFile::load(home.path(), home.path()) else {
            panic!("a string is not a list of paths");
        };
        assert!(err.0.contains("additionalDirectories"), "{err}");
    }
}
