//! Configuration files: `<home>/config.json` (global) and `.acpxrc.json` (project), read by
//! `acpx_app::config_file`; this module maps them to the CLI's settings.
//!
//! Where the files are found, their keys and how they merge: `acpx_app::config_file`.
//! Unknown keys are reported with `--verbose`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use acpx_app::config_file::{ConfigFile, ConfigFileError, OutputFormat, StoreKind};
use acpx_runtime::mcp_servers::McpServers;
use acpx_runtime::PermissionMode as RuntimePermission;
use acpx_runtime::{AuthPolicy, NonInteractivePermissions, ResumePolicy};

use crate::error::CliError;
#[cfg(test)]
use crate::error::CliResult;

/// The output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    // Human-readable: the reply on stdout, everything else on stderr.
    Text,
    // One JSON object per line on stdout.
    Json,
    // Only the final reply text.
    Quiet,
    // The raw ACP JSON-RPC frames of a turn, one per line (Node acpx's `--format json`);
    // other commands print what `json` prints.
    Acp,
}

impl Format {
    /// Whether stdout carries JSON lines only (`json` and `acp`).
    pub fn is_json(self) -> bool {
        matches!(self, Format::Json | Format::Acp)
    }
}

/// The storage backend, as `--store` and `migrate --to` take it (what each one is:
/// [`acpx_stores::Backend`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    Fs,
    Sqlite,
    Postgres,
}

impl Backend {
    /// The library's name for it.
    pub fn to_store(self) -> acpx_stores::Backend {
        match self {
            Backend::Fs => acpx_stores::Backend::Fs,
            Backend::Sqlite => acpx_stores::Backend::Sqlite,
            Backend::Postgres => acpx_stores::Backend::Postgres,
        }
    }

    pub fn as_str(self) -> &'static str {
        self.to_store().as_str()
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
    /// `additionalDirectories`: the session's additional workspace roots when `--add-dir`
    /// names none.
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
    /// Unknown keys, as `file: key`, reported with `--verbose`.
    pub unknown_keys: Vec<String>,
}

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

    /// The files as `acpx_app::config_file` reads them, leniently: a file that cannot be
    /// read or parsed is left out, a key with a bad value is left out, and the first such
    /// problem is returned next to the settings that were good (what commands that do not
    /// need the config run with).
    pub fn load_lenient(home: &Path, cwd: &Path) -> (Config, Option<CliError>) {
        let (file, problem) = ConfigFile::load_lenient(home, cwd);
        let config = Config {
            default_agent: file.default_agent,
            default_permissions: file.default_permissions.map(|p| match p {
                RuntimePermission::ApproveAll => PermissionMode::ApproveAll,
                RuntimePermission::ApproveReads => PermissionMode::ApproveReads,
                RuntimePermission::DenyAll => PermissionMode::DenyAll,
            }),
            format: file.format.map(|f| match f {
                OutputFormat::Text => Format::Text,
                OutputFormat::Json => Format::Json,
                OutputFormat::Quiet => Format::Quiet,
                OutputFormat::Acp => Format::Acp,
            }),
            store: file.store.map(|s| match s {
                StoreKind::Fs => Backend::Fs,
                StoreKind::Sqlite => Backend::Sqlite,
                StoreKind::Postgres => Backend::Postgres,
            }),
            store_url: file.store_url.map(crate::backends::StoreUrl),
            timeout: file.timeout,
            request_timeout: file.request_timeout,
            agents: file.agents,
            disable_exec: file.disable_exec,
            ttl: file.ttl,
            queue_max_depth: file.queue_max_depth,
            no_owner: file.no_owner,
            mcp_servers: file.mcp_servers,
            additional_directories: file.additional_directories,
            non_interactive: file.non_interactive,
            resume_policy: file.resume_policy,
            auth_policy: file.auth_policy,
            auth: file.auth,
            files: file.files,
            unknown_keys: file.unknown_keys,
        };
        (config, problem.map(config_problem))
    }
}

/// A config file that cannot be used: exit 1 (`CONFIG_INVALID`), not the usage code 2,
/// since nothing on the command line is wrong (`docs/format.md` § Configuration errors).
fn config_problem(e: ConfigFileError) -> CliError {
    CliError::runtime(e.0)
        .with_hint("fix that file or remove it (the file `acpx config init` writes explains every accepted key); `acpx fsck`, `acpx sessions list`, --help and --version work without it")
        .with_detail("CONFIG_INVALID")
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
