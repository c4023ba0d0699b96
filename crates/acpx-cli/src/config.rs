//! Configuration files: `<home>/config.json` (global) and `.acpxrc.json` (project).
//!
//! The project file is the nearest `.acpxrc.json` found walking from the working directory up
//! to the git root (the first directory holding a `.git` directory or file); without a git root
//! only the working directory itself is checked. Project keys win over global keys; `agents`
//! are merged name by name.
//!
//! Keys (all optional): `defaultAgent`, `defaultPermissions` (`approve-all` | `approve-reads` |
//! `deny-all`), `format` (`text` | `json` | `quiet`), `store` (`fs` | `sqlite` | `postgres`),
//! `storeUrl` (the PostgreSQL URL of `store: postgres`; `ACPX_STORE_URL` wins), `timeout`
//! (seconds, a positive number), `requestTimeout` (seconds every other ACP request may take,
//! default 120; both at most a year, see `crate::durations`), `agents` (`{"name": {"command": "..."}}` or
//! `{"name": {"argv": ["..."]}}`), `disableExec` (boolean), `ttl` (the queue owner's idle
//! seconds, 0 = until closed), `queueMaxDepth` (1 or more), `noOwner` (boolean: run the agent
//! in each command's own process), `mcpServers` (the MCP servers of new sessions:
//! `{"name": {"command", "args", "env"}}` or ACP's array), `nonInteractivePermissions`
//! (`deny` | `fail`), `resumePolicy` (`allow-new` | `same-session-only`), `authPolicy` (`skip` |
//! `fail`), `auth` (`{"<auth method id>": "<credential>"}`, see `docs/format.md` §
//! Authentication). Any other key is reported with `--verbose`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use acpx_runtime::mcp_servers::{parse_mcp_servers, McpServers};
use acpx_runtime::ops::lookup::walk_dirs;
use acpx_runtime::{AuthPolicy, NonInteractivePermissions, ResumePolicy};
use serde_json::Value;

use crate::durations::{check_seconds, Range};
use crate::error::{CliError, CliResult};

/// The output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    // Human-readable: the reply on stdout, everything else on stderr.
    Text,
    // One JSON object per line on stdout.
    Json,
    // Only the final reply text.
    Quiet,
}

/// The storage backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    // Files under `<home>/sessions/`: `<id>.json` and `<id>.events*.ndjson`.
    Fs,
    // One SQLite database, `<home>/acpx.db`.
    Sqlite,
    // A PostgreSQL database shared by several hosts (`ACPX_STORE_URL` or `storeUrl`).
    Postgres,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Fs => "fs",
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }
}

/// How permission requests of the agent are answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PermissionMode {
    ApproveAll,
    ApproveReads,
    DenyAll,
}

impl PermissionMode {
    pub fn as_str(self) -> &'static str {
        match self {
            PermissionMode::ApproveAll => "approve-all",
            PermissionMode::ApproveReads => "approve-reads",
            PermissionMode::DenyAll => "deny-all",
        }
    }
}

/// The merged configuration.
#[derive(Debug, Clone, Default)]
pub struct Config {
    pub default_agent: Option<String>,
    pub default_permissions: Option<PermissionMode>,
    pub format: Option<Format>,
    pub store: Option<Backend>,
    /// `storeUrl`: the PostgreSQL URL (its `Debug` hides the password).
    pub store_url: Option<crate::backends::StoreUrl>,
    pub timeout: Option<f64>,
    /// `requestTimeout`: seconds every ACP request but the prompt may take (default 120).
    pub request_timeout: Option<f64>,
    /// name → agent command.
    pub agents: BTreeMap<String, String>,
    pub disable_exec: bool,
    /// The queue owner's idle time-to-live in seconds (0: until the session is closed).
    pub ttl: Option<u64>,
    /// The most tasks waiting in a session's queue.
    pub queue_max_depth: Option<usize>,
    /// Run the agent in the command's own process (no queue owner).
    pub no_owner: bool,
    /// `mcpServers`: the MCP servers of new sessions (and of older records without any).
    pub mcp_servers: Option<McpServers>,
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
    /// Unknown keys, as `file: key`, reported with `--verbose`.
    pub unknown_keys: Vec<String>,
}

/// A duration key's value in seconds, checked against `range` (`crate::durations`).
fn seconds(path: &Path, key: &str, value: &Value, range: Range) -> CliResult<f64> {
    let checked = match value.as_f64() {
        Some(n) => check_seconds(n, range).map(|_| n),
        None => Err(format!("expected a number of seconds, got {value}")),
    };
    checked.map_err(|e| config_error(path, key, &e))
}

/// Keys of Node acpx's config that this version accepts without acting on them.
const IGNORED_NODE_KEYS: &[&str] = &["$schema"];

