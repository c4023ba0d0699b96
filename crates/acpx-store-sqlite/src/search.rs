//! Full-text search over the `messages` rows (FTS5 trigram index, `instr` for short terms).
//!
//! A message is stored in parts (`rows::PART_BYTES`), each repeating the last
//! `rows::OVERLAP_BYTES` of the text before it. A term of up to [`MAX_PART_TERM`] bytes that
//! occurs in a message therefore occurs whole in one of its parts, with the snippet's context
//! around it; a message matches when every term matches one of its parts (not necessarily
//! the same one). Longer terms, which no part may hold whole, are checked on the message's
//! text put back together from its parts.

use acpx_model::search::{snippet_in_window, SearchHit, SearchQuery};
use acpx_model::{normalize_cwd, RecordId, StoreResult};
use rusqlite::types::Value as SqlValue;
use rusqlite::{params, Connection, OptionalExtension};

use crate::rows::OVERLAP_BYTES;
use crate::Inner;

/// The longest term the overlap of the parts guarantees to find in one part, with the 60
/// bytes before it that a snippet shows (and 4 bytes of slack for character boundaries).
pub(crate) const MAX_PART_TERM: usize = OVERLAP_BYTES - 64;

/// How much of the next part a snippet window takes, past the part the match is in.
const WINDOW_AFTER: usize = 512;

impl Inner {
    pub(crate) fn search(&self, query: &SearchQuery) -> StoreResult<Vec<acpx_model::SearchHit>> {
        let cwd = query.cwd.as_deref().map(normalize_cwd).transpose()?;
        let terms = query.terms();
        if terms.is_empty() {
            return Ok(Vec::new());
        }
        let ctx = "search";
        let long = terms.iter().any(|t| t.len() > MAX_PART_TERM);
        let (sql, args) = candidates_sql(&terms, cwd, long, query.effective_limit());
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(&sql).map_err(self.sql(ctx))?;
        let mut rows = stmt
            .query(rusqlite::params_from_iter(args))
            .map_err(self.sql(ctx))?;
        let mut hits = Vec::new();
        while let Some(row) = rows.next().map_err(self.sql(ctx))? {
            if hits.len() >= query.effective_limit() {
                break;
            }
            let key: String = row.get(0).map_err(self.sql(ctx))?;
            let Ok(id) = RecordId::parse(&key) else {
                tracing::warn!(location = %self.row_location(&key), "search skips a row with an invalid record id");
                continue;
            };
            let index: i64 = row.get(2).map_err(self.sql(ctx))?;
            let found = if long {
                whole_message_hit(&conn, &key, index, &terms)
            } else {
                part_hit(&conn, &key, index, &terms[0])
            }
            .map_err(self.sql(ctx))?;
            // The message was deleted since the query (another connection's save).
            let Some(found) = found else { continue };
            hits.push(SearchHit {
                acpx_record_id: id,
                title: row
                    .get::<_, Option<String>>(1)
                    .map_err(self.sql(ctx))?
                    .filter(|t| !t.is_empty()),
                message_index: usize::try_from(index).unwrap_or(0),
                role: found.role,
                message_id: found.message_id,
                snippet: found.snippet,
            });
        }
        Ok(hits)
    }
}

/// The query for the messages that match, in hit order: one `INTERSECT`ed select of
/// `(record, message)` per term (the FTS index for a term of 3 characters or more,
/// `instr` on the lowercased part otherwise), with the session's title. With a term too long
/// for the parts, only the other terms select (the caller checks the long ones), and the
/// limit is left to the caller.
fn candidates_sql(
    terms: &[String],
    cwd: Option<String>,
    long: bool,
    limit: usize,
) -> (String, Vec<SqlValue>) {
    let mut args: Vec<SqlValue> = Vec::new();
    let mut selects: Vec<String> = Vec::new();
    // Trigram matching needs 3 characters, and the FTS5 query parser stops at a NUL; other
    // terms are matched with instr() on the lowercased text, which is the shared substring
    // rule exactly.
    for t in terms.iter().filter(|t| t.len() <= MAX_PART_TERM) {
        if t.chars().count() >= 3 && !t.contains('\0') {
            args.push(SqlValue::Text(fts_query(&[t])));
            selects.push(format!(
                "SELECT DISTINCT m.acpx_record_id, m.message_index FROM messages_fts \
                 JOIN messages m ON m.rowid = messages_fts.rowid \
                 WHERE messages_fts MATCH ?{}",
                args.len()
            ));
        } else {
            args.push(SqlValue::Text(t.clone()));
            selects.push(format!(
                "SELECT DISTINCT acpx_record_id, message_index FROM messages \
                 WHERE instr(lower(text), ?{}) > 0",
                args.len()
            ));
        }
    }
    if selects.is_empty() {
        selects.push("SELECT DISTINCT acpx_record_id, message_index FROM messages".to_owned());
    }
    let mut sql = format!(
        "SELECT h.acpx_record_id, s.title, h.message_index FROM ({}) h \
         JOIN session_rows s ON s.acpx_record_id = h.acpx_record_id WHERE 1",
        selects.join(" INTERSECT ")
    );
    if let Some(cwd) = cwd {
        args.push(SqlValue::Text(cwd));
        sql.push_str(&format!(" AND s.cwd_key = ?{}", args.len()));
    }
    sql.push_str(" ORDER BY s.last_used_ms DESC, h.acpx_record_id, h.message_index");
    if !long {
        args.push(SqlValue::Integer(i64::try_from(limit).unwrap_or(i64::MAX)));
        sql.push_str(&format!(" LIMIT ?{}", args.len()));
    }
    (sql, args)
}

