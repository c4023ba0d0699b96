//! `config show`: the resolved settings, where they came from, and the known agents;
//! `config init`: a commented template of the global config file.

use serde_json::{json, Map, Value};

use acpx_app::config_file::TEMPLATE;

use crate::context::Ctx;
use crate::error::{CliError, CliResult};
use crate::render::action;
use acpx_printer::table::Table;

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
    let mut t = Table::new(&["SETTING", "VALUE", "SOURCE"]).shrink(1);
    let mut row = |name: &str, value: String, source: String| {
        t.row(vec![name.to_owned(), value, source]);
    };
    let home_src = source(ctx, &["--home"], Some("ACPX_HOME"), None);
    row("home", ctx.home.display().to_string(), home_src);
    row(
        "directory",
        ctx.cwd.display().to_string(),
        source(ctx, &["--cwd"], None, None),
    );
    let store_src = source(ctx, &["--store"], Some("ACPX_STORE"), Some("store"));
    row("store", ctx.backend.as_str().into(), store_src);
    if let Some(url) = crate::backends::postgres_url(ctx.config.store_url.as_ref()) {
        let src = source(ctx, &[], Some("ACPX_STORE_URL"), Some("storeUrl"));
        row("storeUrl", acpx_stores::redact_url(&url), src);
    }
    let format = format!("{:?}", ctx.out.format).to_lowercase();
    row(
        "format",
        format,
        source(ctx, &["--format"], None, Some("format")),
    );
    let perm_flags = ["--approve-all", "--approve-reads", "--deny-all"];
    let src = source(ctx, &perm_flags, None, Some("defaultPermissions"));
    row("defaultPermissions", ctx.permission.as_str().into(), src);
    let flags = ["--non-interactive-permissions"];
    let src = source(ctx, &flags, None, Some("nonInteractivePermissions"));
    row(
        "nonInteractivePermissions",
        ctx.non_interactive.as_str().into(),
        src,
    );
    let timeout = ctx
        .timeout
        .map_or("none".into(), |t| human_seconds(t.as_secs_f64()));
    row(
        "timeout",
        timeout,
        source(ctx, &["--timeout"], None, Some("timeout")),
    );
    let src = source(ctx, &[], None, Some("requestTimeout"));
    row("requestTimeout", human_seconds(request_timeout(ctx)), src);
    row(
        "ttl",
        human_seconds(ctx.ttl as f64),
        source(ctx, &["--ttl"], None, Some("ttl")),
    );
    let src = source(ctx, &[], None, Some("queueMaxDepth"));
    row("queueMaxDepth", ctx.queue_max_depth.to_string(), src);
    let src = source(ctx, &["--no-owner"], None, Some("noOwner"));
    row("noOwner", ctx.no_owner.to_string(), src);
    let src = source(ctx, &[], None, Some("disableExec"));
    row("disableExec", ctx.config.disable_exec.to_string(), src);
    let src = source(ctx, &["--resume-policy"], None, Some("resumePolicy"));
    row("resumePolicy", ctx.resume_policy.as_str().into(), src);
    let src = source(ctx, &["--auth-policy"], None, Some("authPolicy"));
    row("authPolicy", ctx.auth_policy.as_str().into(), src);
    let methods: Vec<&str> = ctx.config.auth.keys().map(String::as_str).collect();
    let methods = if methods.is_empty() {
        "none".into()
    } else {
        methods.join(", ")
    };
    row("auth", methods, source(ctx, &[], None, Some("auth")));
    let servers = ctx
        .config
        .mcp_servers
        .as_ref()
        .map_or(0, |m| m.as_slice().len());
    let src = source(ctx, &[], None, Some("mcpServers"));
    row("mcpServers", format!("{servers} server(s)"), src);
    let agent = format!("{} ({})", ctx.agent.label(), ctx.agent.command);
    row(
        "agent",
        agent,
        source(ctx, &["--agent"], None, Some("defaultAgent")),
    );
    for line in t.render(acpx_printer::table::stdout_width(), |r, _, c| match r {
        None => o.paint_out(crate::output::Style::Bold, c),
        Some(_) => c.to_owned(),
    }) {
        o.line(&line);
    }
    o.line("");
    o.line(&format!(
        "config files: {}",
        if files.is_empty() {
            "none".to_owned()
        } else {
            files.join(", ")
        }
    ));
    o.line("agents:");
    let mut agents = Table::new(&["NAME", "COMMAND"]);
    for (n, c) in ctx.registry.entries() {
        agents.row(vec![n.to_owned(), c.to_owned()]);
    }
    for line in agents.render(None, |_, _, c| c.to_owned()).iter().skip(1) {
        o.line(&format!("  {line}"));
    }
    Ok(())
}

/// Where a setting came from: a flag (`--x` among the arguments), an environment variable, the
/// last config file that sets `key` (a project file overrides the global one), or the default.
fn source(ctx: &Ctx, flags: &[&str], env: Option<&str>, key: Option<&str>) -> String {
    let args: Vec<String> = std::env::args().skip(1).take_while(|a| a != "--").collect();
    let given = |f: &&&str| {
        args.iter()
            .any(|a| a == **f || a.strip_prefix(**f).is_some_and(|r| r.starts_with('=')))
    };
    if let Some(f) = flags.iter().find(given) {
        return format!("flag {f}");
    }
    if let Some(var) = env.filter(|v| std::env::var_os(v).is_some_and(|x| !x.is_empty())) {
        return format!("env {var}");
    }
    let in_file = |f: &&std::path::PathBuf| {
        std::fs::read_to_string(f)
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .is_some_and(|v| key.is_some_and(|k| v.get(k).is_some()))
    };
    match ctx.config.files.iter().rev().find(in_file) {
        Some(f) => format!("file {}", f.display()),
        None => "default".into(),
    }
}

/// Seconds as people read them: `5 min`, `0.5 s`.
fn human_seconds(s: f64) -> String {
    acpx_runtime::durations::human_secs(s)
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
        let c = crate::config::load(home.path(), home.path()).unwrap();
        assert!(c.unknown_keys.is_empty(), "{:?}", c.unknown_keys);
        assert_eq!(c.ttl, Some(300));
        assert_eq!(c.queue_max_depth, Some(16));
    }
}
