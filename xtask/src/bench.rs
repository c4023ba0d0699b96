//! `cargo xtask bench store`: the store benchmarks behind `docs/BENCHMARKS.md`.
//!
//! Method: every figure is measured in one process, on one machine, in one run, so the
//! figures of one run can be compared as ratios. Throughput is events divided by the wall time
//! of the appends alone (setup excluded). Each append holds the session's writer lock, as the
//! runtime does during a turn.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use acpx_model::{
    AgentContent, AgentMessage, Durability, EventContext, EventEnvelope, EventPayload, EventQuery,
    EventSource, EventStream, ListQuery, MemoryStore, Message, NewSession, RecordId, SearchQuery,
    SessionRecord, Store, Timestamp, UserContent, UserMessage,
};
use serde_json::json;

/// Parsed command-line options.
pub struct Options {
    backends: Vec<String>,
    quick: bool,
    dir: Option<PathBuf>,
    /// The sections to run (`--only`); all when empty.
    only: Vec<String>,
    /// Leave the scratch directory in place (`--keep`), to look at or time what was written.
    keep: bool,
}

/// The sections of `bench store`, for `--only`.
const SECTIONS: &[&str] = &["append", "save", "flat", "many", "tail"];

/// The server of `--backend postgres`: `ACPX_STORE_URL`, else `ACPX_TEST_POSTGRES_URL`. The
/// benchmark works in scratch schemas (`acpx_bench_<pid>_<part>`), dropped at the end.
fn postgres_url() -> BenchResult<String> {
    ["ACPX_STORE_URL", "ACPX_TEST_POSTGRES_URL"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|u| !u.trim().is_empty()))
        .ok_or_else(|| "--backend postgres needs ACPX_STORE_URL (a PostgreSQL URL)".into())
}

/// The PostgreSQL stores opened by this run, whose schemas are dropped at its end.
static POSTGRES_STORES: std::sync::Mutex<Vec<acpx_store_postgres::PostgresStore>> =
    std::sync::Mutex::new(Vec::new());

impl Options {
    pub fn parse(args: &[String]) -> Result<Options, String> {
        let mut it = args.iter();
        match it.next().map(String::as_str) {
            Some("store") => {}
            Some(other) => return Err(format!("unknown benchmark {other:?}")),
            None => return Err("name a benchmark".into()),
        }
        let mut opts = Options {
            backends: all_backends(),
            quick: false,
            dir: None,
            only: Vec::new(),
            keep: false,
        };
        while let Some(arg) = it.next() {
            match arg.as_str() {
                "--quick" => opts.quick = true,
                "--keep" => opts.keep = true,
                // `--store` as in acpx itself.
                "--backend" | "--store" => {
                    let b = it.next().ok_or("--backend needs a value")?;
                    opts.backends = if b == "all" {
                        all_backends()
                    } else if all_backends().contains(b) || b == "postgres" {
                        vec![b.clone()]
                    } else {
                        return Err(format!(
                            "unknown backend {b:?}; known: {}",
                            all_backends().join(", ")
                        ));
                    };
                }
                "--dir" => opts.dir = Some(PathBuf::from(it.next().ok_or("--dir needs a value")?)),
                "--only" => {
                    let list = it.next().ok_or("--only needs a value")?;
                    for name in list.split(',') {
                        if !SECTIONS.contains(&name) {
                            return Err(format!(
                                "unknown section {name:?}; known: {}",
                                SECTIONS.join(", ")
                            ));
                        }
                        opts.only.push(name.to_owned());
                    }
                }
                other => return Err(format!("unknown option {other:?}")),
            }
        }
        Ok(opts)
    }
}

fn all_backends() -> Vec<String> {
    vec!["fs".into(), "sqlite".into(), "memory".into()]
}