/// What a hit shows of its message.
struct Found {
    role: String,
    message_id: Option<String>,
    snippet: String,
}

/// The snippet around the first occurrence of `term` in a message, found in its first part
/// that holds it: by the overlap rule that is the message's first occurrence, with the 60
/// bytes before it in the same part. `None` when the message has no rows any more.
fn part_hit(
    conn: &Connection,
    key: &str,
    index: i64,
    term: &str,
) -> rusqlite::Result<Option<Found>> {
    let mut stmt = conn.prepare_cached(
        "SELECT part, role, message_id, text, text_start FROM messages \
         WHERE acpx_record_id = ?1 AND message_index = ?2 \
         ORDER BY instr(lower(text), ?3) = 0, part LIMIT 1",
    )?;
    // The first part that holds the term; else (an index match looser than the substring
    // rule, which the shared rule allows) the first part, with the snippet at its start.
    let Some((part, role, message_id, text, start)) = stmt
        .query_row(params![key, index, term], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, Option<String>>(2)?,
                r.get::<_, String>(3)?,
                r.get::<_, i64>(4)?,
            ))
        })
        .optional()?
    else {
        return Ok(None);
    };
    let at = text.to_ascii_lowercase().find(term).unwrap_or(0);
    let start = usize::try_from(start).unwrap_or(0);
    let message_len: i64 = conn
        .prepare_cached(
            "SELECT text_start + length(CAST(text AS BLOB)) FROM messages \
             WHERE acpx_record_id = ?1 AND message_index = ?2 ORDER BY part DESC LIMIT 1",
        )?
        .query_row(params![key, index], |r| r.get(0))?;
    let mut window = text;
    // The text after the part: the next part's own bytes, a window's worth.
    let next: Option<(String, i64)> = conn
        .prepare_cached(
            "SELECT text, text_start FROM messages \
             WHERE acpx_record_id = ?1 AND message_index = ?2 AND part = ?3",
        )?
        .query_row(params![key, index, part + 1], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .optional()?;
    if let Some((next, next_start)) = next {
        let skip = (start + window.len()).saturating_sub(usize::try_from(next_start).unwrap_or(0));
        if let Some(own) = next.get(skip..) {
            let mut cut = own.len().min(WINDOW_AFTER);
            while !own.is_char_boundary(cut) {
                cut -= 1;
            }
            window.push_str(&own[..cut]);
        }
    }
    Ok(Some(Found {
        role,
        message_id,
        snippet: snippet_in_window(
            &window,
            start,
            usize::try_from(message_len).unwrap_or(usize::MAX),
            at,
            term.len(),
        ),
    }))
}

/// The hit for a message whose text, put back together from its parts, holds every term;
/// `None` when it does not (a term longer than a part's overlap is checked here).
fn whole_message_hit(
    conn: &Connection,
    key: &str,
    index: i64,
    terms: &[String],
) -> rusqlite::Result<Option<Found>> {
    let mut stmt = conn.prepare_cached(
        "SELECT role, message_id, text, text_start FROM messages \
         WHERE acpx_record_id = ?1 AND message_index = ?2 ORDER BY part",
    )?;
    let mut rows = stmt.query(params![key, index])?;
    let mut text = String::new();
    let mut who = None;
    while let Some(row) = rows.next()? {
        let part: String = row.get(2)?;
        let start = usize::try_from(row.get::<_, i64>(3)?).unwrap_or(0);
        // Each part repeats the text before its own start: append only what is new.
        if let Some(new) = part.get(text.len().saturating_sub(start)..) {
            text.push_str(new);
        }
        if who.is_none() {
            who = Some((row.get::<_, String>(0)?, row.get::<_, Option<String>>(1)?));
        }
    }
    let Some((role, message_id)) = who else {
        return Ok(None);
    };
    let lower = text.to_ascii_lowercase();
    if !terms.iter().all(|t| lower.contains(t.as_str())) {
        return Ok(None);
    }
    let at = lower.find(terms[0].as_str()).unwrap_or(0);
    Ok(Some(Found {
        role,
        message_id,
        snippet: snippet_in_window(&text, 0, text.len(), at, terms[0].len()),
    }))
}

/// An FTS5 query in which every term is one quoted string (an embedded `"` doubled), so no
/// user text is ever read as FTS syntax. Strings side by side are ANDed.
pub(crate) fn fts_query(terms: &[&String]) -> String {
    let mut q = String::new();
    for t in terms {
        if !q.is_empty() {
            q.push(' ');
        }
        q.push('"');
        q.push_str(&t.replace('"', "\"\""));
        q.push('"');
    }
    q
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fts_query_quotes_every_term() {
        let terms = ["a\"b".to_owned(), "NEAR(x".to_owned()];
        let refs: Vec<&String> = terms.iter().collect();
        assert_eq!(fts_query(&refs), r#""a""b" "NEAR(x""#);
    }
}
