//! Configuration files: `<home>/config.json` (global) and `.acpxrc.json` (project), read and
//! checked by `acpx_app::config_file`; this module only says what a file that cannot be used
//! means to the user.
//!
//! Where the files are found, their keys and how they merge: `acpx_app::config_file`.
//! Unknown keys are reported with `--verbose`. The settings' types are the libraries' own
//! (with their `clap` feature, the flags parse into them too).

use std::path::Path;

pub use acpx_app::config_file::{Backend, ConfigFile as Config, OutputFormat as Format};
use acpx_app::config_file::{ConfigFile, ConfigFileError};
pub use acpx_runtime::PermissionMode;

use crate::error::CliError;
#[cfg(test)]
use crate::error::CliResult;

/// Reads the global file under `home` and the project file found from `cwd`; the first
/// problem in either fails the load.
#[cfg(test)]
pub fn load(home: &Path, cwd: &Path) -> CliResult<ConfigFile> {
    let (config, problem) = load_lenient(home, cwd);
    match problem {
        Some(e) => Err(e),
        None => Ok(config),
    }
}

/// The files as `acpx_app::config_file` reads them, leniently: a file that cannot be read or
/// parsed is left out, a key with a bad value is left out, and the first such problem is
/// returned next to the settings that were good (what commands that do not need the config
/// run with).
pub fn load_lenient(home: &Path, cwd: &Path) -> (ConfigFile, Option<CliError>) {
    let (file, problem) = ConfigFile::load_lenient(home, cwd);
    (file, problem.map(config_problem))
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
        let c = load(home.path(), &sub).unwrap();
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
            let e = load(home.path(), cwd.path()).unwrap_err();
            assert!(e.message.contains("config.json"), "{e}");
            assert!(e.message.contains(&format!("`{key}`")), "{e}");
        }
    }
}
