//! `sessions import --from-node-acpx <dir>`: brings every session of a Node acpx 0.19 home (or
//! of its `sessions/` directory, or of a Node `sessions export` archive) into the store, with
//! [`acpx_runtime::ops::node_import::import_node`]; this renders its report (and a progress
//! bar on a terminal).

use std::io::IsTerminal;
use std::path::Path;

use acpx_runtime::ops::node_import::{import_node, NodeImportOptions, SkipKind};
use acpx_runtime::ops::OpsError;
use serde_json::{json, Map, Value};

use crate::context::Ctx;
use crate::error::{CliError, CliResult};
use crate::render::{action, record_identity};

const HOME_HINT: &str = "pass the Node acpx home (usually ~/.acpx) or its sessions/ directory";

/// Homes with fewer record files than this import without a progress bar.
const PROGRESS_MIN_FILES: usize = 20;

/// `sessions import --from-node-acpx`.
pub async fn run(ctx: &Ctx, dir: &Path, new_id: bool, dry_run: bool) -> CliResult<()> {
    let store = ctx.store().await?;
    let options = NodeImportOptions {
        new_id,
        dry_run,
        home: std::env::var_os("HOME").map(Into::into),
    };
    let bar = std::io::stderr()
        .is_terminal()
        .then(indicatif::ProgressBar::hidden);
    let progress = |done: usize, total: usize| {
        if let Some(bar) = bar.as_ref().filter(|_| total >= PROGRESS_MIN_FILES) {
            if bar.is_hidden() {
                bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
                bar.set_length(total as u64);
            }
            bar.set_position(done as u64);
        }
    };
    let report = import_node(&*store, dir, &options, &progress).await;
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    let report = report.map_err(|e| match e {
        OpsError::Invalid(m) => CliError::usage(m).with_hint(HOME_HINT),
        other => other.into(),
    })?;
    let imported: Vec<Map<String, Value>> = report
        .imported
        .iter()
        .map(|i| {
            let mut m = record_identity(&i.record);
            m.insert("from".into(), json!(i.origin));
            m.insert("nodeRecordId".into(), json!(i.node_record_id));
            m.insert("messages".into(), json!(i.record.thread.messages.len()));
            m.insert("events".into(), json!(i.events));
            m.insert("threadSource".into(), json!(i.thread_source.as_str()));
            m
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
    for i in &report.imported {
        for n in &i.notes {
            ctx.out.warn(&format!("{}: {n}", i.origin));
        }
    }
    if ctx.out.is_json() {
        let mut m = Map::new();
        m.insert("from".into(), json!(dir.to_string_lossy()));
        m.insert("dryRun".into(), json!(dry_run));
        m.insert(
            "imported".into(),
            Value::Array(imported.iter().cloned().map(Value::Object).collect()),
        );
        m.insert("skipped".into(), Value::Array(skipped.clone()));
        ctx.out.json(&action("node_import", m));
    } else {
        for m in &imported {
            let line = format!(
                "{} {} from {} ({} messages from the {}, {} events)",
                if dry_run { "would import" } else { "imported" },
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
        for s in &report.skipped {
            ctx.out.warn(&format!("skipped {}: {}", s.path, s.reason));
        }
        ctx.out.note(&format!(
            "{} {} session(s) from {}, skipped {}",
            if dry_run { "would import" } else { "imported" },
            imported.len(),
            dir.display(),
            skipped.len()
        ));
    }
    if report.files == 0 {
        return Err(CliError::usage(format!(
            "no Node acpx session records found in {}",
            dir.display()
        ))
        .with_hint(HOME_HINT));
    }
    // Sessions already present (an earlier import) and files that are not sessions are not
    // failures: re-running an import is safe.
    let failed = report.failed();
    if failed > 0 {
        return Err(
            CliError::runtime(format!("{failed} file(s) could not be imported")).reported(),
        );
    }
    Ok(())
}
