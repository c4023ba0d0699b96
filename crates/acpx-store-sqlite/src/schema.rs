//! The database schema and its forward migrations.
//!
//! The schema version lives in `PRAGMA user_version`. Each entry of `MIGRATIONS` moves the
//! database from version `i` to `i + 1`; opening runs the missing ones in one transaction. A
//! database whose version is newer than [`SCHEMA_VERSION`] is refused before anything is
//! written to it.

/// The version whose step fills the `usage` column ([`add_usage_column`] runs before it).
pub(crate) const USAGE_VERSION: i64 = 9;

/// Adds `session_rows.usage` unless it is there.
pub(crate) fn add_usage_column(conn: &rusqlite::Connection) -> rusqlite::Result<()> {
    let present: bool = conn.query_row(
        "SELECT count(*) > 0 FROM pragma_table_info('session_rows') WHERE name = 'usage'",
        [],
        |r| r.get(0),
    )?;
    if !present {
        conn.execute_batch("ALTER TABLE session_rows ADD COLUMN usage TEXT;")?;
    }
    Ok(())
}

/// The schema version this crate writes (`PRAGMA user_version`).
pub const SCHEMA_VERSION: i64 = 9;

/// `MIGRATIONS[i]` upgrades a database at version `i` to version `i + 1`. They run with
/// `foreign_keys` off (a table rebuild drops a parent table; with the pragma on, dropping it
/// would cascade into its children) and must leave `PRAGMA foreign_key_check` empty.
pub(crate) const MIGRATIONS: &[&str] = &[V1, V2, V3, V4, V5, V6, V7, V8, V9];

/// Version 1. Tables are STRICT so that a hand edit cannot store a value of the wrong type
/// (a text in `seq`, a NULL document): what remains possible is a value of the right type
/// that does not validate, which `list` and `load` report.
const V1: &str = r#"
CREATE TABLE sessions (
    acpx_record_id    TEXT PRIMARY KEY NOT NULL,
    acp_session_id    TEXT NOT NULL,
    agent_session_id  TEXT,
    agent_command     TEXT NOT NULL,
    cwd               TEXT NOT NULL,
    -- cwd normalized for the list filter (trailing '/' removed); NULL when not absolute.
    cwd_key           TEXT,
    name              TEXT,
    title             TEXT,
    created_at        TEXT NOT NULL,
    last_used_at      TEXT NOT NULL,
    -- lastUsedAt in Unix milliseconds: the list order key, exactly what list cursors encode.
    last_used_ms      INTEGER NOT NULL,
    closed            INTEGER NOT NULL CHECK (closed IN (0, 1)),
    closed_at         TEXT,
    last_prompt_at    TEXT,
    message_count     INTEGER NOT NULL,
    revision          INTEGER NOT NULL,
    -- 1 when the columns above were derived from `document` by acpx in the same write;
    -- 0 after the document was changed by anything else (see the trigger below).
    document_checked  INTEGER NOT NULL DEFAULT 0,
    -- session.json exactly as the file store writes it.
    document          TEXT NOT NULL
) STRICT;

CREATE INDEX sessions_by_last_used ON sessions (last_used_ms DESC, acpx_record_id);
CREATE INDEX sessions_by_cwd ON sessions (cwd_key, last_used_ms DESC, acpx_record_id);

-- acpx changes `document` and the columns derived from it only together with `revision`. A
-- change that keeps the revision was made by hand (or by another tool), so the columns may no
-- longer match the document: list then reads that one document instead of trusting them.
CREATE TRIGGER sessions_document_edited
AFTER UPDATE OF acp_session_id, agent_session_id, agent_command, cwd, cwd_key, name, title,
    created_at, last_used_at, last_used_ms, closed, closed_at, last_prompt_at, message_count,
    document ON sessions
FOR EACH ROW WHEN NEW.revision = OLD.revision
BEGIN
    UPDATE sessions SET document_checked = 0 WHERE acpx_record_id = NEW.acpx_record_id;
END;

