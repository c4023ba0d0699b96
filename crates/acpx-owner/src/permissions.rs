//! Permission questions of an owner's turn, asked at the terminal of the client that
//! submitted it (`docs/format.md`, § Queue owner, "Permission questions").
//!
//! The owner cannot ask anyone itself: it has no terminal. A client whose user can answer
//! (its task's `options.interactive`) keeps its connection open for writing; the owner's
//! [`ForwardingPrompter`] sends it `permission_request {id, question}` and waits for its
//! `permission_answer {id, approved}` line. When the client goes away, every open question
//! and every later one of the turn is refused, as the non-interactive rule `deny` would.
//!
//! Elicitations travel the same way to a client that takes them (its task's
//! `options.elicitations`): `elicitation_request {id, request}`, answered by
//! `elicitation_answer {id, answer}`; an `elicitation_ended {id}` line tells the client to stop
//! asking one the runtime no longer waits for. With the client gone, nobody is asked and the
//! runtime's non-interactive rule answers (decline, or cancel under `fail`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::unix::OwnedReadHalf;
use tokio::sync::oneshot;

use acpx_runtime::elicitation_question::{ElicitationQuestion, ElicitationReply};
use acpx_runtime::{PermissionAnswer, PermissionPrompter, PermissionQuestion};

use super::mutex::locked;
use super::outgoing::ReplyTx;
use super::protocol::{line, ClientLine, Response, WireQuestion};

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<PermissionAnswer>>>>;
/// Open elicitations: the client's answer is the ACP response, or `None` (it could not ask).
type PendingElicitations = Arc<Mutex<HashMap<u64, oneshot::Sender<Option<Value>>>>>;

/// The owner's prompter for one interactive client's turn.
pub(super) struct ForwardingPrompter {
    reply: ReplyTx,
    pending: Pending,
    elicitations: Option<PendingElicitations>,
    gone: Arc<AtomicBool>,
    next_id: AtomicU64,
}

impl ForwardingPrompter {
    /// A prompter sending its questions on `reply` (elicitations too when the client takes
    /// them), and the task that reads the client's answers from `reader` (it ends when the
    /// client closes its side).
    pub(super) fn new(
        reply: ReplyTx,
        reader: BufReader<OwnedReadHalf>,
        elicitations: bool,
    ) -> (Arc<ForwardingPrompter>, tokio::task::JoinHandle<()>) {
        let prompter = Arc::new(ForwardingPrompter {
            reply,
            pending: Arc::new(Mutex::new(HashMap::new())),
            elicitations: elicitations.then(Default::default),
            gone: Arc::new(AtomicBool::new(false)),
            next_id: AtomicU64::new(1),
        });
        let reading = tokio::spawn(read_answers(
            reader,
            RefuseOnEnd {
                pending: prompter.pending.clone(),
                elicitations: prompter.elicitations.clone(),
                gone: prompter.gone.clone(),
            },
        ));
        (prompter, reading)
    }
}

impl ForwardingPrompter {
    /// Set once the client has closed its side of the connection.
    pub(super) fn client_gone(&self) -> Arc<AtomicBool> {
        self.gone.clone()
    }
}

/// Refuses what the client was asked (the senders drop) and what comes, when the reading
/// ends: the client closed its side, or its connection ended the task (a stalled client cut).
struct RefuseOnEnd {
    pending: Pending,
    elicitations: Option<PendingElicitations>,
    gone: Arc<AtomicBool>,
}

impl Drop for RefuseOnEnd {
    fn drop(&mut self) {
        self.gone.store(true, Ordering::SeqCst);
        locked(&self.pending).clear();
        if let Some(e) = &self.elicitations {
            locked(e).clear();
        }
    }
}

async fn read_answers(mut reader: BufReader<OwnedReadHalf>, open: RefuseOnEnd) {
    // `open` refuses what is open when this task ends, also when it is aborted.
    let pending = open.pending.clone();
    let elicitations = open.elicitations.clone();
    let mut buf = String::new();
    loop {
        buf.clear();
        match reader.read_line(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(_) => match serde_json::from_str::<ClientLine>(buf.trim_end()) {
                Ok(ClientLine::PermissionAnswer {
                    id,
                    approved,
                    always,
                }) => {
                    if let Some(tx) = locked(&pending).remove(&id) {
                        let _ = tx.send(PermissionAnswer { approved, always });
                    }
                }
                Ok(ClientLine::ElicitationAnswer { id, answer }) => {
                    if let Some(tx) = elicitations.as_ref().and_then(|e| locked(e).remove(&id)) {
                        let _ = tx.send(answer);
                    }
                }
                Err(e) => tracing::warn!("ignoring an unreadable client line: {e}"),
            },
        }
    }
}

#[async_trait]
impl PermissionPrompter for ForwardingPrompter {
    async fn ask(&self, question: &PermissionQuestion) -> bool {
        self.answer(question).await.approved
    }

    async fn answer(&self, question: &PermissionQuestion) -> PermissionAnswer {
        let refused = PermissionAnswer::once(false);
        if self.gone.load(Ordering::SeqCst) {
            return refused;
        }
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = oneshot::channel();
        locked(&self.pending).insert(id, tx);
        // Checked again under the map: the reader may have cleared it just before.
        if self.gone.load(Ordering::SeqCst) {
            locked(&self.pending).remove(&id);
            return refused;
        }
        let sent = self.reply.send(
            line(&Response::PermissionRequest {
                id,
                question: WireQuestion::from(question),
            })
            .into(),
        );
        if sent.is_err() {
            locked(&self.pending).remove(&id);
            return refused;
        }
        // A connection that ended without the client closing its side (a stalled client cut
        // by the owner) drops its receiver of lines: the question is refused then too.
        tokio::select! {
            answer = rx => answer.unwrap_or(refused),
            () = self.reply.closed() => {
                locked(&self.pending).remove(&id);
                refused
            }
        }
    }

    async fn elicit(&self, question: &ElicitationQuestion) -> Option<ElicitationReply> {
        let open = self.elicitations.as_ref()?;
        if self.gone.load(Ordering::SeqCst) {
            return None;
        }
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = oneshot::channel();
        locked(open).insert(id, tx);
        // Checked again under the map: the reader may have cleared it just before.
        let request = Response::ElicitationRequest {
            id,
            request: question.params.clone(),
        };
        if self.gone.load(Ordering::SeqCst) || self.reply.send(line(&request).into()).is_err() {
            locked(open).remove(&id);
            return None;
        }
        let mut asked = Asked {
            reply: &self.reply,
            open,
            id,
            answered: false,
        };
        let answer = tokio::select! {
            answer = rx => answer.ok().flatten(),
            () = self.reply.closed() => None,
        };
        asked.answered = true;
        answer.as_ref().and_then(ElicitationReply::from_response)
    }

    fn answerer(&self) -> &'static str {
        "owner-forwarded"
    }
}

/// An elicitation forwarded to the client: dropped unanswered (the runtime no longer waits),
/// it tells the client to stop asking.
struct Asked<'a> {
    reply: &'a ReplyTx,
    open: &'a PendingElicitations,
    id: u64,
    answered: bool,
}

impl Drop for Asked<'_> {
    fn drop(&mut self) {
        if !self.answered {
            locked(self.open).remove(&self.id);
            let ended = Response::ElicitationEnded { id: self.id };
            let _ = self.reply.send(line(&ended).into());
        }
    }
}
