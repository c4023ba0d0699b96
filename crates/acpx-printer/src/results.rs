//! The JSON result object of each session command (`{"action": …, …}`, one line on stdout in
//! `acpx --format json`; `docs/format.md` § CLI JSON output). Pure functions of the
//! operations' results, so a program that runs the same operations (a wrapper, a service)
//! answers in the same shapes, key order included, as scripts written against the CLI expect.

use std::path::Path;

use acpx_model::migrate::CopyReport;
use acpx_model::{ListPage, RecordId, SearchHit, SessionRecord};
use serde_json::{json, Map, Value};

use acpx_runtime::ops::node_import::{NodeImportReport, SkipKind};
use acpx_runtime::ops::prune::Pruned;
use acpx_runtime::ops::repair::FsckReport;
use acpx_runtime::record_json::{action, identity, record_identity, summary_json};

/// `cancel_result`: whether a running turn was asked to cancel, which, and (for a
/// one-process prompt) the pid that ran it.
pub fn cancel_result(
    record: &SessionRecord,
    cancelled: bool,
    request_id: Option<&str>,
    pid: Option<u32>,
) -> Value {
    let mut m = record_identity(record);
    m.insert("cancelled".into(), json!(cancelled));
    if let Some(rid) = request_id {
        m.insert("requestId".into(), json!(rid));
    }
    if let Some(pid) = pid {
        m.insert("pid".into(), json!(pid));
    }
    action("cancel_result", m)
}

/// `mode_set`.
pub fn mode_set(record: &SessionRecord, mode_id: &str, resumed: bool) -> Value {
    let mut m = Map::new();
    m.insert("modeId".into(), json!(mode_id));
    m.insert("resumed".into(), json!(resumed));
    m.extend(record_identity(record));
    action("mode_set", m)
}

/// `config_set`, with the agent's config options as it answered them.
pub fn config_set(
    record: &SessionRecord,
    config_id: &str,
    value: Value,
    resumed: bool,
    options: Vec<Value>,
) -> Value {
    let mut m = Map::new();
    m.insert("configId".into(), json!(config_id));
    m.insert("value".into(), value);
    m.insert("resumed".into(), json!(resumed));
    m.insert("configOptions".into(), Value::Array(options));
    m.extend(record_identity(record));
    action("config_set", m)
}

/// `model_set` (a model set through `session/set_model`; one set through the agent's model
/// config option is a [`config_set`]).
pub fn model_set(record: &SessionRecord, model_id: &str, resumed: bool) -> Value {
    let mut m = Map::new();
    m.insert("modelId".into(), json!(model_id));
    m.insert("resumed".into(), json!(resumed));
    m.extend(record_identity(record));
    action("model_set", m)
}

/// `session_forked`: the child, its parent as it was at the fork, and how it was forked
/// (`method`: `session/fork` or a copy).
pub fn session_forked(child: &SessionRecord, parent: &SessionRecord, method: Value) -> Value {
    let mut m = record_identity(child);
    if let Some(n) = &child.name {
        m.insert("name".into(), json!(n));
    }
    m.insert("parentAcpxRecordId".into(), json!(parent.acpx_record_id));
    m.insert("parentAcpxSessionId".into(), json!(parent.acp_session_id));
    m.insert("forkSeq".into(), json!(parent.acpx.audit_seq));
    m.insert(
        "forkMessageCount".into(),
        json!(parent.thread.message_count()),
    );
    m.insert("method".into(), method);
    action("session_forked", m)
}

/// `session_ensured`: the scope's session, whether it was created, and the session it
/// replaced (`sessions new` over an open one).
pub fn session_ensured(
    record: &SessionRecord,
    created: bool,
    replaced: Option<&SessionRecord>,
) -> Value {
    let mut m = Map::new();
    m.insert("created".into(), json!(created));
    m.extend(record_identity(record));
    if let Some(n) = &record.name {
        m.insert("name".into(), json!(n));
    }
    if let Some(r) = replaced {
        m.insert("replacedSessionId".into(), json!(r.acpx_record_id));
    }
    action("session_ensured", m)
}

