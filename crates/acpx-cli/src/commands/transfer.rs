//! `sessions export` and `sessions import`: the files, and rendering. The archive format
//! (`--as archive`, the default), reading it back and storing the session are
//! [`acpx_runtime::ops::transfer`]'s; `--from-node-acpx` is [`crate::commands::node_import`].

use std::io::Write;
use std::path::Path;

use acpx_model::SessionRecord;
use acpx_printer::export::{archive_starts_late, write_export, ExportError, ExportFormat};
use acpx_runtime::ops::import_files::{open_import_files, ImportEvents, ImportFileError};
use acpx_runtime::ops::import_trust::{trust_import, ImportTrust};
use acpx_runtime::ops::transfer::{create_file_for_user, import_event_lines_with};
use acpx_runtime::ops::OpsError;

use crate::cli::{ExportArgs, ExportKind, ImportArgs, TrustArgs};
use crate::commands::{print, select};
use crate::context::Ctx;
use crate::error::{CliError, CliResult};
use acpx_printer::reports::transfer as reports;

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
    let oldest = archive_starts_late(&*store, &r.acpx_record_id, format).await?;
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
        ctx.out
            .warn(&reports::export_trimmed_warning(&r.acpx_record_id, seq));
    }
    if let Some(p) = &a.output {
        let kind = format!("{:?}", a.kind).to_lowercase();
        print(ctx, reports::exported(&r, p, &kind, events));
    }
    Ok(())
}

/// The snapshot and events of an import ([`open_import_files`]), its refusals as the user
/// sees them.
fn open_import(file: &Path, events: Option<&Path>) -> CliResult<(SessionRecord, ImportEvents)> {
    open_import_files(file, events).map_err(|e| match e {
        ImportFileError::Ops(e) => e.into(),
        e @ ImportFileError::NotASession(_) => CliError::usage(e.to_string())
            .with_hint("export a session with `acpx sessions export --as archive -o FILE`"),
        e @ ImportFileError::NodeRecord(_) => CliError::usage(e.to_string())
            .with_hint("import Node sessions with `acpx sessions import --from-node-acpx <dir>`"),
        e => CliError::usage(e.to_string()),
    })
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
    let (record, lines) = open_import(file, a.events.as_deref())?;
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
    let from = a.new_id.then_some(&original);
    print(ctx, reports::imported(&stored, events as usize, file, from));
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
    print(ctx, reports::trusted(&trusted, agent.as_deref()));
    Ok(())
}
