//! Damaged lines met by a lenient read: listed in the page up to a bound, counted past it,
//! and reported by exactly one page.
//!
//! A read from `from_seq` may start before it (the seek lands up to 64 KiB early, and a page
//! that continues another starts where that one's last event was read). So damage is held
//! as *pending* until the scan knows where it lies: a sound event below `from_seq` after it
//! drops it (it lies before the query's range; the page before reported it), an event the
//! page stops at drops it too (it lies after the page's range; the next page reports it), and
//! any other event at or past `from_seq`, or the end of the log, commits it to the page. So
//! callers that add up the lines of several pages ([`DamagedLine::lines`]) count each once,
//! even those a page only counts.

use acpx_model::{DamagedLine, EventPage, ReadMode, StoreError, StoreResult};

use super::Scan;

/// The damaged lines one page lists at most; the rest are counted in one last entry, so a log
/// full of damage costs a page no more memory (nor warnings) than this.
const DAMAGED_LISTED_MAX: usize = 100;

/// Damaged lines not listed ([`DAMAGED_LISTED_MAX`]): how many, and the last one.
pub(super) struct LeftOut {
    count: u64,
    location: String,
    line: u64,
}

impl LeftOut {
    fn add(slot: &mut Option<LeftOut>, count: u64, location: &str, line: u64) {
        let left = slot.get_or_insert_with(|| LeftOut {
            count: 0,
            location: String::new(),
            line,
        });
        left.count += count;
        if left.location != location {
            location.clone_into(&mut left.location);
        }
        left.line = line;
    }
}

/// Damage met since the last event that placed it (see the module docs).
#[derive(Default)]
pub(super) struct Pending {
    listed: Vec<DamagedLine>,
    left_out: Option<LeftOut>,
}

impl Scan<'_> {
    /// A damaged line: an error in strict mode; in lenient mode pending until an event places
    /// it (listed while the page and the pending ones list fewer than [`DAMAGED_LISTED_MAX`],
    /// counted after that).
    pub(super) fn damaged(&mut self, location: &str, line: u64, reason: String) -> StoreResult<()> {
        if self.query.mode == ReadMode::Strict {
            return Err(StoreError::corrupt(location, Some(line), reason));
        }
        if self.page.damaged.len() + self.pending.listed.len() < DAMAGED_LISTED_MAX {
            self.pending.listed.push(DamagedLine {
                location: location.to_owned(),
                line,
                reason,
                lines: 1,
            });
        } else {
            LeftOut::add(&mut self.pending.left_out, 1, location, line);
        }
        Ok(())
    }

    /// The pending damage lies outside this page's range: another page reports it.
    pub(super) fn drop_pending_damage(&mut self) {
        self.pending = Pending::default();
    }

    /// The pending damage lies in this page's range: reported by it.
    pub(super) fn commit_pending_damage(&mut self) {
        let pending = std::mem::take(&mut self.pending);
        for d in pending.listed {
            tracing::warn!(file = %d.location, line = d.line, reason = %d.reason, "skipping a damaged event-log line");
            self.page.damaged.push(d);
        }
        if let Some(l) = pending.left_out {
            LeftOut::add(&mut self.left_out, l.count, &l.location, l.line);
        }
    }

    /// The page, with the damage still pending (the log ended after it) and one entry counting
    /// the damaged lines it does not list.
    pub(super) fn into_page(mut self) -> EventPage {
        if self.page.next_seq.is_none() {
            self.commit_pending_damage();
        }
        if let Some(left) = self.left_out.take() {
            let reason = format!(
                "{} more damaged lines, through this one, are skipped and not listed (a page \
                 lists {DAMAGED_LISTED_MAX})",
                left.count
            );
            tracing::warn!(file = %left.location, line = left.line, %reason, "skipping damaged event-log lines");
            self.page.damaged.push(DamagedLine {
                location: left.location,
                line: left.line,
                reason,
                lines: left.count,
            });
        }
        self.page
    }
}
