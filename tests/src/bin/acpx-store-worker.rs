//! `acpx-store-worker`: a second (third, …) process for the conformance suite's cross-process
//! checks. It opens a backend from its arguments and runs one scripted operation, printing
//! one line per acknowledged operation and flushing after each, so that a parent that
//! SIGKILLs it knows exactly what was acknowledged.
//!
//! ```text
//! acpx-store-worker --backend fs --root DIR [--max-segment-bytes N] [--max-segments N]
//!                   [--lock-timeout-ms N]  <op> [op args]
//! acpx-store-worker --backend sqlite --path FILE [same options]  <op> [op args]
//! acpx-store-worker --backend postgres --url URL --schema S [same options]  <op> [op args]
//!
//! append      --id X --count N [--batch B] [--durability none|flush|fsync]
//!             [--mode lock|retry] [--tag T]                       prints `ack seq=<last>`
//! save-loop   --id X --count N [--tag T]                          prints `ack revision=<r>`
//! create-many --prefix P --count N                                prints `ack id=<id>`
//! delete      --id X                                              prints `ack deleted=<0|1>`
//! append-until-error --id X [--batch B] [--max-events N] [--tag T]  appends (flush) until an
//!             append fails: prints `ack seq=<last>` per batch, then `error <kind> <message>`
//!             and `state last_seq=<s> last_write_error=<text|none>` (from `event_log_state`),
//!             or `no-error` after N events (default 100000)
//! stage       --id X --count N [--batch B] [--tag T]              stages a new session
//!             (`Store::stage_session`) and appends N tagged events: prints `ack seq=<last>`
//!             per batch (staged, not visible), then commits: `committed revision=<r>`
//! hold-lock   --id X [--seconds S]                                prints `locked`, then obeys
//!             stdin lines: `save` (-> `saved revision=R`), `append` (-> `appended seq=S`),
//!             `release` (-> `released`, exit). EOF or S seconds also release.
//! ```
//! Every operation ends with `done`. Errors go to stderr with exit status 1.

use acpx_tests::ops::AppendLocked;
use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use acpx_model::{Durability, RecordId, Store};
use acpx_tests::fixtures::{session, tagged_event};
use acpx_tests::ops::{append_tagged, save_loop, AppendMode, AppendPlan, LOCK_WAIT};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};

type Flags = HashMap<String, String>;

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    // The parent may have stopped reading (it is about to kill us): nothing to do then.
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Splits argv into backend flags, the operation name, and operation flags.
fn parse(args: &[String]) -> Result<(Flags, String, Flags), String> {
    let mut backend = Flags::new();
    let mut op_flags = Flags::new();
    let mut op = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if let Some(key) = a.strip_prefix("--") {
            let value = it.next().ok_or_else(|| format!("--{key} needs a value"))?;
            let target = if op.is_some() {
                &mut op_flags
            } else {
                &mut backend
            };
            target.insert(key.to_owned(), value.clone());
        } else if op.is_none() {
            op = Some(a.clone());
        } else {
            return Err(format!("unexpected argument {a:?}"));
        }
    }
    Ok((backend, op.ok_or("no operation given")?, op_flags))
}

fn get<'a>(flags: &'a Flags, key: &str) -> Result<&'a str, String> {
    flags
        .get(key)
        .map(String::as_str)
        .ok_or_else(|| format!("--{key} is required"))
}

fn num<T: std::str::FromStr>(flags: &Flags, key: &str, default: Option<T>) -> Result<T, String> {
    match flags.get(key) {
        Some(v) => v
            .parse()
            .map_err(|_| format!("--{key} {v:?} is not a number")),
        None => default.ok_or_else(|| format!("--{key} is required")),
    }
}

fn id(flags: &Flags) -> Result<RecordId, String> {
    RecordId::parse(get(flags, "id")?).map_err(|e| e.to_string())
}

