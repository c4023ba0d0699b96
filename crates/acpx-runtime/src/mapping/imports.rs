//! The folds of an import's trust (`ops::import_trust` has the rules): `session_imported`
//! stores what an archive named as information only, `import_trusted` makes it runnable.

use acpx_model::SessionRecord;
use serde_json::{json, Map, Value};

use super::MCP_SERVERS_KEY;

/// `acpx` key of an untrusted import: `{agentCommand, mcpServers}` as the archive named them.
pub const UNTRUSTED_IMPORT_KEY: &str = "untrusted_import";
/// What an untrusted import's agent command starts with (before the archive's command).
pub const UNTRUSTED_PREFIX: &str = "untrusted-import:";

/// The fold of `session_imported` (payload `agentCommand`, `mcpServers`): see the module docs;
/// it also forgets the session's remembered "always" / "never" answers.
pub fn apply_imported(record: &mut SessionRecord, extra: &Map<String, Value>) {
    let command = extra
        .get("agentCommand")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let servers = extra.get("mcpServers").cloned().unwrap_or(Value::Null);
    record.agent_command = format!("{UNTRUSTED_PREFIX} {command}");
    record.acpx.extra.remove(MCP_SERVERS_KEY);
    // "Always" answers are the exporting user's decisions, not this user's: an archive that
    // carries them (in its snapshot or its events, folded before this one) grants nothing.
    record.acpx.extra.remove(super::PERMISSION_ALWAYS_KEY);
    record.acpx.extra.insert(
        UNTRUSTED_IMPORT_KEY.into(),
        json!({"agentCommand": command, "mcpServers": servers}),
    );
}

/// The fold of `import_trusted` (payload `agentCommand`, `mcpServers`): the session runs that
/// command, with those MCP servers (none when `null`).
pub fn apply_trusted(record: &mut SessionRecord, extra: &Map<String, Value>) {
    if let Some(command) = extra.get("agentCommand").and_then(Value::as_str) {
        record.agent_command = command.to_owned();
    }
    match extra.get("mcpServers").filter(|v| !v.is_null()) {
        Some(servers) => {
            record
                .acpx
                .extra
                .insert(MCP_SERVERS_KEY.into(), servers.clone());
        }
        None => {
            record.acpx.extra.remove(MCP_SERVERS_KEY);
        }
    }
    record.acpx.extra.remove(UNTRUSTED_IMPORT_KEY);
}

/// What the archive named, if `record` is an untrusted import: `(agentCommand, mcpServers)`.
pub fn untrusted_import(record: &SessionRecord) -> Option<(String, Value)> {
    let m = record.acpx.extra.get(UNTRUSTED_IMPORT_KEY)?;
    let command = m.get("agentCommand")?.as_str()?.to_owned();
    Some((command, m.get("mcpServers").cloned().unwrap_or(Value::Null)))
}

/// The refusal to start an untrusted import's agent.
pub fn refusal(record: &SessionRecord) -> Option<String> {
    let (command, _) = untrusted_import(record)?;
    Some(format!(
        "session {} was imported from an archive, and acpx does not run the agent command it \
         names ({}) or its MCP servers until you say so: `acpx sessions trust {}` shows what it \
         names and accepts it, `acpx <agent> sessions trust {}` (or --agent) continues it with \
         your agent instead",
        record.acpx_record_id,
        crate::text::printable(&command),
        record.acpx_record_id,
        record.acpx_record_id
    ))
}
