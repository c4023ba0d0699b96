//! Closed event-log segments compressed with zstd: `<id>.events.<n>.ndjson.zst`.
//!
//! A compressed segment is a plain zstd stream (`zstd -dc` prints the original NDJSON) made of
//! independent frames, each holding whole lines (about [`FRAME_BYTES`] of them, with a content
//! checksum), followed by one skippable frame holding an index of the data frames: where each
//! starts, its sizes, the number of lines before it and its first and last seq. Readers use the
//! index to start decoding at the frame that holds `from_seq` and to learn the segment's last
//! seq without decoding it; a damaged frame loses only its own lines (the others still decode).
//! An index that is missing or fails its checks (size, layout, checksum) is ignored: the
//! segment is then decoded as a stream from its start, up to the first damaged byte.
//! Layout of the index frame (little-endian; docs/format.md § Compressed segments):
//!
//! ```text
//! u32 magic 0x184D2A5E, u32 payload length, payload:
//!   "ACPXZIX1", u32 frame count,
//!   per frame: u64 offset, u64 compressed size, u64 uncompressed size, u64 lines before,
//!              u64 first seq, u64 last seq (u64::MAX: no parseable line),
//!   u64 last seq of the segment, u64 lines, u64 uncompressed length,
//!   u64 FNV-1a of the payload so far, u32 length of this whole frame, "ACPXZEND"
//! ```

use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Read, Write};
use std::os::unix::fs::FileExt;

/// Uncompressed bytes per data frame (a frame ends at the first line end past this). Small
/// enough that reading from a seq decodes little more than needed and that compressing a
/// segment (which happens during a turn, at rotation) adds little to the turn's peak memory;
/// large enough that the ratio is within a few percent of one frame for the whole segment
/// (docs/BENCHMARKS.md § Compressed closed segments).
pub(crate) const FRAME_BYTES: usize = 256 << 10;
/// The zstd level of closed segments: level 1 compresses these logs as well as level 3 and,
/// with 256 KiB frames, with a fraction of its tables (docs/BENCHMARKS.md § Compressed closed
/// segments).
pub(crate) const LEVEL: i32 = 1;

const INDEX_MAGIC: u32 = 0x184D_2A5E;
const INDEX_TAG: &[u8; 8] = b"ACPXZIX1";
const END_TAG: &[u8; 8] = b"ACPXZEND";
const NONE: u64 = u64::MAX;
const FRAME_FIELDS: usize = 6;
/// An uncompressed frame size beyond this marks the index as untrustworthy (a frame is about
/// 256 KiB plus one line; this only keeps a damaged index from asking for absurd buffers).
const MAX_FRAME_USIZE: u64 = 1 << 30;

/// One data frame of a compressed segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Frame {
    pub offset: u64,
    pub csize: u64,
    pub usize: u64,
    /// Lines (`\n`) in the frames before this one: line numbers in reports stay those of the
    /// original plain segment.
    pub lines_before: u64,
    pub first_seq: Option<u64>,
    pub last_seq: Option<u64>,
}

/// The index of a compressed segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Index {
    pub frames: Vec<Frame>,
    pub last_seq: Option<u64>,
    pub lines: u64,
    pub plain_len: u64,
}

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn opt(v: u64) -> Option<u64> {
    (v != NONE).then_some(v)
}

