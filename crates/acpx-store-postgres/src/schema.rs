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
pub const SCHEMA_VERSION: i32 = 3;

/// Advisory lock key (a constant of this crate) under which schemas are created and migrated.
const MIGRATION_LOCK: i64 = 0x6163_7078_5f6d_6967; // "acpx_mig"

/// `MIGRATIONS[i]` upgrades a schema at version `i` to version `i + 1`.
const MIGRATIONS: &[&str] = &[V1, V2, V3];

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

-- One append in one round trip (the hot path: one call per streamed chunk). Under the log
-- row's lock: the writer lock must still be held by the connection that took it (pid and key
-- halves as in pg_locks), and the batch must continue the log; then the rows go in, retention
-- trims the oldest ones beyond the budget, the log row is updated, and followers are notified
-- at commit. `status`: ok, not_found, lock_lost, or seq (nothing written; `last_seq` is the
-- log's end, for the caller's error).
CREATE FUNCTION acpx_append(
    p_record_id text, p_lock_pid integer, p_classid oid, p_objid oid,
    p_seq bigint[], p_event_version integer[], p_timestamp text[], p_acp_session_id text[],
    p_request_id text[], p_stream text[], p_source text[], p_type text[], p_payload text[],
    p_extra text[], p_bytes bigint[], p_budget bigint, p_now text, p_async_commit boolean,
    p_channel text, p_notify text)
RETURNS TABLE (status text, last_seq bigint, retained_bytes bigint, last_write_at text)
LANGUAGE plpgsql AS $$
DECLARE
    v_key bigint;
    v_last bigint;
    v_retained bigint;
    v_written text;
    v_cut bigint;
    v_freed bigint;
BEGIN
    IF p_async_commit THEN
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    SELECT s.session_key, l.last_seq, l.retained_bytes, l.last_write_at
        INTO v_key, v_last, v_retained, v_written
        FROM sessions s JOIN event_logs l ON l.session_key = s.session_key
        WHERE s.acpx_record_id = p_record_id
        FOR UPDATE OF l;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'not_found'::text, 0::bigint, 0::bigint, NULL::text;
        RETURN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = p_lock_pid
                   AND classid = p_classid AND objid = p_objid AND objsubid = 1 AND granted) THEN
        RETURN QUERY SELECT 'lock_lost'::text, v_last, v_retained, v_written;
        RETURN;
    END IF;
    IF p_seq[1] IS DISTINCT FROM v_last + 1 THEN
        RETURN QUERY SELECT 'seq'::text, v_last, v_retained, v_written;
        RETURN;
    END IF;
    INSERT INTO event_rows (session_key, seq, event_version, timestamp, acp_session_id,
        request_id, stream, source, type, payload, extra, bytes)
    SELECT v_key, * FROM unnest(p_seq, p_event_version, p_timestamp, p_acp_session_id,
        p_request_id, p_stream, p_source, p_type, p_payload, p_extra, p_bytes);
    v_last := p_seq[array_upper(p_seq, 1)];
    v_retained := v_retained + (SELECT COALESCE(sum(b), 0) FROM unnest(p_bytes) b);
    IF v_retained > p_budget THEN
        -- The oldest rows until the excess is freed, never the newest event.
        SELECT t.seq, t.running INTO v_cut, v_freed FROM (
            SELECT e.seq, (sum(e.bytes) OVER (ORDER BY e.seq))::bigint AS running
            FROM event_rows e WHERE e.session_key = v_key AND e.seq < v_last) t
        WHERE t.running >= v_retained - p_budget ORDER BY t.seq LIMIT 1;
        IF v_cut IS NULL THEN
            SELECT max(e.seq), sum(e.bytes)::bigint INTO v_cut, v_freed
            FROM event_rows e WHERE e.session_key = v_key AND e.seq < v_last;
        END IF;
        IF v_cut IS NOT NULL THEN
            DELETE FROM event_rows e WHERE e.session_key = v_key AND e.seq <= v_cut;
            v_retained := v_retained - v_freed;
        END IF;
    END IF;
    UPDATE event_logs l SET last_seq = v_last, retained_bytes = v_retained,
        last_write_at = p_now WHERE l.session_key = v_key;
    PERFORM pg_notify(p_channel, p_notify);
    RETURN QUERY SELECT 'ok'::text, v_last, v_retained, p_now;
END
$$;

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

/// Version 2: the sessions' authority (docs/format.md § Owner lease): `owner_leases` (one
/// row per session that ever had an owner; the generation survives a release), the task
/// queue through which a command on one host reaches the owner on another (`owner_tasks`,
/// `owner_task_answers`), and `acpx_append_fenced`, the append every write goes through: it
/// refuses a batch whose writer holds a lease generation that is no longer the session's.
const V2: &str = r#"
CREATE TABLE owner_leases (
    acpx_record_id  text COLLATE "C" PRIMARY KEY,
    generation      bigint NOT NULL,
    held            boolean NOT NULL,
    -- acpx_model::LeaseHolder and LeaseActivity as JSON.
    holder          text NOT NULL,
    ttl_ms          bigint NOT NULL,
    acquired_at     timestamptz NOT NULL,
    heartbeat_at    timestamptz NOT NULL,
    activity        text NOT NULL,
    queue_depth     integer NOT NULL
);

