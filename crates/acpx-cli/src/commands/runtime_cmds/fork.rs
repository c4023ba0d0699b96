//! `sessions fork` (the record bookkeeping is [`acpx_runtime::ops::fork`]'s).

use acpx_runtime::{NewSessionSpec, Runtime};
use serde_json::json;

use super::{
    interrupted_error, open_existing, or_interrupt, owned, report_notices, runtime_error,
    runtime_options, stop_or_shutdown, Interrupts,
};
use crate::cli::ForkArgs;
use crate::commands::select;
use crate::context::Ctx;
use crate::error::{CliError, CliResult};
use crate::render::{action, record_identity};
use crate::runs::{self};
use acpx_runtime::mapping::MCP_SERVERS_KEY;
use acpx_runtime::mcp_servers::McpServers;
use acpx_runtime::ops::fork::{self as fork_ops, ForkMethod, FORKED_FROM_KEY};

/// `sessions fork`: a new session that starts from the parent's conversation. With an agent
/// that advertises `session/fork`, the agent forks its own session (it keeps the context);
/// otherwise the new session gets a fresh ACP session and a copy of the stored conversation
/// (the agent starts without the context, which is said). The parent is never changed, and
/// the new session gets a new record id.
pub async fn fork(ctx: &Ctx, a: ForkArgs) -> CliResult<()> {
    let parent = select(ctx, &a.target).await?;
    if parent.closed {
        return Err(CliError::usage(format!(
            "session {} is closed; fork an open session",
            parent.acpx_record_id
        ))
        .with_hint("`acpx sessions export` and `sessions import --new-id` copy a closed session"));
    }
    let store = ctx.store().await?;
    // The parent's queue owner (if any) finishes its queue and lets go of the session.
    owned::release_owner_of(ctx, &parent.acpx_record_id).await?;
    let out = ctx.out.clone();
    let (_run, _remote) = runs::acquire(&ctx.home, &parent.acpx_record_id, "fork", |_| {
        out.note("[acpx] a prompt is running in this session; waiting for it to finish");
    })
    .await?;
    let runtime = Runtime::new(store.clone(), runtime_options(ctx, None));
    let interrupts = Interrupts::start(None, None, &ctx.out);
    let session = open_existing(ctx, &runtime, &parent.acpx_record_id, &interrupts).await?;
    let parent_now = session.record().await;
    let can_fork = fork_ops::agent_can_fork(session.initialize_response());
    let child = if can_fork {
        // The parent's MCP servers (stored by the attach above), as this agent takes them.
        let servers = parent_now
            .acpx
            .extra
            .get(MCP_SERVERS_KEY)
            .and_then(|v| McpServers::from_stored(v).ok())
            .unwrap_or_else(McpServers::none);
        let (wire, _) = servers.for_agent(
            session
                .initialize_response()
                .get("agentCapabilities")
                .unwrap_or(&serde_json::Value::Null),
        );
        let params = json!({"sessionId": parent_now.acp_session_id, "cwd": parent_now.cwd, "mcpServers": wire});
        let answer = or_interrupt(session.agent_request("session/fork", params), &interrupts).await;
        let shutdown = stop_or_shutdown(session, answer.is_none()).await;
        let answer = match answer {
            None => return Err(interrupted_error()),
            Some(a) => a.map_err(|e| runtime_error(ctx, e))?,
        };
        shutdown.map_err(|e| runtime_error(ctx, e))?;
        let record =
            fork_ops::create_agent_fork_record(&*store, &parent_now, &answer, a.name.clone())
                .await?;
        fork_ops::record_fork(
            store.clone(),
            &record.acpx_record_id,
            &parent_now,
            ForkMethod::AgentFork,
        )
        .await?
    } else {
        session
            .shutdown()
            .await
            .map_err(|e| runtime_error(ctx, e))?;
        ctx.out.warn(
            "the agent does not support session/fork: the new session has a copy of the conversation, \
             but the agent starts it without that context",
        );
        let open = runtime.open_new(NewSessionSpec {
            agent_command: parent_now.agent_command.clone(),
            cwd: std::path::PathBuf::from(&parent_now.cwd),
            name: a.name.clone(),
        });
        let fresh = match or_interrupt(open, &interrupts).await {
            None => return Err(interrupted_error()),
            Some(r) => r.map_err(|e| runtime_error(ctx, e))?,
        };
        report_notices(ctx, fresh.notices());
        let fresh = fresh.shutdown().await.map_err(|e| runtime_error(ctx, e))?;
        fork_ops::record_fork(
            store.clone(),
            &fresh.acpx_record_id,
            &parent_now,
            ForkMethod::Copy,
        )
        .await?
    };
    let method = child.acpx.extra[FORKED_FROM_KEY]["method"].clone();
    if ctx.out.is_json() {
        let mut m = record_identity(&child);
        if let Some(n) = &child.name {
            m.insert("name".into(), json!(n));
        }
        m.insert(
            "parentAcpxRecordId".into(),
            json!(parent_now.acpx_record_id),
        );
        m.insert(
            "parentAcpxSessionId".into(),
            json!(parent_now.acp_session_id),
        );
        m.insert("forkSeq".into(), json!(parent_now.acpx.audit_seq));
        m.insert(
            "forkMessageCount".into(),
            json!(parent_now.thread.messages.len()),
        );
        m.insert("method".into(), method);
        ctx.out.json(&action("session_forked", m));
    } else if ctx.out.is_text() {
        ctx.out.line(&format!(
            "forked {} into {} ({} messages, {})",
            parent_now.acpx_record_id,
            child.acpx_record_id,
            child.thread.messages.len(),
            method.as_str().unwrap_or_default()
        ));
    } else {
        ctx.out.line(child.acpx_record_id.as_str());
    }
    Ok(())
}
