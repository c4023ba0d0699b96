//! Open log descriptors stay bounded however many sessions one store appends to.
//! (Its own test binary: it counts this process's open file descriptors.)

use crate::common;

use acpx_model::{Durability, Store};
use common::*;

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

#[tokio::test(flavor = "current_thread")]
async fn cached_writers_are_bounded_and_evicted_ones_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    let store = store(tmp.path());
    let ids: Vec<_> = (0..320).map(|i| id(&format!("s{i:03}"))).collect();
    for i in &ids {
        store.create(&mut record(i, "/r")).await.unwrap();
    }
    let before = open_fds();
    for round in 1..=2u64 {
        for i in &ids {
            let st = append_locked(&store, i, &[event(i, round, "note", 10)], Durability::Flush)
                .await
                .unwrap();
            assert_eq!(st.last_seq, round);
        }
    }
    let grown = open_fds().saturating_sub(before);
    assert!(
        grown <= 300,
        "{grown} descriptors stayed open for 600 sessions"
    );
}