CREATE TABLE events (
    acpx_record_id  TEXT NOT NULL REFERENCES sessions (acpx_record_id) ON DELETE CASCADE,
    seq             INTEGER NOT NULL,
    event_version   INTEGER NOT NULL,
    timestamp       TEXT NOT NULL,
    acp_session_id  TEXT NOT NULL,
    request_id      TEXT,
    stream          TEXT NOT NULL,
    source          TEXT NOT NULL,
    type            TEXT NOT NULL,
    payload         TEXT NOT NULL,
    -- Envelope keys this version does not know, as a JSON object; NULL when there are none.
    extra           TEXT,
    -- Length of the NDJSON line, newline included: the unit of the retention budget.
    bytes           INTEGER NOT NULL,
    PRIMARY KEY (acpx_record_id, seq)
) STRICT, WITHOUT ROWID;

CREATE INDEX events_by_type ON events (acpx_record_id, type, seq);
CREATE INDEX events_by_request ON events (acpx_record_id, request_id, seq)
    WHERE request_id IS NOT NULL;
CREATE INDEX events_by_time ON events (timestamp);

CREATE TABLE event_logs (
    acpx_record_id  TEXT PRIMARY KEY NOT NULL
                    REFERENCES sessions (acpx_record_id) ON DELETE CASCADE,
    -- The last seq ever appended (retention never lowers it).
    last_seq        INTEGER NOT NULL DEFAULT 0,
    -- Sum of `events.bytes` of the retained rows.
    retained_bytes  INTEGER NOT NULL DEFAULT 0,
    last_write_at   TEXT
) STRICT, WITHOUT ROWID;

CREATE TABLE messages (
    acpx_record_id  TEXT NOT NULL REFERENCES sessions (acpx_record_id) ON DELETE CASCADE,
    message_index   INTEGER NOT NULL,
    role            TEXT NOT NULL,
    message_id      TEXT,
    text            TEXT NOT NULL,
    -- A hash of role, message id and text (FNV-1a through schema version 5, text_hash.rs
    -- since 6): a save re-indexes only the messages that changed.
    text_hash       INTEGER NOT NULL,
    PRIMARY KEY (acpx_record_id, message_index)
) STRICT;

-- Trigram tokens give substring matching, the rule every backend shares
-- (acpx_model::search), with an index.
CREATE VIRTUAL TABLE messages_fts USING fts5 (
    text,
    content = 'messages',
    content_rowid = 'rowid',
    tokenize = 'trigram'
);

CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts (rowid, text) VALUES (NEW.rowid, NEW.text);
END;
CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, text) VALUES ('delete', OLD.rowid, OLD.text);
END;
CREATE TRIGGER messages_fts_update AFTER UPDATE OF text ON messages BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, text) VALUES ('delete', OLD.rowid, OLD.text);
    INSERT INTO messages_fts (rowid, text) VALUES (NEW.rowid, NEW.text);
END;
"#;

/// Version 2: events keyed by an integer session key instead of the 36-byte record id.
///
/// Appending is the hot path. Version 1 repeated the text id in every event row and in every
/// secondary index entry; an integer key takes one or two bytes there, which makes the rows
/// and the indexes smaller and every insert cheaper. `sessions` is rebuilt with
/// `session_key INTEGER PRIMARY KEY AUTOINCREMENT` (AUTOINCREMENT: a key is never reused, so
/// rows left behind by a hand delete without `foreign_keys` can never attach to a new
/// session); the events move to `event_rows (session_key, seq, ...)`, and the `events` view
/// shows them with the record id, so hand-written queries read as before.
///
/// Indexes on `event_rows` (every index costs a b-tree insert per appended event):
/// - the primary key `(session_key, seq)`, clustered (WITHOUT ROWID): `read_events` by seq,
///   the oldest retained seq, retention trimming, deletes;
/// - `(session_key, type, seq)`: `read_events` by type;
/// - `(session_key, request_id, seq)` for rows with a request id: `read_events` by request;
/// - `(timestamp)`: queries by time across sessions ("failed turns this week").
///
/// A secondary index of a WITHOUT ROWID table carries the primary key, so `seq` in the first
/// two costs nothing extra; it says that the entries of one type come in seq order.
const V2: &str = r#"
CREATE TABLE sessions_v2 (
    session_key       INTEGER PRIMARY KEY AUTOINCREMENT,
    acpx_record_id    TEXT NOT NULL UNIQUE,
    acp_session_id    TEXT NOT NULL,
    agent_session_id  TEXT,
    agent_command     TEXT NOT NULL,
    cwd               TEXT NOT NULL,
    cwd_key           TEXT,
    name              TEXT,
    title             TEXT,
    created_at        TEXT NOT NULL,
    last_used_at      TEXT NOT NULL,
    last_used_ms      INTEGER NOT NULL,
    closed            INTEGER NOT NULL CHECK (closed IN (0, 1)),
    closed_at         TEXT,
    last_prompt_at    TEXT,
    message_count     INTEGER NOT NULL,
    revision          INTEGER NOT NULL,
    document_checked  INTEGER NOT NULL DEFAULT 0,
    document          TEXT NOT NULL
) STRICT;

