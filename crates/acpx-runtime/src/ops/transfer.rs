//! Moving sessions in and out of a store: the export archive, reading it (or a
//! `session.json` with its log) back, and storing an imported session.
//!
//! The archive (`acpx sessions export --as archive`) is NDJSON: the first line is
//! `{"schema":"acpx.export.v1","exportedAt":…,"session":<session.json>}`, every following line
//! is one event envelope exactly as in the session's log (`docs/format.md`).
//!
//! Storing goes through a stage ([`Store::stage_session`]): the session is written a batch
//! at a time where no reader sees it, and committed in one step.

use std::io::Write;
use std::path::Path;

use acpx_model::{
    EventEnvelope, EventQuery, ReadMode, RecordId, SessionRecord, Store, StoreError, Timestamp,
};
use serde_json::Value;

use super::import_trust::{self, ImportTrust};
use super::{OpsError, OpsResult};

/// The `schema` of an archive's first line.
pub const ARCHIVE_SCHEMA: &str = "acpx.export.v1";

/// Events read per page when walking a whole log.
const PAGE: usize = 5000;

/// Calls `f` with every event of the session's log, oldest first, page by page; returns the
/// number of events.
pub async fn for_each_event<E: From<StoreError>>(
    store: &dyn Store,
    id: &RecordId,
    mut f: impl FnMut(&EventEnvelope) -> Result<(), E>,
) -> Result<u64, E> {
    let mut n = 0;
    for_each_page::<E>(store, id, ReadMode::Strict, |events| {
        for e in events {
            f(e)?;
            n += 1;
        }
        Ok(())
    })
    .await?;
    Ok(n)
}

/// Calls `f` with every page of the session's retained log, oldest first, read in `mode`:
/// a log of any length is never in memory at once.
pub async fn for_each_page<E: From<StoreError>>(
    store: &dyn Store,
    id: &RecordId,
    mode: ReadMode,
    mut f: impl FnMut(&[EventEnvelope]) -> Result<(), E>,
) -> Result<(), E> {
    let mut from = 0;
    loop {
        let page = store
            .read_events(
                id,
                &EventQuery {
                    from_seq: from,
                    limit: Some(PAGE),
                    max_bytes: Some(acpx_model::PAGE_BYTES),
                    mode,
                    ..EventQuery::default()
                },
            )
            .await?;
        f(&page.events)?;
        match page.next_seq {
            Some(s) if s > from => from = s,
            _ => return Ok(()),
        }
    }
}

/// Creates (or replaces the contents of) `path` for writing, readable by its owner only
/// (mode 0600, set also on a file that existed with another mode): a session's log and
/// conversation are private. Creates the missing parent directories. Refuses to write
/// through a symbolic link (planted in a shared directory such as `/tmp`, it would send the
/// conversation wherever it points), into a file of another user, or into anything but a
/// regular file.
pub fn create_private_file(path: &Path) -> OpsResult<std::fs::File> {
    create_file_for_user(path, false)
}

/// [`create_private_file`], or with `force` (the user's `--force`) through a symbolic link
/// and into a file of another user the user may write: what they asked for, knowingly. A
/// file that is not a regular one (a FIFO, a device) is refused either way; a file the user
/// owns is left at mode 0600 either way.
pub fn create_file_for_user(path: &Path, force: bool) -> OpsResult<std::fs::File> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|source| OpsError::CreateDir {
            path: dir.to_path_buf(),
            source,
        })?;
    }
    let refuse = |why: String| OpsError::Write {
        path: path.to_path_buf(),
        source: std::io::Error::new(std::io::ErrorKind::PermissionDenied, why),
    };
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .mode(0o600)
        .custom_flags(if force {
            libc::O_NONBLOCK
        } else {
            libc::O_NOFOLLOW | libc::O_NONBLOCK
        })
        .open(path)
        .map_err(|source| {
            if acpx_lock::is_symlink_refusal(&source) {
                refuse("it is a symbolic link; refusing to write through it (--force does)".into())
            } else {
                OpsError::Write {
                    path: path.to_path_buf(),
                    source,
                }
            }
        })?;
    let write_error = |source| OpsError::Write {
        path: path.to_path_buf(),
        source,
    };
    let meta = file.metadata().map_err(write_error)?;
    if !meta.is_file() {
        return Err(refuse("it is not a regular file".into()));
    }
    let me = acpx_lock::current_uid();
    if meta.uid() != me {
        if !force {
            return Err(refuse(format!(
                "it belongs to another user (uid {}); refusing to write a private conversation \
                 into it (--force writes it anyway)",
                meta.uid()
            )));
        }
    } else {
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(write_error)?;
    }
    file.set_len(0).map_err(write_error)?;
    Ok(file)
}

