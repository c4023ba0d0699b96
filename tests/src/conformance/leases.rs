//! The owner lease (`Store::leases`, docs/format.md § Owner lease) and, for a store several
//! hosts share, the task queue of an owner (`Store::remote_tasks`).

use acpx_model::{
    LeaseActivity, LeaseGrant, LeaseHolder, OwnerLease, RemoteTasks, SessionLeases, Timestamp,
};

use super::*;

fn holder(host: &str, pid: u32) -> LeaseHolder {
    LeaseHolder {
        host: host.into(),
        pid,
        started_at: Timestamp::now(),
        authority: None,
    }
}

async fn granted(
    leases: &dyn SessionLeases,
    id: &RecordId,
    h: &LeaseHolder,
    ttl: Duration,
) -> OwnerLease {
    match leases.acquire_lease(id, h, ttl).await.expect("acquire") {
        LeaseGrant::Granted(l) => l,
        LeaseGrant::Held(l) => panic!("expected the lease, it is held: {l:?}"),
    }
}

/// A lease is granted once; another acquirer sees it held with its holder; a heartbeat
/// records what the holder does; a release frees it and the next acquisition has the next
/// generation. The session need not exist.
pub async fn lease_is_held_renewed_released_with_growing_generations(b: &dyn Backend) {
    let store = b.open().await;
    let other = b.open().await;
    let id = rid("lease-basic");
    assert_eq!(store.leases().read_lease(&id).await.unwrap(), None);
    let ttl = Duration::from_secs(30);
    let a = granted(store.leases(), &id, &holder("host-a", 11), ttl).await;
    assert_eq!(a.holder.host, "host-a");
    assert_eq!(a.activity, LeaseActivity::Idle);
    assert!(!a.lapsed);
    match other
        .leases()
        .acquire_lease(&id, &holder("host-b", 22), ttl)
        .await
        .unwrap()
    {
        LeaseGrant::Held(l) => {
            assert_eq!(l.holder.pid, 11);
            assert_eq!(l.generation, a.generation);
        }
        LeaseGrant::Granted(l) => panic!("two holders of one lease: {l:?}"),
    }
    let running = LeaseActivity::Running {
        request_id: "req-1".into(),
        since: Timestamp::now(),
    };
    let renewed = store
        .leases()
        .renew_lease(&id, a.generation, &running, 2)
        .await
        .unwrap();
    assert_eq!(renewed.activity, running);
    let seen = other.leases().read_lease(&id).await.unwrap().expect("held");
    assert_eq!(seen.activity, running);
    assert_eq!(seen.queue_depth, 2);
    assert!(seen.expires_at.millis() > seen.heartbeat_at.millis());
    assert!(store
        .leases()
        .release_lease(&id, a.generation)
        .await
        .unwrap());
    assert!(!store
        .leases()
        .release_lease(&id, a.generation)
        .await
        .unwrap());
    assert_eq!(other.leases().read_lease(&id).await.unwrap(), None);
    let b2 = granted(other.leases(), &id, &holder("host-b", 22), ttl).await;
    assert_eq!(b2.generation, a.generation + 1);
    let err = store
        .leases()
        .renew_lease(&id, a.generation, &LeaseActivity::Idle, 0)
        .await
        .expect_err("a released lease cannot be renewed");
    assert!(matches!(err, StoreError::Fenced { .. }), "{err:?}");
    other
        .leases()
        .release_lease(&id, b2.generation)
        .await
        .unwrap();
}

