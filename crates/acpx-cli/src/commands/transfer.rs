//! `sessions export` and `sessions import`.
//!
//! The archive format (`--as archive`, the default) is NDJSON: the first line is
//! `{"schema":"acpx.export.v1","exportedAt":…,"session":<session.json>}`, every following line
//! is one event envelope exactly as in the session's log. `sessions import` reads an archive,
//! or a `session.json` with its log given by `--events`.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use acpx_model::{
    Durability, EventEnvelope, EventQuery, RecordId, SessionRecord, Store, Timestamp,
};
use serde_json::{json, Map, Value};

use crate::cli::{ExportArgs, ExportKind, ImportArgs};
use crate::commands::{node_import, select};
use crate::context::Ctx;
use crate::error::{CliError, CliResult};
use crate::render::{self, action, record_identity};

/// The `schema` of an archive's first line.
pub const ARCHIVE_SCHEMA: &str = "acpx.export.v1";

/// Events read per page when walking a whole log.
const PAGE: usize = 5000;

/// Calls `f` with every event of the session's log, oldest first, page by page.
pub async fn for_each_event(
    store: &dyn Store,
    id: &RecordId,
    mut f: impl FnMut(&EventEnvelope) -> CliResult<()>,
) -> CliResult<u64> {
    let mut from = 0;
    let mut n = 0;
    loop {
        let page = store
            .read_events(
                id,
                &EventQuery {
                    from_seq: from,
                    limit: Some(PAGE),
                    ..EventQuery::default()
                },
            )
            .await?;
        for e in &page.events {
            f(e)?;
            n += 1;
        }
        match page.next_seq {
            Some(s) => from = s,
            None => return Ok(n),
        }
    }
}

fn create_private(path: &Path) -> CliResult<std::fs::File> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| CliError::runtime(format!("cannot create {}: {e}", dir.display())))?;
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| CliError::runtime(format!("cannot write {}: {e}", path.display())))
}

/// Writes a session's whole log to `path` as NDJSON; returns the number of events.
pub async fn write_log_file(store: &dyn Store, id: &RecordId, path: &Path) -> CliResult<u64> {
    let mut f = std::io::BufWriter::new(create_private(path)?);
    let mut buf = Vec::new();
    let n = for_each_event(store, id, |e| {
        buf.clear();
        e.write_ndjson_line(&mut buf);
        f.write_all(&buf)
            .map_err(|err| CliError::runtime(format!("cannot write {}: {err}", path.display())))
    })
    .await?;
    f.flush()
        .and_then(|_| f.get_ref().sync_all())
        .map_err(|e| CliError::runtime(format!("cannot write {}: {e}", path.display())))?;
    Ok(n)
}

/// `sessions export`.
pub async fn export(ctx: &Ctx, a: ExportArgs) -> CliResult<()> {
    let r = select(ctx, &a.target).await?;
    let store = ctx.store().await?;
    let mut sink: Box<dyn Write> = match &a.output {
        Some(p) => Box::new(std::io::BufWriter::new(create_private(p)?)),
        None => Box::new(std::io::stdout().lock()),
    };
    let where_ = a
        .output
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "stdout".into());
    let werr = |e: std::io::Error| CliError::runtime(format!("cannot write to {where_}: {e}"));
    let mut events = 0;
    match a.kind {
        ExportKind::Markdown => sink
            .write_all(render::markdown(&r).as_bytes())
            .map_err(werr)?,
        ExportKind::Json => sink.write_all(&r.to_json_vec()).map_err(werr)?,
        ExportKind::Ndjson | ExportKind::Archive => {
            if a.kind == ExportKind::Archive {
                let head = json!({
                    "schema": ARCHIVE_SCHEMA,
                    "exportedAt": Timestamp::now(),
                    "session": r,
                });
                let mut line = serde_json::to_vec(&head).unwrap_or_default();
                line.push(b'\n');
                sink.write_all(&line).map_err(werr)?;
            }
            let mut buf = Vec::new();
            events = for_each_event(&*store, &r.acpx_record_id, |e| {
                buf.clear();
                e.write_ndjson_line(&mut buf);
                sink.write_all(&buf)
                    .map_err(|e| CliError::runtime(format!("cannot write to {where_}: {e}")))
            })
            .await?;
        }
    }
    sink.flush().map_err(werr)?;
    drop(sink);
    if let Some(p) = &a.output {
        if ctx.out.is_json() {
            let mut m = record_identity(&r);
            m.insert("path".into(), json!(p.to_string_lossy()));
            m.insert("kind".into(), json!(format!("{:?}", a.kind).to_lowercase()));
            m.insert("events".into(), json!(events));
            ctx.out.json(&action("session_exported", m));
        } else {
            ctx.out
                .note(&format!("exported {} to {}", r.acpx_record_id, p.display()));
        }
    }
    Ok(())
}

/// What an import file holds.
struct Parsed {
    record: SessionRecord,
    events: Vec<EventEnvelope>,
}

fn parse_events(text: &str, origin: &Path, first_line: usize) -> CliResult<Vec<EventEnvelope>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let e = EventEnvelope::from_ndjson_line(line.as_bytes()).map_err(|err| {
            CliError::usage(format!(
                "{} line {}: not an event envelope: {err}",
                origin.display(),
                first_line + i
            ))
        })?;
        out.push(e);
    }
    Ok(out)
}

