//! The task queue of a session's owner across hosts (`owner_tasks`, `owner_task_answers`;
//! docs/format.md § Queue across hosts): a command on host B inserts its request and
//! notifies; the owner on host A, woken by `LISTEN`, claims the session's queued tasks
//! oldest first and runs them in its own FIFO queue, writing each answer line (accepted,
//! started, the result) as a row and notifying; B reads them, and the turn's events from the
//! session's log.

use std::time::Duration;

use acpx_model::{RecordId, RemoteTask, RemoteTasks, StoreError, StoreResult, TaskAnswers};
use async_trait::async_trait;
use serde_json::Value;

use crate::watch::NOTIFY_CHANNEL;
use crate::PostgresStore;

/// Tasks claimed this long ago are deleted with their answers by the next claim: their
/// submitter read its answer and forgot them, or went away.
const FORGET_CLAIMED_AFTER: &str = "1 day";

fn task_id_param(task_id: u64) -> i64 {
    i64::try_from(task_id).unwrap_or(i64::MAX)
}

fn parse_json(location: &str, what: &str, text: &str) -> StoreResult<Value> {
    serde_json::from_str(text)
        .map_err(|e| StoreError::corrupt(location.to_owned(), None, format!("{what}: {e}")))
}

#[async_trait]
impl RemoteTasks for PostgresStore {
    async fn submit_task(
        &self,
        id: &RecordId,
        request: &Value,
        from_host: &str,
    ) -> StoreResult<u64> {
        let inner = &self.inner;
        let conn = inner.conn().await?;
        let row = conn
            .query_one(
                "WITH t AS (INSERT INTO owner_tasks (acpx_record_id, request, from_host) \
                 VALUES ($1, $2, $3) RETURNING task_id) \
                 SELECT task_id, pg_notify($4, $5) FROM t",
                &[
                    &id.as_str(),
                    &request.to_string(),
                    &from_host,
                    &NOTIFY_CHANNEL,
                    &inner.tasks_payload(id),
                ],
            )
            .await
            .map_err(inner.pg("queue a task for the session's owner"))?;
        Ok(u64::try_from(row.get::<_, i64>(0)).unwrap_or(0))
    }

    async fn claim_tasks(&self, id: &RecordId, generation: u64) -> StoreResult<Vec<RemoteTask>> {
        let inner = &self.inner;
        let g = task_id_param(generation);
        let conn = inner.conn().await?;
        let rows = conn
            .query(
                "UPDATE owner_tasks SET claimed_generation = $2, claimed_at = now() \
                 WHERE task_id IN (SELECT task_id FROM owner_tasks \
                     WHERE acpx_record_id = $1 AND claimed_generation IS NULL \
                     ORDER BY task_id FOR UPDATE SKIP LOCKED) \
                 AND EXISTS (SELECT 1 FROM owner_leases \
                     WHERE acpx_record_id = $1 AND held AND generation = $2) \
                 RETURNING task_id, request, from_host",
                &[&id.as_str(), &g],
            )
            .await
            .map_err(inner.pg("take the session's queued tasks"))?;
        if rows.is_empty() {
            // Nothing queued, or not our lease any more: say which.
            if let Some(l) = acpx_model::SessionLeases::read_lease(self, id).await? {
                if l.generation == generation {
                    conn.execute(
                        &format!(
                            "DELETE FROM owner_tasks WHERE claimed_at < now() - interval '{FORGET_CLAIMED_AFTER}'"
                        ),
                        &[],
                    )
                    .await
                    .map_err(inner.pg("forget old tasks"))?;
                    return Ok(Vec::new());
                }
            }
            return Err(inner.fenced(id, generation).await);
        }
        let location = inner.row_location(id.as_str());
        let mut tasks = rows
            .iter()
            .map(|r| {
                Ok(RemoteTask {
                    task_id: u64::try_from(r.get::<_, i64>(0)).unwrap_or(0),
                    request: parse_json(&location, "a queued task", r.get(1))?,
                    from_host: r.get(2),
                })
            })
            .collect::<StoreResult<Vec<_>>>()?;
        tasks.sort_by_key(|t| t.task_id);
        Ok(tasks)
    }