/// Opens the store named by `--backend`. A new backend is one arm here (plus its crate as a
/// dependency of this package).
async fn open_backend(flags: &Flags) -> Result<Arc<dyn Store>, String> {
    match get(flags, "backend")? {
        "fs" => {
            let mut options = acpx_store_fs::FsStoreOptions::default();
            if flags.contains_key("max-segment-bytes") {
                options.max_segment_bytes = num(flags, "max-segment-bytes", None)?;
            }
            if flags.contains_key("max-segments") {
                options.max_segments = num(flags, "max-segments", None)?;
            }
            if flags.contains_key("lock-timeout-ms") {
                options.lock_timeout = Duration::from_millis(num(flags, "lock-timeout-ms", None)?);
            }
            let store = acpx_store_fs::FsStore::open_with(get(flags, "root")?, options)
                .map_err(|e| e.to_string())?;
            Ok(Arc::new(store))
        }
        "sqlite" => {
            let mut options = acpx_store_sqlite::SqliteStoreOptions::default();
            if flags.contains_key("max-segment-bytes") {
                options.max_segment_bytes = num(flags, "max-segment-bytes", None)?;
            }
            if flags.contains_key("max-segments") {
                options.max_segments = num(flags, "max-segments", None)?;
            }
            if flags.contains_key("lock-timeout-ms") {
                options.lock_timeout = Duration::from_millis(num(flags, "lock-timeout-ms", None)?);
            }
            let store = acpx_store_sqlite::SqliteStore::open_with(get(flags, "path")?, options)
                .map_err(|e| e.to_string())?;
            Ok(Arc::new(store))
        }
        "postgres" => {
            let mut options = acpx_store_postgres::PostgresStoreOptions {
                schema: get(flags, "schema")?.to_owned(),
                ..acpx_store_postgres::PostgresStoreOptions::default()
            };
            if flags.contains_key("max-segment-bytes") {
                options.max_segment_bytes = num(flags, "max-segment-bytes", None)?;
            }
            if flags.contains_key("max-segments") {
                options.max_segments = num(flags, "max-segments", None)?;
            }
            if flags.contains_key("lock-timeout-ms") {
                options.lock_timeout = Duration::from_millis(num(flags, "lock-timeout-ms", None)?);
            }
            let store = acpx_store_postgres::PostgresStore::connect(get(flags, "url")?, options)
                .await
                .map_err(|e| e.to_string())?;
            Ok(Arc::new(store))
        }
        other => Err(format!("unknown --backend {other:?}")),
    }
}

async fn run(args: &[String]) -> Result<(), String> {
    let (backend_flags, op, flags) = parse(args)?;
    let store = open_backend(&backend_flags).await?;
    let store = &*store;
    let err = |e: acpx_model::StoreError| e.to_string();
    match op.as_str() {
        "append" => {
            let durability = match flags.get("durability").map(String::as_str) {
                None | Some("flush") => Durability::Flush,
                Some("none") => Durability::None,
                Some("fsync") => Durability::Fsync,
                Some(other) => return Err(format!("--durability {other:?}")),
            };
            let mode: AppendMode = flags
                .get("mode")
                .map_or(Ok(AppendMode::Lock), |m| m.parse())?;
            let plan = AppendPlan {
                tag: flags.get("tag").map_or("w", String::as_str),
                count: num(&flags, "count", None)?,
                batch: num(&flags, "batch", Some(1))?,
                mode,
                durability,
            };
            append_tagged(store, &id(&flags)?, &plan, |seq| {
                say(&format!("ack seq={seq}"))
            })
            .await
            .map_err(err)?;
            if durability == Durability::None {
                store.flush(&id(&flags)?).await.map_err(err)?;
            }
        }
        "save-loop" => {
            let tag = flags.get("tag").map_or("w", String::as_str);
            let count = num(&flags, "count", None)?;
            save_loop(store, &id(&flags)?, tag, count, |rev| {
                say(&format!("ack revision={rev}"))
            })
            .await
            .map_err(err)?;
        }
        "create-many" => {
            let prefix = get(&flags, "prefix")?;
            for i in 0..num::<u64>(&flags, "count", None)? {
                let mut r = session(&format!("{prefix}-{i}"), i as i64);
                r.name = Some(prefix.to_owned());
                store.create(&mut r).await.map_err(err)?;
                say(&format!("ack id={}", r.acpx_record_id));
            }
        }
        "delete" => {
            let existed = store.delete(&id(&flags)?).await.map_err(err)?;
            say(&format!("ack deleted={}", u8::from(existed)));
        }
        "append-until-error" => {
            let tag = flags.get("tag").map_or("w", String::as_str);
            let batch = num(&flags, "batch", Some(1))?;
            let max_events = num(&flags, "max-events", Some(100_000))?;
            append_until_error(store, &id(&flags)?, batch, max_events, tag).await?
        }
        "stage" => {
            let id = id(&flags)?;
            let tag = flags.get("tag").map_or("w", String::as_str);
            let count: u64 = num(&flags, "count", None)?;
            let batch: u64 = num(&flags, "batch", Some(100))?;
            let mut stage = store
                .stage_session(session(id.as_str(), 0))
                .await
                .map_err(err)?;
            let mut last = 0;
            while last < count {
                let events: Vec<_> = (last + 1..=(last + batch.max(1)).min(count))
                    .map(|seq| tagged_event(&id, seq, tag, seq - 1))
                    .collect();
                stage.append(&events).await.map_err(err)?;
                last += events.len() as u64;
                say(&format!("ack seq={last}"));
            }
            let stored = stage.commit().await.map_err(err)?;
            say(&format!("committed revision={}", stored.revision));
        }
        "hold-lock" => hold_lock(store, &id(&flags)?, num(&flags, "seconds", Some(60))?).await?,
        other => return Err(format!("unknown operation {other:?}")),
    }
    say("done");
    Ok(())
}

