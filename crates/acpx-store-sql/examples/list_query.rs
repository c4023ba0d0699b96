//! Prints the SQL and parameters `Store::list` runs for a query, in SQLite's and
//! PostgreSQL's words, from the one builder both stores share:
//!
//! ```sh
//! cargo run -p acpx-store-sql --example list_query                 # the default list
//! cargo run -p acpx-store-sql --example list_query -- /my/project  # one directory's sessions
//! ```

use acpx_model::{ListQuery, StoreError};
use acpx_store_sql::{ListSql, PostgresDialect, SqliteDialect};

fn main() -> Result<(), StoreError> {
    let query = ListQuery {
        cwd: std::env::args().nth(1),
        limit: Some(50),
        ..ListQuery::default()
    };
    let (sql, params) =
        ListSql::new::<SqliteDialect>(&query, "acpx_record_id", "session_rows")?.ordered();
    println!("SQLite:\n  {sql}\n  parameters: {params:?}");
    let (sql, params) =
        ListSql::new::<PostgresDialect>(&query, "acpx_record_id", "sessions")?.ordered();
    println!("PostgreSQL:\n  {sql}\n  parameters: {params:?}");
    Ok(())
}
