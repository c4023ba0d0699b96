//! `sessions export` and `sessions import`: the files, and rendering. The archive format
//! (`--as archive`, the default), reading it back and storing the session are
//! [`acpx_runtime::ops::transfer`]'s; `--from-node-acpx` is [`crate::commands::node_import`].

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use acpx_model::{EventQuery, SessionRecord};
use acpx_printer::export::{write_export, ExportError, ExportFormat};
use acpx_runtime::ops::import_trust::{trust_import, untrusted_import, ImportTrust};
use acpx_runtime::ops::transfer::{
    create_file_for_user, import_event_lines_with, read_import_source, EventLines, ImportSource,
};
use acpx_runtime::ops::OpsError;
use serde_json::{json, Value};

use crate::cli::{ExportArgs, ExportKind, ImportArgs, TrustArgs};
use crate::commands::select;
use crate::context::Ctx;
use crate::error::{CliError, CliResult};
use acpx_printer::results;

/// `sessions export`.
pub async fn export(ctx: &Ctx, a: ExportArgs) -> CliResult<()> {
    let r = select(ctx, &a.target).await?;
    let store = ctx.store().await?;
    let mut sink: Box<dyn Write> = match &a.output {
        Some(p) => Box::new(std::io::BufWriter::new(create_file_for_user(p, a.force)?)),
        // Whole pieces, not a write per line (stdout is line-buffered).
        None => Box::new(std::io::BufWriter::with_capacity(
            64 << 10,
            std::io::stdout().lock(),
        )),
    };
    let where_ = a
        .output
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "stdout".into());
    let format = match a.kind {
        ExportKind::Archive => ExportFormat::Archive,
        ExportKind::Markdown => ExportFormat::Markdown,
        ExportKind::Json => ExportFormat::Json,
        ExportKind::Ndjson => ExportFormat::Ndjson,
        ExportKind::Atif => ExportFormat::Atif,
        ExportKind::Otlp => ExportFormat::Otlp,
        ExportKind::Html => ExportFormat::Html,
    };
    // An archive is for `sessions import`, which recreates a log from seq 1 only: say so
    // when retention already removed the oldest events, before the user relies on the file.
    let oldest = if format == ExportFormat::Archive {
        let first = store
            .read_events(
                &r.acpx_record_id,
                &EventQuery {
                    limit: Some(1),
                    ..EventQuery::default()
                },
            )
            .await?;
        first.events.first().map(|e| e.seq).filter(|&seq| seq > 1)
    } else {
        None
    };
    let events = match write_export(&*store, &r, format, &mut sink).await {
        Ok(n) => n,
        // The reader of stdout went away (`… | head`): it wanted no more. Quiet and exit 0,
        // as every other command that writes to stdout (README § Output).
        Err(ExportError::Write(e))
            if a.output.is_none() && e.kind() == std::io::ErrorKind::BrokenPipe =>
        {
            return Ok(())
        }
        Err(ExportError::Store(e)) => return Err(CliError::from(e)),
        Err(ExportError::Unsupported(m)) => return Err(CliError::runtime(m)),
        Err(ExportError::Write(e)) => {
            return Err(CliError::runtime(format!("cannot write to {where_}: {e}")))
        }
    };
    drop(sink);
    if let Some(seq) = oldest {
        ctx.out.warn(&format!(
            "the store kept the log of {} from seq {seq} on (older events were removed by \
             retention; ACPX_KEEP_ROTATED_SEGMENTS=1 keeps them): the archive holds the events \
             from seq {seq} on, and `sessions import` recreates the log from there",
            r.acpx_record_id
        ));
    }
    if let Some(p) = &a.output {
        if ctx.out.is_json() {
            let kind = format!("{:?}", a.kind).to_lowercase();
            ctx.out
                .json(&results::session_exported(&r, p, &kind, events));
        } else {
            ctx.out
                .note(&format!("exported {} to {}", r.acpx_record_id, p.display()));
        }
    }
    Ok(())
}

