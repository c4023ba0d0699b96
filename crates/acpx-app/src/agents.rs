//! The agent registry: short names for the command lines that start common ACP agents.
//!
//! The command string is what a session records as `agentCommand`, and that string is part of
//! the key sessions are looked up by ([`acpx_runtime::ops::lookup`]), so a registry entry must not
//! change between releases without reason. [`BUILTIN_AGENTS`] is Node acpx 0.19's registry;
//! an [`AgentRegistry`] adds a program's own entries (the `acpx` binary's come from its
//! config files) on top.
//!
//! ```
//! use std::collections::BTreeMap;
//! use acpx_app::agents::AgentRegistry;
//!
//! let mut mine = BTreeMap::new();
//! mine.insert("local".to_owned(), "./my-agent --acp".to_owned());
//! let registry = AgentRegistry::new(&mine);
//! assert_eq!(registry.command(" Gemini "), Some("gemini --acp"));
//! assert_eq!(registry.name_of("./my-agent --acp"), Some("local"));
//! ```

use std::collections::BTreeMap;

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

/// Agent names and their command lines: the built-ins, overridden and extended by a
/// program's own entries. Names are trimmed and lower-cased, as Node acpx does.
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

    /// Adds `name → command` unless the name is already taken (a program's built-in that
    /// its configuration may override).
    pub fn with_default(mut self, name: &str, command: impl Into<String>) -> Self {
        self.agents
            .entry(normalize(name))
            .or_insert_with(|| command.into());
        self
    }

    /// The command of an agent name (trimmed and lower-cased first).
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

/// The agent a command runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentChoice {
    /// Its command line.
    pub command: String,
    /// Its registry name, when it has one (trimmed and lower-cased).
    pub name: Option<String>,
    /// Whether the user chose it (a name or a command line) rather than the default.
    pub explicit: bool,
}

impl AgentChoice {
    /// How a sentence names it: its registry name, else its command line as the user gave
    /// it (quoted), never the flag.
    pub fn display(&self) -> String {
        match &self.name {
            Some(n) => n.clone(),
            None => format!("`{}`", acpx_runtime::text::printable(&self.command)),
        }
    }

    /// How a command line names it: its registry name, else `--agent <command>`.
    pub fn label(&self) -> String {
        match &self.name {
            Some(n) => n.clone(),
            None => format!("--agent {}", shell_words::quote(&self.command)),
        }
    }
}

/// Why [`AgentRegistry::choose`] found no agent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AgentChoiceError {
    /// Both an agent name and a command line were given.
    #[error("both an agent name ({word}) and --agent {raw:?} were given")]
    Both {
        /// The name.
        word: String,
        /// The command line.
        raw: String,
    },
    /// The command line is blank.
    #[error("--agent needs a command line")]
    EmptyCommand,
    /// The default agent's name is not in the registry.
    #[error("the configured defaultAgent {0:?} is not a known agent")]
    UnknownDefault(String),
}

impl AgentRegistry {
    /// The agent of a command: the name `word` (an unknown name is taken as a command line),
    /// the command line `raw`, or else `default` (a name; [`DEFAULT_AGENT`] when `None`).
    pub fn choose(
        &self,
        word: Option<String>,
        raw: Option<String>,
        default: Option<&str>,
    ) -> Result<AgentChoice, AgentChoiceError> {
        match (word, raw) {
            (Some(word), Some(raw)) => Err(AgentChoiceError::Both { word, raw }),
            (Some(word), None) => Ok(AgentChoice {
                command: self.command(&word).unwrap_or(&word).to_owned(),
                name: Some(normalize(&word)),
                explicit: true,
            }),
            (None, Some(raw)) if raw.trim().is_empty() => Err(AgentChoiceError::EmptyCommand),
            (None, Some(raw)) => Ok(AgentChoice {
                name: self.name_of(&raw).map(str::to_owned),
                command: raw,
                explicit: true,
            }),
            (None, None) => {
                let name = default.unwrap_or(DEFAULT_AGENT);
                let command = self
                    .command(name)
                    .ok_or_else(|| AgentChoiceError::UnknownDefault(name.to_owned()))?;
                Ok(AgentChoice {
                    command: command.to_owned(),
                    name: Some(normalize(name)),
                    explicit: false,
                })
            }
        }
    }
}

impl Default for AgentRegistry {
    /// The built-ins only.
    fn default() -> Self {
        AgentRegistry::new(&BTreeMap::new())
    }
}

fn normalize(name: &str) -> String {
    name.trim().to_lowercase()
}

#[cfg(test)]
mod tests {

    #[test]
    fn choose_takes_a_name_a_command_line_or_the_default() {
        let r = AgentRegistry::default();
        let named = r.choose(Some(" Codex ".into()), None, None).unwrap();
        assert_eq!(named.name.as_deref(), Some("codex"));
        assert!(named.explicit);
        let raw = r
            .choose(None, Some("./my-agent --acp".into()), None)
            .unwrap();
        assert_eq!(raw.label(), "--agent './my-agent --acp'");
        let default = r.choose(None, None, None).unwrap();
        assert_eq!(default.name.as_deref(), Some(DEFAULT_AGENT));
        assert!(!default.explicit);
        assert!(matches!(
            r.choose(Some("codex".into()), Some("x".into()), None),
            Err(AgentChoiceError::Both { .. })
        ));
        assert_eq!(
            r.choose(None, Some("  ".into()), None),
            Err(AgentChoiceError::EmptyCommand)
        );
        assert_eq!(
            r.choose(None, None, Some("nope")),
            Err(AgentChoiceError::UnknownDefault("nope".into()))
        );
    }

    use super::*;

    #[test]
    fn lookup_is_trimmed_and_case_insensitive() {
        let r = AgentRegistry::default();
        assert_eq!(r.command(" Gemini "), Some("gemini --acp"));
        assert!(r.contains("codex"));
        assert!(!r.contains("nonsense"));
        assert!(r.contains(DEFAULT_AGENT));
    }

    #[test]
    fn extra_entries_override_and_extend() {
        let mut extra = BTreeMap::new();
        extra.insert("gemini".to_owned(), "my-gemini --acp".to_owned());
        extra.insert("Mine".to_owned(), "./agent".to_owned());
        let r = AgentRegistry::new(&extra);
        assert_eq!(r.command("gemini"), Some("my-gemini --acp"));
        assert_eq!(r.command("mine"), Some("./agent"));
        assert_eq!(r.name_of("./agent"), Some("mine"));
    }

    #[test]
    fn a_default_entry_never_replaces_a_configured_one() {
        let mut extra = BTreeMap::new();
        extra.insert("demo".to_owned(), "./configured".to_owned());
        let r = AgentRegistry::new(&extra).with_default("demo", "./built-in");
        assert_eq!(r.command("demo"), Some("./configured"));
        let r = AgentRegistry::default().with_default("Demo", "./built-in");
        assert_eq!(r.command("demo"), Some("./built-in"));
    }
}
