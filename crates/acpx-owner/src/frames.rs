//! The raw ACP frames of a task, for the client that asked for them
//! ([`TaskOptions::acp_frames`](super::protocol::TaskOptions::acp_frames), `--format acp`),
//! and the agent's stderr lines, for a client run with `--verbose`
//! ([`TaskOptions::verbose`](super::protocol::TaskOptions::verbose)).
//!
//! The owner's agent connection lives across tasks, so its wire observer is installed once,
//! in the options every attach is made with ([`install`]), and hands each line to whichever
//! client is registered at that moment: the task being run, from the start of the attach it
//! causes to the end of its turn ([`FrameSink::serve`]). Between tasks, and during a task
//! whose client did not ask, the lines go nowhere, so no client sees another one's turn.
//! The lines travel on the client's reply channel, in order with its other answers, and
//! count in its backlog as event lines do (a client that reads slowly holds the turn up,
//! never the owner's memory).

use std::sync::{Arc, Mutex};

use super::mutex::locked;
use super::outgoing::{Outgoing, ReplyTx};
use super::protocol::{line, Response};
use acpx_runtime::output_backlog::OutputBacklog;
use acpx_runtime::session::RuntimeOptions;
use acpx_runtime::WireDirection;

/// Where the frames go now: a client's reply channel, its backlog, and which lines it asked
/// for.
type Target = (ReplyTx, Arc<OutputBacklog>, FrameKinds);

/// The lines a task's client asked for.
#[derive(Debug, Clone, Copy)]
pub(super) struct FrameKinds {
    /// The JSON-RPC lines both ways ([`TaskOptions::acp_frames`](super::protocol::TaskOptions::acp_frames)).
    pub acp: bool,
    /// The agent's stderr lines ([`TaskOptions::verbose`](super::protocol::TaskOptions::verbose)).
    pub stderr: bool,
}

/// See the module docs.
#[derive(Clone, Default)]
pub(super) struct FrameSink(Arc<Mutex<Option<Target>>>);

/// Adds to `options` a wire observer that sends every frame to the client registered in the
/// returned sink, keeping any observer `options` had.
pub(super) fn install(options: &mut RuntimeOptions) -> FrameSink {
    let sink = FrameSink::default();
    let target = sink.0.clone();
    let inner = options.wire_observer.take();
    options.wire_observer = Some(Arc::new(move |direction, text: &str| {
        if let Some(o) = &inner {
            o(direction, text);
        }
        let Some((tx, backlog, kinds)) = locked(&target).clone() else {
            return;
        };
        let direction = match direction {
            WireDirection::ToAgent if kinds.acp => "outbound",
            WireDirection::FromAgent if kinds.acp => "inbound",
            WireDirection::Stderr if kinds.stderr => "stderr",
            _ => return,
        };
        let frame = line(&Response::Frame {
            direction: direction.to_owned(),
            line: text.to_owned(),
        });
        // Counted before it is handed over, as an event line is (`worker::run_job`).
        backlog.handed(frame.len());
        if tx.send(Outgoing::Event(frame)).is_err() {
            backlog.close();
        }
    }));
    sink
}

impl FrameSink {
    /// Sends the frames to `tx` until the returned guard is dropped; `None` (a task that did
    /// not ask) sends them nowhere meanwhile.
    pub(super) fn serve(&self, target: Option<Target>) -> Serving {
        *locked(&self.0) = target;
        Serving(self.clone())
    }
}

/// Stops sending a task's frames when dropped (whichever way the task ends).
pub(super) struct Serving(FrameSink);

impl Drop for Serving {
    fn drop(&mut self) {
        *locked(&(self.0).0) = None;
    }
}
