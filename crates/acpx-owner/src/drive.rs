//! One call that drives a stored session's prompt, control or cancel, through the session's
//! queue owner or in this process: the choice is made here, once, from
//! [`Driver::in_process`], and both ways run the same command options
//! ([`acpx_runtime::Invocation`], inside [`Driver::task`]).
//!
//! Through the owner ([`submit`]) the owner is started when none runs and the task is
//! queued behind the session's others. In this process ([`local`]) a running owner is first
//! released (waiting for its queue, up to the command's timeout), then the agent is started
//! here under the session's run lock. A caller renders the [`DriveEvent`]s as they come and
//! maps a [`DriveError`] to what its user sees.
//!
//! ```no_run
//! # async fn demo(driver: &acpx_owner::drive::Driver<'_>, id: &acpx_model::RecordId) -> Result<(), acpx_owner::drive::DriveError> {
//! use acpx_owner::drive::{Control, Prompted};
//! let done = driver
//!     .control(id, Control::SetMode("plan".into()), |_event| {})
//!     .await?;
//! println!("resumed: {}", done.resumed);
//! match driver
//!     .prompt(id, acpx_runtime::text_prompt("hello"), true, None, |_event| {})
//!     .await?
//! {
//!     Prompted::Owner(_submitted) => {}
//!     Prompted::Local(turn) => println!("turn {}", turn.outcome.request_id),
//! }
//! # Ok(()) }
//! ```

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use acpx_model::{RecordId, Store};
use acpx_runtime::ops::fork::FORKED_FROM_KEY;
use acpx_runtime::{PermissionPrompter, Runtime, RuntimeOptions, RuntimeResult, Session};
use serde_json::{json, Value};
use tokio::sync::watch;

use crate::local::{self, Controlled, Forked, LocalError, LocalEvent, Turn};
use crate::protocol::{Request, TaskOptions};
use crate::runs::{self, RunInfo, RunsError};
use crate::submit::{self, CancelAnswer, OwnerTarget, SubmitError, SubmitEvent, Submitted};

/// How long an in-process command waits for a busy owner to let the session go when the
/// command has no timeout: a day, as good as without limit.
const NO_TIMEOUT_WAIT: Duration = Duration::from_secs(24 * 3600);

/// Starts a detached queue owner for a session ([`Driver::spawn`]).
pub type SpawnOwner<'a> = Box<dyn Fn(&RecordId) -> std::io::Result<()> + Send + Sync + 'a>;

/// Everything needed to drive one command's work on the sessions of one store.
pub struct Driver<'a> {
    /// The store holding the sessions.
    pub store: Arc<dyn Store>,
    /// The store's authority directory ([`crate::authority`]).
    pub authority: &'a Path,
    /// The command's options: its [`acpx_runtime::Invocation`], and what its client wants
    /// to hear from an owner.
    pub task: TaskOptions,
    /// Run the agent in this process (`--no-owner`) instead of in the session's owner.
    pub in_process: bool,
    /// Starts a detached owner for a session when none runs (see [`OwnerTarget::spawn`]).
    pub spawn: SpawnOwner<'a>,
    /// The runtime options of the in-process path (observer, prompter, and the command's
    /// invocation applied); called only on that path.
    pub local_options: Box<dyn Fn() -> RuntimeOptions + 'a>,
    /// Starts counting the user's interrupts (Ctrl-C: [`crate::interrupts::interrupt_count`]),
    /// called when a flow starts to watch them: after releasing a busy owner, so that until
    /// then an interrupt has its default effect and stops the waiting command.
    pub interrupts: fn() -> watch::Receiver<u32>,
}

