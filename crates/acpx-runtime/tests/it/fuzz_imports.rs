//! Fuzz targets (property tests) of the runtime's readers of outside bytes, which may be
//! hostile (issue 45):
//!
//! - `fuzz_archive_import`: `sessions import` of an acpx archive (a head line with the session,
//!   then event lines) or of a `session.json` with its events file, read as the CLI reads it
//!   (`read_import_source`, `EventLines`, `import_event_lines`) and also whole
//!   (`parse_import_file`, `import_session`), into a memory, file or SQLite store. An import
//!   stores a whole session or nothing: never a panic, never a partial or stale session.
//! - `fuzz_node_import` (in `fuzz_node_import`): a Node acpx home (session record, its rotated `.stream.N.ndjson`
//!   segments and the active `.stream.ndjson`, a segment that is a FIFO, a link to
//!   `/dev/zero`, a link out of the home or a directory) through the real `import_node_home`
//!   into a memory or file store.
//! - `fuzz_mcp_servers` (in `fuzz_mcp_servers`): MCP server lists in both accepted shapes.
//!
//! Besides the shared mutator (`fuzz_support`), the two import targets make *targeted* edits:
//! a field an archive or Node record should not decide (cwd, lastUsedAt, name, title, agent
//! command, MCP servers, ids, seqs, …) set to a hostile value (control characters, relative or
//! `..` directories, far-future dates, huge numbers, deep nesting, any JSON shape).
//!
//! See docs/RELIABILITY.md § Fuzzing: `ACPX_FUZZ_CASES=1000000` for a long run,
//! `ACPX_FUZZ_SECONDS=N` to stop after N seconds, `ACPX_FUZZ_SEED=N|random` for other inputs;
//! `ACPX_FUZZ_STRICT=1` makes the known gaps listed in [`Gap`] fail the target instead of being
//! counted, `ACPX_FUZZ_GAPS=1` prints each one.

use acpx_test_support::fuzz as fuzz_support;

use std::fs;
use std::path::{Component, Path};
use std::sync::Arc;

use acpx_model::{
    ClosedFilter, EventEnvelope, EventQuery, ListQuery, MemoryStore, NewSession, RecordId,
    SessionRecord, Store, StoreError, Timestamp,
};
use acpx_owner::runs::Probe;
use acpx_printer::transcript::{markdown, record_facts};
use acpx_runtime::mcp_servers::McpServers;
use acpx_runtime::ops::repair::{fsck, FsckOptions};
use acpx_runtime::ops::transfer::{
    archive_head, import_event_lines, import_session, parse_import_file, read_import_source,
    EventLines, ImportFile, ImportSource,
};
use acpx_runtime::ops::OpsError;
use acpx_store_fs::FsStore;
use acpx_store_sqlite::SqliteStore;
use fuzz_support::{bytes_of, fuzz_with, interesting_value, Input};

use proptest::prelude::*;
use serde_json::{json, Value};

pub(crate) const NODE: &str = "../acpx-cli/tests/fixtures/node-acpx/sessions";
pub(crate) const SNAPSHOT: &[u8] =
    include_bytes!("../../../acpx-model/tests/fixtures/fuzz/session_full.json");
pub(crate) const EVENTS: &[u8] =
    include_bytes!("../../../acpx-model/tests/fixtures/fuzz/events.ndjson");

// ---------------------------------------------------------------------------------------------
// Hostile values and targeted edits
// ---------------------------------------------------------------------------------------------

/// Text a person reads on a terminal, chosen by someone else: escape sequences (OSC, CSI, the
/// 8-bit CSI), carriage return, newline, NUL, DEL, a bidi override.
pub(crate) const HOSTILE_TEXTS: &[&str] = &[
    "\u{1b}]0;owned\u{7}",
    "\u{1b}[2J\u{1b}[H",
    "name\r\u{1b}[Kfake",
    "line\nbreak",
    "nul\u{0}byte",
    "\u{9b}31mcsi",
    "del\u{7f}",
    "\u{202e}txt.exe",
    "",
    " ",
];

/// Directories an imported session's agent must never run in: relative, with `.` or `..`.
/// The last three are absolute and normal (accepted).
pub(crate) const HOSTILE_DIRS: &[&str] = &[
    "relative/../../etc",
    "relative",
    ".",
    "..",
    "",
    "./x",
    "~/project",
    "/tmp/../etc",
    "/tmp/./x",
    "/tmp/x/..",
    "/tmp/\u{1b}[2Jx",
    "//double//slash/",
    "/",
];

