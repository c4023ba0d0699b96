//! Lines on an agent's stdout that are not JSON-RPC (`docs/format.md` § Agent output that is
//! not JSON-RPC): never passed to the ACP connection, never dropped without a word. Each is
//! counted, shown with `--verbose` (tracing target `acpx::agent_stdout`), and recorded as a
//! `lifecycle_event` of phase `agent_output`: the first [`RECORDED_IN_FULL`] one by one, then
//! every [`RECORD_EVERY`]th, so a chatty agent cannot flood the log; each event's `count` is
//! the number of such lines so far.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use serde_json::json;

use crate::agent::NonProtocolSink;
use crate::core::SessionCore;
use crate::mapping::lifecycle;
use crate::recorder::EventDraft;

use super::{lifecycle_draft, lifecycle_payload};

/// Lines recorded one by one.
pub const RECORDED_IN_FULL: u64 = 100;
/// After the first [`RECORDED_IN_FULL`], one line in this many is recorded.
pub const RECORD_EVERY: u64 = 100;
/// How often a line that came before the session's record is tried again.
const RECORD_RETRY: Duration = Duration::from_millis(50);
/// The most bytes of one line kept in its event.
const LINE_BYTES: usize = 2048;

/// The sink for a new agent of the session `core`: counts, traces, and hands lines to a task
/// that records them (the reader of the agent's stdout must never wait for the store).
pub(super) fn recording_sink(core: &Arc<SessionCore>) -> NonProtocolSink {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(u64, String, usize)>();
    let weak = Arc::downgrade(core);
    tokio::spawn(async move {
        while let Some((count, line, bytes)) = rx.recv().await {
            let Some(core) = weak.upgrade() else { break };
            let mut extra = json!({"stream": "stdout", "line": line, "count": count});
            if bytes > line.len() {
                extra["bytes"] = json!(bytes);
                extra["truncated"] = json!(true);
            }
            let draft = lifecycle_draft(lifecycle_payload(lifecycle::AGENT_OUTPUT, extra));
            drop(core);
            if !record_when_possible(&weak, draft).await {
                break;
            }
        }
    });
    let count = AtomicU64::new(0);
    Arc::new(move |line: &str| {
        let n = count.fetch_add(1, Ordering::Relaxed) + 1;
        tracing::debug!(target: "acpx::agent_stdout", count = n, "agent stdout line that is not JSON-RPC: {line}");
        if n <= RECORDED_IN_FULL || n.is_multiple_of(RECORD_EVERY) {
            let _ = tx.send((n, clip(line).to_owned(), line.len()));
        }
    })
}

/// Records `draft` once the session's record exists (a line may come before `session/new` has
/// answered). `false` when the session is gone or recording failed (the failure stops the
/// turn, as for any event recorded through `SessionCore::record`).
async fn record_when_possible(weak: &Weak<SessionCore>, draft: EventDraft) -> bool {
    loop {
        let Some(core) = weak.upgrade() else {
            return false;
        };
        match core.try_record(draft.clone()).await {
            Ok(Some(_)) => return true,
            Ok(None) => {}
            Err(e) => {
                core.set_fatal(e.to_string());
                return false;
            }
        }
        drop(core);
        tokio::time::sleep(RECORD_RETRY).await;
    }
}

/// `line` cut to at most [`LINE_BYTES`] bytes, on a character boundary.
fn clip(line: &str) -> &str {
    if line.len() <= LINE_BYTES {
        return line;
    }
    let mut end = LINE_BYTES;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    &line[..end]
}

#[cfg(test)]
mod tests {
    use super::clip;

    #[test]
    fn clip_keeps_whole_characters() {
        let s = "é".repeat(2000);
        let c = clip(&s);
        assert!(c.len() <= 2048 && c.len() >= 2046);
        assert!(c.chars().all(|ch| ch == 'é'));
        assert_eq!(clip("short"), "short");
    }
}