fn put(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

impl Index {
    /// The whole skippable index frame.
    fn encode(&self) -> Vec<u8> {
        let mut p = Vec::with_capacity(64 + self.frames.len() * FRAME_FIELDS * 8);
        p.extend_from_slice(INDEX_TAG);
        p.extend_from_slice(&(self.frames.len() as u32).to_le_bytes());
        for f in &self.frames {
            for v in [
                f.offset,
                f.csize,
                f.usize,
                f.lines_before,
                f.first_seq.unwrap_or(NONE),
                f.last_seq.unwrap_or(NONE),
            ] {
                put(&mut p, v);
            }
        }
        put(&mut p, self.last_seq.unwrap_or(NONE));
        put(&mut p, self.lines);
        put(&mut p, self.plain_len);
        let sum = fnv1a(&p);
        put(&mut p, sum);
        let frame_len = (8 + p.len() + 4 + END_TAG.len()) as u32;
        p.extend_from_slice(&frame_len.to_le_bytes());
        p.extend_from_slice(END_TAG);
        let mut out = Vec::with_capacity(8 + p.len());
        out.extend_from_slice(&INDEX_MAGIC.to_le_bytes());
        out.extend_from_slice(&(p.len() as u32).to_le_bytes());
        out.extend_from_slice(&p);
        out
    }

    /// Parses the index frame at the end of a file of length `len`; `Err` says why it is not
    /// usable (the caller then decodes the segment as a stream).
    pub fn read(file: &File, len: u64) -> io::Result<Result<Index, String>> {
        let tail_len = 4 + END_TAG.len() as u64;
        if len < tail_len {
            return Ok(Err("the file is too short to end with an index".into()));
        }
        let mut tail = [0u8; 12];
        file.read_exact_at(&mut tail, len - tail_len)?;
        if &tail[4..] != END_TAG {
            return Ok(Err("the file does not end with an index".into()));
        }
        let frame_len = u64::from(u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]));
        if frame_len > len || frame_len < 8 + tail_len {
            return Ok(Err(format!(
                "the index length {frame_len} does not fit the file"
            )));
        }
        let start = len - frame_len;
        let mut buf = vec![0u8; frame_len as usize];
        file.read_exact_at(&mut buf, start)?;
        Ok(Self::decode(&buf, start))
    }

    fn decode(buf: &[u8], data_end: u64) -> Result<Index, String> {
        let u32_at = |at: usize| -> Result<u32, String> {
            buf.get(at..at + 4)
                .and_then(|b| b.try_into().ok())
                .map(u32::from_le_bytes)
                .ok_or_else(|| "the index is cut short".to_owned())
        };
        let u64_at = |at: usize| -> Result<u64, String> {
            buf.get(at..at + 8)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_le_bytes)
                .ok_or_else(|| "the index is cut short".to_owned())
        };
        if u32_at(0)? != INDEX_MAGIC || buf.get(8..16) != Some(INDEX_TAG.as_slice()) {
            return Err("the index frame has a wrong magic number".into());
        }
        let payload_len = u32_at(4)? as usize;
        let count = u32_at(16)? as usize;
        let fixed = 8 + 4 + 8 * 4 + 4 + END_TAG.len();
        if count > (1 << 24) || payload_len != fixed + count * FRAME_FIELDS * 8 {
            return Err(format!(
                "the index says {count} frames in {payload_len} bytes, which do not match"
            ));
        }
        if buf.len() != 8 + payload_len {
            return Err("the index length does not match its frame".into());
        }
        let sum_at = 8 + payload_len - 8 - 4 - 8;
        if u64_at(sum_at)? != fnv1a(&buf[8..sum_at]) {
            return Err("the index checksum does not match".into());
        }
        let mut frames = Vec::with_capacity(count);
        let mut at = 20;
        let mut expect_offset = 0;
        for k in 0..count {
            let v = |i: usize| u64_at(at + 8 * i);
            let f = Frame {
                offset: v(0)?,
                csize: v(1)?,
                usize: v(2)?,
                lines_before: v(3)?,
                first_seq: opt(v(4)?),
                last_seq: opt(v(5)?),
            };
            if f.offset != expect_offset || f.usize > MAX_FRAME_USIZE {
                return Err(format!("frame {k} of the index is out of place"));
            }
            expect_offset = f.offset.saturating_add(f.csize);
            frames.push(f);
            at += FRAME_FIELDS * 8;
        }
        if expect_offset != data_end {
            return Err("the index frames do not cover the file".into());
        }
        Ok(Index {
            frames,
            last_seq: opt(u64_at(at)?),
            lines: u64_at(at + 8)?,
            plain_len: u64_at(at + 16)?,
        })
    }

    /// The frame to start at for `from_seq`: the last one whose first seq is at most it (every
    /// line before it has a smaller seq), 0 when there is none.
    pub fn start_frame(&self, from_seq: u64) -> usize {
        self.frames
            .iter()
            .rposition(|f| f.first_seq.is_some_and(|s| s <= from_seq))
            .unwrap_or(0)
    }
}

