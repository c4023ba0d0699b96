//! [`acpx_model::Store::stage_session`] for SQLite: the staged log waits in a spill file
//! outside the database, and the commit inserts the whole session in one transaction
//! (`docs/format.md` § Importing a session: staged, then committed).
//!
//! Under the session's writer lock (`<db>.locks/<id>.lock`), held from the beginning of the
//! stage to its end:
//!
//! - **begin**: the id is refused when a row holds it; the stage's spill file
//!   `<db>.staging/<id>.ndjson` is created (emptied, when a killed stage of the same id left
//!   one); the spill files of other sessions whose lock is free (stages killed earlier) are
//!   removed.
//! - **append**: each batch's NDJSON lines are written to the spill file (buffered, never
//!   fsynced: the file is read back by this process only). Memory holds a batch, not the
//!   log. The database is not touched: no other writer waits for the import.
//! - **commit**: one `BEGIN IMMEDIATE` transaction, committed with `synchronous=FULL`: the
//!   session's row, document, log row and message parts, then the spill file read back a
//!   thousand lines at a time into `event_rows` (the rows a retention trim would remove
//!   first left out: the log is stored as appends followed by one trim would leave it). All
//!   or nothing, durable when it returns; then the spill file is removed.
//! - **abort** (and a dropped stage): the spill file is removed.
//!
//! A kill leaves at most the spill file, which no reader of the database sees; the next stage
//! of any session (the rerun of the same import first of all) removes it, as does `fsck
//! --repair` ([`acpx_model::Store::remove_stale_stages`]). A kill during the commit's
//! transaction leaves nothing in the database (SQLite rolls it back).

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use acpx_lock::TakenLock;
use acpx_model::stage::StagedSeqs;
use acpx_model::{
    EventEnvelope, RecordId, SessionLock, SessionRecord, StagedSession, StaleStage, StoreError,
    StoreResult, Timestamp,
};
use async_trait::async_trait;

use crate::batch::insert_session;
use crate::connection::create_private_dir;
use crate::events::{insert_events, trim_step};
use crate::rows::{self, message_texts, ts_text, EventBatch, MessageText, SessionColumns};
use crate::Inner;

/// Lines read back from the spill file per insert at the commit.
const COMMIT_BATCH: usize = 1_000;

/// The directory of the spill files: `<db>.staging`, beside `<db>.locks`.
pub(crate) fn staging_dir(db: &Path) -> PathBuf {
    let mut dir = db.as_os_str().to_owned();
    dir.push(".staging");
    PathBuf::from(dir)
}

/// The session whose spill file `name` is (`<id>.ndjson`).
fn spill_owner(name: &str) -> Option<RecordId> {
    RecordId::parse(name.strip_suffix(".ndjson")?).ok()
}

impl Inner {
    fn spill_path(&self, id: &RecordId) -> PathBuf {
        staging_dir(&self.path).join(format!("{id}.ndjson"))
    }

    /// The beginning of a stage, under its lock: refuses a taken id, sweeps the stale spill
    /// files of other sessions, and creates (empties) this one's.
    fn begin_stage(&self, id: &RecordId) -> StoreResult<(PathBuf, File)> {
        let taken = self
            .conn()
            .prepare_cached("SELECT 1 FROM session_rows WHERE acpx_record_id = ?1")
            .and_then(|mut stmt| stmt.exists([id.as_str()]))
            .map_err(self.sql("look up the session"))?;
        if taken {
            return Err(StoreError::AlreadyExists(id.clone()));
        }
        let dir = staging_dir(&self.path);
        create_private_dir(&dir)?;
        if let Err(e) = self.stale_stages(true, Some(id)) {
            tracing::warn!(error = %e, "could not remove stale staged sessions");
        }
        let path = self.spill_path(id);
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .custom_flags(libc_nofollow())
            .open(&path)
            .map_err(|e| StoreError::io(path.display(), e))?;
        Ok((path, file))
    }

