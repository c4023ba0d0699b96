//! Owner leases shared by every host of the database (`owner_leases`, docs/format.md § Owner
//! lease), by the server's clock.
//!
//! A holder keeps, besides the row, a connection of its own holding a session-level
//! advisory lock on the lease's key for as long as it holds the lease. The server releases
//! it when that connection ends, so a holder that dies (its process killed, its connection
//! cut) frees its lease at once: a lease whose lock nobody holds has lapsed, whatever its
//! heartbeat says. A holder whose host vanished leaves a connection the server keeps open
//! until TCP gives up on it; its heartbeat lapses after the TTL, and the next acquirer ends
//! that connection (`pg_terminate_backend`) together with the one holding the session's
//! writer lock, then takes the lease over.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use acpx_model::{
    LeaseActivity, LeaseGrant, LeaseHolder, OwnerLease, RecordId, SessionLeases, StoreError,
    StoreResult, Timestamp,
};
use async_trait::async_trait;
use tokio_postgres::{Client, Row};

use crate::connection::{backend_error, dedicated};
use crate::lock::{lock_halves, lock_key};
use crate::rows::fnv1a;
use crate::{Inner, PostgresStore};

/// How long an acquirer waits for the connections of a lapsed holder to end.
const TAKEOVER_WAIT: Duration = Duration::from_secs(3);

/// The leases this store (and its clones) hold: each with the connection holding its lock.
#[derive(Default)]
pub(crate) struct HeldLeases(Mutex<HashMap<RecordId, (u64, Client)>>);

impl std::fmt::Debug for HeldLeases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeldLeases").finish_non_exhaustive()
    }
}

