//! Where the processes that drive one store's sessions find each other: the store's
//! **authority directory**.
//!
//! Who drives a session (its queue owner's lease and socket, the run file and cancel socket
//! of a `--no-owner` turn, the scope locks of `sessions new` / `ensure`) is a fact about a
//! session *of one store*. The same record id can exist in two stores (after `acpx migrate
//! --to sqlite`, the file store and the SQLite copy hold the same ids), and a prompt for the
//! one must never be run by the owner of the other, so these files are keyed by the store's
//! identity ([`authority_dir`]) as well as by the record id.
//!
//! They are runtime files, not data: they live under `$XDG_RUNTIME_DIR/acpx/` (the per-user
//! runtime directory of the XDG base directory spec: private, on tmpfs, emptied at logout),
//! or, when that is unset or not a private directory of this user, under `/tmp/acpx-<uid>/`
//! (created 0700 and checked to be ours, see [`crate::private_socket`]). Never inside the
//! data home: a backup of the home (`cp -a`, `tar`, Python's `shutil.copytree`) meets no
//! sockets, and two homes never share one.
//!
//! ```text
//! <runtime root>/s-<16 hex digits of a hash of the store identity>/
//!     store            the identity, in plain text (which store this directory serves)
//!     owners/<id>.lock .json .sock     a queue owner's lease (crate::lease)
//!     runs/<id>.lock .json .sock       a --no-owner turn (crate::runs)
//!     runs/scope-<hash>.lock           a scope lock (crate::runs::lock_scope)
//! ```
//!
//! A store's identity is a string that names its data: for the file store its sessions
//! directory, for SQLite its database file, for PostgreSQL the server, database and schema
//! (`acpx_stores::StoreConfig::identity`). Two spellings of one place must give one
//! identity: pass paths resolved.

use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::private_socket::{ensure_private_dir, fnv_hash, private_tmp_dir, PrivateDirError};

/// The environment variable naming the per-user runtime directory.
pub const ENV_XDG_RUNTIME_DIR: &str = "XDG_RUNTIME_DIR";

/// `$XDG_RUNTIME_DIR/acpx` when `XDG_RUNTIME_DIR` names an absolute directory of this user
/// closed to others (as the spec requires of it), else `/tmp/acpx-<uid>`. Nothing is
/// created.
pub fn runtime_root() -> PathBuf {
    runtime_root_from(std::env::var_os(ENV_XDG_RUNTIME_DIR).map(PathBuf::from))
}

fn runtime_root_from(xdg: Option<PathBuf>) -> PathBuf {
    if let Some(dir) = xdg.filter(|d| d.is_absolute()) {
        let usable = std::fs::metadata(&dir).is_ok_and(|m| {
            m.is_dir() && m.uid() == acpx_lock::current_uid() && m.permissions().mode() & 0o077 == 0
        });
        if usable {
            return dir.join("acpx");
        }
        tracing::debug!(
            dir = %dir.display(),
            "XDG_RUNTIME_DIR is not a private directory of this user; using /tmp/acpx-<uid>"
        );
    }
    private_tmp_dir()
}

/// The authority directory of the store named `identity` under `root` (nothing is created).
pub fn authority_path(root: &Path, identity: &str) -> PathBuf {
    root.join(format!("s-{:016x}", fnv_hash(&[identity.as_bytes()])))
}

/// The authority directory of the store named `identity` under [`runtime_root`], created
/// (mode 0700, every level checked to be private to this user) with its `store` file naming
/// the identity.
pub fn authority_dir(identity: &str) -> Result<PathBuf, PrivateDirError> {
    authority_dir_in(&runtime_root(), identity)
}

/// [`authority_dir`] under `root`.
pub fn authority_dir_in(root: &Path, identity: &str) -> Result<PathBuf, PrivateDirError> {
    ensure_private_dir(root)?;
    let dir = authority_path(root, identity);
    ensure_private_dir(&dir)?;
    let marker = dir.join("store");
    if !marker.exists() {
        // Informative only (a person looking at the runtime root): written once, atomically.
        let tmp = dir.join(format!(".store.tmp-{}", std::process::id()));
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .and_then(|mut f| f.write_all(format!("{identity}\n").as_bytes()))
            .and_then(|()| std::fs::rename(&tmp, &marker));
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            tracing::debug!("cannot write {}: {e}", marker.display());
        }
    }
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_store_identity_has_a_directory_of_its_own() {
        let root = tempfile::tempdir().unwrap();
        let root = root.path().join("acpx");
        let fs = authority_dir_in(&root, "fs:/h/sessions").unwrap();
        let sqlite = authority_dir_in(&root, "sqlite:/h/acpx.db").unwrap();
        assert_ne!(fs, sqlite);
        assert_eq!(fs, authority_dir_in(&root, "fs:/h/sessions").unwrap());
        assert_eq!(
            std::fs::read_to_string(fs.join("store")).unwrap(),
            "fs:/h/sessions\n"
        );
        for d in [&root, &fs, &sqlite] {
            let mode = std::fs::metadata(d).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o700, "{}", d.display());
        }
    }

    #[test]
    fn a_runtime_dir_open_to_others_is_not_used() {
        let base = tempfile::tempdir().unwrap();
        let xdg = base.path().join("run");
        std::fs::create_dir(&xdg).unwrap();
        std::fs::set_permissions(&xdg, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert_eq!(runtime_root_from(Some(xdg.clone())), xdg.join("acpx"));
        std::fs::set_permissions(&xdg, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(runtime_root_from(Some(xdg)), private_tmp_dir());
        assert_eq!(
            runtime_root_from(Some(PathBuf::from("relative"))),
            private_tmp_dir()
        );
        assert_eq!(runtime_root_from(None), private_tmp_dir());
    }
}
