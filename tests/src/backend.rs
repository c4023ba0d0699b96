//! The [`Backend`] trait: what a conformance check needs from a store implementation beyond
//! the [`Store`] trait itself (reopening, raw damage, a worker process), and the
//! [`Capabilities`] each backend declares, so that the checks it cannot run are reported as
//! ignored instead of passing.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use acpx_model::{MemoryStore, RecordId, Store};
use async_trait::async_trait;

/// What a backend can do beyond the [`Store`] trait. A backend declares its own with
/// [`Backend::capabilities`]; each check declares the ones it needs (in the same type), and the
/// harness reports a check whose needs are not met as ignored, with the missing ones as the
/// reason (see [`crate::Suite`]). A hook that a declared capability promises but that gives
/// nothing makes the check fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// `acpx-store-worker` opens the same data in another process
    /// ([`Backend::worker_args`] is `Some`): cross-process locking, crashes, concurrency.
    pub worker: bool,
    /// [`Backend::inject_snapshot`] overwrites a stored document with raw bytes.
    pub raw_snapshot: bool,
    /// [`Backend::inject_log_bytes`] appends raw bytes (torn or damaged lines) to a log.
    pub raw_log: bool,
    /// [`Backend::data_dir`] is `Some`: all data lives under one directory whose parent holds
    /// nothing else.
    pub data_dir: bool,
    /// Event retention is bounded by a budget of at most 1 MiB (segment size × segments), small
    /// enough for the retention checks to append far past it.
    pub small_event_budget: bool,
    /// [`Store::remote_tasks`] is `Some`: a store several hosts share, whose owners take
    /// tasks queued by other hosts.
    pub remote_tasks: bool,
    /// The crash points (`ACPX_FAILPOINT=<name>` in the worker's environment) at which the
    /// backend aborts the worker process.
    pub failpoints: &'static [&'static str],
}

impl Capabilities {
    /// Nothing beyond the [`Store`] trait: what an in-process store such as [`MemoryStore`]
    /// has, and what most checks need.
    pub const NONE: Capabilities = Capabilities {
        worker: false,
        raw_snapshot: false,
        raw_log: false,
        data_dir: false,
        small_event_budget: false,
        remote_tasks: false,
        failpoints: &[],
    };

    /// What of `needs` is missing from `self`, in words (`None` when nothing is).
    pub fn missing(&self, needs: &Capabilities) -> Option<String> {
        let mut missing: Vec<String> = [
            (needs.worker && !self.worker, "a worker process"),
            (
                needs.raw_snapshot && !self.raw_snapshot,
                "raw snapshot bytes",
            ),
            (needs.raw_log && !self.raw_log, "raw log bytes"),
            (
                needs.remote_tasks && !self.remote_tasks,
                "a task queue across hosts",
            ),
            (needs.data_dir && !self.data_dir, "a data directory"),
            (
                needs.small_event_budget && !self.small_event_budget,
                "a small event budget",
            ),
        ]
        .into_iter()
        .filter(|(is_missing, _)| *is_missing)
        .map(|(_, what)| what.to_owned())
        .collect();
        missing.extend(
            needs
                .failpoints
                .iter()
                .filter(|name| !self.failpoints.contains(name))
                .map(|name| format!("failpoint {name}")),
        );
        (!missing.is_empty()).then(|| format!("backend lacks {}", missing.join(", ")))
    }
}

/// The largest event budget (segment size × segments) that counts as
/// [`Capabilities::small_event_budget`].
pub const SMALL_EVENT_BUDGET: u64 = 1 << 20;

/// A store implementation under test, with the hooks the checks need.
#[async_trait]
pub trait Backend: Send + Sync {
    /// Short name for messages: `memory`, `fs`, `sqlite`.
    fn name(&self) -> &'static str;

    /// What this backend can do beyond the [`Store`] trait; it must agree with the hooks
    /// below (a declared capability whose hook gives nothing fails the checks that need it).
    fn capabilities(&self) -> Capabilities;

    /// A new handle on the same underlying data (as if the process restarted).
    async fn open(&self) -> Arc<dyn Store>;

    /// The argv (after the binary) that makes `acpx-store-worker` open this backend's data,
    /// for cross-process checks; `None` when the data cannot be shared with another process.
    fn worker_args(&self) -> Option<Vec<String>>;

    /// Overwrites the stored snapshot/document of `id` (which must exist) with raw bytes, for
    /// malformed-data checks. `None` if the backend has no raw snapshot.
    async fn inject_snapshot(&self, id: &RecordId, bytes: &[u8]) -> Option<()>;

    /// Appends raw bytes to the session's event log (torn tails, mid-log damage). `None` if
    /// the backend's log cannot hold partial or damaged records (memory, SQLite rows).
    async fn inject_log_bytes(&self, id: &RecordId, bytes: &[u8]) -> Option<()>;

