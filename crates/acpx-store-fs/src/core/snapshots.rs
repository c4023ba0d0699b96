//! Snapshots of [`FsCore`]: create, save (revision check, temp file and rename), load,
//! close and delete, and the listing and search built on the listing cache.

use std::fs;
use std::io::{self, Read};
#[cfg(test)]
use std::sync::atomic::Ordering;

use acpx_model::{
    normalize_cwd, ListPage, ListQuery, RecordId, SearchHit, SearchQuery, SessionRecord,
    SessionSummary, SettleOnLoad, StoreError, StoreResult, Timestamp,
};

use super::{FsCore, SlotState};
use crate::failpoint::failpoint;
use crate::fsutil::{
    create_new_file, fsync_dir, io_err, open_read, random_suffix, read_file, remove_if_exists,
    stat_opt, FileIdent,
};
use crate::index::{
    journal_saved, now_ns, read_revision_prefix, reason, Listing, MISSING_SNAPSHOT,
};
use crate::layout::{classify, is_log_file_of, temp_writer_alive, Entry};
use crate::log::{self};
use crate::search_index;
use crate::summary::{check_snapshot_id, parse_snapshot};
use crate::summary::{summarize_file, STREAMED_FROM};

/// A search reads a snapshot larger than this settling, when the store settles its loads
/// (a smaller one whole): the size from which the listing summary streams a file too.
pub(crate) const SEARCH_SETTLES_FROM: u64 = STREAMED_FROM;

/// A validated snapshot, already written to a temp file beside the snapshot (not yet fsynced),
/// and the summary of what it holds. The document is streamed to the file, never built in
/// memory: a long conversation costs its size on disk, not twice its size in memory at every
/// save. Dropping it before [`FsCore::write_snapshot`] renamed it removes the temp file.
pub(crate) struct PreparedSnapshot {
    tmp: std::path::PathBuf,
    file: Option<fs::File>,
    summary: SessionSummary,
    /// The session's entry in the search index, when its texts are small enough to be
    /// noted at every save (see [`crate::search_index`]).
    search_messages: Option<Vec<u8>>,
}

