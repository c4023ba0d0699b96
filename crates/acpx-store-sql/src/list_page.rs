//! The page of `Store::list` built from rows read in list order, whatever reads them: rows
//! that do not make a summary are skipped with their reason, and reported once.

use acpx_model::{ListPage, ListQuery, RecordId, SessionSummary, SkippedEntry};

/// Whether to read another row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// The page has room, or the rows skipped after it still count.
    More,
    /// The page is full: its next cursor is set.
    Full,
}

/// A page of `list` in the making, fed one row at a time.
pub struct ListPageBuilder<'q> {
    query: &'q ListQuery,
    page: ListPage,
    /// Bad rows between the last session of this page and the first of the next one are
    /// reported by the next page (which reads them again), not twice.
    pending: Vec<SkippedEntry>,
}

impl<'q> ListPageBuilder<'q> {
    /// An empty page of `query`.
    pub fn new(query: &'q ListQuery) -> Self {
        ListPageBuilder {
            query,
            page: ListPage::default(),
            pending: Vec::new(),
        }
    }

    /// Adds the next row: its `summary`, or the reason it is skipped; `key` is its
    /// `acpx_record_id` as stored and `location` says where it is (for a skipped row).
    pub fn push(
        &mut self,
        key: &str,
        summary: Result<SessionSummary, String>,
        location: impl FnOnce(&str) -> String,
    ) -> Next {
        match summary {
            Ok(s) => {
                if self
                    .query
                    .limit
                    .is_some_and(|l| self.page.sessions.len() >= l)
                {
                    self.page.next_cursor = self
                        .page
                        .sessions
                        .last()
                        .map(|l| self.query.cursor_after(l));
                    self.pending.clear();
                    return Next::Full;
                }
                self.page.skipped.append(&mut self.pending);
                self.page.sessions.push(s);
            }
            Err(reason) => self.pending.push(SkippedEntry {
                acpx_record_id: RecordId::parse(key).ok(),
                location: location(key),
                reason,
            }),
        }
        Next::More
    }

    /// The page.
    pub fn finish(mut self) -> ListPage {
        self.page.skipped.append(&mut self.pending);
        for s in &self.page.skipped {
            // Debug, not warn: the skipped entry goes back to the caller, which reports it (the
            // CLI's `warning:` line, fsck, the lookup's damaged-session error); a warning here
            // printed the same problem twice, and at every command that lists.
            tracing::debug!(location = %s.location, reason = %s.reason, "skipping malformed session row");
        }
        self.page
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use acpx_model::Timestamp;

    fn summary(id: &str, ms: i64) -> SessionSummary {
        let t = Timestamp::from_millis(ms).unwrap();
        SessionSummary {
            acpx_record_id: RecordId::parse(id).unwrap(),
            acp_session_id: id.into(),
            agent_session_id: None,
            agent_command: "a".into(),
            cwd: "/".into(),
            name: None,
            title: None,
            created_at: t,
            last_used_at: t,
            closed: false,
            closed_at: None,
            last_prompt_at: None,
            message_count: 0,
            revision: 1,
            usage: Default::default(),
        }
    }

    #[test]
    fn bad_rows_after_a_full_page_are_left_to_the_next_page() {
        let query = ListQuery {
            limit: Some(1),
            ..ListQuery::default()
        };
        let mut b = ListPageBuilder::new(&query);
        let at = |k: &str| format!("row {k}");
        assert_eq!(b.push("bad1", Err("x".into()), at), Next::More);
        assert_eq!(b.push("a", Ok(summary("a", 2)), at), Next::More);
        assert_eq!(b.push("bad2", Err("y".into()), at), Next::More);
        assert_eq!(b.push("b", Ok(summary("b", 1)), at), Next::Full);
        let page = b.finish();
        assert_eq!(page.sessions.len(), 1);
        assert_eq!(page.skipped.len(), 1);
        assert_eq!(page.skipped[0].location, "row bad1");
        assert!(page.next_cursor.is_some());
    }

    #[test]
    fn bad_rows_at_the_end_are_reported() {
        let query = ListQuery::default();
        let mut b = ListPageBuilder::new(&query);
        b.push("a", Ok(summary("a", 2)), |k| k.to_owned());
        b.push("bad", Err("why".into()), |k| k.to_owned());
        let page = b.finish();
        assert_eq!(page.skipped[0].reason, "why");
        assert_eq!(page.next_cursor, None);
    }
}