    async fn answer_task(&self, task_id: u64, line: &Value) -> StoreResult<()> {
        let inner = &self.inner;
        let t = task_id_param(task_id);
        let conn = inner.conn().await?;
        // A task its submitter withdrew or forgot has no row: the answer goes nowhere.
        conn.execute(
            "WITH a AS (INSERT INTO owner_task_answers (task_id, n, line) \
             SELECT $1, COALESCE((SELECT max(n) FROM owner_task_answers WHERE task_id = $1), 0) + 1, $2 \
             WHERE EXISTS (SELECT 1 FROM owner_tasks WHERE task_id = $1) RETURNING task_id) \
             SELECT pg_notify($3, $4) FROM a",
            &[
                &t,
                &line.to_string(),
                &NOTIFY_CHANNEL,
                &inner.answer_payload(t),
            ],
        )
        .await
        .map_err(inner.pg("answer a queued task"))?;
        Ok(())
    }

    async fn task_answers(&self, task_id: u64, skip: usize) -> StoreResult<TaskAnswers> {
        let inner = &self.inner;
        let t = task_id_param(task_id);
        let skip = i32::try_from(skip).unwrap_or(i32::MAX);
        let conn = inner.conn().await?;
        let task = conn
            .query_opt(
                "SELECT claimed_generation IS NOT NULL FROM owner_tasks WHERE task_id = $1",
                &[&t],
            )
            .await
            .map_err(inner.pg("read a queued task"))?;
        let Some(task) = task else {
            return Ok(TaskAnswers::default());
        };
        let rows = conn
            .query(
                "SELECT line FROM owner_task_answers WHERE task_id = $1 AND n > $2 ORDER BY n",
                &[&t, &skip],
            )
            .await
            .map_err(inner.pg("read a task's answers"))?;
        let location = format!("{} task {task_id}", inner.location);
        Ok(TaskAnswers {
            lines: rows
                .iter()
                .map(|r| parse_json(&location, "an answer line", r.get(0)))
                .collect::<StoreResult<_>>()?,
            claimed: task.get(0),
            exists: true,
        })
    }

    async fn withdraw_task(&self, task_id: u64) -> StoreResult<bool> {
        let inner = &self.inner;
        let conn = inner.conn().await?;
        let n = conn
            .execute(
                "DELETE FROM owner_tasks WHERE task_id = $1 AND claimed_generation IS NULL",
                &[&task_id_param(task_id)],
            )
            .await
            .map_err(inner.pg("withdraw a queued task"))?;
        Ok(n == 1)
    }

    async fn forget_task(&self, task_id: u64) -> StoreResult<()> {
        let inner = &self.inner;
        let conn = inner.conn().await?;
        conn.execute(
            "DELETE FROM owner_tasks WHERE task_id = $1",
            &[&task_id_param(task_id)],
        )
        .await
        .map_err(inner.pg("forget a finished task"))?;
        Ok(())
    }

    async fn held_leases(&self) -> StoreResult<Vec<acpx_model::OwnerLease>> {
        self.inner.held_lease_rows().await
    }

    async fn wait_for_tasks(&self, id: &RecordId, timeout: Duration) -> StoreResult<()> {
        let inner = &self.inner;
        let payload = inner.tasks_payload(id);
        let queued = async {
            let conn = inner.conn().await?;
            let row = conn
                .query_one(
                    "SELECT EXISTS (SELECT 1 FROM owner_tasks \
                     WHERE acpx_record_id = $1 AND claimed_generation IS NULL)",
                    &[&id.as_str()],
                )
                .await
                .map_err(inner.pg("look for queued tasks"))?;
            Ok(row.get::<_, bool>(0))
        };
        inner.wait_for_payload(&payload, queued, timeout).await
    }

    async fn wait_for_answers(
        &self,
        task_id: u64,
        skip: usize,
        timeout: Duration,
    ) -> StoreResult<()> {
        let inner = &self.inner;
        let t = task_id_param(task_id);
        let payload = inner.answer_payload(t);
        let skip = i64::try_from(skip).unwrap_or(i64::MAX);
        let answered = async {
            let conn = inner.conn().await?;
            let row = conn
                .query_one(
                    "SELECT count(*) > $2 OR NOT EXISTS \
                     (SELECT 1 FROM owner_tasks WHERE task_id = $1) \
                     FROM owner_task_answers WHERE task_id = $1",
                    &[&t, &skip],
                )
                .await
                .map_err(inner.pg("look for a task's answers"))?;
            Ok(row.get::<_, bool>(0))
        };
        inner.wait_for_payload(&payload, answered, timeout).await
    }
}