/// Opens a store of `backend` under `dir` (a new handle on what is already there, if anything).
/// For postgres, `dir`'s last component names the scratch schema.
async fn open_backend(backend: &str, dir: &Path) -> Result<Arc<dyn Store>, String> {
    match backend {
        "postgres" => {
            let part: String = dir
                .file_name()
                .map(|n| n.to_string_lossy().to_lowercase())
                .unwrap_or_default()
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                .collect();
            let store = acpx_store_postgres::PostgresStore::connect(
                &postgres_url()?,
                acpx_store_postgres::PostgresStoreOptions {
                    schema: format!("acpx_bench_{}_{part}", std::process::id()),
                    ..Default::default()
                },
            )
            .await
            .map_err(err)?;
            POSTGRES_STORES
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(store.clone());
            Ok(Arc::new(store))
        }
        "memory" => Ok(Arc::new(MemoryStore::new())),
        "fs" => Ok(Arc::new(acpx_store_fs::FsStore::open(dir).map_err(err)?)),
        "sqlite" => Ok(Arc::new(
            acpx_store_sqlite::SqliteStore::open(dir.join("acpx.db")).map_err(err)?,
        )),
        other => Err(format!("unknown backend {other}")),
    }
}

type BenchResult<T> = Result<T, String>;

fn err<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

pub fn run(opts: &Options) -> BenchResult<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(err)?;
    let base = match &opts.dir {
        Some(d) => {
            std::fs::create_dir_all(d).map_err(err)?;
            tempfile::tempdir_in(d).map_err(err)?
        }
        None => tempfile::tempdir().map_err(err)?,
    };
    println!(
        "# acpx store benchmarks ({} run), {} cores, data under {}",
        if opts.quick { "quick" } else { "full" },
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        base.path().display()
    );
    for backend in &opts.backends {
        let dir = base.path().join(backend);
        std::fs::create_dir_all(&dir).map_err(err)?;
        let result = rt.block_on(bench_backend(backend, &dir, opts));
        rt.block_on(drop_postgres_schemas())?;
        result?;
    }
    if opts.keep {
        println!("\nkept: {}", base.keep().display());
    }
    Ok(())
}

struct Scale {
    append_events: u64,
    fsync_events_batch1: u64,
    fsync_events_batch64: u64,
    flat_small: u64,
    flat_large: u64,
    flat_probe: u64,
    list_sessions: usize,
    tail_session_events: u64,
    save_repeats: usize,
}

impl Scale {
    fn new(quick: bool) -> Scale {
        if quick {
            Scale {
                append_events: 20_000,
                fsync_events_batch1: 200,
                fsync_events_batch64: 6_400,
                flat_small: 1_000,
                flat_large: 10_000,
                flat_probe: 2_000,
                list_sessions: 1_000,
                tail_session_events: 50_000,
                save_repeats: 3,
            }
        } else {
            Scale {
                append_events: 256_000,
                fsync_events_batch1: 1_000,
                fsync_events_batch64: 32_000,
                flat_small: 1_000,
                flat_large: 100_000,
                flat_probe: 20_000,
                list_sessions: 10_000,
                tail_session_events: 1_000_000,
                save_repeats: 5,
            }
        }
    }
}

async fn bench_backend(backend: &str, dir: &Path, opts: &Options) -> BenchResult<()> {
    let scale = Scale::new(opts.quick);
    let runs = |section: &str| opts.only.is_empty() || opts.only.iter().any(|s| s == section);
    println!("\n## backend: {backend}\n");
    if runs("append") {
        bench_append(backend, dir, &scale).await?;
    }
    if runs("save") {
        bench_save(backend, dir, &scale).await?;
    }
    if runs("flat") {
        bench_flat(backend, dir, &scale).await?;
    }
    if runs("many") {
        bench_many_sessions(backend, dir, &scale).await?;
    }
    if runs("tail") {
        bench_tail(backend, dir, &scale).await?;
    }
    println!("\npeak resident memory so far: {}", peak_rss());
    Ok(())
}

