//! Fuzz target `fuzz_node_import` (see `fuzz_imports` for the shared parts and the long-run
//! settings): a Node acpx home (session record, its rotated `.stream.N.ndjson` segments and the
//! active `.stream.ndjson`, a segment that is a FIFO, a link to `/dev/zero`, a link out of the
//! home or a directory) through the real `import_node_home` into a memory or file store.

use acpx_test_support::fuzz as fuzz_support;

use std::fs;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::fuzz_imports::*;
use acpx_runtime::ops::node_import::import_node_home;
use acpx_runtime::ops::node_import::loadable::encode_uri_component;
use fuzz_support::{bytes_of, fuzz_with, inputs, Input};
use proptest::prelude::*;
use serde_json::{json, Value};

// ---------------------------------------------------------------------------------------------
// Node homes
// ---------------------------------------------------------------------------------------------

pub(crate) fn node_fixture(name: &str) -> Vec<u8> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(NODE);
    fs::read(dir.join(name)).expect("a Node fixture")
}

/// Node records: the fixture's three and a hostile one (control characters in the name,
/// title and ACP session id, a relative cwd with `..`, `last_used_at` in 2999, a command and
/// `agent_argv` that are not the user's, MCP servers in `session_options`, a huge `last_seq`).
fn node_records() -> Vec<Vec<u8>> {
    let mut hostile: Value =
        serde_json::from_slice(&node_fixture("sess-node-1.json")).expect("a Node record");
    hostile["name"] = json!("\u{1b}]0;owned\u{7}api");
    hostile["title"] = json!("\u{1b}[2Jtitle");
    hostile["acp_session_id"] = json!("sess\u{1b}[2J");
    hostile["cwd"] = json!("relative/../../etc");
    hostile["last_used_at"] = json!("2999-01-01T00:00:00.000Z");
    hostile["agent_command"] = json!(HOSTILE_COMMANDS[0]);
    hostile["agent_argv"] = json!({"sh": ["-c", "id"]});
    hostile["acpx"]["session_options"] = json!({"mcpServers": mcp_shape(0)});
    hostile["last_seq"] = json!(u64::MAX);
    vec![
        node_fixture("sess-node-1.json"),
        node_fixture("sess-node-2.json"),
        node_fixture("sess%3Anode-3.json"),
        serde_json::to_vec_pretty(&hostile).expect("json"),
    ]
}

/// Node journal segments: the fixture's three and a hostile one (a duplicated segment anchor,
/// huge JSON-RPC ids, params nested 120 deep, a line that is not UTF-8, a torn last line).
fn node_journals() -> Vec<Vec<u8>> {
    let older = node_fixture("sess-node-1.stream.1.ndjson");
    let mut lines = lines_of(&older);
    let anchor = lines[0].clone();
    lines.insert(1, anchor);
    edit_line(&mut lines[2], |v| v["id"] = json!(u64::MAX));
    edit_line(&mut lines[3], |v| v["params"]["nested"] = deep(120));
    lines.insert(
        4,
        b"{\"jsonrpc\": \"2.0\", \"method\": \"\xff\xfe\"}\n".to_vec(),
    );
    let mut hostile = lines.concat();
    hostile.extend_from_slice(b"{\"jsonrpc\": \"2.0\", \"id\": 1e308, \"resu");
    vec![
        older,
        node_fixture("sess-node-1.stream.ndjson"),
        node_fixture("sess%3Anode-3.stream.ndjson"),
        hostile,
    ]
}

/// Fields of a Node record.
const NODE_FIELDS: &[(&str, Class)] = &[
    ("/cwd", Class::Dir),
    ("/last_used_at", Class::Date),
    ("/created_at", Class::Date),
    ("/name", Class::Text),
    ("/title", Class::Text),
    ("/agent_command", Class::Command),
    ("/agent_argv", Class::Any),
    ("/acpx_record_id", Class::Text),
    ("/acp_session_id", Class::Text),
    ("/agent_session_id", Class::Text),
    ("/last_seq", Class::Number),
    ("/acpx/session_options", Class::Mcp),
    ("/acpx/desired_config_options", Class::Any),
    ("/acpx/current_mode_id", Class::Text),
    ("/messages", Class::Any),
    ("/closed", Class::Any),
    ("/closed_at", Class::Date),
    ("/pid", Class::Number),
];