impl HeldLeases {
    fn map(&self) -> MutexGuard<'_, HashMap<RecordId, (u64, Client)>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The advisory lock key of a session's lease (distinct from its writer lock's).
fn lease_key(schema: &str, id: &RecordId) -> i64 {
    fnv1a(&[b"acpx-lease", schema.as_bytes(), id.as_str().as_bytes()])
}

/// The columns every lease query returns, `$2`/`$3` being the halves of the lease key.
const LEASE_COLUMNS: &str = "generation, held, holder, ttl_ms, \
    (extract(epoch FROM acquired_at) * 1000)::bigint, \
    (extract(epoch FROM heartbeat_at) * 1000)::bigint, activity, queue_depth, \
    heartbeat_at + ttl_ms * interval '1 millisecond' <= now(), \
    EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND classid = $2 \
            AND objid = $3 AND objsubid = 1 AND granted)";

/// A row of `owner_leases` read with [`LEASE_COLUMNS`].
struct LeaseRow {
    held: bool,
    lease: OwnerLease,
}

impl Inner {
    fn lease_halves(&self, id: &RecordId) -> (u32, u32) {
        lock_halves(lease_key(&self.schema, id))
    }

    fn lease_row(&self, id: &RecordId, row: &Row) -> StoreResult<LeaseRow> {
        let location = || self.row_location(id.as_str());
        let json = |i: usize, what: &str| -> StoreResult<String> {
            row.try_get::<_, String>(i)
                .map_err(|e| StoreError::corrupt(location(), None, format!("{what}: {e}")))
        };
        let holder: LeaseHolder = serde_json::from_str(&json(2, "holder")?)
            .map_err(|e| StoreError::corrupt(location(), None, format!("holder: {e}")))?;
        let activity: LeaseActivity = serde_json::from_str(&json(6, "activity")?)
            .map_err(|e| StoreError::corrupt(location(), None, format!("activity: {e}")))?;
        let ms =
            |i: usize| Timestamp::from_millis(row.get::<_, i64>(i)).unwrap_or_else(Timestamp::now);
        let ttl_ms = u64::try_from(row.get::<_, i64>(3)).unwrap_or(0);
        let heartbeat_at = ms(5);
        let lapsed: bool = row.get(8);
        let locked: bool = row.get(9);
        Ok(LeaseRow {
            held: row.get(1),
            lease: OwnerLease {
                record_id: id.clone(),
                holder,
                generation: u64::try_from(row.get::<_, i64>(0)).unwrap_or(0),
                ttl_ms,
                acquired_at: ms(4),
                heartbeat_at,
                expires_at: Timestamp::from_millis(
                    heartbeat_at
                        .millis()
                        .saturating_add(i64::try_from(ttl_ms).unwrap_or(i64::MAX)),
                )
                .unwrap_or(heartbeat_at),
                activity,
                queue_depth: u32::try_from(row.get::<_, i32>(7)).unwrap_or(0),
                // A lease whose lock no connection holds has no live holder.
                lapsed: lapsed || !locked,
            },
        })
    }

    async fn read_lease_row(&self, id: &RecordId) -> StoreResult<Option<LeaseRow>> {
        let (classid, objid) = self.lease_halves(id);
        let conn = self.conn().await?;
        let row = conn
            .query_opt(
                &format!("SELECT {LEASE_COLUMNS} FROM owner_leases WHERE acpx_record_id = $1"),
                &[&id.as_str(), &classid, &objid],
            )
            .await
            .map_err(self.pg("read the owner lease"))?;
        row.map(|r| self.lease_row(id, &r)).transpose()
    }

    /// Ends the connections that hold the lease lock or the writer lock of `id` (a holder
    /// whose heartbeat lapsed: its host is gone or frozen).
    async fn end_lapsed_holder(&self, id: &RecordId) -> StoreResult<()> {
        let (lc, lo) = self.lease_halves(id);
        let (wc, wo) = lock_halves(lock_key(&self.schema, id));
        let conn = self.conn().await?;
        let ended = conn
            .query(
                "SELECT pid, pg_terminate_backend(pid) FROM pg_locks \
                 WHERE locktype = 'advisory' AND objsubid = 1 AND granted \
                 AND ((classid = $1 AND objid = $2) OR (classid = $3 AND objid = $4)) \
                 AND pid <> pg_backend_pid()",
                &[&lc, &lo, &wc, &wo],
            )
            .await
            .map_err(self.pg("end the connections of a lapsed lease"))?;
        for row in ended {
            let pid: i32 = row.get(0);
            let done: bool = row.get(1);
            tracing::warn!(pid, done, session = %id, "ended the connection of a lapsed owner lease");
        }
        Ok(())
    }

    async fn fenced_error(&self, id: &RecordId, generation: u64) -> StoreError {
        let current = match self.read_lease_row(id).await {
            Ok(Some(r)) if r.held => Some(r.lease.generation),
            _ => None,
        };
        StoreError::Fenced {
            id: id.clone(),
            generation,
            current,
        }
    }

    /// The error of an append refused by the fence.
    pub(crate) async fn fenced(&self, id: &RecordId, generation: u64) -> StoreError {
        self.fenced_error(id, generation).await
    }

    /// Every held lease's row.
    pub(crate) async fn held_lease_rows(&self) -> StoreResult<Vec<OwnerLease>> {
        let conn = self.conn().await?;
        let ids = conn
            .query(
                "SELECT acpx_record_id FROM owner_leases WHERE held ORDER BY acpx_record_id",
                &[],
            )
            .await
            .map_err(self.pg("list the owner leases"))?;
        drop(conn);
        let mut leases = Vec::new();
        for row in ids {
            let text: String = row.get(0);
            let Ok(id) = RecordId::parse(&text) else {
                continue;
            };
            if let Some(r) = self.read_lease_row(&id).await? {
                if r.held {
                    leases.push(r.lease);
                }
            }
        }
        Ok(leases)
    }

    /// Takes the lease lock of `id` on a new connection of its own: the connection when
    /// taken, `None` when another connection holds it.
    async fn lock_lease(&self, id: &RecordId) -> StoreResult<Option<Client>> {
        let client = dedicated(&self.config, &self.location, None).await?;
        let got: bool = client
            .query_one(
                "SELECT pg_try_advisory_lock($1)",
                &[&lease_key(&self.schema, id)],
            )
            .await
            .map_err(self.pg("take the owner lease lock"))?
            .get(0);
        Ok(got.then_some(client))
    }
}

#[async_trait]
impl SessionLeases for PostgresStore {
    async fn acquire_lease(
        &self,
        id: &RecordId,
        holder: &LeaseHolder,
        ttl: Duration,
    ) -> StoreResult<LeaseGrant> {
        let inner = &self.inner;
        let mut client = inner.lock_lease(id).await?;
        if client.is_none() {
            // A connection holds the lock: a live holder, unless its heartbeat lapsed.
            match inner.read_lease_row(id).await? {
                Some(r) if r.held && !r.lease.lapsed => return Ok(LeaseGrant::Held(r.lease)),
                Some(r) if !r.held => {}
                _ => inner.end_lapsed_holder(id).await?,
            }
            let started = Instant::now();
            while client.is_none() && started.elapsed() < TAKEOVER_WAIT {
                tokio::time::sleep(Duration::from_millis(50)).await;
                client = inner.lock_lease(id).await?;
            }
        }
        let Some(client) = client else {
            return match inner.read_lease_row(id).await? {
                Some(r) if r.held => Ok(LeaseGrant::Held(r.lease)),
                _ => Err(backend_error(
                    &inner.location,
                    "acquire the owner lease",
                    format!("the lease lock of session {id} stays held by a connection that holds no lease"),
                )),
            };
        };
        // We hold the lock: any earlier holder is gone; the row is ours to take over.
        let holder_json = serde_json::to_string(holder)
            .map_err(|e| StoreError::InvalidArgument(format!("lease holder: {e}")))?;
        let idle = serde_json::to_string(&LeaseActivity::Idle)
            .map_err(|e| StoreError::InvalidArgument(format!("lease activity: {e}")))?;
        let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
        let (classid, objid) = inner.lease_halves(id);
        let conn = inner.conn().await?;
        let row = conn
            .query_one(
                &format!(
                    "INSERT INTO owner_leases AS o (acpx_record_id, generation, held, holder, \
                     ttl_ms, acquired_at, heartbeat_at, activity, queue_depth) \
                     VALUES ($1, 1, true, $4, $5, now(), now(), $6, 0) \
                     ON CONFLICT (acpx_record_id) DO UPDATE SET \
                     generation = o.generation + 1, held = true, holder = $4, ttl_ms = $5, \
                     acquired_at = now(), heartbeat_at = now(), activity = $6, queue_depth = 0 \
                     RETURNING {LEASE_COLUMNS}"
                ),
                &[&id.as_str(), &classid, &objid, &holder_json, &ttl_ms, &idle],
            )
            .await
            .map_err(inner.pg("acquire the owner lease"))?;
        let lease = inner.lease_row(id, &row)?.lease;
        inner
            .leases
            .map()
            .insert(id.clone(), (lease.generation, client));
        Ok(LeaseGrant::Granted(lease))
    }

    async fn renew_lease(
        &self,
        id: &RecordId,
        generation: u64,
        activity: &LeaseActivity,
        queue_depth: u32,
    ) -> StoreResult<OwnerLease> {
        let inner = &self.inner;
        // A lock connection that ended (a network cut, a server restart) is taken again,
        // unless someone else took the lock meanwhile: then the lease is theirs.
        let lost = match inner.leases.map().get(id) {
            Some((g, c)) if *g == generation => c.is_closed(),
            _ => true,
        };
        if lost {
            match inner.lock_lease(id).await? {
                Some(c) => {
                    inner.leases.map().insert(id.clone(), (generation, c));
                }
                None => return Err(inner.fenced_error(id, generation).await),
            }
        }
        let activity_json = serde_json::to_string(activity)
            .map_err(|e| StoreError::InvalidArgument(format!("lease activity: {e}")))?;
        let (classid, objid) = inner.lease_halves(id);
        let g = i64::try_from(generation).unwrap_or(i64::MAX);
        let depth = i32::try_from(queue_depth).unwrap_or(i32::MAX);
        let conn = inner.conn().await?;
        let row = conn
            .query_opt(
                &format!(
                    "UPDATE owner_leases SET heartbeat_at = now(), activity = $5, \
                     queue_depth = $6 WHERE acpx_record_id = $1 AND held AND generation = $4 \
                     RETURNING {LEASE_COLUMNS}"
                ),
                &[&id.as_str(), &classid, &objid, &g, &activity_json, &depth],
            )
            .await
            .map_err(inner.pg("renew the owner lease"))?;
        match row {
            Some(r) => Ok(inner.lease_row(id, &r)?.lease),
            None => {
                inner.leases.map().remove(id);
                Err(inner.fenced_error(id, generation).await)
            }
        }
    }

    async fn release_lease(&self, id: &RecordId, generation: u64) -> StoreResult<bool> {
        let inner = &self.inner;
        let g = i64::try_from(generation).unwrap_or(i64::MAX);
        let conn = inner.conn().await?;
        let n = conn
            .execute(
                "UPDATE owner_leases SET held = false \
                 WHERE acpx_record_id = $1 AND held AND generation = $2",
                &[&id.as_str(), &g],
            )
            .await
            .map_err(inner.pg("release the owner lease"))?;
        // Dropping the connection releases the lock.
        let mut held = inner.leases.map();
        if held.get(id).is_some_and(|(hg, _)| *hg == generation) {
            held.remove(id);
        }
        Ok(n == 1)
    }

    async fn read_lease(&self, id: &RecordId) -> StoreResult<Option<OwnerLease>> {
        Ok(self
            .inner
            .read_lease_row(id)
            .await?
            .filter(|r| r.held)
            .map(|r| r.lease))
    }
}
