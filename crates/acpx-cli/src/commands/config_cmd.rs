//! `config show`: the resolved settings, where they came from, and the known agents.

use serde_json::{json, Map, Value};

use crate::context::Ctx;
use crate::error::CliResult;
use crate::render::action;

/// `config show`.
pub fn show(ctx: &Ctx) -> CliResult<()> {
    let files: Vec<String> = ctx
        .config
        .files
        .iter()
        .map(|f| f.display().to_string())
        .collect();
    let agents: Map<String, Value> = ctx
        .registry
        .entries()
        .map(|(n, c)| (n.to_owned(), json!(c)))
        .collect();
    if ctx.out.is_json() {
        let mut m = Map::new();
        m.insert("home".into(), json!(ctx.home.to_string_lossy()));
        m.insert("cwd".into(), json!(ctx.cwd.to_string_lossy()));
        m.insert("store".into(), json!(ctx.backend.as_str()));
        if let Some(url) = crate::backends::postgres_url(ctx.config.store_url.as_ref()) {
            // Never with its password.
            m.insert(
                "storeUrl".into(),
                json!(acpx_store_postgres::redact_url(&url)),
            );
        }
        m.insert(
            "format".into(),
            json!(format!("{:?}", ctx.out.format).to_lowercase()),
        );
        m.insert("permissions".into(), json!(ctx.permission.as_str()));
        if let Some(t) = ctx.timeout {
            m.insert("timeout".into(), json!(t.as_secs_f64()));
        }
        m.insert("agent".into(), json!(ctx.agent.command));
        m.insert("configFiles".into(), json!(files));
        m.insert("agents".into(), Value::Object(agents));
        ctx.out.json(&action("config", m));
        return Ok(());
    }
    let o = &ctx.out;
    o.line(&format!("home:          {}", ctx.home.display()));
    o.line(&format!("directory:     {}", ctx.cwd.display()));
    o.line(&format!("store:         {}", ctx.backend.as_str()));
    if let Some(url) = crate::backends::postgres_url(ctx.config.store_url.as_ref()) {
        o.line(&format!(
            "store url:     {}",
            acpx_store_postgres::redact_url(&url)
        ));
    }
    o.line(&format!("permissions:   {}", ctx.permission.as_str()));
    o.line(&format!(
        "timeout:       {}",
        ctx.timeout
            .map(|t| format!("{}s", t.as_secs_f64()))
            .unwrap_or_else(|| "none".into())
    ));
    o.line(&format!(
        "agent:         {} ({})",
        ctx.agent.label(),
        ctx.agent.command
    ));
    o.line(&format!(
        "config files:  {}",
        if files.is_empty() {
            "none".to_owned()
        } else {
            files.join(", ")
        }
    ));
    o.line("agents:");
    for (n, c) in ctx.registry.entries() {
        o.line(&format!("  {n:<14} {c}"));
    }
    Ok(())
}
