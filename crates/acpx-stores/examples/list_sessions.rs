//! Lists the sessions of an acpx home on any backend, as `acpx --store <backend> sessions list`
//! would find them.
//!
//! `cargo run -p acpx-stores --example list_sessions -- sqlite ~/.acpx`
//! (`postgres` takes its URL from `ACPX_STORE_URL`).

use acpx_model::ListQuery;
use acpx_stores::{Backend, OpenStore, StoreConfig};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let backend = match args.next().as_deref() {
        Some("fs") | None => Backend::Fs,
        Some("sqlite") => Backend::Sqlite,
        Some("postgres") => Backend::Postgres,
        Some(other) => {
            return Err(format!("unknown backend {other:?}: fs, sqlite or postgres").into())
        }
    };
    let home = match args.next() {
        Some(h) => h.into(),
        None => std::env::temp_dir().join("acpx-stores-example"),
    };
    let config = StoreConfig::new(backend, home).from_env()?;
    let store = OpenStore::open(&config).await?;
    println!(
        "{} store at {}",
        backend.as_str(),
        store.location(&config.home)
    );
    for s in store.as_dyn().list(&ListQuery::default()).await?.sessions {
        println!(
            "{}  {}  {} messages",
            s.acpx_record_id, s.cwd, s.message_count
        );
    }
    Ok(())
}
