//! Prints a stored session as Markdown, as `acpx sessions export --as md` does.
//!
//! `cargo run -p acpx-printer --example markdown -- ~/.acpx <record-id>`

use acpx_model::RecordId;
use acpx_printer::export::{write_export, ExportFormat};
use acpx_stores::{Backend, OpenStore, StoreConfig};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(home), Some(id)) = (args.next(), args.next()) else {
        return Err("usage: markdown <acpx home> <record id>".into());
    };
    let id = RecordId::parse(&id).map_err(|e| format!("record id {id:?}: {e}"))?;
    let store = OpenStore::open(&StoreConfig::new(Backend::Fs, home.into())).await?;
    let store = store.as_dyn();
    let record = store.load(&id).await?;
    write_export(
        &*store,
        &record,
        ExportFormat::Markdown,
        &mut std::io::stdout(),
    )
    .await?;
    Ok(())
}
