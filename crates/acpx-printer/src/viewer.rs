//! `sessions export --as html`: a session's snapshot and its whole log, read page by page,
//! through the viewer of [`acpx_render::html`] (one self-contained HTML file).

use acpx_model::{ReadMode, SessionRecord, Store, StoreError, Timestamp};
use acpx_render::html::HtmlExport;

use acpx_runtime::ops::transfer::for_each_page;

/// The page's title: the thread's title, else the session's name, else its record id.
fn title(record: &SessionRecord) -> String {
    if !record.thread.title.trim().is_empty() {
        record.thread.title.clone()
    } else if let Some(name) = record.name.as_deref().filter(|n| !n.is_empty()) {
        name.to_owned()
    } else {
        format!("session {}", record.acpx_record_id)
    }
}

/// The facts under the title.
fn meta(record: &SessionRecord, exported_at: Timestamp) -> Vec<(&'static str, String)> {
    let mut meta = vec![
        ("agent", record.agent_command.clone()),
        ("directory", record.cwd.clone()),
    ];
    if let Some(name) = &record.name {
        meta.push(("name", name.clone()));
    }
    meta.push(("record id", record.acpx_record_id.to_string()));
    meta.push(("ACP session", record.acp_session_id.clone()));
    meta.push(("created", record.created_at.to_rfc3339()));
    meta.push(("last used", record.last_used_at.to_rfc3339()));
    if let Some(closed) = record.closed_at {
        meta.push(("closed", closed.to_rfc3339()));
    }
    meta.push(("exported", exported_at.to_rfc3339()));
    meta
}

/// Writes the HTML page of `record` to `sink`; returns the number of events read. The log
/// is read a page at a time and each turn is written when it ends: memory holds one page of
/// events and one turn. Generic over the caller's error (`sessions export`'s
/// [`crate::export::ExportError`]), which takes the store's and the sink's.
pub async fn write_html<E: From<StoreError> + From<std::io::Error>>(
    store: &dyn Store,
    record: &SessionRecord,
    sink: &mut dyn std::io::Write,
) -> Result<u64, E> {
    let mut page = HtmlExport::begin(&mut *sink, &title(record), &meta(record, Timestamp::now()))?;
    let mut n = 0u64;
    // Strict, as every export: a damaged line stops it with the file and line (`fsck` repairs).
    for_each_page::<E>(store, &record.acpx_record_id, ReadMode::Strict, |events| {
        for e in events {
            page.event(e)?;
            n += 1;
        }
        Ok(())
    })
    .await?;
    page.finish()?;
    Ok(n)
}
