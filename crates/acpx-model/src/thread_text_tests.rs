//! Tests of `ThreadText`: a spilled text reads, serializes and compares like the same text in
//! memory; copies, byte ranges and unreadable spills.

use super::*;
use crate::testing::MemorySpill;

fn spilled(text: &str) -> (ThreadText, Arc<MemorySpill>) {
    let spill = Arc::new(MemorySpill::default());
    let mut t = ThreadText::from(text);
    t.spill_into(spill.clone()).unwrap();
    assert!(t.is_spilled());
    (t, spill)
}

#[test]
fn a_spilled_text_reads_serializes_and_compares_like_the_same_text_in_memory() {
    // Multi-byte characters across the 64 KiB piece boundaries.
    let text: String = "héllo wörld ✓ 🦀 \"quoted\"\n".repeat(9000);
    let (mut t, _) = spilled(&text[..100]);
    t.push_str(&text[100..]);
    assert!(t.is_spilled());
    assert_eq!(t.len(), text.len());
    assert!(t.chunks().count() > 2);
    assert_eq!(t.to_text().unwrap(), text);
    assert_eq!(t, ThreadText::from(text.clone()));
    assert_eq!(t, text.as_str());
    assert_eq!(
        serde_json::to_string(&t).unwrap(),
        serde_json::to_string(&text).unwrap()
    );
    let back: ThreadText = serde_json::from_str(&serde_json::to_string(&t).unwrap()).unwrap();
    assert!(!back.is_spilled());
    assert_eq!(back, t);
}

#[test]
fn copies_keep_what_they_held_and_a_stale_copy_comes_back_into_memory() {
    let (mut a, spill) = spilled("one");
    let mut b = a.clone();
    a.push_str(" two");
    assert_eq!(b, "one");
    // `b` is behind the store's end: it reads itself back and appends in memory.
    b.push_str(" three");
    assert!(!b.is_spilled());
    assert_eq!(b, "one three");
    assert_eq!(a, "one two");
    assert_eq!(spill.len(), 7);
}

#[test]
fn an_unreadable_spill_fails_serialization_instead_of_cutting_the_text() {
    let (t, spill) = spilled("some reply");
    spill.fail_reads(true);
    let err = serde_json::to_string(&t).unwrap_err().to_string();
    assert!(err.contains("spill file: disk gone"), "{err}");
    assert!(serde_json::to_writer(std::io::sink(), &t).is_err());
    assert!(t.to_string().contains("could not be read back"));
    assert!(t.to_text().is_err());
    assert!(t.to_text_lossy().contains("could not be read back"));
}

#[test]
fn an_inline_text_is_unchanged_in_json_and_debug() {
    let t = ThreadText::from("hi");
    assert_eq!(serde_json::to_string(&t).unwrap(), "\"hi\"");
    assert_eq!(format!("{t:?}"), "\"hi\"");
    assert_eq!(t.chunks().map(|c| c.unwrap()).collect::<Vec<_>>(), ["hi"]);
}

#[test]
fn byte_ranges_read_the_same_from_memory_and_from_a_spill() {
    let text = "aé✓🦀".repeat(100);
    let (t, _) = spilled(&text);
    let inline = ThreadText::from(text.as_str());
    for (start, end) in [(0, 0), (0, 5), (3, 17), (100, 5000), (1000, 1000)] {
        assert_eq!(
            t.read_bytes(start, end).unwrap(),
            inline.read_bytes(start, end).unwrap(),
            "{start}..{end}"
        );
    }
    assert_eq!(t.read_bytes(0, usize::MAX).unwrap().len(), text.len());
}

#[test]
fn texts_share_a_store_each_reading_its_own_range() {
    let spill = Arc::new(MemorySpill::default());
    let mut first = ThreadText::from("first reply");
    first.spill_into(spill.clone()).unwrap();
    let mut second = ThreadText::from("second ");
    second.spill_into(spill.clone()).unwrap();
    second.push_str("reply");
    assert_eq!(first, "first reply");
    assert_eq!(second, "second reply");
    assert_eq!(second.read_bytes(0, 6).unwrap().as_ref(), b"second");
    // `first` no longer ends the store: it comes back into memory to grow.
    first.push_str(", longer");
    assert!(!first.is_spilled());
    assert_eq!(first, "first reply, longer");
    assert_eq!(second, "second reply");
}

#[test]
fn a_stale_copy_that_cannot_be_read_back_refuses_to_serialize() {
    let (mut a, spill) = spilled("one");
    let mut b = a.clone();
    a.push_str(" two");
    spill.fail_reads(true);
    b.push_str(" three");
    assert!(!b.is_spilled());
    assert_eq!(b.len(), "one three".len());
    assert!(serde_json::to_string(&b).is_err());
    assert!(b.to_text().is_err());
    assert!(b.to_string().contains("could not be read back"));
}

/// A spill that counts the bytes read from it.
#[derive(Debug, Default)]
struct CountingSpill {
    inner: MemorySpill,
    read: std::sync::atomic::AtomicUsize,
}

impl TextSpill for CountingSpill {
    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn append_at(&self, expected: u64, text: &str) -> io::Result<bool> {
        self.inner.append_at(expected, text)
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read_at(offset, buf)?;
        self.read.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        Ok(n)
    }
}

#[test]
fn the_head_of_a_spilled_text_reads_only_its_first_piece() {
    let text: String = "ünïcödé ✓ ".repeat(40_000);
    let spill = Arc::new(CountingSpill::default());
    let mut t = ThreadText::from(text.as_str());
    t.spill_into(spill.clone()).unwrap();
    let head = t.head_lossy(100);
    assert_eq!(head, text.chars().take(101).collect::<String>());
    let read = spill.read.load(std::sync::atomic::Ordering::Relaxed);
    assert!(read < text.len() / 4, "read {read} of {} bytes", text.len());
    // A short text comes whole; an inline one is borrowed.
    let (short, _) = spilled("short");
    assert_eq!(short.head_lossy(100), "short");
    assert!(matches!(
        ThreadText::from("x").head_lossy(0),
        Cow::Borrowed("x")
    ));
    // A failed read ends the head with the note.
    let (t, spill) = spilled("some reasoning");
    spill.fail_reads(true);
    assert!(t.head_lossy(100).contains("could not be read back"));
}
