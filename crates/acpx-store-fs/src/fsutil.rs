//! Small file-system helpers: explicit permissions, directory fsync, file identities, temp names.

use std::collections::hash_map::RandomState;
use std::fs::{self, DirBuilder, File, OpenOptions, Permissions};
use std::hash::{BuildHasher, Hasher};
use std::io::{self, Read};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use acpx_model::StoreError;

/// Mode of every directory the store creates.
pub(crate) const DIR_MODE: u32 = 0o700;
/// Mode of every file the store creates.
pub(crate) const FILE_MODE: u32 = 0o600;

/// Wraps an I/O error with the path it happened on. `ELOOP` comes from opening a symlink
/// with `O_NOFOLLOW`: that is a foreign object in the store's directory, reported as such.
pub(crate) fn io_err(path: &Path, e: io::Error) -> StoreError {
    if e.raw_os_error() == Some(libc::ELOOP) {
        return StoreError::corrupt(
            path.display().to_string(),
            None,
            "is a symbolic link; the store never follows links in its directory (remove it)",
        );
    }
    StoreError::io(path.display(), e)
}

/// Creates `dir` (and missing parents) with mode 0700 if it does not exist. The mode of `dir`
/// is set with `chmod` after creation so that the umask cannot change it. An existing
/// directory is left as it is: it may be the user's own choice.
pub(crate) fn ensure_dir(dir: &Path) -> io::Result<()> {
    match fs::metadata(dir) {
        Ok(m) if m.is_dir() => return Ok(()),
        Ok(_) => {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "exists and is not a directory",
            ))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)?;
    fs::set_permissions(dir, Permissions::from_mode(DIR_MODE))
}

/// `OpenOptions` that refuse to open a symlink (`O_NOFOLLOW`, `ELOOP`): a link planted in
/// the store's directory must never make the store read or write a file elsewhere.
pub(crate) fn nofollow() -> OpenOptions {
    let mut o = OpenOptions::new();
    o.custom_flags(libc::O_NOFOLLOW);
    o
}

/// Opens an existing file for reading without following a symlink.
pub(crate) fn open_read(path: &Path) -> io::Result<File> {
    nofollow().read(true).open(path)
}

/// Reads a whole file without following a symlink.
pub(crate) fn read_file(path: &Path) -> io::Result<Vec<u8>> {
    let mut f = open_read(path)?;
    let mut buf = Vec::with_capacity(f.metadata().map(|m| m.len() as usize + 1).unwrap_or(0));
    f.read_to_end(&mut buf)?;
    Ok(buf)
}

/// Opens (creating it with mode 0600 if needed) a file for appending, without following a
/// symlink.
pub(crate) fn open_append(path: &Path) -> io::Result<File> {
    nofollow()
        .append(true)
        .create(true)
        .mode(FILE_MODE)
        .open(path)
}

/// Creates a new file (failing if it exists) with mode 0600, opened for writing.
pub(crate) fn create_new_file(path: &Path) -> io::Result<File> {
    let f = nofollow()
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .open(path)?;
    f.set_permissions(Permissions::from_mode(FILE_MODE))?;
    Ok(f)
}

/// Opens `path` for appending, creating it with mode 0600 if missing. Returns whether the
/// file was created (so that the caller can make the new directory entry durable).
pub(crate) fn open_append_create(path: &Path) -> io::Result<(File, bool)> {
    match nofollow().read(true).append(true).open(path) {
        Ok(f) => Ok((f, false)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            match nofollow()
                .read(true)
                .append(true)
                .create_new(true)
                .mode(FILE_MODE)
                .open(path)
            {
                Ok(f) => {
                    f.set_permissions(Permissions::from_mode(FILE_MODE))?;
                    Ok((f, true))
                }
                // Someone else created it between our two opens: use theirs.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => nofollow()
                    .read(true)
                    .append(true)
                    .open(path)
                    .map(|f| (f, false)),
                Err(e) => Err(e),
            }
        }
        Err(e) => Err(e),
    }
}

/// Makes the entries of `dir` (creations, renames, unlinks) durable.
pub(crate) fn fsync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Removes a file; a file that is already gone is not an error. Returns whether it existed.
pub(crate) fn remove_if_exists(path: &Path) -> io::Result<bool> {
    match fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// `stat` that maps "not found" to `None`.
pub(crate) fn stat_opt(path: &Path) -> io::Result<Option<fs::Metadata>> {
    match fs::metadata(path) {
        Ok(m) => Ok(Some(m)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// What identifies one version of a file without reading it: a rewrite through temp + rename
/// always changes the inode, an append always changes the length, and the modification and
/// change times (nanoseconds; the change time cannot be set back by `touch`) catch the rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct FileIdent {
    pub dev: u64,
    pub ino: u64,
    pub len: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
}

impl FileIdent {
    pub fn of(m: &fs::Metadata) -> Self {
        FileIdent {
            dev: m.dev(),
            ino: m.ino(),
            len: m.size(),
            mtime_ns: nanos(m.mtime(), m.mtime_nsec()),
            ctime_ns: nanos(m.ctime(), m.ctime_nsec()),
        }
    }
}

fn nanos(secs: i64, nsec: i64) -> i64 {
    secs.saturating_mul(1_000_000_000).saturating_add(nsec)
}

/// A random-enough suffix for temp file names. Temp files are always created with
/// `create_new`, so a collision is retried, never clobbered.
pub(crate) fn random_suffix() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u32(std::process::id());
    if let Ok(d) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(d.as_nanos());
    }
    format!("{:016x}", h.finish())
}

/// Milliseconds since the Unix epoch, for file names.
pub(crate) fn unix_millis() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}
