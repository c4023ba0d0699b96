//! Marking a session as a replay of another one (`acpx replay`): a `session_replay_of`
//! lifecycle event, which the reducer folds into `acpx.replayOf`, so the link survives a
//! roll-forward from the log like every other field (docs/format.md § Replays).

use acpx_model::RecordId;
use serde_json::json;

use crate::error::RuntimeResult;
use crate::mapping::{lifecycle, REPLAY_OF_KEY};

use super::{lifecycle_draft, lifecycle_payload, Session};

impl Session {
    /// Records that this session sends again the prompts of the session `source`.
    pub async fn mark_replay_of(&self, source: &RecordId) -> RuntimeResult<()> {
        self.core
            .try_record(lifecycle_draft(lifecycle_payload(
                lifecycle::SESSION_REPLAY_OF,
                json!({ REPLAY_OF_KEY: source.to_string() }),
            )))
            .await
            .map(|_| ())
    }
}