INSERT INTO sessions_v2 (acpx_record_id, acp_session_id, agent_session_id, agent_command, cwd,
    cwd_key, name, title, created_at, last_used_at, last_used_ms, closed, closed_at,
    last_prompt_at, message_count, revision, document_checked, document)
SELECT acpx_record_id, acp_session_id, agent_session_id, agent_command, cwd, cwd_key, name,
    title, created_at, last_used_at, last_used_ms, closed, closed_at, last_prompt_at,
    message_count, revision, document_checked, document
FROM sessions ORDER BY rowid;

CREATE TABLE event_rows (
    session_key     INTEGER NOT NULL REFERENCES sessions (session_key) ON DELETE CASCADE,
    seq             INTEGER NOT NULL,
    event_version   INTEGER NOT NULL,
    timestamp       TEXT NOT NULL,
    acp_session_id  TEXT NOT NULL,
    request_id      TEXT,
    stream          TEXT NOT NULL,
    source          TEXT NOT NULL,
    type            TEXT NOT NULL,
    payload         TEXT NOT NULL,
    extra           TEXT,
    bytes           INTEGER NOT NULL,
    PRIMARY KEY (session_key, seq)
) STRICT, WITHOUT ROWID;

INSERT INTO event_rows (session_key, seq, event_version, timestamp, acp_session_id, request_id,
    stream, source, type, payload, extra, bytes)
SELECT s.session_key, e.seq, e.event_version, e.timestamp, e.acp_session_id, e.request_id,
    e.stream, e.source, e.type, e.payload, e.extra, e.bytes
FROM events e JOIN sessions_v2 s USING (acpx_record_id)
ORDER BY s.session_key, e.seq;

CREATE TABLE event_logs_v2 (
    session_key     INTEGER PRIMARY KEY REFERENCES sessions (session_key) ON DELETE CASCADE,
    last_seq        INTEGER NOT NULL DEFAULT 0,
    retained_bytes  INTEGER NOT NULL DEFAULT 0,
    last_write_at   TEXT
) STRICT;

INSERT INTO event_logs_v2 (session_key, last_seq, retained_bytes, last_write_at)
SELECT s.session_key, l.last_seq, l.retained_bytes, l.last_write_at
FROM event_logs l JOIN sessions_v2 s USING (acpx_record_id);

-- Parents last. With foreign_keys off nothing cascades; `messages` keeps referring to
-- `sessions (acpx_record_id)`, which is the rebuilt table once it is renamed.
DROP TABLE events;
DROP TABLE event_logs;
DROP TABLE sessions;
ALTER TABLE sessions_v2 RENAME TO sessions;
ALTER TABLE event_logs_v2 RENAME TO event_logs;

CREATE INDEX sessions_by_last_used ON sessions (last_used_ms DESC, acpx_record_id);
CREATE INDEX sessions_by_cwd ON sessions (cwd_key, last_used_ms DESC, acpx_record_id);

CREATE TRIGGER sessions_document_edited
AFTER UPDATE OF acp_session_id, agent_session_id, agent_command, cwd, cwd_key, name, title,
    created_at, last_used_at, last_used_ms, closed, closed_at, last_prompt_at, message_count,
    document ON sessions
FOR EACH ROW WHEN NEW.revision = OLD.revision
BEGIN
    UPDATE sessions SET document_checked = 0 WHERE session_key = NEW.session_key;
END;

CREATE INDEX events_by_type ON event_rows (session_key, type, seq);
CREATE INDEX events_by_request ON event_rows (session_key, request_id, seq)
    WHERE request_id IS NOT NULL;
CREATE INDEX events_by_time ON event_rows (timestamp);

-- The events with their record id, column for column the version 1 `events` table.
CREATE VIEW events AS
SELECT s.acpx_record_id, e.seq, e.event_version, e.timestamp, e.acp_session_id, e.request_id,
    e.stream, e.source, e.type, e.payload, e.extra, e.bytes
