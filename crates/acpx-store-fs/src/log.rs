//! The NDJSON event log on disk: segments, tails, torn tails, rotation and reading.
//!
//! Segment 0 is the active file `<id>.events.ndjson`; older segments are `<id>.events.<n>.ndjson`
//! with `1` the newest, compressed into `<id>.events.<n>.ndjson.zst` once closed
//! ([`crate::log::zseg`], [`crate::rotate`]). Only the writer holding the session lock modifies these
//! files; readers take no lock and work on descriptors opened up front, bounded by the length
//! they saw.

use std::collections::HashSet;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use acpx_model::{
    EventEnvelope, EventPage, EventQuery, RecordId, StoreError, StoreResult, TornTail,
};

use crate::fsutil::{
    create_new_file, fsync_dir, io_err, open_append_create, stat_opt, unix_millis, FileIdent,
};
use crate::layout::Layout;

mod damage;
mod lines;
pub(crate) mod rotate;
pub(crate) mod zseg;

pub(crate) use lines::{content_end, last_seq_lenient, probe_seq};
use lines::{
    count_newlines, first_seq_lenient, line_start_before, read_range, read_upto, seek_from_seq,
};

/// The last seq of the segment at `path` for the writer: its last line must be a complete,
/// valid event of session `id`, otherwise appending after it could break the seq chain.
fn last_seq_strict(file: &File, len: u64, path: &Path, id: &RecordId) -> StoreResult<u64> {
    let io = |e| io_err(path, e);
    let mut last = [0u8; 1];
    if read_upto(file, len - 1, &mut last).map_err(io)? != 1 || last[0] != b'\n' {
        return Err(StoreError::corrupt(
            path.display().to_string(),
            Some(count_newlines(file, len).map_err(io)? + 1),
            "an older segment ends with an incomplete line; move the file aside to continue",
        ));
    }
    let start = line_start_before(file, len).map_err(io)?;
    let line = read_range(file, start, len - 1).map_err(io)?;
    check_last_line(&line, path, id, || {
        count_newlines(file, start).map_err(io).map(|n| n + 1)
    })
}

/// The seq of a segment's last line for the writer; `line_no` gives its line number for the
/// error.
fn check_last_line(
    line: &[u8],
    path: &Path,
    id: &RecordId,
    line_no: impl FnOnce() -> StoreResult<u64>,
) -> StoreResult<u64> {
    let bad = |reason: String| -> StoreResult<u64> {
        Err(StoreError::corrupt(
            path.display().to_string(),
            Some(line_no()?),
            format!(
                "{reason}; the next seq cannot be derived, so appends are refused until the line \
                 is repaired or the segment is moved aside"
            ),
        ))
    };
    match EventEnvelope::from_ndjson_line(line) {
        Ok(e) if e.acpx_record_id == *id => Ok(e.seq),
        Ok(e) => bad(format!(
            "the last event belongs to session {}, not {id}",
            e.acpx_record_id
        )),
        Err(e) => bad(format!("the last line is not a valid event: {e}")),
    }
}

