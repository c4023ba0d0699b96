//! Where a program's acpx home and working directory are: the home `~/.acpx` (or the one
//! given), and a working directory, each resolved to the one path every spelling of it
//! names. The `acpx` binary resolves `--home`/`ACPX_HOME` and `--cwd` here; the messages a
//! user sees for a [`PathError`] are the program's.

use std::path::{Path, PathBuf};

/// Why a directory could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum PathError {
    /// No home was given and `$HOME` is not set (or empty).
    #[error("cannot find the home directory: $HOME is not set")]
    NoHome,
    /// The process's current directory cannot be read.
    #[error("cannot read the current directory: {0}")]
    CurrentDir(std::io::Error),
    /// `path` cannot be made absolute or does not resolve.
    #[error("{}: {source}", path.display())]
    Resolve {
        /// The path as given.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A working directory that is not a directory.
    #[error("{}: not a directory", .0.display())]
    NotADirectory(PathBuf),
}

/// `~/.acpx`, from `$HOME`.
pub fn default_home() -> Result<PathBuf, PathError> {
    match std::env::var_os("HOME") {
        Some(h) if !h.is_empty() => Ok(PathBuf::from(h).join(".acpx")),
        _ => Err(PathError::NoHome),
    }
}

/// The working directory: `dir` (made absolute, symlinks resolved like the process cwd) or
/// the process's own. It must exist and be a directory.
pub fn resolve_cwd(dir: Option<&Path>) -> Result<PathBuf, PathError> {
    let raw = match dir {
        Some(p) => p.to_path_buf(),
        None => std::env::current_dir().map_err(PathError::CurrentDir)?,
    };
    let abs = std::fs::canonicalize(&raw).map_err(|source| PathError::Resolve {
        path: raw.clone(),
        source,
    })?;
    if !abs.is_dir() {
        return Err(PathError::NotADirectory(raw));
    }
    Ok(abs)
}

/// An acpx home (`home`, else [`default_home`]) made absolute, with symlinks and `..`
/// resolved as far as it exists (it need not exist yet).
///
/// Every spelling of one home must give one path: the private socket of a queue owner whose
/// home path is long is named by a hash of that path (`acpx_owner::private_socket`), and a
/// client that spelled the home another way (`./h`, `a/../h`, a symlink) looked for the
/// owner's socket elsewhere; the sessions' log locations also record it.
pub fn resolve_home(home: Option<&Path>) -> Result<PathBuf, PathError> {
    let home = match home {
        Some(h) => h.to_path_buf(),
        None => default_home()?,
    };
    let abs = std::path::absolute(&home).map_err(|source| PathError::Resolve {
        path: home.clone(),
        source,
    })?;
    Ok(resolve_existing_part(&abs))
}

/// `abs` with its longest existing prefix canonicalized and the rest (components that do not
/// exist yet, `..` among them resolved lexically) appended. `abs` as it is when a component
/// exists but does not resolve (a dangling symlink, a file, a directory it may not search):
/// the kernel would not read `..` after it lexically, and the later use reports the error.
fn resolve_existing_part(abs: &Path) -> PathBuf {
    let mut missing = Vec::new();
    let mut prefix = abs;
    loop {
        let resolved = std::fs::canonicalize(prefix);
        if let Err(e) = &resolved {
            let absent = e.kind() == std::io::ErrorKind::NotFound
                && std::fs::symlink_metadata(prefix).is_err();
            if !absent {
                return abs.to_path_buf();
            }
        }
        if let Ok(real) = resolved {
            let mut out = real;
            for part in missing.iter().rev() {
                match part {
                    std::path::Component::ParentDir => {
                        out.pop();
                    }
                    std::path::Component::CurDir => {}
                    other => out.push(other.as_os_str()),
                }
            }
            return out;
        }
        let (Some(parent), Some(last)) = (prefix.parent(), prefix.components().next_back()) else {
            return abs.to_path_buf();
        };
        missing.push(last);
        prefix = parent;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_of_a_home_gives_one_path() {
        let dir = tempfile::tempdir().unwrap();
        let real = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir(real.join("h")).unwrap();
        std::os::unix::fs::symlink(real.join("h"), real.join("link")).unwrap();
        for spelling in ["h", "h/", "./h", "x/../h", "link"] {
            assert_eq!(
                resolve_home(Some(&real.join(spelling))).unwrap(),
                real.join("h"),
                "{spelling}"
            );
        }
        // A dangling symlink, or a file, on the way: the path as given (its use reports it).
        std::os::unix::fs::symlink(real.join("nowhere"), real.join("dangling")).unwrap();
        std::fs::write(real.join("file"), b"").unwrap();
        for spelling in ["dangling/../h", "file/../h", "dangling/new"] {
            assert_eq!(
                resolve_home(Some(&real.join(spelling))).unwrap(),
                std::path::absolute(real.join(spelling)).unwrap(),
                "{spelling}"
            );
        }
        // Not created yet: the existing part resolved, the rest kept.
        for (spelling, want) in [
            ("new/sub", "new/sub"),
            ("link/new/./sub", "h/new/sub"),
            ("h/../new/sub", "new/sub"),
        ] {
            assert_eq!(
                resolve_home(Some(&real.join(spelling))).unwrap(),
                real.join(want),
                "{spelling}"
            );
        }
    }
}