async fn bench_append(backend: &str, dir: &Path, scale: &Scale) -> BenchResult<()> {
    println!("### append throughput (~300-byte events, writer lock held)\n");
    println!("| batch | durability | events | seconds | events/s |");
    println!("|---:|---|---:|---:|---:|");
    for (batch, durability, events) in [
        (1, Durability::None, scale.append_events / 4),
        (64, Durability::None, scale.append_events),
        (1, Durability::Flush, scale.append_events / 4),
        (64, Durability::Flush, scale.append_events),
        (1, Durability::Fsync, scale.fsync_events_batch1),
        (64, Durability::Fsync, scale.fsync_events_batch64),
    ] {
        let store =
            open_backend(backend, &dir.join(format!("append-{batch}-{durability:?}"))).await?;
        let id = create_session(&store, 0).await?;
        let secs = append_run(&store, &id, 0, events, batch, durability).await?;
        println!(
            "| {batch} | {} | {events} | {secs:.3} | {:.0} |",
            format!("{durability:?}").to_lowercase(),
            events as f64 / secs
        );
    }

    Ok(())
}

async fn bench_save(backend: &str, dir: &Path, scale: &Scale) -> BenchResult<()> {
    println!(
        "\n### snapshot save (median of {} saves)\n",
        scale.save_repeats
    );
    println!("| messages | bytes | ms per save |");
    println!("|---:|---:|---:|");
    let store = open_backend(backend, &dir.join("save")).await?;
    // The last row: one 8 MB agent reply (the size of a 1M-chunk turn's thread), whose texts
    // the file store's search index leaves to the next search instead of every save.
    for messages in [10usize, 1_000, 10_000, 2] {
        let mut record = sample_record(messages);
        if messages == 2 {
            record.acpx_record_id = RecordId::parse("save-8mb").map_err(err)?;
            let mut a = AgentMessage::new();
            a.content.push(AgentContent::Text(
                "streamed chunk of a long reply. ".repeat(262_144).into(),
            ));
            record.thread.messages[1] = Message::Agent(a);
        }
        store.create(&mut record).await.map_err(err)?;
        let bytes = record.to_json_vec().unwrap().len();
        let mut times = Vec::new();
        for _ in 0..scale.save_repeats {
            record.last_used_at = Timestamp::now();
            let t = Instant::now();
            store.save(&mut record).await.map_err(err)?;
            times.push(t.elapsed());
        }
        println!("| {messages} | {bytes} | {:.2} |", ms(median(&mut times)));
    }

    Ok(())
}

async fn bench_flat(backend: &str, dir: &Path, scale: &Scale) -> BenchResult<()> {
    println!("\n### per-event append cost vs events already stored (batch 1, flush)\n");
    println!("| events already stored | events timed | µs per event |");
    println!("|---:|---:|---:|");
    let store = open_backend(backend, &dir.join("flat")).await?;
    let mut costs = Vec::new();
    for (i, prefill) in [scale.flat_small, scale.flat_large].into_iter().enumerate() {
        let id = create_session(&store, i as u64 + 1).await?;
        append_run(&store, &id, 0, prefill, 64, Durability::None).await?;
        let secs = append_run(&store, &id, prefill, scale.flat_probe, 1, Durability::Flush).await?;
        let us = secs * 1e6 / scale.flat_probe as f64;
        costs.push(us);
        println!("| {prefill} | {} | {us:.2} |", scale.flat_probe);
    }
    println!(
        "\nratio (large / small): {:.2} (flat means ≈ 1)",
        costs[1] / costs[0]
    );

    Ok(())
}

