//! What the maintenance commands print: `migrate`, `fsck`, `sessions import --from-node-acpx`
//! and `sessions usage`.

use std::path::Path;

use acpx_model::migrate::CopyReport;
use acpx_model::usage::UsageReport;
use acpx_runtime::ops::node_import::NodeImportReport;
use acpx_runtime::ops::repair::FsckReport;
use serde_json::json;

use super::{Paint, Printed};
use crate::live::Tone;
use crate::results;

/// `migrate` from the backend `from` to the backend `to` (its store at `location`): every
/// session copied, copied again or found copied already, and the sums; quiet prints the
/// number of sessions copied. The sessions that could not be read are warnings.
pub fn migrated(from: &str, to: &str, location: &str, report: &CopyReport) -> Printed {
    let events: u64 = report.sessions.iter().map(|s| s.events).sum();
    let mut text = Vec::new();
    for s in &report.sessions {
        let trimmed = if s.trimmed {
            "; older events had been removed by retention, the retained part was copied"
        } else {
            ""
        };
        text.push(format!(
            "copied {} ({} events, seq {}..{}{trimmed}), verified",
            s.acpx_record_id, s.events, s.first_seq, s.last_seq
        ));
    }
    for id in &report.recopied {
        text.push(format!(
            "copied {id} again: the target held an unfinished copy of it (an earlier run \
             stopped before its last save)"
        ));
    }
    for s in &report.already_copied {
        text.push(format!(
            "already copied {} ({} events, seq {}..{}), verified identical",
            s.acpx_record_id, s.events, s.first_seq, s.last_seq
        ));
    }
    let trimmed = report.sessions.iter().filter(|s| s.trimmed).count();
    let trimmed = if trimmed > 0 {
        format!(" ({trimmed} with a log trimmed by retention)")
    } else {
        String::new()
    };
    text.push(format!(
        "migrated {} session(s){trimmed}, {events} event(s) from {from} to {to} ({location}), {} already copied; use --store {to} to work with the copy",
        report.sessions.len(),
        report.already_copied.len(),
    ));
    let mut p = Printed::new(
        results::migrated(from, to, location, report),
        text,
        vec![report.sessions.len().to_string()],
    );
    p.warnings = report
        .skipped
        .iter()
        .map(|s| format!("not copied: {}: {} (run `acpx fsck`)", s.location, s.reason))
        .collect();
    p
}

/// `fsck` (`repair`: `fsck --repair`): a line per problem, tagged in colour, with what to do
/// about it; notes for the sessions skipped in use and the stages left over, and the sums.
/// Quiet prints the problem lines too.
pub fn fsck(report: &FsckReport, repair: bool, paint: Paint<'_>) -> Printed {
    let mut text = Vec::new();
    for p in &report.problems {
        let tag = if p.repaired {
            paint(Tone::Green, "repaired")
        } else if p.repairable {
            paint(Tone::Yellow, "repairable")
        } else {
            paint(Tone::Red, "problem")
        };
        let who = p.acpx_record_id.as_deref().unwrap_or("-");
        text.push(format!("{tag} {who} {}: {}", p.kind.as_str(), p.message));
        if let Some(act) = &p.action {
            text.push(format!("  → {act}"));
        }
    }
    let mut p = Printed::new(results::fsck(report), text.clone(), text);
    // A skipped session was not checked at all (exit 0 says nothing about it): say how to
    // get it checked. `--repair` releases idle queue owners first.
    let how = if repair {
        "run fsck again when its prompt is over"
    } else {
        "`acpx fsck --repair` has idle queue owners release their sessions first"
    };
    for b in &report.skipped_busy {
        p = p.note(format!(
            "skipped {b}: in use by a running prompt or its queue owner, not checked"
        ));
    }
    if !report.skipped_busy.is_empty() {
        p = p.note(format!("to check a skipped session: {how}"));
    }
    for s in &report.stale_stages_removed {
        p = p.note(format!("removed {}: {}", s.location, s.detail));
    }
    for s in &report.stale_stages {
        p = p.note(format!(
            "left over: {} ({}); not a session, nothing lists it; the next import or \
             `acpx fsck --repair` removes it",
            s.detail, s.location
        ));
    }
    let skipped = match report.skipped_busy.len() {
        0 => String::new(),
        n => format!(", skipped {n} in use"),
    };
    p.note(format!(
        "checked {} session(s){skipped}: {} problem(s), {} repaired",
        report.checked,
        report.problems.len(),
        report.repaired()
    ))
}

/// `sessions import --from-node-acpx DIR` (`dry_run`: what would be imported): a line per
/// session, and the notes the import made on each as warnings. The files it skipped and
/// the sums are [`node_import_skipped`], said after the result.
pub fn node_imported(dir: &Path, dry_run: bool, report: &NodeImportReport) -> Printed {
    let verb = if dry_run { "would import" } else { "imported" };
    let text = report
        .imported
        .iter()
        .map(|i| {
            format!(
                "{verb} {} from {} ({} messages from the {}, {} events)",
                i.session.acpx_record_id,
                i.origin,
                i.session.message_count,
                i.thread_source.as_str(),
                i.events
            )
        })
        .collect();
    let quiet = report
        .imported
        .iter()
        .map(|i| i.session.acpx_record_id.to_string())
        .collect();
    let mut p = Printed::new(results::node_import(dir, dry_run, report), text, quiet);
    for i in &report.imported {
        for n in &i.notes {
            p = p.warn(format!("{}: {n}", i.origin));
        }
    }
    p
}

/// What a person or a script is told after a Node import's result (JSON has it all in the
/// result): the files skipped (warnings), then the sums (a note).
pub fn node_import_skipped(dir: &Path, dry_run: bool, report: &NodeImportReport) -> Printed {
    let mut p = Printed {
        warnings: report
            .skipped
            .iter()
            .map(|s| format!("skipped {}: {}", s.path, s.reason))
            .collect(),
        ..Printed::default()
    };
    p = p.note(format!(
        "{} {} session(s) from {}, skipped {}",
        if dry_run { "would import" } else { "imported" },
        report.imported.len(),
        dir.display(),
        report.skipped.len()
    ));
    p
}

/// `sessions usage`: the table (a note when there is nothing in it; `filtered` says
/// `--since` or `--until` narrowed it), the grouping keys in quiet.
pub fn usage(report: &UsageReport, filtered: bool) -> Printed {
    let quiet = report.rows.iter().map(|r| r.key.clone()).collect();
    let p = Printed::new(
        json!({"action": "sessions_usage", "report": report}),
        Vec::new(),
        quiet,
    );
    if report.rows.is_empty() {
        return p.note(if filtered {
            "no sessions in that range"
        } else {
            "no sessions"
        });
    }
    Printed {
        text: crate::usage::usage_table(report),
        ..p
    }
}
