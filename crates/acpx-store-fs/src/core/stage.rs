//! [`acpx_model::Store::stage_session`] for the file store: a new session written a batch at a
//! time behind its tombstone, and made visible by one rename (`docs/format.md` § Importing a
//! session: staged, then committed).
//!
//! Under the session's writer lock, held from the beginning of the stage to its end:
//!
//! 1. **begin**: (the first stage of a store handle sweeps the directory first, as
//!    [`FsCore::open`] does periodically: stale stages of other sessions are removed) the
//!    tombstone `<id>.deleted` is created holding the stage mark
//!    ([`STAGE_MARK_PREFIX`]), and it and the directory are fsynced. To every reader the
//!    session is now an interrupted delete: absent, whatever log files appear beside it (a
//!    `list` does not report them as a damaged session either). A tombstone found there first
//!    (a stage killed earlier: the rerun of the same import; or an interrupted delete) is
//!    finished first, as `create` does.
//! 2. **append**: each batch goes through the append path every writer uses (rotation,
//!    compression of closed segments, retention), with [`Durability::Flush`]: the log is
//!    written in place. The first batch may start above seq 1 (a log retention trimmed).
//! 3. **commit**: the pending lines are written out and every segment file is fsynced; the
//!    snapshot, written to a temp file and fsynced, is renamed over the tombstone (still an
//!    interrupted delete, now holding the whole snapshot, as `create_sessions` stages it); the
//!    directory is fsynced; then `<id>.deleted` is renamed to `<id>.json`: the commit point,
//!    one atomic rename, after which the session is whole and durable; the directory is fsynced
//!    once more.
//! 4. **abort** (and a commit that failed before its rename): the rest of a delete: the log
//!    files, then the tombstone, are removed.
//!
//! A kill at any point before the commit point leaves an interrupted delete: the next stage of
//! the same id finishes it before it begins (so the rerun of an import completes it), as does
//! a stage of any other id (its sweep), `fsck --repair` ([`acpx_model::Store::remove_stale_stages`])
//! and the periodic sweep of `FsStore::open`.

use std::fs;
use std::io::Write;
use std::sync::Arc;

use acpx_model::{
    EventLogState, RecordId, SessionLock, StaleStage, StoreError, StoreResult, Timestamp,
};

use super::{lock_slot, snapshots::PreparedSnapshot, FsCore, PreparedBatch};
use crate::fsutil::{create_new_file, fsync_dir, io_err, open_read};
use crate::log;

/// How a stage's tombstone starts (the rest of its line says who staged it, when): what tells
/// a stage's leftover from an interrupted delete's (a renamed snapshot, or an empty file).
pub(crate) const STAGE_MARK_PREFIX: &[u8] = b"{\"acpxStaged\":";

