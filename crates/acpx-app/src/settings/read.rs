//! The files and directories the settings' flags name, read and checked: anything wrong is
//! a [`Problem`] naming the flag, the file and what is wrong with it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use acpx_runtime::mcp_servers::{read_mcp_servers_file, McpServers};
use acpx_runtime::permission_rules::PermissionRules;
use acpx_runtime::ElicitationAnswers;

use crate::paths::{self, PathError};
use crate::problem::Problem;

/// `dirs` canonicalized; one that does not exist or is not a directory is a usage error
/// naming it and where it came from (`source`).
pub fn dirs(dirs: &[PathBuf], source: &str) -> Result<Vec<PathBuf>, Problem> {
    acpx_runtime::session::additional_dirs::resolve(dirs)
        .map_err(|e| Problem::usage(format!("{source}: {e}")))
}

/// Reads an `--mcp-config` file: `{"mcpServers": {...}}` or ACP's array. A bad file is a
/// usage error naming the file and the field.
pub fn mcp_config(path: &Path) -> Result<McpServers, Problem> {
    read_mcp_servers_file(path).map_err(|e| {
        Problem::usage(format!("--mcp-config {}: {e}", path.display()))
            .with_detail("MCP_CONFIG_INVALID")
            .with_hint("expected {\"mcpServers\": {\"<name>\": {\"command\", \"args\", \"env\"}}} or ACP's array of servers")
    })
}

/// `--permission-policy`: the rules as JSON text (starting with `{`) or a file holding them.
/// Anything wrong is a usage error naming the problem.
pub fn permission_policy(arg: &str) -> Result<PermissionRules, Problem> {
    PermissionRules::from_arg(arg).map_err(|m| {
        Problem::usage(format!("--permission-policy: {m}")).with_detail("PERMISSION_POLICY_INVALID")
    })
}

/// `--elicitation-answers FILE`: a JSON object of answers by field name.
pub fn elicitation_answers(path: &Path) -> Result<ElicitationAnswers, Problem> {
    let shown = path.display();
    let text = std::fs::read_to_string(path)
        .map_err(|e| Problem::usage(format!("--elicitation-answers: cannot read {shown}: {e}")))?;
    match serde_json::from_str::<serde_json::Value>(&text) {
        Ok(serde_json::Value::Object(answers)) => Ok(Arc::new(answers)),
        Ok(_) => Err(Problem::usage(format!(
            "--elicitation-answers: {shown} must hold a JSON object (answers by field name)"
        ))),
        Err(e) => Err(Problem::usage(format!(
            "--elicitation-answers: {shown} is not valid JSON: {e}"
        ))),
    }
}

/// The working directory: `--cwd` (made absolute, symlinks resolved like the process cwd)
/// or the process's own ([`paths::resolve_cwd`]).
pub fn cwd(flag: Option<&Path>) -> Result<PathBuf, Problem> {
    paths::resolve_cwd(flag).map_err(|e| match e {
        PathError::CurrentDir(e) => {
            Problem::runtime(format!("cannot read the current directory: {e}"))
        }
        PathError::Resolve { path, source } => {
            Problem::usage(format!("--cwd {}: {source}", path.display()))
                .with_hint("pass an existing directory")
        }
        PathError::NotADirectory(path) => {
            Problem::usage(format!("--cwd {}: not a directory", path.display()))
        }
        e => Problem::usage(format!("--cwd: {e}")),
    })
}

/// `--home`/`ACPX_HOME` made absolute, with symlinks and `..` resolved as far as it exists
/// (it need not exist yet; [`paths::resolve_home`], default `~/.acpx`).
pub fn home(flag: Option<&Path>) -> Result<PathBuf, Problem> {
    paths::resolve_home(flag).map_err(|e| match e {
        PathError::NoHome => Problem::usage("cannot find the home directory: $HOME is not set")
            .with_hint("pass --home <dir> or set ACPX_HOME"),
        PathError::Resolve { path, source } => {
            Problem::usage(format!("--home {}: {source}", path.display()))
        }
        e => Problem::usage(format!("--home: {e}")),
    })
}
