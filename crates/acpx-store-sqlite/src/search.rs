//! Full-text search over the `messages` rows (FTS5 trigram index, `instr` for short terms).

use acpx_model::search::{snippet, SearchHit, SearchQuery};
use acpx_model::{normalize_cwd, RecordId, StoreResult};
use rusqlite::types::Value as SqlValue;

use crate::Inner;

impl Inner {
    pub(crate) fn search(&self, query: &SearchQuery) -> StoreResult<Vec<acpx_model::SearchHit>> {
        let cwd = query.cwd.as_deref().map(normalize_cwd).transpose()?;
        let terms = query.terms();
        if terms.is_empty() {
            return Ok(Vec::new());
        }
        // Trigram matching needs 3 characters, and the FTS5 query parser stops at a NUL;
        // other terms are matched with instr() on the lowercased text, which is the shared
        // substring rule exactly.
        let (indexed, short): (Vec<&String>, Vec<&String>) = terms
            .iter()
            .partition(|t| t.chars().count() >= 3 && !t.contains('\0'));
        let mut args: Vec<SqlValue> = Vec::new();
        let mut sql = String::from(
            "SELECT m.acpx_record_id, s.title, m.message_index, m.role, m.message_id, m.text \
             FROM messages m JOIN sessions s ON s.acpx_record_id = m.acpx_record_id",
        );
        if !indexed.is_empty() {
            args.push(SqlValue::Text(fts_query(&indexed)));
            sql.push_str(&format!(
                " WHERE m.rowid IN (SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?{})",
                args.len()
            ));
        } else {
            sql.push_str(" WHERE 1");
        }
        for t in &short {
            args.push(SqlValue::Text((*t).clone()));
            sql.push_str(&format!(" AND instr(lower(m.text), ?{}) > 0", args.len()));
        }
        if let Some(cwd) = cwd {
            args.push(SqlValue::Text(cwd));
            sql.push_str(&format!(" AND s.cwd_key = ?{}", args.len()));
        }
        args.push(SqlValue::Integer(
            i64::try_from(query.effective_limit()).unwrap_or(i64::MAX),
        ));
        sql.push_str(&format!(
            " ORDER BY s.last_used_ms DESC, s.acpx_record_id, m.message_index LIMIT ?{}",
            args.len()
        ));
        let ctx = "search";
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(&sql).map_err(self.sql(ctx))?;
        let mut rows = stmt
            .query(rusqlite::params_from_iter(args))
            .map_err(self.sql(ctx))?;
        let mut hits = Vec::new();
        while let Some(row) = rows.next().map_err(self.sql(ctx))? {
            let key: String = row.get(0).map_err(self.sql(ctx))?;
            let Ok(id) = RecordId::parse(&key) else {
                tracing::warn!(location = %self.row_location(&key), "search skips a row with an invalid record id");
                continue;
            };
            let text: String = row.get(5).map_err(self.sql(ctx))?;
            let lower = text.to_ascii_lowercase();
            let at = lower.find(terms[0].as_str()).unwrap_or(0);
            hits.push(SearchHit {
                acpx_record_id: id,
                title: row
                    .get::<_, Option<String>>(1)
                    .map_err(self.sql(ctx))?
                    .filter(|t| !t.is_empty()),
                message_index: usize::try_from(row.get::<_, i64>(2).map_err(self.sql(ctx))?)
                    .unwrap_or(0),
                role: row.get(3).map_err(self.sql(ctx))?,
                message_id: row.get(4).map_err(self.sql(ctx))?,
                snippet: snippet(&text, at, terms[0].len()),
            });
        }
        Ok(hits)
    }
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