async fn bench_many_sessions(backend: &str, dir: &Path, scale: &Scale) -> BenchResult<()> {
    println!("\n### list {} sessions\n", scale.list_sessions);
    let store = open_backend(backend, &dir.join("list")).await?;
    for i in 0..scale.list_sessions {
        create_conversation(&store, 1_000_000 + i as u64).await?;
    }
    // A fresh handle, as a new CLI process would have.
    let store = reopen(backend, &dir.join("list"), store).await?;
    let t = Instant::now();
    let page = store.list(&ListQuery::default()).await.map_err(err)?;
    let first = t.elapsed();
    let mut times = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let again = store.list(&ListQuery::default()).await.map_err(err)?;
        times.push(t.elapsed());
        if again.sessions.len() != page.sessions.len() {
            return Err("list returned a different count on a repeated call".into());
        }
    }
    println!("| call | sessions | ms |");
    println!("|---|---:|---:|");
    println!(
        "| first (new handle) | {} | {:.1} |",
        page.sessions.len(),
        ms(first)
    );
    println!(
        "| repeated (median of 5) | {} | {:.1} |",
        page.sessions.len(),
        ms(median(&mut times))
    );
    // New handles, as later CLI processes, once the sessions are older than the file store's
    // trust margin (2 s, see acpx-store-fs § Listing), as sessions listed in real use are:
    // the first of them verifies the files once more and records it, the next is the
    // steady state.
    std::thread::sleep(Duration::from_millis(2_500));
    for label in [
        "new handle, sessions 2.5 s old",
        "next new handle (steady state)",
    ] {
        let store = reopen(backend, &dir.join("list"), store.clone()).await?;
        let t = Instant::now();
        let next = store.list(&ListQuery::default()).await.map_err(err)?;
        println!(
            "| first of a {label} | {} | {:.1} |",
            next.sessions.len(),
            ms(t.elapsed())
        );
    }

    // `sessions usage` over every session, as a new CLI process runs it: the summaries'
    // usage (every store keeps it with the summary) summed and grouped, no conversation read.
    let fresh = reopen(backend, &dir.join("list"), store.clone()).await?;
    let t = Instant::now();
    let (report, _) = acpx_runtime::ops::usage::report_all(
        &*fresh,
        acpx_model::UsageGrouping::Session,
        &Default::default(),
    )
    .await
    .map_err(err)?;
    println!(
        "| sessions usage, new handle (steady state) | {} | {:.1} |",
        report.totals.sessions,
        ms(t.elapsed())
    );
    if report.totals.reported_sessions != report.totals.sessions {
        return Err("sessions usage lost a session's usage".into());
    }

    bench_lookup(backend, &dir.join("list"), dir, store.clone()).await?;

    println!(
        "\n### search {} sessions (4 messages, ~0.9 kB of text each)\n",
        scale.list_sessions
    );
    println!("| query | call | hits | ms |");
    println!("|---|---|---:|---:|");
    let one = format!("ticket-{:07}", 1_000_000 + scale.list_sessions / 2);
    let mut store = store;
    for (label, text) in [
        ("a word no session holds (every one searched)", "zebra"),
        ("a word of one session", one.as_str()),
        ("a word of every session (first 50 hits)", "parser"),
        (
            "two words of every session, never in one message",
            "thanks linker",
        ),
    ] {
        let query = SearchQuery {
            text: text.into(),
            ..SearchQuery::default()
        };
        store = reopen(backend, &dir.join("list"), store).await?;
        let t = Instant::now();
        let hits = store.search(&query).await.map_err(err)?;
        println!(
            "| {label} | first (new handle) | {} | {:.1} |",
            hits.len(),
            ms(t.elapsed())
        );
        let mut times = Vec::new();
        for _ in 0..3 {
            let t = Instant::now();
            store.search(&query).await.map_err(err)?;
            times.push(t.elapsed());
        }
        println!(
            "| {label} | repeated (median of 3) | {} | {:.1} |",
            hits.len(),
            ms(median(&mut times))
        );
    }
    // The first search of a store whose index is missing (made by an older acpx, or the file
    // removed): every snapshot is read and the index written; the next search uses it.
    let index = dir.join("list").join("sessions").join(".search.ndjson");
    if backend == "fs" && index.exists() {
        let size = std::fs::metadata(&index).map_err(err)?.len();
        println!("\nsearch index: {size} bytes\n");
        std::fs::remove_file(&index).map_err(err)?;
        let query = SearchQuery {
            text: "zebra".into(),
            ..SearchQuery::default()
        };
        println!("| index | call | ms |");
        println!("|---|---|---:|");
        for label in [
            "removed: rebuilt from every snapshot",
            "rebuilt: next new handle",
        ] {
            store = reopen(backend, &dir.join("list"), store).await?;
            let t = Instant::now();
            store.search(&query).await.map_err(err)?;
            println!("| {label} | first | {:.1} |", ms(t.elapsed()));
        }
    }
    Ok(())
}

