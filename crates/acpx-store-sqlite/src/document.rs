//! A session's document (`session.json`) in its `session_documents` row (schema version 6).
//!
//! A long conversation's document is megabytes (8 MB after a 1M-chunk turn), and each prompt
//! saves it again with a few kilobytes changed: the last messages, a few timestamps. Two
//! costs made that save grow with the document (docs/BENCHMARKS.md § SQLite documents in
//! place):
//! - an `UPDATE` of any column of a row makes SQLite read and rebuild the whole record,
//!   document included (25–34 ms for 8 MB, measured), which is why the document has a table
//!   of its own and a save's `UPDATE` of `session_rows` never touches it;
//! - a document of a new length was stored as `zeroblob(len)` and then written whole: SQLite
//!   writes the zeros into every overflow page and then the text, spilling pages of its 2 MiB
//!   cache into the WAL on the way, and the checkpoint copies them again (53 MB of writes
//!   for one 8 MB save, 100 ms of CPU).
//!
//! So a document of [`PAD_FROM`] bytes or more is stored padded with spaces (insignificant
//! after a JSON text) to a capacity with room to grow ([`capacity`]), and a save that still
//! fits writes it in place through SQLite's incremental blob I/O, 64 KiB at a time, comparing
//! each window with what the row holds and writing only the windows that differ. A turn that
//! adds kilobytes to an 8 MB document writes a few windows. Reading the row to compare costs
//! a copy of the document; nothing holds more than two windows of it.
//!
//! A shorter document is bound as text, as before: for a few kilobytes the rewrite costs
//! nothing worth the padding.

use std::io::{self, Write};

use acpx_model::{RecordId, StoreError};
use rusqlite::blob::Blob;
use rusqlite::{params, Transaction, MAIN_DB};

use crate::connection::{TxError, TxResult};
use crate::rows::Document;

/// Documents at least this long are stored padded and written in place.
pub(crate) const PAD_FROM: usize = 64 * 1024;

/// The unit of an in-place write: compared with the row, written when it differs.
const WINDOW: usize = 64 * 1024;

/// The padding byte: whitespace, which JSON allows after the value.
const PAD: u8 = b' ';

/// The stored length of a new row for a document of `len` bytes: `len` itself below
/// [`PAD_FROM`]; above, an eighth more (at least [`PAD_FROM`]), rounded up to a 4 KiB page, so
/// that the next prompts' additions fit in place and a reallocation comes once per growth of
/// an eighth.
pub(crate) fn capacity(len: usize) -> usize {
    if len < PAD_FROM {
        return len;
    }
    let slack = (len / 8).max(PAD_FROM);
    (len + slack).next_multiple_of(4096)
}

/// Whether a row holding `stored` bytes takes a document of `len` bytes in place: it must be
/// long enough, and not more than twice the capacity a new row would get (a document that
/// shrank a lot gives its space back at the next save).
fn fits(stored: usize, len: usize) -> bool {
    len >= PAD_FROM && stored >= len && stored <= 2 * capacity(len)
}

/// Writes `doc` as the document of session `key` (`id` for messages): `new` when the session
/// is being created (it has no document row yet).
///
/// A long row is tried in place first. A streamed document's length is known only once it is
/// written (counting it first would serialize the whole conversation once more per save); one
/// that turns out longer than its row, or no longer right for it, is then stored again below,
/// in the same transaction, which replaces whatever the attempt wrote.
pub(crate) fn write(
    tx: &Transaction<'_>,
    id: &RecordId,
    key: i64,
    doc: &Document<'_>,
    new: bool,
) -> TxResult<()> {
    let stored = if new { None } else { stored_len(tx, key)? };
    let mut len = match doc {
        Document::Text(t) => Some(t.len()),
        Document::Streamed { .. } => None,
    };
    if let Some(row) = stored.filter(|&r| r >= PAD_FROM && len.is_none_or(|l| fits(r, l))) {
        match fill_row(tx, id, key, row, Fill::InPlace, doc)? {
            Filled::Done(_) => return Ok(()),
            Filled::Unfit(n) => len = Some(n),
            Filled::TooLong => {}
        }
    }
    let len = match len {
        Some(len) => len,
        None => doc.counted_len(),
    };
    if len < PAD_FROM {
        return match doc {
            Document::Text(text) => store_text(tx, key, text.as_bytes()),
            Document::Streamed { .. } => store_text(tx, key, &serialized(id, doc, len)?),
        };
    }
    let cap = capacity(len);
    // An UPDATE, then an INSERT if there was no row: not an upsert, whose `excluded.document`
    // makes SQLite build the zeros in memory (measured: a 1M-chunk turn's peak RSS 24 → 44 MB).
    let cap_i = cap as i64;
    let updated = tx
        .prepare_cached(
            "UPDATE session_documents SET document = zeroblob(?2) WHERE session_key = ?1",
        )?
        .execute(params![key, cap_i])?;
    if updated == 0 {
        tx.prepare_cached(
            "INSERT INTO session_documents (session_key, document) VALUES (?1, zeroblob(?2))",
        )?
        .execute(params![key, cap_i])?;
    }
    match fill_row(tx, id, key, cap, Fill::New, doc)? {
        Filled::Done(n) if n == len => Ok(()),
        Filled::Done(n) | Filled::Unfit(n) => Err(failed(
            id,
            format!("{n} bytes serialized where {len} were counted"),
        )),
        Filled::TooLong => Err(failed(
            id,
            format!("more bytes serialized than the {len} counted"),
        )),
    }
}

