//! `acpx replay`: a new session that sends a recorded session's prompts again, in order, to
//! an agent (the source's, or another one: a new version, a competitor).
//!
//! The new session is an ordinary stored session, recorded through the runtime like any
//! other, plus one `session_replay_of` event that sets `acpx.replayOf` to the source's record
//! id. It runs in the source's directory (its tool calls name paths there, and the recorded
//! permission answers are matched by their input), answers each permission question the
//! source answered for the same tool call as the source did ([`crate::answers`]), and leaves
//! the others to the usual policy. It is closed when the last turn ends: it is a finished
//! run, and an open session in the source's scope would take the place of the user's own.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use acpx_model::{RecordId, SessionRecord, Store};
use acpx_runtime::{NewSessionSpec, Runtime, RuntimeOptions, TurnOptions, TurnOutcome};

use crate::answers::RecordedAnswers;
use crate::recording::read_recording;
use crate::{ReplayError, ReplayResult};

/// What to replay, and against what.
#[derive(Debug, Clone)]
pub struct ReplaySpec {
    /// The session whose prompts are sent.
    pub source: RecordId,
    /// The agent command to send them to; `None`: the source's agent command.
    pub agent_command: Option<String>,
    /// Send only the first N prompts.
    pub until: Option<usize>,
}

/// What happened while a replay ran, for the caller to show.
#[derive(Debug)]
pub enum ReplayEvent<'a> {
    /// The new session exists (its record id is final).
    Started {
        /// The new session's record id.
        record_id: &'a RecordId,
        /// How many prompts will be sent.
        turns: usize,
    },
    /// A turn is about to be sent.
    TurnStarting {
        /// 0-based.
        index: usize,
        /// The prompt's text.
        prompt: &'a str,
    },
    /// A turn ended.
    TurnEnded {
        /// 0-based.
        index: usize,
        /// How it ended.
        outcome: &'a TurnOutcome,
    },
}

/// The end of a replay.
#[derive(Debug)]
pub struct ReplayOutcome {
    /// The new session's record as closed.
    pub record: SessionRecord,
    /// How many prompts were sent.
    pub turns_sent: usize,
    /// How many permission questions were answered from the source's answers.
    pub answers_given: usize,
    /// Whether the run was interrupted (the turn in progress cancelled, the rest not sent).
    pub interrupted: bool,
}

/// Replays `spec.source` from `store` with a runtime of `options` (their permission policy
/// answers what the recording does not). `interrupt` resolving cancels the turn in progress
/// and sends no more; `report` sees the progress.
pub async fn replay(
    store: Arc<dyn Store>,
    mut options: RuntimeOptions,
    spec: &ReplaySpec,
    interrupt: impl Future<Output = ()>,
    mut report: impl FnMut(ReplayEvent<'_>),
) -> ReplayResult<ReplayOutcome> {
    let recording = read_recording(&*store, &spec.source).await?;
    // An untrusted import is data (issue 45): its prompts and its recorded approvals are not
    // replayed against an agent until the user trusts it.
    if recording
        .agent_command
        .starts_with(acpx_runtime::ops::import_trust::UNTRUSTED_PREFIX)
    {
        return Err(ReplayError::Invalid(format!(
            "session {} is an untrusted import: its prompts and recorded permission answers are \
             not replayed until you trust it (`acpx sessions trust {}`)",
            spec.source, spec.source
        )));
    }
    let count = recording.turns.len().min(spec.until.unwrap_or(usize::MAX));
    if count == 0 {
        return Err(ReplayError::Invalid(format!(
            "session {} has no prompts to replay",
            spec.source
        )));
    }
    let cwd = PathBuf::from(&recording.cwd);
    if !cwd.is_dir() {
        return Err(ReplayError::Invalid(format!(
            "the source session ran in {}, which is no longer a directory; the replay runs where the source ran",
            cwd.display()
        )));
    }
    let answers = Arc::new(RecordedAnswers::from_recording(&recording, Some(count)));
    options.recorded_permissions = Some(answers.clone());
    let runtime = Runtime::new(store, options);
    let agent_command = spec
        .agent_command
        .clone()
        .unwrap_or_else(|| recording.agent_command.clone());
    let mut session = runtime
        .open_new(NewSessionSpec {
            agent_command,
            cwd,
            name: None,
        })
        .await?;
    session.mark_replay_of(&spec.source).await?;
    report(ReplayEvent::Started {
        record_id: session.id(),
        turns: count,
    });
    tokio::pin!(interrupt);
    let mut interrupted = false;
    let mut sent = 0;
    for turn in recording.turns.iter().take(count) {
        report(ReplayEvent::TurnStarting {
            index: turn.index,
            prompt: &turn.prompt_text(),
        });
        let cancel = session.cancel_handle();
        let options = TurnOptions {
            without_agent_text: true,
            ..TurnOptions::default()
        };
        let outcome = {
            let run = session.prompt_with_options(turn.prompt.clone(), options);
            tokio::pin!(run);
            tokio::select! {
                o = &mut run => o,
                () = &mut interrupt, if !interrupted => {
                    interrupted = true;
                    cancel.cancel();
                    run.await
                }
            }
        };
        let outcome = match outcome {
            Ok(o) => o,
            Err(e) => {
                // The agent is gone or the log cannot be written: what was recorded stays,
                // and the session is put away before the error is reported.
                let _ = session.close().await;
                return Err(e.into());
            }
        };
        sent += 1;
        report(ReplayEvent::TurnEnded {
            index: turn.index,
            outcome: &outcome,
        });
        if interrupted {
            break;
        }
    }
    let record = session.close().await?;
    Ok(ReplayOutcome {
        record,
        turns_sent: sent,
        answers_given: answers.given(),
        interrupted,
    })
}