fn read_text(path: &Path) -> CliResult<String> {
    std::fs::read_to_string(path)
        .map_err(|e| CliError::usage(format!("cannot read {}: {e}", path.display())))
}

fn parse_import(file: &Path, events: Option<&PathBuf>) -> CliResult<Parsed> {
    let text = read_text(file)?;
    let first = text.lines().next().unwrap_or("");
    if let Ok(Value::Object(head)) = serde_json::from_str::<Value>(first) {
        if head.get("schema").and_then(Value::as_str) == Some(ARCHIVE_SCHEMA) {
            let session = head.get("session").cloned().unwrap_or(Value::Null);
            let bytes = serde_json::to_vec(&session).unwrap_or_default();
            let origin = format!("{} (line 1, session)", file.display());
            let record = SessionRecord::from_json_slice(&bytes, &origin)
                .map_err(|e| CliError::usage(e.to_string()))?;
            let rest = text.split_once('\n').map_or("", |(_, r)| r);
            if events.is_some() {
                return Err(CliError::usage(
                    "--events is for a session.json import; an archive carries its own events",
                ));
            }
            return Ok(Parsed {
                record,
                events: parse_events(rest, file, 2)?,
            });
        }
    }
    let value: Value = serde_json::from_str(&text).map_err(|e| {
        CliError::usage(format!(
            "{}: neither an acpx archive nor a session.json: {e}",
            file.display()
        ))
        .with_hint("export a session with `acpx sessions export --as archive -o FILE`")
    })?;
    if value.get("acpx_record_id").is_some() {
        return Err(CliError::usage(format!(
            "{} is a session written by the Node acpx",
            file.display()
        ))
        .with_hint("import Node sessions with `acpx sessions import --from-node-acpx <dir>`"));
    }
    let record = SessionRecord::from_json_slice(text.as_bytes(), &file.display().to_string())
        .map_err(|e| CliError::usage(e.to_string()))?;
    let events = match events {
        Some(p) => parse_events(&read_text(p)?, p, 1)?,
        None => Vec::new(),
    };
    Ok(Parsed { record, events })
}

/// Stores `record` with `events` as a new session: create, append, then record the log's
/// state in the snapshot. The events' seqs must start at 1 and have no gaps.
pub async fn store_new_session(
    store: &dyn Store,
    mut record: SessionRecord,
    events: &[EventEnvelope],
) -> CliResult<SessionRecord> {
    let id = record.acpx_record_id.clone();
    for (i, e) in events.iter().enumerate() {
        if e.seq != i as u64 + 1 {
            return Err(CliError::usage(format!(
                "session {id}: event {} has seq {}, expected {}: the log must start at seq 1 without gaps \
                 (a log whose oldest events were rotated out cannot be imported as is)",
                i + 1,
                e.seq,
                i + 1
            )));
        }
    }
    record.revision = 0;
    record.pid = None;
    store.create(&mut record).await?;
    let lock = store.lock(&id, std::time::Duration::from_secs(30)).await?;
    let mut state = None;
    for chunk in events.chunks(1000) {
        state = Some(store.append(&lock, chunk, Durability::Flush).await?);
    }
    store.flush(&id).await?;
    let state = match state {
        Some(s) => s,
        None => store.event_log_state(&id).await?,
    };
    record.acpx.event_log = state;
    store.save(&mut record).await?;
    drop(lock);
    Ok(record)
}

/// `sessions import`.
pub async fn import(ctx: &Ctx, a: ImportArgs) -> CliResult<()> {
    if let Some(dir) = &a.from_node_acpx {
        return node_import::run(ctx, dir, a.new_id).await;
    }
    let Some(file) = &a.file else {
        return Err(CliError::usage(
            "sessions import needs a FILE or --from-node-acpx <dir>",
        ));
    };
    let Parsed {
        mut record,
        mut events,
    } = parse_import(file, a.events.as_ref())?;
    let store = ctx.store().await?;
    let original = record.acpx_record_id.clone();
    if a.new_id {
        let id = RecordId::generate();
        for e in &mut events {
            e.acpx_record_id = id.clone();
        }
        record.acpx_record_id = id;
    } else if events.iter().any(|e| e.acpx_record_id != original) {
        return Err(CliError::usage(format!(
            "{}: the events belong to another session than {original}",
            file.display()
        )));
    }
    let stored = match store_new_session(&*store, record, &events).await {
        Err(e) if e.detail_code.as_deref() == Some("STORE_ALREADY_EXISTS") => {
            return Err(
                CliError::usage(format!("session {original} already exists in this store"))
                    .with_hint(
                    "pass --new-id to import it under a fresh id, or delete the stored one first",
                ),
            )
        }
        other => other?,
    };
    if ctx.out.is_json() {
        let mut m: Map<String, Value> = record_identity(&stored);
        m.insert("events".into(), json!(events.len()));
        if a.new_id {
            m.insert("importedFrom".into(), json!(original));
        }
        ctx.out.json(&action("session_imported", m));
    } else if ctx.out.is_text() {
        ctx.out.line(&format!(
            "imported {} ({} messages, {} events)",
            stored.acpx_record_id,
            stored.thread.messages.len(),
            events.len()
        ));
    } else {
        ctx.out.line(stored.acpx_record_id.as_str());
    }
    Ok(())
}
