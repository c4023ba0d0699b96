//! Says, for every session of an acpx home, whether a turn runs in it now and which process
//! drives it: a queue owner (its status, over its socket) or a `--no-owner` command (the run
//! registry), as `acpx status` does.
//!
//! `cargo run -p acpx-owner --example who_drives -- fs ~/.acpx`

use acpx_model::ListQuery;
use acpx_owner::{authority, runs, submit};
use acpx_stores::{Backend, OpenStore, StoreConfig};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let backend = match args.next().as_deref() {
        Some("fs") | None => Backend::Fs,
        Some("sqlite") => Backend::Sqlite,
        Some(other) => return Err(format!("unknown backend {other:?}: fs or sqlite").into()),
    };
    let home = match args.next() {
        Some(h) => h.into(),
        None => std::env::temp_dir().join("acpx-owner-example"),
    };
    let config = StoreConfig::new(backend, home);
    let store = OpenStore::open(&config).await?;
    // Where this store's owners and runs meet on this host.
    let dir = authority::authority_dir(&config.identity())?;
    for s in store.as_dyn().list(&ListQuery::default()).await?.sessions {
        let id = &s.acpx_record_id;
        let driver = match submit::status(&dir, id).await? {
            Some(status) => format!("queue owner (pid {})", status.pid),
            None => match runs::probe(&dir, id)? {
                runs::Probe::Running(_) => "a --no-owner command".to_owned(),
                runs::Probe::Dead(_) => "nobody (a run died mid-turn)".to_owned(),
                runs::Probe::Idle => "nobody".to_owned(),
            },
        };
        println!("{id}  {}  driven by {driver}", s.cwd);
    }
    Ok(())
}