/// The last seq of a compressed segment for the writer (see [`last_seq_strict`]); `None` when
/// it holds no line. Decodes the last frame (with an index) or the whole stream (without).
fn last_seq_strict_zst(seg: &Segment, id: &RecordId) -> StoreResult<Option<u64>> {
    let io = |e| io_err(&seg.path, e);
    let refuse = |line: u64, why: String| {
        StoreError::corrupt(
            seg.path.display().to_string(),
            Some(line),
            format!(
                "the compressed segment cannot be decompressed ({why}); the next seq cannot be \
                 derived, so appends are refused until the segment is moved aside"
            ),
        )
    };
    let (bytes, lines_before) = match &seg.body {
        Body::Zst(Some(ix)) => {
            let Some(f) = ix.frames.last() else {
                return Ok(None);
            };
            match zseg::decode_frame(&seg.file, f).map_err(io)? {
                Ok(b) => (b, f.lines_before),
                Err(why) => return Err(refuse(f.lines_before + 1, why)),
            }
        }
        _ => {
            // No usable index: the whole stream, keeping only its last line.
            let mut r = zseg::stream(&seg.file, seg.end).map_err(io)?;
            let (mut last, mut line, mut count) = (Vec::new(), Vec::new(), 0u64);
            loop {
                line.clear();
                match r.read_until(b'\n', &mut line) {
                    Ok(0) => break,
                    Ok(_) => {
                        count += 1;
                        std::mem::swap(&mut last, &mut line);
                    }
                    Err(e) => return Err(refuse(count + 1, e.to_string())),
                }
            }
            (last, count.saturating_sub(1))
        }
    };
    if bytes.is_empty() {
        return Ok(None);
    }
    let total = lines_before + bytes.iter().filter(|&&b| b == b'\n').count() as u64;
    let Some(body) = bytes.strip_suffix(b"\n") else {
        return Err(StoreError::corrupt(
            seg.path.display().to_string(),
            Some(total + 1),
            "an older segment ends with an incomplete line; move the file aside to continue",
        ));
    };
    let start = body.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1);
    check_last_line(&body[start..], &seg.path, id, || Ok(total)).map(Some)
}

/// Missing indices in a row after which a probe beyond `max_segments` stops. A crash in the
/// middle of a rotation leaves at most one missing index, and a rotation running meanwhile
/// one more (the index it is moving a file away from); three in a row is the end of the log.
const PROBE_MISSES: u32 = 3;

/// Indices of the older segments that exist (plain, compressed or both), ascending (newest
/// first). Indices up to `max_segments` are all probed; beyond, the probe continues until
/// [`PROBE_MISSES`] indices in a row are missing (segments closed early at a turn's end, kept
/// under a larger earlier limit, or by `keep_rotated_segments`, with a crash's gap among them).
pub(crate) fn probe_older(
    layout: &Layout,
    id: &RecordId,
    max_segments: u32,
) -> io::Result<Vec<u32>> {
    let mut out = Vec::new();
    probe_indices(max_segments, |n| {
        let found = stat_opt(&layout.segment(id, n))?.is_some()
            || stat_opt(&layout.segment_zst(id, n))?.is_some();
        if found {
            out.push(n);
        }
        Ok::<_, io::Error>(found)
    })?;
    Ok(out)
}

/// Probes the older segments' indices in ascending order; `found(n)` says whether index `n`
/// exists (and does with it what the caller does). Indices up to `max_segments` are all
/// probed; beyond, the probe stops after [`PROBE_MISSES`] missing indices in a row. The one
/// probe order of every reader and of rotation, so that they agree on what the log holds.
fn probe_indices<E>(
    max_segments: u32,
    mut found: impl FnMut(u32) -> Result<bool, E>,
) -> Result<(), E> {
    let always = max_segments.clamp(2, 64);
    let (mut n, mut misses) = (1u32, 0u32);
    loop {
        if found(n)? {
            misses = 0;
        } else if n >= always {
            misses += 1;
            if misses >= PROBE_MISSES {
                return Ok(());
            }
        }
        n += 1;
    }
}

/// The identity (device, inode) of segment `n`'s file, the plain one when both exist (as
/// [`Segment::open`] chooses), by `lstat`: a symbolic link is an error naming it, as an open of
/// it would be.
fn segment_ident(layout: &Layout, id: &RecordId, n: u32) -> StoreResult<Option<(u64, u64)>> {
    for path in [layout.segment(id, n), layout.segment_zst(id, n)] {
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(io_err(&path, io::Error::from_raw_os_error(libc::ELOOP)))
            }
            Ok(m) => return Ok(Some((m.dev(), m.ino()))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err(&path, e)),
        }
    }
    Ok(None)
}

