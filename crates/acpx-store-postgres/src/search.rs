//! Full-text search over the `messages` rows: substring matching with `lower(text) LIKE`,
//! served by the trigram index where `pg_trgm` is installed (see schema.rs).

use acpx_model::search::{snippet_in_window, SearchHit, SearchQuery};
use acpx_model::{normalize_cwd, RecordId, StoreResult};
use tokio_postgres::types::ToSql;

use crate::Inner;

impl Inner {
    pub(crate) async fn search(&self, query: &SearchQuery) -> StoreResult<Vec<SearchHit>> {
        let cwd = query.cwd.as_deref().map(normalize_cwd).transpose()?;
        let terms = query.terms();
        if terms.is_empty() {
            return Ok(Vec::new());
        }
        if terms.iter().any(|t| t.contains('\0')) {
            // PostgreSQL text never holds NUL (message_rows drops it): nothing can match.
            return Ok(Vec::new());
        }
        // Both sides lowercased by the server: at least as loose as the shared rule (ASCII
        // case folding), never stricter, whatever the database's locale.
        let patterns: Vec<String> = terms.iter().map(|t| like_pattern(t)).collect();
        let limit = i64::try_from(query.effective_limit()).unwrap_or(i64::MAX);
        // Each hit carries a window of its message around the first match, not the message
        // (a hit can be a whole long reply): from 60 characters before the first ASCII-
        // lowercased occurrence of the first term (what `match_text` finds) to 160 after it,
        // at least as many bytes as `snippet` takes, and the window's byte offset.
        let first = terms[0].clone();
        let window_chars = i32::try_from(first.chars().count() + 224).unwrap_or(i32::MAX);
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![&first, &window_chars];
        let mut sql = String::from(
            "SELECT s.acpx_record_id, s.title, m.message_index, m.role, m.message_id, \
             substr(m.text, w.start, $2), octet_length(substr(m.text, 1, w.start - 1)), \
             octet_length(m.text) \
             FROM messages m JOIN sessions s ON s.session_key = m.session_key, \
             LATERAL (SELECT greatest(strpos(translate(m.text, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', \
             'abcdefghijklmnopqrstuvwxyz'), $1) - 60, 1) AS start) w WHERE true",
        );
        for p in &patterns {
            params.push(p);
            sql.push_str(&format!(" AND lower(m.text) LIKE lower(${})", params.len()));
        }
        if let Some(cwd) = &cwd {
            params.push(cwd);
            sql.push_str(&format!(" AND s.cwd_key = ${}", params.len()));
        }
        params.push(&limit);
        sql.push_str(&format!(
            " ORDER BY s.last_used_ms DESC, s.acpx_record_id, m.message_index LIMIT ${}",
            params.len()
        ));
        let conn = self.conn().await?;
        let rows = conn.query(&sql, &params).await.map_err(self.pg("search"))?;
        let mut hits = Vec::with_capacity(rows.len());
        for row in &rows {
            let key: String = row.get(0);
            let Ok(id) = RecordId::parse(&key) else {
                tracing::warn!(location = %self.row_location(&key), "search skips a row with an invalid record id");
                continue;
            };
            let window: String = row.get(5);
            let window_start = usize::try_from(row.get::<_, i32>(6)).unwrap_or(0);
            let message_len = usize::try_from(row.get::<_, i32>(7)).unwrap_or(0);
            let at = window
                .to_ascii_lowercase()
                .find(first.as_str())
                .unwrap_or(0);
            hits.push(SearchHit {
                acpx_record_id: id,
                title: row.get::<_, Option<String>>(1).filter(|t| !t.is_empty()),
                message_index: usize::try_from(row.get::<_, i32>(2)).unwrap_or(0),
                role: row.get(3),
                message_id: row.get(4),
                snippet: snippet_in_window(&window, window_start, message_len, at, first.len()),
            });
        }
        Ok(hits)
    }
}

/// `%term%` with `LIKE`'s special characters (`%`, `_`, and the escape `\`) escaped, so no
/// user text is ever read as a pattern.
pub(crate) fn like_pattern(term: &str) -> String {
    let mut p = String::with_capacity(term.len() + 2);
    p.push('%');
    for c in term.chars() {
        if matches!(c, '%' | '_' | '\\') {
            p.push('\\');
        }
        p.push(c);
    }
    p.push('%');
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn like_patterns_escape_wildcards() {
        assert_eq!(like_pattern("a%b_c\\d"), "%a\\%b\\_c\\\\d%");
    }
}
