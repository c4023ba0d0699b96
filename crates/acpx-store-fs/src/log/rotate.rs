//! Rotation of the event log, and the compression of closed segments.

use std::fs;
use std::io;

use acpx_model::{RecordId, StoreResult};

use super::zseg;
use super::{probe_older, LogWriter};
use crate::failpoint::failpoint;
use crate::fsutil::{
    create_new_file, fsync_dir, io_err, open_append_create, open_read, remove_if_exists, stat_opt,
    FileIdent,
};
use crate::layout::Layout;

/// Rotates the active segment (grown past the size limit, or ended a turn past
/// `turn_end_rotate_bytes`): older segments move up one index (those beyond retention are
/// deleted first, oldest first, unless `keep_rotated`; see [`retained`]), the active file
/// becomes `.1`, and a new empty active file is created. At every step the files, ordered
/// by index, stay ordered by age, so a crash anywhere leaves a readable log (possibly with a
/// gap in the numbering, which the next rotation closes). Then the closed segments still plain
/// are compressed ([`compress_closed`]).
pub(crate) fn rotate(
    layout: &Layout,
    id: &RecordId,
    max_segments: u32,
    max_segment_bytes: u64,
    keep_rotated: bool,
    w: &mut LogWriter,
) -> StoreResult<()> {
    let dir = layout.dir();
    let older = probe_older(layout, id, max_segments).map_err(|e| io_err(dir, e))?;
    // After the rotation: the new active, `.1` (the old active), and `keep` shifted ones.
    let keep = if keep_rotated {
        older.len()
    } else {
        retained(layout, id, &older, w.len, max_segments, max_segment_bytes)
    };
    for &n in older[keep..].iter().rev() {
        remove_segment_files(layout, id, n)?;
    }
    let kept = &older[..keep];
    // The kept segments go to 2, 3, …. Those moving down (after a gap) go newest first, those
    // moving up oldest first: each target is free when it is taken.
    for (r, &n) in kept.iter().enumerate() {
        let target = r as u32 + 2;
        if target < n {
            move_segment(layout, id, n, target)?;
        }
    }
    for (r, &n) in kept.iter().enumerate().rev() {
        let target = r as u32 + 2;
        if target > n {
            move_segment(layout, id, n, target)?;
        }
    }
    failpoint!("rotate.after_shift");
    let (from, to) = (layout.segment(id, 0), layout.segment(id, 1));
    fs::rename(&from, &to).map_err(|e| io_err(&from, e))?;
    let active = layout.segment(id, 0);
    let (file, _) = open_append_create(&active).map_err(|e| io_err(&active, e))?;
    fsync_dir(dir).map_err(|e| io_err(dir, e))?;
    let older = probe_older(layout, id, max_segments).map_err(|e| io_err(dir, e))?;
    w.ident = FileIdent::of(&file.metadata().map_err(|e| io_err(&active, e))?);
    w.file = file;
    w.len = 0;
    w.segment_count = older.len() as u32 + 1;
    tracing::debug!(session = %id, segments = w.segment_count, "rotated the event log");
    // The rotation is complete and the log readable; a failed compression leaves a plain
    // segment, which readers read and the next rotation compresses.
    if let Err(e) = compress_closed(layout, id, max_segments) {
        tracing::warn!(session = %id, error = %e, "could not compress a closed event-log segment; it stays plain");
    }
    Ok(())
}

/// How many of the `older` segments (newest first) a rotation keeps: the seed's count
/// (`max_segments` files, so `max_segments − 2` besides the new active and `.1`), and more
/// while the closed segments, `.1` (the closing active segment, `closing_len` bytes) included,
/// hold less than `max_segments − 1` segments' worth of `max_segment_bytes` (uncompressed).
/// Rotated at the size limit alone, every closed segment is larger than `max_segment_bytes`,
/// so the count decides; segments rotated early at a turn's end are smaller, and more of them
/// fit in the same window.
fn retained(
    layout: &Layout,
    id: &RecordId,
    older: &[u32],
    closing_len: u64,
    max_segments: u32,
    max_segment_bytes: u64,
) -> usize {
    let by_count = (max_segments as usize).saturating_sub(2).min(older.len());
    let window = u64::from(max_segments.saturating_sub(1)).saturating_mul(max_segment_bytes);
    let mut held = closing_len;
    for (kept, &n) in older.iter().enumerate() {
        if held >= window {
            return kept.max(by_count);
        }
        held = held.saturating_add(plain_len(layout, id, n, max_segment_bytes));
    }
    older.len()
}

