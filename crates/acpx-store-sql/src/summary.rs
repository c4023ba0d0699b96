//! A session's summary read back from its row's columns, and the checks of a stored document
//! against its row: the rules both database stores apply to what they read.

use acpx_model::{
    RecordId, SessionRecord, SessionSummary, SessionUsage, StoreError, StoreResult, Timestamp,
    ValidationError,
};

/// A row selected with a store's summary columns, in this order: `acpx_record_id` (0),
/// `acp_session_id`, `agent_session_id`, `agent_command`, `cwd`, `name`, `title`,
/// `created_at`, `last_used_at`, `closed` (9), `closed_at`, `last_prompt_at`,
/// `message_count`, `revision`, `last_used_ms` (14), whether the row is checked (15), `usage`
/// (16). Each backend reads its driver's row; errors are the driver's, without the column's
/// name, which [`summary_from_row`] adds.
pub trait SummaryRow {
    /// How the database writes a false `closed` (`0`, `false`), in the error of a row closed
    /// at a time but not closed.
    const FALSE: &'static str;
    /// A text column that must not be NULL.
    fn text(&self, i: usize) -> Result<String, String>;
    /// A text column that may be NULL.
    fn opt_text(&self, i: usize) -> Result<Option<String>, String>;
    /// An integer column that must not be NULL.
    fn int(&self, i: usize) -> Result<i64, String>;
    /// The `closed` column as a boolean.
    fn closed(&self, i: usize) -> Result<bool, String>;
}

/// Reads a summary from a row (see [`SummaryRow`]). Errors are the reason the row is
/// skipped, naming the column.
pub fn summary_from_row<R: SummaryRow>(row: &R) -> Result<SessionSummary, String> {
    let text = |i: usize, name: &str| row.text(i).map_err(named(name));
    let opt_text = |i: usize, name: &str| row.opt_text(i).map_err(named(name));
    let int = |i: usize, name: &str| row.int(i).map_err(named(name));
    let ts = |s: String, name: &str| -> Result<Timestamp, String> {
        Timestamp::parse(&s).map_err(|e| format!("column `{name}`: {e}"))
    };
    let non_negative = |v: i64, name: &str| -> Result<u64, String> {
        u64::try_from(v).map_err(|_| format!("column `{name}`: {v} is negative"))
    };
    let id = RecordId::parse(&text(0, "acpx_record_id")?)
        .map_err(|e| format!("column `acpx_record_id`: {e}"))?;
    let acp_session_id = text(1, "acp_session_id")?;
    if acp_session_id.is_empty() {
        return Err("column `acp_session_id`: must not be empty".into());
    }
    let closed = row.closed(9).map_err(named("closed"))?;
    let closed_at = opt_text(10, "closed_at")?
        .map(|s| ts(s, "closed_at"))
        .transpose()?;
    if closed_at.is_some() && !closed {
        return Err(format!(
            "column `closed_at` is set but `closed` is {}",
            R::FALSE
        ));
    }
    let last_used_at = ts(text(8, "last_used_at")?, "last_used_at")?;
    if last_used_at.millis() != int(14, "last_used_ms")? {
        return Err("column `last_used_ms` does not match `last_used_at`".into());
    }
    Ok(SessionSummary {
        acpx_record_id: id,
        acp_session_id,
        agent_session_id: opt_text(2, "agent_session_id")?.filter(|s| !s.is_empty()),
        agent_command: text(3, "agent_command")?,
        cwd: text(4, "cwd")?,
        name: opt_text(5, "name")?,
        title: opt_text(6, "title")?.filter(|s| !s.is_empty()),
        created_at: ts(text(7, "created_at")?, "created_at")?,
        last_used_at,
        closed,
        closed_at,
        last_prompt_at: opt_text(11, "last_prompt_at")?
            .map(|s| ts(s, "last_prompt_at"))
            .transpose()?,
        message_count: non_negative(int(12, "message_count")?, "message_count")?,
        revision: non_negative(int(13, "revision")?, "revision")?,
        usage: match opt_text(16, "usage")? {
            Some(t) => {
                SessionUsage::from_json_text(&t).map_err(|e| format!("column `usage`: {e}"))?
            }
            None => Default::default(),
        },
    })
}

/// Prefixes a driver's error with the column's name.
fn named(name: &str) -> impl Fn(String) -> String + '_ {
    move |e| format!("column `{name}`: {e}")
}