async fn bench_tail(backend: &str, dir: &Path, scale: &Scale) -> BenchResult<()> {
    println!(
        "\n### read the last 1,000 events of a {}-event session\n",
        scale.tail_session_events
    );
    let store = open_backend(backend, &dir.join("tail")).await?;
    let id = create_session(&store, 2_000_000).await?;
    append_run(
        &store,
        &id,
        0,
        scale.tail_session_events,
        64,
        Durability::None,
    )
    .await?;
    let store = reopen(backend, &dir.join("tail"), store).await?;
    let from = scale.tail_session_events - 999;
    let mut times = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let page = store
            .read_events(&id, &EventQuery::from_seq(from))
            .await
            .map_err(err)?;
        times.push(t.elapsed());
        if page.events.len() != 1_000 {
            return Err(format!("expected 1000 events, read {}", page.events.len()));
        }
    }
    println!("median of 5: {:.2} ms", ms(median(&mut times)));
    Ok(())
}

/// A new handle on the same data (memory: the same store, since it has nothing on disk).
async fn reopen(backend: &str, dir: &Path, current: Arc<dyn Store>) -> BenchResult<Arc<dyn Store>> {
    match backend {
        "memory" => Ok(current),
        _ => {
            drop(current);
            open_backend(backend, dir).await
        }
    }
}

/// Drops the scratch schemas of the PostgreSQL stores this run opened.
async fn drop_postgres_schemas() -> BenchResult<()> {
    let stores = std::mem::take(&mut *POSTGRES_STORES.lock().unwrap_or_else(|p| p.into_inner()));
    let mut dropped = std::collections::HashSet::new();
    for store in stores {
        if dropped.insert(store.location().to_owned()) {
            store.drop_schema().await.map_err(err)?;
        }
    }
    Ok(())
}

async fn create_session(store: &Arc<dyn Store>, n: u64) -> BenchResult<RecordId> {
    let id = RecordId::parse(&format!("bench-{n:08}")).map_err(err)?;
    let mut record = SessionRecord::new(
        NewSession {
            acpx_record_id: id.clone(),
            acp_session_id: format!("acp-{n}"),
            agent_session_id: None,
            agent_command: "acpx-test-agent".into(),
            cwd: "/work/bench".into(),
            name: None,
        },
        Timestamp::now(),
    );
    store.create(&mut record).await.map_err(err)?;
    Ok(id)
}

/// A session with a short conversation (~0.9 kB of text in 4 messages), for list and search.
/// The lookup of a warm command among the sessions of `home`: each call on a new handle (as
/// a new CLI process), median of 5, wall time and this process's CPU time (user + system,
/// `getrusage`; the file store lists on up to 4 threads). The scope is a project with a
/// `.git` whose session lives at its root while the command runs two directories below, so
/// the walk visits three directories; "per directory" is the lookup before one list served
/// the whole walk (one `list` per directory), for the ratio within this run.
async fn bench_lookup(
    backend: &str,
    home: &Path,
    scratch: &Path,
    store: Arc<dyn Store>,
) -> BenchResult<()> {
    use acpx_runtime::ops::lookup::{find_in_scope, resolve_id_or_name, walk_dirs};
    let project = scratch.join("lookup-project");
    let deep = project.join("a").join("b");
    std::fs::create_dir_all(&deep).map_err(err)?;
    std::fs::create_dir_all(project.join(".git")).map_err(err)?;
    let project = std::fs::canonicalize(&project).map_err(err)?;
    let deep = std::fs::canonicalize(&deep).map_err(err)?;
    let mut record = SessionRecord::new(
        NewSession {
            acpx_record_id: RecordId::parse("lookup-target-7f3a").map_err(err)?,
            acp_session_id: "acp-lookup-target".into(),
            agent_session_id: None,
            agent_command: "lookup-agent".into(),
            cwd: project.to_string_lossy().into_owned(),
            name: Some("target".into()),
        },
        Timestamp::now(),
    );
    store.create(&mut record).await.map_err(err)?;
    let agent = "lookup-agent";
    println!(
        "\n### lookup among {} sessions (new handle per call, median of 5)\n",
        store
            .list(&ListQuery::default())
            .await
            .map_err(err)?
            .sessions
            .len()
    );
    println!("| lookup | wall ms | CPU ms |");
    println!("|---|---:|---:|");
    let mut store = store;
    for label in [
        "scope -s NAME, 3-directory walk, per directory (before)",
        "scope -s NAME, 3-directory walk (find_in_scope)",
        "typed word: a name (resolve_id_or_name)",
        "typed word: an id suffix (resolve_id_or_name)",
    ] {
        let (mut walls, mut cpus) = (Vec::new(), Vec::new());
        for _ in 0..5 {
            store = reopen(backend, home, store).await?;
            let (t, c) = (Instant::now(), self_cpu());
            let found = match label.split_once(" (").map_or("", |(_, how)| how) {
                "before)" => {
                    let mut found = None;
                    for d in walk_dirs(&deep) {
                        let page = store
                            .list(&ListQuery {
                                cwd: Some(d.to_string_lossy().into_owned()),
                                agent_command: Some(agent.into()),
                                name: Some("target".into()),
                                closed: acpx_model::ClosedFilter::Open,
                                limit: None,
                                cursor: None,
                            })
                            .await
                            .map_err(err)?;
                        if let Some(s) = page.sessions.into_iter().next() {
                            found = Some(s.acpx_record_id);
                            break;
                        }
                    }
                    found
                }
                "find_in_scope)" => find_in_scope(&*store, agent, &deep, Some("target"))
                    .await
                    .map_err(err)?
                    .map(|s| s.acpx_record_id),
                _ => {
                    let word = if label.contains("suffix") {
                        "target-7f3a"
                    } else {
                        "target"
                    };
                    resolve_id_or_name(&*store, word, agent, &deep)
                        .await
                        .map_err(err)?
                        .map(|r| r.acpx_record_id)
                }
            };
            cpus.push(self_cpu().saturating_sub(c));
            walls.push(t.elapsed());
            if found.as_ref() != Some(&record.acpx_record_id) {
                return Err(format!("lookup {label:?} found {found:?}"));
            }
        }
        println!(
            "| {label} | {:.1} | {:.1} |",
            ms(median(&mut walls)),
            ms(median(&mut cpus))
        );
    }
    Ok(())
}