impl Drop for PreparedSnapshot {
    fn drop(&mut self) {
        if self.file.is_some() {
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

impl FsCore {
    /// Stores a new session (revision 1). [`StoreError::AlreadyExists`] if the id is taken.
    #[cfg(any(test, feature = "testing"))]
    pub fn create(&self, record: &mut SessionRecord) -> StoreResult<()> {
        let bytes = self.prepare_snapshot(record, 1)?;
        self.create_bytes(&record.acpx_record_id, bytes)?;
        record.revision = 1;
        Ok(())
    }

    /// Validates `record` and serializes it with `revision` (restoring the caller's value),
    /// with the summary the listing cache records for it.
    pub(crate) fn prepare_snapshot(
        &self,
        record: &mut SessionRecord,
        revision: u64,
    ) -> StoreResult<PreparedSnapshot> {
        let path = self.layout.snapshot(&record.acpx_record_id);
        record.validate(&path.display().to_string())?;
        let old = std::mem::replace(&mut record.revision, revision);
        let prepared = self.stream_snapshot(record);
        record.revision = old;
        prepared
    }

    /// Writes `record` to a new temp file beside its snapshot (see [`PreparedSnapshot`]).
    fn stream_snapshot(&self, record: &SessionRecord) -> StoreResult<PreparedSnapshot> {
        let mut attempt = 0;
        let (tmp, file) = loop {
            let tmp = self
                .layout
                .snapshot_temp(&record.acpx_record_id, &random_suffix());
            match create_new_file(&tmp) {
                Ok(f) => break (tmp, f),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempt < 8 => attempt += 1,
                Err(e) => return Err(io_err(&tmp, e)),
            }
        };
        let mut prepared = PreparedSnapshot {
            tmp,
            file: Some(file),
            summary: record.summary(),
            search_messages: search_index::messages_part(record, search_index::SAVE_TEXT_MAX),
        };
        if let Some(f) = prepared.file.as_mut() {
            record.write_json(f).map_err(|e| io_err(&prepared.tmp, e))?;
        }
        Ok(prepared)
    }

    pub(crate) fn create_bytes(
        &self,
        id: &RecordId,
        mut bytes: PreparedSnapshot,
    ) -> StoreResult<()> {
        self.with_write(id, |core, st| {
            core.ensure_valid(id, st)?;
            if core.snapshot_present(id, st)? {
                return Err(StoreError::AlreadyExists(id.clone()));
            }
            st.writer = None;
            let tomb = core.layout.tombstone(id);
            if stat_opt(&tomb).map_err(|e| io_err(&tomb, e))?.is_some() {
                // What an interrupted delete left must not become the new session's history.
                core.finish_delete(id)?;
            } else if core.segments_exist(id)? {
                // A session whose snapshot is missing but whose log is intact still exists
                // (damaged; `fsck --repair` rebuilds it): the id is taken.
                return Err(StoreError::AlreadyExists(id.clone()));
            }
            core.write_snapshot(id, st, &mut bytes, 1)
        })
    }

    /// Replaces the snapshot if the stored revision equals `record.revision`, then increments
    /// `record.revision`.
    #[cfg(any(test, feature = "testing"))]
    pub fn save(&self, record: &mut SessionRecord) -> StoreResult<()> {
        let expected = record.revision;
        let bytes = self.prepare_snapshot(record, expected + 1)?;
        self.save_bytes(&record.acpx_record_id, expected, bytes)?;
        record.revision = expected + 1;
        Ok(())
    }

    pub(crate) fn save_bytes(
        &self,
        id: &RecordId,
        expected: u64,
        mut bytes: PreparedSnapshot,
    ) -> StoreResult<()> {
        self.with_write(id, |core, st| {
            core.ensure_valid(id, st)?;
            let actual = core.stored_revision(id, st)?;
            if actual != expected {
                return Err(StoreError::Conflict {
                    id: id.clone(),
                    expected,
                    actual,
                });
            }
            core.write_snapshot(id, st, &mut bytes, expected + 1)
        })
    }

    /// Writes a snapshot whatever the stored one holds (`Store::replace_snapshot`): the file
    /// is not read, only replaced atomically, as every save replaces it.
    pub(crate) fn replace_snapshot_bytes(
        &self,
        id: &RecordId,
        mut bytes: PreparedSnapshot,
        revision: u64,
    ) -> StoreResult<()> {
        self.with_write(id, |core, st| {
            core.write_snapshot(id, st, &mut bytes, revision)
        })
    }

    /// The revision of the stored snapshot: from the cache while this store has held the lock
    /// continuously since it wrote the file, else from the first bytes of the file (the layout
    /// this store writes), else by parsing the document.
    pub(super) fn stored_revision(&self, id: &RecordId, st: &mut SlotState) -> StoreResult<u64> {
        let path = self.layout.snapshot(id);
        let not_found = |st: &mut SlotState| {
            st.snapshot_present = Some(false);
            StoreError::NotFound(id.clone())
        };
        if let Some((cached, rev)) = st.snap {
            match stat_opt(&path).map_err(|e| io_err(&path, e))? {
                None => return Err(not_found(st)),
                Some(m) if FileIdent::of(&m) == cached => return Ok(rev),
                Some(_) => st.snap = None,
            }
        }
        let file = match open_read(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(not_found(st)),
            Err(e) => return Err(io_err(&path, e)),
        };
        st.snapshot_present = Some(true);
        if let Some(rev) = read_revision_prefix(&file).map_err(|e| io_err(&path, e))? {
            return Ok(rev);
        }
        #[derive(serde::Deserialize)]
        struct RevisionProbe {
            #[serde(default)]
            revision: u64,
        }
        let mut bytes = Vec::new();
        (&file)
            .read_to_end(&mut bytes)
            .map_err(|e| io_err(&path, e))?;
        let probe: RevisionProbe = serde_json::from_slice(&bytes).map_err(|e| {
            StoreError::corrupt(
                path.display().to_string(),
                None,
                format!(
                    "field `revision`: cannot read the stored revision ({e}); delete or repair \
                     the file before saving over it"
                ),
            )
        })?;
        Ok(probe.revision)
    }

    /// Temp file in the same directory, write, fsync, rename over the snapshot, fsync the
    /// directory. A crash at any point leaves the old or the new snapshot. The new file's
    /// identity and summary are then noted in the listing journal (see the crate docs).
    pub(super) fn write_snapshot(
        &self,
        id: &RecordId,
        st: &mut SlotState,
        prepared: &mut PreparedSnapshot,
        revision: u64,
    ) -> StoreResult<()> {
        let path = self.layout.snapshot(id);
        let dir = self.layout.dir();
        let tmp = &prepared.tmp;
        let Some(file) = prepared.file.as_ref() else {
            return Err(StoreError::InvalidArgument(format!(
                "the prepared snapshot {} was already written",
                tmp.display()
            )));
        };
        // On any error below, dropping `prepared` removes the temp file.
        file.sync_all().map_err(|e| io_err(tmp, e))?;
        failpoint!("save.after_temp_fsync");
        fs::rename(tmp, &path).map_err(|e| io_err(&path, e))?;
        // Renamed: the temp file is the snapshot now, nothing to remove on drop.
        prepared.file = None;
        failpoint!("save.after_rename");
        st.snapshot_present = Some(true);
        // Taken before the stat: under the writer lock the file stat'ed is the one just
        // written, so it held `prepared` at least from this instant on.
        let verified_ns = now_ns();
        st.snap = stat_opt(&path)
            .ok()
            .flatten()
            .map(|m| (FileIdent::of(&m), revision));
        fsync_dir(dir).map_err(|e| io_err(dir, e))?;
        if let Some((ident, _)) = st.snap {
            journal_saved(&self.layout, id, ident, &prepared.summary, verified_ns);
            if let Some(messages) = &prepared.search_messages {
                search_index::note_saved(&self.layout, id, ident, revision, messages);
            }
        }
        Ok(())
    }

    /// The snapshot of a stage (`core::stage`, step 3): the temp file is fsynced and renamed
    /// over the stage's tombstone (the session still absent), the directory fsynced (the
    /// stage's segments and the tombstone's new content are durable), then the tombstone is
    /// renamed to the snapshot: the commit point; the directory is fsynced again. A crash
    /// before that rename leaves an interrupted delete, after it the whole session. Noted in
    /// the listing journal and the search index as a save is.
    pub(super) fn write_staged_snapshot(
        &self,
        id: &RecordId,
        st: &mut SlotState,
        prepared: &mut PreparedSnapshot,
        revision: u64,
    ) -> StoreResult<()> {
        let path = self.layout.snapshot(id);
        let tomb = self.layout.tombstone(id);
        let dir = self.layout.dir();
        let tmp = &prepared.tmp;
        let Some(file) = prepared.file.as_ref() else {
            return Err(StoreError::InvalidArgument(format!(
                "the prepared snapshot {} was already written",
                tmp.display()
            )));
        };
        file.sync_all().map_err(|e| io_err(tmp, e))?;
        fs::rename(tmp, &tomb).map_err(|e| io_err(&tomb, e))?;
        // The tombstone holds it now (a stage's leftover is removed with it).
        prepared.file = None;
        fsync_dir(dir).map_err(|e| io_err(dir, e))?;
        failpoint!("stage.before_commit");
        fs::rename(&tomb, &path).map_err(|e| io_err(&path, e))?;
        st.snapshot_present = Some(true);
        let verified_ns = now_ns();
        st.snap = stat_opt(&path)
            .ok()
            .flatten()
            .map(|m| (FileIdent::of(&m), revision));
        fsync_dir(dir).map_err(|e| io_err(dir, e))?;
        if let Some((ident, _)) = st.snap {
            journal_saved(&self.layout, id, ident, &prepared.summary, verified_ns);
            if let Some(messages) = &prepared.search_messages {
                search_index::note_saved(&self.layout, id, ident, revision, messages);
            }
        }
        Ok(())
    }

    /// Reads and validates a session snapshot.
    pub fn load(&self, id: &RecordId) -> StoreResult<SessionRecord> {
        let path = self.layout.snapshot(id);
        let bytes = match read_file(&path) {
            Ok(b) => b,
            Err(e) => return Err(self.unreadable_snapshot(id, &path, e)),
        };
        #[cfg(test)]
        self.snapshot_parses.fetch_add(1, Ordering::Relaxed);
        parse_snapshot(id, &path, &bytes).map_err(|(field, message)| {
            StoreError::corrupt(path.display().to_string(), None, reason(&field, &message))
        })
    }

    /// [`FsCore::load`] read as a stream, settling the conversation as it goes
    /// (`Store::load_settling`): the document is never whole in memory.
    pub fn load_settling(
        &self,
        id: &RecordId,
        settle: &SettleOnLoad,
    ) -> StoreResult<SessionRecord> {
        let path = self.layout.snapshot(id);
        let file = match open_read(&path) {
            Ok(f) => f,
            Err(e) => return Err(self.unreadable_snapshot(id, &path, e)),
        };
        #[cfg(test)]
        self.snapshot_parses.fetch_add(1, Ordering::Relaxed);
        let origin = path.display().to_string();
        SessionRecord::from_json_reader(file, &origin, Some(settle))
            .map_err(|e| io_err(&path, e))?
            .map_err(|v| (v.field, v.message))
            .and_then(|record| check_snapshot_id(id, record))
            .map_err(|(field, message)| StoreError::corrupt(origin, None, reason(&field, &message)))
    }

    /// `Store::summary`: the snapshot is opened and its identity compared with the one the
    /// memo's summary was read from; it is read again (a stream when large) only when a save
    /// replaced it.
    pub fn summary(&self, id: &RecordId) -> StoreResult<SessionSummary> {
        let path = self.layout.snapshot(id);
        let file = match open_read(&path) {
            Ok(f) => f,
            Err(e) => return Err(self.unreadable_snapshot(id, &path, e)),
        };
        let meta = file.metadata().map_err(|e| io_err(&path, e))?;
        let ident = FileIdent::of(&meta);
        if let Some(kept) = self.summaries.get(id, &ident) {
            // A file identity can repeat (an inode reused within one clock tick at the same
            // length): the revision at the start of the file must agree too, as for the
            // list cache. A file laid out by something else is judged by identity.
            match read_revision_prefix(&file) {
                Ok(Some(rev)) if rev != kept.revision => {}
                Ok(_) => return Ok(kept),
                Err(e) => return Err(io_err(&path, e)),
            }
        }
        #[cfg(test)]
        self.snapshot_parses.fetch_add(1, Ordering::Relaxed);
        let summary = summarize_file(id, &path, file, ident.len, STREAMED_FROM)
            .map_err(|e| io_err(&path, e))?
            .map_err(|(field, message)| {
                StoreError::corrupt(path.display().to_string(), None, reason(&field, &message))
            })?;
        self.summaries.put(id, ident, &summary);
        Ok(summary)
    }

    /// The error of a snapshot that could not be opened or read: a missing one is a session
    /// not found, or a damaged session when its log is left.
    fn unreadable_snapshot(
        &self,
        id: &RecordId,
        path: &std::path::Path,
        e: io::Error,
    ) -> StoreError {
        if e.kind() != io::ErrorKind::NotFound {
            return io_err(path, e);
        }
        match self.snapshot_missing_log_left(id) {
            Ok(true) => StoreError::corrupt(
                path.display().to_string(),
                None,
                MISSING_SNAPSHOT.to_owned(),
            ),
            Ok(false) => StoreError::NotFound(id.clone()),
            Err(e) => e,
        }
    }

    /// Marks a session closed; idempotent. With `settle`, the document is read settling
    /// (`Store::close_settling`).
    pub fn close(
        &self,
        id: &RecordId,
        at: Timestamp,
        settle: Option<&SettleOnLoad>,
    ) -> StoreResult<SessionRecord> {
        self.with_write(id, |core, st| {
            core.ensure_valid(id, st)?;
            // Read settling when the store settles its loads: the save below streams the
            // settled turns back into the new snapshot, so the session is never whole here.
            let mut record = match settle {
                Some(settle) => core.load_settling(id, settle)?,
                None => core.load(id)?,
            };
            if record.closed {
                return Ok(record);
            }
            record.closed = true;
            record.closed_at = Some(at);
            record.pid = None;
            let expected = record.revision;
            let mut bytes = core.prepare_snapshot(&mut record, expected + 1)?;
            core.write_snapshot(id, st, &mut bytes, expected + 1)?;
            record.revision = expected + 1;
            Ok(record)
        })
    }

    /// Removes the snapshot, every log segment, set-aside torn tails and temp files of `id`.
    ///
    /// The commit point is the tombstone `<id>.deleted`: the snapshot is renamed to it (an
    /// empty one is written when there is no snapshot but a log), and the directory fsynced.
    /// From then on the session is gone for every reader, whatever log files are left; they
    /// are removed next, and the tombstone last. A crash before the commit point leaves the
    /// whole session, after it nothing findable (docs/format.md § Delete).
    pub fn delete(&self, id: &RecordId) -> StoreResult<bool> {
        self.with_write(id, |core, st| {
            core.ensure_valid(id, st)?;
            // Pending events of a deleted session are dropped with it.
            st.writer = None;
            st.snap = None;
            let snapshot = core.layout.snapshot(id);
            let tomb = core.layout.tombstone(id);
            let dir = core.layout.dir();
            let renamed = match fs::rename(&snapshot, &tomb) {
                Ok(()) => true,
                Err(e) if e.kind() == io::ErrorKind::NotFound => false,
                Err(e) => return Err(io_err(&snapshot, e)),
            };
            st.snapshot_present = Some(false);
            let mut existed = renamed;
            if !renamed && stat_opt(&tomb).map_err(|e| io_err(&tomb, e))?.is_none() {
                // A session whose snapshot is missing but whose log is left (damaged, found
                // by list and rebuilt by fsck): its log goes behind a tombstone too.
                if core.segments_exist(id)? {
                    let f = create_new_file(&tomb).map_err(|e| io_err(&tomb, e))?;
                    f.sync_all().map_err(|e| io_err(&tomb, e))?;
                    existed = true;
                }
            }
            fsync_dir(dir).map_err(|e| io_err(dir, e))?;
            failpoint!("delete.after_snapshot_unlink");
            existed |= core.finish_delete(id)?;
            Ok(existed)
        })
    }

    /// The part of a delete after its commit point (the tombstone), also run for a delete a
    /// crash interrupted: removes every segment, torn tail and temp file of `id`, fsyncs the
    /// directory, then removes the tombstone. Returns whether anything was removed. The
    /// caller holds the session's lock and has dropped its log writer.
    pub(super) fn finish_delete(&self, id: &RecordId) -> StoreResult<bool> {
        let mut existed = self.remove_segments(id)?;
        let dir = self.layout.dir();
        let rd = fs::read_dir(dir).map_err(|e| io_err(dir, e))?;
        for entry in rd {
            let entry = entry.map_err(|e| io_err(dir, e))?;
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            // A temp file of a live process may be a save in flight (its writer checks the
            // revision under the lock and fails; the file is its to remove).
            let ours = is_log_file_of(&name, id)
                || (classify(&name) == Some(Entry::SnapshotTemp(id.clone()))
                    && !temp_writer_alive(&name));
            if ours {
                let p = entry.path();
                existed |= remove_if_exists(&p).map_err(|e| io_err(&p, e))?;
            }
        }
        fsync_dir(dir).map_err(|e| io_err(dir, e))?;
        failpoint!("delete.after_logs_removed");
        acpx_lock::lease_file::remove_unheld(&self.layout.lease(id))?;
        let tomb = self.layout.tombstone(id);
        if remove_if_exists(&tomb).map_err(|e| io_err(&tomb, e))? {
            fsync_dir(dir).map_err(|e| io_err(dir, e))?;
        }
        Ok(existed)
    }

    /// Whether any event segment of `id` (the active one or an older one) exists.
    pub(super) fn segments_exist(&self, id: &RecordId) -> StoreResult<bool> {
        let active = self.layout.segment(id, 0);
        if stat_opt(&active).map_err(|e| io_err(&active, e))?.is_some() {
            return Ok(true);
        }
        let dir = self.layout.dir();
        let older = log::probe_older(&self.layout, id, self.opts.max_segments)
            .map_err(|e| io_err(dir, e))?;
        Ok(!older.is_empty())
    }

    /// Whether `id` is a session whose snapshot is missing while its log is still there and no
    /// delete is under way (no tombstone): a damaged session, not a deleted one.
    pub(super) fn snapshot_missing_log_left(&self, id: &RecordId) -> StoreResult<bool> {
        let tomb = self.layout.tombstone(id);
        if stat_opt(&tomb).map_err(|e| io_err(&tomb, e))?.is_some() {
            return Ok(false);
        }
        self.segments_exist(id)
    }

    /// Removes the active and older segments of `id` that the probe finds.
    pub(super) fn remove_segments(&self, id: &RecordId) -> StoreResult<bool> {
        let dir = self.layout.dir();
        let mut any = false;
        let older = log::probe_older(&self.layout, id, self.opts.max_segments)
            .map_err(|e| io_err(dir, e))?;
        let active = self.layout.segment(id, 0);
        any |= remove_if_exists(&active).map_err(|e| io_err(&active, e))?;
        for n in older {
            any |= crate::log::rotate::remove_segment_files(&self.layout, id, n)?;
        }
        Ok(any)
    }

    /// Every stored session, without reading conversations (see the crate docs on the listing
    /// cache).
    pub fn list(&self, query: &ListQuery) -> StoreResult<ListPage> {
        // The filters are applied while listing, so that only the matching summaries are
        // copied out of the cache (`paginate` applies them again, with order and cursor).
        let cwd = query.cwd.as_deref().map(normalize_cwd).transpose()?;
        let listing = self.list_matching(&|s| query.matches(s, cwd.as_deref()))?;
        query.paginate(listing.summaries, listing.skipped)
    }

    pub(crate) fn list_all(&self) -> StoreResult<Listing> {
        self.list_matching(&|_| true)
    }

    fn list_matching(&self, keep: &dyn Fn(&SessionSummary) -> bool) -> StoreResult<Listing> {
        let mut index = self.index.lock().unwrap_or_else(|p| p.into_inner());
        let listing = index.list_matching(&self.layout, keep)?;
        #[cfg(test)]
        self.snapshot_parses
            .fetch_add(listing.parsed, Ordering::Relaxed);
        Ok(listing)
    }

    /// The messages of the sessions (in list order) matching `query`: from the search index
    /// where it describes the snapshot the listing found, else from the snapshot (see
    /// [`crate::search_index`]), read settling with a [`SettleOnLoad::another_load`] of
    /// `settle` when given and the snapshot is larger than [`SEARCH_SETTLES_FROM`] (a long
    /// conversation is then never whole in memory).
    pub fn search(
        &self,
        query: &SearchQuery,
        settle: Option<&SettleOnLoad>,
    ) -> StoreResult<Vec<SearchHit>> {
        let cwd = query.cwd.as_deref().map(normalize_cwd).transpose()?;
        if query.terms().is_empty() {
            return Ok(Vec::new());
        }
        let listing = self.list_all()?;
        let sessions: Vec<_> = listing
            .summaries
            .into_iter()
            .zip(listing.idents)
            .filter(|(s, _)| {
                cwd.as_deref()
                    .is_none_or(|c| normalize_cwd(&s.cwd).is_ok_and(|sc| sc == c))
            })
            .collect();
        Ok(search_index::search(
            &self.layout,
            sessions,
            query,
            |id, ident| {
                // A short session is read whole: settling it would write its turns to spill
                // files only to read them back at once.
                let Some(settle) = settle.filter(|_| ident.len > SEARCH_SETTLES_FROM) else {
                    return self.load(id);
                };
                let this_load = settle.another_load();
                let record = self.load_settling(id, &this_load);
                if let Some(warning) = this_load.failure_warning() {
                    tracing::warn!(session = %id, "{warning}");
                }
                record
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{lock_slot, FsStoreOptions};
    use acpx_model::NewSession;

    fn record(id: &str) -> SessionRecord {
        SessionRecord::new(
            NewSession {
                acpx_record_id: RecordId::parse(id).unwrap(),
                acp_session_id: "acp".into(),
                agent_session_id: None,
                agent_command: "agent".into(),
                cwd: "/r".into(),
                name: None,
            },
            Timestamp::now(),
        )
    }

    #[test]
    fn a_summary_reads_the_snapshot_again_only_once_it_changed() {
        let tmp = tempfile::tempdir().unwrap();
        let core = FsCore::open(tmp.path(), FsStoreOptions::default()).unwrap();
        let mut r = record("asked");
        // Past the size from which a summary is read as a stream.
        let long = "x".repeat(usize::try_from(STREAMED_FROM).unwrap());
        r.thread.title = long;
        core.create(&mut r).unwrap();
        let id = r.acpx_record_id.clone();
        let parses = || core.snapshot_parses.load(Ordering::Relaxed);
        let first = core.summary(&id).unwrap();
        assert_eq!(first, r.summary());
        assert_eq!(parses(), 1);
        for _ in 0..5 {
            assert_eq!(core.summary(&id).unwrap(), first);
        }
        assert_eq!(parses(), 1, "an unchanged snapshot is not read again");
        core.close(&id, Timestamp::now(), None).unwrap();
        let closed = core.summary(&id).unwrap();
        assert!(closed.closed);
        assert_eq!(closed.revision, first.revision + 1);
        assert_eq!(parses(), 3, "the close read it once, the summary once more");
        // Another program rewrites the file in place (same inode, same length): it is read
        // again.
        let path = core.layout.snapshot(&id);
        let bytes = fs::read(&path).unwrap();
        let text = String::from_utf8(bytes).unwrap();
        let rev = format!("\"revision\": {},", closed.revision);
        let bumped = format!("\"revision\": {},", closed.revision + 1);
        assert_eq!(rev.len(), bumped.len());
        fs::write(&path, text.replacen(&rev, &bumped, 1)).unwrap();
        assert_eq!(core.summary(&id).unwrap().revision, closed.revision + 1);
    }

    #[test]
    fn list_parses_only_snapshots_no_save_described() {
        let tmp = tempfile::tempdir().unwrap();
        let core = FsCore::open(tmp.path(), FsStoreOptions::default()).unwrap();
        for i in 0..5 {
            core.create(&mut record(&format!("s{i}"))).unwrap();
        }
        let parses = || core.snapshot_parses.load(Ordering::Relaxed);
        assert_eq!(core.list(&ListQuery::default()).unwrap().sessions.len(), 5);
        assert_eq!(
            parses(),
            0,
            "the journal describes every snapshot the store wrote"
        );
        assert_eq!(fs::metadata(core.layout.index_journal()).unwrap().len(), 0);
        core.list(&ListQuery::default()).unwrap();
        assert_eq!(parses(), 0, "unchanged snapshots come from the cache");
        let mut r = core.load(&RecordId::parse("s1").unwrap()).unwrap();
        assert_eq!(parses(), 1);
        r.name = Some("n".into());
        core.save(&mut r).unwrap();
        let page = core.list(&ListQuery::default()).unwrap();
        assert_eq!(
            parses(),
            1,
            "a save is noted in the journal, not parsed again"
        );
        assert!(page.sessions.iter().any(|s| s.name.as_deref() == Some("n")));
        // Nor is the cache rewritten for it: the journal line stays, and is what a new
        // process reads too.
        assert!(fs::metadata(core.layout.index_journal()).unwrap().len() > 0);
        let fresh = FsCore::open(tmp.path(), FsStoreOptions::default()).unwrap();
        let page = fresh.list(&ListQuery::default()).unwrap();
        assert!(page.sessions.iter().any(|s| s.name.as_deref() == Some("n")));
        assert_eq!(fresh.snapshot_parses.load(Ordering::Relaxed), 0);
        // A file written behind the store's back is parsed.
        let mut hand = record("s2");
        hand.name = Some("by hand".into());
        hand.revision = 7;
        fs::write(
            core.snapshot_path(&hand.acpx_record_id),
            hand.to_json_vec().unwrap(),
        )
        .unwrap();
        let page = core.list(&ListQuery::default()).unwrap();
        assert_eq!(parses(), 2);
        assert!(page
            .sessions
            .iter()
            .any(|s| s.name.as_deref() == Some("by hand")));
        // A new process (fresh core) reuses the cache file.
        let other = FsCore::open(tmp.path(), FsStoreOptions::default()).unwrap();
        other.list(&ListQuery::default()).unwrap();
        assert_eq!(other.snapshot_parses.load(Ordering::Relaxed), 0);
        // Without the cache, a damaged journal is ignored: every file is parsed again.
        fs::remove_file(core.layout.index()).unwrap();
        fs::write(
            core.layout.index_journal(),
            b"{\"name\":\"s0.json\",\"ident\n\0garbage\n",
        )
        .unwrap();
        let third = FsCore::open(tmp.path(), FsStoreOptions::default()).unwrap();
        assert_eq!(third.list(&ListQuery::default()).unwrap().sessions.len(), 5);
        assert_eq!(third.snapshot_parses.load(Ordering::Relaxed), 5);
    }

    #[test]
    fn an_entry_is_trusted_alone_only_when_verified_well_after_the_files_change() {
        let tmp = tempfile::tempdir().unwrap();
        let core = FsCore::open(tmp.path(), FsStoreOptions::default()).unwrap();
        core.create(&mut record("a")).unwrap();
        core.list(&ListQuery::default()).unwrap();
        let tamper = |verified_ns: i64| {
            let path = core.layout.index();
            let mut index: serde_json::Value =
                serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
            let e = &mut index["entries"]["a.json"];
            e["summary"]["name"] = "from-cache".into();
            e["summary"]["revision"] = 99.into();
            e["verified_ns"] = verified_ns.into();
            fs::write(&path, serde_json::to_vec(&index).unwrap()).unwrap();
            let fresh = FsCore::open(tmp.path(), FsStoreOptions::default()).unwrap();
            fresh.list(&ListQuery::default()).unwrap().sessions[0]
                .name
                .clone()
        };
        let ctime = FileIdent::of(
            &fs::metadata(core.snapshot_path(&RecordId::parse("a").unwrap())).unwrap(),
        )
        .ctime_ns;
        // Verified at the file's change time: the revision at the start of the file decides,
        // and 99 disagrees, so the file is parsed.
        assert_eq!(tamper(ctime), None);
        // Verified long after the change: no file written since could have this identity.
        assert_eq!(
            tamper(ctime + 10_000_000_000).as_deref(),
            Some("from-cache")
        );
    }

    #[test]
    fn saves_read_the_revision_from_the_cache() {
        let tmp = tempfile::tempdir().unwrap();
        let core = FsCore::open(tmp.path(), FsStoreOptions::default()).unwrap();
        let mut r = record("a");
        core.create(&mut r).unwrap();
        // Back-to-back saves take the stored revision from the cache, which must describe
        // the file exactly as it is on disk.
        for _ in 0..3 {
            core.save(&mut r).unwrap();
        }
        let slot = core.slot(&r.acpx_record_id);
        let st = lock_slot(&slot);
        let (ident, rev) = st.snap.expect("cached");
        assert_eq!(rev, 4);
        let m = fs::metadata(core.snapshot_path(&r.acpx_record_id)).unwrap();
        assert_eq!(ident, FileIdent::of(&m));
    }
}
