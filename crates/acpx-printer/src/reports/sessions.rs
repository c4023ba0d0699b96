//! What the session commands print: the tables of `sessions list` and `sessions search`, and
//! the results of `close`, `delete`, `prune`, `new` / `ensure`, `fork`, `adopt` and
//! `sessions list --from-agent`.

use std::path::PathBuf;

use acpx_model::{ListPage, SearchHit, SessionRecord, SessionSummary};
use acpx_runtime::ops::fork::FORKED_FROM_KEY;
use acpx_runtime::ops::prune::Pruned;
use acpx_runtime::session::{Adopted, AgentSessionDelete, AgentSessionList};
use acpx_runtime::text::{clip, printable};
use acpx_stores::Backend;
use serde_json::{json, Map, Value};

use super::{Paint, Printed};
use crate::live::Tone;
use crate::results;
use crate::table::{stdout_width, Table};

/// Headers and first column in bold: the tables of the session commands.
fn bold_header_and_ids(paint: Paint<'_>) -> impl Fn(Option<usize>, usize, &str) -> String + '_ {
    move |row, col, cell| match (row, col) {
        (None, _) | (Some(_), 0) => paint(Tone::Bold, cell),
        _ => cell.to_owned(),
    }
}

/// The text listing of `sessions list`: one aligned row per session under a header, the
/// working directory cut in its middle when the terminal is narrower than the table.
/// `agent_name` is the registry's name of an agent command, when it has one.
pub fn sessions_table<'r>(
    sessions: &[SessionSummary],
    agent_name: &dyn Fn(&str) -> Option<&'r str>,
    paint: Paint<'_>,
) -> Vec<String> {
    let mut t = Table::new(&[
        "ID",
        "STATE",
        "LAST USED",
        "AGENT",
        "NAME",
        "CWD",
        "MSGS",
        "TITLE",
    ])
    .right(6)
    .shrink(7)
    .shrink(5)
    .shrink(3);
    for s in sessions {
        let agent = agent_name(&s.agent_command).unwrap_or(&s.agent_command);
        t.row(vec![
            s.acpx_record_id.as_str().to_owned(),
            if s.closed { "closed" } else { "open" }.to_owned(),
            s.last_used_at.to_string(),
            printable(agent).into_owned(),
            printable(s.name.as_deref().unwrap_or("-")).into_owned(),
            printable(&s.cwd).into_owned(),
            s.message_count.to_string(),
            s.title.as_deref().map(|t| clip(t, 50)).unwrap_or_default(),
        ]);
    }
    t.render(stdout_width(), bold_header_and_ids(paint))
}

/// `sessions list` for a person or a script (its JSON is [`results::SessionsListJson`],
/// written as it is serialized): the table, or the ids; notes for an empty page (`elsewhere`:
/// the other backend of this home that has sessions, and where, as
/// `acpx_stores::other_local_store` finds it) and for a page that has more.
pub fn sessions_list<'r>(
    page: &ListPage,
    elsewhere: Option<(Backend, PathBuf)>,
    agent_name: &dyn Fn(&str) -> Option<&'r str>,
    paint: Paint<'_>,
) -> Printed {
    let mut p = Printed {
        quiet: page
            .sessions
            .iter()
            .map(|s| s.acpx_record_id.as_str().to_owned())
            .collect(),
        ..Printed::default()
    };
    if page.sessions.is_empty() {
        p = p.note("no sessions (create one with `acpx sessions new`)");
        if let Some((backend, location)) = elsewhere {
            let flag = backend.as_str();
            p = p.note(format!(
                "this home also has sessions in the {flag} store ({}): `acpx --store {flag} sessions list` lists them",
                location.display()
            ));
        }
    } else {
        p.text = sessions_table(&page.sessions, agent_name, paint);
    }
    if let Some(c) = &page.next_cursor {
        p = p.note(format!(
            "more: acpx sessions list --cursor {c} (with the same filters)"
        ));
    }
    p
}

/// `sessions search`: the hits as a table (MESSAGE is the index in the thread, as `sessions
/// history` counts, not an event's seq, which `sessions events` shows as `#N`).
pub fn search(text: &str, hits: &[SearchHit], paint: Paint<'_>) -> Printed {
    let mut p = Printed::new(
        results::sessions_search(text, hits),
        Vec::new(),
        hits.iter()
            .map(|h| h.acpx_record_id.as_str().to_owned())
            .collect(),
    );
    if hits.is_empty() {
        return p.note("no matches");
    }
    let mut t = Table::new(&["ID", "MESSAGE", "ROLE", "MATCH"])
        .right(1)
        .shrink(3);
    for h in hits {
        t.row(vec![
            h.acpx_record_id.as_str().to_owned(),
            h.message_index.to_string(),
            h.role.to_string(),
            h.snippet.clone(),
        ]);
    }
    p.text = t.render(stdout_width(), bold_header_and_ids(paint));
    p
}