/// Dates: far in the future (a session that would stay its scope's current one for good),
/// out of range, before the epoch, impossible.
pub(crate) const HOSTILE_DATES: &[&str] = &[
    "9999-12-31T23:59:59.999Z",
    "2999-01-01T00:00:00.000Z",
    "+275760-09-13T00:00:00.000Z",
    "2100-01-01T00:00:00Z",
    "1970-01-01T00:00:00.000Z",
    "0000-01-01T00:00:00.000Z",
    "2026-02-30T00:00:00.000Z",
];

/// Agent commands an archive may carry (kept as information, never run on its say).
pub(crate) const HOSTILE_COMMANDS: &[&str] = &[
    "sh -c 'id > /tmp/acpx-fuzz-owned; exec cat'",
    "/bin/sh",
    "",
    "'unterminated",
    "env LD_PRELOAD=/tmp/x.so agent",
    "\u{1b}[2J agent",
];

/// `levels` arrays nested in one another around an object (serde_json refuses 128 and more
/// when it parses; a value built here is deeper than any parsed one can be).
pub(crate) fn deep(levels: usize) -> Value {
    let mut v = json!({"x": 1});
    for _ in 0..levels {
        v = Value::Array(vec![v]);
    }
    v
}

/// MCP server lists of every shape: the object shape where the array is kept, a server that
/// is `/bin/sh`, wrong types, empty names, deep nesting.
pub(crate) fn mcp_shape(k: u32) -> Value {
    match k % 9 {
        0 => json!({"command": "/bin/sh", "args": ["-c", "id"]}),
        1 => json!([{"name": "sh", "command": "/bin/sh", "args": ["-c", "id"], "env": []}]),
        2 => json!({"mcpServers": {"sh": {"command": "/bin/sh"}}}),
        3 => json!([{"type": "http", "name": "x", "url": "http://127.0.0.1:1/", "headers": []}]),
        4 => json!("yes"),
        5 => json!([[]]),
        6 => json!([{"name": "", "command": ""}]),
        7 => deep(100),
        _ => json!([{"name": "\u{1b}[2J", "command": "/bin/sh", "args": "not a list"}]),
    }
}

/// Numbers at the edges: `u64::MAX`, `i64::MIN`, -1, 0, a float, 1e308.
pub(crate) fn huge_number(k: u32) -> Value {
    match k % 6 {
        0 => json!(u64::MAX),
        1 => json!(i64::MIN),
        2 => json!(-1),
        3 => json!(0),
        4 => json!(1.5),
        _ => json!(1e308),
    }
}

/// What kind of value a targeted field gets.
#[derive(Clone, Copy)]
pub(crate) enum Class {
    Text,
    Dir,
    Date,
    Command,
    Mcp,
    Number,
    Any,
}

pub(crate) fn class_value(class: Class, k: u32) -> Value {
    let pick = |list: &[&str]| json!(list[k as usize % list.len()]);
    match class {
        Class::Text => pick(HOSTILE_TEXTS),
        Class::Dir => pick(HOSTILE_DIRS),
        Class::Date => pick(HOSTILE_DATES),
        Class::Command => pick(HOSTILE_COMMANDS),
        Class::Mcp => mcp_shape(k),
        Class::Number => huge_number(k),
        Class::Any => match k % 3 {
            0 => deep(60 + (k as usize / 3) % 67),
            _ => interesting_value(k / 3),
        },
    }
}

/// A targeted edit: which field (an index into a target's field list), whether it gets a
/// value of its own class (3 in 4) or of any class, and which value.
pub(crate) type Edit = (u8, u8, u32);

pub(crate) fn edits() -> impl Strategy<Value = Vec<Edit>> {
    prop::collection::vec(any::<Edit>(), 0..4)
}

/// The value of `edit` for a field of class `class`.
pub(crate) fn edit_value(class: Class, (_, how, k): Edit) -> Value {
    const CLASSES: [Class; 7] = [
        Class::Text,
        Class::Dir,
        Class::Date,
        Class::Command,
        Class::Mcp,
        Class::Number,
        Class::Any,
    ];
    if how % 4 == 0 {
        class_value(CLASSES[(how as usize / 4) % CLASSES.len()], k)
    } else {
        class_value(class, k)
    }
}

