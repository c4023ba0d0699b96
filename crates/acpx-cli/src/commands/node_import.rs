//! `sessions import --from-node-acpx <dir>`: brings every session of a Node acpx 0.19 home (or
//! of its `sessions/` directory) into the store, with
//! [`acpx_runtime::ops::node_import::import_node_home`]; this renders its report.

use std::path::Path;

use acpx_runtime::ops::node_import::{import_node_home, SkipKind};
use acpx_runtime::ops::OpsError;
use serde_json::{json, Map, Value};

use crate::context::Ctx;
use crate::error::{CliError, CliResult};
use crate::render::{action, record_identity};

const HOME_HINT: &str = "pass the Node acpx home (usually ~/.acpx) or its sessions/ directory";

/// `sessions import --from-node-acpx`.
pub async fn run(ctx: &Ctx, dir: &Path, new_id: bool) -> CliResult<()> {
    let store = ctx.store().await?;
    let report = import_node_home(&*store, dir, new_id)
        .await
        .map_err(|e| match e {
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
        for s in &report.skipped {
            ctx.out.warn(&format!("skipped {}: {}", s.path, s.reason));
        }
        ctx.out.note(&format!(
            "imported {} session(s) from {}, skipped {}",
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
