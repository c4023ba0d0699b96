//! `sessions export`: a stored session written in one of the export formats, its log read
//! page by page (never whole in memory): the archive and the raw files through
//! [`acpx_runtime::ops::transfer`], Markdown through [`crate::transcript`], HTML through
//! [`crate::viewer`], ATIF and OTLP through `acpx-interchange`.

use acpx_model::{SessionRecord, Store, StoreError, Timestamp};
use acpx_runtime::ops::transfer::{for_each_event, write_archive_head};

/// What [`write_export`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportFormat {
    /// The session document and its whole log in one NDJSON file ([`archive_head`](acpx_runtime::ops::transfer::archive_head), then the
    /// events), what [`parse_import_file`](acpx_runtime::ops::transfer::parse_import_file) reads back.
    Archive,
    /// A readable Markdown transcript ([`crate::transcript::markdown`]).
    Markdown,
    /// The `session.json` document.
    Json,
    /// The NDJSON event log.
    Ndjson,
    /// An ATIF v1.8 trajectory ([`acpx_interchange::atif`]).
    Atif,
    /// An OTLP/JSON trace ([`acpx_interchange::otlp`]).
    Otlp,
    /// The self-contained HTML viewer ([`crate::viewer`]).
    Html,
}

/// Why [`write_export`] stopped.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// Reading the log failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Writing to the sink failed.
    #[error("{0}")]
    Write(#[from] std::io::Error),
    /// The session cannot be written in the asked format (an ATIF trajectory of a session
    /// without a turn).
    #[error("{0}")]
    Unsupported(String),
}

/// Where an archive of session `id` would start, when retention already removed its oldest
/// events: `sessions import` recreates a log from there, not from seq 1, which the user must
/// hear before relying on the file. `None` for another format, or a log that starts at 1.
pub async fn archive_starts_late(
    store: &dyn Store,
    id: &acpx_model::RecordId,
    format: ExportFormat,
) -> Result<Option<u64>, StoreError> {
    if format != ExportFormat::Archive {
        return Ok(None);
    }
    let query = acpx_model::EventQuery {
        limit: Some(1),
        ..acpx_model::EventQuery::default()
    };
    let first = store.read_events(id, &query).await?;
    Ok(first.events.first().map(|e| e.seq).filter(|&seq| seq > 1))
}

/// Writes `record` (and for [`ExportFormat::Archive`] and [`ExportFormat::Ndjson`] its whole
/// log, page by page: never the whole log in memory) to `sink`, then flushes it. Returns the
/// number of events written.
pub async fn write_export(
    store: &dyn Store,
    record: &SessionRecord,
    format: ExportFormat,
    sink: &mut dyn std::io::Write,
) -> Result<u64, ExportError> {
    let mut events = 0;
    match format {
        ExportFormat::Markdown => {
            // Written a piece at a time: a long conversation is never one string. The
            // first failed write ends it and is the export's error.
            let mut failed = None;
            crate::transcript::write_markdown(record, &mut |piece| {
                failed = sink.write_all(piece.as_bytes()).err();
                failed.is_none()
            });
            if let Some(e) = failed {
                return Err(ExportError::Write(e));
            }
        }
        ExportFormat::Html => {
            events = crate::viewer::write_html::<ExportError>(store, record, sink).await?
        }
        ExportFormat::Atif | ExportFormat::Otlp => {
            events = write_interchange(store, record, format, sink).await?
        }
        // Streamed: a long reply still in its spill file is never held whole.
        ExportFormat::Json => record.write_json(&mut *sink)?,
        ExportFormat::Ndjson | ExportFormat::Archive => {
            if format == ExportFormat::Archive {
                write_archive_head(record, Timestamp::now(), &mut *sink)?;
            }
            let mut buf = Vec::new();
            events = for_each_event(store, &record.acpx_record_id, |e| {
                buf.clear();
                e.write_ndjson_line(&mut buf);
                sink.write_all(&buf).map_err(ExportError::Write)
            })
            .await?;
        }
    }
    sink.flush()?;
    Ok(events)
}

/// Writes `record` as an ATIF trajectory or an OTLP trace, walking its log once, a turn at
/// a time (`acpx-interchange`).
async fn write_interchange(
    store: &dyn Store,
    record: &SessionRecord,
    format: ExportFormat,
    sink: &mut dyn std::io::Write,
) -> Result<u64, ExportError> {
    let kind = match format {
        ExportFormat::Atif => acpx_interchange::Format::Atif,
        _ => acpx_interchange::Format::Otlp,
    };
    let mut export = acpx_interchange::Export::new(kind, record);
    let n = for_each_event(store, &record.acpx_record_id, |e| {
        export.push(e, &mut *sink).map_err(ExportError::Write)
    })
    .await?;
    export.finish(&mut *sink).map_err(|e| match e.kind() {
        std::io::ErrorKind::InvalidData => ExportError::Unsupported(e.to_string()),
        _ => ExportError::Write(e),
    })?;
    Ok(n)
}
