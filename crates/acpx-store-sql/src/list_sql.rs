//! The query of `Store::list`: its filters as SQL conditions with bound parameters, in the
//! words of each database ([`ListDialect`]).

use acpx_model::{normalize_cwd, ClosedFilter, ListQuery, StoreError, StoreResult};

/// A parameter of the list query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Param {
    /// A text.
    Text(String),
    /// An integer.
    Int(i64),
}

/// How a database writes what the list query needs.
pub trait ListDialect {
    /// The condition that is always true, after `WHERE`.
    const TRUE: &'static str;
    /// The condition of an open session.
    const OPEN: &'static str;
    /// The condition of a closed session.
    const CLOSED: &'static str;
    /// The placeholder of the `n`th parameter (from 1).
    fn placeholder(n: usize) -> String;
    /// The condition of a row after the cursor: `last_used_ms` `t` and `acpx_record_id`
    /// `last` (placeholders), in list order (`last_used_ms DESC, acpx_record_id ASC`).
    fn after_cursor(t: &str, last: &str) -> String;
}

/// SQLite's words: numbered `?N` parameters, booleans as integers.
#[derive(Debug)]
pub struct SqliteDialect;

impl ListDialect for SqliteDialect {
    const TRUE: &'static str = "1";
    const OPEN: &'static str = "closed = 0";
    const CLOSED: &'static str = "closed = 1";

    fn placeholder(n: usize) -> String {
        format!("?{n}")
    }

    fn after_cursor(t: &str, last: &str) -> String {
        // The redundant `<=` lets SQLite start the index scan at the cursor.
        format!("last_used_ms <= {t} AND (last_used_ms < {t} OR acpx_record_id > {last})")
    }
}

/// PostgreSQL's words: `$N` parameters, real booleans.
#[derive(Debug)]
pub struct PostgresDialect;

impl ListDialect for PostgresDialect {
    const TRUE: &'static str = "true";
    const OPEN: &'static str = "NOT closed";
    const CLOSED: &'static str = "closed";

    fn placeholder(n: usize) -> String {
        format!("${n}")
    }

    fn after_cursor(t: &str, last: &str) -> String {
        format!("(last_used_ms < {t} OR (last_used_ms = {t} AND acpx_record_id > {last}))")
    }
}

/// The list query being built: its SQL and its parameters.
#[derive(Debug)]
pub struct ListSql {
    /// The statement so far.
    pub sql: String,
    /// Its parameters, in the order of their placeholders.
    pub params: Vec<Param>,
    placeholder: fn(usize) -> String,
}

impl ListSql {
    /// `SELECT {columns} FROM {table}` with the filters of `query` (cwd, agent command, name,
    /// open or closed, after the cursor); an invalid cwd, cursor or limit is refused here.
    pub fn new<D: ListDialect>(query: &ListQuery, columns: &str, table: &str) -> StoreResult<Self> {
        let cwd = query.cwd.as_deref().map(normalize_cwd).transpose()?;
        let after = query.decode_cursor()?;
        if query.limit == Some(0) {
            return Err(StoreError::InvalidArgument(
                "limit must be at least 1".into(),
            ));
        }
        let mut list = ListSql {
            sql: format!("SELECT {columns} FROM {table} WHERE {}", D::TRUE),
            params: Vec::new(),
            placeholder: D::placeholder,
        };
        if let Some(cwd) = cwd {
            let p = list.bind(Param::Text(cwd));
            list.and(&format!("cwd_key = {p}"));
        }
        if let Some(a) = &query.agent_command {
            let p = list.bind(Param::Text(a.clone()));
            list.and(&format!("agent_command = {p}"));
        }
        if let Some(n) = &query.name {
            let p = list.bind(Param::Text(n.clone()));
            list.and(&format!("name = {p}"));
        }
        match query.closed {
            ClosedFilter::Any => {}
            ClosedFilter::Open => list.and(D::OPEN),
            ClosedFilter::Closed => list.and(D::CLOSED),
        }
        if let Some((t, last_id)) = after {
            let t = list.bind(Param::Int(t));
            let last_id = list.bind(Param::Text(last_id));
            list.and(&D::after_cursor(&t, &last_id));
        }
        Ok(list)
    }

    /// Binds `value`; returns its placeholder.
    pub fn bind(&mut self, value: Param) -> String {
        self.params.push(value);
        (self.placeholder)(self.params.len())
    }

    /// Adds the condition `condition`.
    pub fn and(&mut self, condition: &str) {
        self.sql.push_str(" AND ");
        self.sql.push_str(condition);
    }

    /// The statement in list order.
    pub fn ordered(mut self) -> (String, Vec<Param>) {
        self.sql
            .push_str(" ORDER BY last_used_ms DESC, acpx_record_id ASC");
        (self.sql, self.params)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Numbered;

    impl ListDialect for Numbered {
        const TRUE: &'static str = "1";
        const OPEN: &'static str = "closed = 0";
        const CLOSED: &'static str = "closed = 1";
        fn placeholder(n: usize) -> String {
            format!("?{n}")
        }
        fn after_cursor(t: &str, last: &str) -> String {
            format!("(last_used_ms < {t} OR acpx_record_id > {last})")
        }
    }

    #[test]
    fn filters_become_conditions_with_numbered_parameters() {
        let query = ListQuery {
            cwd: Some("/w/".into()),
            name: Some("n".into()),
            closed: ClosedFilter::Open,
            ..ListQuery::default()
        };
        let (sql, params) = ListSql::new::<Numbered>(&query, "a, b", "t")
            .unwrap()
            .ordered();
        assert_eq!(
            sql,
            "SELECT a, b FROM t WHERE 1 AND cwd_key = ?1 AND name = ?2 AND closed = 0 \
             ORDER BY last_used_ms DESC, acpx_record_id ASC"
        );
        assert_eq!(params, [Param::Text("/w".into()), Param::Text("n".into())]);
    }

    #[test]
    fn a_zero_limit_and_a_relative_cwd_are_refused() {
        let zero = ListQuery {
            limit: Some(0),
            ..ListQuery::default()
        };
        assert!(ListSql::new::<Numbered>(&zero, "a", "t").is_err());
        let relative = ListQuery {
            cwd: Some("w".into()),
            ..ListQuery::default()
        };
        assert!(ListSql::new::<Numbered>(&relative, "a", "t").is_err());
    }
}
