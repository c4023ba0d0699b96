//! Every setting with its value as people read it and where it came from (`acpx config
//! show`): a flag among the arguments, an environment variable, the last config file that
//! sets it (a project file overrides the global one), or the default.

use std::path::PathBuf;

use serde_json::{json, Map, Value};

use super::Settings;

/// One setting as shown: its name (the config file's key), its value, and where it came
/// from (`flag --ttl`, `env ACPX_HOME`, `file /path/config.json`, `default`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingRow {
    /// The setting's name (its config key, or `home` / `directory`).
    pub name: &'static str,
    /// Its value, as people read it (`5 min`, `none`, `approve-reads`).
    pub value: String,
    /// Where it came from.
    pub source: String,
}

/// Where one setting can come from: the flags that set it, its environment variable, its
/// config key.
struct Origins<'a> {
    flags: &'a [&'a str],
    env: Option<&'a str>,
    key: Option<&'a str>,
}

const fn from<'a>(flags: &'a [&'a str], env: Option<&'a str>, key: Option<&'a str>) -> Origins<'a> {
    Origins { flags, env, key }
}

impl Settings {
    /// The settings with their sources, in the order `acpx config show` lists them. `args`
    /// are the command line's arguments (without the program name), to find the flags given.
    pub fn rows_with_sources(&self, args: &[String]) -> Vec<SettingRow> {
        let args: Vec<&String> = args.iter().take_while(|a| *a != "--").collect();
        let mut rows = Vec::new();
        let mut row = |name: &'static str, value: String, origins: Origins| {
            let source = source(&self.config.files, &args, &origins);
            rows.push(SettingRow {
                name,
                value,
                source,
            });
        };
        row(
            "home",
            self.home.display().to_string(),
            from(&["--home"], Some("ACPX_HOME"), None),
        );
        row(
            "directory",
            self.cwd.display().to_string(),
            from(&["--cwd"], None, None),
        );
        let store = from(&["--store"], Some("ACPX_STORE"), Some("store"));
        row("store", self.backend.as_str().into(), store);
        if let Some(url) = acpx_stores::postgres_url(self.config.store_url.as_ref()) {
            let origins = from(&[], Some("ACPX_STORE_URL"), Some("storeUrl"));
            row("storeUrl", acpx_stores::redact_url(&url), origins);
        }
        let format = from(&["--format"], None, Some("format"));
        row("format", self.format_name(), format);
        let perm_flags = ["--approve-all", "--approve-reads", "--deny-all"];
        let origins = from(&perm_flags, None, Some("defaultPermissions"));
        row(
            "defaultPermissions",
            self.permission.as_str().into(),
            origins,
        );
        let flags = ["--non-interactive-permissions"];
        let origins = from(&flags, None, Some("nonInteractivePermissions"));
        let value = self.non_interactive.as_str().into();
        row("nonInteractivePermissions", value, origins);
        let timeout = self
            .timeout
            .map_or("none".into(), |t| human_seconds(t.as_secs_f64()));
        row(
            "timeout",
            timeout,
            from(&["--timeout"], None, Some("timeout")),
        );
        let origins = from(&[], None, Some("requestTimeout"));
        row(
            "requestTimeout",
            human_seconds(self.request_timeout()),
            origins,
        );
        let ttl = human_seconds(self.ttl as f64);
        row("ttl", ttl, from(&["--ttl"], None, Some("ttl")));
        let origins = from(&[], None, Some("queueMaxDepth"));
        row("queueMaxDepth", self.queue_max_depth.to_string(), origins);
        let origins = from(&["--no-owner"], None, Some("noOwner"));
        row("noOwner", self.no_owner.to_string(), origins);
        let origins = from(&[], None, Some("disableExec"));
        row("disableExec", self.config.disable_exec.to_string(), origins);
        let origins = from(&["--resume-policy"], None, Some("resumePolicy"));
        row("resumePolicy", self.resume_policy.as_str().into(), origins);
        let origins = from(&["--auth-policy"], None, Some("authPolicy"));
        row("authPolicy", self.auth_policy.as_str().into(), origins);
        let methods: Vec<&str> = self.config.auth.keys().map(String::as_str).collect();
        let methods = if methods.is_empty() {
            "none".into()
        } else {
            methods.join(", ")
        };
        row("auth", methods, from(&[], None, Some("auth")));
        let servers = self
            .config
            .mcp_servers
            .as_ref()
            .map_or(0, |m| m.as_slice().len());
        let origins = from(&[], None, Some("mcpServers"));
        row("mcpServers", format!("{servers} server(s)"), origins);
        let agent = format!("{} ({})", self.agent.label(), self.agent.command);
        let origins = from(&["--agent"], None, Some("defaultAgent"));
        row("agent", agent, origins);
        rows
    }

    /// The settings as the JSON object of `acpx config show --format json` (without
    /// sources; a store URL without its password, auth methods without credentials).
    pub fn to_json(&self) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("home".into(), json!(self.home.to_string_lossy()));
        m.insert("cwd".into(), json!(self.cwd.to_string_lossy()));
        m.insert("store".into(), json!(self.backend.as_str()));
        if let Some(url) = acpx_stores::postgres_url(self.config.store_url.as_ref()) {
            // Never with its password.
            m.insert("storeUrl".into(), json!(acpx_stores::redact_url(&url)));
        }
        m.insert("format".into(), json!(self.format_name()));
        m.insert("permissions".into(), json!(self.permission.as_str()));
        if let Some(t) = self.timeout {
            m.insert("timeout".into(), json!(t.as_secs_f64()));
        }
        m.insert("requestTimeout".into(), json!(self.request_timeout()));
        m.insert("authPolicy".into(), json!(self.auth_policy.as_str()));
        // The method ids only: credentials are never shown.
        m.insert(
            "authMethods".into(),
            json!(self.config.auth.keys().collect::<Vec<_>>()),
        );
        m.insert("agent".into(), json!(self.agent.command));
        let files: Vec<String> = self.config_file_names();
        m.insert("configFiles".into(), json!(files));
        let agents: Map<String, Value> = self
            .registry
            .entries()
            .map(|(n, c)| (n.to_owned(), json!(c)))
            .collect();
        m.insert("agents".into(), Value::Object(agents));
        m
    }

    /// The config files read, as shown.
    pub fn config_file_names(&self) -> Vec<String> {
        self.config
            .files
            .iter()
            .map(|f| f.display().to_string())
            .collect()
    }

    /// The output format's name (`text`, `json`, …).
    fn format_name(&self) -> String {
        format!("{:?}", self.format).to_lowercase()
    }

    /// Seconds every ACP request but the prompt may take: `requestTimeout`, else the default.
    fn request_timeout(&self) -> f64 {
        self.config.request_timeout.unwrap_or_else(|| {
            acpx_runtime::RuntimeOptions::default()
                .request_timeout
                .as_secs_f64()
        })
    }
}