/// `prompt_queued`: a `--no-wait` prompt accepted by the session's queue owner, and its place
/// in the session's queue (`position` 1: it runs next or now).
pub fn prompt_queued(id: &RecordId, request_id: &str, position: usize) -> Value {
    let mut m = Map::new();
    m.insert("acpxRecordId".into(), json!(id.as_str()));
    m.insert("requestId".into(), json!(request_id));
    m.insert("position".into(), json!(position));
    action("prompt_queued", m)
}

/// `sessions_list`: one page, its cursor, and the entries that could not be read.
///
/// For printing a long list, [`SessionsListJson`] serializes the same object without building
/// it first.
pub fn sessions_list(page: &ListPage) -> Value {
    let mut m = Map::new();
    m.insert(
        "sessions".into(),
        Value::Array(page.sessions.iter().map(summary_json).collect()),
    );
    if let Some(c) = &page.next_cursor {
        m.insert("nextCursor".into(), json!(c));
    }
    if !page.skipped.is_empty() {
        m.insert("skipped".into(), json!(page.skipped));
    }
    action("sessions_list", m)
}

/// [`sessions_list`] as it is serialized: the same bytes, key order included, but each listed
/// session becomes a JSON object only while it is written. The tree of 10,000 summaries took
/// about 13 times the memory of the text it printed (29 MB for 2.3 MB).
///
/// `extra` holds keys added to the object: a key the object has takes the extra's value in
/// its place, the others follow the object's keys, in their order.
pub struct SessionsListJson<'a> {
    /// The listed page.
    pub page: &'a ListPage,
    /// Keys to add (for the CLI, those attached to its next result).
    pub extra: &'a Map<String, Value>,
}

impl serde::Serialize for SessionsListJson<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let page = self.page;
        let skipped = !page.skipped.is_empty();
        let own = ["action", "sessions", "nextCursor", "skipped"];
        let present = [true, true, page.next_cursor.is_some(), skipped];
        let len = present.iter().filter(|p| **p).count()
            + self
                .extra
                .keys()
                .filter(|k| !own.iter().zip(present).any(|(o, p)| p && o == k))
                .count();
        let mut m = s.serialize_map(Some(len))?;
        match self.extra.get("action") {
            Some(v) => m.serialize_entry("action", v)?,
            None => m.serialize_entry("action", "sessions_list")?,
        }
        match self.extra.get("sessions") {
            Some(v) => m.serialize_entry("sessions", v)?,
            None => m.serialize_entry("sessions", &Summaries(&page.sessions))?,
        }
        if let Some(c) = &page.next_cursor {
            match self.extra.get("nextCursor") {
                Some(v) => m.serialize_entry("nextCursor", v)?,
                None => m.serialize_entry("nextCursor", c)?,
            }
        }
        if skipped {
            match self.extra.get("skipped") {
                Some(v) => m.serialize_entry("skipped", v)?,
                None => m.serialize_entry("skipped", &page.skipped)?,
            }
        }
        for (k, v) in self.extra {
            if !own.iter().zip(present).any(|(o, p)| p && o == k) {
                m.serialize_entry(k, v)?;
            }
        }
        m.end()
    }
}

/// The `sessions` array, one summary object at a time.
struct Summaries<'a>(&'a [acpx_model::SessionSummary]);

impl serde::Serialize for Summaries<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for summary in self.0 {
            seq.serialize_element(&summary_json(summary))?;
        }
        seq.end()
    }
}

/// `session_closed`.
pub fn session_closed(record: &SessionRecord) -> Value {
    action("session_closed", record_identity(record))
}

/// `session_deleted` (`deleted`: whether there was anything to delete; `agentSessionDelete`:
/// `deleted`, `failed` or `not_advertised`, what became of the agent's own copy).
pub fn session_deleted(
    record: &SessionRecord,
    deleted: bool,
    agent: &acpx_runtime::session::AgentSessionDelete,
) -> Value {
    let mut m = record_identity(record);
    m.insert("deleted".into(), json!(deleted));
    m.insert("agentSessionDelete".into(), json!(agent.as_str()));
    action("session_deleted", m)
}