/// Fields of a Node journal line (an ACP frame or one of Node's markers).
const JOURNAL_FIELDS: &[(&str, Class)] = &[
    ("/sequence", Class::Number),
    ("/message_sequence", Class::Number),
    ("/record_id", Class::Text),
    ("/id", Class::Number),
    ("/params", Class::Any),
    ("/params/sessionId", Class::Text),
    ("/params/cwd", Class::Dir),
    ("/params/mcpServers", Class::Mcp),
    ("/result", Class::Any),
    ("/result/stopReason", Class::Text),
    ("/timestamp", Class::Date),
    ("/type", Class::Text),
];

/// Applies one targeted edit to the record (`field` even) or to a line of a journal.
fn node_edit(record: &mut Vec<u8>, journals: &mut [Vec<u8>], edit: Edit) {
    let (field, _, k) = edit;
    if field % 2 == 0 {
        let (ptr, class) = NODE_FIELDS[(field as usize / 2) % NODE_FIELDS.len()];
        let value = edit_value(class, edit);
        if let Ok(mut doc) = serde_json::from_slice::<Value>(record) {
            set_pointer(&mut doc, ptr, value);
            *record = serde_json::to_vec_pretty(&doc).unwrap_or_default();
        }
        return;
    }
    let (ptr, class) = JOURNAL_FIELDS[(field as usize / 2) % JOURNAL_FIELDS.len()];
    let journal = &mut journals[k as usize % journals.len()];
    let mut lines = lines_of(journal);
    if lines.is_empty() {
        return;
    }
    let i = (k as usize / 3) % lines.len();
    let value = edit_value(class, edit);
    edit_line(&mut lines[i], |v| set_pointer(v, ptr, value));
    *journal = lines.concat();
}

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

/// The `N` of rotated segment names: Node's (1, 2, 3, 10), the largest `u32`, and names the
/// importer must ignore or read as another N (`01`, `+1`, past `u32`, negative, not a number).
const SEGMENT_NUMBERS: &[&str] = &[
    "1",
    "2",
    "3",
    "10",
    "4294967295",
    "01",
    "+1",
    "4294967296",
    "-1",
    "1.bak",
    "",
];

/// How a Node home is laid out.
#[derive(Debug, Clone)]
struct NodeLayout {
    /// The names of up to three rotated segments (indices into [`SEGMENT_NUMBERS`]); the
    /// i-th holds journal input i.
    rotated: Vec<u8>,
    /// Whether the active `.stream.ndjson` exists (it holds the last journal input).
    active: bool,
    /// One file that is not a regular file (see [`make_odd`]), 1 input in 4.
    odd: u8,
    /// 0: memory store, 1: file store.
    store: u8,
    new_id: bool,
}

fn node_layouts() -> impl Strategy<Value = NodeLayout> {
    (
        prop::collection::vec(any::<u8>(), 0..4),
        any::<u8>(),
        any::<u8>(),
    )
        .prop_map(|(rotated, odd, bits)| NodeLayout {
            rotated,
            active: bits & 1 == 0 || bits & 6 == 6,
            odd,
            store: (bits >> 3) & 1,
            new_id: bits & 16 != 0,
        })
}

/// Replaces `path` with something that is not a regular file: a FIFO (which would hang a
/// reader), a link to `/dev/zero` (endless), a link to a file out of the home, a directory,
/// a link to the record (inside the home).
fn make_odd(path: &Path, kind: u8, outside: &Path, record: &Path) {
    let _ = fs::remove_file(path);
    match kind % 5 {
        0 => {
            use std::os::unix::ffi::OsStrExt;
            let c = std::ffi::CString::new(path.as_os_str().as_bytes()).expect("a path");
            // SAFETY: `c` is a valid NUL-terminated path.
            let rc = unsafe { libc::mkfifo(c.as_ptr(), 0o600) };
            assert_eq!(rc, 0, "mkfifo {}", path.display());
        }
        1 => std::os::unix::fs::symlink("/dev/zero", path).expect("a link"),
        2 => std::os::unix::fs::symlink(outside, path).expect("a link"),
        3 => fs::create_dir(path).expect("a directory"),
        _ => std::os::unix::fs::symlink(record, path).expect("a link"),
    }
}