/// User + system CPU time of this process so far (all its threads).
fn self_cpu() -> Duration {
    rusage_cpu(libc::RUSAGE_SELF)
}

/// User + system CPU time from `getrusage(who)`: `RUSAGE_SELF`, or `RUSAGE_CHILDREN` (the
/// children waited for so far).
pub(crate) fn rusage_cpu(who: libc::c_int) -> Duration {
    // SAFETY: getrusage only writes the struct it is given, which lives on this stack.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(who, &mut usage);
        usage
    };
    let tv = |t: libc::timeval| {
        Duration::from_secs(u64::try_from(t.tv_sec).unwrap_or(0))
            + Duration::from_micros(u64::try_from(t.tv_usec).unwrap_or(0))
    };
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

async fn create_conversation(store: &Arc<dyn Store>, n: u64) -> BenchResult<RecordId> {
    let id = RecordId::parse(&format!("bench-{n:08}")).map_err(err)?;
    let mut record = SessionRecord::new(
        NewSession {
            acpx_record_id: id.clone(),
            acp_session_id: format!("acp-{n}"),
            agent_session_id: None,
            agent_command: "acpx-test-agent".into(),
            cwd: "/work/bench".into(),
            name: None,
        },
        Timestamp::now(),
    );
    let texts = [
        format!(
            "Please look at src/parser.rs and explain what the parser does with escaped quotes \
             (ticket-{n:07})."
        ),
        "The parser reads the input one character at a time. When it meets a backslash it \
         looks at the next character: a quote is taken literally and does not end the string, \
         a second backslash stands for itself, and anything else is an error that names the \
         line and column. The state machine has three states (outside, inside, escaped) and \
         the tokens are produced without copying when the string has no escapes."
            .to_owned(),
        "Thanks. Can you also add a test for the empty string and for a trailing backslash?"
            .to_owned(),
        "Added two tests to tests/parser.rs: an empty string gives an empty token, and a \
         trailing backslash is refused with an error at the last column. Both pass; the \
         release build links without warnings from the linker."
            .to_owned(),
    ];
    for (i, text) in texts.into_iter().enumerate() {
        if i % 2 == 0 {
            record.thread.messages.push(Message::User(UserMessage {
                id: uuid_like(i),
                content: vec![UserContent::Text(text)],
                extra: Default::default(),
            }));
        } else {
            let mut a = AgentMessage::new();
            a.content.push(AgentContent::Text(text.into()));
            record.thread.messages.push(Message::Agent(a));
        }
    }
    // What an agent reports (`sessions usage` sums it): a turn's tokens and the cost.
    record.thread.cumulative_token_usage.input_tokens = 1_200 + n % 100;
    record.thread.cumulative_token_usage.output_tokens = 300;
    record.acpx.extra.insert(
        "context_usage".into(),
        serde_json::json!({"used": 1_500, "size": 200_000,
            "cost": {"amount": 0.012, "currency": "USD"}}),
    );
    store.create(&mut record).await.map_err(err)?;
    Ok(id)
}

