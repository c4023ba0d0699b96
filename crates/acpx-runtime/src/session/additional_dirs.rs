//! `--add-dir`: the session's additional workspace roots (ACP's `additionalDirectories`).
//!
//! They are made absolute before use, sent on every `session/new`, `session/resume` and
//! `session/load` when the agent advertises `sessionCapabilities.additionalDirectories`,
//! kept in the record (`acpx.additional_directories`, `docs/format.md`) so every reattach
//! sends them again, and admitted by acpx's own fs/terminal confinement (`FsRoot` in
//! `client_ops`).

use std::path::PathBuf;

use acpx_model::SessionRecord;
use serde_json::{json, Map, Value};

use crate::error::{RuntimeError, RuntimeResult};
use crate::mapping::ADDITIONAL_DIRECTORIES_KEY;

/// Each of `dirs` canonicalized; one that does not exist or is not a directory is an error
/// naming it.
pub fn resolve(dirs: &[PathBuf]) -> RuntimeResult<Vec<PathBuf>> {
    dirs.iter()
        .map(|d| {
            let real = std::fs::canonicalize(d).map_err(|e| {
                RuntimeError::InvalidInput(format!("additional directory {}: {e}", d.display()))
            })?;
            if !real.is_dir() {
                return Err(RuntimeError::InvalidInput(format!(
                    "additional directory {} is not a directory",
                    d.display()
                )));
            }
            Ok(real)
        })
        .collect()
}

/// The directories of a reattach: this invocation's (`--add-dir`), else the record's.
pub(super) fn for_record(
    chosen: &[PathBuf],
    record: &SessionRecord,
) -> RuntimeResult<Vec<PathBuf>> {
    if !chosen.is_empty() {
        return resolve(chosen);
    }
    let Some(stored) = record.acpx.extra.get(ADDITIONAL_DIRECTORIES_KEY) else {
        return Ok(Vec::new());
    };
    let bad = || {
        RuntimeError::InvalidInput(format!(
            "session {}: acpx.{ADDITIONAL_DIRECTORIES_KEY} is not a list of paths",
            record.acpx_record_id
        ))
    };
    let paths = stored
        .as_array()
        .ok_or_else(bad)?
        .iter()
        .map(|p| p.as_str().map(PathBuf::from).ok_or_else(bad))
        .collect::<RuntimeResult<Vec<_>>>()?;
    resolve(&paths)
}

/// Refuses `dirs` when the agent (its `initialize` answer) does not advertise
/// `sessionCapabilities.additionalDirectories`.
pub(super) fn check_advertised(dirs: &[PathBuf], init: &Value, agent: &str) -> RuntimeResult<()> {
    if dirs.is_empty() {
        return Ok(());
    }
    let advertised = init
        .pointer("/agentCapabilities/sessionCapabilities/additionalDirectories")
        .is_some_and(Value::is_object);
    if advertised {
        return Ok(());
    }
    Err(RuntimeError::InvalidInput(format!(
        "the agent `{agent}` does not advertise sessionCapabilities.additionalDirectories, \
         so --add-dir ({}) cannot be sent to it",
        dirs.iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )))
}

/// Adds `additionalDirectories` to the params of a session lifecycle request (nothing when
/// there are none: the key is optional and old agents may not know it).
pub(super) fn add_to_params(params: &mut Value, dirs: &[PathBuf]) {
    if let (false, Some(obj)) = (dirs.is_empty(), params.as_object_mut()) {
        obj.insert("additionalDirectories".into(), to_json(dirs));
    }
}

/// Adds `additionalDirectories` to the facts of a `session_*` lifecycle event, which the
/// reducer keeps in the record.
pub(super) fn add_to_facts(facts: &mut Map<String, Value>, dirs: &[PathBuf]) {
    if !dirs.is_empty() {
        facts.insert("additionalDirectories".into(), to_json(dirs));
    }
}

fn to_json(dirs: &[PathBuf]) -> Value {
    json!(dirs
        .iter()
        .map(|d| d.display().to_string())
        .collect::<Vec<_>>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_directory_is_named() {
        let err = resolve(&[PathBuf::from("/no/such/dir-acpx")]).unwrap_err();
        assert!(err.to_string().contains("/no/such/dir-acpx"), "{err}");
    }

    #[test]
    fn a_file_is_not_a_directory() {
        let f = tempfile::NamedTempFile::new().unwrap();
        let err = resolve(&[f.path().to_path_buf()]).unwrap_err();
        assert!(err.to_string().contains("not a directory"), "{err}");
    }

    #[test]
    fn refused_unless_advertised() {
        let dirs = [PathBuf::from("/tmp")];
        let init = json!({"agentCapabilities": {"sessionCapabilities": {}}});
        let err = check_advertised(&dirs, &init, "my-agent").unwrap_err();
        assert!(err.to_string().contains("my-agent"), "{err}");
        assert!(err.to_string().contains("--add-dir"), "{err}");
        let init =
            json!({"agentCapabilities": {"sessionCapabilities": {"additionalDirectories": {}}}});
        check_advertised(&dirs, &init, "my-agent").unwrap();
        check_advertised(&[], &json!({}), "my-agent").unwrap();
    }
}