/// A lease not renewed within its TTL lapses: another acquirer takes it over with the next
/// generation, and the old holder's heartbeat is refused from then on.
pub async fn lapsed_lease_is_taken_over_and_its_holder_fenced(b: &dyn Backend) {
    let store = b.open().await;
    let other = b.open().await;
    let id = rid("lease-lapse");
    let a = granted(
        store.leases(),
        &id,
        &holder("host-a", 1),
        Duration::from_millis(300),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    let seen = other.leases().read_lease(&id).await.unwrap().expect("kept");
    assert!(seen.lapsed, "the heartbeat is older than the TTL: {seen:?}");
    let b2 = granted(
        other.leases(),
        &id,
        &holder("host-b", 2),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(b2.generation, a.generation + 1);
    let err = store
        .leases()
        .renew_lease(&id, a.generation, &LeaseActivity::Idle, 0)
        .await
        .expect_err("the old holder is fenced");
    match err {
        StoreError::Fenced {
            generation,
            current,
            ..
        } => {
            assert_eq!(generation, a.generation);
            assert_eq!(current, Some(b2.generation));
        }
        other => panic!("expected Fenced, got {other:?}"),
    }
    other
        .leases()
        .release_lease(&id, b2.generation)
        .await
        .unwrap();
}

/// An append under a writer lock fenced by a lease generation goes through while that lease
/// is the session's, and is refused (nothing written) once another holder took it over; a
/// lock without a fence is not checked.
pub async fn appends_are_fenced_by_the_lease_generation(b: &dyn Backend) {
    let store = b.open().await;
    let other = b.open().await;
    let id = create(&*store, session("lease-fence", 0))
        .await
        .acpx_record_id;
    let ttl = Duration::from_secs(30);
    let a = granted(store.leases(), &id, &holder("host-a", 1), ttl).await;
    let writer = store
        .lock(&id, Duration::from_secs(5))
        .await
        .unwrap()
        .with_fence(a.generation);
    store
        .append(&writer, &events(&id, 1, 2), Durability::Flush)
        .await
        .expect("the lease holder writes");
    // Taken over (a release then another acquisition, as after a lapse).
    store
        .leases()
        .release_lease(&id, a.generation)
        .await
        .unwrap();
    let b2 = granted(other.leases(), &id, &holder("host-b", 2), ttl).await;
    let err = store
        .append(&writer, &events(&id, 3, 1), Durability::Flush)
        .await
        .expect_err("a stale holder must not write");
    assert!(
        matches!(err, StoreError::Fenced { generation, .. } if generation == a.generation),
        "{err:?}"
    );
    assert!(err.to_string().contains("taken over"), "{err}");
    assert_eq!(read_all(&*store, &id).await.last_seq, 2, "nothing written");
    drop(writer);
    let writer = other
        .lock(&id, Duration::from_secs(5))
        .await
        .unwrap()
        .with_fence(b2.generation);
    other
        .append(&writer, &events(&id, 3, 1), Durability::Flush)
        .await
        .expect("the new holder writes");
    drop(writer);
    let unfenced = store.lock(&id, Duration::from_secs(5)).await.unwrap();
    store
        .append(&unfenced, &events(&id, 4, 1), Durability::Flush)
        .await
        .expect("a writer without a fence is checked by its lock only");
    drop(unfenced);
    other
        .leases()
        .release_lease(&id, b2.generation)
        .await
        .unwrap();
}

fn tasks(store: &Arc<dyn Store>) -> &dyn RemoteTasks {
    store
        .remote_tasks()
        .expect("the backend declares a task queue across hosts")
}

/// Tasks queued for a session are taken by its lease holder only, oldest first, once; their
/// answers reach the submitter in order; an untaken task can be withdrawn, a taken one not.
pub async fn remote_tasks_are_taken_in_order_by_the_lease_holder(b: &dyn Backend) {
    let owner = b.open().await;
    let submitter = b.open().await;
    let id = rid("lease-tasks");
    let ttl = Duration::from_secs(30);
    let lease = granted(owner.leases(), &id, &holder("host-a", 1), ttl).await;
    let t1 = tasks(&submitter)
        .submit_task(&id, &json!({"type": "one"}), "host-b")
        .await
        .unwrap();
    let t2 = tasks(&submitter)
        .submit_task(&id, &json!({"type": "two"}), "host-b")
        .await
        .unwrap();
    // The wait returns at once: tasks are queued.
    let t0 = Instant::now();
    tasks(&owner)
        .wait_for_tasks(&id, Duration::from_secs(10))
        .await
        .unwrap();
    assert!(t0.elapsed() < Duration::from_secs(5));
    let err = tasks(&owner)
        .claim_tasks(&id, lease.generation + 7)
        .await
        .expect_err("only the holder takes tasks");
    assert!(matches!(err, StoreError::Fenced { .. }), "{err:?}");
    let held = tasks(&submitter).held_leases().await.unwrap();
    assert!(
        held.iter()
            .any(|l| l.record_id == id && l.generation == lease.generation),
        "{held:?}"
    );
    let claimed = tasks(&owner)
        .claim_tasks(&id, lease.generation)
        .await
        .unwrap();
    let ids: Vec<u64> = claimed.iter().map(|t| t.task_id).collect();
    assert_eq!(ids, vec![t1, t2]);
    assert_eq!(claimed[0].request, json!({"type": "one"}));
    assert_eq!(claimed[0].from_host, "host-b");
    assert!(tasks(&owner)
        .claim_tasks(&id, lease.generation)
        .await
        .unwrap()
        .is_empty());
    assert!(!tasks(&submitter).withdraw_task(t1).await.unwrap());

    // Answers, woken across handles.
    let waiter = {
        let s = submitter.clone();
        tokio::spawn(async move {
            tasks(&s)
                .wait_for_answers(t1, 0, Duration::from_secs(20))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    tasks(&owner)
        .answer_task(t1, &json!({"type": "accepted"}))
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("woken by the answer")
        .unwrap()
        .unwrap();
    tasks(&owner)
        .answer_task(t1, &json!({"type": "result"}))
        .await
        .unwrap();
    let answers = tasks(&submitter).task_answers(t1, 0).await.unwrap();
    assert!(answers.exists && answers.claimed);
    assert_eq!(
        answers.lines,
        vec![json!({"type": "accepted"}), json!({"type": "result"})]
    );
    let rest = tasks(&submitter).task_answers(t1, 1).await.unwrap();
    assert_eq!(rest.lines, vec![json!({"type": "result"})]);
    tasks(&submitter).forget_task(t1).await.unwrap();
    assert!(!tasks(&submitter).task_answers(t1, 0).await.unwrap().exists);

    let t3 = tasks(&submitter)
        .submit_task(&id, &json!({"type": "three"}), "host-b")
        .await
        .unwrap();
    assert!(tasks(&submitter).withdraw_task(t3).await.unwrap());
    assert!(tasks(&owner)
        .claim_tasks(&id, lease.generation)
        .await
        .unwrap()
        .is_empty());
    owner
        .leases()
        .release_lease(&id, lease.generation)
        .await
        .unwrap();
}