/// Sets the value at JSON pointer `ptr` of `doc`, adding the last key when its parent is an
/// object; does nothing when the parent is missing or not an object.
pub(crate) fn set_pointer(doc: &mut Value, ptr: &str, value: Value) {
    let Some((parent, key)) = ptr.rsplit_once('/') else {
        return;
    };
    if let Some(Value::Object(m)) = doc.pointer_mut(parent) {
        m.insert(key.to_owned(), value);
    }
}

/// The lines of `bytes`, each with its `\n`.
pub(crate) fn lines_of(bytes: &[u8]) -> Vec<Vec<u8>> {
    bytes
        .split_inclusive(|c| *c == b'\n')
        .map(<[u8]>::to_vec)
        .collect()
}

/// `line` (with or without its `\n`) parsed, edited by `f` and printed again; unchanged when it
/// is not JSON.
pub(crate) fn edit_line(line: &mut Vec<u8>, f: impl FnOnce(&mut Value)) {
    let nl = line.ends_with(b"\n");
    let body = line.strip_suffix(b"\n").unwrap_or(line);
    let Ok(mut v) = serde_json::from_slice::<Value>(body) else {
        return;
    };
    f(&mut v);
    let Ok(mut out) = serde_json::to_vec(&v) else {
        return;
    };
    if nl {
        out.push(b'\n');
    }
    *line = out;
}

// ---------------------------------------------------------------------------------------------
// Known gaps: promises of issue 45 that the code does not keep yet
// ---------------------------------------------------------------------------------------------

