//! Compares two recorded sessions of a file-store home turn by turn, as
//! `acpx sessions diff A B` does (reply text, tool calls and their files, stop reasons,
//! tokens, cost, wall time), reading only their event logs:
//!
//! ```sh
//! cargo run -p acpx-replay --example diff_sessions -- ~/.acpx <record id A> <record id B>
//! ```
//!
//! Exits 0 when the sessions agree turn by turn, 1 when they differ.

use acpx_model::RecordId;
use acpx_replay::{diff, read_recording};
use acpx_store_fs::FsStore;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [home, a, b] = args.as_slice() else {
        eprintln!("usage: diff_sessions ACPX_HOME RECORD_ID_A RECORD_ID_B");
        std::process::exit(2);
    };
    match run(home, a, b).await {
        Ok(differs) => std::process::exit(i32::from(differs)),
        Err(e) => {
            eprintln!("diff_sessions: {e}");
            std::process::exit(2);
        }
    }
}

async fn run(home: &str, a: &str, b: &str) -> Result<bool, Box<dyn std::error::Error>> {
    let store = FsStore::open(home)?;
    let a = read_recording(&store, &RecordId::parse(a)?).await?;
    let b = read_recording(&store, &RecordId::parse(b)?).await?;
    let d = diff::diff(&a, &b);
    print!("{}", diff::render_text(&d, false));
    Ok(d.differs())
}