/// How [`fill_row`] writes.
#[derive(Clone, Copy, PartialEq)]
enum Fill {
    /// Over a document stored before: windows are compared and written when they differ, and
    /// a document the row is not right for ([`fits`]) is left unpadded, to be stored again.
    InPlace,
    /// Over a row just stored as zeros: every window is written.
    New,
}

/// What [`fill_row`] did.
enum Filled {
    /// The document, of this length, is in the row, followed by spaces to its end.
    Done(usize),
    /// The document, of this length, was written but the row is not right for it.
    Unfit(usize),
    /// The document is longer than the row (only part of it was written).
    TooLong,
}

/// Serializes `doc` into the row of `key`, `row` bytes long, from its start, then spaces to
/// its end.
fn fill_row(
    tx: &Transaction<'_>,
    id: &RecordId,
    key: i64,
    row: usize,
    fill: Fill,
    doc: &Document<'_>,
) -> TxResult<Filled> {
    let blob = tx.blob_open(MAIN_DB, c"session_documents", c"document", key, false)?;
    let mut out = InPlace {
        blob,
        compare: fill == Fill::InPlace,
        window: Vec::with_capacity(WINDOW),
        stored: Vec::new(),
        at: 0,
        too_long: false,
        error: None,
    };
    let written = doc.write_to(&mut out);
    let len = out.at + out.window.len();
    let filled = if out.too_long {
        return Ok(Filled::TooLong);
    } else if written.is_ok() && fill == Fill::InPlace && !fits(row, len) {
        Filled::Unfit(len)
    } else {
        let padded = written.and_then(|()| {
            let spaces = [PAD; 4096];
            let mut rest = row - len;
            while rest > 0 {
                let n = rest.min(spaces.len());
                out.write_all(&spaces[..n])?;
                rest -= n;
            }
            out.flush()
        });
        if let Some(e) = out.error.take() {
            // SQLite's own error (a full disk, an I/O error) keeps its meaning for the caller.
            return Err(TxError::Sql(e));
        }
        padded.map_err(|e| failed(id, e.to_string()))?;
        Filled::Done(len)
    };
    Ok(filled)
}

fn failed(id: &RecordId, what: String) -> TxError {
    TxError::Store(StoreError::Backend {
        backend: crate::BACKEND,
        message: format!("session {id}: writing its document into the row: {what}"),
    })
}

/// Stores a short document as text (no padding), replacing the session's document row or
/// making it (a row deleted by hand is made again).
fn store_text(tx: &Transaction<'_>, key: i64, text: &[u8]) -> TxResult<()> {
    let text = std::str::from_utf8(text).map_err(|e| {
        TxError::Store(StoreError::Backend {
            backend: crate::BACKEND,
            message: format!("a serialized document is not UTF-8: {e}"),
        })
    })?;
    tx.prepare_cached(
        "INSERT INTO session_documents (session_key, document) VALUES (?1, ?2) \
         ON CONFLICT (session_key) DO UPDATE SET document = excluded.document",
    )?
    .execute(params![key, text])?;
    Ok(())
}