/// What a segment's bytes are.
#[derive(Debug)]
enum Body {
    Plain,
    /// Compressed ([`crate::log::zseg`]), with its index when that is usable.
    Zst(Option<zseg::Index>),
}

/// One segment opened for reading.
#[derive(Debug)]
pub(crate) struct Segment {
    /// 0 for the active segment.
    index: u32,
    path: PathBuf,
    file: File,
    /// Where this read stops: the length seen at open, minus a torn tail (compressed: the
    /// file's length).
    end: u64,
    body: Body,
    /// [`Segment::first_seq`], once read: the active segment's is read to decide whether to
    /// probe for older ones, then again by the read (the first complete line is the same
    /// whether or not a torn tail is cut off `end` meanwhile).
    first: std::cell::OnceCell<Option<u64>>,
}

impl Segment {
    /// Opens segment `n`: its plain file when there is one (the original, also when a
    /// compression a crash interrupted left both), else its compressed one.
    fn open(layout: &Layout, id: &RecordId, n: u32) -> StoreResult<Option<Segment>> {
        let path = layout.segment(id, n);
        if let Some(file) = open_existing(&path).map_err(|e| io_err(&path, e))? {
            let end = file.metadata().map_err(|e| io_err(&path, e))?.len();
            return Ok(Some(Segment {
                index: n,
                path,
                file,
                end,
                body: Body::Plain,
                first: Default::default(),
            }));
        }
        if n == 0 {
            return Ok(None);
        }
        let path = layout.segment_zst(id, n);
        let io = |e| io_err(&path, e);
        let Some(file) = open_existing(&path).map_err(io)? else {
            return Ok(None);
        };
        let end = file.metadata().map_err(io)?.len();
        let index = match zseg::Index::read(&file, end).map_err(io)? {
            Ok(ix) => Some(ix),
            Err(why) => {
                tracing::warn!(file = %path.display(), %why, "the index of a compressed segment is not usable; decoding it from its start");
                None
            }
        };
        Ok(Some(Segment {
            index: n,
            path,
            file,
            end,
            body: Body::Zst(index),
            first: Default::default(),
        }))
    }

    fn is_compressed(&self) -> bool {
        matches!(self.body, Body::Zst(_))
    }

    /// The first seq, damaged lines skipped.
    fn first_seq(&self) -> StoreResult<Option<u64>> {
        if let Some(first) = self.first.get() {
            return Ok(*first);
        }
        let io = |e| io_err(&self.path, e);
        let first = match &self.body {
            Body::Plain => first_seq_lenient(&self.file, self.end).map_err(io)?,
            Body::Zst(Some(ix)) => ix.frames.iter().find_map(|f| f.first_seq),
            Body::Zst(None) => stream_seq(&self.file, self.end, true).map_err(io)?,
        };
        let _ = self.first.set(first);
        Ok(first)
    }

    /// The last seq, damaged lines skipped.
    fn last_seq(&self) -> StoreResult<Option<u64>> {
        let io = |e| io_err(&self.path, e);
        match &self.body {
            Body::Plain => last_seq_lenient(&self.file, self.end).map_err(io),
            Body::Zst(Some(ix)) => Ok(ix.last_seq),
            Body::Zst(None) => stream_seq(&self.file, self.end, false).map_err(io),
        }
    }

    /// The last seq for the writer: `None` when the segment is empty, an error when its last
    /// line is not a sound event of `id`.
    fn last_seq_strict(&self, id: &RecordId) -> StoreResult<Option<u64>> {
        match self.body {
            Body::Plain if self.end == 0 => Ok(None),
            Body::Plain => last_seq_strict(&self.file, self.end, &self.path, id).map(Some),
            Body::Zst(_) => last_seq_strict_zst(self, id),
        }
    }
}