    /// Spill files whose session lock is free (a stage in progress holds it), but `except`;
    /// with `remove`, removed. Returns them.
    pub(crate) fn stale_stages(
        &self,
        remove: bool,
        except: Option<&RecordId>,
    ) -> StoreResult<Vec<StaleStage>> {
        let dir = staging_dir(&self.path);
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(StoreError::io(dir.display(), e)),
        };
        let mut stale = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| StoreError::io(dir.display(), e))?;
            let Some(id) = entry.file_name().to_str().and_then(spill_owner) else {
                continue;
            };
            if except == Some(&id) {
                continue;
            }
            let lock_path = self.lock_path(&id);
            if self.held.contains(&lock_path) {
                continue;
            }
            let Some(TakenLock {
                lock,
                created: made_the_file,
            }) = self
                .locks
                .try_lock(&id)
                .map_err(|e| StoreError::io(lock_path.display(), e))?
            else {
                continue;
            };
            let path = entry.path();
            if remove {
                match std::fs::remove_file(&path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(StoreError::io(path.display(), e)),
                }
            }
            if remove || made_the_file {
                crate::lock::remove_lock_file(&lock);
            }
            drop(lock);
            stale.push(StaleStage {
                acpx_record_id: Some(id),
                location: path.display().to_string(),
                detail: "the log of a session staged by an import that was interrupted before \
                         its commit (never in the database)"
                    .into(),
            });
        }
        Ok(stale)
    }

    /// The commit's transaction (see the module docs): the session, then the spill file's
    /// lines after the first `skip`.
    #[allow(clippy::too_many_arguments)]
    fn commit_stage(
        &self,
        id: &RecordId,
        cols: &SessionColumns<'_>,
        msgs: &[MessageText<'_>],
        spill: &Path,
        skip: u64,
        last_seq: u64,
        retained: i64,
        written_at: Option<&str>,
    ) -> StoreResult<()> {
        self.transaction("commit a staged session", true, |tx| {
            let key = insert_session(tx, id, cols, msgs, last_seq, retained, written_at)?;
            let file = File::open(spill).map_err(|e| StoreError::io(spill.display(), e))?;
            let mut reader = BufReader::with_capacity(256 * 1024, file);
            let mut line = Vec::new();
            let mut events = Vec::with_capacity(COMMIT_BATCH);
            let mut n = 0u64;
            loop {
                line.clear();
                let read = reader
                    .read_until(b'\n', &mut line)
                    .map_err(|e| StoreError::io(spill.display(), e))?;
                if read > 0 {
                    n += 1;
                    if n > skip {
                        let e = EventEnvelope::from_ndjson_line(&line).map_err(|err| {
                            StoreError::corrupt(
                                spill.display().to_string(),
                                Some(n),
                                format!("a staged line is not an event: {err}"),
                            )
                        })?;
                        events.push(e);
                    }
                }
                if events.len() >= COMMIT_BATCH || (read == 0 && !events.is_empty()) {
                    insert_events(tx, key, &EventBatch::new(&events)?)?;
                    events.clear();
                }
                if read == 0 {
                    break;
                }
            }
            Ok(())
        })
    }
}

/// `O_NOFOLLOW`: a spill file is never written through a symbolic link.
fn libc_nofollow() -> i32 {
    rustix::fs::OFlags::NOFOLLOW.bits() as i32
}

/// How many of the first lines of `spill` (of `total` bytes of lines) a retention trim of
/// a log over `budget` removes (at least the excess down to `budget − step`, never the last
/// line), and their bytes: what appends followed by one trim leave.
fn trimmed_prefix(spill: &Path, total: u64, budget: u64, step: u64) -> StoreResult<(u64, u64)> {
    let excess = total.saturating_sub(budget.saturating_sub(step));
    let file = File::open(spill).map_err(|e| StoreError::io(spill.display(), e))?;
    let mut reader = BufReader::with_capacity(256 * 1024, file);
    let mut line = Vec::new();
    let (mut lines, mut freed) = (0u64, 0u64);
    let mut previous: Option<u64> = None;
    loop {
        line.clear();
        let read = reader
            .read_until(b'\n', &mut line)
            .map_err(|e| StoreError::io(spill.display(), e))?;
        if read == 0 {
            break;
        }
        // The line before this one may go: it is not the last.
        if let Some(bytes) = previous.take() {
            if freed >= excess {
                break;
            }
            freed += bytes;
            lines += 1;
        }
        previous = Some(read as u64);
    }
    Ok((lines, freed))
}

/// A session staged in SQLite, holding its writer lock and its spill file.
#[derive(Debug)]
pub(crate) struct SqliteStage {
    inner: Arc<Inner>,
    record: SessionRecord,
    writer: Option<SessionLock>,
    /// The spill file and its writer; `None` once the stage ended.
    spill: Option<(PathBuf, BufWriter<File>)>,
    seqs: StagedSeqs,
    /// Bytes of the staged lines (the unit of the retention budget).
    bytes: u64,
    line: Vec<u8>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inner")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl crate::SqliteStore {
    /// [`acpx_model::Store::stage_session`].
    pub(crate) async fn begin_stage(&self, mut record: SessionRecord) -> StoreResult<SqliteStage> {
        let id = record.acpx_record_id.clone();
        record.validate(&self.inner.row_location(id.as_str()))?;
        record.revision = 0;
        let writer =
            acpx_model::Store::lock(self, &id, acpx_model::stage::STAGE_LOCK_TIMEOUT).await?;
        let (path, file) = self.run(move |inner| inner.begin_stage(&id)).await?;
        Ok(SqliteStage {
            inner: Arc::clone(&self.inner),
            record,
            writer: Some(writer),
            spill: Some((path, BufWriter::with_capacity(256 * 1024, file))),
            seqs: StagedSeqs::default(),
            bytes: 0,
            line: Vec::new(),
        })
    }
}