/// The uncompressed length of older segment `n`: its plain file's (the original, when both
/// exist), else the compressed file's index's. A compressed segment whose index is unusable,
/// or that cannot be read, counts as a full segment: an old segment retention may be about to
/// delete must not stop the rotation.
fn plain_len(layout: &Layout, id: &RecordId, n: u32, max_segment_bytes: u64) -> u64 {
    let plain = layout.segment(id, n);
    let zst = layout.segment_zst(id, n);
    let measured = (|| -> io::Result<Option<u64>> {
        if let Some(meta) = stat_opt(&plain)? {
            return Ok(Some(meta.len()));
        }
        let file = match open_read(&zst) {
            Ok(f) => f,
            // Gone since the probe (a concurrent delete): nothing to count.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Some(0)),
            Err(e) => return Err(e),
        };
        let len = file.metadata()?.len();
        Ok(zseg::Index::read(&file, len)?
            .ok()
            .map(|index| index.plain_len))
    })();
    match measured {
        Ok(Some(len)) => len,
        Ok(None) => max_segment_bytes,
        Err(e) => {
            tracing::warn!(session = %id, segment = n, error = %e, "cannot measure an older event-log segment; retention counts it as a full one");
            max_segment_bytes
        }
    }
}

/// Renames segment `from` to `to`: its plain file, its compressed one, or both (a compression
/// a crash interrupted). A compression temp file of `from` is debris and goes.
fn move_segment(layout: &Layout, id: &RecordId, from: u32, to: u32) -> StoreResult<()> {
    for (a, b) in [
        (layout.segment(id, from), layout.segment(id, to)),
        (layout.segment_zst(id, from), layout.segment_zst(id, to)),
    ] {
        match fs::rename(&a, &b) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err(&a, e)),
        }
    }
    let tmp = layout.segment_zst_temp(id, from);
    remove_if_exists(&tmp).map_err(|e| io_err(&tmp, e))?;
    Ok(())
}

/// Removes every file of older segment `n` (plain, compressed, compression temp). Returns
/// whether any existed.
pub(crate) fn remove_segment_files(layout: &Layout, id: &RecordId, n: u32) -> StoreResult<bool> {
    let mut any = false;
    for p in [
        layout.segment(id, n),
        layout.segment_zst(id, n),
        layout.segment_zst_temp(id, n),
    ] {
        any |= remove_if_exists(&p).map_err(|e| io_err(&p, e))?;
    }
    Ok(any)
}

/// Compresses every older segment that is still plain (the one just closed; one a crash or a
/// failure left plain; those of versions that kept them plain), then removes the plain file.
/// Where both exist, the compressed file is complete (it is renamed into place only after it
/// was synced), so only the plain one is removed. Returns how many were compressed.
pub(crate) fn compress_closed(
    layout: &Layout,
    id: &RecordId,
    max_segments: u32,
) -> StoreResult<u32> {
    let dir = layout.dir();
    let mut compressed = 0;
    let mut removed = false;
    for n in probe_older(layout, id, max_segments).map_err(|e| io_err(dir, e))? {
        let plain = layout.segment(id, n);
        if stat_opt(&plain).map_err(|e| io_err(&plain, e))?.is_none() {
            continue;
        }
        let zst = layout.segment_zst(id, n);
        if stat_opt(&zst).map_err(|e| io_err(&zst, e))?.is_none() {
            compress_one(layout, id, n)?;
            compressed += 1;
        }
        failpoint!("compress.before_plain_removed");
        removed |= remove_if_exists(&plain).map_err(|e| io_err(&plain, e))?;
    }
    if removed {
        fsync_dir(dir).map_err(|e| io_err(dir, e))?;
    }
    Ok(compressed)
}

/// Writes `<id>.events.<n>.ndjson.zst` from the plain segment `n`: into a temp file, synced,
/// renamed into place, directory synced. The plain file is left to the caller.
fn compress_one(layout: &Layout, id: &RecordId, n: u32) -> StoreResult<()> {
    let (plain, tmp, zst) = (
        layout.segment(id, n),
        layout.segment_zst_temp(id, n),
        layout.segment_zst(id, n),
    );
    let src = open_read(&plain).map_err(|e| io_err(&plain, e))?;
    let len = src.metadata().map_err(|e| io_err(&plain, e))?.len();
    remove_if_exists(&tmp).map_err(|e| io_err(&tmp, e))?;
    let dst = create_new_file(&tmp).map_err(|e| io_err(&tmp, e))?;
    let started = std::time::Instant::now();
    if let Err(e) = zseg::compress(&src, len, &dst) {
        let _ = remove_if_exists(&tmp);
        return Err(io_err(&tmp, e));
    }
    fs::rename(&tmp, &zst).map_err(|e| io_err(&tmp, e))?;
    let dir = layout.dir();
    fsync_dir(dir).map_err(|e| io_err(dir, e))?;
    tracing::debug!(session = %id, segment = n, bytes = len, elapsed_ms = started.elapsed().as_millis() as u64, "compressed a closed event-log segment");
    Ok(())
}
