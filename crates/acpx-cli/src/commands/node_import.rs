//! `sessions import --from-node-acpx <dir>`: brings every session of a Node acpx 0.19 home (or
//! of its `sessions/` directory) into the store. See [`crate::node`] for the conversion.

use std::path::{Path, PathBuf};

use acpx_model::{RecordId, StoreError, Timestamp};
use serde_json::{json, Map, Value};

use crate::commands::transfer::store_new_session;
use crate::context::Ctx;
use crate::error::{CliError, CliResult};
use crate::node::{convert_session, is_node_record};
use crate::render::{action, record_identity};

/// The journal segments of a record file, oldest first: `.stream.<N>.ndjson` from the
/// highest N down to 1, then the active `.stream.ndjson`.
fn journal_files(record_file: &Path) -> Vec<PathBuf> {
    let Some(dir) = record_file.parent() else {
        return Vec::new();
    };
    let Some(base) = record_file
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_suffix(".json"))
    else {
        return Vec::new();
    };
    let mut rotated: Vec<(u32, PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_str()?.to_owned();
            let n = name
                .strip_prefix(base)?
                .strip_prefix(".stream.")?
                .strip_suffix(".ndjson")?
                .parse::<u32>()
                .ok()?;
            Some((n, e.path()))
        })
        .collect();
    rotated.sort_by_key(|(n, _)| std::cmp::Reverse(*n));
    let mut files: Vec<PathBuf> = rotated.into_iter().map(|(_, p)| p).collect();
    let active = dir.join(format!("{base}.stream.ndjson"));
    if active.is_file() {
        files.push(active);
    }
    files
}

fn read_journal(files: &[PathBuf]) -> CliResult<Vec<String>> {
    let mut lines = Vec::new();
    for f in files {
        let bytes = std::fs::read(f)
            .map_err(|e| CliError::runtime(format!("cannot read {}: {e}", f.display())))?;
        let text = String::from_utf8_lossy(&bytes);
        // A last line without its newline is a torn write: Node's own reader withholds it.
        let complete = match text.rfind('\n') {
            Some(i) => &text[..=i],
            None => "",
        };
        lines.extend(complete.lines().map(str::to_owned));
    }
    Ok(lines)
}

/// The Node session records under `dir` (or `dir/sessions`).
fn record_files(dir: &Path) -> CliResult<Vec<PathBuf>> {
    let sessions = if dir.join("sessions").is_dir() {
        dir.join("sessions")
    } else {
        dir.to_path_buf()
    };
    let entries = std::fs::read_dir(&sessions).map_err(|e| {
        CliError::usage(format!("cannot read {}: {e}", sessions.display()))
            .with_hint("pass the Node acpx home (usually ~/.acpx) or its sessions/ directory")
    })?;
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.is_file()
                && p.extension().is_some_and(|x| x == "json")
                && !p
                    .file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.contains(".stream.") || n.starts_with('.'))
        })
        .collect();
    files.sort();
    Ok(files)
}

/// `sessions import --from-node-acpx`.
pub async fn run(ctx: &Ctx, dir: &Path, new_id: bool) -> CliResult<()> {
    let store = ctx.store().await?;
    let files = record_files(dir)?;
    let now = Timestamp::now();
    let mut imported = Vec::new();
    let mut skipped: Vec<Value> = Vec::new();
    for file in &files {
        let origin = file.display().to_string();
        let doc: Value = match std::fs::read(file)
            .map_err(|e| e.to_string())
            .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
        {
            Ok(v) => v,
            Err(e) => {
                skipped.push(json!({"path": origin, "reason": format!("not readable JSON: {e}")}));
                continue;
            }
        };
        if !is_node_record(&doc) {
            skipped.push(json!({"path": origin, "ignored": true, "reason": "not a Node acpx session record (no acpx_record_id)"}));
            continue;
        }
        let journal = read_journal(&journal_files(file))?;
        let mut conv = match convert_session(&doc, &journal, &origin, now) {
            Ok(c) => c,
            Err(e) => {
                skipped.push(json!({"path": origin, "reason": e}));
                continue;
            }
        };
        if new_id {
            let id = RecordId::generate();
            for e in &mut conv.events {
                e.acpx_record_id = id.clone();
            }
            conv.record.acpx_record_id = id;
        }
        let id = conv.record.acpx_record_id.clone();
        match store_new_session(&*store, conv.record, &conv.events).await {
            Ok(stored) => {
                for n in &conv.notes {
                    ctx.out.warn(&format!("{origin}: {n}"));
                }
                let mut m: Map<String, Value> = record_identity(&stored);
                m.insert("from".into(), json!(origin));
                m.insert("nodeRecordId".into(), json!(conv.original_id));
                m.insert("messages".into(), json!(stored.thread.messages.len()));
                m.insert("events".into(), json!(conv.events.len()));
                m.insert("threadSource".into(), json!(conv.thread_source.as_str()));
                imported.push(m);
            }
            Err(e) if e.detail_code.as_deref() == Some("STORE_ALREADY_EXISTS") => {
                skipped.push(json!({
                    "path": origin,
                    "alreadyPresent": true,
                    "reason": format!("session {id} already exists in the store (pass --new-id to import a copy)")
                }));
            }
            Err(e) => {
                let _ = store.delete(&id).await.or_else(|e| match e {
                    StoreError::NotFound(_) => Ok(false),
                    other => Err(other),
                });
                skipped.push(json!({"path": origin, "reason": e.message}));
            }
        }
    }
    if ctx.out.is_json() {
        let mut m = Map::new();
        m.insert("from".into(), json!(dir.to_string_lossy()));
        m.insert(
            "imported".into(),
            Value::Array(imported.iter().cloned().map(Value::Object).collect()),
        );
        m.insert("skipped".into(), Value::Array(skipped.clone()));
        ctx.out.json(&action("node_import", m));
    } else {
        for m in &imported {
            let line = format!(
                "imported {} from {} ({} messages from the {}, {} events)",
                m["acpxRecordId"].as_str().unwrap_or_default(),
                m["from"].as_str().unwrap_or_default(),
                m["messages"],
                m["threadSource"].as_str().unwrap_or_default(),
                m["events"]
            );
            if ctx.out.is_text() {
                ctx.out.line(&line);
            } else {
                ctx.out.line(m["acpxRecordId"].as_str().unwrap_or_default());
            }
        }
        for s in &skipped {
            ctx.out.warn(&format!(
                "skipped {}: {}",
                s["path"].as_str().unwrap_or_default(),
                s["reason"].as_str().unwrap_or_default()
            ));
        }
        ctx.out.note(&format!(
            "imported {} session(s) from {}, skipped {}",
            imported.len(),
            dir.display(),
            skipped.len()
        ));
    }
    if files.is_empty() {
        return Err(CliError::usage(format!(
            "no Node acpx session records found in {}",
            dir.display()
        ))
        .with_hint("pass the Node acpx home (usually ~/.acpx) or its sessions/ directory"));
    }
    // Sessions already present (an earlier import) and files that are not sessions are not
    // failures: re-running an import is safe.
    let failed = skipped
        .iter()
        .filter(|s| s.get("alreadyPresent").is_none() && s.get("ignored").is_none())
        .count();
    if failed > 0 {
        return Err(
            CliError::runtime(format!("{failed} file(s) could not be imported")).reported(),
        );
    }
    Ok(())
}