impl SqliteStage {
    fn ended(&self) -> StoreError {
        StoreError::Backend {
            backend: crate::BACKEND,
            message: format!(
                "the stage of session {} has ended",
                self.record.acpx_record_id
            ),
        }
    }

    /// Removes the spill file (the stage's lock still held).
    fn remove_spill(&mut self) -> StoreResult<()> {
        if let Some((path, file)) = self.spill.take() {
            drop(file);
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(StoreError::io(path.display(), e)),
            }
        }
        Ok(())
    }
}

impl Drop for SqliteStage {
    fn drop(&mut self) {
        if let Err(e) = self.remove_spill() {
            tracing::warn!(error = %e, "could not remove the spill file of a dropped stage");
        }
    }
}

#[async_trait]
impl StagedSession for SqliteStage {
    fn id(&self) -> &RecordId {
        &self.record.acpx_record_id
    }

    async fn append(&mut self, events: &[EventEnvelope]) -> StoreResult<()> {
        if events.is_empty() {
            return Ok(());
        }
        self.seqs.check(&self.record.acpx_record_id, events)?;
        let Some((path, file)) = self.spill.as_mut() else {
            return Err(self.ended());
        };
        self.line.clear();
        for e in events {
            e.write_ndjson_line(&mut self.line);
        }
        file.write_all(&self.line)
            .map_err(|e| StoreError::io(path.display(), e))?;
        self.bytes += self.line.len() as u64;
        self.seqs.advance(events);
        Ok(())
    }

    async fn commit(mut self: Box<Self>) -> StoreResult<SessionRecord> {
        // The spill file stays the stage's until the commit is done: on a failure below,
        // dropping the stage removes it.
        let Some((path, file)) = self.spill.as_mut() else {
            return Err(self.ended());
        };
        file.flush()
            .map_err(|e| StoreError::io(path.display(), e))?;
        let path = path.clone();
        let options = &self.inner.options;
        let budget = options
            .max_segment_bytes
            .saturating_mul(u64::from(options.max_segments));
        let (skip, freed) = if self.bytes > budget {
            let step = u64::try_from(trim_step(options.max_segment_bytes)).unwrap_or(0);
            let spill = path.clone();
            let total = self.bytes;
            tokio::task::spawn_blocking(move || trimmed_prefix(&spill, total, budget, step))
                .await
                .map_err(|e| StoreError::Backend {
                    backend: crate::BACKEND,
                    message: format!("reading the spill file did not complete: {e}"),
                })??
        } else {
            (0, 0)
        };
        let retained = i64::try_from(self.bytes - freed).unwrap_or(i64::MAX);
        let id = self.record.acpx_record_id.clone();
        let last_seq = self.seqs.last_seq();
        let now = Timestamp::now();
        let mut record = self.record.clone();
        record.acpx.event_log = acpx_model::EventLogState {
            last_seq,
            last_write_at: (last_seq > 0).then_some(now),
            ..self.inner.log_state_of(&id, retained)
        };
        record.revision = 2;
        let cols = rows::session_columns(&record)?;
        let msgs: Vec<MessageText<'static>> = message_texts(&record)?
            .into_iter()
            .map(MessageText::into_owned)
            .collect();
        let written_at = (last_seq > 0).then(|| ts_text(&now));
        let inner = Arc::clone(&self.inner);
        let spill = path.clone();
        tokio::task::spawn_blocking(move || {
            inner.commit_stage(
                &id,
                &cols,
                &msgs,
                &spill,
                skip,
                last_seq,
                retained,
                written_at.as_deref(),
            )
        })
        .await
        .map_err(|e| StoreError::Backend {
            backend: crate::BACKEND,
            message: format!("the commit did not complete: {e}"),
        })??;
        // Committed: the spill file goes, then the lock.
        if let Err(e) = self.remove_spill() {
            tracing::warn!(error = %e, "could not remove the spill file of a committed stage");
        }
        self.writer = None;
        Ok(record)
    }

    async fn abort(mut self: Box<Self>) -> StoreResult<()> {
        let removed = self.remove_spill();
        self.writer = None;
        removed
    }
}
