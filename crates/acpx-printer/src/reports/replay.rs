//! What `replay` and `compare` print: the progress of a replay, the new session and how to
//! compare it, and the table of a comparison of agents. (The engines, and the text of
//! `sessions diff`, are `acpx_replay`'s.)

use acpx_model::RecordId;
use acpx_replay::compare::{self, CompareRow};
use acpx_replay::replay::{ReplayEvent, ReplayOutcome};
use serde_json::json;

use super::Printed;
use crate::table::{stdout_width, Table};

/// The note for a replay's progress (of the session `source`).
pub fn replay_progress(source: &RecordId, event: &ReplayEvent<'_>) -> String {
    match event {
        ReplayEvent::Started { record_id, turns } => {
            format!("[replay] {record_id}: {turns} prompt(s) of {source}")
        }
        ReplayEvent::TurnStarting { index, prompt } => {
            format!("[replay] turn {}: {prompt:?}", index + 1)
        }
        ReplayEvent::TurnEnded { index, outcome } => format!(
            "[replay] turn {} ended: {}",
            index + 1,
            outcome
                .stop_reason
                .as_deref()
                .unwrap_or(outcome.outcome.as_str())
        ),
    }
}

/// `replay` of `source`: the new session's id (text and quiet), and what was sent.
pub fn replayed(source: &RecordId, outcome: &ReplayOutcome) -> Printed {
    let id = outcome.record.acpx_record_id.to_string();
    let json = json!({
        "action": "replayed",
        "acpxRecordId": id,
        "replayOf": source.to_string(),
        "agentCommand": outcome.record.agent_command,
        "turns": outcome.turns_sent,
        "answersFromSource": outcome.answers_given,
        "interrupted": outcome.interrupted,
    });
    let note = format!(
        "[replay] {} turn(s) sent, {} permission answer(s) taken from the source; compare with `acpx sessions diff {source} {id}`",
        outcome.turns_sent, outcome.answers_given
    );
    Printed::new(json, vec![id.clone()], vec![id]).note(note)
}

/// `compare` of `prompt`: one row per agent, and the reason of each failed run under the
/// table, named by its agent (quiet prints what text prints).
pub fn compared(prompt: &str, rows: &[CompareRow]) -> Printed {
    let json = json!({
        "action": "compared",
        "prompt": prompt,
        "runs": rows.iter().map(|r| r.to_json()).collect::<Vec<_>>(),
    });
    let mut table = Table::new(&compare::COLUMNS)
        .right(2)
        .right(3)
        .right(4)
        .shrink(0);
    for r in rows {
        table.row(r.cells().to_vec());
    }
    let mut lines = table.render(stdout_width(), |_, _, cell| cell.to_owned());
    lines.extend(
        rows.iter()
            .filter_map(|r| Some(format!("{}: {}", r.agent, r.error.as_ref()?))),
    );
    Printed::new(json, lines.clone(), lines)
}
