//! What `sessions export`, `sessions import` and `sessions trust` print: the file written,
//! the session stored (and whether acpx will run what its archive names), the session trusted.

use std::path::Path;

use acpx_model::{RecordId, SessionRecord};
use acpx_runtime::mapping::MCP_SERVERS_KEY;
use acpx_runtime::ops::import_trust::{untrusted_import, Trusted};
use acpx_runtime::text::printable;
use serde_json::{json, Value};

use super::Printed;
use crate::results;

/// `sessions export -o PATH` (`kind`: the `--as` value): `events` written. (An export to
/// stdout prints nothing more.)
pub fn exported(record: &SessionRecord, path: &Path, kind: &str, events: u64) -> Printed {
    Printed {
        json: Some(results::session_exported(record, path, kind, events)),
        ..Printed::default()
    }
    .note(format!(
        "exported {} to {}",
        record.acpx_record_id,
        path.display()
    ))
}

/// The warning for an archive whose log starts at `seq` (retention removed the events before
/// it), said before the user relies on the file.
pub fn export_trimmed_warning(id: &RecordId, seq: u64) -> String {
    format!(
        "the store kept the log of {id} from seq {seq} on (older events were removed by \
         retention; ACPX_KEEP_ROTATED_SEGMENTS=1 keeps them): the archive holds the events \
         from seq {seq} on, and `sessions import` recreates the log from there"
    )
}

/// `sessions import FILE`: `stored` with `events` events, imported from `file`
/// (`original`: its id in the archive when `--new-id` gave it another). A log that ends
/// before the events the snapshot folded in (an archive cut short) is a warning; whether
/// acpx runs what the archive names (`--trust`) is a note.
pub fn imported(
    stored: &SessionRecord,
    events: usize,
    file: &Path,
    original: Option<&RecordId>,
) -> Printed {
    let untrusted = untrusted_import(stored);
    let mut json = results::session_imported(stored, events, original);
    json["trusted"] = json!(untrusted.is_none());
    let id = &stored.acpx_record_id;
    let mut p = Printed::new(
        json,
        vec![format!(
            "imported {id} ({} messages, {events} events)",
            stored.thread.message_count(),
        )],
        vec![id.to_string()],
    );
    // The snapshot names the last event it folded in; a log that ends before it is an archive
    // cut short (a copy interrupted at a line boundary reads as valid NDJSON). The session is
    // kept, as imported, for `fsck --repair` to record the gap, but the user must hear of it.
    // (The log may start above seq 1, where retention had cut it: its end is its last seq.)
    let folded = stored.acpx.audit_seq;
    let last = stored.acpx.event_log.last_seq;
    if last < folded {
        p = p.warn(format!(
            "{}: the imported log ends at seq {last} but the session's snapshot has folded \
             in events up to seq {folded}: events {}..{folded} are missing (a truncated \
             archive, or a session.json without its log: pass it with --events); import it \
             again from a whole file, or run `acpx fsck --repair` to record the gap",
            file.display(),
            last + 1
        ));
    }
    p.note(match &untrusted {
        Some((command, servers)) => format!(
            "[acpx] kept as information only: its archive names the agent command {}{}; acpx \
             runs none of it until `acpx sessions trust {id}` (or continues it with your agent: \
             `acpx <agent> sessions trust {id}`)",
            shown(command),
            shown_servers(servers),
        ),
        None => format!(
            "[acpx] trusted (--trust): it runs the agent command {}{}",
            shown(&stored.agent_command),
            shown_servers(
                stored
                    .acpx
                    .extra
                    .get(MCP_SERVERS_KEY)
                    .unwrap_or(&Value::Null)
            )
        ),
    })
}

/// `sessions trust`: the session now runs `agent` (the user's, when named) or what its
/// archive named.
pub fn trusted(trusted: &Trusted, agent: Option<&str>) -> Printed {
    let id = &trusted.record.acpx_record_id;
    let json = json!({
        "action": "session_trusted",
        "acpxRecordId": id,
        "agentCommand": trusted.record.agent_command,
        "namedAgentCommand": trusted.named_command,
        "namedMcpServers": trusted.named_mcp_servers,
        "withYourAgent": agent.is_some(),
    });
    let line = match agent {
        Some(command) => format!(
            "session {id} now runs your agent {} (its archive named {}{}, which stay unused)",
            shown(command),
            shown(&trusted.named_command),
            shown_servers(&trusted.named_mcp_servers)
        ),
        None => format!(
            "session {id} now runs the agent command its archive names: {}{}",
            shown(&trusted.named_command),
            shown_servers(&trusted.named_mcp_servers)
        ),
    };
    Printed::new(json, vec![line], Vec::new())
}

/// A command line as shown to a person: quoted, control characters escaped.
fn shown(command: &str) -> String {
    format!("`{}`", printable(command))
}

/// `, and MCP servers a (`cmd args`), b (http URL)` for ACP's array form; empty for none.
fn shown_servers(servers: &Value) -> String {
    let Some(list) = servers.as_array().filter(|l| !l.is_empty()) else {
        return String::new();
    };
    let named: Vec<String> = list
        .iter()
        .map(|s| {
            let name = s.get("name").and_then(Value::as_str).unwrap_or("?");
            let what = match s.get("command").and_then(Value::as_str) {
                Some(cmd) => {
                    let args: Vec<&str> = s
                        .get("args")
                        .and_then(Value::as_array)
                        .map(|a| a.iter().filter_map(Value::as_str).collect())
                        .unwrap_or_default();
                    std::iter::once(cmd)
                        .chain(args)
                        .collect::<Vec<_>>()
                        .join(" ")
                }
                None => s
                    .get("url")
                    .and_then(Value::as_str)
                    .unwrap_or("?")
                    .to_owned(),
            };
            format!("{} ({})", printable(name), shown(&what))
        })
        .collect();
    format!(", and the MCP servers {}", named.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn servers_are_named_with_their_command_or_url() {
        let servers = json!([
            {"name": "fs", "command": "mcp-fs", "args": ["--root", "/"]},
            {"name": "web", "url": "http://x"}
        ]);
        assert_eq!(
            shown_servers(&servers),
            ", and the MCP servers fs (`mcp-fs --root /`), web (`http://x`)"
        );
        assert_eq!(shown_servers(&Value::Null), "");
        assert_eq!(shown("a\u{1b}b"), format!("`{}`", printable("a\u{1b}b")));
    }
}
