//! The integration tests of `acpx-cli`, one binary (rust-analyzer's `tests/it` shape): the
//! workspace is linked once per crate, not once per test file. Each module is one former
//! test file; run one with `cargo test -p acpx-cli --test it <module>::`.

mod acp_format;
mod agent_session_delete;
mod auth_policy;
mod authority;
mod choices_survive;
mod common;
mod damaged_events;
mod damaged_snapshot;
mod diagnostics;
mod export_import;
mod flags;
mod full_disk;
mod grammar_strict;
mod import_kill;
mod interchange;
mod interop_pydantic;
mod interop_qwen;
mod live_turn;
mod long_session_reads;
mod lookup_walk;
mod maintenance;
mod migrate_kill;
mod migrate_trimmed;
mod output_for_people;
mod owner;
mod owner_choices;
mod owner_quiet_reply;
mod people_read;
mod pipes_signals;
mod postgres_authority;
mod postgres_hosts;
mod postgres_restart;
mod progress_bars;
mod read_watch;
mod readme_commands;
mod reattach_choices;
mod replay;
mod session_commands;
mod store_commands;
mod timeout_exit;
mod turn_commands;
mod usage;
mod usage_report;
mod viewer_html;