/// `session_history`: the conversation's last `limit` messages (all without one), with the
/// keys of `extra` added as [`SessionsListJson`] adds them. It is written as it is serialized
/// (`serde_json::to_writer`): the messages are read back one at a time, so a long
/// conversation is never whole in memory, in the record or in its JSON. When settled messages
/// cannot be read back, `messages` ends with the last one read and `error` says why.
pub struct SessionHistoryJson<'a> {
    /// The session.
    pub record: &'a SessionRecord,
    /// Only the last this many messages.
    pub limit: Option<usize>,
    /// Keys to add (for the CLI, those attached to its next result).
    pub extra: &'a Map<String, Value>,
}

impl serde::Serialize for SessionHistoryJson<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let record = self.record;
        let count = record.thread.message_count();
        let mut head = Map::new();
        head.insert("action".into(), json!("session_history"));
        head.extend(record_identity(record));
        if !record.thread.title.is_empty() {
            head.insert("title".into(), json!(record.thread.title));
        }
        head.insert("messageCount".into(), json!(count));
        let mut m = s.serialize_map(None)?;
        for (k, v) in &head {
            m.serialize_entry(k, self.extra.get(k).unwrap_or(v))?;
        }
        let failed = std::cell::RefCell::new(None);
        match self.extra.get("messages") {
            Some(v) => m.serialize_entry("messages", v)?,
            None => m.serialize_entry(
                "messages",
                &MessagesFrom {
                    record,
                    skip: self.limit.map_or(0, |l| count.saturating_sub(l)),
                    failed: &failed,
                },
            )?,
        }
        let failed = failed.into_inner();
        if let Some(e) = &failed {
            let ours = json!(format!("the messages could not be read back: {e}"));
            m.serialize_entry("error", self.extra.get("error").unwrap_or(&ours))?;
        }
        for (k, v) in self.extra {
            let own = head.contains_key(k) || k == "messages" || (k == "error" && failed.is_some());
            if !own {
                m.serialize_entry(k, v)?;
            }
        }
        m.end()
    }
}

/// The `messages` array of [`SessionHistoryJson`]: from index `skip` on, settled ones read back
/// one at a time. A read-back failure ends the array there and is kept in `failed`.
struct MessagesFrom<'a> {
    record: &'a SessionRecord,
    skip: usize,
    failed: &'a std::cell::RefCell<Option<String>>,
}

impl serde::Serialize for MessagesFrom<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let thread = &self.record.thread;
        let settled = thread.settled.len();
        let mut seq = s.serialize_seq(None)?;
        if self.skip < settled {
            let read = thread.settled.try_for_each(|i, message| {
                if i >= self.skip {
                    seq.serialize_element(&message)?;
                }
                Ok(())
            });
            match read {
                Ok(written) => written?,
                Err(e) => {
                    *self.failed.borrow_mut() = Some(e.to_string());
                    return seq.end();
                }
            }
        }
        let tail = &thread.messages;
        for message in &tail[self.skip.saturating_sub(settled).min(tail.len())..] {
            seq.serialize_element(message)?;
        }
        seq.end()
    }
}

/// One pruned session of `sessions_pruned`: its ids, its age, where its log was kept.
pub fn pruned_entry(p: &Pruned) -> Map<String, Value> {
    let s = &p.session;
    let mut m = identity(
        s.acpx_record_id.as_str(),
        &s.acp_session_id,
        s.agent_session_id.as_deref(),
    );
    m.insert("closedAt".into(), json!(p.closed_at));
    if let Some(kept) = &p.kept_log {
        m.insert("keptLog".into(), json!(kept.path.to_string_lossy()));
        m.insert("keptEvents".into(), json!(kept.events));
    }
    m
}

/// `sessions_pruned` of the [`pruned_entry`]s.
pub fn sessions_pruned(entries: Vec<Map<String, Value>>, dry_run: bool) -> Value {
    let mut m = Map::new();
    m.insert("dryRun".into(), json!(dry_run));
    m.insert("count".into(), json!(entries.len()));
    m.insert(
        "sessions".into(),
        Value::Array(entries.into_iter().map(Value::Object).collect()),
    );
    action("sessions_pruned", m)
}

