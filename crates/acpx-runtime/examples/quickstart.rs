//! Runs one real prompt through the scripted test agent and records it in a file store.
//!
//! ```sh
//! cargo run -p acpx-runtime --example quickstart -- "hello"
//! cargo run -p acpx-runtime --example quickstart -- --home /tmp/acpx-demo tools
//! ```
//!
//! The agent is a real ACP process over stdio (this example re-runs itself as the scripted
//! agent of the `acpx-test-agent` crate, so nothing else has to be built and no API key is needed). The
//! session is stored under `--home` (default: a fresh directory in the system temp dir, kept
//! so you can look at it): `<home>/sessions/<id>.json` and `<home>/sessions/<id>.events.ndjson`.
//! The first word of the prompt picks the agent's script (`think`, `tools`, `plan`, `usage`,
//! `title <t>`, …; anything else gets a greeting).

use std::path::PathBuf;
use std::sync::Arc;

use acpx_model::{EventEnvelope, EventQuery, Store};
use acpx_runtime::{text_prompt, NewSessionSpec, Runtime, RuntimeOptions};
use acpx_store_fs::FsStore;

const SERVE_FLAG: &str = "--serve-test-agent";

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some(SERVE_FLAG) {
        acpx_test_agent::serve(args.split_off(1)).await;
        return;
    }
    if let Err(e) = run(args).await {
        eprintln!("quickstart: {e}");
        std::process::exit(1);
    }
}

async fn run(mut args: Vec<String>) -> Result<(), Box<dyn std::error::Error>> {
    let home = match args.iter().position(|a| a == "--home") {
        Some(i) => {
            if i + 1 >= args.len() {
                return Err("--home needs a directory".into());
            }
            let dir = PathBuf::from(args.remove(i + 1));
            args.remove(i);
            dir
        }
        None => {
            std::env::temp_dir().join(format!("acpx-quickstart-{}", uuid::Uuid::new_v4().simple()))
        }
    };
    let prompt = if args.is_empty() {
        "hello from the quickstart".to_owned()
    } else {
        args.join(" ")
    };
    let store = Arc::new(FsStore::open(&home)?);
    let observer: acpx_runtime::Observer = Arc::new(|e: &EventEnvelope| {
        let what = e.payload["update"]["sessionUpdate"]
            .as_str()
            .or_else(|| e.payload["phase"].as_str())
            .unwrap_or("");
        eprintln!("  [{:>3}] {} {what}", e.seq, e.event_type);
    });
    let runtime = Runtime::new(
        store.clone(),
        RuntimeOptions {
            observer: Some(observer),
            ..RuntimeOptions::default()
        },
    );
    let me = std::env::current_exe()?;
    let agent_command = format!("'{}' {SERVE_FLAG}", me.display());
    let cwd = std::env::current_dir()?;
    eprintln!("recording events:");
    let mut session = runtime
        .open_new(NewSessionSpec {
            agent_command,
            cwd,
            name: Some("quickstart".into()),
        })
        .await?;
    let id = session.id().clone();
    let outcome = session.prompt(text_prompt(&prompt)).await?;
    session.shutdown().await?;

    let events = store
        .read_events(&id, &EventQuery::from_seq(1))
        .await?
        .events;
    let sessions = store.root().join("sessions");
    println!("you:   {prompt}");
    println!("agent: {}", outcome.agent_text);
    println!(
        "turn:  {} ({})",
        outcome.outcome,
        outcome.stop_reason.unwrap_or_default()
    );
    println!("session {id} is stored in {}", home.display());
    println!(
        "  snapshot:  {}",
        sessions.join(format!("{id}.json")).display()
    );
    println!(
        "  event log: {} ({} events)",
        sessions.join(format!("{id}.events.ndjson")).display(),
        events.len()
    );
    Ok(())
}