/// Whether known gaps fail the target (`ACPX_FUZZ_STRICT=1`) instead of being counted.
pub(crate) fn strict() -> bool {
    std::env::var("ACPX_FUZZ_STRICT").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// Inputs that met a promise the code does not keep (yet): each is a finding of these
/// targets, kept as an `#[ignore]`d regression test at the end of this file. A default run
/// counts them (per target: a test's inputs run on its own thread) and prints the counts;
/// with `ACPX_FUZZ_STRICT=1` the first one fails the target. Once the code is fixed the count
/// stays 0, and the gap becomes a plain assertion.
#[derive(Clone, Copy)]
pub(crate) enum Gap {
    /// An imported Node session whose `cwd` is relative or holds `.`/`..` (an archive's is
    /// refused by `admit_imported`; the Node importer does not call it).
    NodeRelativeCwd,
    /// An imported session whose `lastUsedAt` is in the future: a Node session's is never
    /// brought back to the time of the import; an archive's is, in its snapshot, but rolling
    /// the session forward over the archive's events (those past its `acpx.audit_seq`, at the
    /// first open, `load_rolled_forward`) takes their timestamps (`mapping::apply_event`).
    FutureLastUsed,
    /// A control character in what `sessions show` prints raw (ACP session id, agent session
    /// id, mode, last turn, event log) or in the Markdown export's title (`# {title}`).
    RawControlChars,
    /// An archive imported without `--trust` whose agent command or MCP servers are stored
    /// runnable (issue 45, item 1: kept as information only).
    RunnableImport,
    /// An imported session whose snapshot names a process (`pid`) of the machine that
    /// exported it (rolled forward from the archive's `agent_started` at the import).
    ForeignPid,
}

pub(crate) const GAP_NAMES: [&str; 5] = [
    "Node relative cwd",
    "future lastUsedAt",
    "raw control characters shown",
    "runnable imports",
    "foreign pids",
];

thread_local! {
    static GAPS: std::cell::RefCell<[u64; 5]> = const { std::cell::RefCell::new([0; 5]) };
}

/// Counts one input of gap `which`, or fails with `what` in a strict run.
pub(crate) fn gap(which: Gap, what: impl FnOnce() -> String) {
    if strict() {
        panic!("known gap ({}): {}", GAP_NAMES[which as usize], what());
    }
    if std::env::var_os("ACPX_FUZZ_GAPS").is_some() {
        eprintln!("known gap ({}): {}", GAP_NAMES[which as usize], what());
    }
    GAPS.with(|g| g.borrow_mut()[which as usize] += 1);
}

pub(crate) fn print_gaps(target: &str) {
    let counts = GAPS.with(|g| *g.borrow());
    let listed: Vec<String> = GAP_NAMES
        .iter()
        .zip(counts)
        .map(|(name, n)| format!("{n} {name}"))
        .collect();
    eprintln!(
        "fuzz {target}: known gaps (ACPX_FUZZ_STRICT=1 fails on them): {}",
        listed.join(", ")
    );
}

/// Whether `cwd` is what an imported session may run its agent in: absolute, without `.` or
/// `..`.
pub(crate) fn admissible_cwd(cwd: &str) -> bool {
    let p = Path::new(cwd);
    p.is_absolute()
        && p.components()
            .all(|c| !matches!(c, Component::ParentDir | Component::CurDir))
}

/// Checks what a person reads of a stored session: the facts of `sessions show` and the
/// Markdown export's header carry no control character (the promise of issue 45, item 12:
/// names, titles, agent commands and directories are escaped; the rest is counted as a gap).
pub(crate) fn check_shown(r: &SessionRecord) {
    let promised = ["agent", "directory", "name", "title"];
    for (label, value) in record_facts(r, &Probe::Idle) {
        if value.chars().any(char::is_control) {
            assert!(
                !promised.contains(&label),
                "`sessions show` prints the {label} {value:?} with a control character"
            );
            gap(Gap::RawControlChars, || {
                format!("`sessions show` prints the {label} {value:?} raw")
            });
            return;
        }
    }
    let md = markdown(r);
    let header = md.split("\n\n- record id").next().unwrap_or_default();
    if header.chars().any(|c| c.is_control() && c != '\n') {
        gap(Gap::RawControlChars, || {
            format!("the Markdown export's title is {header:?}, raw")
        });
    }
}

// ---------------------------------------------------------------------------------------------
// Archives
// ---------------------------------------------------------------------------------------------

/// Fields of an archive's session (JSON pointers in its head line's `session`).
pub(crate) const ARCHIVE_FIELDS: &[(&str, Class)] = &[
    ("/cwd", Class::Dir),
    ("/lastUsedAt", Class::Date),
    ("/createdAt", Class::Date),
    ("/name", Class::Text),
    ("/thread/title", Class::Text),
    ("/agentCommand", Class::Command),
    ("/acpx/mcp_servers", Class::Mcp),
    ("/acpSessionId", Class::Text),
    ("/agentSessionId", Class::Text),
    ("/revision", Class::Number),
    ("/pid", Class::Number),
    ("/acpx/event_log/last_seq", Class::Number),
    ("/acpx/audit_seq", Class::Number),
    ("/agentCapabilities", Class::Any),
    ("/acpx/current_mode_id", Class::Text),
    ("/acpxRecordId", Class::Text),
    ("/closed", Class::Any),
    ("/lastPromptAt", Class::Date),
    ("/acpx/untrusted_import", Class::Any),
    ("/acpx/untrusted_import/agentCommand", Class::Command),
];

/// Fields of an event line (see [`archive_edit`] for `/seq`).
pub(crate) const EVENT_FIELDS: &[(&str, Class)] = &[
    ("/seq", Class::Number),
    ("/acpxRecordId", Class::Text),
    ("/payload", Class::Any),
    ("/timestamp", Class::Date),
    ("/type", Class::Text),
    ("/payload/phase", Class::Text),
    ("/requestId", Class::Text),
];

/// Applies one targeted edit to an archive: to its head line's session (`field` even) or to
/// one of its event lines. A seq edit makes the seq a duplicate of the line before, a gap,
/// 0, 1, `u64::MAX` or `u64::MAX - 1`.
pub(crate) fn archive_edit(lines: &mut [Vec<u8>], edit: Edit) {
    let (field, _, k) = edit;
    if field % 2 == 0 || lines.len() < 2 {
        let (ptr, class) = ARCHIVE_FIELDS[(field as usize / 2) % ARCHIVE_FIELDS.len()];
        let value = edit_value(class, edit);
        edit_line(&mut lines[0], |head| {
            if let Some(session) = head.get_mut("session") {
                set_pointer(session, ptr, value);
            }
        });
        return;
    }
    let i = 1 + (k as usize / 7) % (lines.len() - 1);
    let (ptr, class) = EVENT_FIELDS[(field as usize / 2) % EVENT_FIELDS.len()];
    if ptr == "/seq" {
        let prev = serde_json::from_slice::<Value>(lines[i - 1].trim_ascii_end())
            .ok()
            .and_then(|v| v.get("seq").and_then(Value::as_u64))
            .unwrap_or(0);
        let seq = match k % 6 {
            0 => prev,
            1 => prev.saturating_add(2),
            2 => 0,
            3 => 1,
            4 => u64::MAX,
            _ => u64::MAX - 1,
        };
        edit_line(&mut lines[i], |e| set_pointer(e, "/seq", json!(seq)));
    } else {
        let value = edit_value(class, edit);
        edit_line(&mut lines[i], |e| set_pointer(e, ptr, value));
    }
}

/// The fixture session as an archive with its first `events` events (all when `None`), its
/// head changed by `head`. With `Some` the head is a small session of the same ids (an empty
/// thread whose snapshot has folded in those events), cheaper to import and more often
/// reached by the mutations than the fixture's 31 KB one.
pub(crate) fn archive_sample(events: Option<usize>, head: impl FnOnce(&mut Value)) -> Vec<u8> {
    let full = SessionRecord::from_json_slice(SNAPSHOT, "session_full.json")
        .expect("the fixture snapshot is valid");
    let ts = Timestamp::parse("2026-11-23T18:05:00.000Z").expect("a date");
    let record = match events {
        None => full,
        Some(n) => {
            let mut small = SessionRecord::new(
                NewSession {
                    acpx_record_id: full.acpx_record_id.clone(),
                    acp_session_id: full.acp_session_id.clone(),
                    agent_session_id: None,
                    agent_command: full.agent_command.clone(),
                    cwd: full.cwd.clone(),
                    name: Some("fuzz".into()),
                },
                ts,
            );
            small.acpx.audit_seq = n as u64;
            small
        }
    };
    let mut head_line = archive_head(&record, ts).expect("an archive head");
    edit_line(&mut head_line, |h| head(&mut h["session"]));
    let mut out = head_line;
    for line in EVENTS
        .split_inclusive(|c| *c == b'\n')
        .take(events.unwrap_or(usize::MAX))
    {
        out.extend_from_slice(line);
    }
    out
}

/// The archive samples: the whole fixture session (114 events), a short one (3 events, so
/// that mutations reach the head line often), and hostile ones that must import (control
/// characters in the name and title, a command and MCP servers that are not the user's, a
/// `lastUsedAt` in 2999, a payload nested 120 deep, seqs starting at 1000) or be refused
/// whole (a relative cwd; a duplicate seq after the first batch; a truncated last line).
pub(crate) fn archive_samples() -> Vec<Vec<u8>> {
    let hostile_head = |s: &mut Value| {
        s["name"] = json!("\u{1b}]0;owned\u{7}name");
        s["thread"]["title"] = json!("\u{1b}[2Jtitle\r");
        s["acpSessionId"] = json!("sess\u{1b}[2J");
        s["agentCommand"] = json!(HOSTILE_COMMANDS[0]);
        s["acpx"]["mcp_servers"] = mcp_shape(0);
        s["lastUsedAt"] = json!("2999-01-01T00:00:00.000Z");
    };
    let mut hostile = archive_sample(Some(3), hostile_head);
    let mut lines = lines_of(&hostile);
    for (i, line) in lines.iter_mut().enumerate().skip(1) {
        edit_line(line, |e| {
            e["seq"] = json!(999 + i as u64);
            if i == 2 {
                e["payload"]["nested"] = deep(120);
            }
        });
    }
    hostile = lines.concat();

    let relative = archive_sample(Some(3), |s| s["cwd"] = json!("relative/../../etc"));

    // A duplicate seq far into the log (after the first import batch of 1,000 events): the
    // stage must be aborted and leave nothing.
    let mut long = archive_sample(Some(1), |_| {});
    let event = lines_of(EVENTS).remove(1);
    for seq in 1..=1_003u64 {
        let mut line = event.clone();
        edit_line(&mut line, |e| e["seq"] = json!(seq.min(1_002)));
        long.extend_from_slice(&line);
    }

    // An archive that says it is an untrusted import already, with a shape no fold expects.
    let pretends = archive_sample(Some(3), |s| {
        s["agentCommand"] = json!(HOSTILE_COMMANDS[0]);
        s["acpx"]["mcp_servers"] = mcp_shape(1);
        s["acpx"]["untrusted_import"] = json!({"agentCommand": 1});
    });

    let mut truncated = archive_sample(Some(5), |_| {});
    truncated.truncate(truncated.len() - 40);

    vec![
        archive_sample(None, |_| {}),
        archive_sample(Some(3), |_| {}),
        hostile,
        relative,
        long,
        pretends,
        truncated,
    ]
}

/// How often each of [`archive_samples`] is drawn: the two that cost most (the whole fixture
/// session, the log of 1,003 events) least often, so that a default run stays short.
pub(crate) const ARCHIVE_WEIGHTS: &[u32] = &[1, 4, 4, 2, 1, 2, 2];

/// Inputs over samples drawn by `weights` (what `fuzz_support::inputs` does with equal ones).
pub(crate) fn weighted_inputs(weights: &'static [u32]) -> impl Strategy<Value = Input> {
    let total: u32 = weights.iter().sum();
    let pick = move |mut w: u32| {
        weights
            .iter()
            .position(|x| {
                let hit = w < *x;
                w = w.saturating_sub(*x);
                hit
            })
            .unwrap_or(0)
    };
    prop_oneof![
        9 => (0..total, prop::collection::vec(any::<fuzz_support::Mutation>(), 1..6))
            .prop_map(move |(w, m)| Input::Mutated(pick(w), m)),
        1 => prop::collection::vec(any::<u8>(), 0..600).prop_map(Input::Random),
    ]
}

/// Which store an input imports into, and how.
#[derive(Debug, Clone)]
pub(crate) struct ArchiveRun {
    /// 0-4: memory, 5-6: file store, 7: SQLite (whose store costs most to make).
    store: u8,
    new_id: bool,
    /// Import a `session.json` (the head's session, pretty) and an events file (the rest)
    /// instead of the archive.
    as_snapshot: bool,
    /// After a successful import: the same import again (refused, nothing changed) and fsck.
    again: bool,
}

pub(crate) fn archive_runs() -> impl Strategy<Value = ArchiveRun> {
    any::<u8>().prop_map(|b| ArchiveRun {
        store: match b & 7 {
            0..=4 => 0,
            5 | 6 => 2,
            _ => 3,
        },
        new_id: b & 8 != 0,
        as_snapshot: b & 16 != 0,
        again: b & 32 != 0,
    })
}

/// A fresh store of kind `kind` under `dir`.
pub(crate) fn fresh_store(kind: u8, dir: &Path) -> Arc<dyn Store> {
    let _ = fs::remove_dir_all(dir);
    fs::create_dir_all(dir).expect("a store dir");
    match kind {
        2 => Arc::new(FsStore::open(dir.join("sessions")).expect("a file store")),
        3 => Arc::new(SqliteStore::open(dir.join("acpx.db")).expect("a SQLite store")),
        _ => Arc::new(MemoryStore::new()),
    }
}

/// Every session of `store`, closed ones included.
pub(crate) async fn all_sessions(store: &dyn Store) -> Vec<RecordId> {
    store
        .list(&ListQuery {
            closed: ClosedFilter::Any,
            ..ListQuery::default()
        })
        .await
        .expect("the store lists")
        .sessions
        .into_iter()
        .map(|s| s.acpx_record_id)
        .collect()
}

/// The whole log of `id`.
pub(crate) async fn whole_log(store: &dyn Store, id: &RecordId) -> Vec<EventEnvelope> {
    let mut out = Vec::new();
    let mut from = 0;
    loop {
        let page = store
            .read_events(id, &EventQuery::from_seq(from))
            .await
            .expect("an imported log reads back");
        out.extend(page.events);
        match page.next_seq {
            Some(next) if next > from => from = next,
            _ => return out,
        }
    }
}

/// What a successful import must have stored: exactly one session, `stored`, loadable, with
/// a gap-free log of `count` events that all belong to it, an absolute normal cwd, no
/// `lastUsedAt` in the future, what it shows escaped, readable MCP servers.
pub(crate) async fn check_imported(store: &dyn Store, stored: &SessionRecord, count: u64) {
    let id = &stored.acpx_record_id;
    assert_eq!(all_sessions(store).await, vec![id.clone()], "one session");
    let loaded = store.load(id).await.expect("an imported snapshot loads");
    assert!(
        admissible_cwd(&loaded.cwd),
        "imported with the directory {:?}",
        loaded.cwd
    );
    check_last_used(&loaded, "imported");
    if let Some(pid) = loaded.pid {
        gap(Gap::ForeignPid, || {
            format!("{id} was imported naming process {pid}")
        });
    }
    let untrusted = loaded
        .acpx
        .extra
        .get("untrusted_import")
        .and_then(|u| u.get("agentCommand"))
        .is_some_and(Value::is_string);
    if !untrusted
        || !loaded.agent_command.starts_with("untrusted-import:")
        || loaded.acpx.extra.contains_key("mcp_servers")
    {
        gap(Gap::RunnableImport, || {
            format!(
                "{id} imported without --trust runs {:?} with MCP servers {:?}",
                loaded.agent_command,
                loaded.acpx.extra.get("mcp_servers")
            )
        });
    }
    let log = whole_log(store, id).await;
    // An untrusted import's log ends with one more event, `session_imported` (issue 45,
    // item 1: what the archive named kept as information).
    let marked = log.len() as u64 == count + 1
        && log
            .last()
            .is_some_and(|e| e.payload.get("phase") == Some(&json!("session_imported")));
    assert!(
        log.len() as u64 == count || marked,
        "{} events stored of the {count} read",
        log.len()
    );
    for pair in log.windows(2) {
        assert_eq!(
            pair[1].seq,
            pair[0].seq + 1,
            "imported seqs follow each other"
        );
    }
    assert!(log.iter().all(|e| &e.acpx_record_id == id));
    if let Some(last) = log.last() {
        assert_eq!(loaded.acpx.event_log.last_seq, last.seq);
    }
    check_shown(&loaded);
    if let Some(stored_mcp) = loaded.acpx.extra.get("mcp_servers") {
        if let Ok(servers) = McpServers::from_stored(stored_mcp) {
            let _ = servers.for_agent(&json!({"mcpCapabilities": {"http": true}}));
        }
    }
    if let Ok((rolled, ..)) = acpx_runtime::load_rolled_forward(store, id).await {
        check_last_used(&rolled, "rolled forward");
    }
}

/// `lastUsedAt` of an imported session is not in the future ([`Gap::FutureLastUsed`]).
pub(crate) fn check_last_used(r: &SessionRecord, when: &str) {
    if r.last_used_at.millis() > Timestamp::now().millis() {
        gap(Gap::FutureLastUsed, || {
            format!(
                "{} {when} with lastUsedAt {} in the future",
                r.acpx_record_id, r.last_used_at
            )
        });
    }
}

/// A refused import must leave nothing: no session, nothing staged.
pub(crate) async fn check_refused(store: &dyn Store, e: &OpsError) {
    assert!(!e.to_string().is_empty(), "a refusal says why");
    assert_eq!(
        all_sessions(store).await,
        vec![],
        "a refused import left {e}"
    );
    assert_eq!(
        store.stale_stages().await.expect("stale stages").len(),
        0,
        "a refused import left a stage: {e}"
    );
}

/// Imports `archive` as `sessions import` does (streamed), then whole, and checks both.
pub(crate) async fn import_archive(dir: &Path, archive: &[u8], run: &ArchiveRun) {
    // Seqs and an `audit_seq` near `u64::MAX` (once known gaps: `overflows_seq`,
    // `audit_seq_max`) are refused without overflow now, and go through like any input.
    let source = if run.as_snapshot {
        let Some(snapshot) = split_archive(archive) else {
            return;
        };
        read_import_source(std::io::Cursor::new(snapshot), "session.json").map(|s| match s {
            ImportSource::Snapshot(record) => Some((
                record,
                EventLines::new(
                    std::io::Cursor::new(archive_rest(archive)),
                    "events.ndjson",
                    1,
                ),
            )),
            _ => None,
        })
    } else {
        read_import_source(std::io::Cursor::new(archive.to_vec()), "x.ndjson").map(|s| match s {
            ImportSource::Archive(record, lines) => Some((record, lines)),
            _ => None,
        })
    };
    match source {
        Ok(Some((record, lines))) => {
            // Made only now: an input refused before anything is stored needs no store.
            let store = fresh_store(run.store, &dir.join("store"));
            let original = record.acpx_record_id.clone();
            match import_event_lines(&*store, record.clone(), lines, run.new_id).await {
                Ok((stored, count)) => {
                    assert!(!run.new_id || stored.acpx_record_id != original);
                    check_imported(&*store, &stored, count).await;
                    if run.again {
                        again(&store, archive, record, &stored, run.new_id).await;
                    }
                }
                Err(e) => check_refused(&*store, &e).await,
            }
        }
        Ok(None) => {}
        Err(e) => assert!(!e.to_string().is_empty(), "a refusal says why"),
    }
    // The whole-text path too, on half the inputs (the cost of a default run).
    if !run.as_snapshot {
        import_whole(archive, run.new_id).await;
    }
}

/// The head's session printed as a `session.json`.
pub(crate) fn split_archive(archive: &[u8]) -> Option<Vec<u8>> {
    let head = archive.split(|c| *c == b'\n').next()?;
    let head: Value = serde_json::from_slice(head).ok()?;
    serde_json::to_vec_pretty(head.get("session")?).ok()
}

/// The bytes after an archive's head line.
pub(crate) fn archive_rest(archive: &[u8]) -> Vec<u8> {
    archive
        .iter()
        .position(|c| *c == b'\n')
        .map_or_else(Vec::new, |i| archive[i + 1..].to_vec())
}

/// The same import again after a successful one: under its own id it is refused as taken and
/// the stored session is unchanged; then `fsck` (check only) runs on the store.
pub(crate) async fn again(
    store: &Arc<dyn Store>,
    archive: &[u8],
    mut record: SessionRecord,
    stored: &SessionRecord,
    new_id: bool,
) {
    if !new_id {
        let lines = EventLines::new(std::io::Cursor::new(archive_rest(archive)), "x.ndjson", 2);
        record.acpx_record_id = stored.acpx_record_id.clone();
        let r = import_event_lines(&**store, record, lines, false).await;
        assert!(
            matches!(r, Err(OpsError::Store(StoreError::AlreadyExists(_)))),
            "a second import of {} was not refused as taken: {:?}",
            stored.acpx_record_id,
            r.map(|(_, n)| n)
        );
        let after = store.load(&stored.acpx_record_id).await.expect("it loads");
        assert_eq!(
            after.revision, stored.revision,
            "a refused import changed it"
        );
        assert_eq!(all_sessions(&**store).await.len(), 1);
    }
    let options = FsckOptions {
        repair: false,
        set_aside_torn_tail: None,
    };
    if let Ok(report) = fsck::<OpsError>(store.clone(), options, |_| Ok(false)).await {
        assert!(report.stale_stages.is_empty(), "fsck found a stale stage");
    }
}

/// The whole-text path (`parse_import_file` + `import_session`) into a memory store: the same
/// promise, whole session or nothing.
pub(crate) async fn import_whole(archive: &[u8], new_id: bool) {
    let Ok(text) = std::str::from_utf8(archive) else {
        return;
    };
    let store = MemoryStore::new();
    match parse_import_file(text, "x.ndjson") {
        Ok(ImportFile::Archive(session)) => {
            let count = session.events.len() as u64;
            match import_session(&store, session, new_id, "x.ndjson").await {
                Ok(stored) => check_imported(&store, &stored, count).await,
                Err(e) => check_refused(&store, &e).await,
            }
        }
        Ok(_) => {}
        Err(e) => assert!(!e.to_string().is_empty()),
    }
}

#[test]
fn fuzz_archive_import() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let dir = tempfile::tempdir_in(fuzz_support::scratch_root()).expect("a temp dir");
    let samples = archive_samples();
    assert_eq!(samples.len(), ARCHIVE_WEIGHTS.len());
    fuzz_with(
        "archive import",
        (weighted_inputs(ARCHIVE_WEIGHTS), edits(), archive_runs()),
        |(input, edits, run): (Input, Vec<Edit>, ArchiveRun)| {
            let bytes = bytes_of(&input, &samples);
            let mut lines = lines_of(&bytes);
            if !lines.is_empty() {
                for e in &edits {
                    archive_edit(&mut lines, *e);
                }
            }
            let archive = lines.concat();
            rt.block_on(import_archive(dir.path(), &archive, &run));
        },
    );
    print_gaps("archive import");
}
