//! Where a local control socket lives: next to the files it belongs to when the path fits in
//! a socket address, else in a private per-user directory under `/tmp`.
//!
//! Used by the run registry ([`crate::runs`]) and the queue owner's lease
//! ([`crate::lease`]: `<home>/owners/<id>.sock`, else `/tmp/acpx-<uid>/o-<hash>.sock`).

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Longest socket path used (`sun_path` is 104 bytes on macOS, 108 on Linux).
pub const MAX_SOCKET_PATH: usize = 100;

/// Why a private directory could not be made ready.
#[derive(Debug, thiserror::Error)]
pub enum PrivateDirError {
    /// Creating the directory failed.
    #[error("cannot create {}: {source}", path.display())]
    Create {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Reading the directory's metadata failed.
    #[error("cannot inspect {}: {source}", path.display())]
    Inspect {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The path exists but is not a directory of this user with mode `0700` (or stricter):
    /// a socket there could be reached or replaced by someone else.
    #[error("{} is not a private directory owned by you; refusing to put a control socket there", .0.display())]
    NotPrivate(PathBuf),
}

/// FNV-1a over `parts`, each followed by a `0xff` separator (so `["ab", "c"]` and
/// `["a", "bc"]` differ): a stable short name for a long path.
pub fn fnv_hash(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for p in parts {
        for b in p.iter().chain(std::iter::once(&0xffu8)) {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x100000001b3);
        }
    }
    h
}

/// `/tmp/acpx-<uid>`: where sockets go whose natural path is too long. When another user
/// made that path first (or left it open to others), it is never used: the first of
/// `/tmp/acpx-<uid>-1` … `-7` that is missing or private to this user is, the same one for
/// every process of the user (issue 45, item 3; said once in the log).
pub fn private_tmp_dir() -> PathBuf {
    private_tmp_dir_in(Path::new("/tmp"))
}

/// How many fallbacks [`private_tmp_dir`] tries after `acpx-<uid>`.
const TMP_FALLBACKS: u32 = 7;

fn private_tmp_dir_in(tmp: &Path) -> PathBuf {
    let uid = acpx_lock::current_uid();
    let first = tmp.join(format!("acpx-{uid}"));
    let usable = |dir: &Path| match std::fs::symlink_metadata(dir) {
        Err(_) => true,
        Ok(m) => m.is_dir() && m.uid() == uid && m.permissions().mode() & 0o077 == 0,
    };
    if usable(&first) {
        return first;
    }
    for n in 1..=TMP_FALLBACKS {
        let dir = tmp.join(format!("acpx-{uid}-{n}"));
        if usable(&dir) {
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| {
                tracing::warn!(
                    "{} is not a private directory of yours (another user made it, or it is \
                     open to others); using {} for control sockets",
                    first.display(),
                    dir.display()
                )
            });
            return dir;
        }
    }
    // Every candidate taken: the first one, which `ensure_private_dir` then refuses, naming it.
    first
}

/// Creates `dir` (and missing parents) with mode 0700 if missing, and refuses one that is
/// not a directory of this user closed to group and others.
pub fn ensure_private_dir(dir: &Path) -> Result<(), PrivateDirError> {
    match std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
    {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(source) => {
            return Err(PrivateDirError::Create {
                path: dir.to_owned(),
                source,
            })
        }
    }
    let meta = std::fs::symlink_metadata(dir).map_err(|source| PrivateDirError::Inspect {
        path: dir.to_owned(),
        source,
    })?;
    if !meta.is_dir()
        || meta.uid() != acpx_lock::current_uid()
        || meta.permissions().mode() & 0o077 != 0
    {
        return Err(PrivateDirError::NotPrivate(dir.to_owned()));
    }
    Ok(())
}

/// `direct` when it fits in a socket address ([`MAX_SOCKET_PATH`]), else
/// `<private tmp dir>/<prefix><hash of hash_parts>.sock`. Nothing is created: call
/// [`ensure_private_dir`] on the parent before binding.
pub fn socket_path_or_tmp(direct: PathBuf, prefix: &str, hash_parts: &[&[u8]]) -> PathBuf {
    if direct.as_os_str().len() <= MAX_SOCKET_PATH {
        return direct;
    }
    let h = fnv_hash(hash_parts);
    private_tmp_dir().join(format!("{prefix}{h:016x}.sock"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_paths_move_to_the_private_tmp_dir() {
        let short = PathBuf::from("/h/runs/a.sock");
        assert_eq!(socket_path_or_tmp(short.clone(), "", &[b"x"]), short);
        let long = PathBuf::from(format!("/{}/a.sock", "h".repeat(120)));
        let moved = socket_path_or_tmp(long, "o-", &[b"home", b"id"]);
        assert!(moved.starts_with(private_tmp_dir()));
        assert!(moved.as_os_str().len() <= MAX_SOCKET_PATH);
        assert_ne!(fnv_hash(&[b"ab", b"c"]), fnv_hash(&[b"a", b"bc"]));
    }

    #[test]
    fn a_tmp_dir_taken_by_someone_else_is_passed_over_for_the_same_fallback() {
        let tmp = tempfile::tempdir().unwrap();
        let uid = acpx_lock::current_uid();
        let first = tmp.path().join(format!("acpx-{uid}"));
        assert_eq!(private_tmp_dir_in(tmp.path()), first);
        // Planted (here: open to others, as another user's would not be ours).
        std::fs::create_dir(&first).unwrap();
        std::fs::set_permissions(&first, std::fs::Permissions::from_mode(0o777)).unwrap();
        let fallback = tmp.path().join(format!("acpx-{uid}-1"));
        assert_eq!(private_tmp_dir_in(tmp.path()), fallback);
        ensure_private_dir(&fallback).unwrap();
        // Every process of the user finds the same one again.
        assert_eq!(private_tmp_dir_in(tmp.path()), fallback);
        // Another user's private directory (when the test runs as root, which can make one).
        if uid == 0 {
            std::fs::set_permissions(&first, std::fs::Permissions::from_mode(0o700)).unwrap();
            std::os::unix::fs::chown(&first, Some(65534), Some(65534)).unwrap();
            assert_eq!(private_tmp_dir_in(tmp.path()), fallback);
        }
        // A planted file (not a directory) is passed over too.
        std::fs::remove_dir(&fallback).unwrap();
        std::fs::write(&fallback, b"").unwrap();
        assert_eq!(
            private_tmp_dir_in(tmp.path()),
            tmp.path().join(format!("acpx-{uid}-2"))
        );
    }

    #[test]
    fn a_directory_open_to_others_is_refused() {
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("private");
        ensure_private_dir(&dir).unwrap();
        assert_eq!(
            std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
            0o700
        );
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(matches!(
            ensure_private_dir(&dir),
            Err(PrivateDirError::NotPrivate(_))
        ));
    }
}