    /// The directory holding every file of this backend. Its parent is a fresh temporary
    /// directory that holds nothing else, so a check can prove nothing was written outside.
    /// `None` for backends without files.
    fn data_dir(&self) -> Option<PathBuf>;
}

/// [`MemoryStore`]: every handle shares one in-process map; nothing raw, no other process.
#[derive(Debug, Clone, Default)]
pub struct MemoryBackend {
    store: MemoryStore,
}

impl MemoryBackend {
    /// A backend over a fresh, empty [`MemoryStore`].
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl Backend for MemoryBackend {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::NONE
    }

    async fn open(&self) -> Arc<dyn Store> {
        Arc::new(self.store.clone())
    }

    fn worker_args(&self) -> Option<Vec<String>> {
        None
    }

    async fn inject_snapshot(&self, _id: &RecordId, _bytes: &[u8]) -> Option<()> {
        None
    }

    async fn inject_log_bytes(&self, _id: &RecordId, _bytes: &[u8]) -> Option<()> {
        None
    }

    fn data_dir(&self) -> Option<PathBuf> {
        None
    }
}

/// [`acpx_store_fs::FsStore`] in a private temporary directory: `<tmp>/store` is the store
/// root, so `<tmp>` must stay otherwise empty.
#[derive(Debug)]
pub struct FsBackend {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    options: acpx_store_fs::FsStoreOptions,
}

impl FsBackend {
    /// Default segment sizes; a lock timeout long enough for the cross-process checks.
    pub fn new() -> Self {
        Self::with_options(acpx_store_fs::FsStoreOptions {
            lock_timeout: Duration::from_secs(60),
            ..acpx_store_fs::FsStoreOptions::default()
        })
    }

    /// A store with these options (for example tiny segments for the retention checks).
    pub fn with_options(options: acpx_store_fs::FsStoreOptions) -> Self {
        let tmp = tempfile::tempdir().expect("temp dir");
        let root = tmp.path().join("store");
        FsBackend {
            _tmp: tmp,
            root,
            options,
        }
    }

    /// The store root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// A concrete handle, for fs-specific checks (paths, segments).
    pub fn open_fs(&self) -> acpx_store_fs::FsStore {
        acpx_store_fs::FsStore::open_with(&self.root, self.options.clone())
            .unwrap_or_else(|e| panic!("open fs store at {}: {e}", self.root.display()))
    }

    /// [`FsBackend::open_fs`] as a process would open the store once its last sweep for a
    /// crash's leftovers is older than the sweep interval (10 minutes): this open sweeps.
    pub fn open_fs_when_sweep_is_due(&self) -> acpx_store_fs::FsStore {
        let mark = self.root.join("sessions/.cleanup");
        if let Ok(f) = std::fs::File::options().write(true).open(&mark) {
            let long_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3_600);
            f.set_modified(long_ago)
                .unwrap_or_else(|e| panic!("age {}: {e}", mark.display()));
        }
        self.open_fs()
    }
}

impl Default for FsBackend {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl Backend for FsBackend {
    fn name(&self) -> &'static str {
        "fs"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            worker: true,
            raw_snapshot: true,
            raw_log: true,
            data_dir: true,
            small_event_budget: self
                .options
                .max_segment_bytes
                .saturating_mul(u64::from(self.options.max_segments))
                <= SMALL_EVENT_BUDGET,
            remote_tasks: false,
            failpoints: acpx_store_fs::FAILPOINTS,
        }
    }

    async fn open(&self) -> Arc<dyn Store> {
        Arc::new(self.open_fs())
    }

    fn worker_args(&self) -> Option<Vec<String>> {
        Some(vec![
            "--backend".into(),
            "fs".into(),
            "--root".into(),
            self.root.display().to_string(),
            "--max-segment-bytes".into(),
            self.options.max_segment_bytes.to_string(),
            "--max-segments".into(),
            self.options.max_segments.to_string(),
            "--lock-timeout-ms".into(),
            self.options.lock_timeout.as_millis().to_string(),
        ])
    }

    async fn inject_snapshot(&self, id: &RecordId, bytes: &[u8]) -> Option<()> {
        let path = self.open_fs().snapshot_path(id);
        std::fs::write(&path, bytes)
            .unwrap_or_else(|e| panic!("inject snapshot {}: {e}", path.display()));
        Some(())
    }

    async fn inject_log_bytes(&self, id: &RecordId, bytes: &[u8]) -> Option<()> {
        use std::io::Write;
        let path = self.open_fs().active_log_path(id);
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("open log {}: {e}", path.display()));
        f.write_all(bytes)
            .unwrap_or_else(|e| panic!("inject log bytes {}: {e}", path.display()));
        Some(())
    }

    fn data_dir(&self) -> Option<PathBuf> {
        Some(self.root.clone())
    }
}