/// The first field in which two summaries differ, if any.
pub fn summary_difference(a: &SessionSummary, b: &SessionSummary) -> Option<&'static str> {
    let checks: [(&'static str, bool); 14] = [
        ("acpxRecordId", a.acpx_record_id == b.acpx_record_id),
        ("acpSessionId", a.acp_session_id == b.acp_session_id),
        ("agentSessionId", a.agent_session_id == b.agent_session_id),
        ("agentCommand", a.agent_command == b.agent_command),
        ("cwd", a.cwd == b.cwd),
        ("name", a.name == b.name),
        ("thread.title", a.title == b.title),
        ("createdAt", a.created_at == b.created_at),
        ("lastUsedAt", a.last_used_at == b.last_used_at),
        ("closed", a.closed == b.closed),
        ("closedAt", a.closed_at == b.closed_at),
        ("lastPromptAt", a.last_prompt_at == b.last_prompt_at),
        ("thread.messages", a.message_count == b.message_count),
        ("revision", a.revision == b.revision),
    ];
    checks.iter().find(|(_, same)| !same).map(|(name, _)| *name)
}

/// A parsed document, if it parsed and is the row's: its id must be the row's key, and its
/// revision becomes the row's (the column is what the revision check compares against, so
/// it is the truth).
pub fn checked_document(
    parsed: Result<SessionRecord, ValidationError>,
    id: &str,
    revision: i64,
    location: &str,
) -> StoreResult<SessionRecord> {
    let mut record = parsed.map_err(|e| {
        StoreError::corrupt(
            location,
            None,
            format!("document field `{}`: {}", e.field, e.message),
        )
    })?;
    if record.acpx_record_id.as_str() != id {
        return Err(StoreError::corrupt(
            location,
            None,
            format!(
                "document field `acpxRecordId` is {:?} but the row's key is {id:?}",
                record.acpx_record_id.as_str()
            ),
        ));
    }
    record.revision = u64::try_from(revision).map_err(|_| {
        StoreError::corrupt(location, None, format!("column `revision` is {revision}"))
    })?;
    Ok(record)
}

/// For a row whose document was changed outside acpx (not checked): the summary of its
/// `document`, read back, if it says what the row's `columns` say; else the reason the row is
/// skipped.
pub fn summary_matching_columns(
    document: StoreResult<SessionRecord>,
    columns: &SessionSummary,
) -> Result<SessionSummary, String> {
    let record = document.map_err(|e| match e {
        StoreError::Corrupt { reason, .. } => reason,
        other => other.to_string(),
    })?;
    let from_document = record.summary();
    match summary_difference(&from_document, columns) {
        None => Ok(from_document),
        Some(field) => Err(format!(
            "the document was edited outside acpx and its field `{field}` no longer \
             matches the row's columns"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A row of plain values.
    struct Values(Vec<Option<String>>);

    impl SummaryRow for Values {
        const FALSE: &'static str = "0";
        fn text(&self, i: usize) -> Result<String, String> {
            self.opt_text(i)?.ok_or_else(|| "NULL".to_owned())
        }
        fn opt_text(&self, i: usize) -> Result<Option<String>, String> {
            Ok(self.0[i].clone())
        }
        fn int(&self, i: usize) -> Result<i64, String> {
            self.text(i)?.parse().map_err(|e| format!("{e}"))
        }
        fn closed(&self, i: usize) -> Result<bool, String> {
            Ok(self.int(i)? == 1)
        }
    }

    fn row() -> Values {
        let t = "2026-02-27T12:00:00.000Z";
        let ms = Timestamp::parse(t).unwrap().millis().to_string();
        let v = |s: &str| Some(s.to_owned());
        Values(vec![
            v("rec"),
            v("acp"),
            None,
            v("agent"),
            v("/w"),
            None,
            v(""),
            v(t),
            v(t),
            v("0"),
            None,
            None,
            v("2"),
            v("3"),
            Some(ms),
            v("1"),
            None,
        ])
    }

    #[test]
    fn a_row_reads_as_its_summary_and_errors_name_the_column() {
        let s = summary_from_row(&row()).unwrap();
        assert_eq!(s.acpx_record_id.as_str(), "rec");
        assert_eq!((s.message_count, s.revision, s.title), (2, 3, None));
        let fails = |i: usize, value: Option<&str>| {
            let mut r = row();
            r.0[i] = value.map(str::to_owned);
            summary_from_row(&r).unwrap_err()
        };
        assert_eq!(
            fails(10, Some("2026-02-27T12:00:00.000Z")),
            "column `closed_at` is set but `closed` is 0"
        );
        assert_eq!(fails(13, Some("-1")), "column `revision`: -1 is negative");
        assert_eq!(
            fails(14, Some("5")),
            "column `last_used_ms` does not match `last_used_at`"
        );
        assert_eq!(fails(3, None), "column `agent_command`: NULL");
    }

    #[test]
    fn summaries_name_their_first_difference() {
        let a = summary_from_row(&row()).unwrap();
        let mut b = a.clone();
        assert_eq!(summary_difference(&a, &b), None);
        b.name = Some("n".into());
        b.revision = 9;
        assert_eq!(summary_difference(&a, &b), Some("name"));
    }
}