/// `sessions_search`.
pub fn sessions_search(text: &str, hits: &[SearchHit]) -> Value {
    let mut m = Map::new();
    m.insert("query".into(), json!(text));
    m.insert("hits".into(), json!(hits));
    action("sessions_search", m)
}

/// `node_import`: the sessions brought in from a Node acpx home (`dir`) and the files left
/// out (with why: ignored, already present, not loadable by Node, or failed).
pub fn node_import(dir: &Path, dry_run: bool, report: &NodeImportReport) -> Value {
    let imported: Vec<Value> = report
        .imported
        .iter()
        .map(|i| {
            let s = &i.session;
            let mut m = identity(
                s.acpx_record_id.as_str(),
                &s.acp_session_id,
                s.agent_session_id.as_deref(),
            );
            m.insert("from".into(), json!(i.origin));
            m.insert("nodeRecordId".into(), json!(i.node_record_id));
            m.insert("messages".into(), json!(s.message_count));
            m.insert("events".into(), json!(i.events));
            m.insert("threadSource".into(), json!(i.thread_source.as_str()));
            Value::Object(m)
        })
        .collect();
    let skipped: Vec<Value> = report
        .skipped
        .iter()
        .map(|s| {
            let mut v = json!({"path": s.path, "reason": s.reason});
            match s.kind {
                SkipKind::Ignored => v["ignored"] = json!(true),
                SkipKind::AlreadyPresent => v["alreadyPresent"] = json!(true),
                SkipKind::NotLoadable => v["notLoadable"] = json!(true),
                SkipKind::Failed => {}
            }
            v
        })
        .collect();
    let mut m = Map::new();
    m.insert("from".into(), json!(dir.to_string_lossy()));
    m.insert("dryRun".into(), json!(dry_run));
    m.insert("imported".into(), Value::Array(imported));
    m.insert("skipped".into(), Value::Array(skipped));
    action("node_import", m)
}

/// `fsck`: whether the store is sound now, what was checked, found and repaired, and the
/// sessions skipped because they were in use.
pub fn fsck(report: &FsckReport) -> Value {
    let mut m = Map::new();
    m.insert("ok".into(), json!(report.remaining() == 0));
    m.insert("sessions".into(), json!(report.checked));
    m.insert("repaired".into(), json!(report.repaired()));
    m.insert("problems".into(), json!(report.problems));
    if !report.skipped_busy.is_empty() {
        let busy: Vec<String> = report.skipped_busy.iter().map(|b| b.to_string()).collect();
        m.insert("skippedBusy".into(), json!(busy));
    }
    if !report.stale_stages.is_empty() {
        m.insert("staleStages".into(), json!(report.stale_stages));
    }
    if !report.stale_stages_removed.is_empty() {
        m.insert(
            "staleStagesRemoved".into(),
            json!(report.stale_stages_removed),
        );
    }
    action("fsck", m)
}

/// `migrated`: every session copied from backend `from` to backend `to` (at `location`),
/// each verified, and the source entries that could not be read.
pub fn migrated(from: &str, to: &str, location: &str, report: &CopyReport) -> Value {
    let events: u64 = report.sessions.iter().map(|s| s.events).sum();
    let mut m = Map::new();
    m.insert("from".into(), json!(from));
    m.insert("to".into(), json!(to));
    m.insert("location".into(), json!(location));
    m.insert("verified".into(), json!(true));
    m.insert("sessionCount".into(), json!(report.sessions.len()));
    m.insert("eventCount".into(), json!(events));
    m.insert("sessions".into(), json!(report.sessions));
    let trimmed = report.sessions.iter().filter(|s| s.trimmed).count();
    m.insert("trimmedCount".into(), json!(trimmed));
    m.insert(
        "alreadyCopiedCount".into(),
        json!(report.already_copied.len()),
    );
    m.insert("alreadyCopied".into(), json!(report.already_copied));
    m.insert("recopied".into(), json!(report.recopied));
    m.insert("skipped".into(), json!(report.skipped));
    action("migrated", m)
}

