//! `cargo xtask bench import`: the speed of `sessions import --from-node-acpx` into the file
//! store (target: at least 50,000 events/s), behind `docs/BENCHMARKS.md`.
//!
//! Method: a synthetic Node acpx 0.19 home is written first (not timed): `--sessions` records,
//! each with a journal of `--turns` turns shaped like a real agent's (Node's turn markers, the
//! `session/prompt` request, `--chunks` message chunks, a tool call with two updates, the
//! response). Then one `import_node` call imports the whole home into a fresh file store, and
//! the figure is events stored divided by its wall time: reading and parsing the journals,
//! converting, rebuilding every thread with the reducer, and writing logs and snapshots.

use std::path::{Path, PathBuf};
use std::time::Instant;

use acpx_runtime::ops::node_import::{import_node, NodeImportOptions, JOURNAL_SCHEMA};
use serde_json::json;

/// Parsed command-line options.
pub struct Options {
    sessions: usize,
    turns: usize,
    chunks: usize,
    dir: Option<PathBuf>,
}

impl Options {
    pub fn parse(args: &[String]) -> Result<Options, String> {
        let mut opts = Options {
            sessions: 40,
            turns: 10,
            chunks: 250,
            dir: None,
        };
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            let mut number = |name: &str| -> Result<usize, String> {
                it.next()
                    .and_then(|v| v.parse().ok())
                    .ok_or(format!("{name} needs a number"))
            };
            match arg.as_str() {
                "--quick" => {
                    opts.sessions = 4;
                    opts.turns = 5;
                    opts.chunks = 50;
                }
                "--sessions" => opts.sessions = number("--sessions")?,
                "--turns" => opts.turns = number("--turns")?,
                "--chunks" => opts.chunks = number("--chunks")?,
                "--dir" => opts.dir = Some(PathBuf::from(it.next().ok_or("--dir needs a value")?)),
                other => return Err(format!("unknown option {other:?}")),
            }
        }
        Ok(opts)
    }
}

/// Writes one Node session (record + journal) into `sessions`; returns its journal lines.
fn write_node_session(sessions: &Path, i: usize, o: &Options) -> Result<usize, String> {
    let id = format!("sess-bench-{i:04}");
    let acp = format!("acp-bench-{i:04}");
    let mut lines = vec![
        json!({"schema": JOURNAL_SCHEMA, "type": "segment", "record_id": id,
        "sequence": 0, "message_sequence": 0, "request_id": null})
        .to_string(),
    ];
    let mut messages = Vec::new();
    let mut rpc = 10;
    for t in 0..o.turns {
        let request = format!("req-{i}-{t}");
        let user_id = format!("user-{i}-{t}");
        let text = format!("turn {t}: please refactor module {i}");
        rpc += 1;
        lines.push(
            json!({"schema": JOURNAL_SCHEMA, "type": "turn_started", "request_id": request})
                .to_string(),
        );
        lines.push(
            json!({"jsonrpc": "2.0", "id": rpc, "method": "session/prompt",
            "params": {"sessionId": acp, "prompt": [{"type": "text", "text": text}]}})
            .to_string(),
        );
        let mut reply = String::new();
        for c in 0..o.chunks {
            let chunk = format!("word{c} of the answer to turn {t}, with some more text. ");
            reply.push_str(&chunk);
            lines.push(json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": acp,
                "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": chunk}}}}).to_string());
        }
        let call = format!("call-{t}");
        lines.push(json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": acp,
            "update": {"sessionUpdate": "tool_call", "toolCallId": call, "title": "Edit src/lib.rs",
                       "kind": "edit", "status": "in_progress", "rawInput": {"path": "src/lib.rs"}}}}).to_string());
        lines.push(json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": acp,
            "update": {"sessionUpdate": "tool_call_update", "toolCallId": call, "status": "completed",
                       "content": [{"type": "diff", "path": "src/lib.rs", "oldText": "fn a() {}\n", "newText": "fn b() {}\n"}]}}}).to_string());
        lines.push(
            json!({"jsonrpc": "2.0", "id": rpc, "result": {"stopReason": "end_turn",
            "usage": {"inputTokens": 1000, "outputTokens": 200, "totalTokens": 1200}}})
            .to_string(),
        );
        lines.push(
            json!({"schema": JOURNAL_SCHEMA, "type": "turn_result", "request_id": request,
            "result": {"status": "completed", "stopReason": "end_turn"}})
            .to_string(),
        );
        messages.push(json!({"User": {"id": user_id, "content": [{"Text": text}]}}));
        messages.push(json!({"Agent": {"content": [{"Text": reply}], "tool_results": {}}}));
    }
    let record = json!({
        "schema": "acpx.session.v1", "acpx_record_id": id, "acp_session_id": acp,
        "agent_command": "codex-acp", "cwd": "/repo", "created_at": "2026-01-01T00:00:00.000Z",
        "last_used_at": "2026-01-01T01:00:00.000Z", "last_seq": lines.len(), "closed": false,
        "title": format!("bench {i}"), "messages": messages,
        "updated_at": "2026-01-01T01:00:00.000Z", "acpx": {}
    });
    let mut journal = lines.join("\n");
    journal.push('\n');
    std::fs::write(sessions.join(format!("{id}.json")), record.to_string()).map_err(err)?;
    std::fs::write(sessions.join(format!("{id}.stream.ndjson")), journal).map_err(err)?;
    Ok(lines.len())
}

