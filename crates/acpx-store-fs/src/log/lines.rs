//! Line-level reads of a plain segment by byte offset: finding line boundaries, a line's seq,
//! the first and last seq, torn tails, and the bisection for `from_seq`.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// Below this many bytes, the search for `from_seq` inside a segment scans instead of bisecting.
pub(crate) const LINEAR_SCAN_BYTES: u64 = 64 * 1024;
/// Chunk size of backward and forward line searches.
pub(crate) const CHUNK: usize = 16 * 1024;

/// The seq of a line, parsed without building the whole envelope.
#[derive(serde::Deserialize)]
struct SeqProbe {
    seq: u64,
}

pub(crate) fn probe_seq(line: &[u8]) -> Option<u64> {
    serde_json::from_slice::<SeqProbe>(line).ok().map(|p| p.seq)
}

/// Reads as many bytes as available at `off` into `buf` (short only at end of file).
pub(crate) fn read_upto(file: &File, mut off: u64, buf: &mut [u8]) -> io::Result<usize> {
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

/// A read buffer for `len` bytes: [`CHUNK`] at most, and no larger than what there is to
/// read (a log of a few KB is read thousands of times by a migration; a 16 KiB zeroed
/// allocation for each was a visible part of it).
fn buffer_for(len: u64) -> usize {
    usize::try_from(len).unwrap_or(CHUNK).min(CHUNK)
}

/// The bytes `[start, end)`, or fewer if the file got shorter meanwhile.
pub(crate) fn read_range(file: &File, start: u64, end: u64) -> io::Result<Vec<u8>> {
    let mut buf = vec![0; usize::try_from(end.saturating_sub(start)).unwrap_or(usize::MAX)];
    let n = read_upto(file, start, &mut buf)?;
    buf.truncate(n);
    Ok(buf)
}

/// Position of the last `\n` in `[0, end)`.
pub(crate) fn last_newline_before(file: &File, end: u64) -> io::Result<Option<u64>> {
    let mut hi = end;
    let mut buf = vec![0u8; buffer_for(end)];
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
pub(crate) fn read_line_at(file: &File, start: u64, end: u64) -> io::Result<Option<Vec<u8>>> {
    let mut line = Vec::new();
    let mut off = start;
    let mut buf = vec![0u8; buffer_for(end.saturating_sub(start))];
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
pub(crate) fn next_line_start(file: &File, off: u64, end: u64) -> io::Result<Option<u64>> {
    if off == 0 {
        return Ok((end > 0).then_some(0));
    }
    let mut pos = off - 1;
    let mut buf = vec![0u8; buffer_for(end.saturating_sub(pos))];
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
pub(crate) fn count_newlines(file: &File, end: u64) -> io::Result<u64> {
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
pub(crate) fn line_start_before(file: &File, end: u64) -> io::Result<u64> {
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
pub(crate) fn first_seq_lenient(file: &File, end: u64) -> io::Result<Option<u64>> {
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

/// Finds a byte offset in `[0, end)` at which to start scanning for `from_seq`: a line start
/// before which every line has a smaller seq. Bisects on byte offsets (seek, skip to the next
/// line start, parse only that line's seq) until the window is small, so that reading the tail
/// of a large segment does not parse the whole segment. A line that does not parse stops the
/// bisection early; the scan then starts from the last good position.
pub(crate) fn seek_from_seq(file: &File, end: u64, from_seq: u64) -> io::Result<u64> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

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