/// `session_exported`: the file written, the export's kind and the events in it.
pub fn session_exported(record: &SessionRecord, path: &Path, kind: &str, events: u64) -> Value {
    let mut m = record_identity(record);
    m.insert("path".into(), json!(path.to_string_lossy()));
    m.insert("kind".into(), json!(kind));
    m.insert("events".into(), json!(events));
    action("session_exported", m)
}

/// `session_imported`: the stored session, its events, and the id it had when it was
/// imported under a new one.
pub fn session_imported(
    stored: &SessionRecord,
    events: usize,
    imported_from: Option<&RecordId>,
) -> Value {
    let mut m = record_identity(stored);
    m.insert("events".into(), json!(events));
    if let Some(original) = imported_from {
        m.insert("importedFrom".into(), json!(original));
    }
    action("session_imported", m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use acpx_model::{NewSession, SessionSummary, SkippedEntry, Timestamp};

    #[test]
    fn action_comes_first_and_keys_keep_their_order() {
        let id = RecordId::parse("0b7d7a86-1f6e-4b8f-9a8e-3c2f1d0e9a71").unwrap();
        let v = prompt_queued(&id, "req-1", 1);
        let keys: Vec<_> = v.as_object().unwrap().keys().cloned().collect();
        assert_eq!(keys, ["action", "acpxRecordId", "requestId", "position"]);
        let v = sessions_pruned(Vec::new(), true);
        assert_eq!(v["count"], 0);
        assert_eq!(v["dryRun"], true);
    }

    fn summary(id: &str, name: Option<&str>, agent_session: Option<&str>) -> SessionSummary {
        let record = SessionRecord::new(
            NewSession {
                acpx_record_id: RecordId::parse(id).unwrap(),
                acp_session_id: format!("sess-{id}"),
                agent_session_id: agent_session.map(str::to_owned),
                agent_command: "agent \"quoted\"".into(),
                cwd: "/work/é".into(),
                name: name.map(str::to_owned),
            },
            Timestamp::now(),
        );
        record.summary()
    }

    /// The streamed form prints exactly what the tree prints, with the CLI's way of adding
    /// attached keys (a key of the object replaced in place, the others after it).
    #[test]
    fn the_streamed_list_is_the_list_byte_for_byte() {
        let page = |cursor: Option<&str>, skipped: bool| ListPage {
            sessions: vec![
                summary("0b7d7a86-1f6e-4b8f-9a8e-3c2f1d0e9a71", Some("one"), None),
                summary(
                    "1b7d7a86-1f6e-4b8f-9a8e-3c2f1d0e9a72",
                    None,
                    Some("agent-2"),
                ),
            ],
            next_cursor: cursor.map(str::to_owned),
            skipped: if skipped {
                vec![SkippedEntry {
                    acpx_record_id: None,
                    location: "sessions/x.json".into(),
                    reason: "not JSON".into(),
                }]
            } else {
                Vec::new()
            },
        };
        let mut extra = Map::new();
        extra.insert("warning".into(), json!("late"));
        extra.insert("nextCursor".into(), json!("replaced"));
        for extra in [Map::new(), extra] {
            for (cursor, skipped) in [(None, false), (Some("c1"), true), (Some("c2"), false)] {
                let page = page(cursor, skipped);
                let Value::Object(mut tree) = sessions_list(&page) else {
                    panic!("not an object");
                };
                for (k, v) in &extra {
                    if let Some(slot) = tree.get_mut(k) {
                        *slot = v.clone();
                    } else {
                        tree.insert(k.clone(), v.clone());
                    }
                }
                let streamed = serde_json::to_string(&SessionsListJson {
                    page: &page,
                    extra: &extra,
                })
                .unwrap();
                assert_eq!(streamed, serde_json::to_string(&tree).unwrap());
            }
        }
        let empty = ListPage {
            sessions: Vec::new(),
            next_cursor: None,
            skipped: Vec::new(),
        };
        let streamed = SessionsListJson {
            page: &empty,
            extra: &Map::new(),
        };
        assert_eq!(
            serde_json::to_string(&streamed).unwrap(),
            r#"{"action":"sessions_list","sessions":[]}"#
        );
    }
}
