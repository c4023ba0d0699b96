//! A prompt turn of a [`Session`]: the session hands the parts a turn needs to
//! [`crate::turn`], which runs it.

use serde_json::Value;

use crate::error::RuntimeResult;
use crate::recorder::Observer;
use crate::turn::{self, TurnOutcome, TurnParts};

use super::Session;

impl Session {
    /// Runs one prompt turn (ACP ContentBlocks, e.g. from [`text_prompt`](super::text_prompt)).
    pub async fn prompt(&mut self, prompt: Vec<Value>) -> RuntimeResult<TurnOutcome> {
        self.prompt_with(prompt, None).await
    }

    /// Runs one prompt turn; `observer` sees each event of the turn as it is recorded.
    pub async fn prompt_with(
        &mut self,
        prompt: Vec<Value>,
        observer: Option<Observer>,
    ) -> RuntimeResult<TurnOutcome> {
        self.ensure_connected()?;
        let parts = TurnParts {
            core: &self.core,
            conn: &self.conn,
            agent: &self.agent,
            cancel: &self.cancel,
            acp_session_id: self.acp_session_id().await,
            resumed: self.resumed(),
            prompt_timeout: self.options.prompt_timeout,
            cancel_grace: self.options.cancel_grace,
        };
        turn::run(parts, prompt, observer).await
    }
}
