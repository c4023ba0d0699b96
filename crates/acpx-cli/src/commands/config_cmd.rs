//! `config show`: the resolved settings, where they came from, and the known agents;
//! `config init`: a commented template of the global config file.

use serde_json::{json, Map, Value};

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

/// What `config init` writes: every key at its default, explained by the "// key" entry
/// before it (JSON has no comments; the loader skips keys that start with `//`).
const TEMPLATE: &str = r#"{
  "//": "acpx configuration, written by `acpx config init`. Keys starting with // are comments. A project's .acpxrc.json overrides this file; flags override both.",
  "// defaultAgent": "the agent when none is named: a built-in name (`acpx config show` lists them) or one of `agents`",
  "defaultAgent": "codex",
  "// defaultPermissions": "approve-reads (reads and searches allowed, anything else asked on a terminal), approve-all or deny-all",
  "defaultPermissions": "approve-reads",
  "// nonInteractivePermissions": "when a question needs a terminal and there is none: deny (the turn goes on) or fail (exit 5)",
  "nonInteractivePermissions": "deny",
  "// format": "output format: text, json (one JSON value per line) or quiet (the reply only)",
  "format": "text",
  "// store": "storage backend: fs (files under the home) or sqlite (one database)",
  "store": "fs",
  "// timeout": "add \"timeout\": <seconds> to give up on a turn after that long (exit 3); no limit by default",
  "// requestTimeout": "seconds every ACP request but the prompt may take before it is abandoned (default 120)",
  "// ttl": "seconds the session's queue owner keeps its agent warm after the last task; 0 = until the session is closed",
  "ttl": 300,
  "// queueMaxDepth": "the most tasks waiting behind the running one in a session",
  "queueMaxDepth": 16,
  "// noOwner": "true: every command runs the agent in its own process (no queue owner)",
  "noOwner": false,
  "// resumePolicy": "when the agent cannot restore a session: allow-new (continue in a new ACP session, said on stderr) or same-session-only (fail)",
  "resumePolicy": "allow-new",
  "// authPolicy": "when the agent lists auth methods and no credential matches: skip (go on) or fail (exit 1)",
  "authPolicy": "skip",
  "// auth": "add \"auth\": {\"<auth method id>\": \"<credential>\"} to authenticate; ACPX_AUTH_<METHOD_ID> in the environment wins",
  "// agents": "your own agents: \"name\": \"command line\" (or {\"command\": \"…\"}); they override built-in names",
  "agents": {}
}
"#;

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
    std::fs::create_dir_all(&ctx.home)
        .and_then(|_| std::fs::write(&path, TEMPLATE))
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
