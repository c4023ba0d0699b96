//! The integration tests of `acpx-runtime`, one binary (rust-analyzer's `tests/it` shape): the
//! workspace is linked once per crate, not once per test file. Each module is one former
//! test file; run one with `cargo test -p acpx-runtime --test it <module>::`.

mod additional_dirs;
mod agent_output;
mod choices;
mod client_side;
mod common;
mod crash;
mod ensure;
mod find_follow_prune;
mod fuzz_imports;
mod fuzz_mcp_servers;
mod fuzz_node_import;
mod import_findings;
mod interop;
mod local;
mod lookup_one_list;
mod node_fixtures;
mod one_decision;
mod ops;
mod owner_backlog;
mod owner_faults;
mod owner_permissions;
mod owner_reply_parts;
mod reattach;
mod recording;
mod scope_fixtures;
mod turns;
mod turns_spilled;