/// Appends `count` events after seq `start` in batches; returns the seconds spent appending.
async fn append_run(
    store: &Arc<dyn Store>,
    id: &RecordId,
    start: u64,
    count: u64,
    batch: u64,
    durability: Durability,
) -> BenchResult<f64> {
    let lock = store.lock(id, Duration::from_secs(10)).await.map_err(err)?;
    let template = sample_event(id, 1);
    let mut seq = start;
    let end = start + count;
    let mut elapsed = Duration::ZERO;
    while seq < end {
        let n = batch.min(end - seq);
        let events: Vec<EventEnvelope> = (1..=n)
            .map(|i| {
                let mut e = template.clone();
                e.seq = seq + i;
                e
            })
            .collect();
        let t = Instant::now();
        store
            .append(&lock, &events, durability)
            .await
            .map_err(err)?;
        elapsed += t.elapsed();
        seq += n;
    }
    let t = Instant::now();
    store.flush(id).await.map_err(err)?;
    elapsed += t.elapsed();
    drop(lock);
    Ok(elapsed.as_secs_f64())
}

/// A `session_update` event whose NDJSON line is about 300 bytes.
fn sample_event(id: &RecordId, seq: u64) -> EventEnvelope {
    let ctx = EventContext {
        acpx_record_id: id,
        acp_session_id: "acp-bench-session",
        request_id: Some("req-0001"),
        stream: EventStream::Prompt,
        source: EventSource::Acp,
    };
    let payload = json!({
        "sessionId": "acp-bench-session",
        "update": {
            "sessionUpdate": "agent_message_chunk",
            "content": {"type": "text", "text": "The quick brown fox jumps over the lazy dog; streaming a chunk."}
        }
    });
    EventEnvelope::new(
        &ctx,
        seq,
        Timestamp::now(),
        EventPayload::from_parts("session_update", &payload).unwrap_or(EventPayload::Unknown {
            event_type: "session_update".into(),
            payload,
        }),
    )
}

/// A record whose thread holds `messages` messages of realistic size.
fn sample_record(messages: usize) -> SessionRecord {
    let mut record = SessionRecord::new(
        NewSession {
            acpx_record_id: RecordId::parse(&format!("save-{messages}"))
                .unwrap_or_else(|_| RecordId::generate()),
            acp_session_id: "acp-save".into(),
            agent_session_id: None,
            agent_command: "acpx-test-agent".into(),
            cwd: "/work/bench".into(),
            name: None,
        },
        Timestamp::now(),
    );
    let text = "Please look at src/main.rs and explain what the parser does with escaped quotes. "
        .repeat(2);
    for i in 0..messages {
        if i % 2 == 0 {
            record.thread.messages.push(Message::User(UserMessage {
                id: uuid_like(i),
                content: vec![UserContent::Text(text.clone())],
                extra: Default::default(),
            }));
        } else {
            let mut a = AgentMessage::new();
            a.content.push(AgentContent::Text(text.clone().into()));
            record.thread.messages.push(Message::Agent(a));
        }
    }
    record
}

fn uuid_like(i: usize) -> String {
    format!("00000000-0000-4000-8000-{i:012}")
}

fn median(times: &mut [Duration]) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Peak resident set size of this process (Linux `VmHWM`).
fn peak_rss() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .map(|l| l.trim_start_matches("VmHWM:").trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".into())
}
