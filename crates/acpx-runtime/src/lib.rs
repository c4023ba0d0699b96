//! # acpx-runtime
//!
//! Drives a real ACP agent process and records everything it does through an
//! [`acpx_model::Store`]: every `session/update` becomes an event in the append-only log and
//! is folded into the session's Zed-shaped thread by one pure reducer ([`mapping`]).
pub mod agent;
pub mod client_ops;
mod core;
pub mod error;
pub mod mapping;
pub mod recorder;
pub mod session;
mod turn;

pub use agent::{AgentExit, WireDirection, WireObserver};
pub use client_ops::{PermissionMode, PermissionPrompter, PermissionQuestion};
pub use error::{AcpError, RuntimeError, RuntimeResult};
pub use recorder::{EventDraft, Observer, Recorder};
pub use session::{
    agent_text_after, load_rolled_forward, text_prompt, Attachment, CancelHandle, NewSessionSpec,
    Recovery, Runtime, RuntimeOptions, Session, TurnOutcome,
};
