//! The `acpx` binary's agent registry: the library's ([`acpx_app::agents`]) plus the
//! built-in `demo` agent, which is this very executable.

use std::collections::BTreeMap;
use std::path::Path;

pub use acpx_app::agents::AgentRegistry;

/// The built-in agent that runs the scripted test agent inside this executable.
pub const DEMO_AGENT: &str = "demo";
/// The hidden first argument that makes `acpx` serve the scripted agent on its stdio.
pub const TEST_AGENT_COMMAND: &str = "__test-agent";

/// The registry of this invocation: the built-ins, the config's `agents` (which win), and
/// the `demo` agent: this executable serving the scripted ACP agent of the
/// `acpx_test_agent` crate (hidden command `__test-agent`), with its history kept under
/// `<home>/demo-agent` so that later prompts reattach with `session/load`. It needs no API
/// key and no network, which makes it the agent of the quickstart. A config entry named
/// `demo` still wins.
pub fn registry(configured: &BTreeMap<String, String>, home: &Path) -> AgentRegistry {
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
    AgentRegistry::new(configured).with_default(DEMO_AGENT, command)
}