FROM event_rows e JOIN sessions s USING (session_key);
"#;

/// Version 3: a message's text in parts of 64 KiB (`rows::PART_BYTES`), each repeating the
/// last 1 KiB of the one before (`rows::OVERLAP_BYTES`).
///
/// One row per message made FTS5 tokenize a whole long reply at once (its pending term list
/// grows with the row: over 100 MB of memory for an 8 MB reply) and re-index it whole at
/// every save while it streamed. Now a save re-indexes only the parts that changed. The rows
/// keep their rowids, so the FTS index (keyed by rowid, over the same texts) stays valid; a
/// long message of an earlier version stays one part until its session is next saved, which
/// search handles like any part (the overlap rule holds trivially).
const V3: &str = r#"
ALTER TABLE messages RENAME TO messages_v2;

CREATE TABLE messages (
    acpx_record_id  TEXT NOT NULL REFERENCES sessions (acpx_record_id) ON DELETE CASCADE,
    message_index   INTEGER NOT NULL,
    -- 0, 1, …: the part of the message's text this row holds.
    part            INTEGER NOT NULL,
    role            TEXT NOT NULL,
    message_id      TEXT,
    -- The part's text, from byte `text_start` of the message's text (1 KiB before the
    -- part's own start, except for part 0) to the next part's own start.
    text            TEXT NOT NULL,
    -- A hash of role, message id and this part's text (FNV-1a through schema version 5,
    -- text_hash.rs since 6): a save re-indexes only the parts that changed.
    text_hash       INTEGER NOT NULL,
    text_start      INTEGER NOT NULL,
    PRIMARY KEY (acpx_record_id, message_index, part)
) STRICT;

INSERT INTO messages (rowid, acpx_record_id, message_index, part, role, message_id, text,
    text_hash, text_start)
SELECT rowid, acpx_record_id, message_index, 0, role, message_id, text, text_hash, 0
FROM messages_v2;

-- Its FTS triggers go with it.
DROP TABLE messages_v2;

CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts (rowid, text) VALUES (NEW.rowid, NEW.text);
END;
CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, text) VALUES ('delete', OLD.rowid, OLD.text);
END;
CREATE TRIGGER messages_fts_update AFTER UPDATE OF text ON messages BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, text) VALUES ('delete', OLD.rowid, OLD.text);
    INSERT INTO messages_fts (rowid, text) VALUES (NEW.rowid, NEW.text);
END;
"#;

/// Version 4: `sessions.document` accepts a BLOB as well as TEXT (`ANY`), always holding the
/// JSON text of `session.json`.
///
/// A turn's save writes the document into its row through SQLite's incremental blob I/O (see
/// `rows::Document::Streamed`): the row is first stored with `zeroblob(n)`, which SQLite keeps
/// as a length without materializing the zeros. A `TEXT` placeholder of `n` bytes (all that a
/// `STRICT` `TEXT` column accepts) cost SQLite two transient copies of the document (the
/// zeros, and the record built from them): 16 MB at the end of a 1M-chunk turn. The JSON
/// functions read JSON text held in a BLOB (a rule SQLite keeps for compatibility since
/// 3.45.1; older versions read any BLOB as text); `CAST(document AS TEXT)` gives the text
/// whatever the type.
///
/// The table is rebuilt (a column's type cannot be altered), keeping every key and the
/// `AUTOINCREMENT` high-water mark, so that no key of a deleted session is ever reused. The
/// `events` view is dropped first and made again: a rename is refused while a view refers to
/// a table that does not exist.
const V4: &str = r#"
DROP VIEW events;

