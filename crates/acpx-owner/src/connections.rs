//! The bound on an owner's connections (issue 45, item 5): its socket is open to every
//! process of its user, and each connection costs a task and a file descriptor, so it serves
//! at most a limit of them, plus a small reserve for the requests that see or stop it
//! (`docs/format.md` § Connections to an owner). The accept loop (`server`) asks
//! [`Shared::band_for_new`] where a new connection goes, and [`refuse`]s one past both.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

use super::mutex::locked;
use super::protocol::{line, Request, Response, WireError};
use super::shared::Shared;

/// The most connections an owner serves at once when `ACPX_OWNER_MAX_CONNECTIONS` does not
/// say: far more than its clients ever hold (the running task's, the queued ones', a few
/// `status` and `cancel`), far fewer than the usual 1024 file descriptors.
pub(super) const DEFAULT_MAX_CONNECTIONS: usize = 256;
/// The environment variable that sets another limit (1 to 65536).
const MAX_CONNECTIONS_VAR: &str = "ACPX_OWNER_MAX_CONNECTIONS";
/// Connections served beyond the limit for requests answered at once or ending the owner
/// (`status`, `cancel`, `withdraw`, `close`, `release`): a user can still see and stop an
/// owner whose connections are all taken. A request that queues work is refused there.
const CONTROL_RESERVE: usize = 16;
/// Refused connections (past the limit and the reserve) kept open for at most
/// [`REFUSAL_LINGER`] while their request is read and dropped, so the client reads the
/// refusal rather than a reset or a broken pipe; more at once are closed right after it.
const REFUSING_MAX: usize = 64;
const REFUSAL_LINGER: Duration = Duration::from_secs(1);
/// The owner's log says at most this often that it refuses connections.
const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(10);

/// The connection limit: `ACPX_OWNER_MAX_CONNECTIONS` when set, else
/// [`DEFAULT_MAX_CONNECTIONS`], raised for a queue deeper than that (`queue_max_depth` waiting
/// clients, the running one's and 63 more), so a full queue's clients always fit. A value
/// that is not a number from 1 to 65536 is said in the owner's log and ignored.
pub(super) fn max_connections(queue_max_depth: usize) -> usize {
    connection_limit(
        std::env::var(MAX_CONNECTIONS_VAR).ok().as_deref(),
        queue_max_depth,
    )
}

/// [`max_connections`] with the variable's value `var`.
fn connection_limit(var: Option<&str>, queue_max_depth: usize) -> usize {
    let default = DEFAULT_MAX_CONNECTIONS.max(queue_max_depth.saturating_add(64).min(65536));
    let Some(v) = var else {
        return default;
    };
    match v.trim().parse::<usize>() {
        Ok(n) if (1..=65536).contains(&n) => n,
        _ => {
            tracing::warn!(
                "{MAX_CONNECTIONS_VAR}={v:?} is not a number from 1 to 65536; \
                 serving at most {default} connections"
            );
            default
        }
    }
}

/// Where a connection is served: within the limit (any request), or in the reserve beyond
/// it (requests answered at once or ending the owner only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Band {
    Limit,
    Reserve,
}

/// Counts a connection as served, in its band, until dropped.
pub(super) struct Serving(Arc<Shared>, Band);