/// A short streamed document, serialized into memory (`len` bytes, as counted).
fn serialized(id: &RecordId, doc: &Document<'_>, len: usize) -> TxResult<Vec<u8>> {
    let mut bytes = Vec::with_capacity(len);
    doc.write_to(&mut bytes).map_err(|e| {
        TxError::Store(StoreError::Backend {
            backend: crate::BACKEND,
            message: format!("session {id}: serializing its document: {e}"),
        })
    })?;
    if bytes.len() != len {
        return Err(failed(
            id,
            format!("{} bytes serialized where {len} were counted", bytes.len()),
        ));
    }
    Ok(bytes)
}

/// The length in bytes of the stored document of session `key`, if it has a row: read from
/// the row's header, without reading the document.
fn stored_len(tx: &Transaction<'_>, key: i64) -> TxResult<Option<usize>> {
    // `length()` of a text counts characters; of a blob, it is the header's byte count. A
    // blob handle gives the byte count of either.
    let exists = tx
        .prepare_cached("SELECT 1 FROM session_documents WHERE session_key = ?1")?
        .exists([key])?;
    if !exists {
        return Ok(None);
    }
    let blob = tx.blob_open(MAIN_DB, c"session_documents", c"document", key, true)?;
    Ok(Some(blob.len()))
}

/// The in-place writer: 64 KiB windows, each compared with the row (when `compare`) and
/// written only when it differs.
struct InPlace<'b> {
    blob: Blob<'b>,
    /// False when the row was just made of zeros: every window is written.
    compare: bool,
    /// Bytes not yet compared or written, from offset `at`.
    window: Vec<u8>,
    /// What the row holds under `window`.
    stored: Vec<u8>,
    at: usize,
    /// Set when the document went past the end of the row.
    too_long: bool,
    /// The SQLite error behind an `io::Error` this writer returned.
    error: Option<rusqlite::Error>,
}

impl InPlace<'_> {
    fn write_window(&mut self) -> io::Result<()> {
        if self.window.is_empty() {
            return Ok(());
        }
        let end = self.at + self.window.len();
        if end > self.blob.len() {
            self.too_long = true;
            return Err(io::Error::other(format!(
                "the document is longer than its row of {} bytes",
                self.blob.len()
            )));
        }
        let differs = if self.compare {
            self.stored.resize(self.window.len(), 0);
            let read = self.blob.read_at_exact(&mut self.stored, self.at);
            self.keep(read)?;
            self.stored != self.window
        } else {
            true
        };
        if differs {
            let written = self.blob.write_at(&self.window, self.at);
            self.keep(written)?;
        }
        self.at = end;
        self.window.clear();
        Ok(())
    }

    /// Keeps SQLite's error for the caller and gives the serializer an `io::Error`.
    fn keep(&mut self, result: rusqlite::Result<()>) -> io::Result<()> {
        result.map_err(|e| {
            let text = e.to_string();
            self.error = Some(e);
            io::Error::other(text)
        })
    }
}

impl Write for InPlace<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // After a failure nothing more reaches the row (a `BufWriter` flushes again on drop).
        if self.too_long || self.error.is_some() {
            return Err(io::Error::other("the document's write already failed"));
        }
        let n = buf.len().min(WINDOW - self.window.len());
        self.window.extend_from_slice(&buf[..n]);
        if self.window.len() == WINDOW {
            self.write_window()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.write_window()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_documents_are_stored_exactly_and_long_ones_with_room() {
        assert_eq!(capacity(10), 10);
        assert_eq!(capacity(PAD_FROM - 1), PAD_FROM - 1);
        assert_eq!(capacity(PAD_FROM), 2 * PAD_FROM);
        let eight_mb = 8_000_000;
        let cap = capacity(eight_mb);
        assert!(
            cap >= eight_mb + eight_mb / 8 && cap.is_multiple_of(4096),
            "{cap}"
        );
        assert!(cap < eight_mb + eight_mb / 8 + 4096, "{cap}");
    }

    #[test]
    fn a_row_fits_a_document_it_can_hold_without_much_waste() {
        let cap = capacity(1_000_000);
        assert!(fits(cap, 1_000_000));
        assert!(fits(cap, cap), "a document filling its row");
        assert!(!fits(cap, cap + 1), "a document longer than its row");
        assert!(!fits(cap, 1_000), "a short document is stored as text");
        assert!(!fits(8 * cap, 1_000_000), "a row four times too long");
    }
}