/// Events of an import, read as they are stored.
type ImportEvents = EventLines<Box<dyn BufRead + Send>>;

fn open_reader(path: &Path) -> CliResult<Box<dyn BufRead + Send>> {
    std::fs::File::open(path)
        .map(|f| {
            Box::new(std::io::BufReader::with_capacity(256 * 1024, f)) as Box<dyn BufRead + Send>
        })
        .map_err(|e| CliError::usage(format!("cannot read {}: {e}", path.display())))
}

/// Reads the snapshot of an import (an archive's first line, or a `session.json`) and opens
/// its events (the rest of the archive, or `--events`), which are read while they are stored.
fn open_import(file: &Path, events: Option<&PathBuf>) -> CliResult<(SessionRecord, ImportEvents)> {
    let origin = file.display().to_string();
    let parsed = read_import_source(open_reader(file)?, &origin).map_err(|e| match e {
        OpsError::Invalid(m) if m.contains("neither an acpx archive nor a session.json") => {
            CliError::usage(m)
                .with_hint("export a session with `acpx sessions export --as archive -o FILE`")
        }
        other => other.into(),
    })?;
    match parsed {
        ImportSource::Archive(record, lines) => {
            if events.is_some() {
                return Err(CliError::usage(
                    "--events is for a session.json import; an archive carries its own events",
                ));
            }
            Ok((record, lines))
        }
        ImportSource::NodeRecord => Err(CliError::usage(format!(
            "{origin} is a session written by the Node acpx"
        ))
        .with_hint("import Node sessions with `acpx sessions import --from-node-acpx <dir>`")),
        ImportSource::Snapshot(record) => {
            let lines = match events {
                Some(p) => EventLines::new(open_reader(p)?, &p.display().to_string(), 1),
                None => EventLines::new(
                    Box::new(std::io::empty()) as Box<dyn BufRead + Send>,
                    &origin,
                    1,
                ),
            };
            Ok((record, lines))
        }
    }
}

/// `sessions import`.
pub async fn import(ctx: &Ctx, a: ImportArgs) -> CliResult<()> {
    if let Some(dir) = &a.from_node_acpx {
        return crate::commands::node_import::run(ctx, dir, a.new_id, a.dry_run).await;
    }
    let Some(file) = &a.file else {
        return Err(CliError::usage(
            "sessions import needs a FILE or --from-node-acpx <dir>",
        ));
    };
    let (record, lines) = open_import(file, a.events.as_ref())?;
    let store = ctx.store().await?;
    let original = record.acpx_record_id.clone();
    let trust = if a.trust {
        ImportTrust::Trusted
    } else {
        ImportTrust::Data
    };
    let stored = match import_event_lines_with(&*store, record, lines, a.new_id, trust).await {
        Err(OpsError::Store(acpx_model::StoreError::AlreadyExists(_))) => {
            return Err(
                CliError::usage(format!("session {original} already exists in this store"))
                    .with_hint(
                    "pass --new-id to import it under a fresh id, or delete the stored one first",
                ),
            )
        }
        other => other?,
    };
    let (stored, events) = stored;
    // The snapshot names the last event it folded in; a log that ends before it is an archive
    // cut short (a copy interrupted at a line boundary reads as valid NDJSON). The session is
    // kept, as imported, for `fsck --repair` to record the gap, but the user must hear of it.
    // (The log may start above seq 1, where retention had cut it: its end is its last seq.)
    let folded = stored.acpx.audit_seq;
    let last = stored.acpx.event_log.last_seq;
    if last < folded {
        ctx.out.warn(&format!(
            "{}: the imported log ends at seq {last} but the session's snapshot has folded \
             in events up to seq {folded}: events {}..{folded} are missing (a truncated \
             archive, or a session.json without its log: pass it with --events); import it \
             again from a whole file, or run `acpx fsck --repair` to record the gap",
            file.display(),
            last + 1
        ));
    }
    let events = events as usize;
    let untrusted = untrusted_import(&stored);
    if ctx.out.is_json() {
        let from = a.new_id.then_some(&original);
        let mut result = results::session_imported(&stored, events, from);
        result["trusted"] = json!(untrusted.is_none());
        ctx.out.json(&result);
    } else if ctx.out.is_text() {
        ctx.out.line(&format!(
            "imported {} ({} messages, {} events)",
            stored.acpx_record_id,
            stored.thread.message_count(),
            events
        ));
    } else {
        ctx.out.line(stored.acpx_record_id.as_str());
    }
    match &untrusted {
        Some((command, servers)) => ctx.out.note(&format!(
            "[acpx] kept as information only: its archive names the agent command {}{}; acpx \
             runs none of it until `acpx sessions trust {}` (or continues it with your agent: \
             `acpx <agent> sessions trust {}`)",
            shown(command),
            shown_servers(servers),
            stored.acpx_record_id,
            stored.acpx_record_id
        )),
        None => ctx.out.note(&format!(
            "[acpx] trusted (--trust): it runs the agent command {}{}",
            shown(&stored.agent_command),
            shown_servers(
                stored
                    .acpx
                    .extra
                    .get(acpx_runtime::mapping::MCP_SERVERS_KEY)
                    .unwrap_or(&Value::Null)
            )
        )),
    }
    Ok(())
}

