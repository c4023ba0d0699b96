//! `config show`: the resolved settings, where they came from, and the known agents;
//! `config init`: a commented template of the global config file.

use serde_json::{json, Map, Value};

use acpx_runtime::config_file::TEMPLATE;

use crate::context::Ctx;
use crate::error::{CliError, CliResult};
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
            m.insert("storeUrl".into(), json!(acpx_stores::redact_url(&url)));
        }
        m.insert(
            "format".into(),
            json!(format!("{:?}", ctx.out.format).to_lowercase()),
        );
        m.insert("permissions".into(), json!(ctx.permission.as_str()));
        if let Some(t) = ctx.timeout {
            m.insert("timeout".into(), json!(t.as_secs_f64()));
        }
        m.insert("requestTimeout".into(), json!(request_timeout(ctx)));
        m.insert("authPolicy".into(), json!(ctx.auth_policy.as_str()));
        // The method ids only: credentials are never shown.
        m.insert(
            "authMethods".into(),
            json!(ctx.config.auth.keys().collect::<Vec<_>>()),
        );
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
        o.line(&format!("store url:     {}", acpx_stores::redact_url(&url)));
    }
    o.line(&format!("permissions:   {}", ctx.permission.as_str()));
    o.line(&format!(
        "timeout:       {}",
        ctx.timeout
            .map(|t| format!("{}s", t.as_secs_f64()))
            .unwrap_or_else(|| "none".into())
    ));
    o.line(&format!("request timeout: {}s", request_timeout(ctx)));
    o.line(&format!(
        "auth:          policy {}; credentials for {}",
        ctx.auth_policy.as_str(),
        if ctx.config.auth.is_empty() {
            "no method".to_owned()
        } else {
            ctx.config
                .auth
                .keys()
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        }
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

/// Seconds every ACP request but the prompt may take: `requestTimeout`, else the default.
fn request_timeout(ctx: &Ctx) -> f64 {
    ctx.config.request_timeout.unwrap_or_else(|| {
        acpx_runtime::RuntimeOptions::default()
            .request_timeout
            .as_secs_f64()
    })
}

/// `config init`.
pub fn init(ctx: &Ctx, force: bool) -> CliResult<()> {
    let path = ctx.home.join("config.json");
    if path.exists() && !force {
        return Err(
            CliError::usage(format!("{} already exists", path.display()))
                .with_detail("CONFIG_EXISTS")
                .with_hint("pass --force to replace it, or edit it"),
        );
    }
    // Private (it may come to hold a store URL with its password), and never written through
    // a link planted at its path unless `--force` (a config kept in a dotfiles repository and
    // linked here is the user's own).
    let mut file = acpx_runtime::ops::transfer::create_file_for_user(&path, force)
        .map_err(|e| CliError::runtime(e.to_string()))?;
    std::io::Write::write_all(&mut file, TEMPLATE.as_bytes())
        .map_err(|e| CliError::runtime(format!("cannot write {}: {e}", path.display())))?;
    if ctx.out.is_json() {
        let mut m = Map::new();
        m.insert("path".into(), json!(path.to_string_lossy()));
        ctx.out.json(&action("config_init", m));
    } else {
        ctx.out.line(&format!("wrote {}", path.display()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_template_loads_without_warnings() {
        let home = tempfile::tempdir().unwrap();
        std::fs::write(home.path().join("config.json"), super::TEMPLATE).unwrap();
        let c = crate::config::Config::load(home.path(), home.path()).unwrap();
        assert!(c.unknown_keys.is_empty(), "{:?}", c.unknown_keys);
        assert_eq!(c.ttl, Some(300));
        assert_eq!(c.queue_max_depth, Some(16));
    }
}