CREATE TABLE sessions_v4 (
    session_key       INTEGER PRIMARY KEY AUTOINCREMENT,
    acpx_record_id    TEXT NOT NULL UNIQUE,
    acp_session_id    TEXT NOT NULL,
    agent_session_id  TEXT,
    agent_command     TEXT NOT NULL,
    cwd               TEXT NOT NULL,
    cwd_key           TEXT,
    name              TEXT,
    title             TEXT,
    created_at        TEXT NOT NULL,
    last_used_at      TEXT NOT NULL,
    last_used_ms      INTEGER NOT NULL,
    closed            INTEGER NOT NULL CHECK (closed IN (0, 1)),
    closed_at         TEXT,
    last_prompt_at    TEXT,
    message_count     INTEGER NOT NULL,
    revision          INTEGER NOT NULL,
    document_checked  INTEGER NOT NULL DEFAULT 0,
    -- session.json exactly as the file store writes it: TEXT, or the same bytes as a BLOB
    -- (written in place by a turn's save).
    document          ANY NOT NULL CHECK (typeof(document) IN ('text', 'blob'))
) STRICT;

INSERT INTO sessions_v4 (session_key, acpx_record_id, acp_session_id, agent_session_id,
    agent_command, cwd, cwd_key, name, title, created_at, last_used_at, last_used_ms, closed,
    closed_at, last_prompt_at, message_count, revision, document_checked, document)
SELECT session_key, acpx_record_id, acp_session_id, agent_session_id, agent_command, cwd,
    cwd_key, name, title, created_at, last_used_at, last_used_ms, closed, closed_at,
    last_prompt_at, message_count, revision, document_checked, document
FROM sessions ORDER BY session_key;

INSERT INTO sqlite_sequence (name, seq)
SELECT 'sessions_v4', 0 WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'sessions_v4');
UPDATE sqlite_sequence
SET seq = max(seq, coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'sessions'), 0))
WHERE name = 'sessions_v4';

DROP TABLE sessions;
ALTER TABLE sessions_v4 RENAME TO sessions;

CREATE INDEX sessions_by_last_used ON sessions (last_used_ms DESC, acpx_record_id);
CREATE INDEX sessions_by_cwd ON sessions (cwd_key, last_used_ms DESC, acpx_record_id);

CREATE TRIGGER sessions_document_edited
AFTER UPDATE OF acp_session_id, agent_session_id, agent_command, cwd, cwd_key, name, title,
    created_at, last_used_at, last_used_ms, closed, closed_at, last_prompt_at, message_count,
    document ON sessions
FOR EACH ROW WHEN NEW.revision = OLD.revision
BEGIN
    UPDATE sessions SET document_checked = 0 WHERE session_key = NEW.session_key;
END;

CREATE VIEW events AS
SELECT s.acpx_record_id, e.seq, e.event_version, e.timestamp, e.acp_session_id, e.request_id,
    e.stream, e.source, e.type, e.payload, e.extra, e.bytes
FROM event_rows e JOIN sessions s USING (session_key);
"#;

/// Version 5: the list's index covers the columns a list reads.
///
/// `sessions_by_last_used` gave the order, and each row was then read from the table for its
/// columns: a row holds its document (kilobytes, megabytes for a long conversation), so a list
/// of 10,000 sessions read about 10,000 table pages (40 MB through the page cache), most of its
/// time. `sessions_list` has the same leading key and carries every column of
/// `rows::SUMMARY_COLUMNS`, so an unfiltered list (and the first page of any ordered list) is
/// one scan of a 1.3 MB index: `sessions list` of 10,000 sessions took 41 ms of CPU instead of
/// 67 (docs/BENCHMARKS.md § Evening run). A save changes some of these columns, which costs an
/// index entry rewritten per save.
const V5: &str = r#"
DROP INDEX sessions_by_last_used;
CREATE INDEX sessions_list ON sessions (last_used_ms DESC, acpx_record_id, acp_session_id,
    agent_session_id, agent_command, cwd, name, title, created_at, last_used_at, closed,
    closed_at, last_prompt_at, message_count, revision, document_checked);
"#;