/// Writes a session's whole log to `path` as NDJSON (a private file, synced to disk);
/// returns the number of events.
pub async fn write_log_file(store: &dyn Store, id: &RecordId, path: &Path) -> OpsResult<u64> {
    let write_error = |source| OpsError::Write {
        path: path.to_path_buf(),
        source,
    };
    let mut f = std::io::BufWriter::new(create_private_file(path)?);
    let mut buf = Vec::new();
    let n = for_each_event(store, id, |e| {
        buf.clear();
        e.write_ndjson_line(&mut buf);
        f.write_all(&buf).map_err(write_error)
    })
    .await?;
    f.flush()
        .and_then(|_| f.get_ref().sync_all())
        .map_err(write_error)?;
    Ok(n)
}

/// The first line of an archive of `record` (with its `\n`). Fails only when a long reply of
/// the live record cannot be read back from its spill file.
pub fn archive_head(record: &SessionRecord, exported_at: Timestamp) -> std::io::Result<Vec<u8>> {
    let mut line = Vec::new();
    write_archive_head(record, exported_at, &mut line)?;
    Ok(line)
}

/// Writes [`archive_head`] to `sink` as it serializes it: a long session's settled turns are
/// read back from their spill files a message at a time, never held whole.
pub fn write_archive_head(
    record: &SessionRecord,
    exported_at: Timestamp,
    sink: &mut dyn std::io::Write,
) -> std::io::Result<()> {
    #[derive(serde::Serialize)]
    struct Head<'a> {
        schema: &'static str,
        #[serde(rename = "exportedAt")]
        exported_at: Timestamp,
        session: &'a SessionRecord,
    }
    let head = Head {
        schema: ARCHIVE_SCHEMA,
        exported_at,
        session: record,
    };
    // serde_json gives a write's own error back (a closed pipe stays `BrokenPipe`).
    serde_json::to_writer(&mut *sink, &head)?;
    sink.write_all(b"\n")
}

/// A session read from an archive or a `session.json`, not stored yet.
#[derive(Debug, Clone)]
pub struct ImportedSession {
    /// The snapshot.
    pub record: SessionRecord,
    /// Its log, as read.
    pub events: Vec<EventEnvelope>,
}

/// Parses NDJSON event lines; `first_line` numbers the first line in messages.
pub fn parse_events(text: &str, origin: &str, first_line: usize) -> OpsResult<Vec<EventEnvelope>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let e = EventEnvelope::from_ndjson_line(line.as_bytes()).map_err(|err| {
            OpsError::Invalid(format!(
                "{origin} line {}: not an event envelope: {err}",
                first_line + i
            ))
        })?;
        out.push(e);
    }
    Ok(out)
}

/// What an import file is.
#[derive(Debug, Clone)]
pub enum ImportFile {
    /// An archive: it carries its own events.
    Archive(ImportedSession),
    /// A `session.json` (its log, if any, comes from a separate file).
    Snapshot(SessionRecord),
    /// A session record written by the Node acpx (import it with
    /// [`crate::ops::node_import`]).
    NodeRecord,
}

/// Reads an import file's text: an archive, a `session.json`, or a Node acpx record.
/// Anything else is [`OpsError::Invalid`]. The whole file and its whole log are in memory: for
/// files of any size, `sessions import` reads an archive a line at a time
/// ([`import_event_lines`]).
pub fn parse_import_file(text: &str, origin: &str) -> OpsResult<ImportFile> {
    let first = text.lines().next().unwrap_or("");
    if let Some(record) = archive_record(first.as_bytes(), origin) {
        let rest = text.split_once('\n').map_or("", |(_, r)| r);
        return Ok(ImportFile::Archive(ImportedSession {
            record: record?,
            events: parse_events(rest, origin, 2)?,
        }));
    }
    Ok(match parse_document(text, origin)? {
        Some(r) => ImportFile::Snapshot(r),
        None => ImportFile::NodeRecord,
    })
}