/// The first (or last) parseable seq of a compressed segment without a usable index, decoded
/// as a stream up to its first damaged byte (the read that follows reports the damage).
fn stream_seq(file: &File, len: u64, first: bool) -> io::Result<Option<u64>> {
    let mut r = zseg::stream(file, len)?;
    let (mut line, mut found) = (Vec::new(), None);
    loop {
        line.clear();
        match r.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return Ok(found),
            Ok(_) => {}
        }
        if let Some(seq) = probe_seq(&line) {
            if first {
                return Ok(Some(seq));
            }
            found = Some(seq);
        }
    }
}

fn open_existing(path: &Path) -> io::Result<Option<File>> {
    match crate::fsutil::open_read(path) {
        Ok(f) => Ok(Some(f)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Opens every segment, oldest first. The active one is opened first and the older ones in
/// ascending order, so a rotation running meanwhile (which moves files to higher indices) can
/// make a file show up twice, never be missed (the index it just left is a miss the probe
/// steps over, [`PROBE_MISSES`]); duplicates are dropped by inode. (A rotation that closes a
/// gap a crash left moves files down; a reader racing that rare one can miss a segment, and
/// its strict read then reports the seq jump.)
fn open_segments(layout: &Layout, id: &RecordId, max_segments: u32) -> StoreResult<Vec<Segment>> {
    let active = Segment::open(layout, id, 0)?;
    // An active segment that starts at seq 1 is the whole log: a rotation starts the new
    // active file after the last seq of the one it closes, so no older segment can exist.
    // Probing for them anyway costs two failed opens per index (plain and compressed), 14
    // for a short log, which was most of the opens of a migration of many small sessions.
    let whole = match &active {
        Some(a) => a.first_seq()? == Some(1),
        None => false,
    };
    if whole {
        return Ok(active.into_iter().collect());
    }
    let mut seen = HashSet::new();
    let mut segs = Vec::new();
    let mut add = |seg: Segment| -> StoreResult<()> {
        let m = seg.file.metadata().map_err(|e| io_err(&seg.path, e))?;
        if seen.insert((m.dev(), m.ino())) {
            segs.push(seg);
        }
        Ok(())
    };
    if let Some(active) = active {
        add(active)?;
    }
    probe_indices(max_segments, |n| {
        let seg = Segment::open(layout, id, n)?;
        let found = seg.is_some();
        if let Some(seg) = seg {
            add(seg)?;
        }
        Ok::<_, StoreError>(found)
    })?;
    segs.sort_by_key(|s| std::cmp::Reverse(s.index));
    Ok(segs)
}

/// The log's last seq and segment count as the files show them (no writer involved).
pub(crate) struct Inspected {
    pub last_seq: u64,
    pub segment_count: u32,
    pub active_mtime: Option<std::time::SystemTime>,
}

/// Reads the log's state. Only the segments that hold its last seq are opened: the active one
/// (nearly always), and older ones, newest first, only while the newer ones hold no event.
/// The rest are counted by `lstat` alone. The older ones are probed as [`open_segments`]
/// probes them, in ascending order and opened during the probe, so a rotation running
/// meanwhile can only show a file twice (dropped by inode), never hide the one that holds the
/// last seq. Opening each compressed segment and reading its index cost a prompt on a session
/// of 32 segments about 0.5 ms, and retention keeps up to about 300.
pub(crate) fn inspect(layout: &Layout, id: &RecordId, max_segments: u32) -> StoreResult<Inspected> {
    let mut seen = HashSet::new();
    let mut last_seq = None;
    let mut active_mtime = None;
    if let Some(mut a) = Segment::open(layout, id, 0)? {
        let m = a.file.metadata().map_err(|e| io_err(&a.path, e))?;
        seen.insert((m.dev(), m.ino()));
        active_mtime = m.modified().ok();
        // A log whose active segment starts at seq 1 has no older segment (see
        // `open_segments`).
        let whole = a.first_seq()? == Some(1);
        a.end = content_end(&a.file, a.end).map_err(|e| io_err(&a.path, e))?;
        last_seq = a.last_seq()?;
        if whole {
            return Ok(Inspected {
                last_seq: last_seq.unwrap_or(0),
                segment_count: 1,
                active_mtime,
            });
        }
    }
    probe_indices(max_segments, |n| {
        if last_seq.is_none() {
            let Some(seg) = Segment::open(layout, id, n)? else {
                return Ok(false);
            };
            let m = seg.file.metadata().map_err(|e| io_err(&seg.path, e))?;
            if seen.insert((m.dev(), m.ino())) {
                last_seq = seg.last_seq()?;
            }
            return Ok(true);
        }
        let ident = segment_ident(layout, id, n)?;
        if let Some(ident) = ident {
            seen.insert(ident);
        }
        Ok::<_, StoreError>(ident.is_some())
    })?;
    Ok(Inspected {
        last_seq: last_seq.unwrap_or(0),
        segment_count: seen.len() as u32,
        active_mtime,
    })
}

/// The open active segment of a session, owned by the writer holding the session lock.
#[derive(Debug)]
pub(crate) struct LogWriter {
    pub file: File,
    /// Identity of the active file when the lock was last released (see `FsCore::release`).
    pub ident: FileIdent,
    /// Bytes in the file (what has been written, not what is pending).
    pub len: u64,
    /// Last seq accepted, pending events included.
    pub last_seq: u64,
    /// Segment files that exist, the active one included.
    pub segment_count: u32,
    /// Events accepted with `Durability::None`, not yet written.
    pub pending: Vec<u8>,
    /// Whether a batch ending a turn was accepted since the last write-out (the write-out then
    /// considers an early rotation).
    pub turn_ended: bool,
}

/// Opens (creating if needed) the active segment of `id` for appending, moving a torn tail
/// aside first, and derives the last seq from the newest segment that has events.
pub(crate) fn open_writer(
    layout: &Layout,
    id: &RecordId,
    max_segments: u32,
) -> StoreResult<(LogWriter, Option<TornTail>)> {
    let path = layout.segment(id, 0);
    let io = |e| io_err(&path, e);
    let (file, created) = open_append_create(&path).map_err(io)?;
    if created {
        fsync_dir(layout.dir()).map_err(|e| io_err(layout.dir(), e))?;
    }
    let mut len = file.metadata().map_err(io)?.len();
    let torn = set_aside_if_torn(layout, id, &file, len)?;
    if let Some(t) = &torn {
        // Found while opening a writer: said here. `fsck --repair` (set_aside_active)
        // reports what it set aside itself, so it is not said twice there.
        tracing::warn!(
            session = %id,
            file = %path.display(),
            bytes = t.bytes,
            moved_to = %t.location,
            "the event log ended with an incomplete line (an interrupted write); moved it aside"
        );
        len = file.metadata().map_err(io)?.len();
    }
    let older = probe_older(layout, id, max_segments).map_err(io)?;
    // A compression a crash cut short leaves an older segment plain (readable, and a temp
    // file beside it): the writer, which holds the session's lock, finishes it now rather
    // than at the next rotation, which a closed session would never reach.
    let left_plain = older
        .iter()
        .any(|&n| stat_opt(&layout.segment(id, n)).is_ok_and(|m| m.is_some()));
    if left_plain {
        if let Err(e) = crate::log::rotate::compress_closed(layout, id, max_segments) {
            tracing::warn!(session = %id, error = %e, "could not compress a closed event-log segment; it stays plain");
        }
    }
    let last_seq = if len > 0 {
        last_seq_strict(&file, len, &path, id)?
    } else {
        let mut last = 0;
        for &n in &older {
            let Some(seg) = Segment::open(layout, id, n)? else {
                continue;
            };
            if let Some(seq) = seg.last_seq_strict(id)? {
                last = seq;
                break;
            }
        }
        last
    };
    let ident = FileIdent::of(&file.metadata().map_err(io)?);
    Ok((
        LogWriter {
            file,
            ident,
            len,
            last_seq,
            segment_count: older.len() as u32 + 1,
            pending: Vec::new(),
            turn_ended: false,
        },
        torn,
    ))
}

/// If the active segment `file` (of length `len`) ends with an incomplete line, copies those
/// bytes to `<id>.events.torn-<unix-ms>`, truncates them away and makes both durable.
pub(crate) fn set_aside_if_torn(
    layout: &Layout,
    id: &RecordId,
    file: &File,
    len: u64,
) -> StoreResult<Option<TornTail>> {
    let active = layout.segment(id, 0);
    let io = |e| io_err(&active, e);
    let end = content_end(file, len).map_err(io)?;
    if end == len {
        return Ok(None);
    }
    let bytes = read_range(file, end, len).map_err(io)?;
    let ms = unix_millis();
    let mut k = 0;
    let (torn_path, mut out) = loop {
        let p = layout.torn(id, ms, k);
        match create_new_file(&p) {
            Ok(f) => break (p, f),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && k < 1000 => k += 1,
            Err(e) => return Err(io_err(&p, e)),
        }
    };
    out.write_all(&bytes)
        .and_then(|()| out.sync_all())
        .map_err(|e| io_err(&torn_path, e))?;
    file.set_len(end).map_err(io)?;
    file.sync_all().map_err(io)?;
    fsync_dir(layout.dir()).map_err(|e| io_err(layout.dir(), e))?;
    Ok(Some(TornTail {
        location: torn_path.display().to_string(),
        bytes: len - end,
        moved_from: Some(active.display().to_string()),
    }))
}

/// Opens the active segment (if any) and sets a torn tail aside. For `FsStore::set_aside_torn_tail`.
pub(crate) fn set_aside_active(layout: &Layout, id: &RecordId) -> StoreResult<Option<TornTail>> {
    let path = layout.segment(id, 0);
    let file = match crate::fsutil::nofollow().read(true).write(true).open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(&path, e)),
    };
    let len = file.metadata().map_err(|e| io_err(&path, e))?.len();
    set_aside_if_torn(layout, id, &file, len)
}

/// The line-number bookkeeping of one segment scan. Line numbers are only needed on error
/// paths, so when the scan starts in the middle of a plain file the lines before it are
/// counted only if a damaged line is found (a compressed segment's index knows them).
struct LineNumbers<'a> {
    base: Option<u64>,
    /// The plain file and the offset the scan started at, to count the lines before it.
    plain: Option<(&'a File, u64)>,
    seen: u64,
}

impl LineNumbers<'_> {
    fn current(&mut self) -> io::Result<u64> {
        let base = match (self.base, self.plain) {
            (Some(b), _) => b,
            (None, Some((file, start))) => {
                let b = count_newlines(file, start)?;
                self.base = Some(b);
                b
            }
            (None, None) => 0,
        };
        Ok(base + self.seen)
    }
}

