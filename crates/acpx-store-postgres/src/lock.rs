//! Per-session writer locks that work across hosts: a session-level `pg_advisory_lock` held
//! by a connection of its own for as long as the [`acpx_model::SessionLock`] lives.
//!
//! The server releases an advisory lock when the connection holding it ends, so a writer
//! that dies (its process, its host, or its network) never leaves a session locked. Locks
//! taken through [`acpx_model::Store::lock`] are also recorded in the store's [`HeldLocks`]
//! (shared by its clones): a mutation made through that store while the lock is held goes
//! ahead without locking again (the holder is the caller, see the `Store` trait), while any
//! other mutation takes the same key with `pg_advisory_xact_lock` for its transaction.
//!
//! An append checks, in its own transaction, that the lock's connection still holds the lock
//! (`pg_locks`): a writer whose lock connection was ended (an administrator's
//! `pg_terminate_backend`, a server restart) gets a clear error instead of writing beside
//! the writer that may have taken the lock since.

use std::time::{Duration, Instant};

use acpx_model::{LockGuard, RecordId, StoreError, StoreResult};
use tokio_postgres::Client;

use crate::connection::{dedicated, is_lock_timeout, locked, pg_error};
use crate::rows::fnv1a;
use crate::Inner;

/// The advisory lock key of a session: FNV-1a of the schema and the record id, so that the
/// stores of one database in different schemas never share keys.
pub(crate) fn lock_key(schema: &str, id: &RecordId) -> i64 {
    fnv1a(&[b"acpx-session", schema.as_bytes(), id.as_str().as_bytes()])
}

/// The `pg_locks` identity of a held bigint advisory lock: `classid` is the key's high half,
/// `objid` its low half, `objsubid` 1.
pub(crate) fn lock_halves(key: i64) -> (u32, u32) {
    let k = key as u64;
    ((k >> 32) as u32, k as u32)
}

/// What the store knows of a lock it holds: the server process (`pg_backend_pid`) of the
/// connection holding it, and its key.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HeldLock {
    pub pid: i32,
    pub key: i64,
}

/// Locks held through `Store::lock` by one store and its clones, by session, and the issuer
/// token their [`acpx_model::SessionLock`]s carry.
pub(crate) type HeldLocks = acpx_store_sql::HeldLocks<RecordId, HeldLock>;

/// The guard behind a [`acpx_model::SessionLock`] of this backend: the connection holding
/// the advisory lock. Dropping it closes the connection, which releases the lock.
pub(crate) struct PostgresLockGuard {
    id: RecordId,
    client: Option<Client>,
    held: HeldLocks,
}

impl std::fmt::Debug for PostgresLockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresLockGuard")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl LockGuard for PostgresLockGuard {}

impl Drop for PostgresLockGuard {
    fn drop(&mut self) {
        // Unregister first: a mutation that starts now must take the lock itself, and it
        // gets it once the server has seen this connection close (just below).
        self.held.remove(&self.id);
        drop(self.client.take());
    }
}

impl Inner {
    /// Takes the writer lock of `id` on a new connection, waiting up to `timeout`.
    pub(crate) async fn acquire(
        &self,
        id: &RecordId,
        timeout: Duration,
    ) -> StoreResult<PostgresLockGuard> {
        let started = Instant::now();
        let client = dedicated(&self.config, &self.location, None).await?;
        let key = lock_key(&self.schema, id);
        let ctx = "take the session's writer lock";
        // lock_timeout 0 means "wait forever" to PostgreSQL: give it at least 1 ms.
        let millis = timeout.as_millis().clamp(1, i32::MAX as u128);
        client
            .batch_execute(&format!("SET lock_timeout = {millis}"))
            .await
            .map_err(|e| pg_error(&self.location, ctx, e))?;
        let row = match client
            .query_one("SELECT pg_advisory_lock($1), pg_backend_pid()", &[&key])
            .await
        {
            Ok(row) => row,
            Err(e) if is_lock_timeout(&e) => return Err(locked(id, started.elapsed())),
            Err(e) => return Err(pg_error(&self.location, ctx, e)),
        };
        let pid: i32 = row.get(1);
        self.held.insert(id.clone(), HeldLock { pid, key });
        Ok(PostgresLockGuard {
            id: id.clone(),
            client: Some(client),
            held: self.held.clone(),
        })
    }

    /// The error of an append whose writer lock is no longer held by its connection.
    pub(crate) fn lock_lost(&self, id: &RecordId) -> StoreError {
        StoreError::Backend {
            backend: crate::BACKEND,
            message: format!(
                "{}: the writer lock of session {id} was lost (its database connection \
                 ended); nothing was written; take the lock again",
                self.location
            ),
        }
    }
}

/// Takes the writer lock of `key` for the current transaction, waiting up to `timeout`
/// (`SET LOCAL lock_timeout`), for a mutation by a caller that does not hold it.
pub(crate) async fn lock_for_transaction(
    tx: &deadpool_postgres::Transaction<'_>,
    id: &RecordId,
    key: i64,
    timeout: Duration,
    location: &str,
) -> StoreResult<()> {
    let started = Instant::now();
    let millis = timeout.as_millis().clamp(1, i32::MAX as u128);
    tx.batch_execute(&format!("SET LOCAL lock_timeout = {millis}"))
        .await
        .map_err(|e| pg_error(location, "set the lock timeout", e))?;
    match tx
        .execute("SELECT pg_advisory_xact_lock($1)", &[&key])
        .await
    {
        Ok(_) => {}
        Err(e) if is_lock_timeout(&e) => return Err(locked(id, started.elapsed())),
        Err(e) => return Err(pg_error(location, "take the session's writer lock", e)),
    }
    // Row locks taken later in the transaction wait as long as the statement needs.
    tx.batch_execute("SET LOCAL lock_timeout = 0")
        .await
        .map_err(|e| pg_error(location, "reset the lock timeout", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_differ_by_schema_and_split_into_pg_locks_halves() {
        let id = RecordId::parse("s1").unwrap();
        assert_ne!(lock_key("a", &id), lock_key("b", &id));
        assert_eq!(lock_key("a", &id), lock_key("a", &id));
        let (hi, lo) = lock_halves(-2);
        assert_eq!((hi, lo), (0xffff_ffff, 0xffff_fffe));
    }
}