/// A file that is not an archive: a `session.json` (`Some`), or a Node acpx record (`None`).
fn parse_document(text: &str, origin: &str) -> OpsResult<Option<SessionRecord>> {
    let value: Value = serde_json::from_str(text).map_err(|e| {
        OpsError::Invalid(format!(
            "{origin}: neither an acpx archive nor a session.json: {e}"
        ))
    })?;
    if value.get("acpx_record_id").is_some() {
        return Ok(None);
    }
    SessionRecord::from_json_slice(text.as_bytes(), origin)
        .map(Some)
        .map_err(|e| OpsError::Invalid(e.to_string()))
}

/// What an import file turned out to be, read from its start: an archive's events are left
/// in the reader ([`EventLines`]) to be stored as they are read.
pub enum ImportSource<R> {
    /// An archive: its snapshot, and its events still to be read.
    Archive(SessionRecord, EventLines<R>),
    /// A `session.json` (its log, if any, comes from a separate file).
    Snapshot(SessionRecord),
    /// A session record written by the Node acpx.
    NodeRecord,
}

/// [`parse_import_file`] on a reader, without reading an archive's events: only its first
/// line (the snapshot) is read here. Anything else is read whole (a `session.json` is one
/// document).
pub fn read_import_source<R: std::io::BufRead>(
    mut reader: R,
    origin: &str,
) -> OpsResult<ImportSource<R>> {
    let read_error = |e: std::io::Error| OpsError::Invalid(format!("cannot read {origin}: {e}"));
    let mut first = Vec::new();
    reader.read_until(b'\n', &mut first).map_err(read_error)?;
    if let Some(record) = archive_record(&first, origin) {
        return Ok(ImportSource::Archive(
            record?,
            EventLines::new(reader, origin, 2),
        ));
    }
    let mut text = first;
    reader.read_to_end(&mut text).map_err(read_error)?;
    let text = String::from_utf8(text)
        .map_err(|e| OpsError::Invalid(format!("{origin}: not UTF-8 text: {e}")))?;
    Ok(match parse_document(&text, origin)? {
        Some(r) => ImportSource::Snapshot(r),
        None => ImportSource::NodeRecord,
    })
}

/// The snapshot of an archive whose first line is `first`; `None` when it is not an
/// archive's first line.
fn archive_record(first: &[u8], origin: &str) -> Option<OpsResult<SessionRecord>> {
    let Ok(Value::Object(head)) = serde_json::from_slice::<Value>(first) else {
        return None;
    };
    if head.get("schema").and_then(Value::as_str) != Some(ARCHIVE_SCHEMA) {
        return None;
    }
    let session = head.get("session").cloned().unwrap_or(Value::Null);
    let bytes = serde_json::to_vec(&session).unwrap_or_default();
    Some(
        SessionRecord::from_json_slice(&bytes, &format!("{origin} (line 1, session)"))
            .map_err(|e| OpsError::Invalid(e.to_string())),
    )
}

/// Events read from an NDJSON file one line at a time: an import never holds the whole log.
pub struct EventLines<R> {
    reader: R,
    origin: String,
    /// Number of the next line, for messages.
    line: usize,
    buf: Vec<u8>,
}

impl<R: std::io::BufRead> EventLines<R> {
    /// Reads events from `reader`, whose first line is line `first_line` of `origin`.
    pub fn new(reader: R, origin: &str, first_line: usize) -> Self {
        EventLines {
            reader,
            origin: origin.to_owned(),
            line: first_line,
            buf: Vec::new(),
        }
    }

    /// The next event, `None` at the end; blank lines are skipped. A line that is not an
    /// event envelope (or not UTF-8, or unreadable) is [`OpsError::Invalid`] naming it.
    pub fn next_event(&mut self) -> OpsResult<Option<EventEnvelope>> {
        loop {
            self.buf.clear();
            let n = self.reader.read_until(b'\n', &mut self.buf).map_err(|e| {
                OpsError::Invalid(format!(
                    "{} line {}: cannot read: {e}",
                    self.origin, self.line
                ))
            })?;
            if n == 0 {
                return Ok(None);
            }
            let line = self.line;
            self.line += 1;
            if self.buf.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            return EventEnvelope::from_ndjson_line(&self.buf)
                .map(Some)
                .map_err(|err| {
                    OpsError::Invalid(format!(
                        "{} line {line}: not an event envelope: {err}",
                        self.origin
                    ))
                });
        }
    }
}

/// Events appended per store call while importing.
const IMPORT_BATCH: usize = 1_000;

/// The highest seq an imported log may reach (2^53: exact in every JSON reader, and room for
/// the events a session records after it), so no seq arithmetic of a reader overflows.
const MAX_IMPORT_SEQ: u64 = 1 << 53;