/// Reads events of `id` per `query` (see `Store::read_events`).
pub(crate) fn read_events(
    layout: &Layout,
    id: &RecordId,
    query: &EventQuery,
    max_segments: u32,
) -> StoreResult<EventPage> {
    let mut segs = open_segments(layout, id, max_segments)?;
    let mut page = EventPage::default();
    if let Some(active) = segs.last_mut().filter(|s| s.index == 0) {
        let end = content_end(&active.file, active.end).map_err(|e| io_err(&active.path, e))?;
        if end < active.end {
            page.torn_tail = Some(TornTail {
                location: active.path.display().to_string(),
                bytes: active.end - end,
                moved_from: None,
            });
            active.end = end;
        }
    }
    let mut firsts = Vec::with_capacity(segs.len());
    for s in &segs {
        firsts.push(s.first_seq()?);
    }
    // A reader racing a rotation can open a segment both plain and, moved one index up,
    // compressed: the same events twice. Such a pair is adjacent and starts at the same seq;
    // one of them is dropped.
    let mut i = 1;
    while i < segs.len() {
        let twin = firsts[i].is_some()
            && firsts[i] == firsts[i - 1]
            && segs[i].is_compressed() != segs[i - 1].is_compressed();
        if twin {
            segs.remove(i);
            firsts.remove(i);
        } else {
            i += 1;
        }
    }
    page.oldest_seq = firsts.iter().flatten().next().copied().unwrap_or(0);
    for s in segs.iter().rev() {
        if let Some(seq) = s.last_seq()? {
            page.last_seq = seq;
            break;
        }
    }
    // Whole segments before the last one starting at or below `from_seq` hold only smaller seqs.
    let start_seg = firsts
        .iter()
        .rposition(|f| f.is_some_and(|s| s <= query.from_seq))
        .unwrap_or(0);
    let mut scan = Scan {
        id,
        query,
        prev: None,
        after_damage: false,
        page,
        bytes: 0,
        left_out: None,
        pending: damage::Pending::default(),
    };
    for (i, s) in segs.iter().enumerate().skip(start_seg) {
        let seek = i == start_seg && firsts[i].is_some_and(|f| f < query.from_seq);
        if scan.segment(s, seek)? {
            break;
        }
    }
    Ok(scan.into_page())
}

