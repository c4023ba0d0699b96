//! `acpx compare 'prompt' --agent A --agent B …`: one prompt sent to several agents at once
//! (Node acpx's `compare`), each run a stored session of its own, summed up in one row per
//! agent: stop reason, tokens, cost, wall time and the new record id.
//!
//! The runs are started together and each records through the runtime like any prompt; a
//! run that fails (the agent does not start, the turn errs) is a row with its error, and the
//! others go on. Each session is closed after its turn: a comparison is a finished run.

use std::path::PathBuf;
use std::sync::Arc;

use acpx_model::Store;
use acpx_runtime::{text_prompt, NewSessionSpec, Runtime, RuntimeOptions};
use serde_json::{json, Value};
use tokio::sync::watch;

use crate::diff::{cost_text, ms_text};
use crate::recording::{read_recording, Cost};

/// One agent to compare: how the user named it, and its command line.
#[derive(Debug, Clone)]
pub struct CompareAgent {
    /// The name or command the user gave.
    pub label: String,
    /// The command line that starts it.
    pub command: String,
}

/// One agent's run.
#[derive(Debug, Clone, PartialEq)]
pub struct CompareRow {
    /// The agent as the user named it.
    pub agent: String,
    /// The stored session, when one was made.
    pub record_id: Option<String>,
    /// The stop reason, `error` when the turn failed.
    pub stop_reason: Option<String>,
    /// The turn's tokens, when reported.
    pub tokens: Option<u64>,
    /// The turn's cost, when reported.
    pub cost: Option<Cost>,
    /// Milliseconds from prompt to end, from the log.
    pub wall_ms: Option<i64>,
    /// Why the run failed, if it did.
    pub error: Option<String>,
}

impl CompareRow {
    /// The JSON form of the row.
    pub fn to_json(&self) -> Value {
        json!({
            "agent": self.agent,
            "acpxRecordId": self.record_id,
            "stopReason": self.stop_reason,
            "tokens": self.tokens,
            "cost": self.cost.as_ref().map(|c| json!({"amount": c.amount, "currency": c.currency})),
            "wallMs": self.wall_ms,
            "error": self.error,
        })
    }
}

/// Sends `prompt` to every agent in `agents` at once, each in a new session in `cwd`;
/// `interrupt` becoming true cancels the turns still running. The rows come in the order of
/// `agents`.
pub async fn compare(
    store: Arc<dyn Store>,
    options: RuntimeOptions,
    agents: &[CompareAgent],
    cwd: PathBuf,
    prompt: &str,
    interrupt: watch::Receiver<bool>,
) -> Vec<CompareRow> {
    let runtime = Runtime::new(store.clone(), options);
    let runs: Vec<_> = agents
        .iter()
        .map(|agent| {
            let runtime = runtime.clone();
            let store = store.clone();
            let agent = agent.clone();
            let cwd = cwd.clone();
            let prompt = prompt.to_owned();
            let interrupt = interrupt.clone();
            run_one(runtime, store, agent, cwd, prompt, interrupt)
        })
        .collect();
    // Polled together in this task: a session's turn future is not `Send`, and the runs
    // spend their time waiting for their agents, not computing.
    futures::future::join_all(runs).await
}

async fn run_one(
    runtime: Runtime,
    store: Arc<dyn Store>,
    agent: CompareAgent,
    cwd: PathBuf,
    prompt: String,
    mut interrupt: watch::Receiver<bool>,
) -> CompareRow {
    let mut row = CompareRow {
        agent: agent.label.clone(),
        record_id: None,
        stop_reason: None,
        tokens: None,
        cost: None,
        wall_ms: None,
        error: None,
    };
    let spec = NewSessionSpec {
        agent_command: agent.command.clone(),
        cwd,
        name: None,
    };
    let mut session = match runtime.open_new(spec).await {
        Ok(s) => s,
        Err(e) => {
            row.error = Some(e.to_string());
            return row;
        }
    };
    let id = session.id().clone();
    row.record_id = Some(id.to_string());
    let cancel = session.cancel_handle();
    let outcome = {
        let turn = session.prompt(text_prompt(&prompt));
        tokio::pin!(turn);
        tokio::select! {
            o = &mut turn => o,
            () = async { let _ = interrupt.wait_for(|v| *v).await; } => {
                cancel.cancel();
                turn.await
            }
        }
    };
    if let Err(e) = outcome {
        row.error = Some(e.to_string());
    }
    if let Err(e) = session.close().await {
        row.error.get_or_insert(e.to_string());
    }
    // The row's figures come from the log, as `sessions diff` reads them.
    match read_recording(&*store, &id).await {
        Ok(r) => {
            if let Some(t) = r.turns.first() {
                row.stop_reason = Some(t.outcome().to_owned());
                row.tokens = t.tokens();
                row.cost = t.cost.clone();
                row.wall_ms = t.wall_ms();
                if row.error.is_none() {
                    row.error = t
                        .error
                        .as_ref()
                        .and_then(|e| e.get("message"))
                        .and_then(Value::as_str)
                        .map(str::to_owned);
                }
            }
        }
        Err(e) => {
            row.error.get_or_insert(e.to_string());
        }
    }
    row
}

/// The columns of the table a person reads (the `acpx` binary renders it with its table).
pub const COLUMNS: [&str; 6] = [
    "AGENT",
    "STOP REASON",
    "TOKENS",
    "COST",
    "WALL TIME",
    "RECORD ID",
];

impl CompareRow {
    /// The row's cells under [`COLUMNS`] (`-` where there is nothing).
    pub fn cells(&self) -> [String; 6] {
        [
            self.agent.clone(),
            self.stop_reason.clone().unwrap_or_else(|| "-".into()),
            self.tokens.map_or_else(|| "-".into(), |t| t.to_string()),
            cost_text(self.cost.as_ref()),
            ms_text(self.wall_ms),
            self.record_id.clone().unwrap_or_else(|| "-".into()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_has_a_cell_per_column() {
        let row = CompareRow {
            agent: "demo".into(),
            record_id: None,
            stop_reason: Some("end_turn".into()),
            tokens: Some(150),
            cost: Some(Cost {
                amount: 0.01,
                currency: "USD".into(),
            }),
            wall_ms: Some(1200),
            error: None,
        };
        assert_eq!(
            row.cells(),
            ["demo", "end_turn", "150", "0.0100 USD", "1.2 s", "-"].map(str::to_owned)
        );
        assert_eq!(row.cells().len(), COLUMNS.len());
    }
}