/// How far in the future an imported event may be dated (clocks of two machines disagree):
/// beyond, the archive is refused, since folding such an event would make the session the
/// most recent of its scope for years.
const FUTURE_SKEW_MS: i64 = 24 * 3600 * 1000;

/// Stores `record` with the events of `events` as a new session, reading and staging them
/// a batch at a time (a log of any length: memory holds one batch). With `new_id` the
/// session and every event get a fresh record id; otherwise every event must belong to the
/// record. Seqs must have no gaps; they start at 1, or above for a log whose oldest events
/// retention removed (the session is then stored with its log retained from that seq).
///
/// The session is staged ([`Store::stage_session`]) and committed as one step: nothing of it
/// is visible before the whole log is stored, durable, with its snapshot. The first batch is
/// checked before anything is staged; a later bad line, or a failing store, aborts the stage,
/// so an import stores a whole session or nothing. A process killed half-way leaves nothing
/// visible either, and running the same import again completes it (the new stage reclaims
/// what the killed one left; `docs/format.md` § Importing a session: staged, then committed).
/// Returns the stored snapshot and the number of events.
pub async fn import_event_lines<R: std::io::BufRead>(
    store: &dyn Store,
    record: SessionRecord,
    events: EventLines<R>,
    new_id: bool,
) -> OpsResult<(SessionRecord, u64)> {
    import_event_lines_with(store, record, events, new_id, ImportTrust::Data).await
}

/// [`import_event_lines`] with the trust given: [`ImportTrust::Data`] (what that does: the
/// session is stored as information only, its log ending with `session_imported`,
/// [`super::import_trust`]) or [`ImportTrust::Trusted`] (`sessions import --trust`).
pub async fn import_event_lines_with<R: std::io::BufRead>(
    store: &dyn Store,
    mut record: SessionRecord,
    mut events: EventLines<R>,
    new_id: bool,
    trust: ImportTrust,
) -> OpsResult<(SessionRecord, u64)> {
    admit_imported(&mut record)?;
    let untrusted = match trust {
        ImportTrust::Data => Some(import_trust::untrust(&mut record)),
        // Trusted, it runs what it names: a marker an archive carries counts for nothing.
        ImportTrust::Trusted => {
            record.acpx.extra.remove(import_trust::UNTRUSTED_IMPORT_KEY);
            None
        }
    };
    let untrusted_marked = untrusted.is_some();
    let original = record.acpx_record_id.clone();
    if new_id {
        record.acpx_record_id = RecordId::generate();
    }
    let id = record.acpx_record_id.clone();
    let mut count = 0u64;
    // The seq before the log's first event: 0, or above for a log retention trimmed.
    let mut seq_before: Option<u64> = None;
    let mut batch = Vec::with_capacity(IMPORT_BATCH);
    let mut next_batch = |events: &mut EventLines<R>,
                          batch: &mut Vec<EventEnvelope>,
                          count: &mut u64|
     -> OpsResult<()> {
        batch.clear();
        while batch.len() < IMPORT_BATCH {
            let Some(mut e) = events.next_event()? else {
                break;
            };
            if !new_id && e.acpx_record_id != original {
                return Err(OpsError::Invalid(format!(
                    "{} line {}: the event belongs to session {}, not {original}",
                    events.origin,
                    events.line - 1,
                    e.acpx_record_id
                )));
            }
            *count += 1;
            let before = *seq_before.get_or_insert(e.seq.saturating_sub(1));
            let expected = before.checked_add(*count).filter(|s| *s < MAX_IMPORT_SEQ);
            let Some(expected) = expected else {
                return Err(OpsError::Invalid(format!(
                    "session {original}: event {count} has seq {}, beyond what a log holds",
                    e.seq
                )));
            };
            if e.seq != expected {
                return Err(OpsError::Invalid(format!(
                    "session {original}: event {count} has seq {}, expected {expected}: the \
                     log's seqs must follow each other without gaps",
                    e.seq
                )));
            }
            refuse_future_event(&original, &e)?;
            e.acpx_record_id = id.clone();
            batch.push(e);
        }
        Ok(())
    };
    next_batch(&mut events, &mut batch, &mut count)?;
    record.revision = 0;
    record.pid = None;
    let acp_session_id = record.acp_session_id.clone();
    let folded = record.acpx.audit_seq;
    let mut stage = store.stage_session(record).await?;
    let staged: OpsResult<()> = async {
        let mut last_seq = 0;
        while !batch.is_empty() {
            stage.append(&batch).await?;
            last_seq = batch.last().map_or(last_seq, |e| e.seq);
            next_batch(&mut events, &mut batch, &mut count)?;
        }
        // Not after a log that ends before what its snapshot folded in (an archive cut
        // short): that seq is one the snapshot claims; the snapshot itself is untrusted
        // already, and the import warns of the gap.
        if let Some(payload) = untrusted.filter(|_| last_seq >= folded) {
            let seq = last_seq + 1;
            let imported = import_trust::imported_event(&id, &acp_session_id, seq, payload);
            stage.append(std::slice::from_ref(&imported)).await?;
        }
        Ok(())
    }
    .await;
    if let Err(e) = staged {
        return Err(abort_stage(stage, e).await);
    }
    let stored = stage.commit().await?;
    let stored = if untrusted_marked {
        fold_imported_event(store, stored).await?
    } else {
        stored
    };
    Ok((stored, count))
}

