//! `sessions export` and `sessions import`: the files, and rendering. The archive format
//! (`--as archive`, the default), reading it back and storing the session are
//! [`acpx_runtime::ops::transfer`]'s; `--from-node-acpx` is [`crate::commands::node_import`].

use std::io::Write;
use std::path::{Path, PathBuf};

use acpx_runtime::ops::transfer::{
    create_private_file, import_session, parse_events, parse_import_file, write_export,
    ExportError, ExportFormat, ImportFile, ImportedSession,
};
use acpx_runtime::ops::OpsError;

use crate::cli::{ExportArgs, ExportKind, ImportArgs};
use crate::commands::select;
use crate::context::Ctx;
use crate::error::{CliError, CliResult};
use acpx_runtime::results;

/// `sessions export`.
pub async fn export(ctx: &Ctx, a: ExportArgs) -> CliResult<()> {
    let r = select(ctx, &a.target).await?;
    let store = ctx.store().await?;
    let mut sink: Box<dyn Write> = match &a.output {
        Some(p) => Box::new(std::io::BufWriter::new(create_private_file(p)?)),
        None => Box::new(std::io::stdout().lock()),
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
    };
    let events = write_export(&*store, &r, format, &mut sink)
        .await
        .map_err(|e| match e {
            ExportError::Store(e) => CliError::from(e),
            ExportError::Write(e) => CliError::runtime(format!("cannot write to {where_}: {e}")),
        })?;
    drop(sink);
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

fn read_text(path: &Path) -> CliResult<String> {
    std::fs::read_to_string(path)
        .map_err(|e| CliError::usage(format!("cannot read {}: {e}", path.display())))
}

fn parse_import(file: &Path, events: Option<&PathBuf>) -> CliResult<ImportedSession> {
    let text = read_text(file)?;
    let origin = file.display().to_string();
    let parsed = parse_import_file(&text, &origin).map_err(|e| match e {
        OpsError::Invalid(m) if m.contains("neither an acpx archive nor a session.json") => {
            CliError::usage(m)
                .with_hint("export a session with `acpx sessions export --as archive -o FILE`")
        }
        other => other.into(),
    })?;
    match parsed {
        ImportFile::Archive(session) => {
            if events.is_some() {
                return Err(CliError::usage(
                    "--events is for a session.json import; an archive carries its own events",
                ));
            }
            Ok(session)
        }
        ImportFile::NodeRecord => Err(CliError::usage(format!(
            "{origin} is a session written by the Node acpx"
        ))
        .with_hint("import Node sessions with `acpx sessions import --from-node-acpx <dir>`")),
        ImportFile::Snapshot(record) => {
            let events = match events {
                Some(p) => parse_events(&read_text(p)?, &p.display().to_string(), 1)?,
                None => Vec::new(),
            };
            Ok(ImportedSession { record, events })
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
    let session = parse_import(file, a.events.as_ref())?;
    let store = ctx.store().await?;
    let original = session.record.acpx_record_id.clone();
    let events = session.events.len();
    let origin = file.display().to_string();
    let stored = match import_session(&*store, session, a.new_id, &origin).await {
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
    if ctx.out.is_json() {
        let from = a.new_id.then_some(&original);
        ctx.out
            .json(&results::session_imported(&stored, events, from));
    } else if ctx.out.is_text() {
        ctx.out.line(&format!(
            "imported {} ({} messages, {} events)",
            stored.acpx_record_id,
            stored.thread.messages.len(),
            events
        ));
    } else {
        ctx.out.line(stored.acpx_record_id.as_str());
    }
    Ok(())
}
