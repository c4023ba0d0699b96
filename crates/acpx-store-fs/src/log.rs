//! The NDJSON event log on disk: segments, tails, torn tails, rotation and reading.
//!
//! Segment 0 is the active file `<id>.events.ndjson`; older segments are `<id>.events.<n>.ndjson`
//! with `1` the newest. Only the writer holding the session lock modifies these files; readers
//! take no lock and work on descriptors opened up front, bounded by the length they saw.

use std::collections::HashSet;
use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use acpx_model::{
    DamagedLine, EventEnvelope, EventPage, EventQuery, ReadMode, RecordId, StoreError, StoreResult,
    TornTail,
};

use crate::failpoint::failpoint;
use crate::fsutil::{
    create_new_file, fsync_dir, io_err, open_append_create, remove_if_exists, stat_opt,
    unix_millis, FileIdent,
};
use crate::layout::Layout;

/// Below this many bytes, the search for `from_seq` inside a segment scans instead of bisecting.
const LINEAR_SCAN_BYTES: u64 = 64 * 1024;
/// Chunk size of backward and forward line searches.
const CHUNK: usize = 16 * 1024;

/// The seq of a line, parsed without building the whole envelope.
#[derive(serde::Deserialize)]
struct SeqProbe {
    seq: u64,
}

fn probe_seq(line: &[u8]) -> Option<u64> {
    serde_json::from_slice::<SeqProbe>(line).ok().map(|p| p.seq)
}

