//! The built-in agent registry: short names for the commands that start common ACP agents.
//!
//! The command string is what a session records as `agentCommand`, and that string is part of
//! the key sessions are looked up by, so a registry entry must not change between releases
//! without reason.

use std::collections::BTreeMap;

/// The built-in agent that runs the scripted test agent inside this executable.
pub const DEMO_AGENT: &str = "demo";
/// The hidden first argument that makes `acpx` serve the scripted agent on its stdio.
pub const TEST_AGENT_COMMAND: &str = "__test-agent";

/// The agent used when none is named and the config sets no `defaultAgent`.
pub const DEFAULT_AGENT: &str = "codex";

/// `(name, command)` for every built-in agent (Node acpx 0.19 registry, §5).
pub const BUILTIN_AGENTS: &[(&str, &str)] = &[
    ("codex", "npx -y @agentclientprotocol/codex-acp@^1.1.5"),
    (
        "claude",
        "npx -y @agentclientprotocol/claude-agent-acp@^0.76.0",
    ),
    ("gemini", "gemini --acp"),
    ("pi", "npx pi-acp@^0.0.33"),
    ("openclaw", "openclaw acp"),
    ("cursor", "cursor-agent acp"),
    ("copilot", "copilot --acp --stdio"),
    ("antigravity", "agy_acp_server.par"),
    ("devin", "devin acp"),
    ("droid", "droid exec --output-format acp"),
    ("factory-droid", "droid exec --output-format acp"),
    ("factorydroid", "droid exec --output-format acp"),
    ("fast-agent", "uvx fast-agent-mcp acp"),
    ("fx", "fx acp"),
    ("grok-build", "grok agent stdio"),
    ("iflow", "iflow --experimental-acp"),
    ("junie", "junie --acp=true"),
    ("kilocode", "npx -y @kilocode/cli acp"),
    ("kimi", "kimi acp"),
    ("kiro", "kiro-cli-chat acp"),
    ("mcode", "mcode acp"),
    ("mux", "npx -y mux@^0.28.0 acp"),
    ("opencode", "npx -y opencode-ai acp"),
    ("pool", "pool acp"),
    ("qoder", "qodercli --acp"),
    ("qwen", "qwen --acp"),
    ("trae", "traecli acp serve"),
    ("zeroclaw", "zeroclaw acp"),
];

/// The agents known to this invocation: the built-ins, overridden and extended by the config.
#[derive(Debug, Clone)]
pub struct AgentRegistry {
    agents: BTreeMap<String, String>,
}

impl AgentRegistry {
    /// The built-ins plus `extra` (name → command), where `extra` wins on a clash.
    pub fn new(extra: &BTreeMap<String, String>) -> Self {
        let mut agents: BTreeMap<String, String> = BUILTIN_AGENTS
            .iter()
            .map(|(n, c)| ((*n).to_owned(), (*c).to_owned()))
            .collect();
        for (name, command) in extra {
            agents.insert(normalize(name), command.clone());
        }
        AgentRegistry { agents }
    }

    /// Adds the built-in `demo` agent: this very executable serving the scripted ACP agent of
    /// the `acpx_test_agent` crate (hidden command `__test-agent`), with its history kept under
    /// `<home>/demo-agent` so that later prompts reattach with `session/load`. It needs no API
    /// key and no network, which makes it the agent of the quickstart. A config entry named
    /// `demo` still wins.
    pub fn with_demo(mut self, home: &std::path::Path) -> Self {
        if self.agents.contains_key(DEMO_AGENT) {
            return self;
        }
        let exe = std::env::current_exe()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| "acpx".to_owned());
        let state = home.join("demo-agent").display().to_string();
        let command = shell_words::join([
            exe.as_str(),
            TEST_AGENT_COMMAND,
            "--load",
            "--state-dir",
            state.as_str(),
        ]);
        self.agents.insert(DEMO_AGENT.to_owned(), command);
        self
    }

    /// The command of an agent name (trimmed and lower-cased first, as Node acpx does).
    pub fn command(&self, name: &str) -> Option<&str> {
        self.agents.get(&normalize(name)).map(String::as_str)
    }

    /// Whether `word` names an agent.
    pub fn contains(&self, word: &str) -> bool {
        self.command(word).is_some()
    }

    /// The known names, sorted.
    pub fn names(&self) -> Vec<&str> {
        self.agents.keys().map(String::as_str).collect()
    }

    /// The name an agent command is known by, if any (for display).
    pub fn name_of(&self, command: &str) -> Option<&str> {
        self.agents
            .iter()
            .find(|(_, c)| c.as_str() == command)
            .map(|(n, _)| n.as_str())
    }

    /// `name → command` pairs, sorted by name.
    pub fn entries(&self) -> impl Iterator<Item = (&str, &str)> {
        self.agents.iter().map(|(n, c)| (n.as_str(), c.as_str()))
    }
}

fn normalize(name: &str) -> String {
    name.trim().to_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_is_trimmed_and_case_insensitive() {
        let r = AgentRegistry::new(&BTreeMap::new());
        assert_eq!(r.command(" Gemini "), Some("gemini --acp"));
        assert!(r.contains("codex"));
        assert!(!r.contains("nonsense"));
    }

    #[test]
    fn config_overrides_and_extends() {
        let mut extra = BTreeMap::new();
        extra.insert("gemini".to_owned(), "my-gemini --acp".to_owned());
        extra.insert("Mine".to_owned(), "./agent".to_owned());
        let r = AgentRegistry::new(&extra);
        assert_eq!(r.command("gemini"), Some("my-gemini --acp"));
        assert_eq!(r.command("mine"), Some("./agent"));
        assert_eq!(r.name_of("./agent"), Some("mine"));
    }
}
