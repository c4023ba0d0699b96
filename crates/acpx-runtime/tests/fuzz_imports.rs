//! Fuzz targets (property tests) of the runtime's readers of outside bytes: a Node acpx home
//! (session record + journal segments, the journal's `segment` anchors included, through the
//! real `import_node_home` into a `MemoryStore`) and MCP server lists in both accepted shapes.
//! See docs/RELIABILITY.md § Fuzzing; `ACPX_FUZZ_CASES=1000000` for a long run.

#[path = "../../acpx-model/tests/fuzz_support/mod.rs"]
mod fuzz_support;

use std::fs;
use std::sync::atomic::{AtomicU64, Ordering};

use acpx_model::{EventQuery, ListQuery, MemoryStore, Store};
use acpx_runtime::mcp_servers::parse_mcp_servers;
use acpx_runtime::ops::node_import::import_node_home;
use acpx_runtime::ops::node_import::loadable::encode_uri_component;
use fuzz_support::{bytes_of, fuzz, fuzz_with, inputs, Input};
use serde_json::{json, Value};

const NODE: &str = "../acpx-cli/tests/fixtures/node-acpx/sessions";

fn node_samples() -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(NODE);
    let read = |name: &str| fs::read(dir.join(name)).expect("a Node fixture");
    let records = vec![
        read("sess-node-1.json"),
        read("sess-node-2.json"),
        read("sess%3Anode-3.json"),
    ];
    let journals = vec![
        read("sess-node-1.stream.ndjson"),
        read("sess-node-1.stream.1.ndjson"),
        read("sess%3Anode-3.stream.ndjson"),
    ];
    (records, journals)
}

/// Imports one Node session (record + journal in two segments) and checks what was stored:
/// a gap-free log starting at 1, and a snapshot that loads.
/// Node's file stem for the record in `record` (`encodeURIComponent` of its id), so that the
/// importer reads the files rather than skipping them for their names as Node would; `s`
/// when the record has no id or the name could not be a file name.
fn node_stem(record: &[u8]) -> String {
    serde_json::from_slice::<Value>(record)
        .ok()
        .and_then(|d| d.get("acpx_record_id")?.as_str().map(encode_uri_component))
        .filter(|stem| !stem.is_empty() && stem.len() <= 200)
        .unwrap_or_else(|| "s".into())
}

/// Sessions imported so far by [`fuzz_node_import`] (printed: inputs that reach the store).
static IMPORTED: AtomicU64 = AtomicU64::new(0);

async fn import_one(home: &std::path::Path, record: &[u8], older: &[u8], active: &[u8]) {
    let sessions = home.join("sessions");
    let _ = fs::remove_dir_all(&sessions);
    fs::create_dir_all(&sessions).expect("sessions dir");
    let stem = node_stem(record);
    fs::write(sessions.join(format!("{stem}.json")), record).expect("write");
    fs::write(sessions.join(format!("{stem}.stream.1.ndjson")), older).expect("write");
    fs::write(sessions.join(format!("{stem}.stream.ndjson")), active).expect("write");
    let store = MemoryStore::new();
    let Ok(report) = import_node_home(&store, home, false).await else {
        return;
    };
    IMPORTED.fetch_add(report.imported.len() as u64, Ordering::Relaxed);
    for imported in &report.imported {
        let id = &imported.session.acpx_record_id;
        let page = store
            .read_events(id, &EventQuery::from_seq(0))
            .await
            .expect("an imported log reads back");
        for (i, e) in page.events.iter().enumerate() {
            assert_eq!(e.seq, i as u64 + 1, "imported seqs are 1, 2, 3, …");
        }
        store.load(id).await.expect("an imported snapshot loads");
    }
    let _ = store.list(&ListQuery::default()).await;
}

#[test]
fn fuzz_node_import() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let home = tempfile::tempdir_in(fuzz_support::scratch_root()).expect("a temp dir");
    let (records, journals) = node_samples();
    let strategy = (
        inputs(records.len()),
        inputs(journals.len()),
        inputs(journals.len()),
    );
    fuzz_with(
        "node record + journal",
        strategy,
        |(r, o, a): (Input, Input, Input)| {
            let record = bytes_of(&r, &records);
            let older = bytes_of(&o, &journals);
            let active = bytes_of(&a, &journals);
            rt.block_on(import_one(home.path(), &record, &older, &active));
        },
    );
    eprintln!(
        "fuzz node record + journal: {} sessions imported",
        IMPORTED.load(Ordering::Relaxed)
    );
}

#[test]
fn fuzz_mcp_servers() {
    let samples: Vec<Vec<u8>> = [
        json!({"mcpServers": {
            "files": {"command": "/bin/true", "args": ["x"], "env": {"K": "V"}},
            "web": {"type": "http", "url": "https://example.invalid/mcp", "headers": {"A": "b"}},
            "events": {"type": "sse", "url": "https://example.invalid/sse"},
            "bare": {"url": "https://example.invalid/u"}
        }}),
        json!({"files": {"command": "/bin/true", "args": []}}),
        json!([
            {"name": "files", "command": "/bin/true", "args": ["-v"], "env": [{"name": "K", "value": "V"}]},
            {"type": "http", "name": "web", "url": "https://example.invalid", "headers": [{"name": "A", "value": "b"}]}
        ]),
    ]
    .iter()
    .map(|v| serde_json::to_vec_pretty(v).expect("json"))
    .collect();
    let capabilities = [
        json!({}),
        json!({"mcpCapabilities": {"http": true, "sse": true}}),
        json!({"mcpCapabilities": "yes"}),
        json!(null),
    ];
    fuzz("mcp servers", &samples, |bytes| {
        let Ok(value) = serde_json::from_slice::<Value>(bytes) else {
            return;
        };
        match parse_mcp_servers(&value) {
            Ok(servers) => {
                for caps in &capabilities {
                    let _ = servers.for_agent(caps);
                }
                let again = parse_mcp_servers(&servers.to_json())
                    .unwrap_or_else(|e| panic!("an accepted list does not read back: {e}"));
                assert_eq!(again.as_slice().len(), servers.as_slice().len());
            }
            Err(e) => assert!(!e.0.is_empty()),
        }
    });
}
