//! Sessions made for the lookup tests (`find_follow_prune.rs`, `lookup_one_list.rs`).

use std::path::Path;

use acpx_model::{NewSession, RecordId, SessionRecord, Store, Timestamp};

/// The timestamp `ms` milliseconds after the epoch.
pub fn at(ms: i64) -> Timestamp {
    Timestamp::from_millis(ms).unwrap()
}

/// Creates a session of `agent` in `cwd`, last used at `used` ms.
pub async fn create(
    store: &dyn Store,
    id: &str,
    agent: &str,
    cwd: &Path,
    name: Option<&str>,
    used: i64,
) -> SessionRecord {
    let mut r = SessionRecord::new(
        NewSession {
            acpx_record_id: RecordId::parse(id).unwrap(),
            acp_session_id: format!("acp-{id}"),
            agent_session_id: None,
            agent_command: agent.into(),
            cwd: cwd.to_string_lossy().into_owned(),
            name: name.map(str::to_owned),
        },
        at(used),
    );
    store.create(&mut r).await.unwrap();
    r
}