/// Where a setting came from: a flag among `args` (`--x` or `--x=…`), an environment
/// variable, the last of `files` that sets the key, or the default.
fn source(files: &[PathBuf], args: &[&String], origins: &Origins) -> String {
    let given = |f: &&&str| {
        args.iter()
            .any(|a| *a == **f || a.strip_prefix(**f).is_some_and(|r| r.starts_with('=')))
    };
    if let Some(f) = origins.flags.iter().find(given) {
        return format!("flag {f}");
    }
    let set = |v: &&str| std::env::var_os(v).is_some_and(|x| !x.is_empty());
    if let Some(var) = origins.env.filter(set) {
        return format!("env {var}");
    }
    let in_file = |f: &&PathBuf| {
        std::fs::read_to_string(f)
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .is_some_and(|v| origins.key.is_some_and(|k| v.get(k).is_some()))
    };
    match files.iter().rev().find(in_file) {
        Some(f) => format!("file {}", f.display()),
        None => "default".into(),
    }
}

/// Seconds as people read them: `5 min`, `0.5 s`.
fn human_seconds(s: f64) -> String {
    acpx_runtime::durations::human_secs(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flag_wins_over_a_file_and_the_default_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.json");
        std::fs::write(&file, r#"{"ttl": 5}"#).unwrap();
        let files = vec![file.clone()];
        let ttl = from(&["--ttl"], None, Some("ttl"));
        let flag = "--ttl=9".to_owned();
        assert_eq!(source(&files, &[&flag], &ttl), "flag --ttl");
        assert_eq!(
            source(&files, &[], &ttl),
            format!("file {}", file.display())
        );
        let timeout = from(&["--timeout"], None, Some("timeout"));
        assert_eq!(source(&files, &[], &timeout), "default");
    }
}