/// Version 6: the document has a table of its own, `session_documents`; the rest of the row
/// is `session_rows`, and `sessions` is a view joining the two, column for column the table
/// of version 5 (its `document` the JSON text without the padding of `document::capacity`).
///
/// An `UPDATE` of any column made SQLite read and rebuild the whole row, document included:
/// a save of a session holding an 8 MB document cost 25–34 ms for that alone (see
/// `document`). Now a save updates a row of a few hundred bytes and writes the document in
/// place.
///
/// The first rename carries the foreign keys of `event_rows`, `event_logs` and `messages` over
/// to `session_rows` (SQLite rewrites references to a renamed table); the table is then rebuilt
/// without `document` (`DROP COLUMN` cannot edit the version 4 text, whose last column is
/// preceded by comments), keeping every key and the `AUTOINCREMENT` high-water mark as
/// version 4 did.
/// The triggers on the view let a hand-written `UPDATE`, `INSERT` or `DELETE` on `sessions`
/// work as before (marking the row unchecked as before).
///
/// It also computes `messages.text_hash` again with the hash of version 6 (`text_hash`, 8
/// bytes a step instead of FNV-1a's one), through the SQL function the migration installs:
/// otherwise the first save of every session after the upgrade would re-index all its text.
const V6: &str = r#"
DROP VIEW events;
DROP TRIGGER sessions_document_edited;
ALTER TABLE sessions RENAME TO session_rows;
CREATE TABLE session_documents (
    session_key  INTEGER PRIMARY KEY REFERENCES session_rows (session_key) ON DELETE CASCADE,
    -- session.json as the file store writes it, as TEXT or BLOB; from 64 KiB on, followed by
    -- spaces up to the row's capacity (document::capacity).
    document     ANY NOT NULL CHECK (typeof(document) IN ('text', 'blob'))
) STRICT;
INSERT INTO session_documents (session_key, document)
SELECT session_key, document FROM session_rows ORDER BY session_key;
CREATE TABLE session_rows_v6 (
    session_key       INTEGER PRIMARY KEY AUTOINCREMENT,
    acpx_record_id    TEXT NOT NULL UNIQUE,
    acp_session_id    TEXT NOT NULL,
    agent_session_id  TEXT,
    agent_command     TEXT NOT NULL,
    cwd               TEXT NOT NULL,
    cwd_key           TEXT,
    name              TEXT,
    title             TEXT,
    created_at        TEXT NOT NULL,
    last_used_at      TEXT NOT NULL,
    last_used_ms      INTEGER NOT NULL,
    closed            INTEGER NOT NULL CHECK (closed IN (0, 1)),
    closed_at         TEXT,
    last_prompt_at    TEXT,
    message_count     INTEGER NOT NULL,
    revision          INTEGER NOT NULL,
    document_checked  INTEGER NOT NULL DEFAULT 0
) STRICT;
INSERT INTO session_rows_v6 (session_key, acpx_record_id, acp_session_id, agent_session_id,
    agent_command, cwd, cwd_key, name, title, created_at, last_used_at, last_used_ms, closed,
    closed_at, last_prompt_at, message_count, revision, document_checked)
SELECT session_key, acpx_record_id, acp_session_id, agent_session_id, agent_command, cwd,
    cwd_key, name, title, created_at, last_used_at, last_used_ms, closed, closed_at,
    last_prompt_at, message_count, revision, document_checked
FROM session_rows ORDER BY session_key;
INSERT INTO sqlite_sequence (name, seq)
SELECT 'session_rows_v6', 0
WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'session_rows_v6');
UPDATE sqlite_sequence
SET seq = max(seq, coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'session_rows'), 0))
WHERE name = 'session_rows_v6';
DROP TABLE session_rows;
-- A user's own view of `sessions` now names `session_rows` (the first rename rewrote it), a
-- table this rename is about to give back. Without the legacy rule SQLite would check every
-- view first and refuse the rename, and the migration with it, at every open.
PRAGMA legacy_alter_table = ON;
ALTER TABLE session_rows_v6 RENAME TO session_rows;
PRAGMA legacy_alter_table = OFF;
CREATE INDEX sessions_by_cwd ON session_rows (cwd_key, last_used_ms DESC, acpx_record_id);
CREATE INDEX sessions_list ON session_rows (last_used_ms DESC, acpx_record_id, acp_session_id,
    agent_session_id, agent_command, cwd, name, title, created_at, last_used_at, closed,
    closed_at, last_prompt_at, message_count, revision, document_checked);
CREATE TRIGGER session_rows_edited
AFTER UPDATE OF acp_session_id, agent_session_id, agent_command, cwd, cwd_key, name, title,
    created_at, last_used_at, last_used_ms, closed, closed_at, last_prompt_at, message_count
    ON session_rows
FOR EACH ROW WHEN NEW.revision = OLD.revision
BEGIN
    UPDATE session_rows SET document_checked = 0 WHERE session_key = NEW.session_key;
END;
-- acpx writes a document before the row's new revision, which marks the row checked again;
-- any other change of a document leaves it unchecked.
CREATE TRIGGER session_documents_edited
AFTER UPDATE OF document ON session_documents
BEGIN
    UPDATE session_rows SET document_checked = 0 WHERE session_key = NEW.session_key;
