//! Imports are data, not commands (issue 45, item 1). An archive names an agent command and
//! MCP servers, and an archive can come from anyone: acpx keeps what it names as
//! information and runs none of it until the user says so.
//!
//! An imported session is stored *untrusted* (unless `sessions import --trust`): its log ends
//! with a `session_imported` lifecycle event (`agentCommand`, `mcpServers`: what the archive
//! named) whose fold puts those under `acpx.untrusted_import`, removes the MCP servers, and
//! shows the agent command as [`UNTRUSTED_PREFIX`]` <command>`, a command no agent of the
//! user has, so no scope lookup ever picks the session (it cannot become a scope's current
//! session by its timestamps) and [`crate::Runtime::open_existing`] refuses to start it.
//! [`trust_import`] (`acpx sessions trust`) records `import_trusted`: the session then runs
//! the user's agent (`--agent`, a registry name) or, without one, what the archive named.

use std::sync::Arc;
use std::time::Duration;

use acpx_model::event::{EventContext, LifecycleEventPayload};
use acpx_model::{
    Durability, EventEnvelope, EventPayload, EventSource, EventStream, RecordId, SessionRecord,
    Store, Timestamp,
};
use serde_json::{json, Map, Value};

use super::{OpsError, OpsResult};
use crate::mapping::imports::apply_imported;
pub use crate::mapping::imports::{
    refusal, untrusted_import, UNTRUSTED_IMPORT_KEY, UNTRUSTED_PREFIX,
};
use crate::mapping::{lifecycle, MCP_SERVERS_KEY};
use crate::recorder::{EventDraft, Recorder, DEFAULT_SNAPSHOT_INTERVAL};
use crate::session::load_rolled_forward;

/// Whether an import runs what its archive names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ImportTrust {
    /// Stored as information only (the default): see the module docs.
    #[default]
    Data,
    /// `sessions import --trust`: the archive's agent command and MCP servers are used as
    /// they are.
    Trusted,
}

/// Makes the snapshot of an import untrusted and returns the payload of the
/// `session_imported` event its log must end with ([`imported_event`]). The archive of an
/// untrusted import keeps what the first archive named.
pub(crate) fn untrust(record: &mut SessionRecord) -> Map<String, Value> {
    // An archive of an untrusted import keeps what the first archive named; any other value
    // under the key (an archive may put anything there) counts for nothing, and what the
    // record names is kept as information like any archive's.
    let (command, servers) = untrusted_import(record).unwrap_or_else(|| {
        (
            record.agent_command.clone(),
            record
                .acpx
                .extra
                .get(MCP_SERVERS_KEY)
                .cloned()
                .unwrap_or(Value::Null),
        )
    });
    let mut payload = Map::new();
    payload.insert("agentCommand".into(), json!(command));
    payload.insert("mcpServers".into(), servers);
    apply_imported(record, &payload);
    payload
}

/// The `session_imported` event (seq `seq`) that ends an untrusted import's log.
pub(crate) fn imported_event(
    id: &RecordId,
    acp_session_id: &str,
    seq: u64,
    payload: Map<String, Value>,
) -> EventEnvelope {
    EventEnvelope::new(
        &EventContext {
            acpx_record_id: id,
            acp_session_id,
            request_id: None,
            stream: EventStream::Lifecycle,
            source: EventSource::Runtime,
        },
        seq,
        Timestamp::now(),
        lifecycle_payload(lifecycle::SESSION_IMPORTED, payload),
    )
}

fn lifecycle_payload(phase: &str, extra: Map<String, Value>) -> EventPayload {
    EventPayload::LifecycleEvent(LifecycleEventPayload {
        phase: phase.into(),
        exit_code: None,
        signal: None,
        reason: None,
        extra,
    })
}

/// What [`trust_import`] accepted.
#[derive(Debug, Clone)]
pub struct Trusted {
    /// The session as saved.
    pub record: SessionRecord,
    /// The agent command the archive named.
    pub named_command: String,
    /// The MCP servers the archive named (ACP's array form; `null` for none).
    pub named_mcp_servers: Value,
}

/// Accepts the untrusted import `id` (`acpx sessions trust`): with `agent`, the session runs
/// that agent (the user's) without the archive's MCP servers; without, it runs what the
/// archive named. Records `import_trusted` under the session's writer lock and saves. A
/// session that is not an untrusted import is [`OpsError::Invalid`].
pub async fn trust_import(
    store: Arc<dyn Store>,
    id: &RecordId,
    agent: Option<String>,
) -> OpsResult<Trusted> {
    let writer = Arc::new(store.lock(id, Duration::from_secs(10)).await?);
    let (record, _, _, _) = load_rolled_forward(&*store, id).await?;
    let Some((named_command, named_mcp_servers)) = untrusted_import(&record) else {
        return Err(OpsError::Invalid(format!(
            "session {id} is not an untrusted import: there is nothing to trust"
        )));
    };
    let mut payload = Map::new();
    match &agent {
        Some(command) => {
            payload.insert("agentCommand".into(), json!(command));
            payload.insert("mcpServers".into(), Value::Null);
        }
        None => {
            payload.insert("agentCommand".into(), json!(named_command));
            payload.insert("mcpServers".into(), named_mcp_servers.clone());
        }
    }
    let mut recorder = Recorder::new(
        store.clone(),
        &writer,
        record,
        Durability::Fsync,
        DEFAULT_SNAPSHOT_INTERVAL,
    );
    recorder
        .record(EventDraft::new(
            None,
            EventStream::Lifecycle,
            EventSource::Client,
            lifecycle_payload(lifecycle::IMPORT_TRUSTED, payload),
        ))
        .await?;
    recorder.save_if_dirty().await?;
    Ok(Trusted {
        record: recorder.snapshot().clone(),
        named_command,
        named_mcp_servers,
    })
}