/// Appends batches of [`tagged_event`]s until one fails (the parent limits the size of the
/// files this process may write), then reports the failure and what `event_log_state` says
/// afterwards. A failed append is an outcome here, not an error of the worker.
async fn append_until_error(
    store: &dyn Store,
    id: &RecordId,
    batch: u64,
    max_events: u64,
    tag: &str,
) -> Result<(), String> {
    let one_line = |s: &str| s.replace(['\n', '\r'], " ");
    let err = |e: acpx_model::StoreError| e.to_string();
    let first = store.event_log_state(id).await.map_err(err)?.last_seq;
    let mut last = first;
    while last - first < max_events {
        let events: Vec<_> = (1..=batch.max(1))
            .map(|k| tagged_event(id, last + k, tag, last + k - first - 1))
            .collect();
        match store.append_locked(id, &events, Durability::Flush).await {
            Ok(state) => {
                last = state.last_seq;
                say(&format!("ack seq={last}"));
            }
            Err(e) => {
                say(&format!("error {} {}", e.kind(), one_line(&e.to_string())));
                let state = store.event_log_state(id).await.map_err(err)?;
                let recorded = state
                    .last_write_error
                    .as_deref()
                    .map_or_else(|| "none".to_owned(), one_line);
                say(&format!(
                    "state last_seq={} last_write_error={recorded}",
                    state.last_seq
                ));
                return Ok(());
            }
        }
    }
    say("no-error");
    Ok(())
}

/// Holds the session's lock and, while holding it, obeys commands from stdin.
async fn hold_lock(store: &dyn Store, id: &RecordId, seconds: u64) -> Result<(), String> {
    let err = |e: acpx_model::StoreError| e.to_string();
    let guard = store.lock(id, LOCK_WAIT).await.map_err(err)?;
    say("locked");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(seconds);
    let mut stdin = BufReader::new(tokio::io::stdin()).lines();
    loop {
        let line = tokio::select! {
            line = stdin.next_line() => line.map_err(|e| e.to_string())?,
            _ = tokio::time::sleep_until(deadline) => None,
        };
        match line.as_deref().map(str::trim) {
            Some("save") => {
                let mut r = store.load(id).await.map_err(err)?;
                r.extra.insert("workerTag".into(), json!("holder"));
                r.extra
                    .insert("workerCounter".into(), json!(r.revision + 1));
                store.save(&mut r).await.map_err(err)?;
                say(&format!("saved revision={}", r.revision));
            }
            Some("append") => {
                let last = store.event_log_state(id).await.map_err(err)?.last_seq;
                let e = tagged_event(id, last + 1, "holder", 0);
                let st = store
                    .append(&guard, &[e], Durability::Flush)
                    .await
                    .map_err(err)?;
                say(&format!("appended seq={}", st.last_seq));
            }
            Some("release") | None => break,
            Some(other) => return Err(format!("unknown hold-lock command {other:?}")),
        }
    }
    drop(guard);
    say("released");
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Err(e) = run(&args).await {
        eprintln!("acpx-store-worker: {e}");
        std::process::exit(1);
    }
}
