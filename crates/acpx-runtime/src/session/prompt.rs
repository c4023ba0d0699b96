//! A prompt turn of a [`Session`]: the session hands the parts a turn needs to
//! [`crate::turn`], which runs it.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::client_ops::{PermissionMode, PermissionPrompter};
use crate::core::TurnPolicy;
use crate::error::RuntimeResult;
use crate::output_backlog::OutputBacklog;
use crate::recorder::Observer;
use crate::turn::{self, TurnOutcome, TurnParts};

use super::{NonInteractivePermissions, Session};

/// What one turn runs with when it differs from the session's
/// [`RuntimeOptions`](super::RuntimeOptions). A queue owner serves many commands with one session, so each
/// command's turn carries its own permission policy and timeout.
#[derive(Clone, Default)]
pub struct TurnOptions {
    /// Sees each event of the turn after it was appended to the log.
    pub observer: Option<Observer>,
    /// The permission policy of this turn; `None` keeps the session's.
    pub permission_mode: Option<PermissionMode>,
    /// Who answers permission questions under [`PermissionMode::ApproveReads`] in this turn
    /// (used only with `permission_mode`; `None` there means nobody, so such requests are
    /// denied).
    pub prompter: Option<Arc<dyn PermissionPrompter>>,
    /// What happens in this turn when a decision needs a human and there is none (used
    /// only with `permission_mode`; `None` there keeps the session's rule).
    pub non_interactive: Option<NonInteractivePermissions>,
    /// The `--permission-policy` rules of this turn (used only with `permission_mode`, like
    /// `prompter`).
    pub permission_rules: Option<crate::permission_rules::PermissionRules>,
    /// The answers to form elicitations of this turn (used only with `permission_mode`;
    /// `None` there: nobody answers them).
    pub elicitation_answers: Option<crate::ElicitationAnswers>,
    /// How many times a transient failure is retried (`--prompt-retries`); `None` keeps the
    /// session's.
    pub prompt_retries: Option<u32>,
    /// The prompt timeout of this turn; `None` keeps the session's.
    pub prompt_timeout: Option<Option<Duration>>,
    /// The turn's `requestId` in the log; `None` makes a fresh one.
    pub request_id: Option<String>,
    /// Leaves [`TurnOutcome::agent_text`] empty. The reply is in the session's thread either
    /// way; a caller that reads it from there (the record [`Session::shutdown`] returns, or
    /// [`Session::with_record`] with [`agent_text_after`](crate::agent_text_after)) saves a
    /// copy of the whole reply at the turn's memory peak (8 MB for a 1M-chunk turn).
    pub without_agent_text: bool,
    /// The caller shuts the session down right after this turn ([`Session::shutdown`]): the
    /// turn's end then is not saved by a snapshot save of its own, only by the shutdown's
    /// (the log holds it either way). Saves rewrite the whole snapshot, so this halves what a
    /// short turn on a long session pays for them (`--no-owner`, `exec`).
    pub session_ends_after: bool,
    /// A consumer of this turn's events that runs at its own pace (a queue owner's client):
    /// while it is behind by more than its limit, the turn records no more of the agent's
    /// updates, so the agent waits ([`crate::output_backlog`]). `None`: the observer keeps up
    /// by itself (it prints, or drops).
    pub output_backlog: Option<Arc<OutputBacklog>>,
}

impl std::fmt::Debug for TurnOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TurnOptions")
            .field("observer", &self.observer.is_some())
            .field("permission_mode", &self.permission_mode)
            .field("prompter", &self.prompter.is_some())
            .field("non_interactive", &self.non_interactive)
            .field("permission_rules", &self.permission_rules)
            .field("elicitation_answers", &self.elicitation_answers)
            .field("prompt_retries", &self.prompt_retries)
            .field("prompt_timeout", &self.prompt_timeout)
            .field("request_id", &self.request_id)
            .field("without_agent_text", &self.without_agent_text)
            .field("session_ends_after", &self.session_ends_after)
            .field("output_backlog", &self.output_backlog)
            .finish()
    }
}

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
        self.prompt_with_options(
            prompt,
            TurnOptions {
                observer,
                ..TurnOptions::default()
            },
        )
        .await
    }

    /// Runs one prompt turn with its own [`TurnOptions`]; the session's own options apply
    /// again after it. A transient failure before any side effect is retried as a new turn
    /// up to `prompt_retries` times (see [`crate::session::TRANSIENT_PROMPT_ERRORS`]).
    pub async fn prompt_with_options(
        &mut self,
        prompt: Vec<Value>,
        options: TurnOptions,
    ) -> RuntimeResult<TurnOutcome> {
        let retries = options
            .prompt_retries
            .unwrap_or(self.options.prompt_retries);
        let mut attempt = 0;
        loop {
            let mut this = options.clone();
            if attempt > 0 {
                // Each attempt is a turn of its own in the log.
                this.request_id = None;
            }
            let outcome = self.prompt_once(prompt.clone(), this).await?;
            if attempt >= retries || !self.retryable(&outcome).await {
                return Ok(outcome);
            }
            attempt += 1;
            tracing::info!(
                attempt,
                retries,
                "the prompt failed transiently before any update; retrying"
            );
        }
    }

    async fn prompt_once(
        &mut self,
        prompt: Vec<Value>,
        options: TurnOptions,
    ) -> RuntimeResult<TurnOutcome> {
        self.ensure_connected()?;
        let parts = TurnParts {
            core: &self.core,
            conn: &self.conn,
            agent: &self.agent,
            cancel: &self.cancel,
            acp_session_id: self.acp_session_id().await,
            resumed: self.resumed(),
            prompt_timeout: options
                .prompt_timeout
                .unwrap_or(self.options.prompt_timeout),
            cancel_grace: self.options.cancel_grace,
            collect_agent_text: !options.without_agent_text,
            session_ends_after: options.session_ends_after,
        };
        if let Some(mode) = options.permission_mode {
            self.core.set_turn_policy(Some(TurnPolicy {
                permission_mode: mode,
                prompter: options.prompter.clone(),
                non_interactive: options
                    .non_interactive
                    .unwrap_or(self.options.non_interactive),
                permission_rules: options.permission_rules.clone(),
                elicitation_answers: options.elicitation_answers.clone(),
            }));
        }
        self.core.set_output_backlog(options.output_backlog);
        let result = turn::run(parts, prompt, options.observer, options.request_id).await;
        self.core.set_output_backlog(None);
        self.core.set_turn_policy(None);
        result
    }
}