/// The snapshot of an untrusted import was staged with `session_imported` already applied
/// (so no reader ever sees the archive's agent command as runnable), but before that event's
/// seq was known: folds the event in and saves, so the snapshot names the whole log (a crash
/// in between leaves a snapshot one event behind, which every open rolls forward).
async fn fold_imported_event(store: &dyn Store, stored: SessionRecord) -> OpsResult<SessionRecord> {
    let id = stored.acpx_record_id.clone();
    let _writer = store.lock(&id, std::time::Duration::from_secs(10)).await?;
    let (mut record, rolled, _, state) = crate::session::load_rolled_forward(store, &id).await?;
    if rolled.applied == 0 {
        return Ok(stored);
    }
    record.acpx.event_log = state;
    // The events folded in may name the exporting machine's agent process: no process of
    // this machine runs the session.
    record.pid = None;
    store.save(&mut record).await?;
    Ok(record)
}

/// Ends a stage that failed with `e`: aborted, so nothing of it stays. Returns `e`, saying
/// what to do when even the abort failed.
async fn abort_stage(stage: Box<dyn acpx_model::StagedSession + '_>, e: OpsError) -> OpsError {
    let id = stage.id().clone();
    match stage.abort().await {
        Ok(()) => e,
        Err(cleanup) => OpsError::Invalid(format!(
            "{e}; what was staged of session {id} could not be removed ({cleanup}): it is not \
             visible, and the next import or `acpx fsck --repair` removes it"
        )),
    }
}

/// Gives `session` a fresh record id (the snapshot and every event); returns the old one.
pub fn assign_new_id(session: &mut ImportedSession) -> RecordId {
    let id = RecordId::generate();
    for e in &mut session.events {
        e.acpx_record_id = id.clone();
    }
    std::mem::replace(&mut session.record.acpx_record_id, id)
}

/// Stores `record` with `events` as a new session, staged and committed as one step
/// ([`Store::stage_session`]: nothing of it is visible until all of it is, and a process
/// killed half-way leaves nothing visible). The events' seqs must have no gaps
/// ([`OpsError::Invalid`] otherwise); they start at 1, or above for a log retention trimmed;
/// the imported `revision` and `pid` are dropped (the store numbers its own saves, and no
/// process of this machine runs it). A taken id is [`StoreError::AlreadyExists`].
pub async fn store_new_session(
    store: &dyn Store,
    mut record: SessionRecord,
    events: &[EventEnvelope],
) -> OpsResult<SessionRecord> {
    let id = record.acpx_record_id.clone();
    let before = events.first().map_or(0, |e| e.seq.saturating_sub(1));
    for (i, e) in events.iter().enumerate() {
        let expected = before
            .checked_add(i as u64 + 1)
            .filter(|s| *s < MAX_IMPORT_SEQ);
        let Some(expected) = expected else {
            return Err(OpsError::Invalid(format!(
                "session {id}: event {} has seq {}, beyond what a log holds",
                i + 1,
                e.seq
            )));
        };
        if e.seq != expected {
            return Err(OpsError::Invalid(format!(
                "session {id}: event {} has seq {}, expected {expected}: the log's seqs must \
                 follow each other without gaps",
                i + 1,
                e.seq,
            )));
        }
        refuse_future_event(&id, e)?;
    }
    record.revision = 0;
    record.pid = None;
    let mut stage = store.stage_session(record).await?;
    for chunk in events.chunks(IMPORT_BATCH) {
        if let Err(e) = stage.append(chunk).await {
            return Err(abort_stage(stage, e.into()).await);
        }
    }
    Ok(stage.commit().await?)
}

