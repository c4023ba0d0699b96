//! Fuzz target `fuzz_mcp_servers` (see `fuzz_imports` for the long-run settings): MCP server
//! lists in both accepted shapes, as a config file or an imported record carries them.

use acpx_runtime::mcp_servers::parse_mcp_servers;
use acpx_test_support::fuzz as fuzz_support;
use fuzz_support::fuzz;
use serde_json::{json, Value};

// ---------------------------------------------------------------------------------------------
// MCP server lists
// ---------------------------------------------------------------------------------------------

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
