//! The database schema and its versioned forward migrations, run on open.
//!
//! Every table lives in the store's own PostgreSQL schema (default `acpx`), so one database
//! can hold several independent stores (the conformance suite gives each check its own).
//! The version is the single row of `acpx_schema_version`. `MIGRATIONS[i]` moves a schema
//! from version `i` to `i + 1`; opening runs the missing ones in one transaction, under a
//! database-wide advisory lock so that hosts opening the store at the same time migrate it
//! once. A schema whose version is newer than [`SCHEMA_VERSION`] is refused with
//! [`StoreError::TooNew`] before anything is written to it.

use acpx_model::StoreError;
use deadpool_postgres::Object;

use crate::connection::pg_error;

/// The schema version this crate writes (`acpx_schema_version.version`).
pub const SCHEMA_VERSION: i32 = 1;

/// Advisory lock key (a constant of this crate) under which schemas are created and migrated.
const MIGRATION_LOCK: i64 = 0x6163_7078_5f6d_6967; // "acpx_mig"

/// `MIGRATIONS[i]` upgrades a schema at version `i` to version `i + 1`.
const MIGRATIONS: &[&str] = &[V1];

/// Version 1: the tables of docs/format.md § PostgreSQL backend.
///
/// JSON is kept as `text`, never `jsonb`: `jsonb` reorders keys and drops duplicates, and the
/// envelopes and documents must come back byte for byte. Timestamps are kept as the documents
/// write them (`2026-02-27T12:00:00.000Z`), which sort as time.
const V1: &str = r#"
CREATE TABLE sessions (
    session_key       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- COLLATE "C": record ids compare byte by byte, the list order of every backend.
    acpx_record_id    text COLLATE "C" NOT NULL UNIQUE,
    acp_session_id    text NOT NULL,
    agent_session_id  text,
    agent_command     text NOT NULL,
    cwd               text NOT NULL,
    -- cwd normalized for the list filter (trailing '/' removed); NULL when not absolute.
    cwd_key           text,
    name              text,
    title             text,
    created_at        text NOT NULL,
    last_used_at      text NOT NULL,
    -- lastUsedAt in Unix milliseconds: the list order key, exactly what list cursors encode.
    last_used_ms      bigint NOT NULL,
    closed            boolean NOT NULL,
    closed_at         text,
    last_prompt_at    text,
    message_count     bigint NOT NULL,
    revision          bigint NOT NULL,
    -- true when the columns above were derived from `document` by acpx in the same write;
    -- false after the row was changed by anything else (see the trigger below).
    document_checked  boolean NOT NULL DEFAULT false,
    -- session.json exactly as the file store writes it.
    document          text NOT NULL
);

CREATE INDEX sessions_by_last_used ON sessions (last_used_ms DESC, acpx_record_id);
CREATE INDEX sessions_by_cwd ON sessions (cwd_key, last_used_ms DESC, acpx_record_id);

-- acpx changes a row only together with its revision. A change that keeps the revision was
-- made by hand (or by another tool): list then reads that one document instead of trusting
-- the columns.
CREATE FUNCTION sessions_document_edited() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.revision = OLD.revision THEN
        NEW.document_checked := false;
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER sessions_document_edited BEFORE UPDATE ON sessions
    FOR EACH ROW EXECUTE FUNCTION sessions_document_edited();

CREATE TABLE event_rows (
    session_key     bigint NOT NULL REFERENCES sessions (session_key) ON DELETE CASCADE,
    seq             bigint NOT NULL,
    event_version   integer NOT NULL,
    timestamp       text NOT NULL,
    acp_session_id  text NOT NULL,
    request_id      text,
    stream          text NOT NULL,
    source          text NOT NULL,
    type            text NOT NULL,
    payload         text NOT NULL,
    -- Envelope keys this version does not know, as a JSON object; NULL when there are none.
    extra           text,
    -- Length of the NDJSON line, newline included: the unit of the retention budget.
    bytes           bigint NOT NULL,
    PRIMARY KEY (session_key, seq)
);

CREATE INDEX events_by_type ON event_rows (session_key, type, seq);
CREATE INDEX events_by_request ON event_rows (session_key, request_id, seq)
    WHERE request_id IS NOT NULL;
CREATE INDEX events_by_time ON event_rows (timestamp);

CREATE TABLE event_logs (
    session_key     bigint PRIMARY KEY REFERENCES sessions (session_key) ON DELETE CASCADE,
    -- The last seq ever appended (retention never lowers it).
    last_seq        bigint NOT NULL DEFAULT 0,
    -- Sum of `event_rows.bytes` of the retained rows.
    retained_bytes  bigint NOT NULL DEFAULT 0,
    last_write_at   text
);

