//! Damaged lines met by a lenient read: listed in the page up to a bound, counted past it.

use acpx_model::{DamagedLine, EventPage, ReadMode, StoreError, StoreResult};

use super::Scan;

/// The damaged lines one page lists at most; the rest are counted in one last entry, so a log
/// full of damage costs a page no more memory (nor warnings) than this.
const DAMAGED_LISTED_MAX: usize = 100;

/// Damaged lines a page does not list ([`DAMAGED_LISTED_MAX`]): how many, and the last one.
pub(super) struct LeftOut {
    count: u64,
    location: String,
    line: u64,
}

impl Scan<'_> {
    /// A damaged line: an error in strict mode, a report in lenient mode (listed while the page
    /// lists fewer than [`DAMAGED_LISTED_MAX`], counted after that).
    pub(super) fn damaged(&mut self, location: &str, line: u64, reason: String) -> StoreResult<()> {
        match self.query.mode {
            ReadMode::Strict => Err(StoreError::corrupt(location, Some(line), reason)),
            ReadMode::Lenient if self.page.damaged.len() < DAMAGED_LISTED_MAX => {
                tracing::warn!(file = location, line, %reason, "skipping a damaged event-log line");
                self.page.damaged.push(DamagedLine {
                    location: location.to_owned(),
                    line,
                    reason,
                    lines: 1,
                });
                Ok(())
            }
            ReadMode::Lenient => {
                let left = self.left_out.get_or_insert_with(|| LeftOut {
                    count: 0,
                    location: String::new(),
                    line,
                });
                left.count += 1;
                if left.location != location {
                    location.clone_into(&mut left.location);
                }
                left.line = line;
                Ok(())
            }
        }
    }

    /// The page, with one entry counting the damaged lines it does not list.
    pub(super) fn into_page(mut self) -> EventPage {
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