/// What happens while a command is driven.
pub enum DriveEvent<'a> {
    /// The work goes to the session's owner (started when none runs).
    ViaOwner,
    /// In process: a running owner is busy with other tasks (`why`, as it said); this waits
    /// for its queue to finish, up to `limit` (`None`: without limit).
    WaitingForOwner {
        /// The owner's own words.
        why: &'a str,
        /// The command's timeout, if it has one.
        limit: Option<Duration>,
    },
    /// In process: the agent is being started here.
    StartingAgent,
    /// Through the owner: what the owner reported.
    Owner(SubmitEvent<'a>),
    /// In process: what the one-process flow reported.
    Local(LocalEvent<'a>),
}

/// Why a command could not be driven.
#[derive(Debug, thiserror::Error)]
pub enum DriveError {
    /// Through the owner.
    #[error(transparent)]
    Owner(#[from] SubmitError),
    /// In process.
    #[error(transparent)]
    Local(#[from] LocalError),
    /// The run registry (a cancel in process).
    #[error(transparent)]
    Runs(#[from] RunsError),
    /// A store read (the record after an owner's control).
    #[error(transparent)]
    Store(#[from] acpx_model::StoreError),
    /// The task that sends a cancel to a one-process prompt failed.
    #[error("cancel failed: {0}")]
    CancelTask(String),
}

/// How a prompt went.
pub enum Prompted {
    /// Through the owner: the turn's outcome, or its place in the queue without waiting.
    Owner(Submitted),
    /// In process: the turn and the record after it.
    Local(Box<Turn>),
}

/// How a cancel went.
pub enum Cancelled {
    /// The session's owner answered.
    Owner(CancelAnswer),
    /// No owner runs: the one-process prompt that runs, if any, was asked to cancel.
    Run(Option<RunInfo>),
}

/// A control of a session (`set-mode`, `set`, `set model`), run by the owner or here the same
/// way; its answer is the JSON value the owner sends ([`Control::run`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Control {
    /// `session/set_mode`; answers `null`.
    SetMode(String),
    /// `session/set_config_option` of a key; answers the agent's config options (an array).
    SetConfigOption(String, Value),
    /// The session's model; answers `{"configOptions": [...], "viaConfigOption": bool}`.
    SetModel(String),
}

impl Control {
    /// The control of `set KEY VALUE`: `model` selects the model, any other key sets that
    /// config option, `true` / `false` sent as booleans and anything else as a string.
    pub fn set(key: &str, value: &str) -> Control {
        if key == "model" {
            return Control::SetModel(value.to_owned());
        }
        let value = match value {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            v => Value::String(v.to_owned()),
        };
        Control::SetConfigOption(key.to_owned(), value)
    }

    /// The agent's config options in the answer of a `set` or a `set model` ([`Control::run`]),
    /// and whether the model was set through the agent's model config option.
    pub fn config_options(answer: Value) -> (Vec<Value>, bool) {
        match answer {
            Value::Array(options) => (options, false),
            mut v => {
                let via = v.get("viaConfigOption").and_then(Value::as_bool) == Some(true);
                match v.get_mut("configOptions").map(Value::take) {
                    Some(Value::Array(options)) => (options, via),
                    _ => (Vec::new(), via),
                }
            }
        }
    }

    /// The owner's request for this control, with the command's options.
    pub fn request(&self, options: TaskOptions) -> Request {
        match self.clone() {
            Control::SetMode(mode_id) => Request::SetMode { mode_id, options },
            Control::SetConfigOption(config_id, value) => Request::SetConfigOption {
                config_id,
                value,
                options,
            },
            Control::SetModel(model_id) => Request::SetModel { model_id, options },
        }
    }

    /// Runs the control on an open session; the answer's shape is the owner's.
    pub async fn run(&self, session: &mut Session) -> RuntimeResult<Value> {
        match self {
            Control::SetMode(mode) => session.set_mode(mode).await.map(|()| Value::Null),
            Control::SetConfigOption(key, value) => session
                .set_config_option(key, value.clone())
                .await
                .map(Value::Array),
            Control::SetModel(model) => session
                .set_model(model)
                .await
                .map(|(opts, via)| json!({"configOptions": opts, "viaConfigOption": via})),
        }
    }
}

impl Driver<'_> {
    fn target<'t>(
        &'t self,
        id: &'t RecordId,
        spawn: &'t (dyn Fn() -> std::io::Result<()> + Send + Sync),
    ) -> OwnerTarget<'t> {
        OwnerTarget {
            authority: self.authority,
            id,
            spawn,
            store: Some(&self.store),
        }
    }

    /// Stops a running owner of session `id` (the session stays open), so this process can
    /// take the session's writer lock: at once when it is idle, else once its queue is done,
    /// up to the command's timeout.
    pub async fn release_owner(
        &self,
        id: &RecordId,
        mut events: impl FnMut(DriveEvent<'_>),
    ) -> Result<(), SubmitError> {
        let limit = self.task.invocation.timeout;
        match submit::release_idle_anywhere(Some(&self.store), self.authority, id).await {
            Ok(()) => return Ok(()),
            Err(SubmitError::Wire(e)) if e.detail_code.as_deref() == Some("SESSION_BUSY") => {
                events(DriveEvent::WaitingForOwner {
                    why: &e.message,
                    limit,
                });
            }
            Err(e) => return Err(e),
        }
        let max = limit.unwrap_or(NO_TIMEOUT_WAIT);
        submit::release_anywhere(Some(&self.store), self.authority, id, max).await
    }

    /// Runs one prompt of session `id`. Through the owner, `wait: false` only queues it, and
    /// `prompter` (when given) answers the permission questions the owner forwards; in
    /// process the runtime's own prompter asks, and the caller must wait.
    pub async fn prompt(
        &self,
        id: &RecordId,
        prompt: Vec<serde_json::Value>,
        wait: bool,
        prompter: Option<&dyn PermissionPrompter>,
        mut events: impl FnMut(DriveEvent<'_>),
    ) -> Result<Prompted, DriveError> {
        if !self.in_process {
            events(DriveEvent::ViaOwner);
            let spawn_owner = &self.spawn;
            let spawn = || spawn_owner(id);
            let submitted = submit::prompt(
                &self.target(id, &spawn),
                prompt,
                self.task.clone(),
                wait,
                prompter,
                (self.interrupts)(),
                |e| events(DriveEvent::Owner(e)),
            )
            .await?;
            return Ok(Prompted::Owner(submitted));
        }
        self.release_owner(id, &mut events).await?;
        events(DriveEvent::StartingAgent);
        let runtime = Runtime::new(self.store.clone(), (self.local_options)());
        let turn = local::prompt(
            &runtime,
            self.authority,
            id,
            prompt,
            self.task.invocation.timeout,
            (self.interrupts)(),
            |e| events(DriveEvent::Local(e)),
        )
        .await?;
        Ok(Prompted::Local(Box::new(turn)))
    }

    /// Runs a control of session `id` and returns its answer, whether the session was
    /// reattached, and the record after it.
    pub async fn control(
        &self,
        id: &RecordId,
        control: Control,
        mut events: impl FnMut(DriveEvent<'_>),
    ) -> Result<Controlled<Value>, DriveError> {
        if !self.in_process {
            events(DriveEvent::ViaOwner);
            let spawn_owner = &self.spawn;
            let spawn = || spawn_owner(id);
            let request = control.request(self.task.clone());
            let (value, resumed) = submit::control(&self.target(id, &spawn), request, |notices| {
                events(DriveEvent::Owner(SubmitEvent::Started(notices)))
            })
            .await?;
            let record = self.store.load(id).await?;
            return Ok(Controlled {
                value,
                resumed,
                record,
            });
        }
        self.release_owner(id, &mut events).await?;
        let runtime = Runtime::new(self.store.clone(), (self.local_options)());
        let done = local::control(
            &runtime,
            self.authority,
            id,
            self.task.invocation.timeout,
            (self.interrupts)(),
            |e| events(DriveEvent::Local(e)),
            async |s: &mut Session| control.run(s).await,
        )
        .await?;
        Ok(done)
    }

    /// Forks session `parent` into a new session (named `name`), after the parent's owner,
    /// if any, finished its queue and let go of it. Through the owner, the fork is made in
    /// the child's new owner, which keeps the agent that made it for the child's first
    /// turns (some agents keep a fork only in that process until its first turn); a fork by
    /// copy is reported as [`LocalEvent::ForkByCopy`] on both paths.
    pub async fn fork(
        &self,
        parent: &RecordId,
        name: Option<String>,
        mut events: impl FnMut(DriveEvent<'_>),
    ) -> Result<Forked, DriveError> {
        self.release_owner(parent, &mut events).await?;
        if self.in_process {
            let runtime = Runtime::new(self.store.clone(), (self.local_options)());
            let forked = local::fork(
                &runtime,
                self.authority,
                parent,
                name,
                self.task.invocation.timeout,
                (self.interrupts)(),
                |e| events(DriveEvent::Local(e)),
            )
            .await?;
            return Ok(forked);
        }
        let child_id = RecordId::generate();
        let request = Request::ForkSession {
            parent_record_id: parent.to_string(),
            name,
            options: self.task.clone(),
        };
        let spawn_owner = &self.spawn;
        let spawn = || spawn_owner(&child_id);
        submit::control(&self.target(&child_id, &spawn), request, |notices| {
            events(DriveEvent::Owner(SubmitEvent::Started(notices)))
        })
        .await?;
        let child = self.store.load(&child_id).await?;
        let parent_now = self.store.load(parent).await?;
        if child.acpx.extra[FORKED_FROM_KEY]["method"] == "copy" {
            events(DriveEvent::Local(LocalEvent::ForkByCopy));
        }
        Ok(Forked {
            parent: parent_now,
            child,
        })
    }
}

/// Cancels the turn running in session `id`: through its owner (here or, with a shared
/// store, on another host) when one runs, else through the run file of a one-process prompt.
pub async fn cancel(
    store: &Arc<dyn Store>,
    authority: &Path,
    id: &RecordId,
) -> Result<Cancelled, DriveError> {
    if let Some(answer) = submit::cancel_anywhere(Some(store), authority, id).await? {
        return Ok(Cancelled::Owner(answer));
    }
    let authority = authority.to_owned();
    let id = id.clone();
    let sent = tokio::task::spawn_blocking(move || runs::request_cancel(&authority, &id))
        .await
        .map_err(|e| DriveError::CancelTask(e.to_string()))??;
    Ok(Cancelled::Run(sent))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_reads_its_value_and_its_answer() {
        assert_eq!(
            Control::set("model", "gpt"),
            Control::SetModel("gpt".into())
        );
        assert_eq!(
            Control::set("fast", "true"),
            Control::SetConfigOption("fast".into(), Value::Bool(true))
        );
        assert_eq!(
            Control::set("x", "1"),
            Control::SetConfigOption("x".into(), Value::String("1".into()))
        );
        let opts = serde_json::json!([{"id": "x"}]);
        assert_eq!(
            Control::config_options(opts.clone()),
            (vec![opts[0].clone()], false)
        );
        let model = serde_json::json!({"configOptions": opts, "viaConfigOption": true});
        assert_eq!(
            Control::config_options(model),
            (vec![opts[0].clone()], true)
        );
        assert_eq!(Control::config_options(Value::Null), (vec![], false));
    }
}