type OpenFn = Box<dyn Fn(&Path) -> Arc<dyn Store> + Send + Sync>;
type ArgsFn = Box<dyn Fn(&Path) -> Vec<String> + Send + Sync>;
type InjectFn = Box<dyn Fn(&Path, &RecordId, &[u8]) + Send + Sync>;

/// A backend assembled from closures over a private data directory, so that a new backend's
/// test file stays a few lines long:
///
/// ```text
/// fn sqlite() -> DirBackend {
///     DirBackend::new("sqlite", |dir| Arc::new(SqliteStore::open(dir.join("acpx.db")).unwrap()))
///         .worker(|dir| argv(["--backend", "sqlite", "--path", &dir.join("acpx.db").display().to_string()]))
///         .snapshot_injector(|dir, id, bytes| { /* UPDATE the document of `id` */ })
/// }
/// acpx_tests::conformance_tests!(sqlite());
/// ```
///
/// The closures get the data directory (`<tmp>/store`, created empty; its parent holds
/// nothing else). Its [`Capabilities`] follow from the hooks given; the checks that need a
/// hook that is not given are reported as ignored.
pub struct DirBackend {
    name: &'static str,
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    open: OpenFn,
    worker: Option<ArgsFn>,
    inject_snapshot: Option<InjectFn>,
    inject_log: Option<InjectFn>,
    failpoints: &'static [&'static str],
    small_event_budget: bool,
}

impl DirBackend {
    /// A backend called `name` whose handles `open` makes from the data directory.
    pub fn new(
        name: &'static str,
        open: impl Fn(&Path) -> Arc<dyn Store> + Send + Sync + 'static,
    ) -> Self {
        let tmp = tempfile::tempdir().expect("temp dir");
        let dir = tmp.path().join("store");
        std::fs::create_dir(&dir).expect("create data dir");
        DirBackend {
            name,
            _tmp: tmp,
            dir,
            open: Box::new(open),
            worker: None,
            inject_snapshot: None,
            inject_log: None,
            failpoints: &[],
            small_event_budget: false,
        }
    }

    /// The worker argv (after the binary) that opens the same data.
    pub fn worker(mut self, f: impl Fn(&Path) -> Vec<String> + Send + Sync + 'static) -> Self {
        self.worker = Some(Box::new(f));
        self
    }

    /// Overwrites the stored document of an existing session with raw bytes.
    pub fn snapshot_injector(
        mut self,
        f: impl Fn(&Path, &RecordId, &[u8]) + Send + Sync + 'static,
    ) -> Self {
        self.inject_snapshot = Some(Box::new(f));
        self
    }

    /// Appends raw bytes to a session's event log.
    pub fn log_injector(
        mut self,
        f: impl Fn(&Path, &RecordId, &[u8]) + Send + Sync + 'static,
    ) -> Self {
        self.inject_log = Some(Box::new(f));
        self
    }

    /// Failpoint names the backend honours through `ACPX_FAILPOINT`.
    pub fn failpoints(mut self, names: &'static [&'static str]) -> Self {
        self.failpoints = names;
        self
    }

    /// Declares that `open` bounds event retention to at most 1 MiB in total, so the
    /// retention checks apply.
    pub fn small_event_budget(mut self) -> Self {
        self.small_event_budget = true;
        self
    }

    /// The data directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// `argv(["--backend", "x"])`: a worker argv from string slices.
pub fn argv<'a>(args: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    args.into_iter().map(str::to_owned).collect()
}

#[async_trait]
impl Backend for DirBackend {
    fn name(&self) -> &'static str {
        self.name
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            worker: self.worker.is_some(),
            raw_snapshot: self.inject_snapshot.is_some(),
            raw_log: self.inject_log.is_some(),
            data_dir: true,
            small_event_budget: self.small_event_budget,
            remote_tasks: false,
            failpoints: self.failpoints,
        }
    }

    async fn open(&self) -> Arc<dyn Store> {
        (self.open)(&self.dir)
    }

    fn worker_args(&self) -> Option<Vec<String>> {
        self.worker.as_ref().map(|f| f(&self.dir))
    }

    async fn inject_snapshot(&self, id: &RecordId, bytes: &[u8]) -> Option<()> {
        self.inject_snapshot
            .as_ref()
            .map(|f| f(&self.dir, id, bytes))
    }

    async fn inject_log_bytes(&self, id: &RecordId, bytes: &[u8]) -> Option<()> {
        self.inject_log.as_ref().map(|f| f(&self.dir, id, bytes))
    }

    fn data_dir(&self) -> Option<PathBuf> {
        Some(self.dir.clone())
    }
}