/// `sessions trust`: accepts an untrusted import (see `ops::import_trust`).
pub async fn trust(ctx: &Ctx, a: TrustArgs) -> CliResult<()> {
    let target = crate::cli::Target {
        id: Some(a.id.clone()),
        session: None,
    };
    let r = crate::commands::select(ctx, &target).await?;
    let store = ctx.store().await?;
    let agent = ctx.agent.explicit.then(|| ctx.agent.command.clone());
    let trusted = trust_import(store, &r.acpx_record_id, agent.clone())
        .await
        .map_err(CliError::from)?;
    let id = &trusted.record.acpx_record_id;
    if ctx.out.is_json() {
        ctx.out.json(&json!({
            "action": "session_trusted",
            "acpxRecordId": id,
            "agentCommand": trusted.record.agent_command,
            "namedAgentCommand": trusted.named_command,
            "namedMcpServers": trusted.named_mcp_servers,
            "withYourAgent": agent.is_some(),
        }));
    } else if ctx.out.is_text() {
        ctx.out.line(&match agent {
            Some(command) => format!(
                "session {id} now runs your agent {} (its archive named {}{}, which stay unused)",
                shown(&command),
                shown(&trusted.named_command),
                shown_servers(&trusted.named_mcp_servers)
            ),
            None => format!(
                "session {id} now runs the agent command its archive names: {}{}",
                shown(&trusted.named_command),
                shown_servers(&trusted.named_mcp_servers)
            ),
        });
    }
    Ok(())
}

/// A command line as shown to a person: quoted, control characters escaped.
fn shown(command: &str) -> String {
    format!("`{}`", acpx_runtime::text::printable(command))
}

/// `, and MCP servers a (`cmd args`), b (http URL)` for ACP's array form; empty for none.
fn shown_servers(servers: &Value) -> String {
    let Some(list) = servers.as_array().filter(|l| !l.is_empty()) else {
        return String::new();
    };
    let named: Vec<String> = list
        .iter()
        .map(|s| {
            let name = s.get("name").and_then(Value::as_str).unwrap_or("?");
            let what = match s.get("command").and_then(Value::as_str) {
                Some(cmd) => {
                    let args: Vec<&str> = s
                        .get("args")
                        .and_then(Value::as_array)
                        .map(|a| a.iter().filter_map(Value::as_str).collect())
                        .unwrap_or_default();
                    std::iter::once(cmd)
                        .chain(args)
                        .collect::<Vec<_>>()
                        .join(" ")
                }
                None => s
                    .get("url")
                    .and_then(Value::as_str)
                    .unwrap_or("?")
                    .to_owned(),
            };
            format!("{} ({})", acpx_runtime::text::printable(name), shown(&what))
        })
        .collect();
    format!(", and the MCP servers {}", named.join(", "))
}