/// User plus system CPU time of this process (Linux `/proc/self/stat`), in seconds.
fn process_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesized command name; utime and stime are the 12th and 13th.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    // USER_HZ is 100 on every Linux this runs on.
    Some(ticks / 100.0)
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "unknown".into())
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

pub fn run(o: &Options) -> Result<(), String> {
    let tmp = match &o.dir {
        Some(d) => tempfile::tempdir_in(d),
        None => tempfile::tempdir(),
    }
    .map_err(err)?;
    let sessions = tmp.path().join("node-home/sessions");
    std::fs::create_dir_all(&sessions).map_err(err)?;
    let mut lines = 0;
    let mut bytes = 0u64;
    for i in 0..o.sessions {
        lines += write_node_session(&sessions, i, o)?;
    }
    for e in std::fs::read_dir(&sessions).map_err(err)? {
        bytes += e.map_err(err)?.metadata().map_err(err)?.len();
    }
    let store = acpx_store_fs::FsStore::open(tmp.path().join("acpx-home")).map_err(err)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(err)?;
    let cpu_before = process_cpu_seconds();
    let started = Instant::now();
    let report = rt
        .block_on(import_node(
            &store,
            &tmp.path().join("node-home"),
            &NodeImportOptions::default(),
            &|_, _| {},
        ))
        .map_err(err)?;
    let wall = started.elapsed().as_secs_f64();
    let cpu = process_cpu_seconds().zip(cpu_before).map(|(a, b)| a - b);
    let events: usize = report.imported.iter().map(|i| i.events).sum();
    if report.imported.len() != o.sessions {
        return Err(format!(
            "imported {} of {} sessions: {:?}",
            report.imported.len(),
            o.sessions,
            report.skipped
        ));
    }
    let breakdown = phases(&sessions, &rt, tmp.path())?;
    println!(
        "import --from-node-acpx into the file store: {} sessions, {lines} journal lines ({:.1} MB), {events} events",
        o.sessions,
        bytes as f64 / 1e6
    );
    println!(
        "  wall {:.3} s   {:.0} events/s   {:.1} MB/s   (target >= 50,000 events/s)",
        wall,
        events as f64 / wall,
        bytes as f64 / 1e6 / wall
    );
    if let Some(cpu) = cpu.filter(|c| *c > 0.0) {
        println!(
            "  cpu  {cpu:.3} s   {:.0} events per CPU second (what a machine without other load gives, about)",
            events as f64 / cpu
        );
    }
    println!("  load average at the end: {}", load_average());
    println!("  where the time goes (the same work again, phase by phase, no store):");
    for (name, secs) in breakdown {
        println!("    {name:<28} {secs:>7.3} s");
    }
    Ok(())
}

/// The import's pure phases timed one by one over every session of the home: reading the
/// journal, converting its lines to events, rebuilding the thread with the reducer.
fn phases(
    sessions: &Path,
    rt: &tokio::runtime::Runtime,
    tmp: &Path,
) -> Result<Vec<(&'static str, f64)>, String> {
    use acpx_runtime::ops::node_import::{convert_journal, convert_session, scan};
    let mut read = 0.0;
    let mut convert = 0.0;
    let mut reduce = 0.0;
    let mut whole = 0.0;
    let mut store_time = 0.0;
    let store = acpx_store_fs::FsStore::open(tmp.join("acpx-home-phases")).map_err(err)?;
    for file in scan::record_files(sessions).map_err(err)? {
        let doc: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&file).map_err(err)?).map_err(err)?;
        let t = Instant::now();
        let journal = scan::read_journal(&scan::journal_files(&file)).map_err(err)?;
        read += t.elapsed().as_secs_f64();
        let id = acpx_model::RecordId::parse("bench").map_err(err)?;
        let t = Instant::now();
        let conv = convert_journal(&journal.lines, &id, "acp", acpx_model::Timestamp::now());
        convert += t.elapsed().as_secs_f64();
        let t = Instant::now();
        let mut record = acpx_model::SessionRecord::new(
            acpx_model::NewSession {
                acpx_record_id: id,
                acp_session_id: "acp".into(),
                agent_session_id: None,
                agent_command: "a".into(),
                cwd: "/".into(),
                name: None,
            },
            acpx_model::Timestamp::now(),
        );
        acpx_runtime::mapping::roll_forward(&mut record, conv.events.iter());
        reduce += t.elapsed().as_secs_f64();
        let t = Instant::now();
        let c = convert_session(&doc, &journal.lines, "bench", acpx_model::Timestamp::now())?;
        whole += t.elapsed().as_secs_f64();
        let t = Instant::now();
        rt.block_on(acpx_runtime::ops::transfer::store_new_session(
            &store, c.record, &c.events,
        ))
        .map_err(err)?;
        store_time += t.elapsed().as_secs_f64();
    }
    Ok(vec![
        ("read journal lines", read),
        ("lines -> events", convert),
        ("reducer (rebuild thread)", reduce),
        ("convert_session (all of it)", whole),
        ("store (create, append, save)", store_time),
    ])
}