/// The state of one `read_events` across segments.
struct Scan<'a> {
    id: &'a RecordId,
    query: &'a EventQuery,
    prev: Option<u64>,
    after_damage: bool,
    page: EventPage,
    /// The bytes of the lines of `page.events` ([`EventQuery::max_bytes`]).
    bytes: usize,
    left_out: Option<damage::LeftOut>,
    /// Damage not yet placed in or out of this page's range.
    pending: damage::Pending,
}

impl Scan<'_> {
    /// Scans one segment, from the position of `query.from_seq` if `seek`. Returns true when
    /// the page is complete.
    fn segment(&mut self, s: &Segment, seek: bool) -> StoreResult<bool> {
        let io = |e| io_err(&s.path, e);
        let location = s.path.display().to_string();
        match &s.body {
            Body::Plain => {
                let start = if seek {
                    seek_from_seq(&s.file, s.end, self.query.from_seq).map_err(io)?
                } else {
                    0
                };
                let mut reader = &s.file;
                reader.seek(SeekFrom::Start(start)).map_err(io)?;
                // Sized to what is read: a 256 KiB buffer for a 5 KB log is a large
                // allocation (and its free) per read, which a migration does thousands of.
                let capacity = usize::try_from(s.end - start)
                    .unwrap_or(usize::MAX)
                    .clamp(8 * 1024, 256 * 1024);
                let mut reader = BufReader::with_capacity(capacity, reader.take(s.end - start));
                let mut lines = LineNumbers {
                    base: (start == 0).then_some(0),
                    plain: Some((&s.file, start)),
                    seen: 0,
                };
                self.lines(&mut reader, &s.path, &location, &mut lines, false)
            }
            Body::Zst(Some(ix)) => {
                let first = if seek {
                    ix.start_frame(self.query.from_seq)
                } else {
                    0
                };
                for f in &ix.frames[first..] {
                    let mut lines = LineNumbers {
                        base: Some(f.lines_before),
                        plain: None,
                        seen: 0,
                    };
                    match zseg::decode_frame(&s.file, f).map_err(io)? {
                        Ok(data) => {
                            if self.lines(&mut &data[..], &s.path, &location, &mut lines, false)? {
                                return Ok(true);
                            }
                        }
                        Err(why) => {
                            self.after_damage = true;
                            self.damaged(
                                &location,
                                f.lines_before + 1,
                                format!(
                                    "the compressed segment's frame at byte {} (lines {}..) \
                                     cannot be decompressed: {why}; its events are skipped",
                                    f.offset,
                                    f.lines_before + 1
                                ),
                            )?;
                        }
                    }
                }
                Ok(false)
            }
            Body::Zst(None) => {
                let mut reader = zseg::stream(&s.file, s.end).map_err(io)?;
                let mut lines = LineNumbers {
                    base: Some(0),
                    plain: None,
                    seen: 0,
                };
                self.lines(&mut reader, &s.path, &location, &mut lines, true)
            }
        }
    }

    /// Scans lines from `reader`. With `decoding`, a read error is damage of the compressed
    /// data (reported like a damaged line, and the rest of the segment is skipped), not an
    /// I/O error. Returns true when the page is complete.
    fn lines(
        &mut self,
        reader: &mut dyn BufRead,
        path: &Path,
        location: &str,
        lines: &mut LineNumbers<'_>,
        decoding: bool,
    ) -> StoreResult<bool> {
        let io = |e| io_err(path, e);
        let (id, query) = (self.id, self.query);
        let mut line = Vec::with_capacity(1024);
        loop {
            line.clear();
            let n = match reader.read_until(b'\n', &mut line) {
                Ok(n) => n,
                Err(e) if decoding => {
                    self.after_damage = true;
                    let at = lines.current().map_err(io)? + 1;
                    self.damaged(
                        location,
                        at,
                        format!(
                            "the compressed segment cannot be decompressed from line {at} on \
                             ({e}); the rest of it is skipped"
                        ),
                    )?;
                    return Ok(false);
                }
                Err(e) => return Err(io(e)),
            };
            if n == 0 {
                return Ok(false);
            }
            lines.seen += 1;
            let complete = line.last() == Some(&b'\n');
            let problem = if !complete {
                // Only possible in an older segment: the active one's torn tail was cut off.
                Err("the segment ends with an incomplete line".to_owned())
            } else {
                match EventEnvelope::from_ndjson_line(&line) {
                    Err(e) => Err(format!("not a valid event: {e}")),
                    Ok(e) if e.acpx_record_id != *id => Err(format!(
                        "the event belongs to session {}, not {id}",
                        e.acpx_record_id
                    )),
                    Ok(e) => Ok(e),
                }
            };
            let event = match problem {
                Ok(e) => {
                    match self.prev {
                        Some(p) if e.seq <= p => {
                            let at = lines.current().map_err(io)?;
                            self.damaged(
                                location,
                                at,
                                format!(
                                    "seq {} repeats or goes back (the previous event has seq {p})",
                                    e.seq
                                ),
                            )?;
                            continue;
                        }
                        // The event itself is sound: keep it, and report the hole, unless the
                        // damaged lines just skipped (already reported) explain it.
                        Some(p) if e.seq != p + 1 && !self.after_damage => {
                            let at = lines.current().map_err(io)?;
                            self.damaged(
                                location,
                                at,
                                format!(
                                    "seq jumps from {p} to {}: events {}..={} are missing",
                                    e.seq,
                                    p + 1,
                                    e.seq - 1
                                ),
                            )?;
                        }
                        _ => {}
                    }
                    self.prev = Some(e.seq);
                    self.after_damage = false;
                    e
                }
                Err(reason) => {
                    self.after_damage = true;
                    let at = lines.current().map_err(io)?;
                    self.damaged(location, at, reason)?;
                    continue;
                }
            };
            if event.seq < query.from_seq {
                // Damage met before lies before the query's range (`damage`).
                self.drop_pending_damage();
                continue;
            }
            let matches = query.matches(&event);
            if matches && query.page_full(self.page.events.len(), self.bytes) {
                // And damage met before this event, after the page's: the next page's.
                self.drop_pending_damage();
                self.page.next_seq = Some(event.seq);
                return Ok(true);
            }
            self.commit_pending_damage();
            if !matches {
                continue;
            }
            self.bytes += line.len();
            self.page.events.push(event);
        }
    }
}