/// The error message when nothing has the id (or name) `text`: only what the user typed. The
/// name part names the agent and directory (`scope`) only when the user named an agent (the
/// scope a name is looked up in).
pub fn no_such_id(text: &str, scope: Option<(&str, &std::path::Path)>) -> String {
    match scope {
        Some((agent, cwd)) => format!(
            "no stored session has the id {text:?}, and no open session of agent {agent} in {} \
             is named {text:?}",
            cwd.display()
        ),
        None => format!(
            "no stored session has the id {text:?}, nor is one in this directory named {text:?}"
        ),
    }
}

/// `sessions close` (and the closing `sessions new` does).
pub fn closed(record: &SessionRecord) -> Printed {
    let id = record.acpx_record_id.as_str();
    Printed::new(
        results::session_closed(record),
        vec![format!("closed {id}")],
        vec![id.to_owned()],
    )
}

/// `sessions delete`: `existed` says whether the store had it; `agent`, what became of the
/// agent's own copy.
pub fn deleted(record: &SessionRecord, existed: bool, agent: &AgentSessionDelete) -> Printed {
    let id = &record.acpx_record_id;
    let theirs = match agent {
        AgentSessionDelete::Deleted => " (the agent deleted its copy too)",
        _ => "",
    };
    let mut p = Printed::new(
        results::session_deleted(record, existed, agent),
        vec![format!("deleted {id} and its event log{theirs}")],
        vec![id.to_string()],
    );
    if let AgentSessionDelete::Failed(why) = agent {
        p = p.warn(format!(
            "the agent's own copy of the session was not deleted (session/delete): {why}"
        ));
    }
    p
}

/// `sessions prune` (`--dry-run`: what would be pruned).
pub fn pruned(pruned: &[Pruned], dry_run: bool) -> Printed {
    let entries: Vec<_> = pruned.iter().map(results::pruned_entry).collect();
    let verb = if dry_run { "would prune" } else { "pruned" };
    let mut text = Vec::new();
    let mut quiet = Vec::new();
    for m in &entries {
        let id = m["acpxRecordId"].as_str().unwrap_or_default();
        let kept = m
            .get("keptLog")
            .and_then(Value::as_str)
            .map(|p| format!(" (log kept in {p})"))
            .unwrap_or_default();
        text.push(format!("{verb} {id}{kept}"));
        quiet.push(id.to_owned());
    }
    let count = entries.len();
    Printed::new(results::sessions_pruned(entries, dry_run), text, quiet)
        .note(format!("{verb} {count} closed session(s)"))
}

/// `sessions new` and `sessions ensure`: `created` or found, for the agent `agent` (as the
/// user named it), stored in `location`; `replaced`, the session `sessions new` closed.
pub fn ensured(
    record: &SessionRecord,
    created: bool,
    replaced: Option<&SessionRecord>,
    agent: &str,
    location: &str,
) -> Printed {
    let verb = if created { "created" } else { "found" };
    let mut text = vec![
        format!(
            "{verb} session {}{} for agent {agent} in {}",
            record.acpx_record_id,
            named(record),
            record.cwd
        ),
        format!("  stored in {location}"),
    ];
    if let Some(r) = replaced {
        text.push(format!(
            "  closed the previous session {}",
            r.acpx_record_id
        ));
    }
    Printed::new(
        results::session_ensured(record, created, replaced),
        text,
        vec![record.acpx_record_id.to_string()],
    )
}

/// ` (NAME)` for a named session, nothing otherwise.
fn named(record: &SessionRecord) -> String {
    record
        .name
        .as_deref()
        .map(|n| format!(" ({n})"))
        .unwrap_or_default()
}

/// `sessions fork`: `child` forked from `parent` (as it is now).
pub fn forked(child: &SessionRecord, parent: &SessionRecord) -> Printed {
    let method = child.acpx.extra[FORKED_FROM_KEY]["method"].clone();
    let text = format!(
        "forked {} into {} ({} messages, {})",
        parent.acpx_record_id,
        child.acpx_record_id,
        child.thread.message_count(),
        method.as_str().unwrap_or_default()
    );
    Printed::new(
        results::session_forked(child, parent, method),
        vec![text],
        vec![child.acpx_record_id.to_string()],
    )
}