CREATE TABLE owner_tasks (
    task_id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    acpx_record_id      text COLLATE "C" NOT NULL,
    -- The owner protocol request, as JSON.
    request             text NOT NULL,
    from_host           text NOT NULL,
    submitted_at        timestamptz NOT NULL DEFAULT now(),
    -- The lease generation of the owner that took it; NULL while queued.
    claimed_generation  bigint,
    claimed_at          timestamptz
);

CREATE INDEX owner_tasks_queued ON owner_tasks (acpx_record_id, task_id)
    WHERE claimed_generation IS NULL;

CREATE TABLE owner_task_answers (
    task_id  bigint NOT NULL REFERENCES owner_tasks (task_id) ON DELETE CASCADE,
    n        integer NOT NULL,
    -- One owner protocol response, as JSON.
    line     text NOT NULL,
    PRIMARY KEY (task_id, n)
);

-- acpx_append behind the fence: with p_fence set, the batch is refused ('fenced', nothing
-- written) unless the session's lease is held at that generation. A takeover changes the
-- lease row before the new holder writes, and the writer lock serializes the appends.
CREATE FUNCTION acpx_append_fenced(
    p_fence bigint,
    p_record_id text, p_lock_pid integer, p_classid oid, p_objid oid,
    p_seq bigint[], p_event_version integer[], p_timestamp text[], p_acp_session_id text[],
    p_request_id text[], p_stream text[], p_source text[], p_type text[], p_payload text[],
    p_extra text[], p_bytes bigint[], p_budget bigint, p_now text, p_async_commit boolean,
    p_channel text, p_notify text)
RETURNS TABLE (status text, last_seq bigint, retained_bytes bigint, last_write_at text)
LANGUAGE plpgsql AS $$
BEGIN
    IF p_fence IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM owner_leases o
        WHERE o.acpx_record_id = p_record_id AND o.held AND o.generation = p_fence) THEN
        RETURN QUERY SELECT 'fenced'::text, 0::bigint, 0::bigint, NULL::text;
        RETURN;
    END IF;
    RETURN QUERY SELECT * FROM acpx_append(p_record_id, p_lock_pid, p_classid, p_objid,
        p_seq, p_event_version, p_timestamp, p_acp_session_id, p_request_id, p_stream,
        p_source, p_type, p_payload, p_extra, p_bytes, p_budget, p_now, p_async_commit,
        p_channel, p_notify);
END
$$;
"#;

/// Version 3: each row keeps its session's usage (`acpx_model::SessionUsage` as JSON), so
/// that `acpx sessions usage` sums rows, never documents. The rows already there get theirs
/// from their documents right after this step ([`fill_usage`]); a NULL (a document that did
/// not parse) counts as unchecked (`rows::SUMMARY_COLUMNS`).
const V3: &str = r#"
ALTER TABLE sessions ADD COLUMN usage text;
"#;

/// The schema version that added `sessions.usage`.
const USAGE_VERSION: usize = 3;

/// Fills `sessions.usage` of the rows a migration to version 3 found, from their documents,
/// as a save would have: once, in the migration's transaction, [`FILL_PAGE`] documents at a
/// time so that a large store is never in memory whole.
async fn fill_usage(
    tx: &deadpool_postgres::Transaction<'_>,
    location: &str,
) -> Result<(), StoreError> {
    let err = |context: &'static str| move |e| pg_error(location, context, e);
    let page = tx
        .prepare(
            "SELECT session_key, document FROM sessions WHERE session_key > $1 \
             ORDER BY session_key LIMIT $2",
        )
        .await
        .map_err(err("read the documents to fill in their usage"))?;
    let update = tx
        .prepare("UPDATE sessions SET usage = $2 WHERE session_key = $1")
        .await
        .map_err(err("fill in the sessions' usage"))?;
    let mut after = i64::MIN;
    loop {
        let rows = tx
            .query(&page, &[&after, &FILL_PAGE])
            .await
            .map_err(err("read the documents to fill in their usage"))?;
        let Some(last) = rows.last() else {
            return Ok(());
        };
        after = last.get(0);
        for row in rows {
            let key: i64 = row.get(0);
            let document: String = row.get(1);
            let usage = acpx_model::SessionRecord::from_json_slice(document.as_bytes(), "document")
                .ok()
                .map(|r| acpx_model::SessionUsage::of(&r).to_json_text());
            tx.execute(&update, &[&key, &usage])
                .await
                .map_err(err("fill in the sessions' usage"))?;
        }
    }
}

/// Documents [`fill_usage`] reads at a time.
const FILL_PAGE: i64 = 64;

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
        if i + 1 == USAGE_VERSION {
            fill_usage(&tx, location).await?;
        }
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
