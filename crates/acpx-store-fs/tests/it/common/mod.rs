//! Helpers shared by the integration tests of the file store.
#![allow(dead_code)]

use std::path::Path;

use acpx_model::{
    Durability, EventContext, EventEnvelope, EventLogState, EventPayload, EventSource, EventStream,
    NewSession, RecordId, SessionRecord, Store, StoreResult, Timestamp,
};
use acpx_store_fs::{FsStore, FsStoreOptions};

pub fn id(s: &str) -> RecordId {
    RecordId::parse(s).unwrap()
}

pub fn record(id: &RecordId, cwd: &str) -> SessionRecord {
    SessionRecord::new(
        NewSession {
            acpx_record_id: id.clone(),
            acp_session_id: format!("acp-{id}"),
            agent_session_id: None,
            agent_command: "test-agent --acp".into(),
            cwd: cwd.into(),
            name: None,
        },
        Timestamp::now(),
    )
}

/// A store in a fresh temp dir (the dir must outlive the store).
pub fn store(dir: &Path) -> FsStore {
    FsStore::open(dir).unwrap()
}

/// Opens the store as a process would once its last sweep for a crash's leftovers is older
/// than the sweep interval (10 minutes): this open sweeps.
pub fn store_after_sweep_interval(dir: &Path) -> FsStore {
    let mark = dir.join("sessions/.cleanup");
    if let Ok(f) = std::fs::File::options().write(true).open(&mark) {
        let long_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3_600);
        f.set_modified(long_ago).unwrap();
    }
    FsStore::open(dir).unwrap()
}

pub fn store_with(dir: &Path, max_segment_bytes: u64, max_segments: u32) -> FsStore {
    FsStore::open_with(
        dir,
        FsStoreOptions {
            max_segment_bytes,
            max_segments,
            ..FsStoreOptions::default()
        },
    )
    .unwrap()
}

/// Event `seq` of session `id`, type `t`, about `pad` bytes of payload.
pub fn event(id: &RecordId, seq: u64, t: &str, pad: usize) -> EventEnvelope {
    let ctx = EventContext {
        acpx_record_id: id,
        acp_session_id: "acp-1",
        request_id: Some(if seq.is_multiple_of(2) {
            "req_even"
        } else {
            "req_odd"
        }),
        stream: if t == "lifecycle_event" {
            EventStream::Lifecycle
        } else {
            EventStream::Prompt
        },
        source: EventSource::Runtime,
    };
    EventEnvelope::new(
        &ctx,
        seq,
        Timestamp::now(),
        EventPayload::Unknown {
            event_type: t.into(),
            payload: serde_json::json!({ "n": seq, "pad": "x".repeat(pad) }),
        },
    )
}

pub fn events(
    id: &RecordId,
    seqs: std::ops::RangeInclusive<u64>,
    pad: usize,
) -> Vec<EventEnvelope> {
    seqs.map(|s| event(id, s, "note", pad)).collect()
}

pub fn seqs(events: &[EventEnvelope]) -> Vec<u64> {
    events.iter().map(|e| e.seq).collect()
}

pub fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// Appends under the session's writer lock, taken for this call only (waiting up to the
/// store's lock timeout) and released after it, as any writer that does not hold it must.
pub async fn append_locked(
    s: &FsStore,
    id: &RecordId,
    events: &[EventEnvelope],
    durability: Durability,
) -> StoreResult<EventLogState> {
    let writer = s.lock(id, s.options().lock_timeout).await?;
    s.append(&writer, events, durability).await
}

/// [`append_locked`] through the blocking implementation.
pub fn append_blocking(
    s: &FsStore,
    id: &RecordId,
    events: &[EventEnvelope],
    durability: Durability,
) -> StoreResult<EventLogState> {
    let core = s.blocking();
    let writer = core.lock(id, s.options().lock_timeout)?;
    core.append(&writer, events, durability)
}

/// The names in `<dir>/sessions`, sorted, without the store's own files (listing cache,
/// search index, sweep mark).
pub fn session_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir.join("sessions"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| !n.starts_with(".index") && !n.starts_with(".search") && n != ".cleanup")
        .collect();
    names.sort();
    names
}