/// The first and last seq of the lines in `buf` that parse (damaged lines skipped).
fn seq_bounds(buf: &[u8]) -> (Option<u64>, Option<u64>) {
    let lines = || buf.split(|&b| b == b'\n').filter(|l| !l.is_empty());
    let first = lines().find_map(super::lines::probe_seq);
    let last = buf
        .rsplit(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .find_map(super::lines::probe_seq);
    (first, last)
}

/// Compresses the first `len` bytes of the plain segment `src` into `dst` (an empty file),
/// copying the bytes exactly, and syncs `dst`. Memory: one frame's worth of lines.
pub(crate) fn compress(src: &File, len: u64, dst: &File) -> io::Result<Index> {
    compress_at(src, len, dst, LEVEL)
}

fn compress_at(src: &File, len: u64, dst: &File, level: i32) -> io::Result<Index> {
    let mut comp = zstd::bulk::Compressor::new(level)?;
    comp.set_parameter(zstd::zstd_safe::CParameter::ChecksumFlag(true))?;
    let mut reader = BufReader::with_capacity(64 * 1024, src.take(len));
    let mut out = BufWriter::with_capacity(64 * 1024, dst);
    let mut index = Index {
        frames: Vec::new(),
        last_seq: None,
        lines: 0,
        plain_len: 0,
    };
    let mut buf = Vec::with_capacity(FRAME_BYTES + 64 * 1024);
    let mut offset = 0u64;
    loop {
        let n = reader.read_until(b'\n', &mut buf)?;
        if (n == 0 || buf.len() >= FRAME_BYTES) && !buf.is_empty() {
            let data = comp.compress(&buf)?;
            let (first_seq, last_seq) = seq_bounds(&buf);
            index.frames.push(Frame {
                offset,
                csize: data.len() as u64,
                usize: buf.len() as u64,
                lines_before: index.lines,
                first_seq,
                last_seq,
            });
            index.lines += buf.iter().filter(|&&b| b == b'\n').count() as u64;
            index.plain_len += buf.len() as u64;
            index.last_seq = last_seq.or(index.last_seq);
            out.write_all(&data)?;
            offset += data.len() as u64;
            buf.clear();
        }
        if n == 0 {
            break;
        }
    }
    out.write_all(&index.encode())?;
    out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    Ok(index)
}

/// Decodes one frame (its bytes read at its offset) into its lines. `Err` carries why the
/// frame is damaged.
pub(crate) fn decode_frame(file: &File, f: &Frame) -> io::Result<Result<Vec<u8>, String>> {
    let mut data = vec![0u8; usize::try_from(f.csize).unwrap_or(usize::MAX)];
    match file.read_exact_at(&mut data, f.offset) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
            return Ok(Err("the frame is cut short".into()))
        }
        Err(e) => return Err(e),
    }
    let cap = usize::try_from(f.usize).unwrap_or(usize::MAX);
    let out = match zstd::bulk::Decompressor::new()?.decompress(&data, cap) {
        Ok(out) => out,
        Err(e) => return Ok(Err(e.to_string())),
    };
    if out.len() as u64 != f.usize {
        return Ok(Err(format!(
            "the frame holds {} bytes, the index says {}",
            out.len(),
            f.usize
        )));
    }
    Ok(Ok(out))
}