impl Config {
    /// Reads the global file under `home` and the project file found from `cwd`; the first
    /// problem in either fails the load.
    #[cfg(test)]
    pub fn load(home: &Path, cwd: &Path) -> CliResult<Config> {
        let (config, problem) = Config::load_lenient(home, cwd);
        match problem {
            Some(e) => Err(e),
            None => Ok(config),
        }
    }

    /// Reads the global and the project file, and keeps going: a file that cannot be read or
    /// parsed is left out, a key with a bad value is left out, and the first such problem is
    /// returned next to the settings that were good (what commands that do not need the config run with).
    pub fn load_lenient(home: &Path, cwd: &Path) -> (Config, Option<CliError>) {
        let mut config = Config::default();
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

    fn merge_file(&mut self, path: &Path) -> CliResult<()> {
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

    fn merge_key(&mut self, path: &Path, key: &str, value: &Value) -> CliResult<()> {
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
                        "text" => Format::Text,
                        "json" => Format::Json,
                        "quiet" => Format::Quiet,
                        other => {
                            return Err(config_error(
                                path,
                                key,
                                &format!("expected \"text\", \"json\" or \"quiet\", got {other:?}"),
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
                    self.store_url =
                        Some(crate::backends::StoreUrl(expect_string(path, key, value)?));
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
                    "{}: unknown key `{other}` (ignored)",
                    path.display()
                )),
            }
        }
        Ok(())
    }
}

fn agent_command(path: &Path, field: &str, def: &Value) -> CliResult<String> {
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

fn expect_string(path: &Path, key: &str, value: &Value) -> CliResult<String> {
    value
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| config_error(path, key, &format!("expected a string, got {value}")))
}

fn config_error(path: &Path, key: &str, message: &str) -> CliError {
    config_problem(format!(
        "config file {}: key `{key}`: {message}",
        path.display()
    ))
}

/// A config file that cannot be used: exit 1 (`CONFIG_INVALID`), not the usage code 2,
/// since nothing on the command line is wrong (`docs/format.md` § Configuration errors).
fn config_problem(message: String) -> CliError {
    CliError::runtime(message)
        .with_hint("fix that file or remove it (see `acpx --help` for the accepted keys); `acpx fsck`, `acpx sessions list`, --help and --version work without it")
        .with_detail("CONFIG_INVALID")
}

/// Adds the line of the top-level `key` in the file's `text` to a key error.
fn at_line(mut e: CliError, text: &str, key: &str) -> CliError {
    let quoted = format!("\"{key}\"");
    if let Some(pos) = text.find(&quoted) {
        let line = text[..pos].matches('\n').count() + 1;
        e.message = e
            .message
            .replacen(": key `", &format!(": line {line}: key `"), 1);
    }
    e
}

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
    fn project_wins_and_agents_merge() {
        let home = tempfile::tempdir().unwrap();
        let proj = tempfile::tempdir().unwrap();
        std::fs::create_dir(proj.path().join(".git")).unwrap();
        let sub = proj.path().join("a/b");
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(
            home.path().join("config.json"),
            r#"{"format":"json","timeout":5,"agents":{"x":{"command":"x-agent"},"y":"y-agent"}}"#,
        )
        .unwrap();
        std::fs::write(
            proj.path().join(".acpxrc.json"),
            r#"{"format":"quiet","agents":{"x":{"argv":["x agent","--acp"]}},"ttl":0}"#,
        )
        .unwrap();
        let c = Config::load(home.path(), &sub).unwrap();
        assert_eq!(c.format, Some(Format::Quiet));
        assert_eq!(c.timeout, Some(5.0));
        assert_eq!(c.agents["x"], "'x agent' --acp");
        assert_eq!(c.agents["y"], "y-agent");
        assert_eq!(c.files.len(), 2);
        assert!(c.unknown_keys.is_empty());
        assert_eq!(c.ttl, Some(0));
    }

    #[test]
    fn invalid_values_name_file_and_key() {
        let home = tempfile::tempdir().unwrap();
        let cwd = tempfile::tempdir().unwrap();
        for (doc, key) in [
            (r#"{"timeout":-1}"#, "timeout"),
            (r#"{"store":"mongo"}"#, "store"),
            (r#"{"ttl":-5}"#, "ttl"),
            (r#"{"queueMaxDepth":0}"#, "queueMaxDepth"),
            (r#"{"noOwner":"yes"}"#, "noOwner"),
            (r#"{"defaultPermissions":"yes"}"#, "defaultPermissions"),
            (r#"{"agents":{"a":{"argv":[]}}}"#, "agents.a.argv"),
            (r#"[1]"#, "."),
        ] {
            std::fs::write(home.path().join("config.json"), doc).unwrap();
            let e = Config::load(home.path(), cwd.path()).unwrap_err();
            assert!(e.message.contains("config.json"), "{e}");
            assert!(e.message.contains(&format!("`{key}`")), "{e}");
        }
    }
}