/// Reads as many bytes as available at `off` into `buf` (short only at end of file).
fn read_upto(file: &File, mut off: u64, buf: &mut [u8]) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], off) {
            Ok(0) => break,
            Ok(n) => {
                done += n;
                off += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// The bytes `[start, end)`, or fewer if the file got shorter meanwhile.
fn read_range(file: &File, start: u64, end: u64) -> io::Result<Vec<u8>> {
    let mut buf = vec![0; usize::try_from(end.saturating_sub(start)).unwrap_or(usize::MAX)];
    let n = read_upto(file, start, &mut buf)?;
    buf.truncate(n);
    Ok(buf)
}

/// Position of the last `\n` in `[0, end)`.
fn last_newline_before(file: &File, end: u64) -> io::Result<Option<u64>> {
    let mut hi = end;
    let mut buf = vec![0u8; CHUNK];
    while hi > 0 {
        let lo = hi.saturating_sub(CHUNK as u64);
        let want = (hi - lo) as usize;
        let n = read_upto(file, lo, &mut buf[..want])?;
        if let Some(p) = buf[..n].iter().rposition(|&b| b == b'\n') {
            return Ok(Some(lo + p as u64));
        }
        hi = lo;
    }
    Ok(None)
}

/// The complete line starting at `start` (without its `\n`), if its `\n` lies before `end`.
fn read_line_at(file: &File, start: u64, end: u64) -> io::Result<Option<Vec<u8>>> {
    let mut line = Vec::new();
    let mut off = start;
    let mut buf = vec![0u8; CHUNK];
    while off < end {
        let want = usize::try_from(end - off).unwrap_or(CHUNK).min(CHUNK);
        let n = read_upto(file, off, &mut buf[..want])?;
        if n == 0 {
            break;
        }
        if let Some(p) = buf[..n].iter().position(|&b| b == b'\n') {
            line.extend_from_slice(&buf[..p]);
            return Ok(Some(line));
        }
        line.extend_from_slice(&buf[..n]);
        off += n as u64;
    }
    Ok(None)
}

/// The first line start at or after `off` and before `end`.
fn next_line_start(file: &File, off: u64, end: u64) -> io::Result<Option<u64>> {
    if off == 0 {
        return Ok((end > 0).then_some(0));
    }
    let mut pos = off - 1;
    let mut buf = vec![0u8; CHUNK];
    while pos < end {
        let want = usize::try_from(end - pos).unwrap_or(CHUNK).min(CHUNK);
        let n = read_upto(file, pos, &mut buf[..want])?;
        if n == 0 {
            break;
        }
        if let Some(p) = buf[..n].iter().position(|&b| b == b'\n') {
            let start = pos + p as u64 + 1;
            return Ok((start < end).then_some(start));
        }
        pos += n as u64;
    }
    Ok(None)
}

/// Number of `\n` in `[0, end)`: turns a byte offset into a line number on error paths.
fn count_newlines(file: &File, end: u64) -> io::Result<u64> {
    let mut count = 0;
    let mut off = 0;
    let mut buf = vec![0u8; 256 * 1024];
    while off < end {
        let want = usize::try_from(end - off)
            .unwrap_or(buf.len())
            .min(buf.len());
        let n = read_upto(file, off, &mut buf[..want])?;
        if n == 0 {
            break;
        }
        count += buf[..n].iter().filter(|&&b| b == b'\n').count() as u64;
        off += n as u64;
    }
    Ok(count)
}

/// Where the complete lines of a file of length `len` end: `len` when it ends with `\n`, else
/// just after the last `\n` (0 when there is none). Bytes past it are a torn tail.
pub(crate) fn content_end(file: &File, len: u64) -> io::Result<u64> {
    if len == 0 {
        return Ok(0);
    }
    let mut last = [0u8; 1];
    if read_upto(file, len - 1, &mut last)? == 1 && last[0] == b'\n' {
        return Ok(len);
    }
    Ok(last_newline_before(file, len)?.map_or(0, |p| p + 1))
}

/// The start of the line that ends just before `end` (`end` is a line end: 0 or after a `\n`).
fn line_start_before(file: &File, end: u64) -> io::Result<u64> {
    if end <= 1 {
        return Ok(0);
    }
    Ok(last_newline_before(file, end - 1)?.map_or(0, |p| p + 1))
}

/// The last seq of a segment whose complete lines end at `end`, skipping damaged lines.
pub(crate) fn last_seq_lenient(file: &File, end: u64) -> io::Result<Option<u64>> {
    let mut end = end;
    while end > 0 {
        let start = line_start_before(file, end)?;
        let line = read_range(file, start, end - 1)?;
        if let Some(seq) = probe_seq(&line) {
            return Ok(Some(seq));
        }
        end = start;
    }
    Ok(None)
}

/// The first seq of a segment, skipping damaged lines.
fn first_seq_lenient(file: &File, end: u64) -> io::Result<Option<u64>> {
    let mut off = 0;
    while off < end {
        let Some(line) = read_line_at(file, off, end)? else {
            return Ok(None);
        };
        if let Some(seq) = probe_seq(&line) {
            return Ok(Some(seq));
        }
        off += line.len() as u64 + 1;
    }
    Ok(None)
}

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
    let bad = |reason: String| -> StoreResult<u64> {
        Err(StoreError::corrupt(
            path.display().to_string(),
            Some(count_newlines(file, start).map_err(io)? + 1),
            format!(
                "{reason}; the next seq cannot be derived, so appends are refused until the line \
                 is repaired or the segment is moved aside"
            ),
        ))
    };
    match EventEnvelope::from_ndjson_line(&line) {
        Ok(e) if e.acpx_record_id == *id => Ok(e.seq),
        Ok(e) => bad(format!(
            "the last event belongs to session {}, not {id}",
            e.acpx_record_id
        )),
        Err(e) => bad(format!("the last line is not a valid event: {e}")),
    }
}

/// Indices of the older segments that exist, ascending (newest first). A crash in the middle
/// of a rotation can leave a gap, so indices up to `max_segments` are all probed; beyond, the
/// probe continues while files exist (segments kept under a larger earlier limit).
pub(crate) fn probe_older(
    layout: &Layout,
    id: &RecordId,
    max_segments: u32,
) -> io::Result<Vec<u32>> {
    let always = max_segments.clamp(2, 64);
    let mut out = Vec::new();
    let mut n = 1u32;
    loop {
        if stat_opt(&layout.segment(id, n))?.is_some() {
            out.push(n);
        } else if n >= always {
            return Ok(out);
        }
        n += 1;
    }
}

/// One segment opened for reading.
#[derive(Debug)]
struct Segment {
    /// 0 for the active segment.
    index: u32,
    path: PathBuf,
    file: File,
    /// Where this read stops: the length seen at open, minus a torn tail.
    end: u64,
}

fn open_existing(path: &Path) -> io::Result<Option<File>> {
    match crate::fsutil::open_read(path) {
        Ok(f) => Ok(Some(f)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Opens every segment, oldest first. The active one is opened first and the older ones in
/// ascending order, so a rotation running meanwhile (which only moves files to higher
/// indices) can make a file show up twice, never be missed; duplicates are dropped by inode.
fn open_segments(layout: &Layout, id: &RecordId, max_segments: u32) -> StoreResult<Vec<Segment>> {
    let mut seen = HashSet::new();
    let mut segs = Vec::new();
    let mut add = |index: u32, path: PathBuf| -> StoreResult<bool> {
        let Some(file) = open_existing(&path).map_err(|e| io_err(&path, e))? else {
            return Ok(false);
        };
        let m = file.metadata().map_err(|e| io_err(&path, e))?;
        if seen.insert((m.dev(), m.ino())) {
            segs.push(Segment {
                index,
                end: m.len(),
                path,
                file,
            });
        }
        Ok(true)
    };
    add(0, layout.segment(id, 0))?;
    let always = max_segments.clamp(2, 64);
    let mut n = 1u32;
    loop {
        let exists = add(n, layout.segment(id, n))?;
        if !exists && n >= always {
            break;
        }
        n += 1;
    }
    segs.sort_by_key(|s| std::cmp::Reverse(s.index));
    Ok(segs)
}

/// The log's last seq and segment count as the files show them (no writer involved).
pub(crate) struct Inspected {
    pub last_seq: u64,
    pub segment_count: u32,
    pub active_mtime: Option<std::time::SystemTime>,
}

pub(crate) fn inspect(layout: &Layout, id: &RecordId, max_segments: u32) -> StoreResult<Inspected> {
    let segs = open_segments(layout, id, max_segments)?;
    let mut last_seq = 0;
    for s in segs.iter().rev() {
        let io = |e| io_err(&s.path, e);
        let end = if s.index == 0 {
            content_end(&s.file, s.end).map_err(io)?
        } else {
            s.end
        };
        if let Some(seq) = last_seq_lenient(&s.file, end).map_err(io)? {
            last_seq = seq;
            break;
        }
    }
    let active_mtime = segs
        .iter()
        .find(|s| s.index == 0)
        .and_then(|s| s.file.metadata().ok())
        .and_then(|m| m.modified().ok());
    Ok(Inspected {
        last_seq,
        segment_count: segs.len() as u32,
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
    if torn.is_some() {
        len = file.metadata().map_err(io)?.len();
    }
    let older = probe_older(layout, id, max_segments).map_err(io)?;
    let last_seq = if len > 0 {
        last_seq_strict(&file, len, &path, id)?
    } else {
        let mut last = 0;
        for &n in &older {
            let p = layout.segment(id, n);
            let Some(f) = open_existing(&p).map_err(|e| io_err(&p, e))? else {
                continue;
            };
            let flen = f.metadata().map_err(|e| io_err(&p, e))?.len();
            if flen > 0 {
                last = last_seq_strict(&f, flen, &p, id)?;
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
    tracing::warn!(
        session = %id,
        file = %active.display(),
        bytes = len - end,
        moved_to = %torn_path.display(),
        "the event log ended with an incomplete line (an interrupted write); moved it aside"
    );
    Ok(Some(TornTail {
        location: torn_path.display().to_string(),
        bytes: len - end,
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

/// Rotates after the active segment grew past the limit: older segments move up one index
/// (those beyond retention are deleted first, oldest first), the active file becomes `.1`, and
/// a new empty active file is created. At every step the files, ordered by index, stay ordered
/// by age, so a crash anywhere leaves a readable log (possibly with a gap in the numbering,
/// which the next rotation closes).
pub(crate) fn rotate(
    layout: &Layout,
    id: &RecordId,
    max_segments: u32,
    w: &mut LogWriter,
) -> StoreResult<()> {
    let dir = layout.dir();
    let older = probe_older(layout, id, max_segments).map_err(|e| io_err(dir, e))?;
    // After the rotation: the new active, `.1` (the old active), and `keep` shifted ones.
    let keep = (max_segments as usize).saturating_sub(2).min(older.len());
    for &n in older[keep..].iter().rev() {
        let p = layout.segment(id, n);
        remove_if_exists(&p).map_err(|e| io_err(&p, e))?;
    }
    let kept = &older[..keep];
    let rename = |from: u32, to: u32| -> StoreResult<()> {
        let (a, b) = (layout.segment(id, from), layout.segment(id, to));
        fs::rename(&a, &b).map_err(|e| io_err(&a, e))
    };
    // The kept segments go to 2, 3, …. Those moving down (after a gap) go newest first, those
    // moving up oldest first: each target is free when it is taken.
    for (r, &n) in kept.iter().enumerate() {
        let target = r as u32 + 2;
        if target < n {
            rename(n, target)?;
        }
    }
    for (r, &n) in kept.iter().enumerate().rev() {
        let target = r as u32 + 2;
        if target > n {
            rename(n, target)?;
        }
    }
    failpoint!("rotate.after_shift");
    rename(0, 1)?;
    let active = layout.segment(id, 0);
    let (file, _) = open_append_create(&active).map_err(|e| io_err(&active, e))?;
    fsync_dir(dir).map_err(|e| io_err(dir, e))?;
    let older = probe_older(layout, id, max_segments).map_err(|e| io_err(dir, e))?;
    w.ident = FileIdent::of(&file.metadata().map_err(|e| io_err(&active, e))?);
    w.file = file;
    w.len = 0;
    w.segment_count = older.len() as u32 + 1;
    tracing::debug!(session = %id, segments = w.segment_count, "rotated the event log");
    Ok(())
}

/// Finds a byte offset in `[0, end)` at which to start scanning for `from_seq`: a line start
/// before which every line has a smaller seq. Bisects on byte offsets (seek, skip to the next
/// line start, parse only that line's seq) until the window is small, so that reading the tail
/// of a large segment does not parse the whole segment. A line that does not parse stops the
/// bisection early; the scan then starts from the last good position.
fn seek_from_seq(file: &File, end: u64, from_seq: u64) -> io::Result<u64> {
    let (mut lo, mut hi) = (0u64, end);
    while hi - lo > LINEAR_SCAN_BYTES {
        let mid = lo + (hi - lo) / 2;
        let Some(start) = next_line_start(file, mid, hi)? else {
            hi = mid;
            continue;
        };
        let Some(line) = read_line_at(file, start, end)? else {
            break;
        };
        match probe_seq(&line) {
            Some(seq) if seq < from_seq => lo = start,
            Some(_) => hi = mid,
            None => break,
        }
    }
    Ok(lo)
}

/// The line-number bookkeeping of one segment scan. Line numbers are only needed on error
/// paths, so when the scan starts in the middle of a file the lines before it are counted
/// only if a damaged line is found.
struct LineNumbers {
    base: Option<u64>,
    start: u64,
    seen: u64,
}

impl LineNumbers {
    fn current(&mut self, file: &File) -> io::Result<u64> {
        let base = match self.base {
            Some(b) => b,
            None => {
                let b = count_newlines(file, self.start)?;
                self.base = Some(b);
                b
            }
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
            });
            active.end = end;
        }
    }
    let mut firsts = Vec::with_capacity(segs.len());
    for s in &segs {
        firsts.push(first_seq_lenient(&s.file, s.end).map_err(|e| io_err(&s.path, e))?);
    }
    page.oldest_seq = firsts.iter().flatten().next().copied().unwrap_or(0);
    for s in segs.iter().rev() {
        if let Some(seq) = last_seq_lenient(&s.file, s.end).map_err(|e| io_err(&s.path, e))? {
            page.last_seq = seq;
            break;
        }
    }
    // Whole segments before the last one starting at or below `from_seq` hold only smaller seqs.
    let start_seg = firsts
        .iter()
        .rposition(|f| f.is_some_and(|s| s <= query.from_seq))
        .unwrap_or(0);
    let mut prev: Option<u64> = None;
    let mut after_damage = false;
    for (i, s) in segs.iter().enumerate().skip(start_seg) {
        let start = if i == start_seg && firsts[i].is_some_and(|f| f < query.from_seq) {
            seek_from_seq(&s.file, s.end, query.from_seq).map_err(|e| io_err(&s.path, e))?
        } else {
            0
        };
        if scan_segment(s, start, id, query, &mut prev, &mut after_damage, &mut page)? {
            break;
        }
    }
    Ok(page)
}

/// Scans one segment from byte `start`. Returns true when the page is complete.
fn scan_segment(
    s: &Segment,
    start: u64,
    id: &RecordId,
    query: &EventQuery,
    prev: &mut Option<u64>,
    after_damage: &mut bool,
    page: &mut EventPage,
) -> StoreResult<bool> {
    let io = |e| io_err(&s.path, e);
    let location = s.path.display().to_string();
    let mut reader = &s.file;
    reader.seek(SeekFrom::Start(start)).map_err(io)?;
    let mut reader = BufReader::with_capacity(256 * 1024, reader.take(s.end - start));
    let mut lines = LineNumbers {
        base: (start == 0).then_some(0),
        start,
        seen: 0,
    };
    let mut line = Vec::with_capacity(1024);
    loop {
        line.clear();
        let n = reader.read_until(b'\n', &mut line).map_err(io)?;
        if n == 0 {
            return Ok(false);
        }
        lines.seen += 1;
        let complete = line.last() == Some(&b'\n');
        let problem = if !complete {
            // Only possible in an older segment: the active one's torn tail was cut off above.
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
                match *prev {
                    Some(p) if e.seq <= p => {
                        damaged(
                            query.mode,
                            page,
                            &location,
                            lines.current(&s.file).map_err(io)?,
                            format!(
                                "seq {} repeats or goes back (the previous event has seq {p})",
                                e.seq
                            ),
                        )?;
                        continue;
                    }
                    // The event itself is sound: keep it, and report the hole, unless the
                    // damaged lines just skipped (already reported) explain it.
                    Some(p) if e.seq != p + 1 && !*after_damage => {
                        damaged(
                            query.mode,
                            page,
                            &location,
                            lines.current(&s.file).map_err(io)?,
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
                *prev = Some(e.seq);
                *after_damage = false;
                e
            }
            Err(reason) => {
                *after_damage = true;
                damaged(
                    query.mode,
                    page,
                    &location,
                    lines.current(&s.file).map_err(io)?,
                    reason,
                )?;
                continue;
            }
        };
        if event.seq < query.from_seq || !query.matches(&event) {
            continue;
        }
        if query.limit.is_some_and(|l| page.events.len() >= l) {
            page.next_seq = Some(event.seq);
            return Ok(true);
        }
        page.events.push(event);
    }
}

/// A damaged line: an error in strict mode, a report in lenient mode.
fn damaged(
    mode: ReadMode,
    page: &mut EventPage,
    location: &str,
    line: u64,
    reason: String,
) -> StoreResult<()> {
    match mode {
        ReadMode::Strict => Err(StoreError::corrupt(location, Some(line), reason)),
        ReadMode::Lenient => {
            tracing::warn!(file = location, line, %reason, "skipping a damaged event-log line");
            page.damaged.push(DamagedLine {
                location: location.to_owned(),
                line,
                reason,
            });
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_with(bytes: &[u8]) -> (tempfile::NamedTempFile, File) {
        let mut t = tempfile::NamedTempFile::new().unwrap();
        t.write_all(bytes).unwrap();
        let f = File::open(t.path()).unwrap();
        (t, f)
    }

    #[test]
    fn content_end_finds_torn_tails() {
        let (_t, f) = file_with(b"a\nbb\nccc");
        assert_eq!(content_end(&f, 8).unwrap(), 5);
        let (_t, f) = file_with(b"a\nbb\n");
        assert_eq!(content_end(&f, 5).unwrap(), 5);
        let (_t, f) = file_with(b"partial");
        assert_eq!(content_end(&f, 7).unwrap(), 0);
    }

    #[test]
    fn line_helpers_cross_chunk_boundaries() {
        let long = "x".repeat(CHUNK * 2 + 7);
        let text = format!("{{\"seq\":1}}\n{long}\n{{\"seq\":3}}\n");
        let (_t, f) = file_with(text.as_bytes());
        let len = text.len() as u64;
        assert_eq!(last_seq_lenient(&f, len).unwrap(), Some(3));
        assert_eq!(first_seq_lenient(&f, len).unwrap(), Some(1));
        let second = 10;
        assert_eq!(next_line_start(&f, 5, len).unwrap(), Some(second));
        assert_eq!(
            next_line_start(&f, second + 1, len).unwrap(),
            Some(second + long.len() as u64 + 1)
        );
        assert_eq!(count_newlines(&f, len).unwrap(), 3);
        assert_eq!(
            read_line_at(&f, second, len).unwrap().unwrap().len(),
            long.len()
        );
        assert_eq!(line_start_before(&f, len).unwrap(), len - 10);
    }

    #[test]
    fn bisection_lands_before_the_wanted_seq() {
        let mut text = String::new();
        for seq in 1..=20_000u64 {
            text.push_str(&format!(
                "{{\"seq\":{seq},\"pad\":\"{}\"}}\n",
                "p".repeat(20)
            ));
        }
        let (_t, f) = file_with(text.as_bytes());
        let len = text.len() as u64;
        for from in [1u64, 2, 500, 10_000, 19_999, 20_000, 25_000] {
            let off = seek_from_seq(&f, len, from).unwrap();
            let line = read_line_at(&f, off, len).unwrap().unwrap();
            let seq = probe_seq(&line).unwrap();
            assert!(seq <= from.max(1), "from {from} landed on {seq}");
            // Each line is about 40 bytes: the scan window holds at most ~1,700 of them.
            assert!(
                from.min(20_000) - seq < 2 * LINEAR_SCAN_BYTES / 38,
                "from {from} landed too early, on {seq}"
            );
        }
    }
}
