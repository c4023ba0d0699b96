//! Ctrl-C, SIGTERM and SIGHUP (a closed terminal) in a process that runs turns itself ([`crate::local`]) or follows
//! one in a queue owner: the handlers are installed before anything can be interrupted (so a
//! signal never kills the process mid-write), each signal is counted (the first cancels the
//! turn through ACP, the second stops the agent or stops waiting), and the process remembers
//! that it was interrupted so it can exit 130 afterwards ([`was_interrupted`]).

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::signal::unix::{signal, Signal, SignalKind};

/// Set once SIGINT or SIGTERM arrived: the turn was cancelled through ACP and recorded.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Whether SIGINT or SIGTERM interrupted this process (its exit status is then 130).
pub fn was_interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Resolves on the next SIGINT or SIGTERM (both cancel a turn the same way); `None` when
/// a stream of them ended. A signal that cannot be watched never arrives.
pub struct Interrupts {
    int: Option<Signal>,
    term: Option<Signal>,
    /// SIGHUP, as SIGTERM: a terminal closed under a turn cancels it and records it, rather
    /// than killing the process mid-turn (the turn was left unfinished).
    hup: Option<Signal>,
}

impl Interrupts {
    /// Installs both handlers now, so no signal kills the process from here on.
    pub fn new() -> Self {
        Interrupts {
            int: signal(SignalKind::interrupt()).ok(),
            term: signal(SignalKind::terminate()).ok(),
            hup: signal(SignalKind::hangup()).ok(),
        }
    }

    /// The next interrupt (marking the process as interrupted).
    pub async fn recv(&mut self) -> Option<()> {
        async fn one(s: &mut Option<Signal>) -> Option<()> {
            match s {
                Some(s) => s.recv().await,
                None => std::future::pending().await,
            }
        }
        let r = tokio::select! {
            r = one(&mut self.int) => r,
            r = one(&mut self.term) => r,
            r = one(&mut self.hup) => r,
        };
        if r.is_some() {
            INTERRUPTED.store(true, Ordering::SeqCst);
        }
        r
    }
}

impl Default for Interrupts {
    fn default() -> Self {
        Interrupts::new()
    }
}

/// Counts the Ctrl-Cs (and SIGTERMs) from now on, as [`crate::local`] and
/// [`crate::submit`] take them: the first one during a turn cancels it, the second
/// stops the agent (or stops waiting). The handlers are installed before this returns, so no
/// signal kills the process meanwhile. Needs a tokio runtime.
pub fn interrupt_count() -> tokio::sync::watch::Receiver<u32> {
    let (tx, rx) = tokio::sync::watch::channel(0);
    let mut signals = Interrupts::new();
    tokio::spawn(async move {
        while signals.recv().await.is_some() {
            tx.send_modify(|n| *n += 1);
            if tx.is_closed() {
                return;
            }
        }
    });
    rx
}

/// Resolves on the first Ctrl-C: what interrupts starting an agent when no turn runs yet
/// (never, if the signal cannot be watched).
pub async fn ctrl_c() {
    if tokio::signal::ctrl_c().await.is_err() {
        std::future::pending::<()>().await;
    }
}