/// `sessions adopt`: the record made for the agent's session, for the agent `agent`.
pub fn adopted(record: &SessionRecord, adopted: &Adopted, agent: &str) -> Printed {
    let mut m = Map::new();
    m.insert("action".into(), json!("session_adopted"));
    m.insert("acpxRecordId".into(), json!(record.acpx_record_id.as_str()));
    m.insert("acpxSessionId".into(), json!(record.acp_session_id));
    if let Some(id) = &record.agent_session_id {
        m.insert("agentSessionId".into(), json!(id));
    }
    if let Some(n) = &record.name {
        m.insert("name".into(), json!(n));
    }
    m.insert("method".into(), json!(adopted.method));
    m.insert("replayedUpdates".into(), json!(adopted.replayed_updates));
    m.insert("messageCount".into(), json!(record.thread.message_count()));
    let history = if adopted.method == "session/resume" {
        "the agent resumed it without replaying its history, so the record starts empty".to_owned()
    } else {
        format!(
            "{} messages from the history the agent replayed ({} updates)",
            record.thread.message_count(),
            adopted.replayed_updates
        )
    };
    let text = vec![
        format!(
            "adopted ACP session {} as {}{} for agent {agent} in {}",
            record.acp_session_id,
            record.acpx_record_id,
            named(record),
            record.cwd
        ),
        format!("  {history}"),
    ];
    Printed::new(
        Value::Object(m),
        text,
        vec![record.acpx_record_id.to_string()],
    )
}

/// `sessions list --from-agent`: what the agent (`agent_command`, shown as `agent`) lists in
/// `filter_cwd` (every directory: `None`), each session with the record that holds it, if
/// one does (`record_of`).
pub fn agent_sessions<'r>(
    listed: &AgentSessionList,
    agent_command: &str,
    agent: &str,
    filter_cwd: Option<&PathBuf>,
    record_of: &dyn Fn(&str) -> Option<&'r str>,
    paint: Paint<'_>,
) -> Printed {
    let sessions: Vec<Value> = listed
        .sessions
        .iter()
        .map(|s| {
            let mut m = match &s.raw {
                Value::Object(o) => o.clone(),
                _ => Map::new(),
            };
            if let Some(r) = record_of(&s.session_id) {
                m.insert("acpxRecordId".into(), json!(r));
            }
            Value::Object(m)
        })
        .collect();
    let mut m = Map::new();
    m.insert("action".into(), json!("agent_sessions_list"));
    m.insert("agentCommand".into(), json!(agent_command));
    m.insert(
        "cwd".into(),
        filter_cwd.map_or(Value::Null, |d| json!(d.display().to_string())),
    );
    m.insert("sessions".into(), Value::Array(sessions));
    if let Some(c) = &listed.next_cursor {
        m.insert("nextCursor".into(), json!(c));
    }
    if listed.truncated {
        m.insert("truncated".into(), json!(true));
    }
    let quiet = listed
        .sessions
        .iter()
        .map(|s| s.session_id.clone())
        .collect();
    let mut p = Printed::new(Value::Object(m), Vec::new(), quiet);
    if listed.sessions.is_empty() {
        let where_ = filter_cwd
            .map(|d| format!(" in {}", d.display()))
            .unwrap_or_default();
        p = p.note(format!("the agent {agent} lists no sessions{where_}"));
    } else {
        p.text = agent_table(listed, record_of, paint);
    }
    if let Some(c) = &listed.next_cursor {
        p = p.note(format!(
            "more: acpx sessions list --from-agent --cursor {c} (with the same filters)"
        ));
    } else if listed.truncated {
        p = p.note("more sessions follow in the agent's page: raise --limit to list them");
    }
    p
}

fn agent_table<'r>(
    listed: &AgentSessionList,
    record_of: &dyn Fn(&str) -> Option<&'r str>,
    paint: Paint<'_>,
) -> Vec<String> {
    let mut t = Table::new(&["ACP SESSION", "UPDATED", "RECORD", "CWD", "TITLE"])
        .shrink(4)
        .shrink(3);
    for s in &listed.sessions {
        t.row(vec![
            printable(&s.session_id).into_owned(),
            printable(s.updated_at.as_deref().unwrap_or("-")).into_owned(),
            record_of(&s.session_id).unwrap_or("-").to_owned(),
            printable(&s.cwd).into_owned(),
            s.title.as_deref().map(|t| clip(t, 50)).unwrap_or_default(),
        ]);
    }
    t.render(stdout_width(), bold_header_and_ids(paint))
}