END;
CREATE VIEW sessions AS
SELECT r.session_key, r.acpx_record_id, r.acp_session_id, r.agent_session_id, r.agent_command,
    r.cwd, r.cwd_key, r.name, r.title, r.created_at, r.last_used_at, r.last_used_ms, r.closed,
    r.closed_at, r.last_prompt_at, r.message_count, r.revision, r.document_checked,
    rtrim(CAST(d.document AS TEXT), ' ') AS document
FROM session_rows r LEFT JOIN session_documents d USING (session_key);
CREATE TRIGGER sessions_update INSTEAD OF UPDATE ON sessions
BEGIN
    UPDATE session_rows SET acpx_record_id = NEW.acpx_record_id,
        acp_session_id = NEW.acp_session_id, agent_session_id = NEW.agent_session_id,
        agent_command = NEW.agent_command, cwd = NEW.cwd, cwd_key = NEW.cwd_key,
        name = NEW.name, title = NEW.title, created_at = NEW.created_at,
        last_used_at = NEW.last_used_at, last_used_ms = NEW.last_used_ms, closed = NEW.closed,
        closed_at = NEW.closed_at, last_prompt_at = NEW.last_prompt_at,
        message_count = NEW.message_count, revision = NEW.revision,
        document_checked = NEW.document_checked
    WHERE session_key = OLD.session_key;
    UPDATE session_documents SET document = NEW.document
    WHERE session_key = OLD.session_key AND NEW.document IS NOT OLD.document;
END;
CREATE TRIGGER sessions_insert INSTEAD OF INSERT ON sessions
BEGIN
    INSERT INTO session_rows (session_key, acpx_record_id, acp_session_id, agent_session_id,
        agent_command, cwd, cwd_key, name, title, created_at, last_used_at, last_used_ms,
        closed, closed_at, last_prompt_at, message_count, revision, document_checked)
    VALUES (NEW.session_key, NEW.acpx_record_id, NEW.acp_session_id, NEW.agent_session_id,
        NEW.agent_command, NEW.cwd, NEW.cwd_key, NEW.name, NEW.title, NEW.created_at,
        NEW.last_used_at, NEW.last_used_ms, NEW.closed, NEW.closed_at, NEW.last_prompt_at,
        NEW.message_count, NEW.revision, coalesce(NEW.document_checked, 0));
    INSERT INTO session_documents (session_key, document)
    VALUES ((SELECT session_key FROM session_rows WHERE acpx_record_id = NEW.acpx_record_id),
        NEW.document);
END;
CREATE TRIGGER sessions_delete INSTEAD OF DELETE ON sessions
BEGIN
    DELETE FROM session_documents WHERE session_key = OLD.session_key;
    DELETE FROM session_rows WHERE session_key = OLD.session_key;
END;
CREATE VIEW events AS
SELECT s.acpx_record_id, e.seq, e.event_version, e.timestamp, e.acp_session_id, e.request_id,
    e.stream, e.source, e.type, e.payload, e.extra, e.bytes
FROM event_rows e JOIN session_rows s USING (session_key);
-- The search parts' hashes, in the function of version 6 (text_hash.rs); the FTS index is
-- untouched (its triggers follow `text` only).
UPDATE messages SET text_hash = acpx_part_hash(role, message_id, text);
"#;

/// The condition of `events_by_type` since version 7, which a query must repeat word for word
/// for SQLite to use that partial index (`events::events_query`).
pub(crate) const TYPED_ROWS: &str = "type <> 'session_update'";

/// Version 7: `events_by_type` leaves out `session_update` rows.
///
/// They are almost every row of a streamed log (10,000 of the 10,010 rows of a 10k-chunk
/// prompt), and a query for them reads along the primary key anyway, since nearly every row
/// matches. Indexed, each cost an entry written at its append and deleted at its trim: a
/// third of the cost of a retention trim and a tenth of an append's (docs/BENCHMARKS.md §
/// Schema version 7). The other types keep their index. A long-lived older acpx still
/// running (a queue owner) keeps working on the new schema: it writes through the same
/// tables, and reads by request id or by several types, never through this index. (An older
/// `sessions events --type X` caught between two pages by the upgrade fails its next page.)
/// `IF EXISTS`: a database whose index a user dropped still upgrades.
const V7: &str = r#"
DROP INDEX IF EXISTS events_by_type;
CREATE INDEX events_by_type ON event_rows (session_key, type, seq)
    WHERE type <> 'session_update';
