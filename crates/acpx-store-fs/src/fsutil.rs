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

/// Opens a directory, for calls relative to it ([`stat_in`]).
pub(crate) fn open_dir(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY)
        .open(path)
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

/// Whether `syncfs(2)` on the file system of `dir` reports every error a durable point must
/// see: Linux 5.17 and later (5.8 made it return the writeback errors of the files, 5.17 the
/// file system's own sync error; the release is read once from `/proc/sys/kernel/osrelease`,
/// an unreadable or unparsable one counting as older), on a local file system that records
/// its files' writeback errors where `syncfs` reads them: ext2/3/4, XFS, btrfs, tmpfs. Not
/// overlayfs (it reports its upper layer's sync only) nor FUSE (`syncfs` does not reach the
/// server), nor anything else not known to.
#[cfg(target_os = "linux")]
pub(crate) fn syncfs_reports_errors(dir: &File) -> bool {
    static KERNEL: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let kernel = *KERNEL.get_or_init(|| {
        fs::read_to_string("/proc/sys/kernel/osrelease")
            .ok()
            .and_then(|release| kernel_version(&release))
            .is_some_and(|v| v >= (5, 17))
    });
    // f_type values of statfs(2) (linux/magic.h).
    const EXT234: u64 = 0xEF53;
    const XFS: u64 = 0x5846_5342;
    const BTRFS: u64 = 0x9123_683E;
    const TMPFS: u64 = 0x0102_1994;
    kernel
        && rustix::fs::fstatfs(dir).is_ok_and(|s| {
            #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
            let kind = s.f_type as u64;
            matches!(kind, EXT234 | XFS | BTRFS | TMPFS)
        })
}

/// `(major, minor)` of a kernel release such as `6.18.44-fc-v657`.
#[cfg(target_os = "linux")]
fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.trim().split(['.', '-']);
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
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

/// What [`stat_in`] found: the file's identity, and whether it is a regular file.
pub(crate) struct Stat {
    pub ident: FileIdent,
    pub is_file: bool,
}

/// The `lstat` of the entry `name` of the open directory `dir`, whose path is `path`: the same
/// [`FileIdent`] as [`FileIdent::of`] gives for `fs::symlink_metadata(path)`, but on Linux
/// through `statx` relative to the directory, so that the kernel does not walk the
/// directory's path again for each of 10k snapshots (that walk was a third of a listing's
/// stat time). Where `statx` is missing or does not give the basic fields, `path` is statted.
pub(crate) fn stat_in(dir: &File, name: &str, path: &Path) -> io::Result<Stat> {
    #[cfg(target_os = "linux")]
    {
        use rustix::fs::{statx, AtFlags, StatxFlags};
        let want = StatxFlags::TYPE
            | StatxFlags::INO
            | StatxFlags::SIZE
            | StatxFlags::MTIME
            | StatxFlags::CTIME;
        match statx(
            dir,
            name,
            AtFlags::SYMLINK_NOFOLLOW,
            StatxFlags::BASIC_STATS,
        ) {
            Ok(st) if StatxFlags::from_bits_retain(st.stx_mask).contains(want) => {
                let ts = |t: rustix::fs::StatxTimestamp| nanos(t.tv_sec, i64::from(t.tv_nsec));
                let mode = u32::from(st.stx_mode);
                return Ok(Stat {
                    ident: FileIdent {
                        // As std computes `st_dev` from `statx` (`MetadataExt::dev`).
                        dev: libc::makedev(st.stx_dev_major, st.stx_dev_minor),
                        ino: st.stx_ino,
                        len: st.stx_size,
                        mtime_ns: ts(st.stx_mtime),
                        ctime_ns: ts(st.stx_ctime),
                    },
                    is_file: mode & libc::S_IFMT == libc::S_IFREG,
                });
            }
            Ok(_) => {}
            Err(e) if e == rustix::io::Errno::NOSYS || e == rustix::io::Errno::PERM => {}
            Err(e) => return Err(e.into()),
        }
    }
    let _ = (dir, name);
    let meta = fs::symlink_metadata(path)?;
    Ok(Stat {
        ident: FileIdent::of(&meta),
        is_file: meta.is_file(),
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch's durable point rests on `syncfs` only where it reports writeback errors.
    #[cfg(target_os = "linux")]
    #[test]
    fn kernel_versions_parse() {
        assert_eq!(kernel_version("6.18.44-fc-v657\n"), Some((6, 18)));
        assert_eq!(kernel_version("5.8-rc1"), Some((5, 8)));
        assert_eq!(kernel_version("4.19.0"), Some((4, 19)));
        assert_eq!(kernel_version("weird"), None);
        assert_eq!(kernel_version(""), None);
        assert!(kernel_version("5.7.1").is_some_and(|v| v < (5, 8)));
        assert!(kernel_version("5.10.0").is_some_and(|v| v >= (5, 8)));
    }

    /// The listing compares `stat_in`'s identities with those saves note in the journal
    /// (`FileIdent::of` of std's metadata): they must be the same numbers, or every list would
    /// read every snapshot again.
    #[test]
    fn stat_in_gives_the_identity_std_gives() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let file = dir.join("a.json");
        fs::write(&file, b"{}").unwrap();
        File::open(&file).unwrap().sync_all().unwrap();
        std::os::unix::fs::symlink(&file, dir.join("link.json")).unwrap();
        fs::create_dir(dir.join("sub.json")).unwrap();
        let d = open_dir(dir).unwrap();
        let st = stat_in(&d, "a.json", &file).unwrap();
        assert!(st.is_file);
        assert_eq!(
            st.ident,
            FileIdent::of(&fs::symlink_metadata(&file).unwrap())
        );
        // A symlink is described, not followed; a directory is no regular file.
        let link = stat_in(&d, "link.json", &dir.join("link.json")).unwrap();
        assert!(!link.is_file);
        assert_ne!(link.ident.ino, st.ident.ino);
        assert!(
            !stat_in(&d, "sub.json", &dir.join("sub.json"))
                .unwrap()
                .is_file
        );
        let missing = stat_in(&d, "gone.json", &dir.join("gone.json"));
        assert_eq!(
            missing.err().map(|e| e.kind()),
            Some(io::ErrorKind::NotFound)
        );
    }
}
