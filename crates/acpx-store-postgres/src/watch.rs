//! Waiting for new events: `LISTEN` on a connection of the store's own, woken by the
//! `pg_notify` that every append sends at commit, from whichever host.

use std::time::Duration;

use acpx_model::{RecordId, StoreResult};
use tokio::sync::broadcast;
use tokio_postgres::{Client, Config};

use crate::connection::{dedicated, pg_error};
use crate::Inner;

/// The channel appends notify; the payload is `<schema>/<record id>`.
pub(crate) const NOTIFY_CHANNEL: &str = "acpx_events";

/// The store's listening connection, made on the first wait and made again when it was
/// closed (server restart).
pub(crate) struct Watcher {
    config: Config,
    listener: tokio::sync::Mutex<Option<Listener>>,
}

struct Listener {
    client: Client,
    notifications: broadcast::Sender<String>,
}

impl Watcher {
    pub(crate) fn new(config: Config) -> Self {
        Watcher {
            config,
            listener: tokio::sync::Mutex::new(None),
        }
    }

    /// A receiver of every notification payload, from now on.
    async fn subscribe(&self, location: &str) -> StoreResult<broadcast::Receiver<String>> {
        let mut listener = self.listener.lock().await;
        if let Some(l) = listener.as_ref() {
            if !l.client.is_closed() {
                return Ok(l.notifications.subscribe());
            }
        }
        let (tx, rx) = broadcast::channel(256);
        let client = dedicated(&self.config, location, Some(tx.clone())).await?;
        client
            .batch_execute(&format!("LISTEN {NOTIFY_CHANNEL}"))
            .await
            .map_err(|e| pg_error(location, "listen for appends", e))?;
        *listener = Some(Listener {
            client,
            notifications: tx,
        });
        Ok(rx)
    }
}

impl Inner {
    pub(crate) fn notify_payload(&self, id: &RecordId) -> String {
        format!("{}/{id}", self.schema)
    }

    /// The payload that wakes the owner of `id` for a queued task (`#` is in no record id).
    pub(crate) fn tasks_payload(&self, id: &RecordId) -> String {
        format!("{}/#tasks/{id}", self.schema)
    }

    /// The payload that wakes the submitter of task `task_id` for a new answer line.
    pub(crate) fn answer_payload(&self, task_id: i64) -> String {
        format!("{}/#answer/{task_id}", self.schema)
    }

    /// Returns once `ready` says so (checked after subscribing, so a notification sent in
    /// between is not missed) or a notification with `payload` arrives, or after `timeout`.
    pub(crate) async fn wait_for_payload<F>(
        &self,
        payload: &str,
        ready: F,
        timeout: Duration,
    ) -> StoreResult<()>
    where
        F: std::future::Future<Output = StoreResult<bool>>,
    {
        let mut rx = self.watcher.subscribe(&self.location).await?;
        if ready.await? {
            return Ok(());
        }
        let wait = async {
            loop {
                match rx.recv().await {
                    Ok(p) if p == payload => return,
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Lagged(_)) => return,
                    Err(broadcast::error::RecvError::Closed) => {
                        tokio::time::sleep(timeout).await;
                        return;
                    }
                }
            }
        };
        let _ = tokio::time::timeout(timeout, wait).await;
        Ok(())
    }

    /// Returns once the log of `id` has events after `after_seq` (an append committed from
    /// any host), or when `timeout` has passed.
    pub(crate) async fn wait_for_events(
        &self,
        id: &RecordId,
        after_seq: u64,
        timeout: Duration,
    ) -> StoreResult<()> {
        let appended = async { Ok(self.event_log_state(id).await?.last_seq > after_seq) };
        self.wait_for_payload(&self.notify_payload(id), appended, timeout)
            .await
    }
}