"#;

/// Version 8: a request's events are found through the seq range of `event_requests`, no
/// longer through an index entry per row; `events_by_time` leaves out `session_update` rows.
///
/// After version 7, `events_by_request` and `events_by_time` were two thirds of what a
/// retention trim executed, and a tenth of an append: each row of a streamed log had an entry
/// in both, written at its append and deleted at its trim (docs/BENCHMARKS.md § Schema
/// version 8). A request's rows lie within one short seq range (a turn), so a range per
/// request (one row, extended by each append batch that holds the request) finds them along
/// the primary key. `events_by_time` keeps the rows a query by time looks for across
/// sessions (turn starts and ends, errors, operations); the documented queries repeat its
/// condition. `messages_hashes` lets a save read the search parts' hashes without reading
/// their text (8–11 MB for a session holding a 1M-chunk reply: 6.5 ms of system time per
/// save). An older acpx still running would append without extending the ranges, so
/// the upgrade waits for one that holds a session's writer lock
/// (`connection::refuse_upgrade_under_old_writers`).
const V8: &str = r#"
CREATE TABLE event_requests (
    session_key  INTEGER NOT NULL REFERENCES session_rows (session_key) ON DELETE CASCADE,
    request_id   TEXT NOT NULL,
    -- The lowest and highest seq of the request's rows. Retention does not raise first_seq:
    -- the range only has to hold every row the request still has.
    first_seq    INTEGER NOT NULL,
    last_seq     INTEGER NOT NULL,
    PRIMARY KEY (session_key, request_id)
) STRICT, WITHOUT ROWID;
INSERT INTO event_requests (session_key, request_id, first_seq, last_seq)
SELECT session_key, request_id, min(seq), max(seq) FROM event_rows
-- Rows a hand delete without `foreign_keys` left without their session get no range: the
-- migration must not add rows without a parent (connection::migrate_steps).
WHERE request_id IS NOT NULL AND session_key IN (SELECT session_key FROM session_rows)
GROUP BY session_key, request_id;
DROP INDEX IF EXISTS events_by_request;
DROP INDEX IF EXISTS events_by_time;
CREATE INDEX events_by_time ON event_rows (timestamp) WHERE type <> 'session_update';
-- A save reads every part's hash to find the parts that changed. `text_hash` comes after
-- `text` in the row, so reading it from the table walked each text's overflow pages: the
-- whole conversation's text, read at every save. The index holds all that read needs.
CREATE INDEX messages_hashes ON messages (acpx_record_id, message_index, part, text_hash,
    text_start);
"#;

/// Version 9: each row keeps its session's usage (`usage_column`), so that
/// `acpx sessions usage` sums rows, never documents; `sessions_list` covers it, and a hand
/// edit of it marks the row unchecked like any other column's. The rows already there get
/// theirs from their documents (`acpx_session_usage`, a function of the migration); one
/// whose document does not parse keeps NULL and is read from its document, as an unchecked
/// row is. (An older acpx refuses the upgraded file; one still holding a writer lock delays
/// the upgrade, `connection::refuse_upgrade_under_old_writers`.)
///
/// The column itself is added just before this step (`connection::migrate_steps`, through
/// [`add_usage_column`]), only when missing: a file whose version was set back by hand keeps
/// the one it has.
const V9: &str = r#"
UPDATE session_rows SET usage = acpx_session_usage(
    (SELECT d.document FROM session_documents d WHERE d.session_key = session_rows.session_key));
DROP INDEX IF EXISTS sessions_list;
CREATE INDEX sessions_list ON session_rows (last_used_ms DESC, acpx_record_id, acp_session_id,
    agent_session_id, agent_command, cwd, name, title, created_at, last_used_at, closed,
    closed_at, last_prompt_at, message_count, revision, document_checked, usage);
DROP TRIGGER IF EXISTS session_rows_edited;
CREATE TRIGGER session_rows_edited
AFTER UPDATE OF acp_session_id, agent_session_id, agent_command, cwd, cwd_key, name, title,
    created_at, last_used_at, last_used_ms, closed, closed_at, last_prompt_at, message_count,
    usage ON session_rows
FOR EACH ROW WHEN NEW.revision = OLD.revision
BEGIN
    UPDATE session_rows SET document_checked = 0 WHERE session_key = NEW.session_key;
END;
"#;