/// What an archive may not decide about the session it brings (an archive is data from
/// elsewhere, maybe hostile): its directory must be an absolute path without `.` or `..`
/// (a session's agent runs there, and its file operations are confined to it), and a
/// `lastUsedAt` in the future is brought back to now, so an imported session cannot take
/// over its scope's "current session" for good by a date.
pub(crate) fn admit_imported(record: &mut SessionRecord) -> OpsResult<()> {
    if record.acpx.audit_seq >= MAX_IMPORT_SEQ {
        return Err(OpsError::Invalid(format!(
            "session {}: its snapshot claims to have folded in {} events, beyond what a log \
             holds",
            record.acpx_record_id, record.acpx.audit_seq
        )));
    }
    let cwd = std::path::Path::new(&record.cwd);
    let normal = cwd.is_absolute()
        && cwd.components().all(|c| {
            !matches!(
                c,
                std::path::Component::ParentDir | std::path::Component::CurDir
            )
        });
    if !normal {
        return Err(OpsError::Invalid(format!(
            "session {}: its directory {:?} is not an absolute path without `.` or `..`; \
             refusing to import a session whose agent would run there",
            record.acpx_record_id,
            transcript_printable(&record.cwd)
        )));
    }
    let now = acpx_model::Timestamp::now();
    if record.last_used_at.millis() > now.millis() {
        record.last_used_at = now;
    }
    // Remembered "always" answers are decisions of whoever exported the session, never this
    // user's (also for `--trust`: trusting a command is not approving every later write).
    record
        .acpx
        .extra
        .remove(crate::mapping::PERMISSION_ALWAYS_KEY);
    Ok(())
}

/// Refuses an event dated more than [`FUTURE_SKEW_MS`] ahead: folded in, its date would become
/// the session's `lastUsedAt`, and it would stay its scope's current session until then.
fn refuse_future_event(id: &RecordId, e: &EventEnvelope) -> OpsResult<()> {
    let now = acpx_model::Timestamp::now().millis();
    if e.timestamp.millis() > now.saturating_add(FUTURE_SKEW_MS) {
        return Err(OpsError::Invalid(format!(
            "session {id}: event {} is dated {}, in the future; refusing an archive whose \
             dates would make it its scope's current session",
            e.seq, e.timestamp
        )));
    }
    Ok(())
}

fn transcript_printable(s: &str) -> String {
    crate::text::printable(s).into_owned()
}

/// Imports an [`ImportedSession`]: under a fresh id with `new_id`, else under its own (every
/// event must belong to it; `origin` names the file in that error). Returns the stored
/// snapshot. The session's whole log is in memory (see [`parse_import_file`]).
pub async fn import_session(
    store: &dyn Store,
    session: ImportedSession,
    new_id: bool,
    origin: &str,
) -> OpsResult<SessionRecord> {
    import_session_with(store, session, new_id, origin, ImportTrust::Data).await
}

/// [`import_session`] with the trust given (see [`import_event_lines_with`]).
pub async fn import_session_with(
    store: &dyn Store,
    mut session: ImportedSession,
    new_id: bool,
    origin: &str,
    trust: ImportTrust,
) -> OpsResult<SessionRecord> {
    admit_imported(&mut session.record)?;
    // As information only, as [`import_event_lines`] stores it.
    let untrusted = match trust {
        ImportTrust::Data => Some(import_trust::untrust(&mut session.record)),
        ImportTrust::Trusted => {
            session
                .record
                .acpx
                .extra
                .remove(import_trust::UNTRUSTED_IMPORT_KEY);
            None
        }
    };
    if let Some(payload) = untrusted {
        let seq = session
            .events
            .last()
            .map_or(session.record.acpx.audit_seq, |e| e.seq)
            .saturating_add(1);
        let r = &session.record;
        let imported =
            import_trust::imported_event(&r.acpx_record_id, &r.acp_session_id, seq, payload);
        session.events.push(imported);
    }
    if new_id {
        assign_new_id(&mut session);
    } else {
        let id = &session.record.acpx_record_id;
        if session.events.iter().any(|e| &e.acpx_record_id != id) {
            return Err(OpsError::Invalid(format!(
                "{origin}: the events belong to another session than {id}"
            )));
        }
    }
    let stored = store_new_session(store, session.record, &session.events).await?;
    fold_imported_event(store, stored).await
}