impl Serving {
    pub(super) fn new(shared: &Arc<Shared>, band: Band) -> Serving {
        shared.connections.fetch_add(1, Ordering::SeqCst);
        shared.band_count(band).fetch_add(1, Ordering::SeqCst);
        Serving(shared.clone(), band)
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        self.0.band_count(self.1).fetch_sub(1, Ordering::SeqCst);
        self.0.connections.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Counts a refused connection kept open while its request is drained.
pub(super) struct Refusing(Arc<Shared>);

impl Drop for Refusing {
    fn drop(&mut self) {
        self.0.refusing.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Whether `request` may be served in the [`CONTROL_RESERVE`]: answered at once, or ending
/// the owner; not one that queues work behind the running task.
pub(super) fn answered_in_reserve(request: &Request) -> bool {
    match request {
        Request::Status
        | Request::Cancel
        | Request::Withdraw { .. }
        | Request::Close
        | Request::Release
        | Request::ReleaseIdle => true,
        Request::SubmitPrompt { .. }
        | Request::SetMode { .. }
        | Request::SetConfigOption { .. }
        | Request::SetModel { .. }
        | Request::CreateSession { .. }
        | Request::ForkSession { .. } => false,
    }
}

impl Shared {
    /// The count of connections served in `band`.
    pub(super) fn band_count(&self, band: Band) -> &AtomicUsize {
        match band {
            Band::Limit => &self.in_limit,
            Band::Reserve => &self.in_reserve,
        }
    }

    /// The band a new connection is served in, `None` when both are full.
    pub(super) fn band_for_new(&self) -> Option<Band> {
        if self.in_limit.load(Ordering::SeqCst) < self.max_connections {
            Some(Band::Limit)
        } else if self.in_reserve.load(Ordering::SeqCst) < CONTROL_RESERVE {
            Some(Band::Reserve)
        } else {
            None
        }
    }

    /// The answer to a connection refused for the limit (`reserve_full`: a connection past
    /// the reserve too, refused before its request was read), counted, and said in the log
    /// (at most every [`REFUSAL_LOG_EVERY`]).
    pub(super) fn refusal(&self, reserve_full: bool) -> String {
        let refused = self.refused.fetch_add(1, Ordering::SeqCst) + 1;
        let max = self.max_connections;
        let mut message = format!(
            "the queue owner of session {} (pid {}) is serving its limit of {max} connections \
             ({MAX_CONNECTIONS_VAR})",
            self.config.record_id,
            std::process::id(),
        );
        if reserve_full {
            message.push_str(&format!(
                " and the {CONTROL_RESERVE} more kept for status, cancel and close"
            ));
        }
        message.push_str("; nothing was queued: try again when some have ended");
        {
            let mut logged = locked(&self.refusal_logged);
            if logged.is_none_or(|t| t.elapsed() >= REFUSAL_LOG_EVERY) {
                *logged = Some(Instant::now());
                tracing::warn!("refused a connection ({refused} so far): {message}");
            }
        }
        let error = WireError::runtime("QUEUE_OWNER_BUSY", message, true);
        line(&Response::Error { error })
    }
}

/// Answers a connection past the limit and the reserve with `QUEUE_OWNER_BUSY` and closes
/// it: after reading what it sends for up to [`REFUSAL_LINGER`] (the client reads the
/// answer, not a reset), or at once when [`REFUSING_MAX`] refusals linger already.
pub(super) fn refuse(stream: UnixStream, shared: &Arc<Shared>) {
    let answer = shared.refusal(true);
    if shared.refusing.fetch_add(1, Ordering::SeqCst) >= REFUSING_MAX {
        shared.refusing.fetch_sub(1, Ordering::SeqCst);
        // A new connection's buffer takes the line without waiting.
        if let Ok(s) = stream.into_std() {
            let _ = std::io::Write::write(&mut &s, answer.as_bytes());
        }
        return;
    }
    let refusing = Refusing(shared.clone());
    tokio::spawn(async move {
        let (mut read, mut write) = stream.into_split();
        let _ = tokio::time::timeout(REFUSAL_LINGER, async {
            write.write_all(answer.as_bytes()).await?;
            write.shutdown().await?;
            let mut sink = [0u8; 4096];
            while read.read(&mut sink).await? > 0 {}
            Ok::<_, std::io::Error>(())
        })
        .await;
        drop(refusing);
    });
}

/// Writes `line` to a client that is then let go; bounded, as the client may read nothing.
pub(super) async fn tell(write: &mut tokio::net::unix::OwnedWriteHalf, line: &str) {
    let _ = tokio::time::timeout(Duration::from_secs(1), write.write_all(line.as_bytes())).await;
}

#[cfg(test)]
mod tests {
    use super::super::protocol::TaskOptions;
    use super::*;

    #[test]
    fn the_connection_limit_is_the_variables_else_fits_the_queue() {
        assert_eq!(connection_limit(None, 16), DEFAULT_MAX_CONNECTIONS);
        assert_eq!(connection_limit(Some(" 8 "), 16), 8);
        assert_eq!(connection_limit(Some("65536"), 16), 65536);
        for bad in ["0", "65537", "-1", "many", ""] {
            assert_eq!(
                connection_limit(Some(bad), 16),
                DEFAULT_MAX_CONNECTIONS,
                "{bad}"
            );
        }
        assert_eq!(connection_limit(None, 1000), 1064);
        assert_eq!(connection_limit(None, usize::MAX), 65536);
    }

    #[test]
    fn the_reserve_serves_no_request_that_queues_work() {
        assert!(answered_in_reserve(&Request::Status));
        assert!(answered_in_reserve(&Request::Close));
        assert!(!answered_in_reserve(&Request::SetMode {
            mode_id: "m".into(),
            options: TaskOptions::default(),
        }));
    }
}