/// Lays out one Node home under `home` and imports it; checks what was stored.
async fn import_node_one(home: &Path, record: &[u8], journals: &[Vec<u8>], layout: &NodeLayout) {
    let sessions = home.join("sessions");
    let _ = fs::remove_dir_all(home);
    fs::create_dir_all(&sessions).expect("sessions dir");
    let outside = home.join("outside.ndjson");
    fs::write(&outside, &journals[0]).expect("write");
    let stem = node_stem(record);
    let record_path = sessions.join(format!("{stem}.json"));
    fs::write(&record_path, record).expect("write");
    let mut files = Vec::new();
    for (i, code) in layout.rotated.iter().enumerate() {
        let n = SEGMENT_NUMBERS[*code as usize % SEGMENT_NUMBERS.len()];
        let path = sessions.join(format!("{stem}.stream.{n}.ndjson"));
        fs::write(&path, &journals[i.min(journals.len() - 2)]).expect("write");
        files.push(path);
    }
    if layout.active {
        let path = sessions.join(format!("{stem}.stream.ndjson"));
        fs::write(&path, journals.last().expect("a journal")).expect("write");
        files.push(path);
    }
    files.push(record_path.clone());
    let kind = layout.odd % 20;
    if kind >= 15 {
        let target = &files[(layout.odd as usize / 20) % files.len()];
        make_odd(target, kind, &outside, &record_path);
    }

    let store = fresh_store(layout.store * 2, &home.join("store"));
    let report = import_node_home(&*store, home, layout.new_id).await;
    let listed = all_sessions(&*store).await;
    assert_eq!(
        store.stale_stages().await.expect("stale stages").len(),
        0,
        "a Node import left a stage"
    );
    let report = match report {
        Ok(report) => report,
        Err(e) => {
            assert!(!e.to_string().is_empty(), "a failed import says why");
            assert_eq!(
                listed,
                vec![],
                "a failed import of one session stored some: {e}"
            );
            return;
        }
    };
    assert_eq!(
        listed.len(),
        report.imported.len(),
        "sessions stored but not reported imported (a partial import): {:?}",
        report.skipped
    );
    IMPORTED.fetch_add(report.imported.len() as u64, Ordering::Relaxed);
    for imported in &report.imported {
        let id = &imported.session.acpx_record_id;
        let loaded = store.load(id).await.expect("an imported snapshot loads");
        let log = whole_log(&*store, id).await;
        assert_eq!(
            log.len(),
            imported.events,
            "every converted event is stored"
        );
        for (i, e) in log.iter().enumerate() {
            assert_eq!(e.seq, i as u64 + 1, "imported seqs are 1, 2, 3, …");
            assert_eq!(&e.acpx_record_id, id);
        }
        if !admissible_cwd(&loaded.cwd) {
            gap(Gap::NodeRelativeCwd, || {
                format!(
                    "a Node session was imported with the directory {:?}",
                    loaded.cwd
                )
            });
        }
        check_last_used(&loaded, "imported from a Node home");
        if let Some(pid) = loaded.pid {
            gap(Gap::ForeignPid, || {
                format!("{id} was imported naming process {pid}")
            });
        }
        check_shown(&loaded);
        if let Ok((rolled, ..)) = acpx_runtime::load_rolled_forward(&*store, id).await {
            check_last_used(&rolled, "rolled forward");
        }
    }
}

/// Sessions imported so far by [`fuzz_node_import`] (printed: inputs that reach the store).
static IMPORTED: AtomicU64 = AtomicU64::new(0);

#[test]
fn fuzz_node_import() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let home = tempfile::tempdir_in(fuzz_support::scratch_root()).expect("a temp dir");
    let records = node_records();
    let journals = node_journals();
    let strategy = (
        inputs(records.len()),
        (
            inputs(journals.len()),
            inputs(journals.len()),
            inputs(journals.len()),
        ),
        edits(),
        node_layouts(),
    );
    fuzz_with(
        "node record + journal",
        strategy,
        |(r, (j0, j1, j2), edits, layout): (
            Input,
            (Input, Input, Input),
            Vec<Edit>,
            NodeLayout,
        )| {
            let mut record = bytes_of(&r, &records);
            let mut segments = [
                bytes_of(&j0, &journals),
                bytes_of(&j1, &journals),
                bytes_of(&j2, &journals),
            ];
            for e in &edits {
                node_edit(&mut record, &mut segments, *e);
            }
            rt.block_on(import_node_one(
                &home.path().join("home"),
                &record,
                &segments,
                &layout,
            ));
        },
    );
    eprintln!(
        "fuzz node record + journal: {} sessions imported",
        IMPORTED.load(Ordering::Relaxed)
    );
    print_gaps("node record + journal");
}