CREATE TABLE messages (
    session_key     bigint NOT NULL REFERENCES sessions (session_key) ON DELETE CASCADE,
    message_index   integer NOT NULL,
    role            text NOT NULL,
    message_id      text,
    text            text NOT NULL,
    -- FNV-1a of role, message id and text: a save re-indexes only the messages that changed.
    text_hash       bigint NOT NULL,
    PRIMARY KEY (session_key, message_index)
);

-- The events with their record id, for hand-written queries.
CREATE VIEW events AS
SELECT s.acpx_record_id, e.seq, e.event_version, e.timestamp, e.acp_session_id, e.request_id,
    e.stream, e.source, e.type, e.payload, e.extra, e.bytes
FROM event_rows e JOIN sessions s USING (session_key);

-- Search matches substrings (the rule every backend shares, acpx_model::search): a trigram
-- index (pg_trgm, shipped with PostgreSQL) serves `lower(text) LIKE '%term%'`. Where the
-- extension cannot be installed, search stays correct and scans the messages.
DO $$
BEGIN
    BEGIN
        CREATE EXTENSION IF NOT EXISTS pg_trgm SCHEMA public;
    EXCEPTION WHEN OTHERS THEN
        RAISE NOTICE 'pg_trgm is not available (%); search scans the messages', SQLERRM;
    END;
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm') THEN
        EXECUTE format(
            'CREATE INDEX messages_text_trgm ON messages USING gin (lower(text) %I.gin_trgm_ops)',
            (SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
             WHERE e.extname = 'pg_trgm'));
    END IF;
END
$$;
"#;

/// Whether `name` can be a schema name without quoting: lowercase ASCII letters, digits and
/// `_`, not starting with a digit, at most 63 bytes.
pub(crate) fn valid_schema_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// Creates the schema if needed and brings it to [`SCHEMA_VERSION`]; refuses a newer one.
pub(crate) async fn migrate(
    conn: &mut Object,
    schema: &str,
    location: &str,
) -> Result<(), StoreError> {
    let err = |context: &'static str| move |e| pg_error(location, context, e);
    let tx = conn
        .transaction()
        .await
        .map_err(err("start the schema migration"))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(err("wait for the schema migration lock"))?;
    // `schema` is checked by valid_schema_name: it needs no quoting.
    tx.batch_execute(&format!(
        "CREATE SCHEMA IF NOT EXISTS {schema}; \
         CREATE TABLE IF NOT EXISTS {schema}.acpx_schema_version (version integer NOT NULL);"
    ))
    .await
    .map_err(err("create the schema"))?;
    let row = tx
        .query_opt(
            &format!("SELECT version FROM {schema}.acpx_schema_version"),
            &[],
        )
        .await
        .map_err(err("read the schema version"))?;
    let version: i32 = match &row {
        Some(r) => r.get(0),
        None => 0,
    };
    if version > SCHEMA_VERSION {
        return Err(StoreError::TooNew(format!(
            "{location}: schema version {version}, this acpx reads up to {SCHEMA_VERSION}"
        )));
    }
    if version == SCHEMA_VERSION {
        return tx.commit().await.map_err(err("finish the schema check"));
    }
    let from = usize::try_from(version).unwrap_or(0);
    tx.batch_execute(&format!("SET LOCAL search_path = {schema}, public"))
        .await
        .map_err(err("select the schema"))?;
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(from) {
        tx.batch_execute(sql).await.map_err(|e| {
            pg_error(
                location,
                &format!("migrate the schema to version {}", i + 1),
                e,
            )
        })?;
    }
    if row.is_some() {
        tx.execute(
            "UPDATE acpx_schema_version SET version = $1",
            &[&SCHEMA_VERSION],
        )
        .await
    } else {
        tx.execute(
            "INSERT INTO acpx_schema_version (version) VALUES ($1)",
            &[&SCHEMA_VERSION],
        )
        .await
    }
    .map_err(err("record the schema version"))?;
    tx.commit()
        .await
        .map_err(err("commit the schema migration"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_names_need_no_quoting() {
        for ok in ["acpx", "acpx_test_12", "_x"] {
            assert!(valid_schema_name(ok), "{ok}");
        }
        for bad in ["", "1a", "Acpx", "a-b", "a;drop", "a b", &"x".repeat(64)] {
            assert!(!valid_schema_name(bad), "{bad}");
        }
    }
}