impl FsCore {
    /// Step 1 of a stage (see the module docs): takes the writer lock of `id` (waiting up to
    /// `timeout`), refuses a taken id, finishes a tombstone left there, and writes the stage's
    /// tombstone. Other stale stages (and a crash's temp files) are swept first.
    pub(crate) fn begin_stage(
        self: &Arc<Self>,
        id: &RecordId,
        timeout: std::time::Duration,
    ) -> StoreResult<SessionLock> {
        // What killed stages (and interrupted deletes) of other sessions left, while we are at
        // it: an import is when a user expects a store to be tidied. Once per store handle:
        // the sweep reads the whole directory, and a Node import stages thousands of sessions.
        if !self
            .stages_swept
            .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            if let Err(e) = self.cleanup_stale_temp_files() {
                tracing::warn!(error = %e, "could not sweep the store before staging a session");
            }
        }
        let writer = self.lock(id, timeout)?;
        let slot = self.slot(id);
        let mut st = lock_slot(&slot);
        // A stage killed earlier (the rerun of the same import) is reclaimed here.
        self.claim_for_new(id, &mut st)?;
        let tomb = self.layout.tombstone(id);
        let mut mark = STAGE_MARK_PREFIX.to_vec();
        mark.extend_from_slice(
            format!(
                "{{\"pid\":{},\"startedAt\":\"{}\"}}}}\n",
                std::process::id(),
                Timestamp::now()
            )
            .as_bytes(),
        );
        let mut f = create_new_file(&tomb).map_err(|e| io_err(&tomb, e))?;
        f.write_all(&mark)
            .and_then(|()| f.sync_all())
            .map_err(|e| io_err(&tomb, e))?;
        // The tombstone is durable before any segment of the stage can be: a machine crash
        // never leaves the stage's log without it (a damaged session to every reader).
        let dir = self.layout.dir();
        fsync_dir(dir).map_err(|e| io_err(dir, e))?;
        st.snapshot_present = Some(false);
        drop(st);
        Ok(writer)
    }

    /// Step 2: appends a batch of the stage under its lock (`Durability::Flush`). `before` is
    /// the seq the log continues from: for the first batch of a log retention trimmed, the
    /// seq below its first event (the empty log then starts there, as `create_sessions`
    /// starts one).
    pub(crate) fn stage_append(
        &self,
        writer: &SessionLock,
        batch: PreparedBatch,
        before: u64,
    ) -> StoreResult<()> {
        self.check_writer(writer)?;
        self.append_to(
            writer.id(),
            batch,
            acpx_model::Durability::Flush,
            Some(before),
        )
        .map(|_| ())
    }

    /// The first part of step 3: the staged log written out and every file of it fsynced;
    /// returns its state, for the snapshot's `acpx.event_log`.
    pub(crate) fn stage_log_state(&self, writer: &SessionLock) -> StoreResult<EventLogState> {
        self.check_writer(writer)?;
        let id = writer.id();
        let slot = self.slot(id);
        let mut st = lock_slot(&slot);
        self.write_pending(id, &mut st)?;
        if let Some(w) = st.writer.as_ref() {
            let active = self.layout.segment(id, 0);
            w.file.sync_data().map_err(|e| io_err(&active, e))?;
        }
        let older = log::probe_older(&self.layout, id, self.opts.max_segments)
            .map_err(|e| io_err(self.layout.dir(), e))?;
        for n in older {
            for path in [self.layout.segment(id, n), self.layout.segment_zst(id, n)] {
                match open_read(&path) {
                    Ok(f) => f.sync_all().map_err(|e| io_err(&path, e))?,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(io_err(&path, e)),
                }
            }
        }
        Ok(match st.writer {
            Some(_) => self.log_state(id, &st),
            // No event was staged: the state `create_sessions` gives an empty log.
            None => EventLogState {
                format_version: 1,
                active_path: self.layout.segment(id, 0).display().to_string(),
                segment_count: 0,
                max_segment_bytes: self.opts.max_segment_bytes,
                max_segments: self.opts.max_segments,
                last_seq: 0,
                last_write_at: None,
                last_write_error: None,
            },
        })
    }

    /// The rest of step 3: `prepared` (the snapshot at `revision`, with the state
    /// [`FsCore::stage_log_state`] gave) replaces the tombstone, which is then renamed to the
    /// snapshot: the commit point.
    pub(crate) fn commit_stage(
        &self,
        writer: &SessionLock,
        mut prepared: PreparedSnapshot,
        revision: u64,
    ) -> StoreResult<()> {
        self.check_writer(writer)?;
        let id = writer.id();
        let slot = self.slot(id);
        let mut st = lock_slot(&slot);
        self.ensure_valid(id, &mut st)?;
        if self.snapshot_present(id, &mut st)? {
            // Created meanwhile by a writer that did not take the lock (another store on
            // the same files): not ours to replace.
            return Err(StoreError::AlreadyExists(id.clone()));
        }
        self.write_staged_snapshot(id, &mut st, &mut prepared, revision)
    }

    /// Step 4: removes what the stage wrote (its log files and tombstone) under its lock.
    pub(crate) fn abort_stage(&self, writer: &SessionLock) -> StoreResult<()> {
        self.check_writer(writer)?;
        let id = writer.id();
        let slot = self.slot(id);
        let mut st = lock_slot(&slot);
        if self.snapshot_present(id, &mut st)? {
            // Committed after all: a stage is never removed once visible.
            return Ok(());
        }
        st.writer = None;
        st.snap = None;
        self.finish_delete(id).map(|_| ())
    }

    /// The stale stages and interrupted deletes: tombstones whose session lock is free (a
    /// stage or delete in progress holds it). With `remove`, each is finished (removed) as the
    /// sweep of [`FsCore::open`] finishes it; returns those it found (removed).
    pub(crate) fn stale_stages(&self, remove: bool) -> StoreResult<Vec<StaleStage>> {
        let dir = self.layout.dir();
        let mut tombstones = Vec::new();
        for entry in fs::read_dir(dir).map_err(|e| io_err(dir, e))? {
            let entry = entry.map_err(|e| io_err(dir, e))?;
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            if let Some(id) = crate::layout::tombstone_owner(&name) {
                tombstones.push(id);
            }
        }
        let describe = |id: &RecordId| {
            let tomb = self.layout.tombstone(id);
            let mut head = [0u8; 16];
            let staged = open_read(&tomb)
                .and_then(|mut f| std::io::Read::read(&mut f, &mut head))
                .is_ok_and(|n| head[..n].starts_with(STAGE_MARK_PREFIX));
            StaleStage {
                acpx_record_id: Some(id.clone()),
                location: tomb.display().to_string(),
                detail: if staged {
                    "a session staged by an import that was interrupted before its commit \
                     (never visible); its log files are removed with it"
                        .into()
                } else {
                    "an import or a delete that was interrupted (the session is gone for \
                     every reader); its remaining files are removed with it"
                        .into()
                },
            }
        };
        if remove {
            let described: Vec<StaleStage> = tombstones.iter().map(describe).collect();
            let finished = self.finish_interrupted_deletes(tombstones)?;
            return Ok(described
                .into_iter()
                .filter(|s| {
                    s.acpx_record_id
                        .as_ref()
                        .is_some_and(|id| finished.contains(id))
                })
                .collect());
        }
        let mut stale = Vec::new();
        for id in tombstones {
            if self.lock_is_free(&id)? {
                stale.push(describe(&id));
            }
        }
        Ok(stale)
    }

    /// Whether nobody (this process or another) holds the writer lock of `id`. Leaves no lock
    /// file it did not find.
    fn lock_is_free(&self, id: &RecordId) -> StoreResult<bool> {
        if let Some(slot) = self.existing_slot(id) {
            if lock_slot(&slot).held > 0 {
                return Ok(false);
            }
        }
        let path = self.layout.lock(id);
        match self
            .layout
            .locks
            .try_lock(id)
            .map_err(|e| io_err(&path, e))?
        {
            Some(taken) => {
                if taken.created {
                    let _ = taken.lock.unlink();
                }
                Ok(true)
            }
            None => Ok(false),
        }
    }
}