/// A streaming decoder over the whole file (the path without a usable index). Reading from it
/// fails at the first damaged byte.
pub(crate) fn stream(file: &File, len: u64) -> io::Result<impl BufRead + '_> {
    let raw = BufReader::with_capacity(64 * 1024, file.take(len));
    let decoder = zstd::stream::read::Decoder::with_buffer(raw)?;
    Ok(BufReader::with_capacity(256 * 1024, decoder))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(lines: u64, pad: usize) -> Vec<u8> {
        let mut text = Vec::new();
        for seq in 1..=lines {
            text.extend_from_slice(
                format!("{{\"seq\":{seq},\"pad\":\"{}\"}}\n", "p".repeat(pad)).as_bytes(),
            );
        }
        text
    }

    fn compressed(bytes: &[u8]) -> (tempfile::TempDir, File, Index) {
        let dir = tempfile::tempdir().unwrap();
        let src_path = dir.path().join("plain");
        std::fs::write(&src_path, bytes).unwrap();
        let src = File::open(&src_path).unwrap();
        let dst_path = dir.path().join("z");
        let dst = File::create(&dst_path).unwrap();
        let index = compress(&src, bytes.len() as u64, &dst).unwrap();
        (dir, File::open(&dst_path).unwrap(), index)
    }

    #[test]
    fn round_trips_through_frames_index_and_stream() {
        let text = plain(60_000, 40);
        let (_d, z, index) = compressed(&text);
        let len = z.metadata().unwrap().len();
        assert!(index.frames.len() > 2, "{}", index.frames.len());
        assert_eq!(Index::read(&z, len).unwrap().unwrap(), index);
        assert_eq!(index.last_seq, Some(60_000));
        assert_eq!(index.lines, 60_000);
        let mut joined = Vec::new();
        for f in &index.frames {
            let out = decode_frame(&z, f).unwrap().unwrap();
            assert_eq!(out.last(), Some(&b'\n'));
            joined.extend_from_slice(&out);
        }
        assert_eq!(joined, text);
        let mut streamed = Vec::new();
        stream(&z, len).unwrap().read_to_end(&mut streamed).unwrap();
        assert_eq!(streamed, text);
        let k = index.start_frame(30_000);
        let f = &index.frames[k];
        assert!(f.first_seq.unwrap() <= 30_000 && f.last_seq.unwrap() >= 30_000);
        assert_eq!(index.start_frame(0), 0);
    }

    #[test]
    fn a_damaged_index_is_refused_and_an_empty_segment_has_none() {
        let text = plain(100, 10);
        let (d, z, _) = compressed(&text);
        let mut bytes = std::fs::read(d.path().join("z")).unwrap();
        let len = bytes.len();
        // A flipped bit in the last seq of the segment: the checksum catches it.
        bytes[len - 12 - 8 - 24] ^= 1;
        let p = d.path().join("bad");
        std::fs::write(&p, &bytes).unwrap();
        let bad = File::open(&p).unwrap();
        assert!(Index::read(&bad, len as u64).unwrap().is_err());
        assert!(Index::read(&z, 5).unwrap().is_err());
        let (_d, z, index) = compressed(b"");
        assert!(index.frames.is_empty());
        let len = z.metadata().unwrap().len();
        assert_eq!(Index::read(&z, len).unwrap().unwrap(), index);
    }

    /// The figures of docs/BENCHMARKS.md § Compressed segments: compresses the plain segment
    /// named by `ACPX_MEASURE_SEGMENT` at several levels and decodes it back, printing sizes and
    /// times. `cargo test --release -p acpx-store-fs --lib measure -- --ignored --nocapture`.
    #[test]
    #[ignore = "a measurement on a real segment, not a check"]
    fn measure_segment_compression() {
        let Some(path) = std::env::var_os("ACPX_MEASURE_SEGMENT") else {
            eprintln!("set ACPX_MEASURE_SEGMENT to a plain segment");
            return;
        };
        let len = std::fs::metadata(&path).unwrap().len();
        let dir = tempfile::tempdir().unwrap();
        for level in [1, 3, 6] {
            // A fresh descriptor each time: compression reads from the current position.
            let src = File::open(&path).unwrap();
            let dst_path = dir.path().join(format!("z{level}"));
            let dst = File::create(&dst_path).unwrap();
            let started = std::time::Instant::now();
            let index = compress_at(&src, len, &dst, level).unwrap();
            let took = started.elapsed();
            let zlen = std::fs::metadata(&dst_path).unwrap().len();
            let z = File::open(&dst_path).unwrap();
            let started = std::time::Instant::now();
            let mut out = 0u64;
            for f in &index.frames {
                out += decode_frame(&z, f).unwrap().unwrap().len() as u64;
            }
            let back = started.elapsed();
            assert_eq!(out, len);
            println!(
                "level {level}: {len} -> {zlen} bytes (ratio {:.2}, {} frames, {} lines), \
                 compress {:.0} ms ({:.0} MB/s), decode {:.0} ms ({:.0} MB/s)",
                len as f64 / zlen as f64,
                index.frames.len(),
                index.lines,
                took.as_secs_f64() * 1e3,
                len as f64 / took.as_secs_f64() / 1e6,
                back.as_secs_f64() * 1e3,
                len as f64 / back.as_secs_f64() / 1e6,
            );
        }
    }
}
